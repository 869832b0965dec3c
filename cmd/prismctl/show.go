// This file owns 'prismctl show': a running prismd's operations, ports and
// MAC table, read over its control_listen unix-socket HTTP server (GET
// /v1/ops from package control, GET /v1/status and /v1/macs from the
// daemon), and the Aggregation Manager's operations, trees and nodes (its
// GET /v1/ops, 'show am --coordinator URL').

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prismd/prismd/control"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
)

func init() {
	register("show", "show a running prismd's operations, ports or MAC table (ops|ports|macs), or the AM's operations and trees (am)", runShow)
}

const defaultSocket = "/run/prismd/prismd.sock"

func runShow(args []string) int {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	sock := fs.String("socket", "", "control socket of the prismd (default "+defaultSocket+")")
	ns := fs.String("netns", "", "network namespace of a lab node (pl-<lab>-<node>): use that node's socket in the lab's state directory (--state-dir)")
	stateDir := fs.String("state-dir", deploy.DefaultStateDir, "with --netns: the --state-dir the lab was brought up with")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	all := fs.Bool("all", false, "show am: every operation the AM keeps (default: unfinished ones and the last "+fmt.Sprint(recentFinished)+" finished)")
	job := fs.Int64("job", -1, "show am: only this job's operations and barriers")
	coordinator := fs.String("coordinator", os.Getenv("PRISM_COORDINATOR"), "the AM's runtime channel URL, e.g. http://10.0.0.1:7000 (PRISM_COORDINATOR, as for the ranks): show am reads it; show ops names each stream's rank or switch from it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: prismctl show ops|ports|macs [--socket PATH | --netns NS [--state-dir DIR]] [--json]")
		fmt.Fprintln(fs.Output(), "       prismctl show ops [--socket PATH | --netns NS [--state-dir DIR]] --coordinator URL   (streams named by rank and switch)")
		fmt.Fprintln(fs.Output(), "       prismctl show am --coordinator URL [--job J] [--all] [--json]")
		fs.PrintDefaults()
	}
	// Accept flags before or after the subject.
	var subject string
	rest := args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		subject, rest = rest[0], rest[1:]
	}
	if rc, ok := parseFlags(fs, rest); !ok {
		return rc
	}
	if subject == "" && fs.NArg() > 0 {
		subject = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "prismctl show: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if subject == "am" {
		return showAM(*coordinator, *asJSON, amFilter{job: *job, all: *all})
	}
	if subject != "ops" && subject != "ports" && subject != "macs" {
		if subject == "" {
			fmt.Fprintln(os.Stderr, "prismctl show: what to show? ops, ports, macs or am")
		} else {
			fmt.Fprintf(os.Stderr, "prismctl show: unknown subcommand %q; use ops, ports, macs or am\n", subject)
		}
		fs.Usage()
		return 2
	}
	if *sock != "" && *ns != "" {
		fmt.Fprintln(os.Stderr, "prismctl show: use --socket or --netns, not both")
		return 2
	}
	path := *sock
	if *ns != "" {
		p, err := socketForNetNSIn(*stateDir, *ns)
		if err != nil {
			fmt.Fprintf(os.Stderr, "prismctl show: %v\n", err)
			return 1
		}
		path = p
	}
	if path == "" {
		path = defaultSocket
	}
	endpoint := map[string]string{"ops": "/v1/ops", "ports": "/v1/status", "macs": "/v1/macs"}[subject]
	body, err := getUnix(path, endpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl show: %v\n", err)
		return 1
	}
	if *asJSON {
		os.Stdout.Write(body)
		return 0
	}
	switch subject {
	case "ops":
		var names streamNames
		if *coordinator != "" {
			names = amStreamNames(*coordinator)
		}
		err = printOps(os.Stdout, body, names)
	case "ports":
		err = printPorts(os.Stdout, body)
	case "macs":
		err = printMACs(os.Stdout, body)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl show: %v\n", err)
		return 1
	}
	return 0
}

// showAM prints the AM's operations: each one's state, tree and ranks, and
// every node as the AM last saw it, with what it waits for.
// recentFinished is how many finished operations show am lists by
// default: the AM keeps ended ones for 10 minutes, and a training loop
// leaves thousands (a walkthrough's bench run listed 1790).
const recentFinished = 10

// amFilter is what show am lists of the AM's operations.
type amFilter struct {
	job int64 // -1: every job
	all bool  // every operation, finished ones too
}

// finished says an operation is over: released, failed, or a prepared one
// nobody took (unused: listed among the running ones, it looked stuck).
func finished(o *am.OpStatus) bool {
	return o.State == "released" || o.State == "failed" || o.State == "unused"
}

// apply keeps l's barriers and operations of f.job, every unfinished
// operation and, unless f.all, only the last recentFinished finished ones,
// which it lists after the running ones in the order they ended (the AM
// lists by job, group and seq); it returns how many finished ones it left
// out, failed and the others.
func (f amFilter) apply(l *am.OpList) (released, failed int) {
	if f.job >= 0 {
		bs := l.Barriers[:0]
		for _, b := range l.Barriers {
			if int64(b.Job) == f.job {
				bs = append(bs, b)
			}
		}
		l.Barriers = bs
	}
	// The last recentFinished to end, by the AM's end time: the AM lists
	// by job, group and seq, and seq starts again at 0 with every run of
	// a job, so the last listed were not the last finished (the newest
	// operation hid among 'earlier' ones).
	var ends []int64
	for _, o := range l.Ops {
		if (f.job < 0 || int64(o.Op.Job) == f.job) && finished(&o) {
			ends = append(ends, o.EndedUnixMs)
		}
	}
	slices.Sort(ends)
	cut := int64(math.MinInt64) // finished ops that ended before it are left out
	if !f.all && len(ends) > recentFinished {
		cut = ends[len(ends)-recentFinished]
	}
	kept := 0
	ops := l.Ops[:0]
	for _, o := range l.Ops {
		if f.job >= 0 && int64(o.Op.Job) != f.job {
			continue
		}
		if finished(&o) {
			if o.EndedUnixMs < cut || o.EndedUnixMs == cut && kept >= recentFinished {
				if o.State == "failed" {
					failed++
				} else {
					released++
				}
				continue
			}
			kept++
		}
		ops = append(ops, o)
	}
	// Running ones first, as the AM listed them; then the finished, the
	// one that ended last at the bottom.
	slices.SortStableFunc(ops, func(a, b am.OpStatus) int {
		fa, fb := finished(&a), finished(&b)
		switch {
		case fa != fb:
			if fa {
				return 1
			}
			return -1
		case fa:
			return cmp.Compare(a.EndedUnixMs, b.EndedUnixMs)
		}
		return 0
	})
	l.Ops = ops
	return released, failed
}

func showAM(url string, asJSON bool, f amFilter) int {
	if url == "" {
		fmt.Fprintln(os.Stderr, "prismctl show am: --coordinator URL is required, or PRISM_COORDINATOR (the AM's --listen address, e.g. http://10.0.0.1:7000)")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := am.NewClient(url).OpsLive(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		// The whole request's bound ran out before the client's own
		// retry period: said as bare "context deadline exceeded".
		err = fmt.Errorf("no answer from the AM at %s in 10s (is 'prismctl am' running there, and is it reachable from this namespace? ip netns exec NS runs prismctl in a lab host's)", url)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl show am: %v\n", err)
		return 1
	}
	if asJSON {
		if f.job >= 0 {
			f.all = true // the JSON is for programs: every operation of the job
			f.apply(l)
		}
		if err := json.NewEncoder(os.Stdout).Encode(l); err != nil {
			fmt.Fprintf(os.Stderr, "prismctl show am: %v\n", err)
			return 1
		}
		return 0
	}
	released, failed := f.apply(l)
	printAMOps(os.Stdout, l)
	if released+failed > 0 {
		fmt.Printf("\n(%d earlier finished operations not shown: %d failed, %d released or unused; --all lists them, --job J one job's)\n",
			released+failed, failed, released)
	}
	return 0
}

func printAMOps(w io.Writer, l *am.OpList) {
	if len(l.Ops) == 0 && len(l.Barriers) == 0 {
		fmt.Fprintln(w, "no operations")
		return
	}
	for _, b := range l.Barriers {
		fmt.Fprintf(w, "barrier job %d group %d seq %d  %s of %d ranks  waiting %s\n", b.Job, b.Group, b.Seq, b.Collective, b.Size, b.Waited())
	}
	for i, o := range l.Ops {
		if i > 0 || len(l.Barriers) > 0 {
			fmt.Fprintln(w)
		}
		kind := o.Collective
		if o.Persistent {
			kind = "persistent " + kind
		}
		// "tree TREE, root s1" named the kind where a reader looked for
		// a switch.
		shape := "a tree rooted at " + o.Root
		if o.Tree == "SINGLE" {
			shape = "switch " + o.Root + " alone"
		}
		fmt.Fprintf(w, "op %s  seq %d  %s of %d ranks  %s  on %s\n", o.ID, o.Seq, kind, o.Size, o.State, shape)
		fmt.Fprintf(w, "  ranks that reported (done or failed): %s", am.RankRanges(o.RanksDone))
		if len(o.Forwarders) > 0 {
			fmt.Fprintf(w, "  forwarders: %s", strings.Join(o.Forwarders, " "))
		}
		fmt.Fprintln(w)
		if o.Holding != "" {
			fmt.Fprintf(w, "  furthest behind: %s (the waits from the root lead there: if COMPLETED stops moving, it holds the operation, and other leaves' waits name ranks flow control stopped behind it)\n", o.Holding)
		}
		if d := o.Draining; d != nil {
			fmt.Fprintf(w, "  draining: rank %d failed locally after %d invocations; the ABORT waits for ranks %s to report as many (at most %v more)\n",
				d.Rank, d.Invocations, am.RankRanges(d.Waiting), time.Duration(d.LeftMS)*time.Millisecond)
		}
		if o.Error != nil {
			fmt.Fprintf(w, "  error (%s): %s\n", o.Error.Code, o.Error.Message)
		}
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tROLE\tPARENT\tSTATE\tCOMPLETED\tWAITING FOR (FAILED: WHY)\t")
		for _, n := range o.Nodes {
			parent, waiting := n.Parent, "-"
			if parent == "" {
				parent = "-"
			}
			if n.MissingStream != nil {
				who := n.MissingFromWhom
				if who == "" {
					who = fmt.Sprintf("stream %d", *n.MissingStream)
				}
				at := elementOf(&o, n.MissingFrom)
				switch n.FailCause {
				case "TIMEOUT":
					waiting = fmt.Sprintf("timed out on %s from %s", who, at)
				case "PEER_FAILED":
					waiting = "told FAILED by " + who
				case "LINK_DOWN":
					waiting = fmt.Sprintf("lost its link to %s (its port toward it is down) from %s", who, at)
				default:
					waiting = fmt.Sprintf("%s from %s", who, at)
				}
			}
			if n.LastError != "" {
				waiting += " (" + n.LastError + ")"
			}
			state, completed := n.State, fmt.Sprint(n.CompletedElements)
			if o.Persistent && o.State == "released" && n.State == "ABORTED" {
				// A persistent operation ends with ABORT once every rank
				// reported done (protocol 9.7): not a failure, and the AM
				// never asked how far its invocations went: what the last
				// keepalive COMPLETE said (1.87M of 2M, "waiting for rank
				// 1") read as a job that had not finished.
				state, completed, waiting = "ENDED (freed by every rank: its ABORT is a persistent collective's normal end)", "-", "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", n.Name, n.Role, parent, state, completed, waiting)
		}
		tw.Flush()
	}
}

// elementOf names element e of o's vector as the ranks count it: within
// its invocation for a persistent operation (the AM's diagnosis says it
// so too).
func elementOf(o *am.OpStatus, e uint32) string {
	if l := o.InvocationLen; l > 0 {
		return fmt.Sprintf("element %d of invocation %d (%d in the operation)", e%l, e/l+1, e)
	}
	return fmt.Sprintf("element %d", e)
}

// socketForNetNSIn finds the control socket of the lab node whose namespace
// is ns: <stateDir>/<lab>/<node>.sock with deploy.NetNSName(lab, node) == ns.
func socketForNetNSIn(stateDir, ns string) (string, error) {
	if s, _, _ := labFile(stateDir, ns, ".sock"); s != "" {
		return s, nil
	}
	// The prismd's own command line names its state directory.
	if dir := deploy.RunningStateDir(ns); dir != "" && filepath.Clean(dir) != filepath.Clean(stateDir) {
		return "", fmt.Errorf("no control socket for namespace %q under %s: its prismd runs with state directory %s; pass --state-dir %s", ns, stateDir, dir, dir)
	}
	// The lab's record of the node's prismd: one that exited removed its
	// socket, and 'no socket' sent the user after the state directory.
	if pf, lab, node := labFile(stateDir, ns, ".pid"); pf != "" {
		b, _ := os.ReadFile(pf)
		return "", fmt.Errorf("the prismd of lab %s node %s is not running (pid %s recorded in %s; its log: %s): "+
			"'prismctl lab status --state-dir %s FILE' shows the lab, and 'prismctl lab up --state-dir %s FILE' restarts it",
			lab, node, strings.TrimSpace(string(b)), pf, filepath.Join(filepath.Dir(pf), node+".log"), stateDir, stateDir)
	}
	// A node of a lab that is up but runs no prismd: a host.
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "*"))
	for _, d := range dirs {
		lab := filepath.Base(d)
		socks, _ := filepath.Glob(filepath.Join(d, "*.sock"))
		if len(socks) == 0 {
			continue
		}
		var switches []string
		for _, sk := range socks {
			switches = append(switches, deploy.NetNSName(lab, strings.TrimSuffix(filepath.Base(sk), ".sock")))
		}
		if node := labNode(d, lab, ns); node != "" {
			return "", fmt.Errorf("namespace %q is node %s of lab %s, which runs no prismd (a host): show ops, ports and macs read a switch; "+
				"this lab's switches are in %s", ns, node, lab, strings.Join(switches, ", "))
		}
	}
	return "", fmt.Errorf("no control socket for namespace %q under %s (is the lab up? if it was brought up with --state-dir DIR, pass the same --state-dir; or pass --socket)", ns, stateDir)
}

// labNode returns the node of lab (state directory d) whose namespace is
// ns, as the lab's saved topology lists it, or "".
func labNode(d, lab, ns string) string {
	node, ok := strings.CutPrefix(ns, deploy.NetNSName(lab, ""))
	if !ok || node == "" || deploy.NetNSName(lab, node) != ns {
		return ""
	}
	t, err := deploy.Load(filepath.Join(d, "topology.yaml"))
	if err != nil || t.Nodes[node] == nil {
		return ""
	}
	return node
}

// labFile finds <stateDir>/<lab>/<node><ext> of the lab node whose
// namespace is ns (deploy.NetNSName(lab, node) == ns), or "".
func labFile(stateDir, ns, ext string) (path, lab, node string) {
	files, _ := filepath.Glob(filepath.Join(stateDir, "*", "*"+ext))
	for _, f := range files {
		lab, node = filepath.Base(filepath.Dir(f)), strings.TrimSuffix(filepath.Base(f), ext)
		if deploy.NetNSName(lab, node) == ns {
			return f, lab, node
		}
	}
	return "", "", ""
}

func getUnix(sock, path string) ([]byte, error) {
	c := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}
	resp, err := c.Get("http://prismd" + path)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The socket took the connection (the kernel does, for a
		// process that does not run) and nothing answered.
		return nil, fmt.Errorf("%s: prismd took the connection but did not answer in %v: it is stopped (SIGSTOP, a debugger) or hung; "+
			"'prismctl lab status' or 'ps -o stat -p PID' says which (T: stopped; resume it with kill -CONT PID)", sock, c.Timeout)
	}
	if errors.Is(err, os.ErrPermission) {
		// The socket is there: prismd runs, and this user may not talk
		// to it ("is prismd running?" sent a non-root user looking for
		// a dead daemon).
		return nil, fmt.Errorf("%s: %w: the control socket is for root and prismd's group (mode 0660): run prismctl as root (sudo) or as a member of that group", sock, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w (is prismd running with control_listen: %s?)", sock, err, sock)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s: %s not served by this prismd (built without the engine, or older than this prismctl?)", sock, path)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", sock, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// streamNames maps an operation's bindings to their peers as the AM
// planned them ("rank 2 (h3)", "subtree l2"): the switch knows a stream by
// endpoint and MAC only.
type streamNames map[streamKey]string

type streamKey struct {
	job                 uint64
	group, groupGen, op uint16
	opGen               uint32
	kind                string
	stream              uint16
}

// amStreamNames reads the AM's operations; an AM that cannot be read costs
// the names, not the switch's view (a warning says why).
func amStreamNames(url string) streamNames {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := am.NewClient(url)
	c.RetryFor = 3 * time.Second // a switch's view should not wait long for names; 1 s gave up at 5% loss
	l, err := c.Ops(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prismctl show ops: streams are not named: reading the AM: %v\n", err)
		return nil
	}
	return streamNamesOf(l)
}

func streamNamesOf(l *am.OpList) streamNames {
	names := streamNames{}
	for _, o := range l.Ops {
		for _, n := range o.Nodes {
			for _, s := range n.Streams {
				names[streamKey{o.Op.Job, o.Op.Group, o.Op.GroupGen, o.Op.OpID, o.Op.OpGen, s.Kind, s.Stream}] = s.Peer
			}
		}
	}
	return names
}

// waitingStream finds "KIND stream N " in a waiting-for line.
var waitingStream = regexp.MustCompile(`\b(CONTRIBUTOR|PARENT|RESULT_IN|RESULT_OUT) stream (\d+) `)

func printOps(w io.Writer, body []byte, names streamNames) error {
	var r control.OpsResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return err
	}
	if len(r.Ops) == 0 && len(r.Bitmap) == 0 {
		fmt.Fprintf(w, "no operations (%d workers)\n", r.Workers)
		return nil
	}
	defer printBitmapOps(w, &r, len(r.Ops) > 0)
	for i, o := range r.Ops {
		if i > 0 {
			fmt.Fprintln(w)
		}
		who := func(kind string, st uint16) string {
			if n := names[streamKey{o.Job, o.Group, o.GroupGen, o.Op, o.OpGen, kind, st}]; n != "" {
				return n
			}
			return "-"
		}
		// "op J-G-GG-O-OG" as the ranks and show am print it, so one can be
		// found in the other.
		fmt.Fprintf(w, "op %d-%d-%d-%d-%d  job %d group %d/%d op %d/%d  %s %s  %s  worker %d\n", o.Job, o.Group, o.GroupGen, o.Op, o.OpGen,
			o.Job, o.Group, o.GroupGen, o.Op, o.OpGen, o.Role, o.Collective, o.State, o.Worker)
		fmt.Fprintf(w, "  tuple %s  vector %d  window %d  frontier %d  handed on %d  active %dms\n",
			o.Tuple, o.VectorLen, o.Window, o.Frontier, o.Emitted, o.ActiveMs)
		if o.ExpiresInMs > 0 {
			waits := map[string]string{"STAGED": "staged %v ago, awaiting COMMIT or ABORT", "COMPLETE": "complete for %v, awaiting RELEASE",
				"FAILED": "failed %v ago, awaiting ABORT", "ACTIVE": "resting for %v (persistent: no DATA, no CONTROL)"}[o.State]
			if waits == "" {
				waits = strings.ToLower(o.State) + " for %v"
			}
			fmt.Fprintf(w, "  "+waits+"; the node retires it as abandoned by its AM in %v\n",
				time.Duration(o.StateMs)*time.Millisecond, time.Duration(o.ExpiresInMs)*time.Millisecond)
		}
		if o.Inexact {
			fmt.Fprintln(w, "  ACCUMULATION_INEXACT")
		}
		switch {
		case o.Error != "" && o.FailCause != "":
			fmt.Fprintf(w, "  error (%s): %s\n", o.FailCause, o.Error)
		case o.Error != "":
			fmt.Fprintf(w, "  error: %s\n", o.Error)
		}
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		named := names != nil
		col := func(kind string, st uint16) string {
			if !named {
				return ""
			}
			return who(kind, st) + "\t"
		}
		head := "  IN\tSTREAM\t"
		if named {
			head += "FROM\t"
		}
		fmt.Fprintln(tw, head+"PEER EP\tPORT\tMAC\tCOMMITTED\tHOLES\tCREDITS(FRAMES/BYTES)\tIDLE\t")
		for _, s := range o.Inbound {
			holes := make([]string, 0, len(s.Holes))
			for _, h := range s.Holes {
				holes = append(holes, fmt.Sprintf("[%d,%d)", h.Start, h.End))
			}
			hs := strings.Join(holes, " ")
			if hs == "" {
				hs = "-"
			}
			done := ""
			if s.Done {
				done = " done"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s%d\t%d\t%s\t%d%s\t%s\t%d/%d\t%dms\t\n", s.Kind, s.Stream, col(s.Kind, s.Stream), s.PeerEP, s.Port, s.PeerMAC,
				s.Committed, done, hs, s.IntervalCredits, s.ByteCredits, s.IdleMs)
		}
		tw.Flush()
		if len(o.Outbound) > 0 {
			tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			head := "  OUT\tSTREAM\t"
			if named {
				head += "TO\t"
			}
			fmt.Fprintln(tw, head+"PEER EP\tPORT\tMAC\tACKED\tUNACKED\tCREDITS(FRAMES/BYTES)\tRETX\t")
			for _, s := range o.Outbound {
				fmt.Fprintf(tw, "  %s\t%d\t%s%d\t%d\t%s\t%d\t%d frames [%d,%d)\t%d/%d\t%d\t\n", s.Kind, s.Stream, col(s.Kind, s.Stream), s.PeerEP, s.Port,
					s.PeerMAC, s.PeerCommitted, s.UnackedFrames, s.UnackedFrom, s.UnackedTo, s.IntervalCredits, s.ByteCredits, s.Retransmits)
			}
			tw.Flush()
		}
		for _, wf := range o.WaitingFor {
			// "CONTRIBUTOR stream 3 (endpoint ..." -> "CONTRIBUTOR stream 3 = rank 1 (h2) (endpoint ...".
			if m := waitingStream.FindStringSubmatchIndex(wf); named && m != nil {
				st, _ := strconv.Atoi(wf[m[4]:m[5]])
				if n := who(wf[m[2]:m[3]], uint16(st)); n != "-" {
					wf = wf[:m[5]] + " = " + n + wf[m[5]:]
				}
			}
			fmt.Fprintf(w, "  waiting for %s\n", wf)
		}
	}
	return nil
}

// printBitmapOps prints the BITMAP contexts: identity, A-BM (shortened),
// boundary set, open aggregations and what they wait for, and the last
// PARTIALs with exactly the endpoints they missed (at a domain boundary the
// frames above only know the block, docs/protocol.md 8.10).
func printBitmapOps(w io.Writer, r *control.OpsResponse, sep bool) {
	short := func(s string) string {
		if len(s) > 96 {
			return s[:96] + "..." + s[strings.LastIndexByte(s, '}'):]
		}
		return s
	}
	for _, sn := range r.Bitmap {
		for _, c := range sn.Ctxs {
			if sep {
				fmt.Fprintln(w)
			}
			sep = true
			fmt.Fprintf(w, "bitmap job %d group %d/%d op %d/%d  %s  %s  tenant %d  worker %d\n", c.Job, c.Group, c.GroupGen, c.Op, c.OpGen,
				c.Role, c.State, c.Tenant, sn.Worker)
			if c.ABM != "" {
				fmt.Fprintf(w, "  A-BM %s\n", short(c.ABM))
			}
			if c.Boundary != "" {
				fmt.Fprintf(w, "  boundary %s (domain boundary: sends up this set instead of its A-BM)\n", c.Boundary)
			}
			st := c.Stats
			fmt.Fprintf(w, "  merged %d  completed %d  partials %d  duplicates %d  forwarded %d  copies %d  drops %d\n",
				st.Merged, st.Completed, st.Partials, st.Duplicates, st.Forwarded, st.Copies, st.Drops)
			for _, sl := range c.Slots {
				fmt.Fprintf(w, "  %s token %d open %dms, waiting for %s\n", sl.Kind, sl.Token, sl.AgeMs, sl.WaitingFor)
			}
			for _, p := range c.Partials {
				fmt.Fprintf(w, "  PARTIAL token %d missing %s\n", p.Token, p.Missing)
			}
		}
	}
}

// status mirrors the daemon's GET /v1/status body.
type status struct {
	Version string `json:"version"`
	Ports   []struct {
		Index    int               `json:"index"`
		Name     string            `json:"name"`
		MAC      string            `json:"mac"`
		MTU      int               `json:"mtu"`
		RxFrames uint64            `json:"rx_frames"`
		TxFrames uint64            `json:"tx_frames"`
		Drops    map[string]uint64 `json:"drops"`
		RxPath   string            `json:"rx_path"`
		Switches uint64            `json:"lane_switches"`
		Fault    string            `json:"fault"`
		Link     string            `json:"link"`
		LinkMs   int64             `json:"link_since_unix_ms"`
	} `json:"ports"`
	Frames     map[string]uint64 `json:"frames"`
	MACEntries int               `json:"mac_table_entries"`
}

func printPorts(w io.Writer, body []byte) error {
	var s status
	if err := json.Unmarshal(body, &s); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tMAC\tMTU\tLINK\tRX_FRAMES\tTX_FRAMES\tRX_PATH\tDROPS\t")
	for _, p := range s.Ports {
		var ds []string
		for r, n := range p.Drops {
			ds = append(ds, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(ds)
		d := strings.Join(ds, " ")
		if d == "" {
			d = "-"
		}
		// The receive path of a port that moves its frames by rate, and
		// how often it moved them; "-" for one with a single path.
		path := "-"
		if p.RxPath != "" {
			path = fmt.Sprintf("%s (%d path changes)", p.RxPath, p.Switches)
		}
		// The link as the daemon's watcher saw it, and for how long when
		// it is down: a stalled operation's port is the first suspect.
		link := p.Link
		switch {
		case link == "":
			link = "?" // a prismd older than this field
		case link != "up" && p.LinkMs != 0:
			link += fmt.Sprintf(" (%s)", time.Since(time.UnixMilli(p.LinkMs)).Round(time.Second))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t\n", p.Index, p.Name, p.MAC, p.MTU, link, p.RxFrames, p.TxFrames, path, d)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range s.Ports {
		if p.Fault != "" {
			fmt.Fprintf(w, "port %s impairs its frames on purpose (fault: in its config): %s\n", p.Name, p.Fault)
		}
	}
	return nil
}

// macs mirrors the daemon's GET /v1/macs body (cmd/prismd MACsResponse).
type macs struct {
	AgingSeconds int `json:"aging_seconds"`
	Learned      int `json:"learned"`
	Local        int `json:"local"`
	Entries      []struct {
		MAC        string `json:"mac"`
		Port       string `json:"port"`
		PortIndex  int    `json:"port_index"`
		AgeSeconds int    `json:"age_seconds"`
		Local      bool   `json:"local"`
	} `json:"entries"`
}

// printMACs prints the MAC table sorted by port (the node MAC last), local
// MACs first within a port, then by MAC, and the entry counts.
func printMACs(w io.Writer, body []byte) error {
	var m macs
	if err := json.Unmarshal(body, &m); err != nil {
		return err
	}
	if m.Entries == nil {
		return errors.New("unexpected /v1/macs body: no entries list")
	}
	e := m.Entries
	sort.SliceStable(e, func(i, j int) bool {
		// uint: the node MAC's index -1 sorts after every port.
		if pi, pj := uint(e[i].PortIndex), uint(e[j].PortIndex); pi != pj {
			return pi < pj
		}
		if e[i].Local != e[j].Local {
			return e[i].Local
		}
		return e[i].MAC < e[j].MAC // lower-case hex of equal length: text order is byte order
	})
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MAC\tPORT\tAGE\tTYPE\t")
	for _, x := range e {
		port, age, typ := x.Port, fmt.Sprintf("%ds", x.AgeSeconds), "learned"
		if x.PortIndex < 0 {
			port = "(node)"
		}
		if x.Local {
			age, typ = "-", "local"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", x.MAC, port, age, typ)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d learned, %d local MAC table entries (aging %ds)\n", m.Learned, m.Local, m.AgingSeconds)
	return nil
}

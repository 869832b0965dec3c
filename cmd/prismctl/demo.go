// This file owns `prismctl demo`: a guided run over a throw-away lab. The
// demo is a list of steps (demoSteps) so later ones (collectives) slot in
// without touching the lab plumbing; the lab is always torn down at the end,
// on error and on Ctrl-C.

package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prismd/prismd/deploy"
)

func init() {
	register("demo", "bring up the spine-leaf lab, ping through prismd, run verified collectives, tear down", runDemo)
}

// demo is the state the steps share.
type demo struct {
	ctx  context.Context
	out  io.Writer
	topo *deploy.Topology
	lab  *deploy.Lab
	opts *deploy.Options
	// cleanups run (last first) before the lab is torn down: AM, ranks.
	cleanups []func()
	coll     *demoColl // collectives state (demo_collectives.go)
	count    int       // elements per rank of the collectives
}

// demoStep is one stage of the demo. A step that fails stops the demo.
type demoStep struct {
	name string
	run  func(d *demo) error
}

// demoSteps run in order after the lab is up; teardown is not a step, it
// always happens.
var demoSteps = []demoStep{
	{"ping every host from every host through prismd", demoPingMatrix},
	{"per-port counters from each prismd's /metrics", demoCounters},
	{"start the Aggregation Manager on h1 and one rank on every host", demoStartRanks},
	{"ALLREDUCE of FP32 (1M default) with KULISCH_FIXED, verified bit for bit", demoAllReduceKulisch},
	{"REDUCE of FP32 to h2 with KULISCH_FIXED, verified bit for bit", demoReduceKulisch},
	{"ALLREDUCE of FP32 with FP32_ARRIVAL, checked against the error bound; REDUCE to h3 with FP32_ARRIVAL, verified bit for bit", demoAllReduceArrival},
	{"small ALLREDUCEs: ordinary, repeated (kept persistent by the Comm) and persistent, verified bit for bit", demoPersistent},
}

func runDemo(args []string) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	topoName := fs.String("topology", "spine-leaf", "shipped topology name or topology file; the lab is renamed demoXXXX (4 random hex digits, said in the first line) "+
		"so that a demo never collides with a running lab of that name")
	prismd := fs.String("prismd", "", "prismd binary (default: $PRISMD_BIN, next to prismctl, then $PATH)")
	stateDir := fs.String("state-dir", deploy.DefaultStateDir, "parent of the lab's state directory")
	count := fs.Int("count", demoVector, "elements per rank of the collective steps (1M: 1048576)")
	keep := fs.Bool("keep", false, "leave the lab up at the end (prismctl lab down to remove it)")
	if rc, ok := parseFlags(fs, args); !ok {
		return rc
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "prismctl demo: needs root (it builds network namespaces)")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *count < 1 || *count > 1<<26 {
		fmt.Fprintf(os.Stderr, "prismctl demo: --count %d: use 1..%d\n", *count, 1<<26)
		return 2
	}
	// Absolute, so the lab down command --keep prints works from anywhere.
	if abs, err := filepath.Abs(*stateDir); err == nil {
		*stateDir = abs
	}
	d := &demo{ctx: ctx, out: os.Stdout, count: *count}
	if err := d.run(*topoName, &deploy.Options{Prismd: *prismd, StateDir: *stateDir, Log: os.Stderr}, *keep); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "prismctl demo: interrupted; the lab was torn down:", err)
			return 130
		}
		fmt.Fprintln(os.Stderr, "prismctl demo: FAILED:", err)
		return 1
	}
	fmt.Fprintln(d.out, "demo: PASS")
	return 0
}

func (d *demo) run(topoName string, opts *deploy.Options, keep bool) (err error) {
	t, err := deploy.Load(topoName)
	if err != nil {
		return err
	}
	// A unique name, so the demo never collides with a lab the user has up
	// (MACs follow the name; every tool derives them the same way).
	var b [2]byte
	rand.Read(b[:])
	name := "demo" + hex.EncodeToString(b[:])
	nodes := make([]deploy.Node, 0, len(t.Nodes))
	for _, n := range t.NodeNames() {
		nodes = append(nodes, *t.Nodes[n])
	}
	if d.topo, err = deploy.Build(name, t.MTU, nodes, t.Links); err != nil {
		return err
	}
	d.opts = opts
	fmt.Fprintln(d.out, demoHeader(name, topoName, t.Name, d.topo))
	start := time.Now()
	d.lab, err = deploy.Up(d.ctx, d.topo, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   lab up in %v\n", time.Since(start).Round(time.Millisecond))
	defer func() {
		// The AM and the ranks are this process's; they go first, also
		// with --keep (the lab outlives us, they would not).
		for i := len(d.cleanups) - 1; i >= 0; i-- {
			d.cleanups[i]()
		}
		if keep && err == nil {
			fmt.Fprintf(d.out, "== lab %s left up; remove it with: %s\n", name, labCommand(selfPath(), opts.StateDir, "down", d.lab.TopologyFile()))
			return
		}
		fmt.Fprintf(d.out, "== tearing down lab %s\n", name)
		if derr := d.lab.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	// Every step runs and reports PASS or FAIL; a failed step does not stop
	// the later ones (a step that needs an earlier one says so), only an
	// interrupt does. The demo fails if any step failed.
	var failed []string
	for i, s := range demoSteps {
		if err := d.ctx.Err(); err != nil {
			return errors.Join(append([]error{fmt.Errorf("interrupted before step %d: %w", i+1, err)}, stepErrs(failed)...)...)
		}
		fmt.Fprintf(d.out, "== step %d/%d: %s\n", i+1, len(demoSteps), s.name)
		start := time.Now()
		if err := s.run(d); err != nil {
			fmt.Fprintf(d.out, "   FAIL after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
			failed = append(failed, fmt.Sprintf("step %d (%s): %v", i+1, s.name, err))
			continue
		}
		fmt.Fprintf(d.out, "   PASS in %v\n", time.Since(start).Round(time.Millisecond))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d steps failed:\n  %s", len(failed), len(demoSteps), strings.Join(failed, "\n  "))
	}
	return nil
}

// demoHeader is the demo's first line. The lab runs under its own name,
// which is said up front: a user who gave --topology would otherwise look
// for namespaces named after their file's lab.
func demoHeader(name, topoArg, origName string, t *deploy.Topology) string {
	from := origName
	if topoArg != origName {
		from = origName + " from " + topoArg
	}
	return fmt.Sprintf("== lab %s (%s, renamed so it cannot collide with a running lab): %d hosts, %d switches, %d links", name, from,
		len(t.Hosts()), len(t.NodesOf(deploy.KindPrismd))+len(t.NodesOf(deploy.KindBridge)), len(t.Links))
}

func stepErrs(failed []string) []error {
	errs := make([]error, len(failed))
	for i, f := range failed {
		errs[i] = errors.New(f)
	}
	return errs
}

// demoPingMatrix pings every host's address from every other host (two
// echoes, one second timeout each) and prints a matrix.
func demoPingMatrix(d *demo) error {
	var hosts []string
	for _, h := range d.topo.Hosts() {
		if d.topo.Nodes[h].IPv4.IsValid() {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) < 2 {
		return errors.New("fewer than two hosts with an ipv4 address")
	}
	// ping(8) when installed, as an operator would run it; else the same
	// two echoes from deploy's own ICMP socket.
	_, perr := exec.LookPath("ping")
	havePing := perr == nil
	type pair struct{ from, to string }
	res := map[pair]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// One goroutine per source: its pings run one after another, the
	// sources in parallel, so the matrix takes about (hosts-1) pings.
	for _, from := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, to := range hosts {
				if to == from || d.ctx.Err() != nil {
					continue
				}
				addr := d.topo.Nodes[to].IPv4.Addr()
				var err error
				if havePing {
					var out []byte
					out, err = d.lab.Exec(from, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-q", addr.String()).CombinedOutput()
					if err != nil {
						err = fmt.Errorf("%s -> %s (%s): %v: %s", from, to, addr, err, lastLine(out))
					}
				} else if err = d.lab.Ping(d.ctx, from, addr, 2, time.Second); err != nil {
					err = fmt.Errorf("%s -> %s (%s): %w", from, to, addr, err)
				}
				mu.Lock()
				res[pair{from, to}] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := d.ctx.Err(); err != nil {
		return err
	}
	w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "   from\\to\t")
	for _, to := range hosts {
		fmt.Fprintf(w, "%s\t", to)
	}
	fmt.Fprintln(w)
	var fails []string
	for _, from := range hosts {
		fmt.Fprintf(w, "   %s\t", from)
		for _, to := range hosts {
			switch err := res[pair{from, to}]; {
			case from == to:
				fmt.Fprint(w, "-\t")
			case err != nil:
				fmt.Fprint(w, "FAIL\t")
				fails = append(fails, err.Error())
			default:
				fmt.Fprint(w, "ok\t")
			}
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	if len(fails) > 0 {
		return fmt.Errorf("%d of %d pairs failed:\n  %s", len(fails), len(hosts)*(len(hosts)-1), strings.Join(fails, "\n  "))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// demoCounters scrapes every prismd's /metrics inside its namespace and
// prints, per switch and port, every sample that carries a port label.
func demoCounters(d *demo) error {
	for _, sw := range d.topo.NodesOf(deploy.KindPrismd) {
		ctx, cancel := context.WithTimeout(d.ctx, 5*time.Second)
		text, err := d.lab.Metrics(ctx, sw)
		cancel()
		if err != nil {
			return err
		}
		ports := deploy.Ports(d.topo, sw)
		byPort, cols := portTable(text)
		if len(cols) == 0 {
			fmt.Fprintf(d.out, "   %s: no per-port samples in /metrics (%d bytes)\n", sw, len(text))
			continue
		}
		names := make([]string, 0, len(cols))
		for c := range cols {
			names = append(names, c)
		}
		sort.Strings(names)
		w := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(w, "   %s port\t", sw)
		for _, c := range names {
			fmt.Fprintf(w, "%s\t", shortMetric(c))
		}
		fmt.Fprintln(w)
		// Configured ports first in port order, then any other label value.
		seen := map[string]bool{}
		order := []string{}
		for _, p := range ports {
			if byPort[p] != nil {
				order = append(order, p)
				seen[p] = true
			}
		}
		var extra []string
		for p := range byPort {
			if !seen[p] {
				extra = append(extra, p)
			}
		}
		sort.Strings(extra)
		for _, p := range append(order, extra...) {
			fmt.Fprintf(w, "   %s\t", p)
			for _, c := range names {
				v, ok := byPort[p][c]
				if !ok {
					fmt.Fprint(w, "-\t")
					continue
				}
				fmt.Fprintf(w, "%s\t", strconv.FormatFloat(v, 'f', -1, 64))
			}
			fmt.Fprintln(w)
		}
		w.Flush()
	}
	return nil
}

// portTable reads the samples of an exposition that carry a port label:
// per port, per metric name, the sum of its series (a counter with more
// labels than port, drops by reason or fault drops by direction, is the
// port's total: the last series alone was shown as it), and the names.
func portTable(text string) (map[string]map[string]float64, map[string]bool) {
	byPort := map[string]map[string]float64{}
	cols := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		name, port, value, ok := portSample(sc.Text())
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		if byPort[port] == nil {
			byPort[port] = map[string]float64{}
		}
		byPort[port][name] += v
		cols[name] = true
	}
	return byPort, cols
}

// portSample parses one exposition line `name{...,port="p1",...} value`.
// The caller sums samples of one name that have other labels besides port.
func portSample(line string) (name, port, value string, ok bool) {
	if line == "" || line[0] == '#' {
		return
	}
	open := strings.IndexByte(line, '{')
	close := strings.LastIndexByte(line, '}')
	if open < 0 || close < open {
		return
	}
	name = line[:open]
	labels := line[open+1 : close]
	i := strings.Index(labels, `port="`)
	if i < 0 || (i > 0 && labels[i-1] != ',') {
		return
	}
	rest := labels[i+len(`port="`):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return
	}
	port = rest[:j]
	fields := strings.Fields(line[close+1:])
	if len(fields) == 0 {
		return
	}
	return name, port, fields[0], true
}

// shortMetric drops what every column shares: the namespace and subsystem
// ("prismd_port_") and the "_total" suffix.
func shortMetric(name string) string {
	name = strings.TrimSuffix(name, "_total")
	for _, p := range []string{"prismd_port_", "prismd_"} {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return name[len(p):]
		}
	}
	return name
}

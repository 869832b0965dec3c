// This file owns `prismctl lab`: building, inspecting and removing labs from
// topology files. All the work is in package deploy; this only parses flags
// and prints.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prismd/prismd/deploy"
)

func init() {
	register("lab", "build and manage network-namespace labs (up|down|exec|status FILE)", runLab)
}

const labUsage = `usage:
  prismctl lab up     [flags] FILE          build the lab and start its prismd switches; on a lab
                                            that is up from the same FILE, start those of its
                                            prismd that are not running (as up started them) and
                                            leave the rest alone
  prismctl lab down   [flags] FILE          remove it (idempotent; also cleans a failed up)
  prismctl lab exec   [flags] FILE NODE [--] CMD [ARGS...]
                                            run a command inside NODE's namespace
  prismctl lab status [flags] FILE          nodes, namespaces, interfaces, MACs, prismd PIDs;
                                            exits 1 unless the lab is up and its prismd run
  prismctl lab list                         the shipped topologies

FILE is a topology file, or the name of a shipped one (%s).
The lab's name (its namespaces pl-<name>-<node>, its MACs) is the file's name: field; to
run a second copy of a topology, copy its file (a shipped one is deploy/lab/<name>.yaml in
the source) and change name: (a-z, 0-9 and -, at most 12 characters).
A lab brought up with --state-dir DIR needs the same --state-dir for down and status: the
PIDs of its prismd are in DIR. Without it, down removes nothing and exits 1 while processes
run in the lab's namespaces.
`

type labFlags struct {
	fs       *flag.FlagSet
	stateDir string
	prismd   string
	timeout  time.Duration
	quiet    bool
}

func newLabFlags(sub string) *labFlags {
	f := &labFlags{fs: flag.NewFlagSet("lab "+sub, flag.ContinueOnError)}
	f.fs.StringVar(&f.stateDir, "state-dir", deploy.DefaultStateDir, "parent of the lab's state directory (configs, logs, PIDs, sockets)")
	f.fs.StringVar(&f.prismd, "prismd", "", "prismd binary (default: $PRISMD_BIN, next to prismctl, then $PATH)")
	f.fs.DurationVar(&f.timeout, "timeout", 15*time.Second, "how long each prismd may take to become ready")
	f.fs.BoolVar(&f.quiet, "q", false, "print only errors")
	f.fs.Usage = func() {
		fmt.Fprintf(f.fs.Output(), labUsage, strings.Join(deploy.EmbeddedNames(), ", "))
		fmt.Fprintln(f.fs.Output(), "\nflags:")
		f.fs.PrintDefaults()
	}
	return f
}

// parse accepts flags before and after FILE (but not after NODE for exec).
// ok false means: stop with exit code rc (help was printed, or a bad flag).
func (f *labFlags) parse(args []string, positional int) (rest []string, rc int, ok bool) {
	if rc, ok := parseFlags(f.fs, args); !ok {
		return nil, rc, false
	}
	rest = f.fs.Args()
	if len(rest) > 0 && positional == 1 && len(rest) > 1 {
		if rc, ok := parseFlags(f.fs, rest[1:]); !ok {
			return nil, rc, false
		}
		rest = append(rest[:1], f.fs.Args()...)
	}
	// Absolute, so the commands lab up prints work from any directory.
	if abs, err := filepath.Abs(f.stateDir); err == nil {
		f.stateDir = abs
	}
	return rest, 0, true
}

func (f *labFlags) options() *deploy.Options {
	o := &deploy.Options{StateDir: f.stateDir, Prismd: f.prismd, ReadyTimeout: f.timeout, Log: os.Stderr}
	if f.quiet {
		o.Log = io.Discard
	}
	return o
}

func runLab(args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(os.Stderr, labUsage, strings.Join(deploy.EmbeddedNames(), ", "))
		return 2
	}
	if isHelp(args[0]) {
		fmt.Printf(labUsage, strings.Join(deploy.EmbeddedNames(), ", "))
		return 0
	}
	sub, args := args[0], args[1:]
	if sub == "list" {
		for _, n := range deploy.EmbeddedNames() {
			fmt.Println(n)
		}
		return 0
	}
	f := newLabFlags(sub)
	var rest []string
	var err error
	rc, ok := 0, true
	switch sub {
	case "up", "down", "status":
		if rest, rc, ok = f.parse(args, 1); ok && len(rest) != 1 {
			err = fmt.Errorf("lab %s wants exactly one FILE, got %d arguments", sub, len(rest))
		}
	case "exec":
		if rest, rc, ok = f.parse(args, 0); ok && len(rest) > 2 && rest[2] == "--" {
			rest = append(rest[:2], rest[3:]...)
		}
		if ok && len(rest) < 3 {
			err = errors.New("lab exec wants FILE NODE [--] CMD [ARGS...]")
		}
	default:
		err = fmt.Errorf("unknown lab subcommand %q; use up, down, exec, status or list", sub)
	}
	if !ok {
		return rc // help printed, or a bad flag with the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 2
	}
	if sub != "status" && os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "prismctl: lab %s needs root (network namespaces, veth pairs)\n", sub)
		return 1
	}
	topo, err := deploy.Load(rest[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	switch sub {
	case "up":
		err = labUp(topo, f, rest[0])
	case "down":
		err = deploy.Down(topo, f.options())
	case "status":
		return labStatus(topo, f, rest[0])
	case "exec":
		return labExec(topo, f, rest[1], rest[2:])
	}
	var nse *deploy.NoStateError
	if errors.As(err, &nse) {
		fmt.Fprint(os.Stderr, noStateReport(nse, sub, rest[0]))
		return 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	return 0
}

// selfPath is how printed commands name prismctl: the running binary's
// absolute path, so they work pasted into a shell where prismctl is not on
// PATH (sudo's secure_path, bin/prismctl run from the repository), and
// inside a lab node, where 'ip netns exec' looks the command up on PATH.
func selfPath() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "prismctl"
}

// labCommand is the command line 'prismctl lab SUB ... FILE ARGS...' as a
// user would type it, with --state-dir unless the state is in the default
// place: lab down finds the prismd to stop only in the lab's state
// directory, so a hint without it would leave them running.
func labCommand(self, stateDir, sub, file string, args ...string) string {
	argv := []string{self, "lab", sub}
	if filepath.Clean(stateDir) != deploy.DefaultStateDir {
		argv = append(argv, "--state-dir", stateDir)
	}
	return shellJoin(append(append(argv, file), args...))
}

// shellJoin joins argv for a POSIX shell, quoting only what needs it, so
// printed commands can be pasted as they are.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
		}) {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// noStateReport explains a lab whose namespaces exist without state under
// the state directory used, and how to reach it: the --state-dir its prismd
// run with when their command lines show it, else the flag to try.
func noStateReport(e *deploy.NoStateError, sub, file string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "prismctl: lab %s: no state under %s, but its namespaces exist", e.Lab, e.Dir)
	switch len(e.Procs) {
	case 0:
		b.WriteString(" and no process runs in them.\n")
	case 1:
		b.WriteString(" and 1 process runs in them:\n")
	default:
		fmt.Fprintf(&b, " and %d processes run in them:\n", len(e.Procs))
	}
	for _, p := range e.Procs {
		fmt.Fprintf(&b, "  %v\n", p)
	}
	if sub == "down" {
		b.WriteString("Nothing was removed: lab down stops only the prismd whose PIDs are in the state directory.\n")
	}
	dir := "DIR"
	if e.StateDir != "" {
		dir = e.StateDir
		fmt.Fprintf(&b, "It was brought up with --state-dir %s; use the same here:\n", dir)
	} else {
		b.WriteString("Was it brought up with --state-dir? Use the same here:\n")
	}
	fmt.Fprintf(&b, "  %s\n", labCommand(selfPath(), dir, sub, file))
	if sub == "down" && e.StateDir == "" {
		b.WriteString("or stop those processes, then run lab down again to remove the namespaces.\n")
	}
	return b.String()
}

func labUp(topo *deploy.Topology, f *labFlags, file string) error {
	if l, ok := topo.Loop(); ok {
		fmt.Fprintf(os.Stderr, "prismctl: warning: link %v - %v closes a loop; Ethernet flooding will circulate\n", l.A, l.B)
	}
	// Ctrl-C during up cancels it, and Up rolls back what it built.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lab, err := deploy.Up(ctx, topo, f.options())
	if errors.Is(err, deploy.ErrExists) {
		// Up from the same topology again: what a lab whose switch was
		// killed or crashed needs. Restart refuses a lab that is not
		// this topology's (ErrExists again).
		var started []string
		if lab, started, err = deploy.Restart(ctx, topo, f.options()); err != nil {
			return err
		}
		if !f.quiet {
			printRestarted(os.Stdout, topo, started)
		}
	}
	if err != nil {
		return err
	}
	if !f.quiet {
		printUpHints(os.Stdout, selfPath(), topo, lab.Dir(), lab.TopologyFile(), f.stateDir, file)
	}
	return nil
}

// printRestarted says what 'lab up' of a lab that was up did: which prismd
// it started again, which it left running.
func printRestarted(w io.Writer, topo *deploy.Topology, started []string) {
	sw := topo.NodesOf(deploy.KindPrismd)
	switch {
	case len(sw) == 0:
		fmt.Fprintf(w, "lab %s was already up (it has no prismd): nothing to start\n", topo.Name)
		return
	case len(started) == 0:
		fmt.Fprintf(w, "lab %s was already up and its %d prismd run: nothing to restart\n", topo.Name, len(sw))
		return
	}
	var left []string
	for _, n := range sw {
		if !slices.Contains(started, n) {
			left = append(left, n)
		}
	}
	fmt.Fprintf(w, "lab %s was already up: restarted prismd on %s", topo.Name, strings.Join(started, ", "))
	if len(left) > 0 {
		fmt.Fprintf(w, "; left running: %s", strings.Join(left, ", "))
	}
	fmt.Fprintln(w)
}

// printUpHints tells how to use and remove the lab that is up (state in
// labDir, its saved topology topoFile), each as a command that works pasted
// as it is.
func printUpHints(w io.Writer, self string, topo *deploy.Topology, labDir, topoFile, stateDir, file string) {
	fmt.Fprintf(w, "lab %s is up: %d nodes, state in %s\n", topo.Name, len(topo.Nodes), labDir)
	fmt.Fprintf(w, "  %s -- CMD\n  %s\n", labCommand(self, stateDir, "exec", file, "NODE"), labCommand(self, stateDir, "down", file))
	if am := amCommand(topo, topoFile, self); am != nil {
		// The lab's MACs follow its name: an AM given another copy of
		// the topology (the embedded one, for a renamed lab) sends
		// CONTROL to MACs no switch has.
		fmt.Fprintf(w, "  Aggregation Manager for collectives, with this lab's topology:\n    %s\n", labCommand(self, stateDir, "exec", file, am...))
	}
}

// amCommand is the node and command ("h1", "--", self, "am", ...) that
// start an AM on the lab's first host with an address, or nil for a lab
// without a prismd switch or addressed host.
func amCommand(topo *deploy.Topology, topoFile, self string) []string {
	if len(topo.NodesOf(deploy.KindPrismd)) == 0 {
		return nil
	}
	for _, h := range topo.Hosts() {
		if a, ok := topo.HostAddr(h); ok && len(topo.Nodes[h].Ifaces) > 0 {
			return []string{h, "--", self, "am", "--topology", topoFile, "--listen", net.JoinHostPort(a.String(), "7000"), "--iface", topo.Nodes[h].Ifaces[0]}
		}
	}
	return nil
}

func labExec(topo *deploy.Topology, f *labFlags, node string, argv []string) int {
	lab, err := deploy.Attach(topo, f.options())
	if err == nil {
		if _, ok := topo.Nodes[node]; !ok {
			err = fmt.Errorf("lab %s has no node %q (nodes: %s)", topo.Name, node, strings.Join(topo.NodeNames(), ", "))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	cmd := lab.Exec(node, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The child gets Ctrl-C from the terminal itself; prismctl just waits.
	signal.Ignore(os.Interrupt)
	// SIGTERM and SIGHUP sent to prismctl (kill PID of a 'lab exec ... &')
	// go on to the command: it ended prismctl alone, and the command (an
	// AM) ran on, reparented, holding its address.
	fwd := make(chan os.Signal, 1)
	signal.Notify(fwd, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(fwd)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case sig := <-fwd:
				_ = cmd.Process.Signal(sig)
			case <-stop:
				return
			}
		}
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()) // as a shell reports it
			}
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	return 0
}

// labStatus prints the lab's nodes and returns the exit code: 0 only when
// every namespace exists and every prismd runs, so scripts can wait on it.
func labStatus(topo *deploy.Topology, f *labFlags, file string) int {
	st, err := deploy.Status(topo, f.options())
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	up, running, switches := 0, 0, 0
	var missing, stopped, frozen []string
	for _, s := range st {
		if s.Present {
			up++
		} else {
			missing = append(missing, s.NetNS)
		}
		if s.Kind == deploy.KindPrismd {
			switches++
			switch {
			case s.Stopped:
				frozen = append(frozen, fmt.Sprintf("%s (pid %d is stopped, by SIGSTOP or a debugger: it forwards nothing until 'kill -CONT %d')", s.Node, s.PID, s.PID))
			case s.Alive:
				running++
			default:
				what := "no pid"
				if s.PID != 0 {
					what = fmt.Sprintf("pid %d not running", s.PID)
				}
				stopped = append(stopped, fmt.Sprintf("%s (%s; log %s)", s.Node, what, filepath.Join(f.stateDir, topo.Name, s.Node+".log")))
			}
		}
	}
	if up == 0 {
		fmt.Printf("lab %s: not up (none of its %d namespaces %s exists)\n", topo.Name, len(st), deploy.NetNSName(topo.Name, "*"))
		return 1
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NODE\tKIND\tNAMESPACE\tIFACE\tMAC\tMTU\tSTATE\tADDRESS\tPRISMD\n")
	for _, s := range st {
		ns := s.NetNS
		if !s.Present {
			ns += " (missing)"
		}
		pd := "-"
		if s.Kind == deploy.KindPrismd {
			switch {
			case s.PID == 0:
				pd = "no pid"
			case s.Stopped:
				pd = fmt.Sprintf("%d stopped", s.PID)
			case s.Alive:
				pd = fmt.Sprintf("%d running", s.PID)
			default:
				pd = fmt.Sprintf("%d dead", s.PID)
			}
		}
		if len(s.Ifaces) == 0 {
			fmt.Fprintf(w, "%s\t%v\t%s\t-\t-\t-\t-\t-\t%s\n", s.Node, s.Kind, ns, pd)
		}
		for i, ifc := range s.Ifaces {
			state := "down"
			switch {
			case ifc.Up:
				state = "up"
			case ifc.AdminUp:
				state = "no-carrier"
			}
			addr := strings.Join(ifc.Addrs, ",")
			if addr == "" {
				addr = "-"
			}
			if i == 0 {
				fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Node, s.Kind, ns, ifc.Name, ifc.MAC, ifc.MTU, state, addr, pd)
			} else {
				fmt.Fprintf(w, "\t\t\t%s\t%s\t%d\t%s\t%s\t\n", ifc.Name, ifc.MAC, ifc.MTU, state, addr)
			}
		}
	}
	w.Flush()
	fmt.Printf("lab %s: %d of %d namespaces present", topo.Name, up, len(st))
	if switches > 0 {
		fmt.Printf(", %d of %d prismd running", running, switches)
	}
	fmt.Println()
	var nse *deploy.NoStateError
	switch err := deploy.CheckState(topo, f.options()); {
	case errors.As(err, &nse):
		// The PRISMD column above read the wrong directory.
		fmt.Fprint(os.Stderr, noStateReport(nse, "status", file))
		return 1
	case err != nil:
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	case len(missing) > 0:
		fmt.Fprintf(os.Stderr, "prismctl: lab %s is not up: %s missing; remove what is left with:\n  %s\n",
			topo.Name, strings.Join(missing, ", "), labCommand(selfPath(), f.stateDir, "down", file))
		return 1
	case running < switches:
		if len(frozen) > 0 {
			fmt.Fprintf(os.Stderr, "prismctl: lab %s: %d of its %d prismd are stopped:\n", topo.Name, len(frozen), switches)
			for _, s := range frozen {
				fmt.Fprintf(os.Stderr, "  %s\n", s)
			}
		}
		if len(stopped) > 0 {
			fmt.Fprint(os.Stderr, stoppedReport(topo.Name, switches, stopped, labCommand(selfPath(), f.stateDir, "up", file)))
		}
		return 1
	}
	return 0
}

// stoppedReport names the lab's prismd that are not running and gives the
// command that starts them again (lab up of a lab that is up restarts its
// stopped prismd and leaves the running ones alone).
func stoppedReport(lab string, switches int, stopped []string, up string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "prismctl: lab %s: %d of its %d prismd are not running:\n", lab, len(stopped), switches)
	for _, s := range stopped {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	fmt.Fprintf(&b, "restart them (the running ones are left alone) with:\n  %s\n", up)
	return b.String()
}

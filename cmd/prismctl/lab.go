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
  prismctl lab up     [flags] FILE          build the lab and start its prismd switches
  prismctl lab down   [flags] FILE          remove it (idempotent; also cleans a failed up)
  prismctl lab exec   [flags] FILE NODE [--] CMD [ARGS...]
                                            run a command inside NODE's namespace
  prismctl lab status [flags] FILE          nodes, namespaces, interfaces, MACs, prismd PIDs
  prismctl lab list                         the shipped topologies

FILE is a topology file, or the name of a shipped one (%s).
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
		fmt.Fprintf(os.Stderr, labUsage, strings.Join(deploy.EmbeddedNames(), ", "))
		fmt.Fprintln(os.Stderr, "\nflags:")
		f.fs.PrintDefaults()
	}
	return f
}

// parse accepts flags before and after FILE (but not after NODE for exec).
func (f *labFlags) parse(args []string, positional int) ([]string, error) {
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	rest := f.fs.Args()
	if len(rest) > 0 && positional == 1 && len(rest) > 1 {
		if err := f.fs.Parse(rest[1:]); err != nil {
			return nil, err
		}
		rest = append(rest[:1], f.fs.Args()...)
	}
	return rest, nil
}

func (f *labFlags) options() *deploy.Options {
	o := &deploy.Options{StateDir: f.stateDir, Prismd: f.prismd, ReadyTimeout: f.timeout, Log: os.Stderr}
	if f.quiet {
		o.Log = io.Discard
	}
	return o
}

func runLab(args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(os.Stderr, labUsage, strings.Join(deploy.EmbeddedNames(), ", "))
		if len(args) == 0 {
			return 2
		}
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
	switch sub {
	case "up", "down", "status":
		rest, err = f.parse(args, 1)
		if err == nil && len(rest) != 1 {
			err = fmt.Errorf("lab %s wants exactly one FILE, got %d arguments", sub, len(rest))
		}
	case "exec":
		rest, err = f.parse(args, 0)
		if err == nil && len(rest) > 2 && rest[2] == "--" {
			rest = append(rest[:2], rest[3:]...)
		}
		if err == nil && len(rest) < 3 {
			err = errors.New("lab exec wants FILE NODE [--] CMD [ARGS...]")
		}
	default:
		err = fmt.Errorf("unknown lab subcommand %q; use up, down, exec, status or list", sub)
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
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
		err = labStatus(topo, f)
	case "exec":
		return labExec(topo, f, rest[1], rest[2:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	return 0
}

func labUp(topo *deploy.Topology, f *labFlags, file string) error {
	if l, ok := topo.Loop(); ok {
		fmt.Fprintf(os.Stderr, "prismctl: warning: link %v - %v closes a loop; Ethernet flooding will circulate\n", l.A, l.B)
	}
	// Ctrl-C during up cancels it, and Up rolls back what it built.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lab, err := deploy.Up(ctx, topo, f.options())
	if err != nil {
		return err
	}
	if !f.quiet {
		fmt.Printf("lab %s is up: %d nodes, state in %s\n", topo.Name, len(topo.Nodes), lab.Dir())
		fmt.Printf("  prismctl lab exec %s NODE -- CMD\n  prismctl lab down %s\n", file, file)
		if cmd := amCommand(topo, lab.TopologyFile()); cmd != "" {
			// The lab's MACs follow its name: an AM given another copy of
			// the topology (the embedded one, for a renamed lab) sends
			// CONTROL to MACs no switch has.
			fmt.Printf("  Aggregation Manager for collectives, with this lab's topology:\n    prismctl lab exec %s %s\n", file, cmd)
		}
	}
	return nil
}

// amCommand is the command that starts an AM on the lab's first host with
// an address, or "" for a lab without a prismd switch or addressed host.
func amCommand(topo *deploy.Topology, topoFile string) string {
	if len(topo.NodesOf(deploy.KindPrismd)) == 0 {
		return ""
	}
	for _, h := range topo.Hosts() {
		if a, ok := topo.HostAddr(h); ok && len(topo.Nodes[h].Ifaces) > 0 {
			return fmt.Sprintf("%s -- prismctl am --topology %s --listen %s --iface %s", h, topoFile,
				net.JoinHostPort(a.String(), "7000"), topo.Nodes[h].Ifaces[0])
		}
	}
	return ""
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
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "prismctl:", err)
		return 1
	}
	return 0
}

func labStatus(topo *deploy.Topology, f *labFlags) error {
	st, err := deploy.Status(topo, f.options())
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NODE\tKIND\tNAMESPACE\tIFACE\tMAC\tMTU\tSTATE\tADDRESS\tPRISMD\n")
	up := 0
	for _, s := range st {
		ns := s.NetNS
		if !s.Present {
			ns += " (missing)"
		} else {
			up++
		}
		pd := "-"
		if s.Kind == deploy.KindPrismd {
			switch {
			case s.PID == 0:
				pd = "no pid"
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
	fmt.Printf("lab %s: %d of %d namespaces present\n", topo.Name, up, len(st))
	return nil
}

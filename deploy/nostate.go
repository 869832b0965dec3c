// This file owns telling a lab that is not up apart from one whose state
// lives elsewhere: a lab's namespaces are named after the lab alone, but the
// PIDs Down stops are found only in the state directory (Options.StateDir)
// it was brought up with. Without that directory Down cannot tell the lab's
// prismd from anything else running in its namespaces.

package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// NSProcess is a process running in one of a lab's namespaces.
type NSProcess struct {
	PID     int
	NetNS   string   // the lab namespace it runs in
	Cmdline []string // its argv as /proc shows it
}

func (p NSProcess) String() string {
	return fmt.Sprintf("pid %d in %s: %s", p.PID, p.NetNS, strings.Join(p.Cmdline, " "))
}

// NoStateError reports a lab whose namespaces exist while the state
// directory has no state for it: it was brought up with another
// Options.StateDir, or its state was removed. Status callers should say so
// (the PIDs they show come from the state directory); Down returns it and
// removes nothing while processes run in the namespaces, since it would
// delete namespaces with processes it cannot identify, and stop none of them.
type NoStateError struct {
	Lab   string
	Dir   string      // where the state was looked for: <StateDir>/<lab>
	NetNS []string    // the lab's namespaces that exist
	Procs []NSProcess // the processes running in them (visible ones: all, as root)
	// StateDir is the Options.StateDir the lab's prismd were started with,
	// read from their --config argument; "" when no process shows one.
	StateDir string
}

func (e *NoStateError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "deploy: lab %s has no state in %s, but its namespaces exist (%s)", e.Lab, e.Dir, strings.Join(e.NetNS, ", "))
	if len(e.Procs) > 0 {
		ps := make([]string, len(e.Procs))
		for i, p := range e.Procs {
			ps[i] = p.String()
		}
		fmt.Fprintf(&b, " with %d processes in them (%s)", len(e.Procs), strings.Join(ps, "; "))
	}
	if e.StateDir != "" {
		fmt.Fprintf(&b, "; its prismd run with state directory %s", e.StateDir)
	} else {
		b.WriteString("; was it brought up with another state directory?")
	}
	return b.String()
}

// CheckState returns a *NoStateError when lab t's namespaces exist but o's
// state directory has no state for it, and nil when it has (or when no
// namespace of the lab exists: the lab is simply not up).
func CheckState(t *Topology, o *Options) error {
	l := newLab(t, o)
	if e := l.checkState(l.presentNS()); e != nil {
		return e
	}
	return nil
}

// presentNS returns the lab's namespaces that exist, in node order.
func (l *Lab) presentNS() []string {
	var r []string
	for _, n := range l.Topo.names {
		if nsExists(l.NetNS(n)) {
			r = append(r, l.NetNS(n))
		}
	}
	return r
}

func (l *Lab) hasState() bool {
	_, err := os.Stat(l.dir)
	return !errors.Is(err, fs.ErrNotExist)
}

func (l *Lab) checkState(present []string) *NoStateError {
	if len(present) == 0 || l.hasState() {
		return nil
	}
	e := &NoStateError{Lab: l.Topo.Name, Dir: l.dir, NetNS: present, Procs: nsProcesses(present)}
	for _, p := range e.Procs {
		if lab, _, dir := labConfig(p.Cmdline); lab == l.Topo.Name {
			e.StateDir = dir
			break
		}
	}
	return e
}

// RunningStateDir returns the Options.StateDir that the lab prismd running
// in namespace ns was started with, read from its --config argument, or ""
// when no lab prismd runs there. It lets a tool that found no state for a
// namespace say where the state is.
func RunningStateDir(ns string) string {
	for _, p := range nsProcesses([]string{ns}) {
		if lab, node, dir := labConfig(p.Cmdline); lab != "" && NetNSName(lab, node) == ns {
			return dir
		}
	}
	return ""
}

// labConfig reads a lab prismd's command line: "--config
// <StateDir>/<lab>/<node>.yaml", as startPrismd passes it. It returns
// empty strings for any other command line.
func labConfig(argv []string) (lab, node, stateDir string) {
	var cfg string
	for i, a := range argv {
		switch {
		case (a == "--config" || a == "-config") && i+1 < len(argv):
			cfg = argv[i+1]
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			cfg = a[strings.IndexByte(a, '=')+1:]
		}
	}
	if !strings.HasSuffix(cfg, ".yaml") || !filepath.IsAbs(cfg) {
		return "", "", ""
	}
	labDir := filepath.Dir(cfg)
	return filepath.Base(labDir), strings.TrimSuffix(filepath.Base(cfg), ".yaml"), filepath.Dir(labDir)
}

// nsProcesses returns the processes whose network namespace is one of the
// named ones: /proc/PID/ns/net and the namespace's bind mount under
// /run/netns are the same nsfs inode. Names that do not exist, and
// processes this one may not inspect, are skipped.
func nsProcesses(names []string) []NSProcess {
	type id struct{ dev, ino uint64 }
	want := map[id]string{}
	for _, n := range names {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(netnsDir, n), &st) == nil {
			want[id{uint64(st.Dev), st.Ino}] = n
		}
	}
	if len(want) == 0 {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var r []NSProcess
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
			continue
		}
		ns, ok := want[id{uint64(st.Dev), st.Ino}]
		if !ok {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		r = append(r, NSProcess{PID: pid, NetNS: ns, Cmdline: strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")})
	}
	return r
}

// This file owns restarting a lab's stopped prismd: a lab that is up, one of
// whose switches was killed or crashed, gets that switch back as Up started
// it (configuration, GOMAXPROCS, log and PID file), without rebuilding the
// namespaces that the running switches and the hosts' processes live in.

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// startFile records how the lab started its prismd: the binary and the
// GOMAXPROCS every switch got, for Restart.
func (l *Lab) startFile() string { return filepath.Join(l.dir, "prismd.env") }

func (l *Lab) writeStart(procs int) error {
	s := fmt.Sprintf("# how this lab started its prismd; 'prismctl lab up' restarts a stopped one the same way\nPRISMD=%s\nGOMAXPROCS=%d\n", l.opts.Prismd, procs)
	return os.WriteFile(l.startFile(), []byte(s), 0o644)
}

// readStart returns what writeStart recorded: "" and 0 for what is not
// there (a lab brought up before the file existed).
func (l *Lab) readStart() (prismd string, procs int) {
	f, err := os.Open(l.startFile())
	if err != nil {
		return "", 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		switch {
		case !ok:
		case k == "PRISMD":
			prismd = v
		case k == "GOMAXPROCS":
			procs, _ = strconv.Atoi(v)
		}
	}
	return prismd, procs
}

// switchProcs is the GOMAXPROCS Up gives each of n prismd:
// Options.SwitchProcs, else GOMAXPROCS from the environment, else the
// machine's share (SwitchProcsFor).
func (l *Lab) switchProcs(n int) int {
	if l.opts.SwitchProcs > 0 {
		return l.opts.SwitchProcs
	}
	if env, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && env > 0 {
		return env
	}
	return SwitchProcsFor(runtime.NumCPU(), n)
}

// runningPID returns the PID of the prismd that runs node's configuration:
// the recorded one, else one running in the node's namespace with the
// node's configuration that the lab did not record (started by hand from
// the lab's files); 0 if none runs.
func (l *Lab) runningPID(node string) int {
	if pid := readPID(l.dir, node); pid > 0 && alive(pid) && l.ours(pid, node) {
		return pid
	}
	for _, p := range nsProcesses([]string{l.NetNS(node)}) {
		if alive(p.PID) && l.ours(p.PID, node) {
			return p.PID
		}
	}
	return 0
}

// Restart starts the prismd of lab t that are not running, as Up started
// them: the configuration file in the state directory, the GOMAXPROCS the
// lab's switches were given, output appended to the node's log, the new PID
// in the node's PID file. Running prismd are left alone; one that runs the
// node's configuration without being recorded (started by hand) counts as
// running, and its PID is recorded. It returns the lab and the nodes whose
// prismd it started, none when every prismd runs.
//
// The lab must be up as t describes it: every namespace present, state in
// the state directory, and the topology saved there equal to t. A lab that
// was brought up from another topology, or is half built, gets ErrExists
// (Down it first); one with no namespace ErrNotUp; one whose state is
// elsewhere a *NoStateError. The binary is Options.Prismd, else the one the
// lab started with, else FindPrismd's; GOMAXPROCS is Options.SwitchProcs,
// else the lab's.
//
// If a started prismd exits or is not ready in time, Restart stops the ones
// it started and returns the error; the rest of the lab is untouched.
func Restart(ctx context.Context, t *Topology, o *Options) (*Lab, []string, error) {
	l := newLab(t, o)
	unlock, err := l.lock()
	if err != nil {
		return nil, nil, err
	}
	defer unlock(false)
	present := l.presentNS()
	if len(present) == 0 {
		return nil, nil, fmt.Errorf("deploy: %w: none of lab %s's namespaces %s exists", ErrNotUp, t.Name, NetNSName(t.Name, "*"))
	}
	if len(present) < len(t.names) {
		var missing []string
		for _, n := range t.names {
			if !nsExists(l.NetNS(n)) {
				missing = append(missing, l.NetNS(n))
			}
		}
		return nil, nil, fmt.Errorf("deploy: %w: namespace %s is present but %s missing (half built or half removed); run 'prismctl lab down' on the lab first",
			ErrExists, present[0], strings.Join(missing, ", "))
	}
	if e := l.checkState(present); e != nil {
		return nil, nil, e
	}
	saved, err := os.ReadFile(l.TopologyFile())
	if err != nil || !bytes.Equal(saved, t.Marshal()) {
		why := "its topology differs from this one (the lab's copy: " + l.TopologyFile() + ")"
		if err != nil {
			why = "its saved topology cannot be read (" + err.Error() + ")"
		}
		return nil, nil, fmt.Errorf("deploy: %w: namespace %s is present and %s; run 'prismctl lab down' on the lab first", ErrExists, present[0], why)
	}
	var stopped []string
	for _, node := range t.NodesOf(KindPrismd) {
		pid := l.runningPID(node)
		if pid == 0 {
			stopped = append(stopped, node)
			continue
		}
		if rec := readPID(l.dir, node); rec != pid {
			l.logf("prismd on %s runs as pid %d, which the lab had not recorded (it had %d); recorded it", node, pid, rec)
			if err := os.WriteFile(pidFile(l.dir, node), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(stopped) == 0 {
		return l, nil, nil
	}
	prismd, procs := l.readStart()
	if l.opts.Prismd == "" {
		if st, err := os.Stat(prismd); prismd != "" && err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			l.opts.Prismd = prismd
		} else if l.opts.Prismd, err = FindPrismd(); err != nil {
			return nil, nil, err
		}
	}
	if l.opts.SwitchProcs > 0 || procs <= 0 {
		procs = l.switchProcs(len(t.NodesOf(KindPrismd)))
	}
	var started []string
	fail := func(err error) (*Lab, []string, error) {
		var errs []error
		for _, node := range started {
			errs = append(errs, l.stop(node))
		}
		if serr := errors.Join(errs...); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the restarted prismd: %w", serr))
		}
		return nil, nil, err
	}
	for _, node := range stopped {
		l.waitExited(readPID(l.dir, node))
		// The dead prismd's socket: waitReady would take it for the new
		// one's (prismd replaces a stale socket itself).
		if err := os.Remove(l.ControlSocket(node)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
		if err := l.startPrismd(node, procs, true); err != nil {
			return fail(err)
		}
		started = append(started, node)
	}
	if err := parallel(len(started), len(started)+1, func(i int) error { return l.waitReady(ctx, started[i]) }); err != nil {
		return fail(err)
	}
	for _, node := range started {
		l.logf("restarted prismd on %s (pid %d, %s, GOMAXPROCS=%d)", node, l.PID(node), l.opts.Prismd, procs)
	}
	return l, started, nil
}

// waitExited waits, at most Options.StopTimeout, until the threads of a
// killed process are gone. A killed Go process's main thread is a zombie
// (alive says no) while its other threads still exit, and until the last
// one has, its files are open: a prismd started meanwhile on the same
// ports finds them claimed by the dying one.
func (l *Lab) waitExited(pid int) {
	if pid <= 0 || alive(pid) {
		return // none recorded, or the PID now names another process
	}
	for end := time.Now().Add(l.opts.StopTimeout); threadsLeft(pid) && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
}

// threadsLeft reports whether a thread of pid has not exited yet.
func threadsLeft(pid int) bool {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, e.Name()))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X' {
			return true
		}
	}
	return false
}

package main

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/netnstest"
)

// TestCarrierLogged: a port whose link loses its carrier (here the veth's
// peer set down, as a cable pulled) is said once when it goes and once
// when it is back, and one down at start is said so at start. The
// dataplane's sockets are not told of a lost carrier: the log said
// nothing, or, on the port's own down, twice (once per socket).
//
// The watcher polls every linkCheckEvery (2 s, kept here), and the outage
// is 1 s, as a tester's: link events must say it. Then the switch's own
// port is set down and up: said as that, not as a lost carrier.
func TestCarrierLogged(t *testing.T) {
	env := netnstest.New(t, "w3l")
	sw, h := env.Namespace("sw"), env.Namespace("h")
	a0, b0 := env.Veth(h, sw)
	a1, b1 := env.Veth(h, sw)
	env.MustExec(h, "ip", "link", "set", a1, "down") // b1 has no carrier at start
	var logs syncBuf
	d, err := startIn(t, env, sw, parseCfg(t, fmt.Sprintf("ports: [{name: %s}, {name: %s}]\n", b0, b1)), &logs)
	if err != nil {
		t.Fatalf("daemon: %v\n%s", err, logs.String())
	}
	const (
		atStart = "port's link is down at start"
		down    = "port's link went down"
		up      = "port's link is up again"
	)
	count := func(what, port string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, what) && strings.Contains(l, "port="+port) {
				n++
			}
		}
		return n
	}
	wait := func(what, port string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); count(what, port) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q for %s:\n%s", what, port, logs.String())
			}
		}
	}
	if count(atStart, b1) != 1 || count(atStart, b0) != 0 {
		t.Fatalf("want one %q, for %s only:\n%s", atStart, b1, logs.String())
	}
	// What the engine is told (a timeout on a port down is LINK_DOWN)
	// and /v1/status shows follows the same events.
	link := func(port string, want dataplane.LinkState) {
		t.Helper()
		got, since := d.dp.LinkState(port)
		for deadline := time.Now().Add(5 * time.Second); got != want && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			got, since = d.dp.LinkState(port)
		}
		if got != want || since.IsZero() {
			t.Fatalf("dataplane link state of %s: %v since %v, want %v", port, got, since, want)
		}
	}
	link(b1, dataplane.LinkNoCarrier)
	link(b0, dataplane.LinkUp)
	env.MustExec(h, "ip", "link", "set", a0, "down")
	wait(down, b0)
	link(b0, dataplane.LinkNoCarrier)
	time.Sleep(1 * time.Second)
	env.MustExec(h, "ip", "link", "set", a0, "up")
	env.MustExec(h, "ip", "link", "set", a1, "up")
	wait(up, b0)
	wait(up, b1)
	time.Sleep(linkCheckEvery + 500*time.Millisecond) // a poll too: nothing more is said
	for _, c := range []struct {
		what, port string
		n          int
	}{{down, b0, 1}, {up, b0, 1}, {up, b1, 1}, {down, b1, 0}, {atStart, b1, 1}, {"link is down", b0, 0}} {
		if got := count(c.what, c.port); got != c.n {
			t.Errorf("%d lines with %q for %s, want %d", got, c.what, c.port, c.n)
		}
	}
	// The switch's own port set down and up again (ip link set down on
	// it): said as that, once each; not as a carrier lost at the moment
	// it came up, and not as up again while it was still down.
	env.MustExec(sw, "ip", "link", "set", b0, "down")
	wait("port was set down", b0)
	link(b0, dataplane.LinkAdminDown)
	time.Sleep(300 * time.Millisecond)
	env.MustExec(sw, "ip", "link", "set", b0, "up")
	env.MustExec(h, "ip", "link", "set", a0, "up")
	for deadline := time.Now().Add(5 * time.Second); count("was set up again: its link is up", b0)+count(up, b0) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no line saying %s is up again after it was set up:\n%s", b0, logs.String())
		}
	}
	for _, c := range []struct {
		what, port string
		n          int
	}{{"port was set down", b0, 1}, {down, b0, 1}, {"link is down", b0, 0}, {"up again: it receives", b0, 0}} {
		if got := count(c.what, c.port); got != c.n {
			t.Errorf("after set down and up: %d lines with %q for %s, want %d", got, c.what, c.port, c.n)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs.String())
	}
}

// TestEnterNetnsSkipsOwnNamespace: the link watcher enters the daemon's
// namespace only when its thread is elsewhere. Under the shipped systemd
// unit (RestrictNamespaces=yes) every setns fails with EPERM, also into
// the thread's own namespace, and the watcher (link lines, reopens, the
// rate-limited drop warnings) was off for good.
func TestEnterNetnsSkipsOwnNamespace(t *testing.T) {
	old := setNetns
	t.Cleanup(func() { setNetns = old })
	setNetns = func(netns.NsHandle) error { return syscall.EPERM } // as seccomp makes it
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	here, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	if err := enterNetns(here); err != nil {
		t.Fatalf("entering the thread's own namespace: %v, want nothing to do", err)
	}
	env := netnstest.New(t, "w3n")
	other, err := netns.GetFromName(env.Namespace("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := enterNetns(other); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("entering another namespace: %v, want the refused setns", err)
	}
}

// Package netnstest builds throwaway network namespaces and veth pairs for
// root integration tests, and removes them in t.Cleanup. Every name carries a
// random per-test id, so parallel tests and leftover state never collide.
//
// API (kept small on purpose):
//
//	env := netnstest.New(t, "pt")        // skips unless root
//	h1 := env.Namespace("h1")            // "pt3fa2-h1"
//	a, b := env.Veth(h1, sw)             // "pt3fa2v0a" in h1, "pt3fa2v0b" in sw, both up
//	env.MustExec(h1, "ip", "addr", "add", "10.0.0.1/24", "dev", a)
//	env.DisableOffloads(h1, a)           // tso/gso/gro/tx-checksumming off
//	env.Do(sw, func() { ... })           // run Go code (open sockets) inside sw
//
// It must not be imported by non-test code.
package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
)

// Env is one test's set of namespaces and links.
type Env struct {
	t     testing.TB
	id    string
	mu    sync.Mutex
	nveth int
}

// New returns an Env whose names start with prefix (at most 6 characters)
// plus 4 random hex digits. It skips the test when not running as root.
func New(t testing.TB, prefix string) *Env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netnstest: needs root (network namespaces and veth pairs); run the tests as root")
	}
	if len(prefix) > 6 {
		t.Fatalf("netnstest: prefix %q longer than 6 characters (interface names are at most 15)", prefix)
	}
	var b [2]byte
	_, _ = rand.Read(b[:])
	return &Env{t: t, id: prefix + hex.EncodeToString(b[:])}
}

// ID is the unique name prefix of this Env.
func (e *Env) ID() string { return e.id }

// Namespace creates a network namespace named ID()+"-"+name with lo up, and
// deletes it (with every interface inside) at cleanup.
func (e *Env) Namespace(name string) string {
	e.t.Helper()
	ns := e.id + "-" + name
	e.MustExec("", "ip", "netns", "add", ns)
	e.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	e.MustExec(ns, "ip", "link", "set", "lo", "up")
	return ns
}

// Veth creates a veth pair, puts the first end in namespace a and the second
// in b ("" keeps an end in the current namespace), brings both up and returns
// their names (at most 15 characters).
func (e *Env) Veth(a, b string) (string, string) {
	e.t.Helper()
	e.mu.Lock()
	n := e.nveth
	e.nveth++
	e.mu.Unlock()
	x, y := fmt.Sprintf("%sv%da", e.id, n), fmt.Sprintf("%sv%db", e.id, n)
	e.MustExec("", "ip", "link", "add", x, "type", "veth", "peer", "name", y)
	e.t.Cleanup(func() { _ = exec.Command("ip", "link", "del", x).Run() }) // no-op once its namespace is gone
	for _, p := range [][2]string{{x, a}, {y, b}} {
		if p[1] != "" {
			e.MustExec("", "ip", "link", "set", p[0], "netns", p[1])
		}
		e.MustExec(p[1], "ip", "link", "set", p[0], "up")
	}
	return x, y
}

// Exec runs a command inside namespace ns ("" for the current one) and
// returns its combined output.
func (e *Env) Exec(ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// MustExec is Exec that fails the test on error.
func (e *Env) MustExec(ns string, args ...string) string {
	e.t.Helper()
	out, err := e.Exec(ns, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// DisableOffloads turns off TSO, GSO, GRO and TX checksumming on iface, so
// frames seen by AF_PACKET are real wire frames (complete checksums, at most
// MTU long) and can be forwarded as they are.
func (e *Env) DisableOffloads(ns, iface string) {
	e.t.Helper()
	e.MustExec(ns, "ethtool", "-K", iface, "tso", "off", "gso", "off", "gro", "off", "tx", "off")
}

// Do runs fn on a locked OS thread switched into namespace ns. Sockets that
// fn opens stay in ns after Do returns.
func (e *Env) Do(ns string, fn func()) {
	e.t.Helper()
	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked: if restoring the namespace failed it
		// must not be reused, and exiting the goroutine with the thread locked
		// makes the runtime discard it.
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			done <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			done <- err
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		e.t.Fatalf("netnstest: enter namespace %s: %v", ns, err)
	}
}

package am

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/internal/netnstest"
	"github.com/prismd/prismd/parser"
)

// connPair opens two PacketConns on the ends of a veth pair in a new
// namespace (closed when the test ends): a is the AM's, b a node's.
func connPair(t *testing.T, prefix string) (env *netnstest.Env, ns string, a, b *PacketConn) {
	env = netnstest.New(t, prefix)
	ns = env.Namespace("x")
	ifa, ifb := env.Veth(ns, ns)
	var err error
	env.Do(ns, func() {
		if a, err = OpenConn(ifa); err != nil {
			return
		}
		b, err = OpenConn(ifb)
	})
	if err != nil {
		if a != nil {
			a.Close()
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return env, ns, a, b
}

// testFrame is a minimal PRISM frame of class from b to a, tagged in its
// last byte.
func testFrame(a, b *PacketConn, class parser.Class, tag byte) []byte {
	f := make([]byte, 60)
	copy(f, a.MAC())
	copy(f[6:], b.MAC())
	f[12], f[13] = 0x88, 0xB5 // parser.EtherType
	f[parser.CWOff], f[parser.CWOff+1] = 0x10, byte(class)
	f[59] = tag
	return f
}

// readAll reads every frame of c into the channel it returns, which is
// closed when c is.
func readAll(c *PacketConn) <-chan []byte {
	got := make(chan []byte, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := c.ReadFrame(buf)
			if err != nil {
				close(got)
				return
			}
			got <- append([]byte(nil), buf[:n]...)
		}
	}()
	return got
}

// TestConnReadsOnlyControl: on a real veth, the AM's socket never sees the
// DATA, RESULT and PROGRESS frames of a rank sharing its interface (the BPF
// filter drops them in the kernel), and still reads every CONTROL frame, in
// order.
func TestConnReadsOnlyControl(t *testing.T) {
	_, _, a, b := connPair(t, "amf")
	frame := func(class parser.Class, tag byte) []byte { return testFrame(a, b, class, tag) }
	done, err := a.Expect()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	got := readAll(a)
	for round := byte(1); round <= 3; round++ {
		for _, c := range []parser.Class{parser.ClassData, parser.ClassResult, parser.ClassProgress, 7} {
			if err := b.WriteFrame(frame(c, round)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.WriteFrame(frame(parser.ClassControl, round)); err != nil {
			t.Fatal(err)
		}
		select {
		case f := <-got:
			if parser.Class(f[parser.CWOff+1]) != parser.ClassControl || f[59] != round {
				t.Fatalf("round %d: read class %d tag %d, want the CONTROL frame of this round", round, f[parser.CWOff+1], f[59])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the CONTROL frame never arrived", round)
		}
	}
}

// prismHooks counts the packet sockets of this thread's namespace whose
// receive hook is on the PRISM EtherType, from /proc/net/packet (run it in
// the namespace).
func prismHooks(t *testing.T) int {
	t.Helper()
	// thread-self: the namespace of this (locked) thread, not the process's.
	f, err := os.Open("/proc/thread-self/net/packet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() { // sk RefCnt Type Proto Iface R Rmem User Inode
		if fs := strings.Fields(sc.Text()); len(fs) >= 9 && strings.EqualFold(fs[3], "88b5") {
			n++
		}
	}
	return n
}

// TestConnHookOnlyWhileExpecting: the AM's sockets give the kernel no
// receive hook on the PRISM EtherType while no transaction waits for a
// reply (so the kernel never calls one for a rank's traffic on the AM's
// interface); from Expect until shortly after the last nested done they
// have one, and CONTROL frames are read only then, by the same ReadFrame
// loop however often the receive socket comes and goes.
func TestConnHookOnlyWhileExpecting(t *testing.T) {
	env, ns, a, b := connPair(t, "amx")
	hooks := func() (n int) {
		env.Do(ns, func() { n = prismHooks(t) })
		return n
	}
	// parked waits for both conns' receive sockets to close.
	parked := func(when string) {
		t.Helper()
		for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			n := hooks()
			if n == 0 {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("%s: %d PRISM receive hooks 2 s after the last done, want 0", when, n)
			}
		}
	}
	frames := readAll(a)
	send := func(tag byte) {
		if err := b.WriteFrame(testFrame(a, b, parser.ClassControl, tag)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (byte, bool) {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("ReadFrame failed: the reader stopped")
			}
			return f[len(f)-1], true
		case <-time.After(300 * time.Millisecond):
			return 0, false
		}
	}

	parked("opened")
	send(1)
	if tag, ok := read(); ok {
		t.Fatalf("frame %d read while no reply was expected", tag)
	}
	for round := byte(0); round < 3; round++ {
		done1, err := a.Expect()
		if err != nil {
			t.Fatal(err)
		}
		done2, err := a.Expect()
		if err != nil {
			t.Fatal(err)
		}
		if n := hooks(); n != 1 {
			t.Fatalf("round %d: %d PRISM receive hooks while the AM expects replies, want 1", round, n)
		}
		send(10*round + 2)
		if tag, ok := read(); !ok || tag != 10*round+2 {
			t.Fatalf("round %d, while expecting: read %d (%v), want frame %d", round, tag, ok, 10*round+2)
		}
		done1()
		done1() // a second call does not count
		time.Sleep(3 * rxLinger)
		send(10*round + 3)
		if tag, ok := read(); !ok || tag != 10*round+3 {
			t.Fatalf("round %d, with one Expect left: read %d (%v), want frame %d", round, tag, ok, 10*round+3)
		}
		done2()
		parked(fmt.Sprintf("round %d", round))
		send(10*round + 4)
		if tag, ok := read(); ok {
			t.Fatalf("round %d: frame %d read after the last done", round, tag)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-frames; ok {
		t.Fatal("a frame read after Close")
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.Expect(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Expect after Close: %v, want net.ErrClosed", err)
	}
}

// TestConnNeedsOnlyNetRaw: the AM's sockets open, take a receive socket
// and close as an unprivileged user holding CAP_NET_RAW alone (the
// namespace handle PacketConn keeps must not need CAP_NET_ADMIN, as
// SIOCGSKNS does), and without it OpenConn names the capability. The test
// binary runs itself under setpriv in a namespace with a veth.
func TestConnNeedsOnlyNetRaw(t *testing.T) {
	if iface := os.Getenv("PRISMD_AM_CAPCHECK"); iface != "" {
		c, err := OpenConn(iface)
		if err != nil {
			fmt.Println("capcheck:", err)
			os.Exit(3)
		}
		done, err := c.Expect()
		if err != nil {
			fmt.Println("capcheck: Expect:", err)
			os.Exit(3)
		}
		done()
		if err := c.Close(); err != nil {
			fmt.Println("capcheck: Close:", err)
			os.Exit(3)
		}
		fmt.Println("capcheck: ok")
		os.Exit(0)
	}
	env := netnstest.New(t, "amc")
	ns := env.Namespace("x")
	ifa, _ := env.Veth(ns, ns)
	// A copy of the test binary that user 65534 may run (go test's build
	// directory is root's alone).
	dir, err := os.MkdirTemp("", "prismd-capcheck")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := dir + "/am.test"
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(caps string) (string, error) {
		cmd := exec.Command("ip", "netns", "exec", ns, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
			"--inh-caps=-all"+caps, "--ambient-caps=-all"+caps, "--bounding-set=-all"+caps,
			bin, "-test.run=^TestConnNeedsOnlyNetRaw$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PRISMD_AM_CAPCHECK="+ifa)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(",+net_raw"); err != nil || !strings.Contains(out, "capcheck: ok") {
		t.Fatalf("with CAP_NET_RAW alone: %v: %s", err, out)
	}
	if out, err := run(""); err == nil || !strings.Contains(out, "needs CAP_NET_RAW") {
		t.Fatalf("with no capability: %v: %s, want an error naming CAP_NET_RAW", err, out)
	}
}

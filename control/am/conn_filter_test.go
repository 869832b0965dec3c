package am

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// hookProto returns the protocol the kernel's receive hook of p's socket is
// bound to, read from the
// namespace's /proc/net/packet (run it in p's namespace).
func hookProto(t *testing.T, p *PacketConn) uint64 {
	t.Helper()
	rc, err := p.c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); err != nil {
		t.Fatal(err)
	}
	// thread-self: the namespace of this (locked) thread, not the process's.
	f, err := os.Open("/proc/thread-self/net/packet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() { // sk RefCnt Type Proto Iface R Rmem User Inode
		fs := strings.Fields(sc.Text())
		if len(fs) >= 9 && fs[8] == strconv.FormatUint(st.Ino, 10) {
			proto, err := strconv.ParseUint(fs[3], 16, 16)
			if err != nil {
				t.Fatalf("/proc/net/packet: %q: %v", sc.Text(), err)
			}
			return proto
		}
	}
	t.Fatalf("socket inode %d not in /proc/net/packet", st.Ino)
	return 0
}

// TestConnHookOnlyWhileExpecting: the AM's socket's receive hook in the
// kernel is parked on a protocol no frame carries while no transaction waits
// for a reply (so the kernel never calls it for a rank's traffic on the AM's
// interface), is on the PRISM EtherType from Expect until the last nested
// done, and the socket reads CONTROL frames only then.
func TestConnHookOnlyWhileExpecting(t *testing.T) {
	env, ns, a, b := connPair(t, "amx")
	var protos []uint64
	proto := func() { env.Do(ns, func() { protos = append(protos, hookProto(t, a)) }) }

	frames := readAll(a)
	send := func(tag byte) {
		if err := b.WriteFrame(testFrame(a, b, parser.ClassControl, tag)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (byte, bool) {
		select {
		case f := <-frames:
			return f[len(f)-1], true
		case <-time.After(300 * time.Millisecond):
			return 0, false
		}
	}

	proto() // opened: nothing expected
	send(1)
	if tag, ok := read(); ok {
		t.Fatalf("frame %d read while no reply was expected", tag)
	}
	done1, err := a.Expect()
	if err != nil {
		t.Fatal(err)
	}
	done2, err := a.Expect()
	if err != nil {
		t.Fatal(err)
	}
	proto() // two expected
	send(2)
	if tag, ok := read(); !ok || tag != 2 {
		t.Fatalf("while expecting: read %d (%v), want frame 2", tag, ok)
	}
	done1()
	done1() // a second call does not count
	proto() // one still expected
	send(3)
	if tag, ok := read(); !ok || tag != 3 {
		t.Fatalf("with one Expect left: read %d (%v), want frame 3", tag, ok)
	}
	done2()
	proto() // none
	send(4)
	if tag, ok := read(); ok {
		t.Fatalf("frame %d read after the last done", tag)
	}
	want := []uint64{parkProto, 0x88B5, 0x88B5, parkProto}
	if len(protos) != len(want) {
		t.Fatalf("hook protocols %x, want %x", protos, want)
	}
	for i := range want {
		if protos[i] != want[i] {
			t.Fatalf("hook protocols %x, want %x (parked while nothing is expected)", protos, want)
		}
	}
}

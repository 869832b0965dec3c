package mmsg

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/internal/alloctest"
)

// fakeSender accepts up to room frames per call, then refuses the next with
// errno once, and records what it was asked to send.
type fakeSender struct {
	room   int
	errno  unix.Errno
	failAt int // frame index (over the whole call) refused with errno; -1 none
	seen   int
	sent   []int // lengths of frames accepted
	t      *Send
	closed bool
}

func (f *fakeSender) Sendmmsg(t *Send, want int) (int, unix.Errno) {
	if f.closed {
		return -1, 0
	}
	n := 0
	for i := 0; i < want && n < f.room; i++ {
		if f.seen == f.failAt {
			f.seen++
			if n == 0 {
				return 0, f.errno
			}
			f.seen-- // report the frames before it first, as sendmmsg does
			return n, 0
		}
		f.sent = append(f.sent, int(t.iovs[i].Len))
		f.seen++
		n++
	}
	return n, 0
}
func (f *fakeSender) Closed() bool { return f.closed }

// SendAll against a naive model: every frame goes out in order in chunks of
// at most Max, except the one the kernel refused, whose error is returned.
func TestSendAll(t *testing.T) {
	frames := make([][]byte, 23)
	for i := range frames {
		frames[i] = make([]byte, 60+i)
	}
	for _, c := range []struct {
		name   string
		room   int
		failAt int
		errno  unix.Errno
		fatal  bool
		want   int
		err    bool
	}{
		{"all", 100, -1, 0, false, 23, false},
		{"small chunks", 3, -1, 0, false, 23, false},
		{"one rejected", 100, 7, unix.EMSGSIZE, false, 22, true},
		{"rejected mid chunk", 4, 9, unix.ENOBUFS, false, 22, true},
		{"fatal stops", 100, 7, unix.ENETDOWN, true, 7, true},
	} {
		f := &fakeSender{room: c.room, failAt: c.failAt, errno: c.errno}
		var fatal func(unix.Errno) bool
		if c.fatal {
			fatal = func(e unix.Errno) bool { return e == unix.ENETDOWN }
		}
		n, err := SendAll(f, NewSend(8), frames, fatal)
		if n != c.want || (err != nil) != c.err {
			t.Fatalf("%s: sent %d err %v, want %d err %v", c.name, n, err, c.want, c.err)
		}
		k := 0
		for i := range frames {
			if i == c.failAt {
				continue
			}
			if k >= len(f.sent) {
				break
			}
			if f.sent[k] != len(frames[i]) {
				t.Fatalf("%s: frame %d of the wire has length %d, want %d (order)", c.name, k, f.sent[k], len(frames[i]))
			}
			k++
		}
	}
	f := &fakeSender{room: 100, failAt: -1, closed: true}
	if _, err := SendAll(f, NewSend(8), frames, nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed socket: %v", err)
	}
}

// deadLink accepts the first ok frames, then refuses every frame with
// ENOBUFS, as the kernel does on a link without carrier; it counts calls.
type deadLink struct {
	ok, seen, calls int
}

func (d *deadLink) Sendmmsg(t *Send, want int) (int, unix.Errno) {
	d.calls++
	n := min(want, max(d.ok-d.seen, 0))
	d.seen += n
	if n < want {
		if n > 0 {
			return n, 0 // sendmmsg reports the frames before the refused one first
		}
		d.seen++
		return 0, unix.ENOBUFS
	}
	return n, 0
}
func (d *deadLink) Closed() bool { return false }

// A link that refuses every frame costs SendAll a bounded number of calls,
// not one per frame: it gives up after the second refusal in a row and
// reports ErrDeviceRefuses, having sent exactly the frames the link took.
// One refused frame between accepted ones is still skipped alone (TestSendAll).
func TestSendAllGivesUpOnDeadLink(t *testing.T) {
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = make([]byte, 60)
	}
	for _, ok := range []int{0, 1, 5, 40, 62} {
		d := &deadLink{ok: ok}
		n, err := SendAll(d, NewSend(16), frames, nil)
		if n != ok {
			t.Errorf("link taking %d frames: SendAll says %d sent", ok, n)
		}
		if !errors.Is(err, ErrDeviceRefuses) {
			t.Errorf("link taking %d frames: err %v, want ErrDeviceRefuses", ok, err)
		}
		// Calls: those that sent (ceil(ok/16), one more when the refusal
		// came mid chunk and was reported by the next call) plus the two refusals.
		if max := (ok+15)/16 + 3; d.calls > max {
			t.Errorf("link taking %d frames: %d sendmmsg calls for 64 frames, want at most %d", ok, d.calls, max)
		}
	}
	// The last frame refused alone is that one frame's error.
	d := &deadLink{ok: 63}
	if n, err := SendAll(d, NewSend(16), frames, nil); n != 63 || !errors.Is(err, unix.ENOBUFS) || errors.Is(err, ErrDeviceRefuses) {
		t.Fatalf("last frame refused: %d sent, err %v; want 63 and ENOBUFS", n, err)
	}
	// A link with room for every frame never trips it.
	d = &deadLink{ok: 64}
	if n, err := SendAll(d, NewSend(16), frames, nil); n != 64 || err != nil {
		t.Fatalf("healthy link: %d sent, err %v", n, err)
	}
}

// A batch prepares without allocating.
func TestPrepareAllocs(t *testing.T) {
	r, s := NewRecv(16), NewSend(16)
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	if a := alloctest.PerRun(100, func() { r.Prepare(bufs); s.Prepare(bufs); _ = r.ReadFunc() }); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// A TxSocket sends, and after Close (twice is harmless) reports itself
// closed instead of writing to a stale descriptor.
func TestTxSocketClose(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (AF_PACKET); run the tests as root")
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenTx(lo.Index, 1<<16, 100*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 60)
	frame[12], frame[13] = 0x88, 0xB6 // local experimental EtherType
	if n, err := SendAll(s, NewSend(4), [][]byte{frame, frame}, nil); n != 2 || err != nil {
		t.Fatalf("send: %d %v", n, err)
	}
	if s.Closed() {
		t.Fatal("closed before Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil || !s.Closed() {
		t.Fatalf("second Close: %v, closed %v", err, s.Closed())
	}
	if n, err := SendAll(s, NewSend(4), [][]byte{frame}, nil); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("send after Close: %d %v", n, err)
	}
}

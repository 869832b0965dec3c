package dataplane

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestSparseTunerDecides drives the lane policy with a synthetic clock:
// a new port is on the lane; a window above 2*fps moves it to the ring at
// once; a rate between fps and 2*fps changes nothing; a single quiet
// window (a sender that lost its core) does not move it back, sparseQuiet
// windows in a row do; a failed move changes nothing.
func TestSparseTunerDecides(t *testing.T) {
	const fps = 50000
	var calls []bool
	fail := false
	tu, err := newSparseTuner(fps, func(all bool) error {
		if fail {
			return errTest
		}
		calls = append(calls, all)
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tu.wide.Load() || len(calls) != 1 || !calls[0] {
		t.Fatalf("a new port: wide %v, calls %v; want on the lane", tu.wide.Load(), calls)
	}
	w := int64(sparseWindow)
	now := int64(0)
	// window feeds frames at rate r (frames/s) for one window and reads at its end.
	window := func(r int) {
		now += w
		tu.readAt(int(int64(r)*w/int64(time.Second)), now)
	}
	for _, tc := range []struct {
		name  string
		rates []int
		wide  bool
	}{
		{"sparse stays on the lane", []int{1000, 40000, 0}, true},
		{"between the thresholds stays", []int{90000, 70000}, true},
		{"busy moves to the ring at once", []int{150000}, false},
		{"one quiet window is a stall, not the end", []int{0, 150000, 0, 0, 80000}, false},
		{"sparseQuiet-1 quiet windows are not enough", []int{0, 0, 0, 0, 0, 0, 0}, false},
		{"the sparseQuiet-th is", []int{1000}, true},
	} {
		for _, r := range tc.rates {
			window(r)
		}
		if tu.wide.Load() != tc.wide {
			t.Fatalf("%s: wide %v, want %v (calls %v)", tc.name, tu.wide.Load(), tc.wide, calls)
		}
	}
	if got := tu.switches.Load(); got != 2 {
		t.Fatalf("switches %d, want 2", got)
	}
	// Reads inside a window decide nothing, however many frames they count.
	now += w / 4
	tu.readAt(1_000_000, now)
	if !tu.wide.Load() {
		t.Fatal("a read inside the window decided")
	}
	// A move the socket refuses leaves the state as it was: the burst
	// above makes this window busy, but the port stays on the lane.
	fail = true
	now += w
	tu.readAt(0, now)
	if !tu.wide.Load() || tu.switches.Load() != 2 {
		t.Fatalf("a refused move changed the state: wide %v, switches %d", tu.wide.Load(), tu.switches.Load())
	}
}

// TestSparseTunerHeldBlocks drives the ring's own account: bursts that
// leave blocks waiting for the ring's timer move a busy port to the lane at
// once, and keep it there for a hold that doubles while it repeats; one
// timed-out block (a stream's last) does not; a clean second on the ring,
// or a move for quiet, starts the hold over.
func TestSparseTunerHeldBlocks(t *testing.T) {
	const fps = 50000
	var blocks, timed uint64
	tu, err := newSparseTuner(fps, func(bool) error { return nil }, func() (uint64, uint64) { return blocks, timed })
	if err != nil {
		t.Fatal(err)
	}
	w := int64(sparseWindow)
	now := int64(0)
	// window reads r frames/s for one window in b blocks, tb of them
	// retired on the timer, and decides at its end.
	window := func(r int, b, tb uint64) {
		now += w
		blocks, timed = blocks+b, timed+tb
		tu.readAt(int(int64(r)*w/int64(time.Second)), now)
	}
	ring := func(want bool, what string) {
		t.Helper()
		if tu.wide.Load() == want {
			t.Fatalf("%s: on the ring %v, want %v (hold %v, until %v, now %v)", what, !tu.wide.Load(), want,
				time.Duration(tu.hold), time.Duration(tu.holdUntil), time.Duration(now))
		}
	}
	window(150000, 30, 0)
	ring(true, "busy")
	// A stream's end: one partial block, the rate falling: the quiet rule's.
	window(150000, 30, 1)
	ring(true, "one timed-out block")
	// A collective's end: held blocks for fewer than heldWindows windows,
	// then a stream again.
	for range heldWindows - 1 {
		window(150000, 8, 4)
		ring(true, "a collective's tail")
	}
	window(300000, 60, 0)
	ring(true, "the next collective")
	// Bursts: 150k frames/s with a third of them held in 4 blocks, window
	// after window.
	for range heldWindows - 1 {
		window(150000, 8, 4)
		ring(true, "bursts, not yet heldWindows")
	}
	window(150000, 8, 4)
	ring(false, "bursts")
	if tu.heldMoves.Load() != 1 {
		t.Fatalf("held moves %d, want 1", tu.heldMoves.Load())
	}
	// Held for holdMin: busy windows inside it stay on the lane.
	holdWindows := func(d time.Duration) int { return int((int64(d) + w - 1) / w) }
	for range holdWindows(holdMin) - 1 {
		window(300000, 60, 0)
		ring(false, "inside the hold")
	}
	window(300000, 60, 0)
	ring(true, "after the hold")
	// Bursts again: the hold doubles, up to holdMax.
	want := 2 * holdMin
	for i := 0; i < 8; i++ {
		for range heldWindows {
			window(150000, 8, 4)
		}
		ring(false, "bursts again")
		for range holdWindows(min(want, holdMax)) - 1 {
			window(300000, 60, 0)
			ring(false, fmt.Sprintf("inside hold %v", min(want, holdMax)))
		}
		window(300000, 60, 0)
		ring(true, fmt.Sprintf("after hold %v", min(want, holdMax)))
		want *= 2
	}
	// A clean stint of holdReset on the ring starts the hold over.
	for range holdWindows(holdReset) {
		window(300000, 60, 1)
	}
	ring(true, "a clean second")
	for range heldWindows {
		window(150000, 8, 3)
	}
	ring(false, "bursts after a clean second")
	if tu.holdUntil-now != int64(holdMin) {
		t.Fatalf("hold after a clean second %v, want %v", time.Duration(tu.holdUntil-now), holdMin)
	}
	// A few frames held among many: a stream that fills its blocks.
	for range holdWindows(holdMin) {
		window(300000, 60, 0)
	}
	ring(true, "after the reset hold")
	for range 2 * heldWindows {
		window(600000, 115, 4) // 2400 frames, 4 blocks on the timer
	}
	ring(true, "a small share held")
}

var errTest = errors.New("refused")

// TestSparseMoverOffReadPath: with a mover, a decision returns at once
// although the socket's move blocks (the kernel's RCU grace period), the
// move is applied later in order, and a move the socket refuses puts the
// tuner back where the socket is.
func TestSparseMoverOffReadPath(t *testing.T) {
	const fps = 50000
	applied := make(chan bool, 8)
	var mu sync.Mutex
	refuse := false
	tu, err := newSparseTuner(fps, func(all bool) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return errTest
		}
		applied <- all
		return nil
	}, nil)
	if err != nil || !<-applied {
		t.Fatalf("creation: %v", err)
	}
	block := make(chan struct{})
	set := tu.set
	tu.set = func(all bool) error { <-block; return set(all) }
	stop := make(chan struct{})
	defer close(stop)
	tu.startMover(stop)
	w := int64(sparseWindow)
	done := make(chan struct{})
	go func() { tu.readAt(int(300000*w/int64(time.Second)), w); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the reader waited for the socket's move")
	}
	if tu.wide.Load() {
		t.Fatal("a busy window did not move the port to the ring")
	}
	close(block)
	if got := <-applied; got {
		t.Fatalf("applied %v, want the ring (false)", got)
	}
	mu.Lock()
	refuse = true
	mu.Unlock()
	// Quiet windows move it back; the socket refuses; the tuner follows it.
	for i := int64(2); i < 2+sparseQuiet; i++ {
		tu.readAt(0, i*w)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tu.wide.Load() || tu.switches.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after a refused move: wide %v, switches %d; want on the ring, 2 decisions", tu.wide.Load(), tu.switches.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// This file owns the policy that moves a port's frames between its lane
// and its ring (PortOptions.SparseFPS), and the goroutine that applies the
// moves off the receive path.

package dataplane

import (
	"sync"
	"sync/atomic"
	"time"
)

// sparseWindow is how often a port re-decides between lane and ring: long
// enough to count a few hundred frames at the threshold, short next to a
// collective. A port goes back to the lane only after sparseQuiet windows
// in a row below the threshold: on a loaded machine a sender that loses
// its core for a few milliseconds makes a busy stream look sparse for a
// window, and every move off the ring leaves the frames of its partly
// filled block waiting for the block timeout (measured: 4-ms decisions
// flipped a port 30-250 times in 5 s of MTU-1500 DATA and cost up to 40%
// of its rate).
const (
	sparseWindow = 4 * time.Millisecond
	sparseQuiet  = 8
)

// The rate alone cannot tell a stream that fills ring blocks from one that
// is fast but comes in bursts each waiting for the last: repeated
// collectives of a few tens of frames (32 KiB of FP32 between two ranks is
// 46 DATA frames a call) run at well over 2*fps on the lane, and on the
// ring the tail of every burst waits for the block timeout, which then
// sets the time of every call (1 ms instead of 0.2) and drops the rate
// below fps, back to the lane after sparseQuiet windows, and so on:
// measured, 35 moves in 1000 calls and a mean of 870 us a call, against
// 224 us with the lane alone. So the ring's own account decides too:
// heldWindows windows in a row in which the kernel retired at least
// heldBlocks blocks on its timer, and at least 1/heldShare of the blocks,
// move the port to the lane and keep it there for a hold that doubles
// from holdMin to holdMax while such moves repeat; a ring stint of
// holdReset with no such move, or a move for quiet, starts the hold over
// at holdMin. (Counting blocks, not frames: a burst of 23 frames of 1.5 KB
// is a full block and a timed-out one of 2 frames, but the whole call
// waits for those 2.) The end of one large collective is not such a run:
// its last blocks and the PROGRESS trickling after them are held for a
// window or two, and then the next collective's stream fills blocks again
// (one window of it was enough to move the port, with the hold, under the
// SINGLE lab's back-to-back 16M allreduces, and cut their rate by 5-15%).
// At high rates the rule cannot fire: a quarter of a window's blocks is
// more than the timer retires.
const (
	heldBlocks  = 2
	heldShare   = 4
	heldWindows = 3
	holdMin     = 256 * time.Millisecond
	holdMax     = 4 * time.Second
	holdReset   = time.Second
)

// sparseTuner moves every frame to the lane while the port's frame rate is
// below fps, and back to the ring above 2*fps (the lane keeping CONTROL). Both receive
// goroutines count what they read and, once per sparseWindow, one of them
// (TryLock) re-decides. A port that goes quiet on the ring is re-decided
// by its next read, lane or ring: the AM's CONTROL comes through the lane
// before any DATA of a new collective, so the lane is widened by then.
type sparseTuner struct {
	fps    uint64
	start  time.Time // the monotonic clock's origin
	frames atomic.Uint64
	next   atomic.Int64 // ns since start: when the next decision is due
	mu     sync.Mutex
	// under mu:
	lastNs     int64
	lastFrames uint64
	quiet      int // windows in a row below fps while on the ring
	heldRun    int // windows in a row with heldBlocks held, on the ring
	// held reads how many blocks the ring handed out and how many of
	// them the kernel retired on its timer (nil: the rate alone decides);
	// lastBlocks and lastTimed are their values at the last decision.
	held                  func() (blocks, timed uint64)
	lastBlocks, lastTimed uint64
	holdUntil             int64       // ns since start: no move to the ring before
	hold                  int64       // the next held move's hold, ns
	ringSince             int64       // ns since start: when the port last moved to the ring
	wide                  atomic.Bool // read by Stats
	switches              atomic.Uint64
	heldMoves             atomic.Uint64 // moves to the lane for held blocks (for tests)
	// set makes the first move (onto the lane, at creation); move makes
	// the later ones: set itself, or, after startMover, a hand-off to the
	// mover goroutine.
	set, move func(all bool) error
}

func newSparseTuner(fps int, set func(all bool) error, held func() (blocks, timed uint64)) (*sparseTuner, error) {
	t := &sparseTuner{fps: uint64(fps), start: time.Now(), set: set, move: set, held: held, hold: int64(holdMin)}
	if err := set(true); err != nil { // a new port is quiet
		return nil, err
	}
	t.wide.Store(true)
	t.next.Store(int64(sparseWindow))
	return t, nil
}

// read counts n frames read and re-decides when a window has passed.
func (t *sparseTuner) read(n int) { t.readAt(n, int64(time.Since(t.start))) }

// readAt is read at now, in ns since t.start.
func (t *sparseTuner) readAt(n int, now int64) {
	t.frames.Add(uint64(n))
	if now < t.next.Load() || !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if now < t.next.Load() {
		return // another reader just decided
	}
	t.next.Store(now + int64(sparseWindow))
	frames := t.frames.Load()
	elapsed := uint64(now - t.lastNs)
	n64 := frames - t.lastFrames
	rate := n64 * uint64(time.Second) / max(elapsed, 1)
	t.lastNs, t.lastFrames = now, frames
	var blocks, timed uint64
	if t.held != nil {
		b, tm := t.held()
		blocks, timed = b-t.lastBlocks, tm-t.lastTimed
		t.lastBlocks, t.lastTimed = b, tm
	}
	wide := t.wide.Load()
	if !wide && timed >= heldBlocks && timed*heldShare >= blocks {
		t.heldRun++
	} else {
		t.heldRun = 0
	}
	heldMove := false
	switch {
	case wide && rate > 2*t.fps && now >= t.holdUntil:
		wide = false
		t.quiet = 0
	case t.heldRun >= heldWindows:
		wide, heldMove = true, true
	case !wide && rate < t.fps:
		if t.quiet++; t.quiet < sparseQuiet {
			return
		}
		wide = true
	default:
		t.quiet = 0
		if !wide && now-t.ringSince >= int64(holdReset) {
			t.hold = int64(holdMin) // a stint long enough to count as clean
		}
		return
	}
	if t.move(wide) != nil {
		return
	}
	t.wide.Store(wide)
	t.switches.Add(1)
	t.heldRun = 0
	switch {
	case !wide:
		t.ringSince = now
	case heldMove:
		t.heldMoves.Add(1)
		t.holdUntil = now + t.hold
		t.hold = min(2*t.hold, int64(holdMax))
	default:
		t.hold = int64(holdMin)
	}
}

// startMover makes t's later moves in a goroutine of their own, until
// stop is closed. Moving frames between lane and ring replaces the fanout
// group's BPF program, and the kernel waits for an RCU grace period before
// that setsockopt returns (synchronize_net in __fanout_set_data_bpf): 6-13
// ms measured here, during which the goroutine that decided, one of the
// port's readers, read nothing, and every collective in flight through
// the port stalled (repeated 32 KiB allreduces: a call of 6-8 ms at each
// move against 0.2-1 ms around it). The new program sorts frames as soon
// as it is in place, before the wait ends, so only the mover waits.
func (t *sparseTuner) startMover(stop <-chan struct{}) {
	want := make(chan bool, 1)
	t.move = func(all bool) error {
		for { // the latest decision replaces one not applied yet
			select {
			case want <- all:
				return nil
			default:
				select {
				case <-want:
				default:
				}
			}
		}
	}
	go func() {
		for {
			select {
			case <-stop:
				return
			case all := <-want:
				if t.set(all) != nil { // as if not decided (a closed port, a ring that could not be mapped)
					t.mu.Lock()
					if t.wide.Load() == all { // no later decision yet
						t.wide.Store(!all)
					}
					t.mu.Unlock()
				}
			}
		}
	}()
}

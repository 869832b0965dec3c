// This file owns the single-producer single-consumer ring that carries local
// PRISM frames from one RX goroutine to one worker. The producer copies the
// frame into a preallocated slot, so the RX buffer is reused at once and
// nothing is allocated per frame.

package dataplane

import "sync/atomic"

// ringSize is a power of two; 256 frames absorb a full RX batch (64) several
// times over while a worker is busy, and cost 256 x FrameSize(mtu) per
// (port, worker) pair: ~390 KiB at MTU 1500.
const ringSize = 256

type ringSlot struct {
	buf []byte // cap = FrameSize(port MTU)
	n   int
	in  int
}

type spscRing struct {
	head atomic.Uint64 // next slot to read; written by the consumer
	_    [56]byte      // keep head and tail on separate cache lines
	tail atomic.Uint64 // published end of the written slots; written by the producer
	_    [56]byte
	// The producer's own view, on a line the consumer never reads: it
	// writes slots up to ptail and publishes them once per receive batch
	// (publish), and rereads head only when the ring looks full. A store
	// to tail and a load of head per frame made the line bounce between
	// the two cores: 250 ns a frame in a profile of a busy switch.
	ptail, phead uint64
	_            [48]byte
	// waiting is set by a producer blocked on a full ring (rx.waitPush);
	// the consumer then signals space after freeing a slot. One atomic
	// load per frame when nobody waits.
	waiting atomic.Bool
	space   chan struct{}
	slots   [ringSize]ringSlot
}

func newRing(frameSize int) *spscRing {
	r := &spscRing{space: make(chan struct{}, 1)}
	for i := range r.slots {
		r.slots[i].buf = getBuffer(frameSize)
	}
	return r
}

// push copies frame into the ring; false if full or the frame does not
// fit. The consumer sees it after the next publish.
func (r *spscRing) push(in int, frame []byte) bool {
	t := r.ptail
	if t-r.phead >= ringSize {
		r.phead = r.head.Load()
		if t-r.phead >= ringSize {
			return false
		}
	}
	s := &r.slots[t&(ringSize-1)]
	if len(frame) > len(s.buf) {
		return false
	}
	s.n = copy(s.buf, frame)
	s.in = in
	r.ptail = t + 1
	return true
}

// publish makes every pushed frame visible to the consumer.
func (r *spscRing) publish() {
	if r.tail.Load() != r.ptail { // tail is only written here: a plain read of our own store
		r.tail.Store(r.ptail)
	}
}

// peek returns the oldest slot, or nil if empty. The slot stays owned by the
// consumer until advance.
func (r *spscRing) peek() *ringSlot {
	h := r.head.Load()
	if h == r.tail.Load() {
		return nil
	}
	return &r.slots[h&(ringSize-1)]
}

func (r *spscRing) advance() {
	r.head.Add(1)
	if r.waiting.Load() {
		select {
		case r.space <- struct{}{}:
		default:
		}
	}
}

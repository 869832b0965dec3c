// This file owns the engine workers: each drains its SPSC rings (one per RX
// port), calls its Handler, and transmits through its own TX batches.

package dataplane

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/internal/prefetch"
)

// Idler is an optional interface of a Handler. A Handler whose Idle returns
// true has no timer armed, so its worker may stop calling Tick and sleep
// until the next frame (Tick resumes at once then). Without it a worker wakes
// every TickInterval forever, which is measurable idle CPU (about 4% of a
// core here), so a Handler that can tell it has nothing pending should
// implement it. Idle is called from the worker goroutine, like Tick.
type Idler interface {
	Idle() bool
}

// Pacer is an optional interface of a Handler. TickEvery returns how long
// the handler can wait for its next Tick right now; anything below
// TickInterval means TickInterval. A handler whose only armed timers are
// coarse (memory to give back after tens of seconds) asks for far fewer
// wakeups than 1000 a second, which cost a prismd 3% of a core for the 30 s
// after its last operation. TickEvery is called from the worker goroutine,
// like Tick; Idle takes precedence.
type Pacer interface {
	TickEvery() time.Duration
}

// Flusher is an optional interface of a Handler. Flush is called on the
// worker goroutine after every batch of Handle calls and before the batch's
// transmissions go out, so a Handler can send one acknowledgement for many
// frames (the engine coalesces PROGRESS this way).
type Flusher interface {
	Flush(now int64, tx Sender)
}

// Idle implements Idler: the built-in handler has no timers.
func (u unsupported) Idle() bool { return true }

type worker struct {
	d       *Dataplane
	id      int
	h       Handler
	idler   Idler   // nil: the handler is never idle
	pacer   Pacer   // nil: the handler ticks every TickInterval
	flusher Flusher // nil: no per-batch flush
	wakeC   chan struct{}
	tx      workerSender
	// owner is held by whoever runs the handler: the worker goroutine, or
	// an RX goroutine running it inline (runInline). Everything below it,
	// the handler and tx are touched only by the holder, so the handler
	// still needs no locks. Nobody ever waits for owner: a failed
	// CompareAndSwap leaves the frames to the holder, which looks at the
	// rings again after letting go (pending).
	owner    atomic.Bool
	lastTick int64
	// period mirrors the worker goroutine's ticker (0: stopped): an inline
	// run that leaves the handler wanting ticks sooner than that (timers
	// armed while the ticker is stopped or slow) wakes the goroutine so
	// Tick resumes at once.
	period atomic.Int64
}

func newWorker(d *Dataplane, id int, h Handler) *worker {
	w := &worker{d: d, id: id, h: h, wakeC: make(chan struct{}, 1)}
	w.idler, _ = h.(Idler)
	w.pacer, _ = h.(Pacer)
	w.flusher, _ = h.(Flusher)
	w.tx.d = d
	w.lastTick = d.Now()
	w.period.Store(int64(TickInterval))
	return w
}

// wake signals the worker without blocking; a pending signal is enough.
func (w *worker) wake() {
	select {
	case w.wakeC <- struct{}{}:
	default:
	}
}

// step is one round of the handler, run by the owner: a batch from each
// ring, the batch's Flush, Tick when due, and the round's transmissions.
// It reports whether any frame was handled.
func (w *worker) step() bool {
	s := w.d.snap.Load()
	w.tx.refresh(s)
	did := w.drain(s)
	now := w.d.Now()
	if did && w.flusher != nil {
		w.flusher.Flush(now, &w.tx)
	}
	if now-w.lastTick >= int64(TickInterval) {
		w.lastTick = now
		w.h.Tick(now, &w.tx)
	}
	w.tx.flush()
	return did
}

func (w *worker) idle() bool { return w.idler != nil && w.idler.Idle() }

// tickPeriod is the ticker period the handler wants now: 0 when idle.
func (w *worker) tickPeriod() int64 {
	if w.idle() {
		return 0
	}
	if w.pacer != nil {
		return max(int64(TickInterval), int64(w.pacer.TickEvery()))
	}
	return int64(TickInterval)
}

// pending reports whether a ring holds a frame.
func (w *worker) pending() bool {
	for _, ps := range w.d.snap.Load().ports {
		if r := ps.rings[w.id]; r.head.Load() != r.tail.Load() {
			return true
		}
	}
	return false
}

// prefetchAhead is how many frames ahead of the one being handled runInline
// asks the CPU to load. Measured in the SINGLE lab, FP32 ALLREDUCE from two
// 'prismd-blast contribute' ranks, 3 interleaved rounds: the switch's user
// time per DATA frame 403-418 ns without prefetching, 366-391 ns one or two
// frames ahead, 351-365 ns with the ring's block prefetch too (package
// afpacket, ring.enter); the content hash fell from 20% of the user-space
// profile to under 3%.
const prefetchAhead = 2

// inlineRounds bounds how many rounds an RX goroutine runs a worker's
// handler before going back to its own port: the frames of another port
// may keep the worker busy, and past this the worker goroutine takes over.
const inlineRounds = 4

// runInline runs worker w's handler on the calling RX goroutine, if no one
// else runs it, and reports whether it did. A frame handed to a sleeping
// worker goroutine costs a thread wakeup and a pass through the Go
// scheduler on both sides; on a busy 2-core host that was a fifth of
// prismd's CPU (runtime.findRunnable 19%, futex 6%) and left cores idle
// while frames waited. A worker that is already running keeps its frames:
// a failed CompareAndSwap returns false at once, and the caller hands
// held over through the ring, where the holder sees them when it looks at
// the rings again.
//
// held are frames of port in, newer than anything in that port's ring,
// not yet copied anywhere: the port's ring is drained first, so the
// handler sees the port's frames in arrival order, then held are handled
// straight from the caller's receive buffers, saving the copy into a
// ring slot (a jumbo frame's 9 KB).
func (w *worker) runInline(in int, held [][]byte) bool {
	if !w.owner.CompareAndSwap(false, true) {
		return false
	}
	for {
		busy := false
		if len(held) > 0 {
			s := w.d.snap.Load()
			w.tx.refresh(s)
			if in < len(s.ports) {
				w.drainRing(s.ports[in].rings[w.id], ringSize)
			}
			// Start loading the frame two ahead while this one is
			// handled: the kernel wrote it from another core, and the
			// first code to read its body (the content hash) stalled on
			// every line, a fifth of the switch's user time.
			for i := 0; i < prefetchAhead && i < len(held); i++ {
				prefetch.Bytes(held[i])
			}
			// One clock reading for the batch: what the handlers send
			// leaves at the flush below, after the whole batch, so a
			// reading per frame was no truer a send time, and it was 1%
			// of the switch's CPU in an FP32 ALLREDUCE (18 ns per DATA
			// frame, perf, SINGLE lab).
			now := w.d.Now()
			for i, f := range held {
				if i+prefetchAhead < len(held) {
					prefetch.Bytes(held[i+prefetchAhead])
				}
				w.h.Handle(now, in, f, &w.tx)
			}
			held = nil
			if w.flusher != nil {
				w.flusher.Flush(w.d.Now(), &w.tx)
			}
			w.tx.flush()
		}
		for i := 0; w.step(); i++ {
			if i == inlineRounds {
				busy = true
				break
			}
		}
		want, cur := w.tickPeriod(), w.period.Load()
		w.owner.Store(false)
		if busy || (want != 0 && (cur == 0 || want < cur)) {
			w.wake() // more than this goroutine should take, or Tick must resume or quicken
			return true
		}
		if !w.pending() || !w.owner.CompareAndSwap(false, true) {
			return true
		}
	}
}

func (w *worker) run() {
	defer w.d.wg.Done()
	t := time.NewTicker(TickInterval)
	defer t.Stop()
	for {
		if w.owner.CompareAndSwap(false, true) {
			did := w.step()
			if !did {
				if want := w.tickPeriod(); want != w.period.Load() {
					if want == 0 {
						t.Stop()
					} else {
						t.Reset(time.Duration(want))
					}
					w.period.Store(want)
				}
			}
			w.owner.Store(false)
			// Frames published while this goroutine held owner were left
			// to it by their RX goroutine.
			if did || w.pending() {
				continue
			}
		}
		select {
		case <-w.d.quit:
			// Last drain so frames already queued are handled and
			// flushed. The RX goroutines have stopped, so owner is
			// released within one inline run.
			for !w.owner.CompareAndSwap(false, true) {
				runtime.Gosched()
			}
			w.drain(w.d.snap.Load())
			if w.flusher != nil {
				w.flusher.Flush(w.d.Now(), &w.tx)
			}
			w.tx.flush()
			return
		case <-w.wakeC:
		case <-t.C:
		}
	}
}

// drain handles up to one batch per ring so one busy port cannot starve others.
func (w *worker) drain(s *snapshot) bool {
	did := false
	for _, ps := range s.ports {
		if w.drainRing(ps.rings[w.id], w.d.opts.Batch) {
			did = true
		}
	}
	return did
}

// drainRing hands up to max frames of ring r to the handler, oldest first,
// and reports whether there was any.
func (w *worker) drainRing(r *spscRing, max int) bool {
	k := 0
	var now int64
	for ; k < max; k++ {
		sl := r.peek()
		if sl == nil {
			break
		}
		if k == 0 {
			now = w.d.Now() // once per batch, as in runInline
		}
		w.h.Handle(now, sl.in, sl.buf[:sl.n], &w.tx)
		r.advance()
	}
	return k > 0
}

// workerSender is the Sender of one worker: one TX batch per port, frames
// copied into preallocated buffers.
type workerSender struct {
	d    *Dataplane
	snap *snapshot
	q    []txBatch
}

type txBatch struct {
	bufs [][]byte // preallocated, cap FrameSize(mtu)
	out  [][]byte // aliases of bufs with frame lengths, passed to WriteBatch
}

func (t *workerSender) refresh(s *snapshot) {
	if s == t.snap {
		return
	}
	t.flush()
	t.snap = s
	t.q = make([]txBatch, len(s.ports))
	for i, ps := range s.ports {
		b := &t.q[i]
		b.bufs = make([][]byte, t.d.opts.Batch)
		for j := range b.bufs {
			b.bufs[j] = make([]byte, ps.frameSize)
		}
		b.out = make([][]byte, 0, t.d.opts.Batch)
	}
}

// room returns port's TX batch with room for one frame of n bytes (a full
// one is flushed first), or nil for an unknown port or an oversize frame
// (counted).
func (t *workerSender) room(port, n int) *txBatch {
	ps := t.snap.port(port)
	if ps == nil {
		return nil
	}
	if n > ps.frameSize {
		ps.ctr.drops[DropTxQueueFull].Add(1)
		return nil
	}
	b := &t.q[port]
	if len(b.out) == len(b.bufs) {
		t.flushPort(port)
	}
	return b
}

// Send implements Sender.
func (t *workerSender) Send(port int, frame []byte) bool {
	b := t.room(port, len(frame))
	if b == nil {
		return false
	}
	i := len(b.out)
	n := copy(b.bufs[i], frame)
	b.out = append(b.out, b.bufs[i][:n])
	return true
}

// SendRef implements RefSender: b.out holds frame itself until the flush.
func (t *workerSender) SendRef(port int, frame []byte) bool {
	b := t.room(port, len(frame))
	if b == nil {
		return false
	}
	b.out = append(b.out, frame)
	return true
}

// PortMAC implements Sender.
func (t *workerSender) PortMAC(port int) [6]byte {
	if ps := t.snap.port(port); ps != nil {
		return ps.hw
	}
	return [6]byte{}
}

// NumPorts implements Sender.
func (t *workerSender) NumPorts() int { return len(t.snap.ports) }

func (t *workerSender) flush() {
	for i := range t.q {
		t.flushPort(i)
	}
}

func (t *workerSender) flushPort(i int) {
	b := &t.q[i]
	if len(b.out) == 0 {
		return
	}
	sendCounted(t.snap.ports[i], b.out)
	b.out = b.out[:0]
}

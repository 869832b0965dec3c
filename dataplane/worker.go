// This file owns the engine workers: each drains its SPSC rings (one per RX
// port), calls its Handler, and transmits through its own TX batches.

package dataplane

import "time"

// Idler is an optional interface of a Handler. A Handler whose Idle returns
// true has no timer armed, so its worker may stop calling Tick and sleep
// until the next frame (Tick resumes at once then). Without it a worker wakes
// every TickInterval forever, which is measurable idle CPU (about 4% of a
// core here), so a Handler that can tell it has nothing pending should
// implement it. Idle is called from the worker goroutine, like Tick.
type Idler interface {
	Idle() bool
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
	d     *Dataplane
	id    int
	h     Handler
	wakeC chan struct{}
	tx    workerSender
}

func newWorker(d *Dataplane, id int, h Handler) *worker {
	w := &worker{d: d, id: id, h: h, wakeC: make(chan struct{}, 1)}
	w.tx.d = d
	return w
}

// wake signals the worker without blocking; a pending signal is enough.
func (w *worker) wake() {
	select {
	case w.wakeC <- struct{}{}:
	default:
	}
}

func (w *worker) run() {
	defer w.d.wg.Done()
	t := time.NewTicker(TickInterval)
	defer t.Stop()
	idler, _ := w.h.(Idler)
	flusher, _ := w.h.(Flusher)
	ticking := true
	lastTick := w.d.Now()
	for {
		s := w.d.snap.Load()
		w.tx.refresh(s)
		did := w.drain(s)
		now := w.d.Now()
		if did && flusher != nil {
			flusher.Flush(now, &w.tx)
		}
		if now-lastTick >= int64(TickInterval) {
			lastTick = now
			w.h.Tick(now, &w.tx)
		}
		w.tx.flush()
		if did {
			continue
		}
		if idle := idler != nil && idler.Idle(); idle == ticking {
			if idle {
				t.Stop()
			} else {
				t.Reset(TickInterval)
			}
			ticking = !idle
		}
		select {
		case <-w.d.quit:
			// Last drain so frames already queued are handled and flushed.
			w.drain(w.d.snap.Load())
			if flusher != nil {
				flusher.Flush(w.d.Now(), &w.tx)
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
		r := ps.rings[w.id]
		for k := 0; k < w.d.opts.Batch; k++ {
			sl := r.peek()
			if sl == nil {
				break
			}
			did = true
			w.h.Handle(w.d.Now(), sl.in, sl.buf[:sl.n], &w.tx)
			r.advance()
		}
	}
	return did
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

// Send implements Sender.
func (t *workerSender) Send(port int, frame []byte) bool {
	ps := t.snap.port(port)
	if ps == nil {
		return false
	}
	b := &t.q[port]
	if len(frame) > ps.frameSize {
		ps.ctr.drops[DropTxQueueFull].Add(1)
		return false
	}
	if len(b.out) == len(b.bufs) {
		t.flushPort(port)
	}
	i := len(b.out)
	n := copy(b.bufs[i], frame)
	b.out = append(b.out, b.bufs[i][:n])
	return true
}

// PortMAC implements Sender.
func (t *workerSender) PortMAC(port int) [6]byte {
	if ps := t.snap.port(port); ps != nil {
		return ps.port.MAC()
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

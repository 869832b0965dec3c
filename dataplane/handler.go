// This file owns the contract between the dataplane and the collective
// engine. Do not change the existing signatures: package engine implements them.

package dataplane

import "time"

// Handler processes locally addressed PRISM frames. One Handler value per worker;
// a worker calls it from one goroutine only, so its state needs no locks.
type Handler interface {
	// Handle gets one whole Ethernet frame (valid only during the call) that arrived
	// on port in. now is monotonic nanoseconds. It must not block.
	Handle(now int64, in int, frame []byte, tx Sender)
	// Tick runs on every worker at least every TickInterval, for timers.
	Tick(now int64, tx Sender)
}

// Sender queues frames for transmission from a worker.
type Sender interface {
	Send(port int, frame []byte) bool // copies frame into a TX batch slot; false = queue full (counted)
	PortMAC(port int) [6]byte
	NumPorts() int
}

// RefSender is a Sender that can also queue a frame without copying it.
// The caller guarantees the frame's bytes stay as they are until the
// sender flushes (the end of the batch being handled, or a full queue of
// that port). The engine sends its replay buffers this way: a frame that
// waits for its acknowledgement there cannot be reused before it went out,
// and a copy per frame was 5-7% of a switch's CPU with jumbo frames.
type RefSender interface {
	Sender
	SendRef(port int, frame []byte) bool // queues frame itself; false = queue full (counted)
}

// HandlerFactory builds the Handler of worker (0-based) out of workers.
type HandlerFactory func(worker, workers int) Handler

// TickInterval bounds the time between two Tick calls on a worker. 1 ms is
// well under the smallest PRISM timeout (1 ms granularity) that timers serve.
const TickInterval = time.Millisecond

// unsupported is the built-in Handler used until the engine is wired in: every
// local PRISM frame is counted as drop reason "unsupported" on its ingress port.
type unsupported struct{ d *Dataplane }

func (u unsupported) Handle(now int64, in int, frame []byte, tx Sender) {
	if ps := u.d.snap.Load().port(in); ps != nil {
		ps.ctr.drops[DropUnsupported].Add(1)
	}
}

func (u unsupported) Tick(now int64, tx Sender) {}

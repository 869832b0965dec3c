package control

import "time"

// idleAfterTicks is how many consecutive ticks with no context installed a
// worker waits before it reports Idle: long enough (at 1 ms ticks) for the
// engine to publish the introspection snapshot that shows the last context
// gone (it publishes at most every ~100 ms), short enough that an idle
// prismd stops waking up within a fraction of a second.
const idleAfterTicks = 250

// Idle implements dataplane.Idler: a worker with no PRISM or BITMAP context
// and no pooled accumulator memory has no timer armed (no retransmission,
// no contributor deadline, no soft state, nothing to give back), so the
// dataplane may stop ticking it until the next frame.
func (w *Worker) Idle() bool { return w.idleTicks >= idleAfterTicks }

// pooledTick is how often a worker with no context but pooled accumulator
// memory is ticked: its only timer is the engine's PoolIdle (30 s) to give
// the memory back, which ticking at 1 kHz cost 3% of a core for those 30 s
// after every last operation.
const pooledTick = 100 * time.Millisecond

// TickEvery implements dataplane.Pacer: pooledTick while the worker only
// holds pooled memory; otherwise the dataplane's own TickInterval (a
// context's timers, or the ticks that count towards Idle).
func (w *Worker) TickEvery() time.Duration {
	if w.eng.Len() == 0 && w.bm.Len() == 0 && w.eng.Pooled() {
		return pooledTick
	}
	return 0
}

// noteTick counts consecutive context-free ticks; called from Tick.
func (w *Worker) noteTick() {
	// Pooled accumulator memory keeps the worker ticking too: only Tick
	// gives it back (poolIdle after the last STAGE), and a worker that
	// stopped ticking would hold it until the next job.
	if w.eng.Len() == 0 && w.bm.Len() == 0 && !w.eng.Pooled() {
		if w.idleTicks < idleAfterTicks {
			w.idleTicks++
		}
		return
	}
	w.idleTicks = 0
}

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

// slowTick is how often a worker is ticked while its only timers are
// coarse: with no context but pooled accumulator memory (the engine's
// PoolIdle, 30 s, gives it back), or with every context quiet for
// restAfterTicks (engine.Quiet: a persistent collective between
// invocations, contexts waiting for COMMIT or RELEASE, their expiry checked
// each second; bitmap.Shard.Quiet: BITMAP contexts with no aggregation or
// soft state open, such as a registered MoE job between batches). Ticking
// at 1 kHz cost 3% of a core for the 30 s after every last operation, and
// as much for as long as a job rested between its collectives or kept a
// BITMAP registration.
const slowTick = 100 * time.Millisecond

// restAfterTicks is how many consecutive quiet ticks (at 1 ms) slow the
// worker down: a persistent collective run back to back rests for
// microseconds between invocations, and slowing the ticker there would
// cost a wakeup of the worker goroutine at every next invocation.
const restAfterTicks = 50

// TickEvery implements dataplane.Pacer: slowTick while the worker's timers
// are all coarse; otherwise the dataplane's own TickInterval (a context's
// timers, or the ticks that count towards Idle).
func (w *Worker) TickEvery() time.Duration {
	if w.restTicks >= restAfterTicks || (w.eng.Len() == 0 && w.bm.Len() == 0 && w.eng.Pooled()) {
		return slowTick
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
		w.restTicks = 0
		return
	}
	w.idleTicks = 0
	if w.eng.Quiet() && w.bm.Quiet() {
		if w.restTicks < restAfterTicks {
			w.restTicks++
		}
		return
	}
	w.restTicks = 0
}

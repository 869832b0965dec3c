package control

import (
	"testing"
	"time"

	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/parser"
)

// TestIdle: a worker reports Idle only after a run of ticks with no context,
// never while a context is installed, and any frame wakes it.
func TestIdle(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	if r.w.Idle() {
		t.Fatal("idle before any tick")
	}
	for i := 0; i < idleAfterTicks-1; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if r.w.Idle() {
		t.Fatalf("idle after %d ticks, want %d", idleAfterTicks-1, idleAfterTicks)
	}
	r.w.Tick(r.now, r.tx)
	if !r.w.Idle() {
		t.Fatal("not idle after a run of context-free ticks")
	}

	// STAGE installs a context: the frame wakes the worker and the context
	// keeps it awake however long it ticks.
	if st, _ := r.ack(stageFrame(t, ruleKey, 1, goodCtx(), goodBindings())); st != parser.StatusOK {
		t.Fatalf("STAGE: %v", st)
	}
	if r.w.Idle() {
		t.Fatal("idle right after a frame")
	}
	if d := r.w.TickEvery(); d != 0 {
		t.Fatalf("TickEvery with a staged context: %v, want 0 (TickInterval)", d)
	}
	for i := 0; i < 2*idleAfterTicks; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if r.w.Idle() {
		t.Fatal("idle with a staged context")
	}
}

// TestIdleAfterPoolsDropped: a worker whose last context is gone but whose
// engine still pools its accumulator memory keeps ticking, so that the
// engine gives the memory back engine.PoolIdle after the last STAGE; then
// it goes idle.
func TestIdleAfterPoolsDropped(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	if st, _ := r.ack(stageFrame(t, ruleKey, r.nextTxn(), goodCtx(), goodBindings())); st != parser.StatusOK {
		t.Fatalf("STAGE: %v", st)
	}
	r.expect(r.cmd(ruleKey, parser.CmdRelease), parser.StatusOK, parser.StateReleased)
	if r.w.eng.Len() != 0 || !r.w.eng.Pooled() {
		t.Fatalf("after RELEASE: %d contexts, pooled %v; want none, pooled", r.w.eng.Len(), r.w.eng.Pooled())
	}
	// Only the pool's 30 s timer is armed: ticks every slowTick will do.
	if d := r.w.TickEvery(); d != slowTick {
		t.Fatalf("TickEvery with only pooled memory: %v, want %v", d, slowTick)
	}
	for i := 0; i < 2*idleAfterTicks; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if r.w.Idle() {
		t.Fatal("idle while the engine still pools memory: nothing would give it back")
	}
	r.now += int64(engine.PoolIdle) + int64(time.Millisecond)
	for i := 0; i < idleAfterTicks; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if r.w.eng.Pooled() || !r.w.Idle() {
		t.Fatalf("PoolIdle after the last STAGE: pooled %v, idle %v; want the memory given back and the worker idle", r.w.eng.Pooled(), r.w.Idle())
	}
	if d := r.w.TickEvery(); d != 0 {
		t.Fatalf("TickEvery with nothing pooled: %v, want 0 (the ticks that count towards Idle)", d)
	}
}

// TestSlowTickWhileQuiet: a worker whose every context is quiet
// (engine.Quiet: here STAGED, waiting for COMMIT) for restAfterTicks asks
// for slowTick; the next frame, and a COMMIT that starts the contributors'
// inactivity clocks, bring TickInterval back for as long as they run.
func TestSlowTickWhileQuiet(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	if st, _ := r.ack(stageFrame(t, ruleKey, r.nextTxn(), goodCtx(), goodBindings())); st != parser.StatusOK {
		t.Fatalf("STAGE: %v", st)
	}
	for i := 0; i < restAfterTicks-1; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if d := r.w.TickEvery(); d != 0 {
		t.Fatalf("quiet for %d ticks: TickEvery %v, want 0 until %d", restAfterTicks-1, d, restAfterTicks)
	}
	r.w.Tick(r.now, r.tx)
	if d := r.w.TickEvery(); d != slowTick {
		t.Fatalf("quiet for %d ticks: TickEvery %v, want %v", restAfterTicks, d, slowTick)
	}
	r.expect(r.cmd(ruleKey, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	for i := 0; i < 2*restAfterTicks; i++ {
		if d := r.w.TickEvery(); d != 0 {
			t.Fatalf("ACTIVE, no DATA yet, tick %d: TickEvery %v, want 0 (the contributors' deadlines run)", i, d)
		}
		r.w.Tick(r.now, r.tx)
	}
}

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
	// Only the pool's 30 s timer is armed: ticks every pooledTick will do.
	if d := r.w.TickEvery(); d != pooledTick {
		t.Fatalf("TickEvery with only pooled memory: %v, want %v", d, pooledTick)
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

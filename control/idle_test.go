package control

import (
	"testing"

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
	for i := 0; i < 2*idleAfterTicks; i++ {
		r.w.Tick(r.now, r.tx)
	}
	if r.w.Idle() {
		t.Fatal("idle with a staged context")
	}
}

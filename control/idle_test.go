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

// TestSlowTickBitmap: an ACTIVE BITMAP context is forwarding state that
// waits, indefinitely, for its job's next token: with nothing open the
// worker asks for slowTick after restAfterTicks. A contribution that opens
// an aggregation (its timeout is the context's, TimeoutMs) brings
// TickInterval back at once and keeps it until the aggregation closes.
func TestSlowTickBitmap(t *testing.T) {
	r := newNodeRig(t, NodeConfig{})
	ctx := goodCtx()
	ctx.Collective, ctx.AccPolicy, ctx.PartialPolicy, ctx.KulischWidth = parser.CollBitmap, parser.AccFP32Arrival, parser.FormatFP32, 0
	ctx.TimeoutMs = 50
	flat := func(idx uint8, eps ...uint32) parser.SetRecord {
		return parser.SetRecord{BindingIndex: idx, Encoding: parser.EncFlat, Set: parser.AppendFlatSet(nil, 0, 4, eps...)}
	}
	// Ranks 100 and 101 contribute; the result goes back to rank 100.
	spec := parser.StageSpec{Context: ctx, Bindings: goodBindings(), Sets: []parser.SetRecord{flat(parser.OwnSet, 100, 101), flat(2, 100)}}
	body := make([]byte, spec.Len())
	if _, err := spec.Encode(body); err != nil {
		t.Fatal(err)
	}
	r.expect(controlFrame(t, ruleKey, parser.CmdStage, body, r.nextTxn()), parser.StatusOK, parser.StateStaged)
	r.expect(r.cmd(ruleKey, parser.CmdCommit), parser.StatusOK, parser.StateActive)
	// rest ticks until restAfterTicks quiet ticks have passed, done of
	// them already.
	rest := func(when string, done int) {
		t.Helper()
		for i := done; i < restAfterTicks; i++ {
			if d := r.w.TickEvery(); d != 0 {
				t.Fatalf("%s, tick %d of %d: TickEvery %v, want 0", when, i, restAfterTicks, d)
			}
			r.w.Tick(r.now, r.tx)
		}
		if d := r.w.TickEvery(); d != slowTick {
			t.Fatalf("%s, after %d ticks: TickEvery %v, want %v", when, restAfterTicks, d, slowTick)
		}
	}
	rest("ACTIVE, nothing open", 0)

	// Rank 100's contribution to token 7 opens an aggregation that waits
	// for rank 101.
	h := parser.DataFields{Eth: parser.Eth{Dst: r.tx.PortMAC(0), Src: rankMAC(0)}, Class: parser.ClassData, Op: ruleKey,
		SrcEP: 100, DstEP: 10, PacketID: 1, Stream: 1}
	ext := &parser.Ext{Encoding: parser.EncFlat, Tenant: ctx.Tenant, Token: 7, Set: parser.AppendFlatSet(nil, 0, 4, 100)}
	fr, err := parser.AppendData(nil, &h, ext, parser.Group{Format: parser.FormatFP32, Count: 2, Values: make([]byte, 8)})
	if err != nil {
		t.Fatal(err)
	}
	r.w.Handle(r.now, 0, fr, r.tx)
	for reason := range r.w.bm.Counters().Drops {
		if n := r.w.bm.Counters().Drops[reason].Load(); n != 0 {
			t.Fatalf("the contribution was dropped: %d drops of reason %d", n, reason)
		}
	}
	for i := 0; i < 2*restAfterTicks; i++ {
		if d := r.w.TickEvery(); d != 0 {
			t.Fatalf("aggregation open, tick %d: TickEvery %v, want 0 (its timeout is %d ms)", i, d, ctx.TimeoutMs)
		}
		r.w.Tick(r.now, r.tx)
	}
	// Its timeout closes it (a PARTIAL to rank 100) on a tick that is
	// already quiet, and the worker rests again.
	r.tx.ports, r.tx.frames = nil, nil
	r.now += int64(ctx.TimeoutMs+1) * int64(time.Millisecond)
	r.w.Tick(r.now, r.tx)
	if len(r.tx.frames) != 1 || r.tx.ports[0] != 0 {
		t.Fatalf("timeout sent %d frames on ports %v, want the PARTIAL RESULT to rank 100 on port 0", len(r.tx.frames), r.tx.ports)
	}
	rest("aggregation closed", 1)
}

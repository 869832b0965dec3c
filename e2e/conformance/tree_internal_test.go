package conformance

// sw1 as INTERNAL between spec-built switches only: two children (hx, and
// h2 playing a switch) and a parent (hy). sw1 merges the children's
// partials exactly, sends one partial up, and relays the parent's RESULT
// to both children. And PUSH through a LEAF (6.1 P2, P3).

import (
	"math"
	"math/big"
	"testing"
	"time"
)

func (te *treeEnv) testInternal(t *testing.T) {
	for _, c := range []struct {
		name    string
		partial uint8
		plan    [][]trGroupPlan
		f64     bool
	}{
		{"kulisch", fmtKulisch, trPlanKulisch, false},
		{"auto", fmtAuto, trPlanMixed, false},
		// The children send KULISCH_F64 groups too (6), with values at the
		// edge of the W-bit range that cancel between the two children.
		{"kulisch_f64_children", fmtKulisch, trPlanKulischF64, true},
		{"auto_f64_children", fmtAuto, trPlanMixedF64, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			te.needKulischFixed(t, c.partial, 10)
			te.runInternal(t, c.partial, c.plan, c.f64)
		})
	}
}

func (te *treeEnv) runInternal(t *testing.T, partial uint8, plan0 [][]trGroupPlan, f64 bool) {
	const n = 600
	id := te.nextID()
	o := trNewOp(id, n, accKulischFixed, 10)
	c0 := te.downLink("child 0 on hx", 0, te.hx, te.px, te.pxIdx)
	c1 := te.downLink("child 1 on h2", 1, te.h2, te.portMAC[1], te.portIdx[1])
	up := te.upLink("parent on hy", te.hy, te.py, te.pyIdx)
	st := stage{Ctx: trCtx(roleInternal, accKulischFixed, partial, o, 4, 5000)}
	st.Bindings = append(append(c0.downBindings(), up.upBindings()...), c1.downBindings()...)
	prx := newTrRx("sw1's partial to its parent", up, classData, o, trPartialFormats(accKulischFixed, partial))
	fp32 := func(f uint8) bool { return f == fmtFP32 }
	r0 := newTrRx("sw1's RESULT to child 0", c0, classResult, o, fp32)
	r1 := newTrRx("sw1's RESULT to child 1", c1, classResult, o, fp32)
	plan := trRepeat(plan0, n/100)
	v0, f0 := trChildPartial(uint64(id.Op)*3, o.W, plan)
	v1, f1 := trChildPartial(uint64(id.Op)*3+1, o.W, plan)
	if f64 {
		// Elements 4 and 5: the largest binary64 magnitude inside W
		// (E - 1023 = W - 151: (2^53 - 1) x 2^(W - 203)) from child 0,
		// nearly cancelled by child 1; the exact sums are +-2^(W - 203).
		top := new(big.Int).Lsh(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 53), big.NewInt(1)), uint(o.W-203+149))
		near := new(big.Int).Sub(top, new(big.Int).Lsh(big.NewInt(1), uint(o.W-203+149)))
		trSetF64(v0, f0, 4, trUnits(top))
		trSetF64(v1, f1, 4, trUnits(new(big.Int).Neg(near)))
		trSetF64(v0, f0, 5, trUnits(new(big.Int).Neg(top)))
		trSetF64(v1, f1, 5, trUnits(near))
	}
	if !te.activate(t, id, st) {
		return
	}
	defer te.abort(t, id)
	tx0, tx1 := newTrTx(c0, classData, o), newTrTx(c1, classData, o)
	for j := range f0 {
		tx0.send(t, tx0.frame(uint32(100*j), f0[j], 0))
		k := len(f1) - 1 - j
		tx1.send(t, tx1.frame(uint32(100*k), f1[k], 0))
	}
	if !prx.waitComplete(2 * time.Second) {
		t.Fatalf("sw1's partial incomplete: %d of %d", prx.committed(), n)
	}
	prx.report(t)
	t.Logf("partial: %s", prx.frameStats())
	bad := 0
	for i := 0; i < n; i++ {
		if want := trAdd(v0[i], v1[i]); !prx.vals[i].equal(want) {
			if bad < 3 {
				t.Errorf("INTERNAL partial element %d: %v, want %v + %v = %v", i, prx.vals[i], v0[i], v1[i], want)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d partial elements differ from the exact sum of the children's", bad, n)
	}
	want := make([]trVal, n)
	for i := range want {
		want[i] = trAdd(v0[i], v1[i])
	}
	for _, f := range prx.snapshot() {
		for gi, g := range f.D.Groups {
			if g.Format == fmtScaled && f.First {
				if msg := trCheckScaled(g, o.W); msg != "" {
					t.Errorf("packet %d group %d: %s (6)", f.D.PacketID, gi, msg)
				}
			}
		}
	}
	// 6 [choice]: prismd's default encoding of exact partials (one
	// KULISCH_F64 group when binary64 holds the frame's values).
	t.Run("partial_encoding_choice", func(t *testing.T) {
		for _, f := range prx.snapshot() {
			if f.First && f.D.ElemCount > 0 {
				if msg := trCheckChoice(f.D, want, partial); msg != "" {
					t.Errorf("packet %d: %s", f.D.PacketID, msg)
				}
			}
		}
	})
	// Both children acknowledged completely (7).
	for _, tx := range []*trTx{tx0, tx1} {
		if _, ok := tx.lk.nic.waitFor(new(int), time.Second, func(f rxFrame) bool {
			return tx.isProgress(f) && be.Uint32(f.Payload[2+28:]) == n && f.Payload[2+39]&pfComplete != 0
		}); !ok {
			t.Errorf("%s: no PROGRESS with Committed %d and COMPLETE", tx.lk.name, n)
		}
	}
	c := te.am.must(t, te.am.cmd(id, cmdComplete))
	if c.Ack.State != osActive || c.Ack.MissingStream != up.rStream || c.Ack.MissingFrom != 0 {
		t.Errorf("COMPLETE with the partial handed on and no RESULT: %+v, want ACTIVE, Missing Stream %#x (RESULT_IN) from 0 (5.2)", c.Ack, up.rStream)
	}
	res := make([]float32, n)
	for i := range res {
		res[i] = prx.vals[i].round32()
	}
	te.sendResult(t, up, o, res)
	for _, rx := range []*trRx{r0, r1} {
		if !rx.waitComplete(2 * time.Second) {
			t.Errorf("%s incomplete: %d of %d", rx.name, rx.committed(), n)
			continue
		}
		rx.report(t)
		bad := 0
		for i := range res {
			if !rx.vals[i].equal(trF32(res[i])) {
				if bad < 3 {
					t.Errorf("%s element %d: %v, the parent sent %g", rx.name, i, rx.vals[i], res[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d elements differ from what the parent sent", rx.name, bad)
		}
	}
	c = te.am.complete(t, id, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.Ack.State != osComplete || c.Ack.Completed != n || c.Ack.MissingStream != 0xFFFF {
		t.Errorf("COMPLETE: %+v, want COMPLETE, Completed %d, Missing 0xFFFF", c.Ack, n)
	}
	te.am.expectAck(t, "RELEASE", te.am.cmd(id, cmdRelease), stOK, osReleased)
}

// runLeafPush: two ranks rest with PUSH at element 5 of 10; the LEAF sends
// its partial up to 5 at once with PUSH (6.1 P2, P3); the parent's RESULT
// is relayed with its flags (6.1 P3).
func (te *treeEnv) runLeafPush(t *testing.T) {
	const n = 10
	id := te.nextID()
	o := trNewOp(id, n, accKulischFixed, 10)
	partial := te.kulischPartial(10)
	up := te.upLink("parent on hx", te.hx, te.px, te.pxIdx)
	st := stage{Ctx: trCtx(roleLeaf, accKulischFixed, partial, o, 2, 5000)}
	st.Bindings = append(te.rankBindings([]int{0, 1}, true), up.upBindings()...)
	rx := newTrRx("sw1's partial to its parent", up, classData, o, trPartialFormats(accKulischFixed, partial))
	rx.noPush = false
	rs := o.rankSpec()
	sinks := [2]*resultSink{te.newSink(0, rs), te.newSink(1, rs)}
	if !te.activate(t, id, st) {
		return
	}
	defer te.abort(t, id)
	in := inputs(uint64(id.Op), n)
	snd := [2]*sender{te.newSender(0, rs), te.newSender(1, rs)}
	snd[1].send(t, snd[1].frame(in[1], 0, []int{5}, dfPush))
	snd[0].send(t, snd[0].frame(in[0], 0, []int{5}, dfPush))
	if !rx.waitUntil(500*time.Millisecond, func() bool { return rx.committedLocked() >= 5 }) {
		t.Fatalf("no partial [0,5) within 500 ms of both ranks resting there with PUSH (6.1 P2)")
	}
	check := func(end uint32, wantFlags uint8) {
		t.Helper()
		for _, f := range rx.snapshot() {
			if !f.First || f.D.First+uint32(f.D.ElemCount) != end {
				continue
			}
			if f.D.Flags&(dfPush|dfLast) != wantFlags {
				t.Errorf("partial packet %d ending at %d: flags %#x, want PUSH/LAST %#x (6.1 P3: the frame that ends at a resting frontier carries PUSH)", f.D.PacketID, end, f.D.Flags, wantFlags)
			}
			return
		}
		t.Errorf("no partial frame ends at %d", end)
	}
	check(5, dfPush)
	tx := newTrTx(up, classResult, o)
	res := make([]float32, n)
	for i := 0; i < 5; i++ {
		res[i] = rx.vals[i].round32()
	}
	from := up.nic.mark()
	d := tx.frame(0, []group{fp32Group(res[:5])}, dfPush)
	tx.send(t, d)
	if p, ok := tx.waitProgress(t, &from, int64(d.PacketID), time.Second); !ok || p.Status != psOK || p.Committed != 5 {
		t.Errorf("RESULT [0,5): PROGRESS %+v (found %v), want OK committed 5", p, ok)
	}
	snd[0].send(t, snd[0].frame(in[0], 5, []int{5}, dfPush))
	snd[1].send(t, snd[1].frame(in[1], 5, []int{5}, dfPush))
	if !rx.waitComplete(500 * time.Millisecond) {
		t.Fatalf("no partial [5,10)")
	}
	check(10, dfPush|dfLast)
	rx.report(t)
	for i := 5; i < n; i++ {
		res[i] = rx.vals[i].round32()
	}
	d = tx.frame(5, []group{fp32Group(res[5:])}, 0)
	tx.send(t, d)
	for r := 0; r < 2; r++ {
		got := sinks[r].wait(t, time.Second)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(res[i]) {
				t.Errorf("rank %d element %d: %g, the parent sent %g", r, i, got[i], res[i])
			}
		}
		s := sinks[r]
		s.mu.Lock()
		for _, f := range s.frames {
			end := f.First + uint32(f.ElemCount)
			want := map[uint32]uint8{5: dfPush, 10: dfLast}[end]
			if f.Flags&(dfPush|dfLast) != want {
				t.Errorf("rank %d: relayed RESULT [%d,%d) flags %#x, want %#x as the parent sent them (6.1 P3: relayed RESULT keeps its flags)", r, f.First, end, f.Flags, want)
			}
		}
		s.mu.Unlock()
	}
	c := te.am.complete(t, id, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.Ack.State != osComplete {
		t.Errorf("COMPLETE: %+v, want COMPLETE", c.Ack)
	}
}

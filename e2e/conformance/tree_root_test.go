package conformance

// sw1 as ROOT: a rank below it (h1) and this package's switch (on hx) as a
// child subtree standing for two more ranks. The child's partials are
// built from section 6 alone: KULISCH groups of W bits, KULISCH_SCALED
// groups with canonical and non-canonical Scale Words, and the narrower
// lossless formats AUTO may pick.

import (
	"encoding/binary"
	"math"
	"testing"
	"time"
)

var (
	trPlanMixed = [][]trGroupPlan{
		{{fmtINT8, 20, 0, false}, {fmtFP16, 10, 0, false}, {fmtBF16, 10, 0, false}, {fmtFP32, 20, 0, false}, {fmtKulisch, 10, 0, false}, {fmtScaled, 30, 0, false}},
		{{fmtScaled, 30, 3, false}, {fmtKulisch, 10, 0, false}, {fmtFP32, 20, 0, false}, {fmtBF16, 10, 0, false}, {fmtFP16, 10, 0, false}, {fmtINT8, 20, 0, false}},
		{{fmtKulisch, 5, 0, false}, {fmtScaled, 20, 0, true}, {fmtFP32, 75, 0, false}},
		{{fmtFP32, 100, 0, false}},
	}
	trPlanKulisch = [][]trGroupPlan{
		{{fmtKulisch, 10, 0, false}, {fmtScaled, 60, 0, false}, {fmtKulisch, 10, 0, false}, {fmtScaled, 20, 5, false}},
		{{fmtKulisch, 10, 0, false}, {fmtScaled, 80, 0, false}, {fmtScaled, 10, 0, true}},
	}
)

// Child partials with KULISCH_F64 groups (6: accepted wherever KULISCH
// partials are), mixed with the other exact formats (KULISCH policy) or
// with every lossless format (AUTO).
var (
	trPlanKulischF64 = [][]trGroupPlan{
		{{fmtF64, 100, 0, false}},
		{{fmtKulisch, 10, 0, false}, {fmtF64, 50, 0, false}, {fmtScaled, 20, 0, false}, {fmtF64, 20, 0, false}},
		{{fmtScaled, 30, 0, false}, {fmtF64, 70, 0, false}},
	}
	trPlanMixedF64 = [][]trGroupPlan{
		{{fmtF64, 100, 0, false}},
		{{fmtINT8, 20, 0, false}, {fmtF64, 30, 0, false}, {fmtFP32, 20, 0, false}, {fmtKulisch, 10, 0, false}, {fmtScaled, 20, 0, false}},
		{{fmtFP32, 50, 0, false}, {fmtF64, 50, 0, false}},
	}
)

// trRepeat makes a plan of k frames of 100 elements cycling over plan.
func trRepeat(plan [][]trGroupPlan, k int) [][]trGroupPlan {
	var r [][]trGroupPlan
	for i := 0; i < k; i++ {
		r = append(r, plan[i%len(plan)])
	}
	return r
}

func (te *treeEnv) testRoot(t *testing.T) {
	t.Run("auto_mixed_progress", func(t *testing.T) {
		te.needKulischFixed(t, fmtAuto, 4)
		te.runRoot(t, fmtAuto, trRepeat(trPlanMixed, 12), true)
	})
	t.Run("kulisch_scaled", func(t *testing.T) {
		te.needKulischFixed(t, fmtKulisch, 4)
		te.runRoot(t, fmtKulisch, trRepeat(trPlanKulisch, 6), false)
	})
	t.Run("kulisch_policy_fp32_group", func(t *testing.T) {
		te.needKulischFixed(t, fmtKulisch, 4)
		te.runRootForeignFormat(t)
	})
	// KULISCH_F64 groups from a child switch (6): accepted where KULISCH
	// partials are and applied exactly.
	t.Run("kulisch_f64", func(t *testing.T) {
		te.needKulischFixed(t, fmtKulisch, 4)
		te.runRoot(t, fmtKulisch, trRepeat(trPlanKulischF64, 6), false)
	})
	t.Run("auto_f64", func(t *testing.T) {
		te.needKulischFixed(t, fmtAuto, 4)
		te.runRoot(t, fmtAuto, trRepeat(trPlanMixedF64, 6), false)
	})
	t.Run("f64_malformed", te.runRootF64Malformed)
	t.Run("f64_under_fp32_arrival", te.runRootF64Arrival)
	t.Run("inexact", te.runInexact)
}

// rootSetup stages sw1 as ROOT over rank 0 (h1) and a child switch on hx.
func (te *treeEnv) rootSetup(t *testing.T, partial uint8, n uint32, wi uint16) (trOp, *trLink, stage) {
	id := te.nextID()
	o := trNewOp(id, n, accKulischFixed, wi)
	child := te.downLink("child on hx", 0, te.hx, te.px, te.pxIdx)
	st := stage{Ctx: trCtx(roleRoot, accKulischFixed, partial, o, 3, 5000)}
	st.Bindings = append(te.rankBindings([]int{0}, true), child.downBindings()...)
	return o, child, st
}

// rootWant returns rank 0's input (inputs with the op's seed) and the
// RESULT the root owes for it plus the child's partial vals, rounded once
// to FP32.
func rootWant(o trOp, vals []trVal, n int) (rankIn, want []float32) {
	rankIn = inputs(uint64(o.ID.Op)*17, n)[0]
	want = make([]float32, n)
	for i := range want {
		want[i] = trAdd(vals[i], trF32(rankIn[i])).round32()
	}
	return rankIn, want
}

// rootResultRx receives the root's FP32 RESULT on the child's link.
func rootResultRx(child *trLink, o trOp) *trRx {
	return newTrRx("sw1's RESULT to its child", child, classResult, o, func(f uint8) bool { return f == fmtFP32 })
}

func (te *treeEnv) runRoot(t *testing.T, partial uint8, plan [][]trGroupPlan, scripted bool) {
	n := uint32(100 * len(plan))
	o, child, st := te.rootSetup(t, partial, n, 4)
	vals, frames := trChildPartial(uint64(o.ID.Op), o.W, plan)
	for j, gs := range frames {
		if trGroupsLen(gs) != 100 {
			t.Fatalf("plan frame %d holds %d elements (test bug)", j, trGroupsLen(gs))
		}
	}
	rankIn, want := rootWant(o, vals, int(n))
	rs := o.rankSpec()
	sink := te.newSink(0, rs)
	crx := rootResultRx(child, o)
	if !te.activate(t, o.ID, st) {
		return
	}
	defer te.abort(t, o.ID)
	s := te.newSender(0, rs)
	for a := 0; a < int(n); a += 300 {
		b := min(a+300, int(n))
		s.send(t, s.frame(rankIn, a, []int{(b - a) / 2, b - a - (b-a)/2}, 0))
	}
	tx := newTrTx(child, classData, o)
	if scripted {
		te.rootScript(t, tx, frames)
	} else {
		from := child.nic.mark()
		for j, gs := range frames {
			tx.send(t, tx.frame(uint32(100*j), gs, 0))
		}
		if _, ok := child.nic.waitFor(&from, 2*time.Second, func(f rxFrame) bool {
			return tx.isProgress(f) && be.Uint32(f.Payload[2+28:]) == n
		}); !ok {
			t.Errorf("no PROGRESS with Committed %d for the child's partial", n)
		}
		for _, f := range child.nic.since(0, tx.isProgress) {
			if p := tx.checkProgress(t, f); p.Status != psOK {
				t.Errorf("child's packet %d answered status %d, want OK", p.PacketID, p.Status)
			}
		}
	}
	// RESULT: the exactly rounded sum of the rank's input and the child's
	// partial, to the rank and to the child.
	got := sink.wait(t, 3*time.Second)
	if !crx.waitComplete(3 * time.Second) {
		t.Errorf("child's RESULT incomplete: committed %d of %d", crx.committed(), n)
	}
	crx.report(t)
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("rank RESULT element %d: %g (%#08x), want %g (%#08x) = round(%v + %g)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), vals[i], rankIn[i])
			}
			bad++
		}
		c := crx.vals[i]
		if c.State == 0 && c.U == nil || !c.equal(trF32(want[i])) {
			if bad < 3 {
				t.Errorf("child RESULT element %d: %v, want %g", i, c, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d RESULT elements differ from the exactly rounded sum", bad)
	}
	c := te.am.complete(t, o.ID, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.Ack.State != osComplete || c.Ack.Completed != n || c.Ack.MissingStream != 0xFFFF {
		t.Errorf("COMPLETE: %+v, want COMPLETE, Completed %d, Missing 0xFFFF (5)", c.Ack, n)
	}
	te.am.expectAck(t, "RELEASE", te.am.cmd(o.ID, cmdRelease), stOK, osReleased)
}

// rootScript sends the child's partial with a window of 4 intervals: a
// hole, a full window, NO_CREDIT, DUPLICATE, INVALID (overlap and changed
// bytes), then the rest, checking every PROGRESS against a model of what
// sw1 holds (6, 7).
func (te *treeEnv) rootScript(t *testing.T, tx *trTx, frames [][]group) {
	o := tx.op
	sent := map[uint32][]byte{}
	have := make([]bool, o.VecLen)
	accept := func(j int) {
		for i := 100 * j; i < 100*j+100; i++ {
			have[i] = true
		}
	}
	model := func() (uint32, []hole) {
		c := uint32(0)
		for c < o.VecLen && have[c] {
			c++
		}
		var hs []hole
		hi := uint32(0)
		for i := int(o.VecLen) - 1; i >= 0; i-- {
			if have[i] {
				hi = uint32(i + 1)
				break
			}
		}
		for i := c; i < hi; {
			if have[i] {
				i++
				continue
			}
			e := i
			for e < hi && !have[e] {
				e++
			}
			hs = append(hs, hole{i, e})
			i = e
		}
		return c, hs
	}
	var lastZero bool // the last PROGRESS named Packet ID 0
	send := func(what string, j int, pid uint32, raw []byte) progress {
		t.Helper()
		if raw == nil {
			tx.next = pid
			d := tx.frame(uint32(100*j), frames[j], 0)
			raw = d.encode()
			sent[pid] = raw
		}
		from := tx.lk.nic.mark()
		tx.sendRaw(t, raw)
		f, ok := tx.lk.nic.waitFor(&from, time.Second, func(f rxFrame) bool {
			if !tx.isProgress(f) {
				return false
			}
			id := be.Uint32(f.Payload[2+24:])
			return id == pid || id == 0 && f.Payload[2+38] == psOK
		})
		if !ok {
			t.Fatalf("%s: no PROGRESS for the child's packet %d (7)", what, pid)
		}
		p := tx.checkProgress(t, f)
		lastZero = p.PacketID == 0
		t.Logf("%s: packet %d [%d,+%d) %d bytes: PROGRESS packet %d status %d committed %d holes %v credits %d/%d", what, pid, be.Uint32(raw[2+26:]), be.Uint16(raw[2+30:]), len(raw), p.PacketID, p.Status, p.Committed, p.Holes, p.IntervalCredits, p.ByteCredits)
		return p
	}
	expect := func(what string, p progress, status uint8) {
		t.Helper()
		c, hs := model()
		if p.Status != status || p.Committed != c || !holesEqual(p.Holes, hs) {
			t.Errorf("%s: PROGRESS status %d committed %d holes %v, want status %d committed %d holes %v", what, p.Status, p.Committed, p.Holes, status, c, hs)
		}
	}
	// 1. [100,200) alone: a hole below it; credits = window minus the frame
	// held above Committed, minus the interval and full frame kept for the
	// frame that closes the hole (7), and no more than the element window
	// allows.
	p := send("frame 1", 1, 1, nil)
	accept(1)
	expect("frame 1 above a hole", p, psOK)
	if wi, wb := o.WI-2, o.WB-uint32(14+len(sent[1]))-uint32(14+1500); p.IntervalCredits > wi || p.ByteCredits != wb {
		t.Errorf("frame 1 above a hole: credits %d / %d, want at most %d / exactly %d (the window minus one held frame and the hole's reserve)", p.IntervalCredits, p.ByteCredits, wi, wb)
	}
	// 2. Frames 2, 3.
	for j := 2; j <= 3; j++ {
		p = send("frame", j, uint32(j), nil)
		accept(j)
		expect("frame above the hole", p, psOK)
	}
	// 3. Frame 4 within the advertised credits.
	granted := p.IntervalCredits
	p4 := send("frame 4", 4, 4, nil)
	refused4 := p4.Status == psNoCredit
	t.Run("credits_honoured", func(t *testing.T) {
		if granted >= 1 && refused4 || granted == 0 && !refused4 {
			trFinding(t, fTrCreditAdmit, "sw1 granted %d interval(s) with 3 frames held above the hole [0,100) (Window Intervals 4), then refused the next frame [400,500) with NO_CREDIT (its PROGRESS again granting %d interval(s), %d bytes); 7: credits are how many more intervals the receiver can accept", granted, p4.IntervalCredits, p4.ByteCredits)
		}
	})
	if !refused4 {
		accept(4)
		expect("frame 4 within the credits", p4, psOK)
		if p4.IntervalCredits != 0 {
			t.Errorf("4 frames held above a hole with Window Intervals 4: Interval Credits %d, want 0 (7)", p4.IntervalCredits)
		}
	} else {
		expect("frame 4 beyond the credits", p4, psNoCredit)
	}
	// 4. Frame 5 outside the window: NO_CREDIT, not accepted.
	p = send("frame 5 with no credit", 5, 5, nil)
	expect("frame 5 with no interval credit", p, psNoCredit)
	// 5. Frame 0 fills the hole: the window is free again.
	p = send("frame 0", 0, 6, nil)
	accept(0)
	expect("frame 0 fills the hole", p, psOK)
	t.Run("progress_names_packet", func(t *testing.T) {
		if lastZero {
			trFinding(t, fTrPacketIDZero, "the PROGRESS answering the accepted packet 6 (which filled the hole after two NO_CREDIT refusals) carries Packet ID 0; 7: Packet ID is the packet whose acceptance triggered it, 0 only for a timer-driven one")
		}
	})
	afterFill := p
	t.Run("credits_after_refusals", func(t *testing.T) {
		if afterFill.ByteCredits != o.WB {
			t.Errorf("nothing held above Committed: Byte Credits %d, want the window %d", afterFill.ByteCredits, o.WB)
		}
		// 7: the element window also bounds interval credits; with the
		// rank contributor idle the release point stays at 0, so the bound
		// is floor((Window Elements - highest) / most elements per frame),
		// an AUTO partial counted at the INT8 bound (9.1).
		we, per := int(o.WI)*maxElemsPerFrame(1500), maxElemsPerFrame(1500)
		if elemBound := (we - int(afterFill.Committed)) / per; int(afterFill.IntervalCredits) != min(int(o.WI), elemBound) {
			trFinding(t, fTrCreditLeak, "with nothing held above Committed %d, Interval Credits %d, want min(window %d, element window bound %d) (7)", afterFill.Committed, afterFill.IntervalCredits, o.WI, (we-int(afterFill.Committed))/per)
		}
	})
	// 6. An identical repeat of packet 3 (RETRANSMIT is informational).
	dup := append([]byte(nil), sent[3]...)
	dup[2+33] |= dfRetransmit
	p = send("repeat of packet 3", 3, 3, dup)
	expect("identical repeat of packet 3", p, psDuplicate)
	// 7. Overlap under a new Packet ID, and changed bytes under an old one:
	// INVALID, dropped, the context unchanged (6, 7).
	ovVals := make([]trVal, 30)
	for i := range ovVals {
		ovVals[i] = trF32(1)
	}
	tx.next = 7
	ov := tx.frame(380, []group{trKulischGroup(o.W, ovVals)}, 0)
	p = send("overlap", 0, 7, ov.encode())
	expect("packet 7 [380,410) overlapping packet 3 [300,400)", p, psInvalid)
	// A changed FP32 value (any bit pattern is a valid FP32, 6).
	changed := append([]byte(nil), sent[2]...)
	off := 2 + dataHdr
	for _, g := range frames[2] {
		if g.Format == fmtFP32 {
			changed[off+4] ^= 0x01
			break
		}
		off += g.length()
	}
	if string(changed) == string(sent[2]) {
		t.Fatal("frame 2 has no FP32 group (test bug)")
	}
	p = send("changed bytes", 2, 2, changed)
	expect("packet 2 again with a changed value", p, psInvalid)
	c := te.am.must(t, te.am.cmd(o.ID, cmdComplete))
	if c.Ack.State != osActive {
		t.Errorf("after PROGRESS INVALID to the child, sw1's context is %d (cause %d), want ACTIVE: an invalid frame is dropped and the context unchanged (7)", c.Ack.State, c.Ack.Cause)
	}
	// 8. The refused packets again ("resend later"): identical bytes,
	// RETRANSMIT set.
	for _, pid := range []uint32{4, 5} {
		if pid == 4 && !refused4 {
			continue
		}
		re := append([]byte(nil), sent[pid]...)
		re[2+33] |= dfRetransmit
		p = send("resent after NO_CREDIT", int(pid), pid, re)
		accept(int(pid))
		expect("a packet refused with NO_CREDIT, resent", p, psOK)
	}
	// 9. The rest, in order.
	pid := uint32(8)
	for j := 6; j < len(frames); j++ {
		p = send("frame", j, pid, nil)
		pid++
		accept(j)
		expect("in-order frame", p, psOK)
	}
	if p.Flags&pfComplete == 0 {
		t.Errorf("last PROGRESS flags %#x, want COMPLETE (7)", p.Flags)
	}
}

// runRootForeignFormat: under Partial Policy KULISCH, a child switch sends
// one FP32 group. The spec does not say which formats a CONTRIBUTOR
// binding without RANK admits (finding T1); this records what sw1 does.
func (te *treeEnv) runRootForeignFormat(t *testing.T) {
	o, child, st := te.rootSetup(t, fmtKulisch, 100, 4)
	if !te.activate(t, o.ID, st) {
		return
	}
	defer te.abort(t, o.ID)
	tx := newTrTx(child, classData, o)
	v := make([]float32, 100)
	for i := range v {
		v[i] = float32(i + 1)
	}
	before := te.metrics()
	from := child.nic.mark()
	d := tx.frame(0, []group{fp32Group(v)}, 0)
	tx.send(t, d)
	p, ok := tx.waitProgress(t, &from, int64(d.PacketID), 300*time.Millisecond)
	t.Logf("finding T1: FP32 group from a child switch under Partial Policy KULISCH: PROGRESS %+v (answered %v); drop counters: %s", p, ok, dropDiff(before, te.metrics()))
	if ok && p.Status == psOK {
		t.Errorf("an FP32 group on a switch CONTRIBUTOR binding under Partial Policy KULISCH was accepted (assumed: refused like a rank's group of another format, 6)")
	}
	if c := te.am.must(t, te.am.cmd(o.ID, cmdComplete)); c.Ack.State != osActive || c.Ack.MissingFrom != 0 {
		t.Errorf("after the refused frame: %+v, want ACTIVE and nothing covered", c.Ack)
	}
}

// runInexact: the child sends part of its partial and then
// ACCUMULATION_INEXACT; the root stops producing values, sends the terminal
// RESULT on every RESULT_OUT, and does not fail (6 as settled by finding
// T9: ACTIVE until the terminal frames are acknowledged, then COMPLETE).
func (te *treeEnv) runInexact(t *testing.T) {
	partial := uint8(fmtKulisch)
	if !te.covers(accKulischFixed, partial, 8) {
		partial = fmtAuto
	}
	const n = 600
	o, child, st := te.rootSetup(t, partial, n, 8)
	crx := rootResultRx(child, o)
	rs := o.rankSpec()
	if !te.activate(t, o.ID, st) {
		return
	}
	defer te.abort(t, o.ID)
	m0, mx := te.h1.mark(), child.nic.mark()
	tx := newTrTx(child, classData, o)
	before := te.metrics()
	xs := make([]trVal, 30)
	for i := range xs {
		xs[i] = trF32(float32(i + 1))
	}
	tx.send(t, tx.frame(0, []group{trKulischGroup(o.W, xs)}, 0))
	d := tx.frame(0, nil, dfLast|dfInexact)
	tx.send(t, d)
	from := mx
	p, ok := tx.waitProgress(t, &from, int64(d.PacketID), 500*time.Millisecond)
	t.Logf("the child's INEXACT frame (packet %d) was answered: %v %+v", d.PacketID, ok, p)
	in := inputs(5, n)[0]
	s := te.newSender(0, rs)
	s.send(t, s.frame(in, 0, []int{300}, 0))
	s.send(t, s.frame(in, 300, []int{300}, 0))
	time.Sleep(100 * time.Millisecond)
	c := te.am.must(t, te.am.cmd(o.ID, cmdComplete))
	t.Logf("COMPLETE after the child's ACCUMULATION_INEXACT: %+v; drop counters: %s", c.Ack, dropDiff(before, te.metrics()))
	if !ok || p.Status != psOK || c.Ack.State != osActive && c.Ack.State != osComplete || c.Ack.Cause != 0 {
		trFinding(t, fTrInexact, "a child switch's ACCUMULATION_INEXACT terminal frame was answered %v status %d, and COMPLETE says state %d cause %d; 6: answered OK, the context stays ACTIVE (COMPLETE once its terminal frames are acknowledged), no Failure Cause",
			ok, p.Status, c.Ack.State, c.Ack.Cause)
	}

	// The terminal RESULT on both RESULT_OUT bindings.
	if !crx.waitUntil(time.Second, func() bool { return crx.inexact }) {
		t.Errorf("no RESULT with ACCUMULATION_INEXACT to the child (6: the root sends RESULT with the flag on every RESULT_OUT)")
	}
	crx.report(t)
	for _, f := range crx.snapshot() {
		if f.D.Flags&dfInexact != 0 && (f.D.Flags&^(dfRetransmit|dfPush) != dfLast|dfInexact || f.D.First != 0) {
			t.Errorf("terminal RESULT to the child: flags %#x First %d, want LAST|INEXACT, First 0 (6: SHOULD be 0)", f.D.Flags, f.D.First)
		}
		if f.D.ElemCount > 0 {
			t.Errorf("RESULT values [%d,+%d) to the child of an inexact operation", f.D.First, f.D.ElemCount)
		}
	}
	isRankResult := func(f rxFrame) bool {
		return f.Eth.Dst == te.h1.mac && len(f.Payload) >= 2+dataHdr && f.Payload[1] == classResult && getIdent(f.Payload[2:]) == o.ID
	}
	fm := m0
	if f, ok := te.h1.waitFor(&fm, time.Second, func(f rxFrame) bool { return isRankResult(f) && f.Payload[2+33]&dfInexact != 0 }); !ok {
		t.Errorf("no RESULT with ACCUMULATION_INEXACT to the rank (6)")
	} else if rd, err := decodeData(f.Payload, opCtx{MTU: 1500, VecLen: n, W: o.W}); err != nil {
		t.Errorf("terminal RESULT to the rank: %v", err)
	} else if rd.SrcEP != swResEP(0) || rd.DstEP != rankResEP(0) || rd.Stream != 1 || f.Eth.Src != te.portMAC[0] {
		t.Errorf("terminal RESULT to the rank: endpoints %#x->%#x stream %d from %s", rd.SrcEP, rd.DstEP, rd.Stream, f.Eth.Src)
	}
	for _, f := range te.h1.since(m0, isRankResult) {
		if be.Uint16(f.Payload[2+30:]) > 0 {
			t.Errorf("RESULT values to the rank of an inexact operation (6: stops producing RESULT values)")
			break
		}
	}
	// Not a failure: nothing announces FAILED (6).
	failed := func(f rxFrame) bool {
		return len(f.Payload) >= 2+progressHdr && f.Payload[1] == classProgress && getIdent(f.Payload[2:]) == o.ID && f.Payload[2+38] == psFailed
	}
	if fs := te.h1.since(m0, failed); len(fs) > 0 {
		t.Errorf("%d PROGRESS FAILED to the rank after an ACCUMULATION_INEXACT (6: the context does not fail)", len(fs))
	}
}

// runRootF64Malformed: under Partial Policy KULISCH (W = 280) the child
// sends KULISCH_F64 groups that break D11, each one value changed (6: a
// subnormal, a NaN other than 0x7FF8000000000000, a value that is not a
// multiple of 2^-149, a magnitude outside W: `out_of_range`) or the
// Format Word's bits 11..0 set (`bad_format`). Each is dropped without a
// reply and counted under its reason; all carry the Packet ID of the valid
// frame sent after them, which is then accepted (a dropped frame changes
// no state). A rank's DATA with a KULISCH_F64 group is dropped
// `bad_format` and answered PROGRESS INVALID (6: like any group of a
// format other than the Input Format). The RESULT is the exactly rounded
// sum of the valid partial and the rank's input.
func (te *treeEnv) runRootF64Malformed(t *testing.T) {
	partial := te.kulischPartial(4)
	const n = 100
	o, child, st := te.rootSetup(t, partial, n, 4)
	vals, frames := trChildPartial(uint64(o.ID.Op), o.W, [][]trGroupPlan{{{fmtF64, n, 0, false}}})
	rankIn, want := rootWant(o, vals, n)
	rs := o.rankSpec()
	sink := te.newSink(0, rs)
	crx := rootResultRx(child, o)
	if !te.activate(t, o.ID, st) {
		return
	}
	defer te.abort(t, o.ID)
	tx := newTrTx(child, classData, o)
	good := tx.frame(0, frames[0], 0)
	gb := good.encode()
	const at = 7 // the value changed
	vo := 2 + dataHdr + 4 + 8*at
	w := o.W
	setBits := func(x uint64) func([]byte) { return func(b []byte) { binary.LittleEndian.PutUint64(b[vo:], x) } }
	for _, c := range []struct {
		name, reason string
		mut          func([]byte)
	}{
		{"subnormal_min", "out_of_range", setBits(0x0000000000000001)},
		{"subnormal_negative_max", "out_of_range", setBits(0x800FFFFFFFFFFFFF)},
		{"nan_payload", "out_of_range", setBits(0x7FF8000000000001)},
		{"nan_signalling", "out_of_range", setBits(0x7FF0000000000001)},
		{"nan_negative", "out_of_range", setBits(0xFFF8000000000000)},
		{"half_unit_2^-150", "out_of_range", setBits(0x3690000000000000)},
		{"not_multiple_of_unit", "out_of_range", setBits(925<<52 | 1)}, // (1 + 2^-52) x 2^-98: lowest bit 2^-150
		{"magnitude_2^(W-150)", "out_of_range", setBits(uint64(1023+w-150) << 52)},
		{"magnitude_-2^(W-150)", "out_of_range", setBits(1<<63 | uint64(1023+w-150)<<52)},
		{"max_finite_binary64", "out_of_range", setBits(0x7FEFFFFFFFFFFFFF)},
		{"format_word_bits", "bad_format", func(b []byte) { be.PutUint16(b[2+dataHdr+2:], fmtF64<<12|1) }},
		{"format_word_w", "bad_format", func(b []byte) { be.PutUint16(b[2+dataHdr+2:], fmtF64<<12|uint16(w/8)) }},
	} {
		bad := append([]byte(nil), gb...)
		c.mut(bad)
		if _, err := decodeData(bad, opCtx{MTU: 1500, VecLen: n, W: w}); err == nil || err.(*ruleError).Reason != c.reason {
			t.Fatalf("%s: this package's decoder says %v, want %s (test bug)", c.name, err, c.reason)
		}
		mb := te.metrics()
		from := child.nic.mark()
		tx.sendRaw(t, bad)
		// A timer-driven PROGRESS (Packet ID 0) to the idle stream is no
		// reply to the dropped frame (7).
		noReply(t, child.nic, from, 100*time.Millisecond, "KULISCH_F64 "+c.name, func(f rxFrame) bool {
			return tx.isProgress(f) && be.Uint32(f.Payload[2+24:]) == good.PacketID
		})
		ma := te.metrics()
		if got := drops(ma, c.reason) - drops(mb, c.reason); got != 1 {
			t.Errorf("child's KULISCH_F64 group with %s: `%s` drops +%g, want +1 (6, D11); drop counters changed: %s", c.name, c.reason, got, dropDiff(mb, ma))
		}
	}
	from := child.nic.mark()
	tx.sendRaw(t, gb)
	if p, ok := tx.waitProgress(t, &from, int64(good.PacketID), time.Second); !ok || p.Status != psOK || p.Committed != n {
		t.Errorf("the valid KULISCH_F64 frame after the malformed ones (same Packet ID): PROGRESS %+v (answered %v), want OK committed %d (a dropped frame changes no state)", p, ok, n)
	}
	// A rank sends a KULISCH_F64 group (the Input Format is FP32).
	rtx := te.rankTx(0, o)
	fx := make([]trVal, n)
	for i := range fx {
		fx[i] = trF32(rankIn[i])
	}
	rbad := rtx.frame(0, []group{trF64Group(fx)}, 0)
	mb := te.metrics()
	from = te.h1.mark()
	rtx.send(t, rbad)
	p, ok := rtx.waitProgress(t, &from, int64(rbad.PacketID), 500*time.Millisecond)
	ma := te.metrics()
	if !ok || p.Status != psInvalid || p.Committed != 0 {
		t.Errorf("rank DATA with a KULISCH_F64 group: PROGRESS %+v (answered %v), want INVALID, committed 0 (6: dropped `bad_format` like any group of a format other than the Input Format)", p, ok)
	}
	if got := drops(ma, "bad_format") - drops(mb, "bad_format"); got != 1 {
		t.Errorf("rank DATA with a KULISCH_F64 group: `bad_format` drops +%g, want +1; drop counters changed: %s", got, dropDiff(mb, ma))
	}
	// The rank's real input, Packet ID 1 again: accepted.
	s := te.newSender(0, rs)
	from = te.h1.mark()
	d := s.frame(rankIn, 0, []int{n}, 0)
	s.send(t, d)
	if p, ok := rtx.waitProgress(t, &from, int64(d.PacketID), time.Second); !ok || p.Status != psOK || p.Committed != n {
		t.Errorf("the rank's FP32 frame after its refused KULISCH_F64 frame (same Packet ID): PROGRESS %+v (answered %v), want OK committed %d", p, ok, n)
	}
	got := sink.wait(t, 3*time.Second)
	bad := 0
	for i := range want {
		if i < len(got) && math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("rank RESULT element %d: %g, want %g = round(%v + %g)", i, got[i], want[i], vals[i], rankIn[i])
			}
			bad++
		}
	}
	if !crx.waitComplete(3 * time.Second) {
		t.Errorf("child's RESULT incomplete: committed %d of %d", crx.committed(), n)
	}
	crx.report(t)
	for i := range want {
		if c := crx.vals[i]; c.U == nil || !c.equal(trF32(want[i])) {
			if bad < 3 {
				t.Errorf("child RESULT element %d: %v, want %g", i, c, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d RESULT elements differ from the exactly rounded sum of the KULISCH_F64 partial and the rank's input", bad)
	}
	c := te.am.complete(t, o.ID, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.Ack.State != osComplete || c.Ack.Completed != n {
		t.Errorf("COMPLETE: %+v, want COMPLETE, Completed %d", c.Ack, n)
	}
	te.am.expectAck(t, "RELEASE", te.am.cmd(o.ID, cmdRelease), stOK, osReleased)
}

// runRootF64Arrival: under FP32_ARRIVAL (no Kulisch width) a child
// switch's KULISCH_F64 group is refused: 5.1/6 accept KULISCH_SCALED and
// KULISCH_F64 only when the Accumulator Policy is KULISCH_FIXED and the
// Partial Policy KULISCH or AUTO (`bad_format`, answered PROGRESS INVALID).
func (te *treeEnv) runRootF64Arrival(t *testing.T) {
	partial := uint8(fmtFP32)
	if !te.covers(accFP32Arrival, partial, 4) {
		partial = fmtAuto
		if !te.covers(accFP32Arrival, partial, 4) {
			t.Skip("no capability record covers FP32 / FP32_ARRIVAL / FP32 or AUTO / FP32")
		}
	}
	const n = 100
	id := te.nextID()
	o := trNewOp(id, n, accFP32Arrival, 4)
	child := te.downLink("child on hx", 0, te.hx, te.px, te.pxIdx)
	st := stage{Ctx: trCtx(roleRoot, accFP32Arrival, partial, o, 3, 5000)}
	st.Bindings = append(te.rankBindings([]int{0}, true), child.downBindings()...)
	if !te.activate(t, id, st) {
		return
	}
	defer te.abort(t, id)
	xs := make([]trVal, n)
	for i := range xs {
		xs[i] = trF32(float32(i) + 0.5)
	}
	tx := newTrTx(child, classData, o)
	d := tx.frame(0, []group{trF64Group(xs)}, 0)
	mb := te.metrics()
	from := child.nic.mark()
	tx.send(t, d)
	p, ok := tx.waitProgress(t, &from, int64(d.PacketID), 500*time.Millisecond)
	ma := te.metrics()
	if !ok || p.Status != psInvalid || p.Committed != 0 {
		t.Errorf("KULISCH_F64 from a child switch under FP32_ARRIVAL / partial %d: PROGRESS %+v (answered %v), want INVALID committed 0 (5.1, 6)", partial, p, ok)
	}
	if got := drops(ma, "bad_format") - drops(mb, "bad_format"); got != 1 {
		t.Errorf("KULISCH_F64 under FP32_ARRIVAL: `bad_format` drops +%g, want +1; drop counters changed: %s", got, dropDiff(mb, ma))
	}
	if c := te.am.must(t, te.am.cmd(id, cmdComplete)); c.Ack.State != osActive || c.Ack.MissingFrom != 0 {
		t.Errorf("after the refused frame: %+v, want ACTIVE and nothing covered", c.Ack)
	}
}

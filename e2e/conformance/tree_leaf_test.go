package conformance

// sw1 as LEAF: two ranks below it (h1, h2), this package's switch above it
// (on hx) as its parent and the root of the tree.

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func (te *treeEnv) testLeaf(t *testing.T) {
	type tc struct {
		name     string
		acc      uint8
		partial  uint8
		in       int
		scripted bool
	}
	for _, c := range []tc{
		{"kulisch_scripted", accKulischFixed, fmtKulisch, trInWide, true},
		{"kulisch", accKulischFixed, fmtKulisch, trInMixed, false},
		{"kulisch_f64", accKulischFixed, fmtKulisch, trInNarrow, false},
		{"auto", accKulischFixed, fmtAuto, trInMixed, false},
		{"auto_wide", accKulischFixed, fmtAuto, trInWide, false},
		{"auto_f64", accKulischFixed, fmtAuto, trInNarrow, false},
		{"fp32_arrival_fp32", accFP32Arrival, fmtFP32, trInMixed, false},
		{"fp32_arrival_auto", accFP32Arrival, fmtAuto, trInMixed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !te.covers(c.acc, c.partial, 10) {
				t.Skipf("no capability record of sw1 covers FP32 / %#x / partial %d / FP32 (nothing to test)", c.acc, c.partial)
			}
			te.runLeaf(t, c.acc, c.partial, c.in, c.scripted)
		})
	}
	t.Run("push", te.runLeafPush)
}

// trPartialFormats is what a parent may receive from a child switch under a
// Partial Policy (5.1, 6): the policy's format, KULISCH_SCALED and
// KULISCH_F64 where KULISCH is (KULISCH or AUTO under KULISCH_FIXED: "every
// receiver that accepts KULISCH groups from a child switch accepts
// KULISCH_SCALED and KULISCH_F64 groups in the same place"), any lossless
// format under AUTO.
func trPartialFormats(acc, partial uint8) func(uint8) bool {
	return func(f uint8) bool {
		switch partial {
		case fmtAuto:
			if f == fmtScaled || f == fmtF64 || f == fmtKulisch {
				return acc == accKulischFixed
			}
			return f >= fmtINT8 && f <= fmtFP32
		case fmtKulisch:
			return f == fmtKulisch || (f == fmtScaled || f == fmtF64) && acc == accKulischFixed
		}
		return f == partial
	}
}

// The rank inputs of a LEAF test.
const (
	trInMixed  = iota // inputs(): 2^-20..2^20, some near-cancelling
	trInWide          // trWideInputs: sums spanning many binades
	trInNarrow        // trNarrowInputs: every exact sum fits binary64
)

func (te *treeEnv) runLeaf(t *testing.T, acc, partial uint8, inKind int, scripted bool) {
	const n = 3000 // 9 rank frames each: within a window of 10 intervals
	id := te.nextID()
	o := trNewOp(id, n, acc, 10)
	var in [2][]float32
	switch inKind {
	case trInWide:
		in = trWideInputs(uint64(id.Op), n)
	case trInNarrow:
		in = trNarrowInputs(uint64(id.Op), n)
	default:
		in = inputs(uint64(id.Op)*31, n)
	}
	up := te.upLink("parent on hx", te.hx, te.px, te.pxIdx)
	st := stage{Ctx: trCtx(roleLeaf, acc, partial, o, 2, 5000)}
	st.Bindings = append(te.rankBindings([]int{0, 1}, true), up.upBindings()...)
	rx := newTrRx("sw1's partial to its parent", up, classData, o, trPartialFormats(acc, partial))
	if scripted {
		rx.mode = trManual
		rx.lose[2] = true
	}
	rs := o.rankSpec()
	sinks := [2]*resultSink{te.newSink(0, rs), te.newSink(1, rs)}
	if !te.activate(t, id, st) {
		return
	}
	defer te.abort(t, id)
	cs := chunks(n)
	for r := 0; r < 2; r++ {
		s := te.newSender(r, rs)
		for k := range cs {
			a, _ := frameRange(cs, k)
			s.send(t, s.frame(in[r], a, cs[k], 0))
		}
	}
	if scripted {
		t.Run("window_holes_credits", func(t *testing.T) { te.leafScript(t, rx) })
		rx.setMode(trAuto)
		rx.answer(0, psOK, -1, -1)
	}
	if !rx.waitComplete(5 * time.Second) {
		t.Fatalf("sw1's partial incomplete after 5 s: committed %d of %d", rx.committed(), n)
	}
	rx.report(t)
	t.Logf("partial: %s", rx.frameStats())

	// The partial's values are the ranks' exact sum (KULISCH_FIXED) or the
	// FP32 state (FP32_ARRIVAL), whatever formats carry them.
	t.Run("partial_values", func(t *testing.T) {
		bad := 0
		for i := 0; i < n; i++ {
			want := trRankSum(acc, in[0][i], in[1][i])
			if !rx.vals[i].equal(want) {
				if bad < 3 {
					t.Errorf("partial element %d: %v, want %v (exact sum of %g and %g)", i, rx.vals[i], want, in[0][i], in[1][i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%d of %d partial elements differ", bad, n)
		}
	})
	if acc == accKulischFixed {
		// Section 6 describes prismd's KULISCH_SCALED groups: Shift = the
		// lowest set bit, B = the fewest bytes, never larger than plain.
		t.Run("scaled_groups_as_described", func(t *testing.T) {
			nScaled := 0
			for _, f := range rx.snapshot() {
				if !f.First {
					continue
				}
				for gi, g := range f.D.Groups {
					if g.Format != fmtScaled {
						continue
					}
					nScaled++
					if msg := trCheckScaled(g, o.W); msg != "" {
						t.Errorf("packet %d group %d: %s (6)", f.D.PacketID, gi, msg)
					}
				}
			}
			t.Logf("%d KULISCH_SCALED groups", nScaled)
		})
		// Section 6 [choice], prismd's default (`kulisch_partials: f64`):
		// a frame whose values binary64 holds goes as one KULISCH_F64 group
		// (under AUTO after FP32 when FP32 holds them); others are planned
		// as KULISCH_SCALED groups (checked above). Every KULISCH_F64 value
		// passed D11 with the operation's W in the receiver (rx.report) and
		// equals the exact sum (partial_values).
		t.Run("partial_encoding_choice", func(t *testing.T) {
			want := make([]trVal, n)
			for i := range want {
				want[i] = trRankSum(acc, in[0][i], in[1][i])
			}
			nF64, bad := 0, 0
			for _, f := range rx.snapshot() {
				if !f.First || f.D.ElemCount == 0 {
					continue
				}
				for _, g := range f.D.Groups {
					if g.Format == fmtF64 {
						nF64 += int(g.Count)
					}
				}
				if msg := trCheckChoice(f.D, want, partial); msg != "" {
					if bad < 5 {
						t.Errorf("packet %d: %s", f.D.PacketID, msg)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d partial frames disagree with section 6's [choice] on prismd's default encoding of exact partials", bad)
			}
			t.Logf("%d of %d partial values as KULISCH_F64", nF64, n)
		})
	}

	// Every rank stream is covered; the result path is not: COMPLETE names
	// the RESULT_IN stream from 0 (5.2).
	c := te.am.must(t, te.am.cmd(id, cmdComplete))
	t.Logf("COMPLETE before RESULT: %+v", c.Ack)
	if c.Ack.State != osActive || c.Ack.MissingStream != up.rStream || c.Ack.MissingFrom != 0 {
		t.Errorf("COMPLETE with the partial acknowledged and no RESULT: state %d, Missing Stream %#x from %d; want ACTIVE, the RESULT_IN stream %#x from 0 (5.2)",
			c.Ack.State, c.Ack.MissingStream, c.Ack.MissingFrom, up.rStream)
	}

	// The root sends the RESULT down: pairs of frames swapped, one
	// duplicate; sw1 answers each with PROGRESS flag RESULT.
	res := make([]float32, n)
	for i := range res {
		res[i] = rx.vals[i].round32()
	}
	te.sendResult(t, up, o, res)
	for r := 0; r < 2; r++ {
		got := sinks[r].wait(t, 3*time.Second)
		bad := 0
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(res[i]) {
				if bad < 3 {
					t.Errorf("rank %d RESULT element %d: %#08x, the root sent %#08x (a relay copies RESULT values)", r, i, math.Float32bits(got[i]), math.Float32bits(res[i]))
				}
				bad++
			}
			if want := exactSum(in[0][i], in[1][i]); math.Float32bits(res[i]) != math.Float32bits(want) && bad < 3 {
				t.Errorf("element %d: the partial rounds to %g, the exactly rounded sum is %g", i, res[i], want)
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("rank %d: %d RESULT elements differ", r, bad)
		}
	}
	c = te.am.complete(t, id, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.Ack.State != osComplete || c.Ack.Completed != n || c.Ack.MissingStream != 0xFFFF || c.Ack.MissingFrom != 0 {
		t.Errorf("COMPLETE after RESULT: %+v, want COMPLETE, Completed %d, Missing 0xFFFF/0 (5)", c.Ack, n)
	}
	te.am.expectAck(t, "RELEASE", te.am.cmd(id, cmdRelease), stOK, osReleased)
}

// sendResult plays the root sending res down the RESULT_IN stream of up,
// one frame at a time, pairs swapped, with one identical repeat; it checks
// every PROGRESS sw1 answers with (7).
func (te *treeEnv) sendResult(t *testing.T, up *trLink, o trOp, res []float32) {
	t.Helper()
	tx := newTrTx(up, classResult, o)
	type fr struct{ a, b int }
	var frs []fr
	for a := 0; a < len(res); a += 362 { // two FP32 groups: 4 + 4 + 362 x 4 + 42 = 1498 bytes
		frs = append(frs, fr{a, min(a+362, len(res))})
	}
	order := make([]int, 0, len(frs))
	for k := 0; k < len(frs); k += 2 {
		if k+1 < len(frs) {
			order = append(order, k+1)
		}
		order = append(order, k)
	}
	have := make([]bool, len(res))
	var first []byte
	var firstID uint32
	for i, k := range order {
		a, b := frs[k].a, frs[k].b
		m := (a + b) / 2
		d := tx.frame(uint32(a), []group{fp32Group(res[a:m]), fp32Group(res[m:b])}, 0)
		from := up.nic.mark()
		raw := tx.send(t, d)
		for j := a; j < b; j++ {
			have[j] = true
		}
		c := uint32(0)
		for int(c) < len(have) && have[c] {
			c++
		}
		var holes []hole
		hi := 0
		for j := len(have) - 1; j >= 0; j-- {
			if have[j] {
				hi = j + 1
				break
			}
		}
		for j := int(c); j < hi; {
			if have[j] {
				j++
				continue
			}
			e := j
			for e < hi && !have[e] {
				e++
			}
			holes = append(holes, hole{uint32(j), uint32(e)})
			j = e
		}
		p, ok := tx.waitProgress(t, &from, int64(d.PacketID), time.Second)
		if !ok {
			t.Fatalf("no PROGRESS (flag RESULT) for RESULT packet %d [%d,%d) (7)", d.PacketID, a, b)
		}
		if p.Status != psOK || p.Committed != c || !holesEqual(p.Holes, holes) {
			t.Errorf("RESULT packet %d [%d,%d): PROGRESS status %d committed %d holes %v, want OK %d %v", d.PacketID, a, b, p.Status, p.Committed, p.Holes, c, holes)
		}
		if i == 0 {
			first, firstID = raw, d.PacketID
		}
		if i == 1 {
			dup := append([]byte(nil), first...)
			dup[2+33] |= dfRetransmit
			from := up.nic.mark()
			tx.sendRaw(t, dup)
			p, ok := tx.waitProgress(t, &from, int64(firstID), time.Second)
			if !ok || p.Status != psDuplicate || p.Committed != c {
				t.Errorf("identical repeat of RESULT packet %d: PROGRESS %+v (found %v), want DUPLICATE, committed %d (6, 7)", firstID, p, ok, c)
			}
		}
	}
}

// leafScript plays a parent that loses packet 2, grants few credits and
// then opens the window step by step (7). rx is in manual mode.
func (te *treeEnv) leafScript(t *testing.T, rx *trRx) {
	o := rx.op
	firsts := func(after time.Time) (ids []uint32, bytes int) {
		for _, f := range rx.snapshot() {
			if f.First && f.At.After(after) {
				ids = append(ids, f.D.PacketID)
				bytes += 14 + 2 + dataHdr + int(be.Uint16(f.Raw[2+34:]))
			}
		}
		return
	}
	resends := func(after time.Time, want func(uint32) bool) []uint32 {
		var r []uint32
		for _, f := range rx.snapshot() {
			if !f.First && f.At.After(after) && want(f.D.PacketID) {
				r = append(r, f.D.PacketID)
			}
		}
		return r
	}
	// 1. Nothing acknowledged (packet 2 is "lost" throughout): at most
	// Window Intervals frames and Window Bytes bytes in flight, the values
	// of sw1's own STAGE; timer resends one frame per expiry with backoff.
	for last := uint32(0); ; {
		time.Sleep(150 * time.Millisecond)
		if m := rx.maxID(); m == last {
			break
		} else {
			last = m
		}
	}
	ids, bytes := firsts(time.Time{})
	var seq []string
	snap := rx.snapshot()
	for _, f := range snap {
		seq = append(seq, fmt.Sprintf("%v%d@%v", map[bool]string{true: "", false: "re"}[f.First], f.D.PacketID, f.At.Sub(snap[0].At).Round(time.Millisecond)))
	}
	t.Logf("before any PROGRESS: %d frames, %d bytes (window %d / %d): %v", len(ids), bytes, o.WI, o.WB, seq)
	if len(ids) > int(o.WI) || bytes > int(o.WB) {
		t.Errorf("before the first PROGRESS sw1 sent %d frames of %d bytes; the window is %d intervals / %d bytes (7)", len(ids), bytes, o.WI, o.WB)
	}
	if len(ids) < 3 {
		t.Fatalf("only %d partial frames before any PROGRESS; the script needs 3", len(ids))
	}
	t.Run("timer_resends_oldest", func(t *testing.T) {
		// 7 [choice]: each expiry resends the unacknowledged frame whose
		// latest transmission is the oldest: packets 1, 2, 3... in turn.
		r := resends(time.Time{}, func(uint32) bool { return true })
		for i, id := range r {
			if id != uint32(i+1) {
				trFinding(t, fTrResendOldest, "with nothing acknowledged sw1 resent packets %v on successive timer expiries; 7: the frame whose latest transmission is the oldest each time (1, 2, 3, ...)", r)
				break
			}
		}
	})
	k := rx.maxID()

	// 2. PROGRESS for packet k reports 1 and 3..k held, a hole at 2, and
	// credit for one interval. Evidence (a) of 7: packet 2 is resent; 3..k
	// never are.
	tHole := time.Now()
	rx.mu.Lock()
	delete(rx.lose, 2) // packet 2 arrives from now on
	rx.mu.Unlock()
	p := rx.answer(k, psOK, 1, 1514)
	t.Logf("PROGRESS packet %d: committed %d holes %v, credits 1 / 1514", k, p.Committed, p.Holes)
	if !rx.waitUntil(time.Second, func() bool { _, ok := rx.keys[2]; return ok }) {
		t.Errorf("packet 2 not resent within 1 s of a PROGRESS reporting packets 3..%d held above its hole (7: a later frame reported received is evidence)", k)
	}
	time.Sleep(150 * time.Millisecond)
	// A timer resend already on its way when the PROGRESS was sent is not
	// a violation: 20 ms of grace.
	if r := resends(tHole.Add(20*time.Millisecond), func(id uint32) bool { return id >= 3 && id <= k }); len(r) > 0 {
		t.Errorf("sw1 resent packets %v more than 20 ms after a PROGRESS reported them held above the hole (7 [choice]: never resent)", r)
	}
	t.Run("resend_within_credits", func(t *testing.T) {
		// 7 (settled, finding T5): the frame that closes the lowest hole
		// needs no credit; new frames share the 1 interval / 1514 bytes.
		if ids, b := firsts(tHole); len(ids) > 1 || b > 1514 {
			trFinding(t, fTrHoleCredits, "after a PROGRESS granting 1 interval / 1514 bytes with a hole, sw1 resent packet 2 and sent new packets %v (%d bytes), more than the credit", ids, b)
		}
	})

	// 3. Everything acknowledged, credits 0: nothing may be sent.
	p = rx.answer(rx.maxID(), psOK, 0, 0)
	rx.mu.Lock()
	want := rx.ranges[rx.nextFirst-1][1]
	rx.mu.Unlock()
	if p.Committed < want {
		t.Errorf("our committed is %d, want at least %d (test bug)", p.Committed, want)
	}
	t3 := time.Now()
	time.Sleep(200 * time.Millisecond)
	t.Run("zero_credits_honoured", func(t *testing.T) {
		if ids, b := firsts(t3); len(ids) > 0 {
			var at []time.Duration
			for _, f := range rx.snapshot() {
				if f.At.After(t3) {
					at = append(at, f.At.Sub(t3).Round(time.Millisecond))
				}
			}
			// 7 [choice]: a zero-window probe, one frame, no sooner than
			// the retransmission timeout (20 ms minimum at prismd).
			if len(ids) > 1 || len(at) > 0 && at[0] < 15*time.Millisecond {
				trFinding(t, fTrZeroCredits, "after a PROGRESS acknowledging every frame with no credit, sw1 sent new packets %v (%d bytes; frames at %v after it); 7: at most one zero-window probe, after the retransmission timeout", ids, b, at)
			}
		}
	})

	// 4. A window update (Packet ID 0) acknowledging everything and
	// granting 2 intervals: 1 or 2 new frames.
	t4 := time.Now()
	rx.answer(0, psOK, 2, int64(o.WB))
	m4 := rx.maxID()
	rx.waitUntil(300*time.Millisecond, func() bool { return rx.nextFirst-1 >= m4+2 })
	time.Sleep(100 * time.Millisecond)
	ids, _ = firsts(t4)
	t.Logf("after a window update of 2 intervals: new packets %v", ids)
	if len(ids) > 2 || len(ids) == 0 && rx.committed() < o.VecLen {
		t.Errorf("a window update granting 2 intervals brought new packets %v, want 1 or 2 (7)", ids)
	}

	// 5. Byte credits: intervals plenty, 1600 bytes: at most 1600 bytes of
	// new frames.
	t5 := time.Now()
	rx.answer(rx.maxID(), psOK, int(o.WI), 1600)
	time.Sleep(200 * time.Millisecond)
	ids, bytes = firsts(t5)
	t.Logf("after 1600 bytes of credit: new packets %v, %d bytes", ids, bytes)
	if bytes > 1600 {
		t.Errorf("with Byte Credits 1600 sw1 sent %d bytes in packets %v (7: frame bytes count from the Ethernet header)", bytes, ids)
	}
	if len(ids) == 0 && rx.committed() < o.VecLen {
		t.Errorf("no new packet after a PROGRESS granting %d intervals and 1600 bytes", o.WI)
	}
}

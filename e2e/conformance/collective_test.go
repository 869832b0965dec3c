package conformance

import (
	"math"
	"testing"
	"time"
)

// waitProgress waits for the PROGRESS sw1 sends rank r for DATA Packet ID
// pkt of op o, and checks it (checkProgress).
func (e *env) waitProgress(t *testing.T, from *int, o opSpec, r int, pkt uint32, d time.Duration) (progress, bool) {
	t.Helper()
	f, ok := e.rankNIC(r).waitFor(from, d, func(f rxFrame) bool {
		return e.isProgressFor(o.ID, r)(f) && be.Uint32(f.Payload[2+24:]) == pkt
	})
	if !ok {
		return progress{}, false
	}
	return e.checkProgress(t, f, o, r), true
}

func holesEqual(a, b []hole) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runCollective stages and commits o on sw1 (SINGLE), sends both ranks'
// vectors as DATA, answers RESULT with PROGRESS, checks the values against
// the exact sum and every ACK/PROGRESS against sections 5-7, then COMPLETE
// and RELEASE. stepwise sends rank 0's first frames one at a time out of
// order with a duplicate and checks each PROGRESS exactly.
func (e *env) runCollective(t *testing.T, o opSpec, stepwise bool) {
	o = e.defaults(o)
	in := inputs(uint64(o.ID.Op)*7919+uint64(o.Acc), int(o.VecLen))
	st := e.stageOf(o)
	sinks := map[int]*resultSink{}
	for _, r := range o.ResultTo {
		sinks[r] = e.newSink(r, o)
	}
	marks := [2]int{e.h1.mark(), e.h2.mark()}
	before := e.metrics()

	r := e.am.expectAck(t, "STAGE", control{ID: o.ID, Cmd: cmdStage, Body: st.encode()}, stOK, osStaged)
	if r.Ack.Completed != 0 || r.Ack.Cause != 0 {
		t.Errorf("STAGE ACK: completed %d cause %d, want 0 and 0 (5.2)", r.Ack.Completed, r.Ack.Cause)
	}
	e.am.expectAck(t, "COMMIT", e.am.cmd(o.ID, cmdCommit), stOK, osActive)
	e.am.expectAck(t, "COMMIT again (ACTIVE is idempotent, 5)", e.am.cmd(o.ID, cmdCommit), stOK, osActive)

	cs := chunks(int(o.VecLen))
	if len(cs) < 6 {
		t.Fatalf("vector %d gives %d frames; the test wants at least 6", o.VecLen, len(cs))
	}
	snd := [2]*sender{e.newSender(0, o), e.newSender(1, o)}
	ranges := [2]map[uint32][2]uint32{{}, {}}
	build := func(r, k int, flags uint8) ([]byte, dataFrame) {
		a, _ := frameRange(cs, k)
		d := snd[r].frame(in[r], a, cs[k], flags)
		ranges[r][d.PacketID] = [2]uint32{d.First, d.First + uint32(sum(cs[k]))}
		return d.encode(), d
	}
	sendK := func(r, k int) []byte {
		b, d := build(r, k, 0)
		snd[r].send(t, d)
		return b
	}
	next := 0 // rank 0's frames already sent: 0..next-1 (after the stepwise part)
	if stepwise {
		pm := e.h1.mark()
		a1, _ := frameRange(cs, 1)
		a2, b2 := frameRange(cs, 2)
		_, b0 := frameRange(cs, 0)
		// Frame 2 first (Packet ID 1): nothing committed, hole [0, start of frame 2).
		f2 := sendK(0, 2)
		p, ok := e.waitProgress(t, &pm, o, 0, 1, time.Second)
		if !ok {
			t.Fatal("no PROGRESS for rank 0 packet 1 (7: after each accepted frame, or coalesced within 1 ms)")
		}
		if p.Status != psOK || p.Committed != 0 || !holesEqual(p.Holes, []hole{{0, uint32(a2)}}) {
			t.Errorf("after [%d,%d) alone: PROGRESS status %d committed %d holes %v, want OK 0 [[0 %d]]", a2, b2, p.Status, p.Committed, p.Holes, a2)
		}
		credits1 := p
		// Frame 0 (Packet ID 2): committed to the end of frame 0, hole = frame 1.
		sendK(0, 0)
		p, ok = e.waitProgress(t, &pm, o, 0, 2, time.Second)
		if !ok {
			t.Fatal("no PROGRESS for rank 0 packet 2")
		}
		if p.Status != psOK || p.Committed != uint32(b0) || !holesEqual(p.Holes, []hole{{uint32(a1), uint32(a2)}}) {
			t.Errorf("after frame 0: PROGRESS status %d committed %d holes %v, want OK %d [[%d %d]]", p.Status, p.Committed, p.Holes, b0, a1, a2)
		}
		// Frame 1 (Packet ID 3) fills the hole.
		f1 := sendK(0, 1)
		p, ok = e.waitProgress(t, &pm, o, 0, 3, time.Second)
		if !ok {
			t.Fatal("no PROGRESS for rank 0 packet 3")
		}
		if p.Status != psOK || p.Committed != uint32(b2) || len(p.Holes) != 0 {
			t.Errorf("after frame 1: PROGRESS status %d committed %d holes %v, want OK %d none", p.Status, p.Committed, p.Holes, b2)
		}
		credits3 := p
		// An identical duplicate of Packet ID 3, flagged RETRANSMIT (informational,
		// excluded from the comparison): PROGRESS DUPLICATE, nothing applied.
		dm := e.metrics()
		dup := append([]byte(nil), f1...)
		dup[2+33] |= dfRetransmit
		if err := e.h1.send(e.portMAC[0], dup); err != nil {
			t.Fatal(err)
		}
		p, ok = e.waitProgress(t, &pm, o, 0, 3, time.Second)
		if !ok {
			t.Fatal("no PROGRESS for the duplicate of packet 3 (6: answered with PROGRESS DUPLICATE)")
		}
		if p.Status != psDuplicate || p.Committed != uint32(b2) {
			t.Errorf("duplicate: PROGRESS status %d committed %d, want DUPLICATE(1) %d", p.Status, p.Committed, b2)
		}
		got := e.specDropDelta(dm, "duplicate", 1, 300*time.Millisecond)
		finding(t, "duplicate_counted", fDropLabels, got == 1,
			"an identical repeat is counted under `duplicate` where section 10 says (%v); prismd's drop counters changed: %s", got, dropDiff(dm, e.metrics()))
		// Credits (7): absolute room = window minus what accepted frames
		// above the committed element hold, a frame counted from the first
		// byte of its Ethernet header (f2 is what follows that header),
		// minus the interval and full frame kept for the frame that closes
		// the hole while one is open.
		wantI1, wantB1 := o.WI-2, o.WB-uint32(14+len(f2))-(14+1500)
		finding(t, "credits_absolute", fCredits,
			credits1.IntervalCredits == wantI1 && credits1.ByteCredits == wantB1 &&
				credits3.IntervalCredits == o.WI && credits3.ByteCredits == o.WB,
			"with one %d-byte frame held above a hole prismd granted %d intervals / %d bytes (assumed %d / %d); with nothing held %d / %d (assumed %d / %d)",
			len(f2), credits1.IntervalCredits, credits1.ByteCredits, wantI1, wantB1, credits3.IntervalCredits, credits3.ByteCredits, o.WI, o.WB)
		next = 3
	}
	// The rest: rank 0 in reverse order, rank 1 pairwise swapped, interleaved.
	var order1 []int
	for k := 0; k < len(cs); k += 2 {
		if k+1 < len(cs) {
			order1 = append(order1, k+1)
		}
		order1 = append(order1, k)
	}
	k0 := len(cs) - 1
	for i := 0; k0 >= next || i < len(order1); i++ {
		if k0 >= next {
			sendK(0, k0)
			k0--
		}
		if i < len(order1) {
			sendK(1, order1[i])
		}
	}
	// Every rank's stream becomes fully committed.
	for rk := 0; rk < 2; rk++ {
		from := marks[rk]
		_, ok := e.rankNIC(rk).waitFor(&from, 3*time.Second, func(f rxFrame) bool {
			return e.isProgressFor(o.ID, rk)(f) && be.Uint32(f.Payload[2+28:]) == o.VecLen
		})
		if !ok {
			t.Errorf("rank %d: no PROGRESS with Committed Element %d", rk, o.VecLen)
		}
	}
	// Every PROGRESS for DATA: valid, monotonic, holes consistent with the
	// frame it names (7: the list is complete up to at least that frame's end).
	for rk := 0; rk < 2; rk++ {
		last := uint32(0)
		n := 0
		for _, f := range e.rankNIC(rk).since(marks[rk], e.isProgressFor(o.ID, rk)) {
			p := e.checkProgress(t, f, o, rk)
			n++
			if p.Committed < last {
				t.Errorf("rank %d: Committed Element went back from %d to %d (7: monotonic)", rk, last, p.Committed)
			}
			last = p.Committed
			if p.Status != psOK && p.Status != psDuplicate {
				t.Errorf("rank %d: PROGRESS status %d for packet %d", rk, p.Status, p.PacketID)
				continue
			}
			if p.PacketID == 0 {
				continue
			}
			rg, ok := ranges[rk][p.PacketID]
			if !ok {
				t.Errorf("rank %d: PROGRESS names packet %d, never sent", rk, p.PacketID)
				continue
			}
			for _, h := range p.Holes {
				if h.Start < rg[1] && rg[0] < h.End {
					t.Errorf("rank %d: PROGRESS for packet %d [%d,%d) lists hole [%d,%d) over it", rk, p.PacketID, rg[0], rg[1], h.Start, h.End)
				}
			}
			if p.Committed < rg[1] && len(p.Holes) == 0 {
				t.Errorf("rank %d: PROGRESS for packet %d [%d,%d): committed %d and no holes, so the frame is not held (7)", rk, p.PacketID, rg[0], rg[1], p.Committed)
			}
		}
		if last != o.VecLen {
			t.Errorf("rank %d: last PROGRESS committed %d of %d", rk, last, o.VecLen)
		}
		t.Logf("rank %d: %d PROGRESS for %d DATA frames", rk, n, len(ranges[rk]))
	}
	// RESULT on the ranks with a RESULT_OUT binding equals the exact sum.
	for _, rk := range o.ResultTo {
		got := sinks[rk].wait(t, 3*time.Second)
		bad := 0
		for i := range got {
			want := exactSum(in[0][i], in[1][i])
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad < 3 {
					t.Errorf("rank %d element %d: %g (%#08x), exact sum %g (%#08x)", rk, i, got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("rank %d: %d of %d elements differ from the exactly rounded sum", rk, bad, len(got))
		}
	}
	for rk := 0; rk < 2; rk++ {
		if sinks[rk] == nil {
			n := len(e.rankNIC(rk).since(marks[rk], func(f rxFrame) bool {
				return len(f.Payload) > 2 && f.Payload[1] == classResult && getIdent(f.Payload[2:]) == o.ID
			}))
			if n > 0 {
				t.Errorf("rank %d has no RESULT_OUT binding but received %d RESULT frames", rk, n)
			}
		}
	}
	// The node completes by itself once every input is covered and every
	// RESULT acknowledged (5).
	c := e.am.complete(t, o.ID, 2*time.Second, func(r reply) bool { return r.Ack.State == osComplete })
	if c.C.Status != stOK || c.Ack.State != osComplete || c.Ack.Completed != o.VecLen ||
		c.Ack.MissingStream != 0xFFFF || c.Ack.MissingFrom != 0 || c.Ack.Cause != 0 {
		t.Errorf("COMPLETE: status %d %+v, want OK, COMPLETE, Completed %d, Missing 0xFFFF/0, cause 0", c.C.Status, c.Ack, o.VecLen)
	}
	if d := dropDiff(before, e.metrics()); stepwise {
		t.Logf("drop counters during the operation: %s", d)
	}
	e.am.expectAck(t, "RELEASE", e.am.cmd(o.ID, cmdRelease), stOK, osReleased)

	// After RELEASE: the same identity again is STALE_GENERATION (3).
	r = e.am.must(t, control{ID: o.ID, Cmd: cmdStage, Body: st.encode()})
	if r.C.Status != stStaleGen {
		t.Errorf("STAGE of the released identity (same generations): status %d state %d, want STALE_GENERATION(5) (3)", r.C.Status, r.Ack.State)
	}
	// DATA for it is answered PROGRESS UNKNOWN_OPERATION (7).
	pm := e.h1.mark()
	b, d := build(0, 0, 0)
	if err := e.h1.send(e.portMAC[0], b); err != nil {
		t.Fatal(err)
	}
	if p, ok := e.waitProgress(t, &pm, o, 0, d.PacketID, time.Second); !ok {
		t.Errorf("no PROGRESS UNKNOWN_OPERATION for DATA of a released operation (7)")
	} else if p.Status != psUnknownOp || p.Committed != 0 || p.IntervalCredits != 0 || p.ByteCredits != 0 || len(p.Holes) != 0 || p.Flags != 0 {
		t.Errorf("DATA of a released operation: PROGRESS %+v, want UNKNOWN_OPERATION, committed 0, no credits, no holes, no flags", p)
	}
	// COMPLETE of the released identity: OK with the state it was retired
	// as (5: a node remembers the generations it retired).
	r = e.am.must(t, e.am.cmd(o.ID, cmdComplete))
	finding(t, "complete_after_release", fAfterRelease, r.C.Status == stOK && r.Ack.State == osReleased,
		"COMPLETE after RELEASE answered status %d state %d; assumed OK/RELEASED as the Expiry paragraph says for a retired generation (5 also says a command for an unknown identity is BAD_STATE/NONE)", r.C.Status, r.Ack.State)
}

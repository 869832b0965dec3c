package conformance

import (
	"testing"
	"time"
)

// checkUnknownOp waits at host k for the PROGRESS UNKNOWN_OPERATION that
// answers frame d (section 7: to the frame's source MAC out of its ingress
// port, the frame's Stream and Packet ID, endpoints swapped, Committed 0,
// no credits, no holes, flag RESULT for a RESULT).
func (b *bmEnv) checkUnknownOp(t *testing.T, k int, from *int, d dataFrame) {
	t.Helper()
	f, ok := b.hosts[k].waitFor(from, 300*time.Millisecond, func(f rxFrame) bool {
		p := f.Payload
		return f.Eth.Dst == b.hosts[k].mac && len(p) >= 2+progressHdr && p[1] == classProgress && getIdent(p[2:]) == d.ID
	})
	if !ok {
		t.Errorf("h%d: no PROGRESS UNKNOWN_OPERATION for class %d of a retired BITMAP context (3, 7)", k+1, d.Class)
		return
	}
	p, err := decodeProgress(f.Payload, 1500, 0)
	wantFlags := uint8(0)
	if d.Class == classResult {
		wantFlags = pfResult
	}
	if err != nil || f.Eth.Src != b.port[k] || p.Status != psUnknownOp || p.Stream != d.Stream || p.PacketID != d.PacketID ||
		p.SrcEP != d.DstEP || p.DstEP != d.SrcEP || p.Committed != 0 || p.IntervalCredits != 0 || p.ByteCredits != 0 ||
		len(p.Holes) != 0 || p.Flags != wantFlags {
		t.Errorf("h%d: PROGRESS %+v from %s (%v); want UNKNOWN_OPERATION from %s, stream %d, packet %d, endpoints %#x->%#x, 0 / no credits / no holes, flags %#x (7)",
			k+1, p, f.Eth.Src, err, b.port[k], d.Stream, d.PacketID, d.DstEP, d.SrcEP, wantFlags)
	}
}

// testLifecycle: the CONTROL state machine of a BITMAP context (5, 8.1).
func (b *bmEnv) testLifecycle(t *testing.T) {
	n := 8
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}

	t.Run("release_active_idle", func(t *testing.T) {
		s := b.activate(t, bmSpec{Timeout: 400})
		b.am.expectAck(t, "COMMIT of an ACTIVE context (idempotent)", b.am.cmd(s.ID, cmdCommit), stOK, osActive)
		b.am.expectAck(t, "STAGE of an installed identity under another transaction", control{ID: s.ID, Cmd: cmdStage, Body: b.bmStage(s).encode()}, stBadState, osActive)
		from := b.hosts[0].mark()
		for k := 1; k <= 3; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encList, 0, 0x71, 0, bmMasks[k]...), v[k]), nil)
		}
		if _, ok := b.waitEmitted(s, &from, 0x71, time.Second); !ok {
			t.Fatal("no aggregate")
		}
		b.am.expectAck(t, "RELEASE of an ACTIVE BITMAP context with nothing open (8.1)", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
		b.am.expectAck(t, "COMPLETE of a released identity", b.am.cmd(s.ID, cmdComplete), stOK, osReleased)
		for _, c := range []uint8{cmdCommit, cmdRelease} {
			r := b.am.must(t, b.am.cmd(s.ID, c))
			if r.C.Status != stStaleGen {
				t.Errorf("command %d of a released generation: status %d, want STALE_GENERATION (5)", c, r.C.Status)
			}
		}
		r := b.am.must(t, control{ID: s.ID, Cmd: cmdStage, Body: b.bmStage(s).encode()})
		if r.C.Status != stStaleGen {
			t.Errorf("STAGE of a released generation: status %d, want STALE_GENERATION (3)", r.C.Status)
		}
		// Frames of the retired context: answered UNKNOWN_OPERATION, never
		// forwarded or replicated.
		m := b.marks()
		before := b.metrics()
		d := b.contribution(s, 1, bmExt(encList, 0, 0x72, 0, bmMasks[1]...), v[1])
		b.send(t, 1, d, nil)
		from1 := m[1]
		b.checkUnknownOp(t, 1, &from1, d)
		rs := b.multicast(s, bmExt(encList, 0, 0x73, 0, 0, 64), v[1])
		b.send(t, 0, rs, nil)
		from0 := m[0]
		b.checkUnknownOp(t, 0, &from0, rs)
		time.Sleep(50 * time.Millisecond)
		for k := 0; k < 4; k++ {
			if xs := append(b.collect(s, k, m[k], classData), b.collect(s, k, m[k], classResult)...); len(xs) > 0 {
				t.Errorf("h%d got DATA/RESULT of a released context", k+1)
			}
		}
		if dd := bmDelta(before, b.metrics(), `prismd_engine_drops_total{reason="unknown_operation"}`); dd != 2 {
			t.Errorf("2 frames of a released context: unknown_operation grew by %v, want 2 (10)", dd)
		}
		// A strictly greater generation is a new context.
		s2 := s
		s2.ID.OpGen++
		b.am.expectAck(t, "STAGE of the next generation", control{ID: s2.ID, Cmd: cmdStage, Body: b.bmStage(s2).encode()}, stOK, osStaged)
		b.am.expectAck(t, "ABORT of a STAGED context", b.am.cmd(s2.ID, cmdAbort), stOK, osAborted)
	})

	t.Run("release_with_open_aggregation", func(t *testing.T) {
		s := b.activate(t, bmSpec{Timeout: 300})
		h := b.hosts[0].mark()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x74, 0, bmMasks[1]...), v[1]), nil)
		time.Sleep(30 * time.Millisecond)
		b.am.expectAck(t, "RELEASE of an ACTIVE BITMAP context with an open aggregation (8.1)", b.am.cmd(s.ID, cmdRelease), stBadState, osActive)
		b.am.expectAck(t, "ABORT of an ACTIVE BITMAP context with an open aggregation (5: any state)", b.am.cmd(s.ID, cmdAbort), stOK, osAborted)
		b.am.expectAck(t, "COMPLETE of an aborted identity", b.am.cmd(s.ID, cmdComplete), stOK, osAborted)
		time.Sleep(time.Duration(s.Timeout)*time.Millisecond + 150*time.Millisecond)
		if xs := b.emittedFor(s, h, 0x74); len(xs) > 0 {
			t.Errorf("an aggregation ABORT discarded still sent a %s DATA up (P-BM %v)", map[bool]string{true: "PARTIAL", false: "complete"}[xs[0].D.Ext.XFlags&xfPartial != 0], xs[0].Set)
		}
	})

	t.Run("release_after_partial", func(t *testing.T) {
		s := b.activate(t, bmSpec{Timeout: 300})
		from := b.hosts[0].mark()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x75, 0, bmMasks[1]...), v[1]), nil)
		x, ok := b.waitEmitted(s, &from, 0x75, 2*time.Second)
		if !ok {
			t.Fatal("no PARTIAL")
		}
		b.checkEmitted(t, s, x, 0x75, bmMasks[1], bmSum(v[1]), true)
		// The aggregation is closed once emitted (finding B12).
		r := b.am.must(t, b.am.cmd(s.ID, cmdRelease))
		if r.C.Status != stOK || r.Ack.State != osReleased {
			t.Errorf("(finding B%d) RELEASE after the only aggregation went up as PARTIAL: status %d state %d, want OK RELEASED", bmFRelease, r.C.Status, r.Ack.State)
			b.abort(t, s)
		}
	})

	t.Run("staged_takes_nothing", func(t *testing.T) {
		s := b.defaults(bmSpec{Timeout: 400})
		b.am.expectAck(t, "STAGE", control{ID: s.ID, Cmd: cmdStage, Body: b.bmStage(s).encode()}, stOK, osStaged)
		m := b.marks()
		before := b.metrics()
		for k := 1; k <= 3; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encList, 0, 0x76, 0, bmMasks[k]...), v[k]), nil)
		}
		b.send(t, 0, b.multicast(s, bmExt(encList, 0, 0x77, 0, 0, 64, 200), v[1]), nil)
		time.Sleep(100 * time.Millisecond)
		after := b.metrics()
		if dd := bmDelta(before, after, bmSeries("not_active")); dd != 4 {
			t.Errorf("4 frames of a STAGED BITMAP context: %s grew by %v, want 4 (6, 10) (%s)", bmSeries("not_active"), dd, dropDiff(before, after))
		}
		for k := 0; k < 4; k++ {
			fs := b.hosts[k].since(m[k], func(f rxFrame) bool {
				p := f.Payload
				return f.Eth.Dst == b.hosts[k].mac && len(p) >= 2+dataHdr && p[1] != classControl && getIdent(p[2:]) == s.ID
			})
			if len(fs) > 0 {
				t.Errorf("h%d got %d frames (first class %d) for a STAGED context (6: not_active, no answer)", k+1, len(fs), fs[0].Payload[1])
			}
		}
		c := b.am.expectAck(t, "COMPLETE of a STAGED BITMAP context", b.am.cmd(s.ID, cmdComplete), stOK, osStaged)
		if c.Ack.Completed != 0 {
			t.Errorf("COMPLETE of a STAGED context: Completed Elements %d, want 0", c.Ack.Completed)
		}
		b.am.expectAck(t, "RELEASE of a STAGED BITMAP context", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
	})
}

package conformance

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// waitEmitted waits at h1 for the DATA sw1 emits on its PARENT binding for
// token.
func (b *bmEnv) waitEmitted(s bmSpec, from *int, token uint64, d time.Duration) (bmRx, bool) {
	return b.waitOp(s, 0, from, classData, d, token)
}

// emittedFor returns every DATA for token h1 received since mark.
func (b *bmEnv) emittedFor(s bmSpec, mark int, token uint64) []bmRx {
	var r []bmRx
	for _, x := range b.collect(s, 0, mark, classData) {
		if x.token() == token {
			r = append(r, x)
		}
	}
	return r
}

// checkEmitted checks a DATA sw1 sent up its PARENT binding (8.7): the
// binding mirrored, from sw1's port MAC toward h1, EXT with the Token and
// the context's Tenant, PARTIAL as expected and no INSTALL, P-BM wantSet,
// values the exact sum want (nil: zero groups).
func (b *bmEnv) checkEmitted(t *testing.T, s bmSpec, x bmRx, token uint64, wantSet []uint32, want []*big.Float, partial bool) {
	t.Helper()
	if x.Err != nil {
		t.Errorf("token %#x: emitted DATA fails the receiver rules: %v", token, x.Err)
		return
	}
	d := x.D
	if x.F.Eth.Src != b.port[0] || d.SrcEP != bmSwParent || d.DstEP != bmHostParent || d.Stream != 1 {
		t.Errorf("token %#x: emitted DATA from %s endpoints %#x->%#x stream %d, want %s %#x->%#x stream 1 (5.1: PARENT binding mirrored, 6)",
			token, x.F.Eth.Src, d.SrcEP, d.DstEP, d.Stream, b.port[0], bmSwParent, bmHostParent)
	}
	if x.F.Payload[0] != version10 {
		t.Errorf("token %#x: version %#x", token, x.F.Payload[0])
	}
	if d.Ext == nil {
		t.Errorf("token %#x: emitted DATA without extension", token)
		return
	}
	if d.Ext.Token != token || d.Ext.Tenant != s.Tenant {
		t.Errorf("token %#x: emitted token %#x tenant %d, want %#x %d (8.2)", token, d.Ext.Token, d.Ext.Tenant, token, s.Tenant)
	}
	if (d.Ext.XFlags&xfPartial != 0) != partial || d.Ext.XFlags&xfInstall != 0 {
		t.Errorf("token %#x: XFlags %#x, want PARTIAL=%v and no INSTALL (8.7)", token, d.Ext.XFlags, partial)
	}
	if !bmEqual(x.Set, wantSet) {
		t.Errorf("token %#x: P-BM %v, want %v (8.7)", token, x.Set, wantSet)
	}
	if want == nil {
		if len(d.Groups) != 0 {
			t.Errorf("token %#x: an aggregate of zero-group ACKs carries %d groups (8.9: no payload)", token, len(d.Groups))
		}
		return
	}
	got, err := bmExact(d, len(want))
	if err != nil || !b.bmValuesEqual(got, want) {
		t.Errorf("token %#x: values %s (%v), want the exact sum %s (8.7, 6)", token, bmFmt(got), err, bmFmt(want))
	}
	if d.First != 0 || d.Flags&dfLast == 0 {
		t.Errorf("token %#x: first %d flags %#x, want 0 with LAST", token, d.First, d.Flags)
	}
}

// testAggregation: DATA + EXT contributions at an INTERNAL node (8.7):
// merge once the A-BM is covered, duplicates not applied, bits outside the
// A-BM dropped, PARTIAL on timeout naming exactly the missing endpoints.
func (b *bmEnv) testAggregation(t *testing.T) {
	s := b.activate(t, bmSpec{Timeout: 500})
	n := int(s.VecLen)
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	junk := bmVals(9, n)
	m0 := b.marks()
	completed := 0
	h1 := b.hosts[0].mark()

	// A1: duplicates of every kind between the first contributions.
	t.Run("merge_and_duplicates", func(t *testing.T) {
		const tok = 0xA1
		before := b.metrics()
		first := b.contribution(s, 1, bmExt(encFlat, 0, tok, 0, bmMasks[1]...), v[1])
		p := b.send(t, 1, first, nil)
		time.Sleep(20 * time.Millisecond)
		rep := append([]byte(nil), p...)
		rep[2+33] |= dfRetransmit // identical repeat (6: RETRANSMIT is informational)
		b.hosts[1].send(b.port[1], rep)
		b.send(t, 2, b.contribution(s, 2, bmExt(encHier, 0, tok, 0, bmMasks[2]...), v[2]), nil)
		time.Sleep(20 * time.Millisecond)
		// Same P-BM under a new Packet ID with other values: a duplicate P-BM
		// changes nothing (8.7).
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, bmMasks[1]...), junk), nil)
		// A subset of the covered endpoints.
		b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, tok, 0, 100), junk), nil)
		time.Sleep(50 * time.Millisecond)
		if xs := b.emittedFor(s, h1, tok); len(xs) > 0 {
			t.Fatalf("emitted before the A-BM was covered: P-BM %v", xs[0].Set)
		}
		mid := b.metrics()
		if d := bmDelta(before, mid, bmDuplicates); d != 3 {
			t.Errorf("3 duplicate contributions (identical repeat, same P-BM, subset P-BM) counted %v times under %s (%s)", d, bmDuplicates, dropDiff(before, mid))
		}
		// A P-BM that meets the OR and adds h4's endpoints (finding B3).
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, 63, 200), junk), nil)
		time.Sleep(50 * time.Millisecond)
		after3 := b.metrics()
		t.Logf("(finding B%d) P-BM {63, 200} meeting the OR {0,5,63,64,100,130}: %s", bmFOverlap, dropDiff(mid, after3))
		if xs := b.emittedFor(s, h1, tok); len(xs) > 0 {
			t.Errorf("(finding B%d) a P-BM that only partly overlaps the OR was merged (emitted %v); this package assumes it is not applied", bmFOverlap, xs[0].Set)
		}
		from := h1
		b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, tok, 0, bmMasks[3]...), v[3]), nil)
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no DATA on the PARENT binding after the A-BM was covered (8.7)")
		}
		b.checkEmitted(t, s, x, tok, bmABM(), bmSum(v[1], v[2], v[3]), false)
		completed++
		t.Logf("(finding B%d) merged P-BM encoding %d (A-BM record: FLAT)", bmFEncoding, x.D.Ext.Encoding)

		// A replay after the aggregate went up (finding B4): it must not
		// complete the Token a second time.
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, bmMasks[1]...), v[1]), nil)
		time.Sleep(150 * time.Millisecond)
		xs := b.emittedFor(s, h1, tok)
		for _, y := range xs[1:] {
			t.Logf("(finding B%d) after the replay: DATA P-BM %v XFlags %#x encoding %d", bmFReplay, y.Set, y.D.Ext.XFlags, y.D.Ext.Encoding)
			if bmEqual(y.Set, bmABM()) {
				t.Errorf("(finding B%d) a replay after emission produced a second aggregate over the whole A-BM", bmFReplay)
			}
			if !bmEqual(bmAnd(y.Set, bmMasks[1]), y.Set) {
				t.Errorf("(finding B%d) after the replay of {0,5,63}: DATA with P-BM %v", bmFReplay, y.Set)
			}
		}
	})

	// A2: a child splits its endpoints over two contributions, mixed
	// encodings.
	t.Run("split_contributions", func(t *testing.T) {
		const tok = 0xA2
		from := b.hosts[0].mark()
		a, c := bmVals(4, n), bmVals(5, n)
		b.send(t, 1, b.contribution(s, 1, bmExt(encHier, 0, tok, 0, 0, 5), a), nil)
		b.send(t, 2, b.contribution(s, 2, bmExt(encFlat, 0, tok, 0, bmMasks[2]...), v[2]), nil)
		b.send(t, 3, b.contribution(s, 3, bmExt(encHier, 0, tok, 0, bmMasks[3]...), v[3]), nil)
		time.Sleep(50 * time.Millisecond)
		if xs := b.emittedFor(s, from, tok); len(xs) > 0 {
			t.Fatalf("emitted with endpoint 63 missing: P-BM %v", xs[0].Set)
		}
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, 63), c), nil)
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no aggregate")
		}
		b.checkEmitted(t, s, x, tok, bmABM(), bmSum(a, c, v[2], v[3]), false)
		completed++
	})

	// A3: a P-BM with a bit outside the A-BM is dropped (bad_endpoint, 8.7).
	t.Run("bit_outside_abm", func(t *testing.T) {
		const tok = 0xA3
		from := b.hosts[0].mark()
		before := b.metrics()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, 0, bmStray), junk), nil)
		time.Sleep(30 * time.Millisecond)
		for k := 1; k <= 3; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encFlat, 0, tok, 0, bmMasks[k]...), v[k]), nil)
		}
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no aggregate")
		}
		b.checkEmitted(t, s, x, tok, bmABM(), bmSum(v[1], v[2], v[3]), false)
		completed++
		if d := bmDelta(before, b.metrics(), bmSeries("bad_endpoint")); d != 1 {
			t.Errorf("P-BM {0, %d} outside the A-BM: bad_endpoint grew by %v, want 1", bmStray, d)
		}
	})

	// A4: a child contributes for endpoints of another child's mask
	// (finding B7): no rule of 8.7 binds a P-BM to the binding it comes
	// from, only to the A-BM, so it is admitted.
	t.Run("foreign_pbm", func(t *testing.T) {
		const tok = 0xA4
		from := b.hosts[0].mark()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, bmMasks[2]...), v[2]), nil)
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, tok, 0, bmMasks[1]...), v[1]), nil)
		b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, tok, 0, bmMasks[3]...), v[3]), nil)
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatalf("(finding B%d) h2's contribution for h3's endpoints was not admitted: no aggregate", bmFForeign)
		}
		b.checkEmitted(t, s, x, tok, bmABM(), bmSum(v[1], v[2], v[3]), false)
		completed++
	})

	// A5: h4 never contributes: after Timeout a PARTIAL names exactly h4's
	// endpoints as missing (8.7); the clock starts at the Token's first
	// contribution (finding B5).
	t.Run("partial_on_timeout", func(t *testing.T) {
		const tok = 0xA5
		const gap = 400 * time.Millisecond
		mark := b.hosts[0].mark()
		from := mark
		t0 := time.Now()
		b.send(t, 1, b.contribution(s, 1, bmExt(encFlat, 0, tok, 0, bmMasks[1]...), v[1]), nil)
		time.Sleep(gap)
		b.send(t, 2, b.contribution(s, 2, bmExt(encFlat, 0, tok, 0, bmMasks[2]...), v[2]), nil)
		x, ok := b.waitEmitted(s, &from, tok, 2*time.Second)
		if !ok {
			t.Fatal("no PARTIAL after the Timeout (8.7)")
		}
		el := x.F.At.Sub(t0)
		b.checkEmitted(t, s, x, tok, bmUnion(bmMasks[1], bmMasks[2]), bmSum(v[1], v[2]), true)
		completed++
		if missing := bmMinus(bmABM(), x.Set); !bmEqual(missing, bmMasks[3]) {
			t.Errorf("PARTIAL: A-BM minus P-BM = %v, want exactly h4's endpoints %v", missing, bmMasks[3])
		}
		tmo := time.Duration(s.Timeout) * time.Millisecond
		t.Logf("(finding B%d) PARTIAL %v after the first contribution, %v after the last (Timeout %v)", bmFPartialClock, el.Round(time.Millisecond), (el - gap).Round(time.Millisecond), tmo)
		if el < tmo-20*time.Millisecond {
			t.Errorf("PARTIAL %v after the first contribution, before the Timeout %v", el, tmo)
		}
		if el > tmo+300*time.Millisecond {
			t.Errorf("(finding B%d) PARTIAL %v after the first contribution; this package reads 8.7 (\"the Timeout expires before the OR is complete\") as Timeout counted from the Token's first contribution", bmFPartialClock, el)
		}
		// Exactly one frame for the Token.
		time.Sleep(100 * time.Millisecond)
		if xs := b.emittedFor(s, mark, tok); len(xs) != 1 {
			t.Errorf("token %#x: %d frames on the PARENT binding, want 1", tok, len(xs))
		}
	})

	// COMPLETE of an ACTIVE BITMAP context: state ACTIVE, Completed
	// Elements = aggregations completed or emitted as PARTIAL (8.1).
	r := b.am.expectAck(t, "COMPLETE of an ACTIVE BITMAP context", b.am.cmd(s.ID, cmdComplete), stOK, osActive)
	if r.Ack.Completed != uint32(completed) {
		t.Errorf("COMPLETE: Completed Elements %d, want %d aggregations completed or PARTIAL (8.1)", r.Ack.Completed, completed)
	}
	t.Logf("(finding B%d) COMPLETE of the ACTIVE BITMAP context: Missing Stream %#x, Missing From %d, cause %d", bmFCompleteAck, r.Ack.MissingStream, r.Ack.MissingFrom, r.Ack.Cause)
	b.bmNoProgress(t, s.ID, m0)
	b.am.expectAck(t, "RELEASE of the aggregation context (nothing open)", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
}

// testRoot: a ROOT (no PARENT) starts the multicast direction with D-BM =
// its A-BM when the OR is complete (8.7), and on timeout sends a PARTIAL
// RESULT whose D-BM is exactly the P-BM of what it holds.
func (b *bmEnv) testRoot(t *testing.T) {
	s := b.activate(t, bmSpec{Role: roleRoot, Timeout: 400})
	n := int(s.VecLen)
	in := [4][]float32{nil, bmRoundVals(1, n), bmRoundVals(2, n), bmRoundVals(3, n)}
	m0 := b.marks()
	roundedSum := func(ks ...int) []float32 {
		r := make([]float32, n)
		for i := range r {
			var xs []float32
			for _, k := range ks {
				xs = append(xs, in[k][i])
			}
			r[i] = exactSum(xs...)
		}
		return r
	}
	check := func(t *testing.T, m [4]int, tok uint64, receivers []int, want []float32, partial bool) {
		t.Helper()
		for k := 0; k < 4; k++ {
			var xs []bmRx
			for _, x := range b.collect(s, k, m[k], classResult) {
				if x.token() == tok {
					xs = append(xs, x)
				}
			}
			in := false
			for _, r := range receivers {
				in = in || r == k
			}
			if !in {
				if len(xs) > 0 {
					t.Errorf("token %#x: h%d got %d RESULTs (set %v), want none", tok, k+1, len(xs), xs[0].Set)
				}
				continue
			}
			if len(xs) != 1 {
				t.Errorf("token %#x: h%d got %d RESULTs, want 1", tok, k+1, len(xs))
				continue
			}
			x := xs[0]
			if x.Err != nil {
				t.Errorf("token %#x: h%d RESULT fails the receiver rules: %v", tok, k+1, x.Err)
				continue
			}
			if x.F.Eth.Src != b.port[k] || x.D.SrcEP != bmSwRes(k) || x.D.DstEP != bmHostRes(k) || x.D.Stream != uint16(k+1) {
				t.Errorf("token %#x: h%d RESULT from %s %#x->%#x stream %d: not its RESULT_OUT binding mirrored", tok, k+1, x.F.Eth.Src, x.D.SrcEP, x.D.DstEP, x.D.Stream)
			}
			if !bmEqual(x.Set, bmMasks[k]) {
				t.Errorf("token %#x: h%d D-BM %v, want its mask %v", tok, k+1, x.Set, bmMasks[k])
			}
			if (x.D.Ext.XFlags&xfPartial != 0) != partial || x.D.Ext.XFlags&xfInstall != 0 || x.D.Ext.Tenant != s.Tenant {
				t.Errorf("token %#x: h%d XFlags %#x tenant %d, want PARTIAL=%v", tok, k+1, x.D.Ext.XFlags, x.D.Ext.Tenant, partial)
			}
			if len(x.D.Groups) == 0 || x.D.Flags&dfLast == 0 {
				t.Errorf("token %#x: h%d RESULT carries no values or no LAST (flags %#x)", tok, k+1, x.D.Flags)
				continue
			}
			for _, g := range x.D.Groups {
				if g.Format != fmtFP32 {
					t.Errorf("token %#x: h%d group format %d, Output Format is FP32", tok, k+1, g.Format)
				}
			}
			got := make([]float32, n)
			pos := int(x.D.First)
			for _, g := range x.D.Groups {
				if g.Format == fmtFP32 {
					for _, f := range g.fp32s() {
						if pos < n {
							got[pos] = f
						}
						pos++
					}
				}
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Errorf("token %#x: h%d element %d = %v, want %v (the exact sum rounded once to FP32)", tok, k+1, i, got[i], want[i])
					break
				}
			}
		}
	}
	t.Run("complete", func(t *testing.T) {
		const tok = 0xB1
		m := b.marks()
		for k := 1; k <= 3; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encHier, 0, tok, 0, bmMasks[k]...), in[k]), nil)
		}
		time.Sleep(150 * time.Millisecond)
		check(t, m, tok, []int{1, 2, 3}, roundedSum(1, 2, 3), false)
		// A replay after the RESULT went out must not produce another one.
		m = b.marks()
		before := b.metrics()
		b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, tok, 0, bmMasks[2]...), in[2]), nil)
		time.Sleep(150 * time.Millisecond)
		check(t, m, tok, nil, nil, false)
		t.Logf("(finding B%d) replay at the root after the RESULT: %s", bmFReplay, dropDiff(before, b.metrics()))
	})
	t.Run("partial", func(t *testing.T) {
		const tok = 0xB2
		m := b.marks()
		for k := 1; k <= 2; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encFlat, 0, tok, 0, bmMasks[k]...), in[k]), nil)
		}
		time.Sleep(150 * time.Millisecond)
		check(t, m, tok, nil, nil, true) // nothing before the Timeout
		time.Sleep(time.Duration(s.Timeout)*time.Millisecond + 100*time.Millisecond)
		check(t, m, tok, []int{1, 2}, roundedSum(1, 2), true)
	})
	r := b.am.expectAck(t, "COMPLETE of the ROOT context", b.am.cmd(s.ID, cmdComplete), stOK, osActive)
	if r.Ack.Completed != 2 {
		t.Errorf("COMPLETE: Completed Elements %d, want 2 (8.1)", r.Ack.Completed)
	}
	b.bmNoProgress(t, s.ID, m0)
	b.am.expectAck(t, "RELEASE of the ROOT context", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
}

// bmRoundVals are values whose three-term sums are not FP32 numbers, so a
// RESULT that is not rounded once from the exact sum shows.
func bmRoundVals(seed, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch (seed + i) % 3 {
		case 0:
			v[i] = float32(math.Ldexp(1, 24+i%3)) // 2^24..2^26
		case 1:
			v[i] = 1.5 + float32(i)
		default:
			v[i] = -float32(math.Ldexp(1, 24+i%3)) + 0.75
		}
	}
	return v
}

// testReliableAck: reliable multicast (8.9): RESULT data to the receivers,
// zero-group DATA ACKs merged to one ACK per Token over the pre-configured
// A-BM, a PARTIAL ACK on timeout whose P-BM lets the source retransmit to
// exactly the missing receivers, and an INSTALLed ACK tree (C-BM) taking
// precedence over the A-BM.
func (b *bmEnv) testReliableAck(t *testing.T) {
	s := b.activate(t, bmSpec{Timeout: 400})
	vals := bmVals(7, int(s.VecLen))
	m0 := b.marks()
	ack := func(k int, tok uint64, eps ...uint32) {
		b.send(t, k, b.contribution(s, k, bmExt(encList, 0, tok, 0, eps...), nil), nil)
	}
	t.Run("all_acknowledge", func(t *testing.T) {
		const tok = 0xC1
		mark := b.hosts[0].mark()
		from := mark
		b.send(t, 0, b.multicast(s, bmExt(encFlat, 0, tok, 0, bmABM()...), vals), nil)
		time.Sleep(30 * time.Millisecond)
		for k := 1; k <= 3; k++ {
			ack(k, tok, bmMasks[k]...)
		}
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no merged ACK (8.9)")
		}
		b.checkEmitted(t, s, x, tok, bmABM(), nil, false)
		time.Sleep(50 * time.Millisecond)
		if xs := b.emittedFor(s, mark, tok); len(xs) != 1 {
			t.Errorf("%d ACKs went up for one Token, want 1 (8.9)", len(xs))
		}
	})
	t.Run("partial_ack_and_retransmission", func(t *testing.T) {
		const tok = 0xC2
		from := b.hosts[0].mark()
		b.send(t, 0, b.multicast(s, bmExt(encHier, 0, tok, 0, bmABM()...), vals), nil)
		time.Sleep(30 * time.Millisecond)
		ack(1, tok, bmMasks[1]...)
		ack(2, tok, 64, 100)
		ack(2, tok, 130)
		x, ok := b.waitEmitted(s, &from, tok, 2*time.Second)
		if !ok {
			t.Fatal("no PARTIAL ACK after the Timeout (8.9)")
		}
		b.checkEmitted(t, s, x, tok, bmUnion(bmMasks[1], bmMasks[2]), nil, true)
		// The source retransmits to D-BM AND NOT P-BM under the same Token.
		retx := bmMinus(bmABM(), x.Set)
		m := b.marks()
		d := b.multicast(s, bmExt(encList, 0, tok, 0, retx...), vals)
		b.send(t, 0, d, nil)
		time.Sleep(100 * time.Millisecond)
		for k := 0; k < 4; k++ {
			xs := b.collect(s, k, m[k], classResult)
			if k == 3 {
				if len(xs) != 1 {
					t.Errorf("retransmission to %v: h4 got %d copies, want 1", retx, len(xs))
				} else {
					b.checkResultCopy(t, s, xs[0], d, bmMasks[3])
				}
			} else if len(xs) != 0 {
				t.Errorf("retransmission to %v: h%d got %d copies, want none", retx, k+1, len(xs))
			}
		}
	})
	t.Run("installed_ack_tree", func(t *testing.T) {
		// INSTALL makes the node a branch node with C-BM {5, 100, 511}; the
		// ACKs merge against it, not against the A-BM (8.8, 8.9).
		const tok = 0xC3
		from := b.hosts[0].mark()
		b.send(t, 0, b.multicast(s, bmExt(encList, 0, tok, xfInstall, 5, 100, 511), vals), nil)
		time.Sleep(30 * time.Millisecond)
		ack(1, tok, 5)
		ack(3, tok, 511)
		time.Sleep(30 * time.Millisecond)
		if xs := b.emittedFor(s, from, tok); len(xs) > 0 {
			t.Fatalf("ACK went up before the C-BM was covered: %v", xs[0].Set)
		}
		ack(2, tok, 100)
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no merged ACK over the installed C-BM (8.8, 8.9)")
		}
		b.checkEmitted(t, s, x, tok, []uint32{5, 100, 511}, nil, false)
	})
	b.bmNoProgress(t, s.ID, m0)
	b.abort(t, s)
}

package conformance

import (
	"bytes"
	"testing"
	"time"
)

// testBoundary: a domain boundary (8.10): an INTERNAL node with a boundary
// set record (0xFE) {65536} as FLAT Set ID 1024, one word (12.16's layout).
func (b *bmEnv) testBoundary(t *testing.T) {
	s := b.defaults(bmSpec{Timeout: 400})
	st := b.bmStage(s)
	boundary := setRecord{Index: 0xFE, Encoding: encFlat, Set: flatSet(1024, 1, 65536)}
	st.Sets = append(st.Sets, boundary)
	b.am.expectAck(t, "STAGE of a domain boundary", control{ID: s.ID, Cmd: cmdStage, Body: st.encode()}, stOK, osStaged)
	b.am.expectAck(t, "COMMIT", b.am.cmd(s.ID, cmdCommit), stOK, osActive)
	n := int(s.VecLen)
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	m0 := b.marks()
	checkUp := func(t *testing.T, x bmRx, tok uint64, want []float32, partial bool, sum ...[]float32) {
		t.Helper()
		b.checkEmitted(t, s, x, tok, []uint32{65536}, bmSum(sum...), partial)
		if x.D.Ext != nil && (x.D.Ext.Encoding != boundary.Encoding || !bytes.Equal(x.D.Ext.Set, boundary.Set)) {
			t.Errorf("token %#x: P-BM encoding %d %x, want the boundary record's byte for byte: %d %x (8.10 rule 1)", tok, x.D.Ext.Encoding, x.D.Ext.Set, boundary.Encoding, boundary.Set)
		}
	}
	t.Run("aggregate_names_the_boundary", func(t *testing.T) {
		from := b.hosts[0].mark()
		for k := 1; k <= 3; k++ {
			b.send(t, k, b.contribution(s, k, bmExt(encList, 0, 0x81, 0, bmMasks[k]...), v[k]), nil)
		}
		x, ok := b.waitEmitted(s, &from, 0x81, time.Second)
		if !ok {
			t.Fatal("no aggregate from the boundary")
		}
		checkUp(t, x, 0x81, nil, false, v[1], v[2], v[3])
	})
	t.Run("partial_then_late_and_duplicate", func(t *testing.T) {
		from := b.hosts[0].mark()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x82, 0, 0, 5), v[1]), nil)
		b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, 0x82, 0, bmMasks[2]...), v[2]), nil)
		b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, 0x82, 0, bmMasks[3]...), v[3]), nil)
		x, ok := b.waitEmitted(s, &from, 0x82, 2*time.Second)
		if !ok {
			t.Fatal("no PARTIAL from the boundary")
		}
		checkUp(t, x, 0x82, nil, true, v[1], v[2], v[3])
		before := b.metrics()
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x82, 0, 63), v[1]), nil) // only new endpoints: late
		b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x82, 0, 0), v[1]), nil)  // meets what went up: duplicate
		time.Sleep(100 * time.Millisecond)
		after := b.metrics()
		if bmDelta(before, after, bmSeries("late")) != 1 || bmDelta(before, after, bmDuplicates) != 1 {
			t.Errorf("after the PARTIAL: a new-endpoint contribution and a repeated one counted %s (want late +1, duplicate +1; 8.10 rule 3)", dropDiff(before, after))
		}
		if xs := b.emittedFor(s, from-1, 0x82); len(xs) != 1 {
			t.Errorf("%d frames went up for the Token; repairs do not cross a boundary (8.10 rule 3)", len(xs))
		}
	})
	t.Run("pbm_naming_the_boundary_dropped", func(t *testing.T) {
		before := b.metrics()
		h := b.hosts[0].mark()
		b.send(t, 1, b.contribution(s, 1, &extension{Encoding: encFlat, Token: 0x83, Set: flatSet(1024, 1, 65536)}, v[1]), nil)
		time.Sleep(80 * time.Millisecond)
		if d := bmDelta(before, b.metrics(), bmSeries("bad_endpoint")); d != 1 {
			t.Errorf("P-BM {65536} (the boundary set): bad_endpoint grew by %v, want 1 (8.10 rule 1)", d)
		}
		time.Sleep(time.Duration(s.Timeout) * time.Millisecond)
		if xs := b.emittedFor(s, h, 0x83); len(xs) > 0 {
			t.Errorf("a P-BM naming the boundary went up as %v", xs[0].Set)
		}
	})
	t.Run("multicast_into_the_domain", func(t *testing.T) {
		m := b.marks()
		before := b.metrics()
		d1 := b.multicast(s, bmExt(encList, 0, 0x84, 0, 65536, 70000), v[1])
		b.send(t, 0, d1, nil)
		d2 := b.multicast(s, bmExt(encList, 0, 0x85, 0, 0, 64), v[2])
		b.send(t, 0, d2, nil)
		d3 := b.multicast(s, bmExt(encList, 0, 0x86, xfInstall, 0, 64, 65536), v[3])
		b.send(t, 0, d3, nil)
		time.Sleep(150 * time.Millisecond)
		if d := bmDelta(before, b.metrics(), bmSeries("bad_endpoint")); d != 2 {
			t.Errorf("D-BMs with endpoints no mask routes (70000; 65536 under INSTALL): bad_endpoint grew by %v, want 2 (8.10 rule 4, 8.8)", d)
		}
		abm := st.Sets[0] // the A-BM record
		for k := 1; k <= 3; k++ {
			by := map[uint64][]bmRx{}
			for _, x := range b.collect(s, k, m[k], classResult) {
				by[x.token()] = append(by[x.token()], x)
			}
			// 0x84: D-BM replaced by the A-BM, split by the masks, encoded as
			// the A-BM record (8.10 rule 4).
			if xs := by[0x84]; len(xs) != 1 {
				t.Errorf("D-BM {65536, 70000}: h%d got %d copies, want 1", k+1, len(xs))
			} else {
				b.checkResultCopy(t, s, xs[0], d1, bmMasks[k])
				if e := xs[0].D.Ext; e != nil && (e.Encoding != abm.Encoding || !bytes.Equal(e.Set, bmReencode(abm.Encoding, abm.Set, bmMasks[k]))) {
					t.Errorf("D-BM {65536}: h%d copy encoded %d %x, want the A-BM record's encoding and parameters %d %x (8.10 rule 4)",
						k+1, e.Encoding, e.Set, abm.Encoding, bmReencode(abm.Encoding, abm.Set, bmMasks[k]))
				}
			}
			for _, c := range []struct {
				tok uint64
				d   dataFrame
				dbm []uint32
			}{{0x85, d2, []uint32{0, 64}}, {0x86, d3, []uint32{0, 64, 65536}}} {
				want := bmAnd(c.dbm, bmMasks[k])
				xs := by[c.tok]
				if len(want) == 0 {
					if len(xs) > 0 {
						t.Errorf("token %#x: h%d got a copy", c.tok, k+1)
					}
					continue
				}
				if len(xs) != 1 {
					t.Errorf("token %#x: h%d got %d copies, want 1", c.tok, k+1, len(xs))
					continue
				}
				b.checkResultCopy(t, s, xs[0], c.d, want)
			}
		}
	})
	b.bmNoProgress(t, s.ID, m0)
	b.abort(t, s)
}

// testInexact: an ACCUMULATION_INEXACT terminal frame with an extension
// (6, 8.10 rule 1) from a child of an INTERNAL BITMAP node (finding B14).
func (b *bmEnv) testInexact(t *testing.T) {
	s := b.activate(t, bmSpec{Timeout: 400})
	n := int(s.VecLen)
	from := b.hosts[0].mark()
	d := b.contribution(s, 1, bmExt(encList, 0, 0x91, 0, bmMasks[1]...), nil)
	d.Flags |= dfInexact | dfLast
	b.send(t, 1, d, nil)
	time.Sleep(30 * time.Millisecond)
	b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, 0x91, 0, bmMasks[2]...), bmVals(2, n)), nil)
	b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, 0x91, 0, bmMasks[3]...), bmVals(3, n)), nil)
	x, ok := b.waitEmitted(s, &from, 0x91, time.Second)
	if !ok {
		t.Fatal("the INEXACT terminal frame was not forwarded to the parent (6: forwards the same terminal frame)")
	}
	if x.Err != nil || x.D.Flags&(dfInexact|dfLast) != dfInexact|dfLast || len(x.D.Groups) != 0 || x.D.Ext == nil || x.D.Ext.Token != 0x91 {
		t.Errorf("forwarded INEXACT: flags %#x groups %d err %v; want LAST|INEXACT|EXT, no groups, the Token (6, D9)", x.D.Flags, len(x.D.Groups), x.Err)
	}
	time.Sleep(100 * time.Millisecond)
	r := b.am.must(t, b.am.cmd(s.ID, cmdComplete))
	t.Logf("(finding B%d) INEXACT from h2 (P-BM %v): forwarded with P-BM %v; %d frames up for the Token; COMPLETE: state %d, Completed %d",
		bmFInexact, bmMasks[1], x.Set, len(b.emittedFor(s, from-1, 0x91)), r.Ack.State, r.Ack.Completed)
	b.abort(t, s)
}

// testPartialPropagates: a PARTIAL contribution marks the aggregate
// PARTIAL even when the OR covers the A-BM (8.7), at an INTERNAL node and
// at a ROOT (whose RESULT copies then carry PARTIAL).
func (b *bmEnv) testPartialPropagates(t *testing.T) {
	n := 8
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	s := b.activate(t, bmSpec{Timeout: 400})
	from := b.hosts[0].mark()
	b.send(t, 1, b.contribution(s, 1, bmExt(encList, 0, 0x92, xfPartial, bmMasks[1]...), v[1]), nil)
	b.send(t, 2, b.contribution(s, 2, bmExt(encList, 0, 0x92, 0, bmMasks[2]...), v[2]), nil)
	b.send(t, 3, b.contribution(s, 3, bmExt(encList, 0, 0x92, 0, bmMasks[3]...), v[3]), nil)
	x, ok := b.waitEmitted(s, &from, 0x92, time.Second)
	if !ok {
		t.Fatal("no aggregate")
	}
	b.checkEmitted(t, s, x, 0x92, bmABM(), bmSum(v[1], v[2], v[3]), true)
	b.abort(t, s)

	r := b.activate(t, bmSpec{Role: roleRoot, Timeout: 400})
	m := b.marks()
	b.send(t, 1, b.contribution(r, 1, bmExt(encList, 0, 0x93, 0, bmMasks[1]...), v[1]), nil)
	b.send(t, 2, b.contribution(r, 2, bmExt(encList, 0, 0x93, xfPartial, bmMasks[2]...), v[2]), nil)
	b.send(t, 3, b.contribution(r, 3, bmExt(encList, 0, 0x93, 0, bmMasks[3]...), v[3]), nil)
	time.Sleep(150 * time.Millisecond)
	for k := 1; k <= 3; k++ {
		xs := b.collect(r, k, m[k], classResult)
		if len(xs) != 1 {
			t.Errorf("root: h%d got %d RESULTs, want 1", k+1, len(xs))
			continue
		}
		if xs[0].D.Ext == nil || xs[0].D.Ext.XFlags&xfPartial == 0 || !bmEqual(xs[0].Set, bmMasks[k]) {
			t.Errorf("root that merged a PARTIAL: h%d RESULT XFlags %+v set %v, want PARTIAL and its mask (8.7)", k+1, xs[0].D.Ext, xs[0].Set)
		}
	}
	b.abort(t, r)
}

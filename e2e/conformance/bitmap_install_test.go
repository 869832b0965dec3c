package conformance

import (
	"bytes"
	"testing"
	"time"
)

// checkForwarded checks that x, a DATA h1 received on the PARENT binding,
// is the contribution orig forwarded unchanged (8.8: nodes that installed
// nothing forward the DATA unchanged on their PARENT binding): extension
// and values identical, the header the PARENT binding's.
func (b *bmEnv) checkForwarded(t *testing.T, x bmRx, orig dataFrame) {
	t.Helper()
	what := "forwarded DATA of token " + bmHex(orig.Ext.Token)
	if x.Err != nil {
		t.Errorf("%s fails the receiver rules: %v", what, x.Err)
		return
	}
	d := x.D
	if x.F.Eth.Src != b.port[0] || d.SrcEP != bmSwParent || d.DstEP != bmHostParent || d.Stream != 1 {
		t.Errorf("%s: from %s %#x->%#x stream %d, want the PARENT binding mirrored (6: a switch uses its PARENT binding's values)", what, x.F.Eth.Src, d.SrcEP, d.DstEP, d.Stream)
	}
	if d.Ext == nil || !bytes.Equal(d.Ext.appendTo(nil), orig.Ext.appendTo(nil)) {
		t.Errorf("%s: extension %+v, want the contribution's unchanged %+v", what, d.Ext, orig.Ext)
	}
	if !bytes.Equal(bmBody(d), bmBody(orig)) || d.First != orig.First || d.Flags&^dfRetransmit != orig.Flags {
		t.Errorf("%s: values or range changed (first %d flags %#x)", what, d.First, d.Flags)
	}
}

func bmHex(v uint64) string { return "0x" + string(bmHexDigits(v)) }

func bmHexDigits(v uint64) []byte {
	const digits = "0123456789abcdef"
	if v == 0 {
		return []byte{'0'}
	}
	var r []byte
	for ; v > 0; v >>= 4 {
		r = append([]byte{digits[v&15]}, r...)
	}
	return r
}

// testInstall: MoE dispatch and combine (8.8) on a context without an
// A-BM: INSTALL to two or more bindings installs C-BM = D-BM AND the masks
// used, the returns merge against it; INSTALL to one binding installs
// nothing and the returns pass unchanged; an entry times out into a
// PARTIAL; the number of entries is bounded by Window Intervals.
func (b *bmEnv) testInstall(t *testing.T) {
	s := b.activate(t, bmSpec{NoABM: true, WI: 2, Timeout: 500})
	n := int(s.VecLen)
	v := [4][]float32{nil, bmVals(1, n), bmVals(2, n), bmVals(3, n)}
	m0 := b.marks()
	ret := func(k int, tok uint64, enc uint8, vals []float32, eps ...uint32) dataFrame {
		d := b.contribution(s, k, bmExt(enc, 0, tok, 0, eps...), vals)
		b.send(t, k, d, nil)
		return d
	}
	dispatch := func(tok uint64, eps ...uint32) dataFrame {
		d := b.multicast(s, bmExt(encList, 0, tok, xfInstall, eps...), bmVals(int(tok&7), n))
		b.send(t, 0, d, nil)
		return d
	}

	t.Run("branch_node_combines", func(t *testing.T) {
		const tok = 0xD1
		m := b.marks()
		before := b.metrics()
		d := dispatch(tok, 0, 200, bmStray)
		time.Sleep(50 * time.Millisecond)
		for k, want := range map[int][]uint32{1: {0}, 3: {200}} {
			xs := b.collect(s, k, m[k], classResult)
			if len(xs) != 1 {
				t.Errorf("INSTALL to {0, 200, %d}: h%d got %d copies, want 1", bmStray, k+1, len(xs))
				continue
			}
			b.checkResultCopy(t, s, xs[0], d, want) // INSTALL kept (8.8)
		}
		if xs := b.collect(s, 2, m[2], classResult); len(xs) != 0 {
			t.Errorf("h3 got a copy of INSTALL to {0, 200, %d}", bmStray)
		}
		if dd := bmDelta(before, b.metrics(), bmSeries("bad_endpoint")); dd != 1 {
			t.Errorf("INSTALL with unroutable endpoint %d: bad_endpoint grew by %v, want 1 (8.8)", bmStray, dd)
		}
		h := b.hosts[0].mark()
		from := h
		ret(3, tok, encList, v[3], 200)
		time.Sleep(50 * time.Millisecond)
		if xs := b.emittedFor(s, h, tok); len(xs) > 0 {
			t.Fatalf("the branch node sent %d DATA up before its C-BM {0, 200} was covered (first P-BM %v)", len(xs), xs[0].Set)
		}
		ret(1, tok, encList, v[1], 0)
		x, ok := b.waitEmitted(s, &from, tok, time.Second)
		if !ok {
			t.Fatal("no merged DATA when the OR equalled the C-BM (8.8)")
		}
		b.checkEmitted(t, s, x, tok, []uint32{0, 200}, bmSum(v[1], v[3]), false)
		t.Logf("(finding B%d) combine emitted its P-BM as encoding %d (INSTALL D-BM: LIST)", bmFEncoding, x.D.Ext.Encoding)
		// The soft state is deleted after the merge (8.8). A late return
		// then finds nothing installed; this package reads that as "forward
		// unchanged" and also accepts a node that still knows the Token and
		// drops the return as a duplicate (finding B15); it must not vanish
		// uncounted, nor be merged into a second aggregate.
		bl := b.metrics()
		late := ret(1, tok, encList, v[1], 0)
		y, ok := b.waitEmitted(s, &from, tok, 300*time.Millisecond)
		al := b.metrics()
		switch {
		case ok:
			b.checkForwarded(t, y, late)
			t.Logf("(finding B%d) a return after the merge was forwarded unchanged", bmFLateInstall)
		case bmDelta(bl, al, bmDuplicates) == 1:
			t.Logf("(finding B%d) a return after the merge was counted duplicate, not forwarded", bmFLateInstall)
		default:
			t.Errorf("(finding B%d) a return after the merge was neither forwarded nor counted duplicate: %s", bmFLateInstall, dropDiff(bl, al))
		}
	})

	t.Run("single_binding_installs_nothing", func(t *testing.T) {
		const tok = 0xD2
		m := b.marks()
		d := dispatch(tok, 64, 100)
		time.Sleep(30 * time.Millisecond)
		if xs := b.collect(s, 2, m[2], classResult); len(xs) != 1 {
			t.Errorf("INSTALL to {64, 100}: h3 got %d copies, want 1", len(xs))
		} else {
			b.checkResultCopy(t, s, xs[0], d, []uint32{64, 100})
		}
		from := b.hosts[0].mark()
		r1 := ret(2, tok, encList, v[2], 64)
		x, ok := b.waitEmitted(s, &from, tok, 300*time.Millisecond)
		if !ok {
			t.Fatal("the return {64} was not forwarded at once (8.8: a node that forwards to a single binding installs nothing)")
		}
		b.checkForwarded(t, x, r1)
		r2 := ret(2, tok, encFlat, v[1], 100)
		x, ok = b.waitEmitted(s, &from, tok, 300*time.Millisecond)
		if !ok {
			t.Fatal("the return {100} was not forwarded")
		}
		b.checkForwarded(t, x, r2)
	})

	t.Run("soft_state_timeout_partial", func(t *testing.T) {
		const tok = 0xD3
		h := b.hosts[0].mark()
		from := h
		t0 := time.Now()
		dispatch(tok, 0, 64, 200)
		time.Sleep(20 * time.Millisecond)
		ret(1, tok, encList, v[1], 0)
		ret(2, tok, encList, v[2], 64)
		x, ok := b.waitEmitted(s, &from, tok, 2*time.Second)
		if !ok {
			t.Fatal("no PARTIAL when the soft state's lifetime (Timeout) ran out (8.8)")
		}
		b.checkEmitted(t, s, x, tok, []uint32{0, 64}, bmSum(v[1], v[2]), true)
		el := x.F.At.Sub(t0)
		if tmo := time.Duration(s.Timeout) * time.Millisecond; el < tmo-20*time.Millisecond || el > tmo+300*time.Millisecond {
			t.Errorf("PARTIAL %v after the INSTALL, lifetime is the Timeout %v", el, tmo)
		}
		if xs := b.emittedFor(s, h, tok); len(xs) != 1 {
			t.Errorf("%d frames for the Token, want 1", len(xs))
		}
	})

	t.Run("entries_bounded_by_window_intervals", func(t *testing.T) {
		m := b.marks()
		before := b.metrics()
		dispatch(0xD4, 0, 64)
		dispatch(0xD5, 5, 100)
		d6 := dispatch(0xD6, 63, 130) // no room: forwarded without installing (8.8)
		time.Sleep(50 * time.Millisecond)
		mid := b.metrics()
		for k, want := range map[int][]uint32{1: {63}, 2: {130}} {
			var got []bmRx
			for _, x := range b.collect(s, k, m[k], classResult) {
				if x.token() == 0xD6 {
					got = append(got, x)
				}
			}
			if len(got) != 1 {
				t.Errorf("INSTALL without room: h%d got %d copies, want 1 (8.8: forwarded without installing)", k+1, len(got))
			} else {
				b.checkResultCopy(t, s, got[0], d6, want)
			}
		}
		h := b.hosts[0].mark()
		from := h
		r1 := ret(1, 0xD6, encList, v[1], 63)
		r2 := ret(2, 0xD6, encList, v[2], 130)
		for i := 0; i < 2; i++ {
			x, ok := b.waitEmitted(s, &from, 0xD6, 300*time.Millisecond)
			if !ok {
				t.Errorf("a return of the uninstalled Token did not pass through (8.8: the returning DATA passes through unmerged)")
				break
			}
			if bmEqual(x.Set, []uint32{63}) {
				b.checkForwarded(t, x, r1)
			} else {
				b.checkForwarded(t, x, r2)
			}
		}
		// 0xD4 is installed: its returns merge.
		from = b.hosts[0].mark()
		ret(1, 0xD4, encList, v[1], 0)
		ret(2, 0xD4, encList, v[2], 64)
		x, ok := b.waitEmitted(s, &from, 0xD4, time.Second)
		if !ok {
			t.Error("no merged DATA for an installed Token")
		} else {
			b.checkEmitted(t, s, x, 0xD4, []uint32{0, 64}, bmSum(v[1], v[2]), false)
		}
		// 0xD5's entry is open: RELEASE is BAD_STATE (8.1).
		b.am.expectAck(t, "RELEASE with an open soft-state entry", b.am.cmd(s.ID, cmdRelease), stBadState, osActive)
		// section 10 / 8.8: the INSTALL without room is counted no_credit.
		got := bmDelta(before, mid, bmSeries("no_credit"))
		noRoom := bmDelta(before, mid, `prismd_bitmap_events_total{event="install_no_room"}`)
		t.Logf("INSTALL without room: %s", dropDiff(before, mid))
		t.Run("no_room_counted", func(t *testing.T) {
			// 8.8 (settled, finding B8): forwarded, not dropped, and counted
			// as an install_no_room event.
			if got != 0 || noRoom != 1 {
				t.Errorf("(finding B%d) an INSTALL that found no room grew %s by %v and install_no_room by %v, want 0 and 1 (8.8)",
					bmFNoCredit, bmSeries("no_credit"), got, noRoom)
			}
		})
		// After the lifetime 0xD5's entry expires with nothing to send (an
		// empty set is not encodable, 8.3), and RELEASE is accepted.
		time.Sleep(time.Duration(s.Timeout)*time.Millisecond + 150*time.Millisecond)
		if xs := b.emittedFor(s, h, 0xD5); len(xs) > 0 {
			t.Errorf("an entry no return reached sent DATA with P-BM %v (8.3: empty sets are not sent)", xs[0].Set)
		}
	})
	b.bmNoProgress(t, s.ID, m0)
	b.am.expectAck(t, "RELEASE after the soft state expired", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
}

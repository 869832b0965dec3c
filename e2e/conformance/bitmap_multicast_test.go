package conformance

import (
	"bytes"
	"math/big"
	"testing"
	"time"
)

func bmZero() *big.Int { return big.NewInt(0) }

// bmReencode writes eps in the encoding and with the parameters of the set
// body orig (FLAT Set ID / Word Count, HIER Block Bits / Block Count).
func bmReencode(enc uint8, orig []byte, eps []uint32) []byte {
	switch enc {
	case encFlat:
		return flatSet(int(be.Uint16(orig[0:])), int(be.Uint16(orig[2:])), eps...)
	case encHier:
		return hierSet(int(be.Uint16(orig[0:])), int(be.Uint16(orig[2:])), eps...)
	}
	return listSet(eps...)
}

type bmMcCase struct {
	name string
	enc  uint8
	set  []byte // set body; nil: bmEncode(enc, dbm)
	dbm  []uint32
	xf   uint8
	vals bool // carry values (else zero groups)
}

// sendMulticasts sends one RESULT + EXT per case from h1 (Token base+i)
// and returns the frames as sent.
func (b *bmEnv) sendMulticasts(t *testing.T, s bmSpec, base uint64, cases []bmMcCase) []dataFrame {
	var sent []dataFrame
	for i, c := range cases {
		set := c.set
		if set == nil {
			set = bmEncode(c.enc, c.dbm)
		}
		var vals []float32
		if c.vals {
			vals = bmVals(i, int(s.VecLen))
		}
		d := b.multicast(s, &extension{Encoding: c.enc, XFlags: c.xf, Tenant: s.Tenant, Token: base + uint64(i), Set: set}, vals)
		b.send(t, 0, d, nil)
		sent = append(sent, d)
	}
	return sent
}

// checkMulticasts checks the copies every host received since m for the
// cases sent by sendMulticasts: exactly the children whose mask meets the
// D-BM get exactly one copy carrying D-BM AND mask (8.8); h1, the ingress
// peer, gets none.
func (b *bmEnv) checkMulticasts(t *testing.T, s bmSpec, m [4]int, cases []bmMcCase, sent []dataFrame) {
	t.Helper()
	byToken := map[uint64]map[int][]bmRx{}
	for k := 0; k < 4; k++ {
		for _, x := range b.collect(s, k, m[k], classResult) {
			if byToken[x.token()] == nil {
				byToken[x.token()] = map[int][]bmRx{}
			}
			byToken[x.token()][k] = append(byToken[x.token()][k], x)
		}
	}
	for i, c := range cases {
		d := sent[i]
		got := byToken[d.Ext.Token]
		if n := len(got[0]); n > 0 {
			t.Errorf("%s: h1 (the ingress peer, no RESULT_OUT) got %d copies", c.name, n)
		}
		for _, k := range s.children() {
			want := bmAnd(c.dbm, bmMasks[k])
			xs := got[k]
			if len(want) == 0 {
				if len(xs) > 0 {
					t.Errorf("%s: h%d got %d copies with sets %v; its mask %v does not meet D-BM %v (8.8: no copy)", c.name, k+1, len(xs), xs[0].Set, bmMasks[k], c.dbm)
				}
				continue
			}
			if len(xs) != 1 {
				t.Errorf("%s: h%d got %d copies, want exactly 1 (D-BM %v AND mask %v = %v)", c.name, k+1, len(xs), c.dbm, bmMasks[k], want)
				if len(xs) == 0 {
					continue
				}
			}
			b.checkResultCopy(t, s, xs[0], d, want)
			if xs[0].Err == nil && xs[0].D.Ext != nil {
				e := xs[0].D.Ext
				if wantBytes := bmReencode(d.Ext.Encoding, d.Ext.Set, want); e.Encoding != d.Ext.Encoding || !bytes.Equal(e.Set, wantBytes) {
					t.Errorf("(finding B%d) %s: h%d copy encodes its set as encoding %d %x; this package reads 8.2 (translation only at a domain boundary) as: the incoming encoding and parameters, canonical: %d %x",
						bmFEncoding, c.name, k+1, e.Encoding, e.Set, d.Ext.Encoding, wantBytes)
				}
			}
		}
	}
}

// testMulticast: stateless multicast (8.8) of RESULT + EXT from the parent
// h1 with D-BMs in every encoding, with and without bits no mask covers.
func (b *bmEnv) testMulticast(t *testing.T) {
	s := b.activate(t, bmSpec{Tenant: 7})
	m0 := b.marks()
	routable := []bmMcCase{
		{"flat_one_each", encFlat, nil, []uint32{0, 64, 200}, 0, true},
		{"hier_h2_only", encHier, nil, []uint32{5, 63}, 0, true},
		{"list_h3_h4", encList, nil, []uint32{100, 130, 511}, 0, true},
		{"flat_all", encFlat, nil, bmABM(), 0, true},
		{"hier_all", encHier, nil, bmABM(), 0, true},
		{"list_all", encList, nil, bmABM(), 0, true},
		{"flat_set_id_1", encFlat, flatSet(1, 2, 130, 200), []uint32{130, 200}, 0, true},
		{"flat_set_id_3_word", encFlat, flatSet(3, 1, 200), []uint32{200}, 0, true},
		{"hier_128_bit_blocks", encHier, hierSet(128, 4, 0, 130, 511), []uint32{0, 130, 511}, 0, true},
		{"list_zero_groups", encList, nil, []uint32{63, 64}, 0, false},
		{"partial_result_kept", encList, nil, []uint32{5, 64}, xfPartial, true},
	}
	unrouted := []bmMcCase{
		{"flat_with_stray", encFlat, nil, []uint32{0, bmStray}, 0, true},
		{"list_stray_only", encList, nil, []uint32{bmStray}, 0, true},
		{"hier_two_strays", encHier, nil, []uint32{64, bmStray, 1000}, 0, true},
		{"list_far_endpoint", encList, nil, []uint32{5, 4000000000}, 0, true},
	}
	be0 := b.metrics()
	m := b.marks()
	sent := b.sendMulticasts(t, s, 0x1000, routable)
	time.Sleep(200 * time.Millisecond)
	b.checkMulticasts(t, s, m, routable, sent)
	be1 := b.metrics()
	if d := bmDelta(be0, be1, bmSeries("bad_endpoint")); d != 0 {
		t.Errorf("fully routable D-BMs counted bad_endpoint %v times (%s)", d, dropDiff(be0, be1))
	}
	m = b.marks()
	sentU := b.sendMulticasts(t, s, 0x2000, unrouted)
	time.Sleep(200 * time.Millisecond)
	b.checkMulticasts(t, s, m, unrouted, sentU)
	be2 := b.metrics()
	// 8.8: bits no mask covers are dropped from the copies, counted
	// bad_endpoint once per frame (section 10: prismd_bitmap_drops_total).
	if d := bmDelta(be1, be2, bmSeries("bad_endpoint")); d != float64(len(unrouted)) {
		t.Errorf("%d RESULTs with unroutable bits: bad_endpoint grew by %v, want %d (8.8: once per frame) (%s)", len(unrouted), d, len(unrouted), dropDiff(be1, be2))
	}

	// Finding B1: an identical repeat of a RESULT (same Packet ID, same
	// bytes) is replicated again (stateless replication; receivers
	// suppress duplicates by Token, 8.9), and nothing answers with PROGRESS.
	m = b.marks()
	rep := sent[0].encode()
	rep[2+33] |= dfRetransmit
	if err := b.hosts[0].send(b.port[0], rep); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	n := 0
	for k := 1; k <= 3; k++ {
		n += len(b.collect(s, k, m[k], classResult))
	}
	t.Logf("(finding B%d) an identical repeat of a RESULT (RETRANSMIT set) gave %d copies (the original gave 3)", bmFNoProgress, n)
	if n != 3 {
		t.Errorf("(finding B%d) identical repeat of a 3-copy RESULT gave %d copies; this package reads 8.8/8.9 as stateless replication (3 copies again)", bmFNoProgress, n)
	}
	// 2: an unknown minor version of major 1 is accepted; a node that
	// re-emits a frame writes 0x10 (checkResultCopy checks the version).
	m = b.marks()
	dm := b.multicast(s, bmExt(encList, 7, 0x1F00, 0, 5, 100), bmVals(3, int(s.VecLen)))
	pm := dm.encode()
	pm[0] = 0x1F
	if err := b.hosts[0].send(b.port[0], pm); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	for k := 1; k <= 2; k++ {
		xs := b.collect(s, k, m[k], classResult)
		if len(xs) != 1 {
			t.Errorf("RESULT of version 0x1F: h%d got %d copies, want 1 (2: an unknown minor of major 1 is decoded as 1.0)", k+1, len(xs))
			continue
		}
		b.checkResultCopy(t, s, xs[0], dm, bmMasks[k][1:2])
	}
	b.bmNoProgress(t, s.ID, m0)

	// The copies of one output stream are numbered 1, 2, 3, ... (6 [choice]).
	for k := 1; k <= 3; k++ {
		var ids []uint32
		for _, x := range b.collect(s, k, m0[k], classResult) {
			ids = append(ids, x.D.PacketID)
		}
		for i, id := range ids {
			if id != uint32(i+1) {
				t.Errorf("h%d copies carry Packet IDs %v; 6 says a sender numbers the packets of one stream 1, 2, 3, ... in sending order", k+1, ids)
				break
			}
		}
	}
	b.am.expectAck(t, "RELEASE of the multicast context (nothing open)", b.am.cmd(s.ID, cmdRelease), stOK, osReleased)
}

// testMulticastIngress: a RESULT_OUT binding toward h1, the peer the
// RESULT arrives from, whose mask meets the D-BM (finding B2).
func (b *bmEnv) testMulticastIngress(t *testing.T) {
	s := b.activate(t, bmSpec{ParentRO: []uint32{400, 401}})
	m := b.marks()
	before := b.metrics()
	d := b.multicast(s, bmExt(encList, 0, 0x3000, 0, 0, 400), bmVals(1, int(s.VecLen)))
	b.send(t, 0, d, nil)
	// A RESULT from h1 whose D-BM is only h1's mask.
	d2 := b.multicast(s, bmExt(encList, 0, 0x3001, 0, 401), bmVals(2, int(s.VecLen)))
	b.send(t, 0, d2, nil)
	time.Sleep(200 * time.Millisecond)
	after := b.metrics()
	back := b.collect(s, 0, m[0], classResult)
	h2 := b.collect(s, 1, m[1], classResult)
	if len(h2) != 1 {
		t.Errorf("h2 got %d copies of D-BM {0, 400}, want 1", len(h2))
	} else {
		b.checkResultCopy(t, s, h2[0], d, []uint32{0})
	}
	t.Logf("(finding B%d) copies back toward the ingress peer: %d; series changed: %s", bmFLooped, len(back), dropDiff(before, after))
	if len(back) != 0 {
		t.Errorf("(finding B%d) h1 got %d copies of its own RESULTs back (sets %v); this package assumes no copy goes back out toward the ingress peer", bmFLooped, len(back), back[0].Set)
	}
	b.abort(t, s)
}

// testFrameRules: frames of a BITMAP context that break a rule of 6 / 8.2
// / 8.3 / 8.4 are dropped (no copy) and counted where section 10 says.
func (b *bmEnv) testFrameRules(t *testing.T) {
	s := b.activate(t, bmSpec{Tenant: 7})
	vals := bmVals(1, int(s.VecLen))
	good := func() dataFrame { return b.multicast(s, bmExt(encList, 7, 0x4000, 0, 0, 64, 200), vals) }
	type tc struct {
		name   string
		from   int
		frame  func() []byte
		series string
	}
	enc := func(d dataFrame) []byte { return d.encode() }
	cases := []tc{
		{"no_ext", 0, func() []byte { d := good(); d.Ext, d.Flags = nil, d.Flags&^dfExt; return enc(d) }, bmSeries("bad_endpoint")},
		{"result_on_contributor_port", 1, func() []byte {
			d := good()
			d.SrcEP, d.DstEP, d.Stream = bmHostData(1), bmSwData(1), 2
			return enc(d)
		}, bmSeries("bad_endpoint")},
		{"result_in_wrong_stream", 0, func() []byte { d := good(); d.Stream = 5; return enc(d) }, bmSeries("bad_endpoint")},
		{"result_in_wrong_endpoint", 0, func() []byte { d := good(); d.DstEP = 0x99; return enc(d) }, bmSeries("bad_endpoint")},
		{"install_and_partial", 0, func() []byte { d := good(); d.Ext.XFlags = xfInstall | xfPartial; return enc(d) }, bmDecode("out_of_range")},
		{"xflags_reserved", 0, func() []byte { d := good(); d.Ext.XFlags = 0x08; return enc(d) }, bmDecode("reserved_nonzero")},
		{"encoding_4", 0, func() []byte { d := good(); d.Ext.Encoding = 4; return enc(d) }, bmDecode("bad_format")},
		{"list_over_max_terms", 0, func() []byte {
			eps := make([]uint32, 65)
			for i := range eps {
				eps[i] = uint32(i)
			}
			d := good()
			d.Ext.Set = listSet(eps...)
			return enc(d)
		}, bmDecode("bad_count")},
		{"list_not_ascending", 0, func() []byte { d := good(); d.Ext.Set = listSet(64, 0); return enc(d) }, bmDecode("out_of_range")},
		{"list_reserved", 0, func() []byte { d := good(); d.Ext.Set[3] = 1; return enc(d) }, bmDecode("reserved_nonzero")},
		{"flat_empty", 0, func() []byte { d := good(); d.Ext.Encoding, d.Ext.Set = encFlat, flatSet(0, 2); return enc(d) }, bmDecode("bad_count")},
		{"flat_words_0", 0, func() []byte { d := good(); d.Ext.Encoding, d.Ext.Set = encFlat, []byte{0, 0, 0, 0}; return enc(d) }, bmDecode("bad_count")},
		{"hier_upper_bit_past_count", 0, func() []byte {
			// Block Count 7: upper bit 7 (block 7) lies past the count.
			d := good()
			set := hierSet(64, 8, 0, 511)
			be.PutUint16(set[2:], 7)
			d.Ext.Encoding, d.Ext.Set = encHier, set
			return enc(d)
		}, bmDecode("reserved_nonzero")},
		{"hier_empty_lower", 0, func() []byte {
			d := good()
			set := hierSet(64, 8, 0, 64)
			for i := 4 + 8 + 8; i < len(set); i++ {
				set[i] = 0
			}
			d.Ext.Encoding, d.Ext.Set = encHier, set
			return enc(d)
		}, bmDecode("bad_count")},
		{"hier_block_bits_100", 0, func() []byte {
			d := good()
			set := hierSet(64, 8, 0)
			be.PutUint16(set[0:], 100)
			d.Ext.Encoding, d.Ext.Set = encHier, set
			return enc(d)
		}, bmDecode("out_of_range")},
		{"ext_length_past_set", 0, func() []byte {
			// Extension Length counts 4 bytes more than 16 + set body.
			p := enc(good())
			el := be.Uint16(p[2+dataHdr:])
			be.PutUint16(p[2+dataHdr:], el+4)
			q := append([]byte(nil), p[:2+dataHdr+int(el)]...)
			q = append(q, 0, 0, 0, 0)
			return append(q, p[2+dataHdr+int(el):]...)
		}, bmDecode("bad_length")},
		{"auth_too_short", 0, func() []byte {
			// AUTH with Extension Length 16 + 4 + 12 (< 16 + 4 + 16): E7.
			d := good()
			d.Ext.XFlags = xfAuth
			p := enc(d)
			be.PutUint16(p[2+dataHdr:], 32)
			el := 32
			return append(append([]byte(nil), p[:2+dataHdr+el]...), p[2+dataHdr+int(d.Ext.length()):]...)
		}, bmDecode("bad_length")},
		{"scaled_group_in_ext", 0, func() []byte {
			d := good()
			d.Groups = []group{scaledGroup(1, 0, []kulischVal{{State: 1, Int: bmZero()}})}
			d.Flags &^= dfLast
			return enc(d)
		}, bmDecode("bad_format")},
		{"f64_group_in_ext", 0, func() []byte {
			// KULISCH_F64 is legal only in DATA without EXT (6, D11).
			d := good()
			d.Groups = []group{f64Group([]uint64{0x3FF0000000000000})}
			d.Flags &^= dfLast
			return enc(d)
		}, bmDecode("bad_format")},
		{"last_missing", 0, func() []byte { d := good(); d.Flags &^= dfLast; return enc(d) }, bmDecode("out_of_range")},
		{"range_past_vector", 0, func() []byte { d := good(); d.First = 4; return enc(d) }, bmDecode("out_of_range")},
		{"header_reserved", 0, func() []byte { d := good(); d.Reserved = 1; return enc(d) }, bmDecode("reserved_nonzero")},
		{"flags_reserved", 0, func() []byte { d := good(); d.Flags |= 0x20; return enc(d) }, bmDecode("reserved_nonzero")},
		{"tenant_0", 0, func() []byte { d := good(); d.Ext.Tenant = 0; return enc(d) }, bmSeries("tenant_mismatch")},
		{"tenant_8", 0, func() []byte { d := good(); d.Ext.Tenant = 8; return enc(d) }, bmSeries("tenant_mismatch")},
	}
	m0 := b.marks()
	for _, c := range cases {
		before := b.metrics()
		m := b.marks()
		if err := b.hosts[c.from].send(b.port[c.from], c.frame()); err != nil {
			t.Fatal(err)
		}
		got := b.waitDelta(before, func(text string) float64 { return series(text, c.series) }, 1, 300*time.Millisecond)
		after := b.metrics()
		if got != 1 {
			t.Errorf("%s: %s grew by %v, want 1 (section 10); changed: %s", c.name, c.series, got, dropDiff(before, after))
		}
		for k := 1; k <= 3; k++ {
			if xs := b.collect(s, k, m[k], classResult); len(xs) > 0 {
				t.Errorf("%s: h%d got a copy of a frame that must be dropped", c.name, k+1)
			}
		}
	}
	// The context still works: a good frame is replicated.
	m := b.marks()
	d := good()
	b.send(t, 0, d, nil)
	time.Sleep(100 * time.Millisecond)
	for k := 1; k <= 3; k++ {
		xs := b.collect(s, k, m[k], classResult)
		if len(xs) != 1 {
			t.Errorf("after the drops: h%d got %d copies of a good RESULT, want 1", k+1, len(xs))
			continue
		}
		b.checkResultCopy(t, s, xs[0], d, bmMasks[k][:1])
	}
	b.bmNoProgress(t, s.ID, m0)
	b.abort(t, s)
}

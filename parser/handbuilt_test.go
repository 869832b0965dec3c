// Frames of every kind written byte by byte from the tables of
// docs/protocol.md (not with the encoder), decoded and checked field by
// field: the decoder's independent oracle.

package parser

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	hbEth = []byte{0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x88, 0xB5}
	// Job 0x0102030405060708, Group 1, GroupGen 2, Op 3, OpGen 4.
	hbOp  = []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2, 0, 3, 0, 0, 0, 4}
	hbKey = OpKey{Job: 0x0102030405060708, Group: 1, GroupGen: 2, Op: 3, OpGen: 4}
)

// TestHandBuiltStageBoundary: a domain boundary's STAGE (section 8.10),
// written from the tables: the A-BM record (0xFF) and the boundary set record
// (0xFE, endpoint 65536 = FLAT Set ID 1024, bit 0); then the same body with
// the 0xFE record twice, which is refused at the second one.
func TestHandBuiltStageBoundary(t *testing.T) {
	rec := [][]byte{
		// own A-BM: length 4+12, FLAT prefix, Set 0, 1 word, endpoints 0..3
		cat([]byte{0xFF, 0, 0, 16}, []byte{1, 0, 0, 0}, []byte{0, 0, 0, 1, 0xF0, 0, 0, 0, 0, 0, 0, 0}),
		// boundary set: length 4+12, FLAT prefix, Set 1024 (0x0400), 1 word, endpoint 65536 = bit 0
		cat([]byte{0xFE, 0, 0, 16}, []byte{1, 0, 0, 0}, []byte{0x04, 0, 0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0}),
	}
	frame := func(sets ...[]byte) []byte {
		n := 40 + 16 + 20*len(sets)
		return cat(hbEth, []byte{0x10, 0x01}, hbOp,
			[]byte{0, 0, 0, 0x2B}, []byte{0xFF, 0xFE}, []byte{0x00, 0x01}, []byte{1, 0},
			[]byte{byte(n >> 8), byte(n)}, []byte{0, 1},
			// INTERNAL, BITMAP, FP32, KULISCH_FIXED, KULISCH, FP32, W=280
			[]byte{3, 3, 4, 3, 5, 4}, []byte{0x01, 0x18},
			[]byte{0, 0, 0, 8}, []byte{0x05, 0xDC}, []byte{1, byte(len(sets))}, // vector 8, MTU 1500, 1 binding
			[]byte{0, 4}, []byte{0, 2}, []byte{0, 0, 0x17, 0x70}, []byte{0, 0, 0x0B, 0x58},
			[]byte{0, 0, 0, 4}, []byte{0, 0, 0x03, 0xE8}, []byte{0, 0, 0, 7},
			[]byte{2, 0, 0, 9, 0, 0x20, 0, 0x30, 0, 2, 0x02, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE}, // PARENT
			cat(sets...))
	}
	var c Control
	if err := c.Decode(frame(rec[0], rec[1]), Limits{}); err != nil {
		t.Fatal(err)
	}
	s := c.Stage()
	var it SetRecordIter
	s.NextSet(&it)
	r, ok := s.NextSet(&it)
	if !ok || r.BindingIndex != BoundarySet || BoundarySet != 0xFE || r.Encoding != EncFlat || len(r.Set) != 12 {
		t.Fatalf("boundary record %+v %v", r, ok)
	}
	var si SetIter
	if e, ok := NextEndpoint(r.Encoding, r.Set, &si); !ok || e != 65536 {
		t.Fatalf("boundary endpoint %d %v", e, ok)
	}
	err := c.Decode(frame(rec[0], rec[1], rec[1]), Limits{})
	fe, ok := errors.AsType[*FieldError](err)
	// The third record starts at body offset 40 + 16 + 2 x 20 = 96.
	if !ok || !errors.Is(err, ErrRange) || fe.Field != "stage.set.binding_index" || fe.Offset-ControlBodyOff != 96 {
		t.Fatalf("second 0xFE record: %v", err)
	}
}

func TestHandBuiltControl(t *testing.T) {
	stage := cat(hbEth, []byte{0x10, 0x01}, hbOp,
		[]byte{0, 0, 0, 0x2A},                  // Transaction 42
		[]byte{0xFF, 0xFE}, []byte{0x00, 0x01}, // src, dst endpoint
		[]byte{1, 0},                    // STAGE, status 0
		[]byte{0, 40 + 16 + 4 + 4 + 12}, // body length 76
		[]byte{0, 1},                    // fragment 0 of 1
		// context record
		[]byte{3, 3, 4, 3, 5, 6}, []byte{0x01, 0x18}, // INTERNAL, BITMAP, FP32, KULISCH_FIXED, KULISCH, AUTO, W=280
		[]byte{0, 0, 0x10, 0}, []byte{0x05, 0xDC}, []byte{1, 1}, // vector 4096, MTU 1500, 1 binding, 1 set
		[]byte{0, 4}, []byte{0, 2}, []byte{0, 0, 0x17, 0x70}, []byte{0, 0, 0x0B, 0x58}, // 4 iv, 2 replay, 6000 B, 2904 el
		[]byte{0, 0, 0, 4}, []byte{0, 0, 0x03, 0xE8}, []byte{0, 0, 0, 7}, // 4 terms (278+2 <= 280), 1000 ms, tenant 7
		// binding: PARENT, flags 0, stream 9, local 0x20, peer 0x30, port 2, MAC
		[]byte{2, 0, 0, 9, 0, 0x20, 0, 0x30, 0, 2, 0x02, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE},
		// set record: own A-BM, length 4+12, FLAT prefix, Set 0, 1 word, bits 0..3
		[]byte{0xFF, 0, 0, 16}, []byte{1, 0, 0, 0}, []byte{0, 0, 0, 1, 0xF0, 0, 0, 0, 0, 0, 0, 0},
	)
	var c Control
	if err := c.Decode(stage, Limits{}); err != nil {
		t.Fatal(err)
	}
	if c.Op != hbKey || c.Txn != 42 || c.SrcEP != 0xFFFE || c.DstEP != 1 || c.Cmd != CmdStage || c.BodyLen != 76 || c.FragCount != 1 {
		t.Fatalf("header: %+v", c)
	}
	s := c.Stage()
	want := ContextRecord{Role: RoleInternal, Collective: CollBitmap, InputFormat: FormatFP32, AccPolicy: AccKulischFixed,
		PartialPolicy: FormatKulisch, OutputFormat: FormatAuto, KulischWidth: 280, VectorLen: 4096, MTU: 1500, BindingCount: 1,
		SetCount: 1, WindowIntervals: 4, ReplayDepth: 2, WindowBytes: 6000, WindowElements: 2904, MaxTerms: 4, TimeoutMs: 1000, Tenant: 7}
	if s.Context != want {
		t.Fatalf("context\n got %+v\nwant %+v", s.Context, want)
	}
	b := s.Binding(0)
	if (b != Binding{Kind: KindParent, Stream: 9, LocalEP: 0x20, PeerEP: 0x30, Port: 2, PeerMAC: [6]byte{2, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE}}) {
		t.Fatalf("binding %+v", b)
	}
	var it SetRecordIter
	r, ok := s.NextSet(&it)
	if !ok || r.BindingIndex != OwnSet || r.Encoding != EncFlat || len(r.Set) != 12 {
		t.Fatalf("set record %+v %v", r, ok)
	}
	var eps []uint32
	var si SetIter
	for ep, ok := NextEndpoint(r.Encoding, r.Set, &si); ok; ep, ok = NextEndpoint(r.Encoding, r.Set, &si) {
		eps = append(eps, ep)
	}
	if len(eps) != 4 || eps[0] != 0 || eps[3] != 3 {
		t.Fatalf("endpoints %v", eps)
	}
	if _, ok := s.NextSet(&it); ok {
		t.Fatal("extra set record")
	}

	commit := cat(hbEth, []byte{0x10, 1}, hbOp, []byte{0, 0, 0, 43, 0xFF, 0xFE, 0, 1, 2, 0, 0, 0, 0, 1})
	if err := c.Decode(commit, Limits{}); err != nil || c.Cmd != CmdCommit || c.Txn != 43 || len(c.Body) != 0 {
		t.Fatalf("commit: %v %+v", err, c)
	}
	// COMPLETE (3) and RELEASE (4) have empty bodies like COMMIT.
	for cmd, want := range map[byte]Command{3: CmdComplete, 4: CmdRelease} {
		f := cat(hbEth, []byte{0x10, 1}, hbOp, []byte{0, 0, 0, 46, 0xFF, 0xFE, 0, 1, cmd, 0, 0, 0, 0, 1})
		if err := c.Decode(f, Limits{}); err != nil || c.Cmd != want || c.Txn != 46 || len(c.Body) != 0 {
			t.Fatalf("command %d: %v %+v", cmd, err, c)
		}
	}
	abort := cat(hbEth, []byte{0x10, 1}, hbOp, []byte{0, 0, 0, 44, 0xFF, 0xFE, 0, 1, 6, 0, 0, 0, 0, 1})
	if err := c.Decode(abort, Limits{}); err != nil || c.Cmd != CmdAbort {
		t.Fatalf("abort: %v %+v", err, c)
	}
	ack := cat(hbEth, []byte{0x10, 1}, hbOp, []byte{0, 0, 0, 42, 0, 1, 0xFF, 0xFE, 5, 1, 0, 16, 0, 1},
		[]byte{1, 0, 0, 40, 0, 0, 1, 0, 0, 7, 0, 0, 0, 0, 0, 9}) // STAGE, NONE, detail 40, 256 done, stream 7 from 9
	if err := c.Decode(ack, Limits{}); err != nil || c.Cmd != CmdAck || c.Status != StatusInvalid {
		t.Fatalf("ack: %v %+v", err, c)
	}
	if a := c.Ack(); a != (Ack{AckedCmd: CmdStage, State: StateNone, Detail: 40, Completed: 256, MissingStream: 7, MissingFrom: 9}) {
		t.Fatalf("ack body %+v", a)
	}
	q := cat(hbEth, []byte{0x10, 1}, hbOp, []byte{0, 0, 0, 45, 0xFF, 0xFE, 0, 1, 7, 0, 0, 4, 0, 1}, []byte{2, 0, 0, 0})
	if err := c.Decode(q, Limits{}); err != nil || c.Cmd != CmdCapsQuery || c.CapsQueryPage() != 2 {
		t.Fatalf("caps query: %v %+v", err, c)
	}
	resp := cat(hbEth, []byte{0x10, 1}, make([]byte, 18), []byte{0, 0, 0, 45, 0, 1, 0xFF, 0xFE, 8, 0, 0, 44, 1, 3},
		[]byte{1, 0, 0, 8, 0x23, 0x28, 0, 32, 0, 0, 0, 0}, // 1 record, 8 ports, MTU 9000, 32 ops
		[]byte{4, 1, 4, 6, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0x05, 0xDC, 0, 64, 0, 16, 0, 8, 0, 1, 0, 0, 0, 0, 0x40, 0})
	if err := c.Decode(resp, Limits{}); err != nil || c.Cmd != CmdCapsResponse || c.FragIndex != 1 || c.FragCount != 3 {
		t.Fatalf("caps response: %v %+v", err, c)
	}
	p := c.CapsPage()
	if p.NRecords != 1 || p.PortCount != 8 || p.MaxMTU != 9000 || p.MaxOps != 32 {
		t.Fatalf("page %+v", p)
	}
	if p.Records[0] != (CapRecord{InputFormat: FormatFP32, AccPolicy: AccFP32Arrival, PartialPolicy: FormatFP32, OutputFormat: FormatAuto,
		MaxVectorLen: 65536, MaxTerms: 256, MaxMTU: 1500, MaxBindings: 64, MaxWindowIntervals: 16, MaxReplayDepth: 8,
		MaxWindowBytes: 65536, MaxWindowElements: 16384}) {
		t.Fatalf("record %+v", p.Records[0])
	}
}

func TestHandBuiltData(t *testing.T) {
	lim := Limits{VectorLen: 1024, KulischBytes: 35, MTU: 1500}
	hdr := func(class byte, pid, first uint32, count uint16, groups, flags byte, body uint16) []byte {
		return cat(hbEth, []byte{0x10, class}, hbOp, []byte{0, 0x10, 0, 0x20},
			[]byte{byte(pid >> 24), byte(pid >> 16), byte(pid >> 8), byte(pid)},
			[]byte{byte(first >> 24), byte(first >> 16), byte(first >> 8), byte(first)},
			[]byte{byte(count >> 8), byte(count), groups, flags, byte(body >> 8), byte(body)}, []byte{0, 5, 0, 0})
	}
	// One FP32 group of 2: 1.0 = 00 00 80 3F, -2.0 = 00 00 00 C0 (little-endian).
	one := cat(hdr(2, 7, 100, 2, 1, 0, 12), []byte{0, 2, 0x40, 0}, []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0},
		[]byte{0xEE, 0xEE}) // trailing Ethernet padding is ignored
	var d Data
	if err := d.Decode(one, lim); err != nil {
		t.Fatal(err)
	}
	if d.Class != ClassData || d.Op != hbKey || d.SrcEP != 0x10 || d.DstEP != 0x20 || d.PacketID != 7 || d.First != 100 ||
		d.Count != 2 || d.Groups != 1 || d.BodyLen != 12 || d.Stream != 5 {
		t.Fatalf("%+v", d)
	}
	var it GroupIter
	g, ok := d.NextGroup(&it)
	if !ok || g.Format != FormatFP32 || g.Count != 2 || g.First != 100 || !bytes.Equal(g.Values, []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0}) {
		t.Fatalf("group %+v", g)
	}
	if _, ok := d.NextGroup(&it); ok {
		t.Fatal("extra group")
	}

	// [INT8 x3 + 1 pad][KULISCH-280 x1][FP16 x1 + 2 pad] = 8 + 40 + 8 = 56 body bytes, 5 elements.
	k := make([]byte, 36)
	k[0] = KulischNegInf
	three := cat(hdr(3, 8, 1019, 5, 3, FlagLast, 56),
		[]byte{0, 3, 0x10, 0}, []byte{1, 0xFF, 0x7F, 0},
		[]byte{0, 1, 0x50, 35}, k,
		[]byte{0, 1, 0x20, 0}, []byte{0, 0x3C, 0, 0})
	if err := d.Decode(three, lim); err != nil {
		t.Fatal(err)
	}
	if d.Class != ClassResult || d.Count != 5 || d.Groups != 3 || d.Flags != FlagLast {
		t.Fatalf("%+v", d)
	}
	it = GroupIter{}
	wantG := []Group{{Format: FormatINT8, Count: 3, First: 1019, Values: []byte{1, 0xFF, 0x7F}},
		{Format: FormatKulisch, KBytes: 35, Count: 1, First: 1022, Values: k},
		{Format: FormatFP16, Count: 1, First: 1023, Values: []byte{0, 0x3C}}}
	for i, w := range wantG {
		g, ok := d.NextGroup(&it)
		if !ok || g.Format != w.Format || g.KBytes != w.KBytes || g.Count != w.Count || g.First != w.First || !bytes.Equal(g.Values, w.Values) {
			t.Fatalf("group %d: %+v want %+v", i, g, w)
		}
	}

	// KULISCH_SCALED x3, B = 4, Shift 126 (big-endian 00 7E, reserved 00 00):
	// 1.0 = 2^23 x 2^126 units, -0, -3 x 2^126; 4 + 4 + 15 + 1 pad = 24 bytes.
	scaledVals := []byte{KulischFinite, 0, 0, 0x80, 0, KulischNegZero, 0, 0, 0, 0, KulischFinite, 0xFD, 0xFF, 0xFF, 0xFF}
	scaled := cat(hdr(2, 11, 500, 3, 1, 0, 24), []byte{0, 3, 0x70, 4}, []byte{0, 0x7E, 0, 0}, scaledVals, []byte{0})
	if err := d.Decode(scaled, lim); err != nil {
		t.Fatal(err)
	}
	it = GroupIter{}
	if g, ok := d.NextGroup(&it); !ok || g.Format != FormatKulischScaled || g.KBytes != 4 || g.Shift != 126 || g.Count != 3 ||
		g.First != 500 || !bytes.Equal(g.Values, scaledVals) {
		t.Fatalf("scaled group %+v", g)
	}
	// The same group in a RESULT is never legal: ranks never see code 7.
	res := slices.Clone(scaled)
	res[CWOff+1] = byte(ClassResult)
	if err := d.Decode(res, lim); !errors.Is(err, ErrFormat) || err.(*FieldError).Field != "group.format" {
		t.Fatalf("scaled group in RESULT: %v", err)
	}
	// Shift + 8B = 126 + 32 <= 280, but not <= 152 (an operation of W = 152).
	if err := d.Decode(scaled, Limits{KulischBytes: 19}); !errors.Is(err, ErrRange) || err.(*FieldError).Field != "group.scale_shift" {
		t.Fatalf("Shift + 8B > W: %v", err)
	}

	// KULISCH_F64 x3 (format code 8, bits 11..0 zero, no Scale Word, binary64
	// little-endian): 1.0, -0 and the one NaN pattern; 4 + 24 = 28 bytes.
	f64Vals := cat([]byte{0, 0, 0, 0, 0, 0, 0xF0, 0x3F}, []byte{0, 0, 0, 0, 0, 0, 0, 0x80}, []byte{0, 0, 0, 0, 0, 0, 0xF8, 0x7F})
	f64 := cat(hdr(2, 12, 600, 3, 1, 0, 28), []byte{0, 3, 0x80, 0}, f64Vals)
	if err := d.Decode(f64, lim); err != nil {
		t.Fatal(err)
	}
	it = GroupIter{}
	if g, ok := d.NextGroup(&it); !ok || g.Format != FormatKulischF64 || g.KBytes != 0 || g.Shift != 0 || g.Count != 3 ||
		g.First != 600 || !bytes.Equal(g.Values, f64Vals) {
		t.Fatalf("KULISCH_F64 group %+v", g)
	}
	// Section 6's malformed example, 2^-150 = 0x3690000000000000, as the
	// second value (frame offset 56 + 4 + 8): out_of_range there.
	half := slices.Clone(f64)
	copy(half[68:], []byte{0, 0, 0, 0, 0, 0, 0x90, 0x36})
	if err := d.Decode(half, lim); !errors.Is(err, ErrRange) || err.(*FieldError).Field != "group.f64_value" || err.(*FieldError).Offset != 68 {
		t.Fatalf("2^-150: %v", err)
	}
	// The same group in a RESULT: never legal, like KULISCH_SCALED.
	res = slices.Clone(f64)
	res[CWOff+1] = byte(ClassResult)
	if err := d.Decode(res, lim); !errors.Is(err, ErrFormat) || err.(*FieldError).Field != "group.format" {
		t.Fatalf("KULISCH_F64 group in RESULT: %v", err)
	}

	inexact := hdr(2, 9, 0, 0, 0, FlagLast|FlagInexact, 0)
	if err := d.Decode(inexact, lim); err != nil || d.Flags != FlagLast|FlagInexact || d.Count != 0 {
		t.Fatalf("inexact: %v %+v", err, d)
	}

	// DATA + FLAT ext (tenant 5, token 6, set 0 / 1 word, bit 1) + one INT8 value.
	flat := cat(hdr(2, 10, 0, 1, 1, FlagExt, 8),
		[]byte{0, 28, 1, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6}, []byte{0, 0, 0, 1, 0x40, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0, 1, 0x10, 0, 42, 0, 0, 0})
	if err := d.Decode(flat, lim); err != nil {
		t.Fatal(err)
	}
	if d.Ext.Encoding != EncFlat || d.Ext.Tenant != 5 || d.Ext.Token != 6 || len(d.Ext.Set) != 12 || d.Count != 1 {
		t.Fatalf("flat: %+v", d)
	}
	if ep, ok := d.Ext.NextEndpoint(&SetIter{}); !ok || ep != 1 {
		t.Fatalf("flat endpoint %d %v", ep, ok)
	}

	// RESULT + INSTALL + LIST {4, 9}, zero groups.
	list := cat(hdr(3, 11, 0, 0, 0, FlagExt, 0),
		[]byte{0, 28, 3, 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0x12, 0x34}, []byte{0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 9})
	if err := d.Decode(list, lim); err != nil {
		t.Fatal(err)
	}
	if d.Ext.Encoding != EncList || d.Ext.XFlags != XFlagInstall || d.Ext.Token != 0x1234 {
		t.Fatalf("list %+v", d.Ext)
	}
	var eps []uint32
	var si SetIter
	for ep, ok := d.Ext.NextEndpoint(&si); ok; ep, ok = d.Ext.NextEndpoint(&si) {
		eps = append(eps, ep)
	}
	if len(eps) != 2 || eps[0] != 4 || eps[1] != 9 {
		t.Fatalf("list endpoints %v", eps)
	}

	// DATA + HIER: 64-bit blocks, 3 blocks, upper = blocks 0 and 2, lowers {0}, {63} -> endpoints 0, 191.
	hier := cat(hdr(2, 12, 0, 0, 0, FlagExt, 0),
		[]byte{0, 44, 2, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1},
		[]byte{0, 64, 0, 3}, []byte{0xA0, 0, 0, 0, 0, 0, 0, 0}, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}, []byte{0, 0, 0, 0, 0, 0, 0, 1})
	if err := d.Decode(hier, lim); err != nil {
		t.Fatal(err)
	}
	eps, si = eps[:0], SetIter{}
	for ep, ok := d.Ext.NextEndpoint(&si); ok; ep, ok = d.Ext.NextEndpoint(&si) {
		eps = append(eps, ep)
	}
	if d.Ext.Encoding != EncHier || len(eps) != 2 || eps[0] != 0 || eps[1] != 191 {
		t.Fatalf("hier endpoints %v", eps)
	}
}

func TestHandBuiltProgress(t *testing.T) {
	f := cat(hbEth, []byte{0x10, 4}, hbOp, []byte{0, 0x20, 0, 0x10, 0, 5}, []byte{0, 0, 0, 9}, []byte{0, 0, 0, 100},
		[]byte{0, 3}, []byte{0, 0, 0x10, 0}, []byte{1, 3, 0, 2, 0, 0},
		[]byte{0, 0, 0, 200, 0, 0, 1, 44}, []byte{0, 0, 1, 144, 0, 0, 1, 194})
	var g Progress
	if err := g.Decode(f, Limits{VectorLen: 1024}); err != nil {
		t.Fatal(err)
	}
	if g.Op != hbKey || g.SrcEP != 0x20 || g.DstEP != 0x10 || g.Stream != 5 || g.PacketID != 9 || g.Committed != 100 ||
		g.IntervalCredits != 3 || g.ByteCredits != 4096 || g.Status != ProgressStatusDuplicate ||
		g.Flags != ProgressFlagResult|ProgressFlagComplete || g.NHoles != 2 || g.Holes[0] != (Hole{200, 300}) || g.Holes[1] != (Hole{400, 450}) {
		t.Fatalf("%+v", g)
	}
}

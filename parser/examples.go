// This file owns the canonical example frames: one of every kind, built with
// this package's encoders. They are the worked examples of docs/protocol.md
// (checked by protocol_doc_test.go), the fuzz seed corpus, and test vectors
// for parser/layer and external dissectors. Not used on the hot path.

package parser

import (
	"encoding/binary"
	"math"
)

// Example is one example frame.
type Example struct {
	Marker string // stable fence marker in docs/protocol.md ("prism-example:<Marker>")
	Title  string
	Note   string
	Frame  []byte // whole Ethernet frame
	Limits Limits // operation limits the frame is valid under
}

var (
	exEth = Eth{Dst: [6]byte{0x02, 0, 0, 0, 0, 0x01}, Src: [6]byte{0x02, 0, 0, 0, 0, 0x02}}
	exOp  = OpKey{Job: 0x0102030405060708, Group: 1, GroupGen: 1, Op: 7, OpGen: 1}
	// exLim is the operation the DATA examples belong to.
	exLim = Limits{VectorLen: 1024, KulischBytes: 35, MTU: 1500, ListCap: 8}
)

func fp32s(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// f64s is the KULISCH_F64 encoding of vs: binary64, little-endian.
func f64s(vs ...float64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

func bf16s(vs ...float32) []byte {
	b := make([]byte, 0, 2*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, uint16(math.Float32bits(v)>>16))
	}
	return b
}

// kulisch280One is the Kulisch-280 encoding of 1.0: state FINITE, integer
// 2^149 (units of 2^-149), little-endian: bit 149 is bit 5 of byte 18.
func kulisch280One() []byte {
	v := make([]byte, 36)
	v[1+18] = 0x20
	return v
}

func mustControl(c *Control) []byte {
	b := make([]byte, EthLen+c.Len())
	if _, err := c.Encode(b, exEth); err != nil {
		panic(err)
	}
	return b
}

func mustData(h *DataFields, ext *Ext, groups ...Group) []byte {
	b, err := AppendData(nil, h, ext, groups...)
	if err != nil {
		panic(err)
	}
	return b
}

func ctlHdr(cmd Command, txn uint32) Control {
	return Control{Op: exOp, Txn: txn, SrcEP: 0xFFFE, DstEP: 0x0001, Cmd: cmd, FragCount: 1}
}

func exampleStageSpec() StageSpec {
	return StageSpec{
		Context: ContextRecord{Role: RoleSingle, Collective: CollReduce, InputFormat: FormatFP32,
			AccPolicy: AccKulischFixed, PartialPolicy: FormatKulisch, OutputFormat: FormatFP32, KulischWidth: 280,
			VectorLen: 1024, MTU: 1500, WindowIntervals: 8, ReplayDepth: 8, WindowBytes: 12000,
			WindowElements: 2904, MaxTerms: 2, TimeoutMs: 1000},
		Bindings: []Binding{
			{Kind: KindContributor, Flags: BindingFlagRank, Stream: 1, LocalEP: 0x0010, PeerEP: 0x0100, Port: 0,
				PeerMAC: [6]byte{0x02, 0, 0, 0, 0x01, 0x00}},
			{Kind: KindResultOut, Flags: BindingFlagRank, Stream: 1, LocalEP: 0x0011, PeerEP: 0x0101, Port: 1,
				PeerMAC: [6]byte{0x02, 0, 0, 0, 0x01, 0x01}},
		},
	}
}

// Examples returns fresh copies of the example frames, in document order.
func Examples() []Example {
	var ex []Example
	add := func(marker, title, note string, frame []byte, lim Limits) {
		ex = append(ex, Example{marker, title, note, frame, lim})
	}

	st := exampleStageSpec()
	body := make([]byte, st.Len())
	if _, err := st.Encode(body); err != nil {
		panic(err)
	}
	c := ctlHdr(CmdStage, 0x11)
	c.Body = body
	add("control-stage", "CONTROL STAGE with 2 bindings",
		"SINGLE node, REDUCE, FP32 in, KULISCH_FIXED (W=280), KULISCH partials, FP32 out, vector 1024, MTU 1500; "+
			"binding 0 CONTRIBUTOR stream 1 (rank, port 0), binding 1 RESULT_OUT path 1 (rank, port 1).",
		mustControl(&c), Limits{})

	c = ctlHdr(CmdCommit, 0x12)
	add("control-commit", "CONTROL COMMIT", "Empty body.", mustControl(&c), Limits{})

	ack := Ack{AckedCmd: CmdCommit, State: StateActive, Detail: NoDetail, Completed: 0, MissingStream: NoDetail}
	ab := make([]byte, AckBodyLen)
	ack.Encode(ab)
	c = Control{Op: exOp, Txn: 0x12, SrcEP: 0x0001, DstEP: 0xFFFE, Cmd: CmdAck, Status: StatusOK, FragCount: 1, Body: ab}
	add("control-ack", "CONTROL ACK", "Reply to the COMMIT above: status OK, state ACTIVE, no detail.", mustControl(&c), Limits{})

	c = ctlHdr(CmdAbort, 0x13)
	add("control-abort", "CONTROL ABORT", "Empty body.", mustControl(&c), Limits{})

	qb := make([]byte, CapsQueryLen)
	EncodeCapsQuery(qb, 0)
	c = ctlHdr(CmdCapsQuery, 0x14)
	c.Op = OpKey{} // capability exchange is not about an operation
	c.Body = qb
	add("control-caps-query", "CONTROL CAPS_QUERY", "Page 0.", mustControl(&c), Limits{})

	page := CapsPage{PortCount: 4, MaxMTU: 9000, MaxOps: 64, NRecords: 1}
	page.Records[0] = CapRecord{InputFormat: FormatFP32, AccPolicy: AccKulischFixed, PartialPolicy: FormatAuto,
		OutputFormat: FormatFP32, MinKulischWidth: 280, MaxKulischWidth: 4096, MaxVectorLen: 1 << 24, MaxTerms: 1 << 16,
		MaxMTU: 9000, MaxBindings: 64, MaxWindowIntervals: 64, MaxReplayDepth: 64, MaxWindowBytes: 1 << 20, MaxWindowElements: 1 << 18}
	pb := make([]byte, page.Len())
	page.Encode(pb)
	c = Control{Op: OpKey{}, Txn: 0x14, SrcEP: 0x0001, DstEP: 0xFFFE, Cmd: CmdCapsResponse, FragIndex: 0, FragCount: 1, Body: pb}
	add("control-caps-response", "CONTROL CAPS_RESPONSE page",
		"Page 0 of 1: 4 ports, max MTU 9000, 64 operations, one record (FP32, KULISCH_FIXED, AUTO, FP32; W 280..4096).",
		mustControl(&c), Limits{})

	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0100, DstEP: 0x0010, PacketID: 1, First: 0, Stream: 1}
	add("data-fp32", "DATA with one FP32 group", "Rank contribution: elements 0..3 = 1.0, 2.0, 3.0, 4.0.",
		mustData(&h, nil, Group{Format: FormatFP32, Count: 4, Values: fp32s(1, 2, 3, 4)}), exLim)

	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0200, DstEP: 0x0020, PacketID: 9, First: 10, Stream: 3}
	add("data-mixed", "DATA with three groups [FP32 x2][KULISCH-280 x1][FP32 x2]",
		"A switch partial for elements 10..14: 0.5, 0.25, exact 1.0 (Kulisch state FINITE, integer 2^149), 8.0, -2.0.",
		mustData(&h, nil,
			Group{Format: FormatFP32, Count: 2, Values: fp32s(0.5, 0.25)},
			Group{Format: FormatKulisch, KBytes: 35, Count: 1, Values: kulisch280One()},
			Group{Format: FormatFP32, Count: 2, Values: fp32s(8, -2)}), exLim)

	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0200, DstEP: 0x0020, PacketID: 11, First: 20, Stream: 3}
	add("data-scaled", "DATA with a KULISCH_SCALED group (B = 4, Shift = 126)",
		"A switch partial for elements 20..24: exact 1.0, -0.75, +0, 2^-23, -inf as integers x 2^126 units (2^-23 each): "+
			"2^23, -3 x 2^21, 0 (state +0), 1, 0 (state -inf); the Scale Word 00 7e 00 00 is Shift 126 big-endian and two reserved "+
			"bytes; 25 value bytes and 3 bytes of padding. As plain KULISCH-280 the same values take 184 body bytes.",
		mustData(&h, nil, Group{Format: FormatKulischScaled, KBytes: 4, Shift: 126, Count: 5, Values: []byte{
			KulischFinite, 0x00, 0x00, 0x80, 0x00, // 2^23 x 2^126 = 2^149 units = 1.0
			KulischFinite, 0x00, 0x00, 0xA0, 0xFF, // -3 x 2^21 x 2^126 = -3 x 2^147 units = -0.75
			KulischPosZero, 0, 0, 0, 0,
			KulischFinite, 0x01, 0x00, 0x00, 0x00, // 2^126 units = 2^-23
			KulischNegInf, 0, 0, 0, 0,
		}}), exLim)

	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0200, DstEP: 0x0020, PacketID: 10, First: 0,
		Flags: FlagLast | FlagInexact, Stream: 3}
	add("data-inexact", "DATA ACCUMULATION_INEXACT", "Terminal frame: LAST and ACCUMULATION_INEXACT, no groups, no body.",
		mustData(&h, nil), exLim)

	h = DataFields{Eth: exEth, Class: ClassResult, Op: exOp, SrcEP: 0x0011, DstEP: 0x0101, PacketID: 256, First: 1020,
		Flags: FlagLast, Stream: 1}
	add("result-last", "RESULT with LAST", "Result path 1, elements 1020..1023 of a 1024-element vector.",
		mustData(&h, nil, Group{Format: FormatFP32, Count: 4, Values: fp32s(10, 20, 30, 40)}), exLim)

	g := Progress{Op: exOp, SrcEP: 0x0010, DstEP: 0x0100, Stream: 1, PacketID: 5, Committed: 100,
		IntervalCredits: 6, ByteCredits: 9000, Status: ProgressStatusOK, NHoles: 2}
	g.Holes[0], g.Holes[1] = Hole{200, 300}, Hole{400, 450}
	pg := make([]byte, EthLen+g.Len())
	g.Encode(pg, exEth)
	add("progress-holes", "PROGRESS with 2 holes", "Committed 100; missing [200,300) and [400,450); 6 intervals and 9000 bytes of credit.",
		pg, exLim)

	flat := AppendFlatSet(nil, 0, 1, 0, 1)
	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0300, DstEP: 0x0030, PacketID: 3, First: 0, Stream: 1}
	add("data-flat-ext", "DATA with a FLAT endpoint-set extension",
		"AllReduce contribution of s1 (Fig. 1): P-BM {w1,w2} = bits 0,1 of one 64-bit word; tenant 7, sequence 42; two FP32 values.",
		mustData(&h, &Ext{Encoding: EncFlat, Tenant: 7, Token: 42, Set: flat},
			Group{Format: FormatFP32, Count: 2, Values: fp32s(1.5, -1.5)}), exLim)

	list := AppendListSet(nil, 1, 2, 5, 6)
	h = DataFields{Eth: exEth, Class: ClassResult, Op: exOp, SrcEP: 0x0400, DstEP: 0x0040, PacketID: 77, First: 0, Stream: 2}
	add("result-install-list", "RESULT with INSTALL and a LIST extension",
		"MoE dispatch (Fig. 2): token 0x1234 to experts e2,e3,e6,e7 (endpoints 1,2,5,6); branch nodes install C-BM; four BF16 hidden values.",
		mustData(&h, &Ext{Encoding: EncList, XFlags: XFlagInstall, Tenant: 7, Token: 0x1234, Set: list},
			Group{Format: FormatBF16, Count: 4, Values: bf16s(1, -1, 0.5, 2)}), exLim)

	hier := AppendHierSet(nil, 64, 4, 3, 130, 131)
	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0500, DstEP: 0x0050, PacketID: 12, First: 0, Stream: 4}
	hf := mustData(&h, &Ext{Encoding: EncHier, XFlags: XFlagAuth, Tenant: 7, Token: 99, Set: hier})
	if err := NewAuthenticator([]byte("prism-example-key")).Sign(hf); err != nil {
		panic(err)
	}
	add("data-hier-ext", "DATA with a HIER extension (reliable-multicast ACK, authenticated)",
		"Aggregated ACK for sequence 99: P-BM {3,130,131} in 4 blocks of 64 (upper bits 0 and 2, two lower bitmaps); "+
			"zero groups; AUTH tag = HMAC-SHA256/128 under key \"prism-example-key\".",
		hf, Limits{VectorLen: 1024, MTU: 1500})

	bst := exampleStageSpec()
	bst.Context.Role, bst.Context.Collective, bst.Context.MaxTerms, bst.Context.Tenant = RoleInternal, CollBitmap, 4, 7
	mac := func(b byte) [6]byte { return [6]byte{0x02, 0, 0, 0, 0x02, b} }
	bst.Bindings = []Binding{
		{Kind: KindContributor, Stream: 2, LocalEP: 0x0020, PeerEP: 0x0200, Port: 0, PeerMAC: mac(0)},
		{Kind: KindResultOut, Stream: 2, LocalEP: 0x0021, PeerEP: 0x0201, Port: 0, PeerMAC: mac(0)},
		{Kind: KindParent, Stream: 3, LocalEP: 0x0022, PeerEP: 0x0300, Port: 1, PeerMAC: mac(1)},
		{Kind: KindResultIn, Stream: 3, LocalEP: 0x0023, PeerEP: 0x0301, Port: 1, PeerMAC: mac(1)},
	}
	low := AppendFlatSet(nil, 0, 1, 0, 1, 2, 3)
	bst.Sets = []SetRecord{
		{BindingIndex: OwnSet, Encoding: EncFlat, Set: low},
		{BindingIndex: BoundarySet, Encoding: EncFlat, Set: AppendFlatSet(nil, 1024, 1, 65536)},
		{BindingIndex: 1, Encoding: EncFlat, Set: low},
	}
	body = make([]byte, bst.Len())
	if _, err := bst.Encode(body); err != nil {
		panic(err)
	}
	c = ctlHdr(CmdStage, 0x15)
	c.Body = body
	add("control-stage-boundary", "CONTROL STAGE of a domain boundary (section 8.10)",
		"INTERNAL node of a BITMAP job (tenant 7, Max Terms 4, otherwise as 12.1) aggregating endpoints 0..3 below it and "+
			"standing for endpoint 65536 in the enclosing domain: binding 0 CONTRIBUTOR and 1 RESULT_OUT toward the lower "+
			"switch (port 0), 2 PARENT and 3 RESULT_IN toward the upper one (port 1); set records: A-BM (0xFF) {0,1,2,3} as "+
			"FLAT Set ID 0, one word; boundary set (0xFE) {65536} as FLAT Set ID 1024 (04 00), one word, bit 0 (80); BIFT mask "+
			"of binding 1 {0,1,2,3}.",
		mustControl(&c), Limits{})

	// Last so that adding it renumbered no earlier subsection (section 6
	// refers to 12.9 and 12.17 by number).
	h = DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 0x0200, DstEP: 0x0020, PacketID: 12, First: 25, Stream: 3}
	add("data-f64", "DATA with a KULISCH_F64 group",
		"A switch partial for elements 25..29: exact 1.0, -1.5 x 2^-148, +0, 2^-149, -inf as IEEE binary64, 8 bytes each, "+
			"little-endian: 0x3FF0000000000000 (E 1023), 0xB6B8000000000000 (-3 units of 2^-149: E 875, F 2^51, t = 51, so "+
			"its lowest set bit E - 1075 + t = -149 is the finest allowed), 0 (+0), 0x36A0000000000000 (one unit: E 874, t = 52), "+
			"0xFFF0000000000000 (-inf); the descriptor 00 05 80 00 is Count 5, format code 8 and bits 11..0 zero; no Scale "+
			"Word, no state bytes, 40 value bytes and no padding. As plain KULISCH-280 the same values take 184 body bytes.",
		mustData(&h, nil, Group{Format: FormatKulischF64, Count: 5,
			Values: f64s(1, -1.5*math.Ldexp(1, -148), 0, math.Ldexp(1, -149), math.Inf(-1))}), exLim)

	g = Progress{Op: exOp, SrcEP: 0x0010, DstEP: 0x0100, Stream: 1, Committed: 300,
		IntervalCredits: 6, ByteCredits: 9000, Status: ProgressStatusFailed, FailCause: FailLinkDown, FailHops: 1}
	pf := make([]byte, EthLen+g.Len())
	g.Encode(pf, exEth)
	add("progress-failed", "PROGRESS FAILED with its cause",
		"A failure announcement (Packet ID 0) from a leaf to a rank: the leaf failed because its parent announced "+
			"FAILED (one hop), and the failure began at that parent when its port toward a peer went down.",
		pf, exLim)
	return ex
}

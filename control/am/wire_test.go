package am

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/prismd/prismd/parser"
)

// The AM builds and reads CONTROL only through package parser. These tests
// check the conversions: every host-form field lands in the right wire
// field as parser's validating decoder reads it, the bytes equal what
// parser's encoders produce from the same message written directly, and
// the AM's readers agree with parser's encoders.

var (
	testDst = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	testSrc = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

func TestStageDecodesWithParser(t *testing.T) {
	op := OpIdentity{Job: 0x0102030405060708, Group: 9, GroupGen: 2, OpID: 77, OpGen: 123456}
	rec := contextRecord{Role: parser.RoleLeaf, Collective: parser.CollAllReduce, Input: parser.FormatFP32,
		Acc: parser.AccKulischFixed, Partial: parser.FormatAuto, Output: parser.FormatFP32, KulischWidth: 280,
		VectorLen: 100000, MTU: 1500, Intervals: 64, ReplayDepth: 32, WindowBytes: 96000, WindowElems: 92928,
		MaxTerms: 4, TimeoutMS: 5000}
	bs := []binding{
		{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: 1, Local: 2, Peer: 3, Port: 1, PeerMAC: net.HardwareAddr{2, 1, 2, 3, 4, 5}},
		{Kind: parser.KindParent, Stream: 9, Local: 10, Peer: 11, Port: 0, PeerMAC: net.HardwareAddr{2, 9, 9, 9, 9, 9}},
	}
	body, err := encodeStage(rec, bs)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := encodeControl(testDst, testSrc, ctlHeader{Op: op, Txn: 0xdeadbeef, SrcEP: 5, DstEP: 6, Cmd: parser.CmdStage}, body)
	if err != nil {
		t.Fatal(err)
	}
	var c parser.Control
	if err := c.Decode(frame, parser.Limits{}); err != nil {
		t.Fatalf("parser rejects the AM's STAGE: %v", err)
	}
	want := parser.OpKey{Job: op.Job, Group: op.Group, GroupGen: op.GroupGen, Op: op.OpID, OpGen: op.OpGen}
	if c.Op != want || c.Txn != 0xdeadbeef || c.SrcEP != 5 || c.DstEP != 6 || c.Cmd != parser.CmdStage ||
		c.Status != parser.StatusOK || c.FragIndex != 0 || c.FragCount != 1 || int(c.BodyLen) != len(body) {
		t.Fatalf("header %+v", c)
	}
	if eh := parser.EthHeader(frame); eh.Dst() != [6]byte(testDst) || eh.Src() != [6]byte(testSrc) || eh.EtherType() != parser.EtherType {
		t.Fatalf("Ethernet header %x", frame[:parser.EthLen])
	}
	s := c.Stage()
	x := s.Context
	if x.Role != rec.Role || x.Collective != rec.Collective || x.InputFormat != rec.Input || x.AccPolicy != rec.Acc ||
		x.PartialPolicy != rec.Partial || x.OutputFormat != rec.Output || x.KulischWidth != 280 || x.VectorLen != 100000 ||
		x.MTU != 1500 || x.WindowIntervals != 64 || x.ReplayDepth != 32 || x.WindowBytes != 96000 ||
		x.WindowElements != 92928 || x.MaxTerms != 4 || x.TimeoutMs != 5000 || x.BindingCount != 2 || x.SetCount != 0 {
		t.Fatalf("context %+v", x)
	}
	for i, b := range bs {
		g := s.Binding(i)
		if g.Kind != b.Kind || g.Flags != b.Flags || g.Stream != b.Stream || g.LocalEP != b.Local || g.PeerEP != b.Peer ||
			g.Port != b.Port || string(g.PeerMAC[:]) != string(b.PeerMAC) {
			t.Errorf("binding %d: %+v vs %+v", i, g, b)
		}
	}

	// The same message written with parser directly: identical bytes.
	spec := parser.StageSpec{Context: x, Bindings: []parser.Binding{s.Binding(0), s.Binding(1)}}
	direct := make([]byte, spec.Len())
	if _, err := spec.Encode(direct); err != nil {
		t.Fatal(err)
	}
	dc := parser.Control{Op: want, Txn: 0xdeadbeef, SrcEP: 5, DstEP: 6, Cmd: parser.CmdStage, FragCount: 1, Body: direct}
	dframe := make([]byte, parser.EthLen+dc.Len())
	if _, err := dc.Encode(dframe, parser.Eth{Dst: [6]byte(testDst), Src: [6]byte(testSrc)}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(frame, dframe) {
		t.Fatalf("AM frame differs from parser's:\n am     %x\n parser %x", frame, dframe)
	}

	// And back: the fake node's reader agrees.
	f, err := decodeControl(frame)
	if err != nil {
		t.Fatal(err)
	}
	if f.Op != op || f.Txn != 0xdeadbeef || !bytes.Equal(f.Dst, testDst) || !bytes.Equal(f.Src, testSrc) {
		t.Fatalf("decoded header %+v", f)
	}
	rec2, bs2, err := decodeStage(f.Body)
	if err != nil || rec2.bindingsCount != 2 {
		t.Fatalf("%+v %v", rec2, err)
	}
	rec2.bindingsCount = 0
	if rec2 != rec || len(bs2) != 2 {
		t.Fatalf("round trip: %+v", rec2)
	}
	for i := range bs {
		a, b := bs[i], bs2[i]
		if a.Kind != b.Kind || a.Flags != b.Flags || a.Stream != b.Stream || a.Local != b.Local || a.Peer != b.Peer ||
			a.Port != b.Port || !bytes.Equal(a.PeerMAC, b.PeerMAC) {
			t.Errorf("binding %d round trip: %+v vs %+v", i, b, a)
		}
	}
}

func TestStageTooManyBindings(t *testing.T) {
	bs := make([]binding, parser.MaxBindings+1)
	for i := range bs {
		bs[i] = binding{Kind: parser.KindContributor, Stream: uint16(i + 1), PeerMAC: net.HardwareAddr{2, 0, 0, 0, 0, 9}}
	}
	if _, err := encodeStage(contextRecord{}, bs); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("%d bindings: err = %v, want one naming the limit", len(bs), err)
	}
}

func TestAckAndCapsFromParser(t *testing.T) {
	var body [parser.AckBodyLen]byte
	a := parser.Ack{AckedCmd: parser.CmdComplete, State: parser.StateFailed, Detail: 0xFFFF, Completed: 4242, MissingStream: 7, MissingFrom: 363}
	if _, err := a.Encode(body[:]); err != nil {
		t.Fatal(err)
	}
	c := parser.Control{Op: parser.OpKey{Job: 1, Op: 2, OpGen: 3}, Txn: 5, Cmd: parser.CmdAck, Status: parser.StatusOK, FragCount: 1, Body: body[:]}
	buf := make([]byte, 256)
	n, err := c.Encode(buf, parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := decodeControl(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeAck(f.Body)
	wantAck := ackBody{Acked: parser.CmdComplete, State: parser.StateFailed, Detail: 0xFFFF, Completed: 4242, MissStream: 7, MissingFrom: 363}
	if err != nil || f.Txn != 5 || f.Op.OpGen != 3 || got != wantAck {
		t.Fatalf("%+v %+v %v", f, got, err)
	}
	// The AM's ACK encoder (the fake node's) writes parser's bytes.
	if am := encodeAck(wantAck); !bytes.Equal(am, body[:]) {
		t.Fatalf("encodeAck:\n am     %x\n parser %x", am, body)
	}

	var p parser.CapsPage
	p.PortCount, p.MaxMTU, p.MaxOps, p.NRecords = 4, 9000, 64, 1
	p.Records[0] = parser.CapRecord{InputFormat: parser.FormatFP16, AccPolicy: parser.AccKulischFixed, PartialPolicy: parser.FormatKulisch,
		OutputFormat: parser.FormatAuto, MinKulischWidth: 64, MaxKulischWidth: 4096, MaxVectorLen: 1 << 20, MaxTerms: 99,
		MaxMTU: 9000, MaxBindings: 64, MaxWindowIntervals: 1024, MaxReplayDepth: 512, MaxWindowBytes: 1 << 24, MaxWindowElements: 1 << 20}
	cb := make([]byte, 1024)
	k, err := p.Encode(cb)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := decodeCaps(cb[:k])
	if err != nil || cp.PortCount != 4 || cp.MaxMTU != 9000 || cp.MaxOps != 64 || len(cp.Records) != 1 {
		t.Fatalf("%+v %v", cp, err)
	}
	r := cp.Records[0]
	wantRec := capRecord{Input: parser.FormatFP16, Acc: parser.AccKulischFixed, Partial: parser.FormatKulisch, Output: parser.FormatAuto,
		MinKW: 64, MaxKW: 4096, MaxVector: 1 << 20, MaxTerms: 99, MaxMTU: 9000, MaxBindings: 64, MaxIntervals: 1024,
		MaxReplay: 512, MaxWinBytes: 1 << 24, MaxWinElem: 1 << 20}
	if r != wantRec {
		t.Fatalf("record %+v, want %+v", r, wantRec)
	}
	if am := encodeCaps(cp); !bytes.Equal(am, cb[:k]) {
		t.Fatalf("encodeCaps:\n am     %x\n parser %x", am, cb[:k])
	}
	if _, err := decodeCaps(cb[:parser.CapsPageHdrLen+10]); err == nil {
		t.Fatal("a CAPS page cut inside its record was accepted")
	}

	// CAPS_QUERY: the AM's request is what parser reads as that page.
	q, err := encodeControl(testDst, testSrc, ctlHeader{Cmd: parser.CmdCapsQuery}, encodeCapsQuery(3))
	if err != nil {
		t.Fatal(err)
	}
	var qc parser.Control
	if err := qc.Decode(q, parser.Limits{}); err != nil || qc.CapsQueryPage() != 3 {
		t.Fatalf("CAPS_QUERY: page %d, %v", qc.CapsQueryPage(), err)
	}
}

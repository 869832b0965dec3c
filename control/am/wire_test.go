package am

import (
	"net"
	"testing"

	"github.com/prismd/prismd/parser"
)

// The AM's CONTROL encoder is checked against package parser's validating
// decoder (written independently from docs/protocol.md), and the AM's ACK and
// CAPS decoders against parser's encoders.
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
	frame := encodeControl(net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2},
		ctlHeader{Op: op, Txn: 0xdeadbeef, Cmd: parser.CmdStage}, encodeStage(rec, bs))
	var c parser.Control
	if err := c.Decode(frame, parser.Limits{}); err != nil {
		t.Fatalf("parser rejects the AM's STAGE: %v", err)
	}
	want := parser.OpKey{Job: op.Job, Group: op.Group, GroupGen: op.GroupGen, Op: op.OpID, OpGen: op.OpGen}
	if c.Op != want || c.Txn != 0xdeadbeef || c.Cmd != parser.CmdStage || c.FragCount != 1 {
		t.Fatalf("header %+v", c)
	}
	s := c.Stage()
	x := s.Context
	if x.Role != rec.Role || x.KulischWidth != 280 || x.VectorLen != 100000 || x.WindowIntervals != 64 || x.ReplayDepth != 32 ||
		x.WindowBytes != 96000 || x.WindowElements != 92928 || x.MaxTerms != 4 || x.TimeoutMs != 5000 || x.BindingCount != 2 {
		t.Fatalf("context %+v", x)
	}
	for i, b := range bs {
		g := s.Binding(i)
		if g.Kind != b.Kind || g.Flags != b.Flags || g.Stream != b.Stream || g.LocalEP != b.Local || g.PeerEP != b.Peer ||
			g.Port != b.Port || string(g.PeerMAC[:]) != string(b.PeerMAC) {
			t.Errorf("binding %d: %+v vs %+v", i, g, b)
		}
	}
	// And back: the fake node's decoder agrees.
	f, err := decodeControl(frame)
	if err != nil {
		t.Fatal(err)
	}
	rec2, bs2, err := decodeStage(f.Body)
	rec2.bindingsCount = 0
	if err != nil || rec2 != rec || len(bs2) != 2 {
		t.Fatalf("%+v %v", rec2, err)
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
	if err != nil || f.Txn != 5 || f.Op.OpGen != 3 || got != (ackBody{Acked: parser.CmdComplete, State: parser.StateFailed, Detail: 0xFFFF, Completed: 4242, MissStream: 7, MissingFrom: 363}) {
		t.Fatalf("%+v %+v %v", f, got, err)
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
	if err != nil || cp.PortCount != 4 || cp.MaxMTU != 9000 || len(cp.Records) != 1 {
		t.Fatalf("%+v %v", cp, err)
	}
	r := cp.Records[0]
	if r.Input != parser.FormatFP16 || r.Acc != parser.AccKulischFixed || r.Partial != parser.FormatKulisch || r.Output != parser.FormatAuto ||
		r.MinKW != 64 || r.MaxKW != 4096 || r.MaxVector != 1<<20 || r.MaxTerms != 99 || r.MaxReplay != 512 || r.MaxWinElem != 1<<20 {
		t.Fatalf("%+v", r)
	}
}

// This file owns the AM's host-form view of CONTROL (docs/protocol.md
// section 5): the headers and bodies it builds and reads, converted to and
// from package parser's types. Every byte is written and read by parser's
// encoders and validating decoder, so the AM and the switches share one
// reading of the wire; CONTROL is setup traffic, a few frames per
// operation, so the conversions' allocations do not matter.

package am

import (
	"errors"
	"fmt"
	"net"

	"github.com/prismd/prismd/parser"
)

// ctlHeader is the 32-byte CONTROL header in host form.
type ctlHeader struct {
	Op      OpIdentity
	Txn     uint32
	SrcEP   uint16
	DstEP   uint16
	Cmd     parser.Command
	Status  parser.Status
	FragIdx uint8
	FragCnt uint8
}

// ctlFrame is one decoded CONTROL frame; Body aliases the frame.
type ctlFrame struct {
	Dst, Src net.HardwareAddr
	ctlHeader
	Body []byte
}

var errNotControl = errors.New("not a PRISM CONTROL frame")

// encodeControl builds a whole Ethernet frame with parser's encoder. A zero
// FragCnt means an unfragmented message (1).
func encodeControl(dst, src net.HardwareAddr, h ctlHeader, body []byte) ([]byte, error) {
	fc := h.FragCnt
	if fc == 0 {
		fc = 1
	}
	c := parser.Control{Op: h.Op.opKey(), Txn: h.Txn, SrcEP: h.SrcEP, DstEP: h.DstEP, Cmd: h.Cmd, Status: h.Status,
		FragIndex: h.FragIdx, FragCount: fc, Body: body}
	var eth parser.Eth
	copy(eth.Dst[:], dst)
	copy(eth.Src[:], src)
	b := make([]byte, parser.EthLen+c.Len())
	if _, err := c.Encode(b, eth); err != nil {
		return nil, fmt.Errorf("encode %v with a %d-byte body: %w", h.Cmd, len(body), err)
	}
	return b, nil
}

func (o OpIdentity) opKey() parser.OpKey {
	return parser.OpKey{Job: o.Job, Group: o.Group, GroupGen: o.GroupGen, Op: o.OpID, OpGen: o.OpGen}
}

func opIdentity(k parser.OpKey) OpIdentity {
	return OpIdentity{Job: k.Job, Group: k.Group, GroupGen: k.GroupGen, OpID: k.Op, OpGen: k.OpGen}
}

// decodeControl validates a CONTROL frame with the parser's decoder, so the
// AM applies exactly the rules a switch applies (reserved bits, lengths,
// fragments, ACK and CAPS bodies) instead of a second, laxer reading.
func decodeControl(b []byte) (ctlFrame, error) {
	var f ctlFrame
	if len(b) < parser.ControlBodyOff || parser.EthHeader(b).EtherType() != parser.EtherType ||
		parser.ControlWord(b[parser.CWOff:]).Class() != parser.ClassControl {
		return f, errNotControl
	}
	var c parser.Control
	if err := c.Decode(b, parser.Limits{}); err != nil {
		// %v formats now: c's error lives only as long as c.
		return f, fmt.Errorf("%w: %v", errNotControl, err)
	}
	f.Dst, f.Src = net.HardwareAddr(b[0:6]), net.HardwareAddr(b[6:12])
	f.Op = opIdentity(c.Op)
	f.Txn, f.SrcEP, f.DstEP = c.Txn, c.SrcEP, c.DstEP
	f.Cmd, f.Status = c.Cmd, c.Status
	f.FragIdx, f.FragCnt = c.FragIndex, c.FragCount
	f.Body = c.Body
	return f, nil
}

// ackBody is the 16-byte ACK body.
type ackBody struct {
	Acked       parser.Command
	State       parser.OpState
	Detail      uint16
	Completed   uint32
	MissStream  uint16
	FailCause   parser.FailCause
	MissingFrom uint32
}

func decodeAck(body []byte) (ackBody, error) {
	if len(body) < parser.AckBodyLen {
		return ackBody{}, fmt.Errorf("ACK body is %d bytes, want %d", len(body), parser.AckBodyLen)
	}
	c := parser.Control{Cmd: parser.CmdAck, Body: body}
	a := c.Ack()
	return ackBody{Acked: a.AckedCmd, State: a.State, Detail: a.Detail, Completed: a.Completed,
		MissStream: a.MissingStream, FailCause: a.FailCause, MissingFrom: a.MissingFrom}, nil
}

func encodeAck(a ackBody) []byte {
	p := parser.Ack{AckedCmd: a.Acked, State: a.State, Detail: a.Detail, Completed: a.Completed,
		MissingStream: a.MissStream, FailCause: a.FailCause, MissingFrom: a.MissingFrom}
	b := make([]byte, parser.AckBodyLen)
	if _, err := p.Encode(b); err != nil {
		panic(fmt.Sprintf("am: encode ACK: %v", err)) // b has the right size
	}
	return b
}

// contextRecord is the 40-byte STAGE context record.
type contextRecord struct {
	Role          parser.Role
	Collective    parser.Collective
	Input         parser.Format
	Acc           parser.AccPolicy
	Partial       parser.Format
	Output        parser.Format
	KulischWidth  uint16
	VectorLen     uint32
	MTU           uint16
	Intervals     uint16
	ReplayDepth   uint16
	WindowBytes   uint32
	WindowElems   uint32
	MaxTerms      uint32
	TimeoutMS     uint32
	bindingsCount int
}

// binding is one 16-byte STAGE binding.
type binding struct {
	Kind     parser.BindingKind
	Flags    uint8
	Stream   uint16
	Local    uint16
	Peer     uint16
	Port     uint16
	PeerMAC  net.HardwareAddr
	peerName string // for diagnostics only, not on the wire
	rank     int    // rank behind a RANK binding, else -1
}

func encodeStage(c contextRecord, bs []binding) ([]byte, error) {
	spec := parser.StageSpec{Context: parser.ContextRecord{Role: c.Role, Collective: c.Collective,
		InputFormat: c.Input, AccPolicy: c.Acc, PartialPolicy: c.Partial, OutputFormat: c.Output,
		KulischWidth: c.KulischWidth, VectorLen: c.VectorLen, MTU: c.MTU, WindowIntervals: c.Intervals,
		ReplayDepth: c.ReplayDepth, WindowBytes: c.WindowBytes, WindowElements: c.WindowElems,
		MaxTerms: c.MaxTerms, TimeoutMs: c.TimeoutMS}} // no set records: PRISM REDUCE/ALLREDUCE
	for _, x := range bs {
		pb := parser.Binding{Kind: x.Kind, Flags: x.Flags, Stream: x.Stream, LocalEP: x.Local, PeerEP: x.Peer, Port: x.Port}
		copy(pb.PeerMAC[:], x.PeerMAC)
		spec.Bindings = append(spec.Bindings, pb)
	}
	if len(bs) > parser.MaxBindings {
		return nil, fmt.Errorf("STAGE with %d bindings: a context holds at most %d", len(bs), parser.MaxBindings)
	}
	b := make([]byte, spec.Len())
	if _, err := spec.Encode(b); err != nil {
		return nil, fmt.Errorf("encode STAGE with %d bindings: %w", len(bs), err)
	}
	return b, nil
}

// decodeStage is the inverse of encodeStage (used by the fake node in
// tests, on bodies parser's Decode already validated).
func decodeStage(b []byte) (contextRecord, []binding, error) {
	if len(b) < parser.ContextRecordLen {
		return contextRecord{}, nil, fmt.Errorf("STAGE body %d bytes, shorter than the context record", len(b))
	}
	ctl := parser.Control{Cmd: parser.CmdStage, Body: b}
	s := ctl.Stage()
	x := s.Context
	c := contextRecord{Role: x.Role, Collective: x.Collective, Input: x.InputFormat, Acc: x.AccPolicy,
		Partial: x.PartialPolicy, Output: x.OutputFormat, KulischWidth: x.KulischWidth, VectorLen: x.VectorLen,
		MTU: x.MTU, Intervals: x.WindowIntervals, ReplayDepth: x.ReplayDepth, WindowBytes: x.WindowBytes,
		WindowElems: x.WindowElements, MaxTerms: x.MaxTerms, TimeoutMS: x.TimeoutMs, bindingsCount: s.NBindings()}
	if len(b) < parser.ContextRecordLen+c.bindingsCount*parser.BindingLen {
		return c, nil, fmt.Errorf("STAGE body %d bytes, too short for %d bindings", len(b), c.bindingsCount)
	}
	bs := make([]binding, c.bindingsCount)
	for i := range bs {
		g := s.Binding(i)
		bs[i] = binding{Kind: g.Kind, Flags: g.Flags, Stream: g.Stream, Local: g.LocalEP, Peer: g.PeerEP,
			Port: g.Port, PeerMAC: append(net.HardwareAddr(nil), g.PeerMAC[:]...)}
	}
	return c, bs, nil
}

// capsPage is one CAPS_RESPONSE page.
type capsPage struct {
	PortCount uint16
	MaxMTU    uint16
	MaxOps    uint16
	Records   []capRecord
}

// capRecord is one 32-byte capability record.
type capRecord struct {
	Input, Partial, Output  parser.Format
	Acc                     parser.AccPolicy
	MinKW, MaxKW            uint16
	MaxVector, MaxTerms     uint32
	MaxMTU, MaxBindings     uint16
	MaxIntervals, MaxReplay uint16
	MaxWinBytes, MaxWinElem uint32
}

func decodeCaps(b []byte) (capsPage, error) {
	var p capsPage
	if len(b) < parser.CapsPageHdrLen {
		return p, fmt.Errorf("CAPS page %d bytes, shorter than its header", len(b))
	}
	if n := int(b[0]); n > parser.MaxCapRecords || len(b) < parser.CapsPageHdrLen+n*parser.CapRecordLen {
		return p, fmt.Errorf("CAPS page claims %d records in %d bytes", n, len(b))
	}
	ctl := parser.Control{Cmd: parser.CmdCapsResponse, Body: b}
	pp := ctl.CapsPage()
	p.PortCount, p.MaxMTU, p.MaxOps = pp.PortCount, pp.MaxMTU, pp.MaxOps
	for _, r := range pp.Records[:pp.NRecords] {
		p.Records = append(p.Records, capRecord{Input: r.InputFormat, Acc: r.AccPolicy, Partial: r.PartialPolicy,
			Output: r.OutputFormat, MinKW: r.MinKulischWidth, MaxKW: r.MaxKulischWidth, MaxVector: r.MaxVectorLen,
			MaxTerms: r.MaxTerms, MaxMTU: r.MaxMTU, MaxBindings: r.MaxBindings, MaxIntervals: r.MaxWindowIntervals,
			MaxReplay: r.MaxReplayDepth, MaxWinBytes: r.MaxWindowBytes, MaxWinElem: r.MaxWindowElements})
	}
	return p, nil
}

// encodeCaps builds a CAPS_RESPONSE page (the fake node's, in tests).
func encodeCaps(p capsPage) []byte {
	pp := parser.CapsPage{PortCount: p.PortCount, MaxMTU: p.MaxMTU, MaxOps: p.MaxOps, NRecords: len(p.Records)}
	for i, r := range p.Records {
		if i == parser.MaxCapRecords {
			break // Encode refuses the page; a page never holds more
		}
		pp.Records[i] = parser.CapRecord{InputFormat: r.Input, AccPolicy: r.Acc, PartialPolicy: r.Partial,
			OutputFormat: r.Output, MinKulischWidth: r.MinKW, MaxKulischWidth: r.MaxKW, MaxVectorLen: r.MaxVector,
			MaxTerms: r.MaxTerms, MaxMTU: r.MaxMTU, MaxBindings: r.MaxBindings, MaxWindowIntervals: r.MaxIntervals,
			MaxReplayDepth: r.MaxReplay, MaxWindowBytes: r.MaxWinBytes, MaxWindowElements: r.MaxWinElem}
	}
	b := make([]byte, pp.Len())
	if _, err := pp.Encode(b); err != nil {
		panic(fmt.Sprintf("am: encode CAPS page of %d records: %v", len(p.Records), err))
	}
	return b
}

// encodeCapsQuery builds the CAPS_QUERY body asking for page.
func encodeCapsQuery(page uint8) []byte {
	b := make([]byte, parser.CapsQueryLen)
	if _, err := parser.EncodeCapsQuery(b, page); err != nil {
		panic(fmt.Sprintf("am: encode CAPS_QUERY: %v", err)) // b has the right size
	}
	return b
}

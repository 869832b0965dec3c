// This file owns the AM's encoding and decoding of CONTROL frames
// (docs/protocol.md section 5). CONTROL is setup traffic, a few frames per
// operation, so clarity wins over allocation here; the assigned numbers come
// from package parser so both sides agree on every code.

package am

import (
	"encoding/binary"
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

// encodeControl builds a whole Ethernet frame.
func encodeControl(dst, src net.HardwareAddr, h ctlHeader, body []byte) []byte {
	b := make([]byte, parser.ControlBodyOff+len(body))
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:14], parser.EtherType)
	b[parser.CWOff] = parser.Version
	b[parser.CWOff+1] = byte(parser.ClassControl)
	x := b[parser.HdrOff:]
	putOp(x, h.Op)
	binary.BigEndian.PutUint32(x[18:], h.Txn)
	binary.BigEndian.PutUint16(x[22:], h.SrcEP)
	binary.BigEndian.PutUint16(x[24:], h.DstEP)
	x[26] = byte(h.Cmd)
	x[27] = byte(h.Status)
	binary.BigEndian.PutUint16(x[28:], uint16(len(body)))
	x[30] = h.FragIdx
	fc := h.FragCnt
	if fc == 0 {
		fc = 1
	}
	x[31] = fc
	copy(b[parser.ControlBodyOff:], body)
	return b
}

func putOp(x []byte, o OpIdentity) {
	binary.BigEndian.PutUint64(x[0:], o.Job)
	binary.BigEndian.PutUint16(x[8:], o.Group)
	binary.BigEndian.PutUint16(x[10:], o.GroupGen)
	binary.BigEndian.PutUint16(x[12:], o.OpID)
	binary.BigEndian.PutUint32(x[14:], o.OpGen)
}

func getOp(x []byte) OpIdentity {
	return OpIdentity{
		Job:      binary.BigEndian.Uint64(x[0:]),
		Group:    binary.BigEndian.Uint16(x[8:]),
		GroupGen: binary.BigEndian.Uint16(x[10:]),
		OpID:     binary.BigEndian.Uint16(x[12:]),
		OpGen:    binary.BigEndian.Uint32(x[14:]),
	}
}

// decodeControl validates a CONTROL frame with the parser's decoder, so the
// AM applies exactly the rules a switch applies (reserved bits, lengths,
// fragments, ACK and CAPS bodies) instead of a second, laxer reading.
func decodeControl(b []byte) (ctlFrame, error) {
	var f ctlFrame
	if len(b) < parser.ControlBodyOff || binary.BigEndian.Uint16(b[12:14]) != parser.EtherType ||
		parser.Class(b[parser.CWOff+1]) != parser.ClassControl {
		return f, errNotControl
	}
	var c parser.Control
	if err := c.Decode(b, parser.Limits{}); err != nil {
		// %v formats now: c's error lives only as long as c.
		return f, fmt.Errorf("%w: %v", errNotControl, err)
	}
	f.Dst, f.Src = net.HardwareAddr(b[0:6]), net.HardwareAddr(b[6:12])
	f.Op = OpIdentity{Job: c.Op.Job, Group: c.Op.Group, GroupGen: c.Op.GroupGen, OpID: c.Op.Op, OpGen: c.Op.OpGen}
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
	MissingFrom uint32
}

func decodeAck(body []byte) (ackBody, error) {
	if len(body) < parser.AckBodyLen {
		return ackBody{}, fmt.Errorf("ACK body is %d bytes, want %d", len(body), parser.AckBodyLen)
	}
	return ackBody{
		Acked:       parser.Command(body[0]),
		State:       parser.OpState(body[1]),
		Detail:      binary.BigEndian.Uint16(body[2:]),
		Completed:   binary.BigEndian.Uint32(body[4:]),
		MissStream:  binary.BigEndian.Uint16(body[8:]),
		MissingFrom: binary.BigEndian.Uint32(body[12:]),
	}, nil
}

func encodeAck(a ackBody) []byte {
	b := make([]byte, parser.AckBodyLen)
	b[0], b[1] = byte(a.Acked), byte(a.State)
	binary.BigEndian.PutUint16(b[2:], a.Detail)
	binary.BigEndian.PutUint32(b[4:], a.Completed)
	binary.BigEndian.PutUint16(b[8:], a.MissStream)
	binary.BigEndian.PutUint32(b[12:], a.MissingFrom)
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

func encodeStage(c contextRecord, bs []binding) []byte {
	b := make([]byte, parser.ContextRecordLen+len(bs)*parser.BindingLen)
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(c.Role), byte(c.Collective), byte(c.Input), byte(c.Acc), byte(c.Partial), byte(c.Output)
	binary.BigEndian.PutUint16(b[6:], c.KulischWidth)
	binary.BigEndian.PutUint32(b[8:], c.VectorLen)
	binary.BigEndian.PutUint16(b[12:], c.MTU)
	b[14] = byte(len(bs))
	b[15] = 0 // no set records: PRISM REDUCE/ALLREDUCE
	binary.BigEndian.PutUint16(b[16:], c.Intervals)
	binary.BigEndian.PutUint16(b[18:], c.ReplayDepth)
	binary.BigEndian.PutUint32(b[20:], c.WindowBytes)
	binary.BigEndian.PutUint32(b[24:], c.WindowElems)
	binary.BigEndian.PutUint32(b[28:], c.MaxTerms)
	binary.BigEndian.PutUint32(b[32:], c.TimeoutMS)
	for i, x := range bs {
		o := b[parser.ContextRecordLen+i*parser.BindingLen:]
		o[0], o[1] = byte(x.Kind), x.Flags
		binary.BigEndian.PutUint16(o[2:], x.Stream)
		binary.BigEndian.PutUint16(o[4:], x.Local)
		binary.BigEndian.PutUint16(o[6:], x.Peer)
		binary.BigEndian.PutUint16(o[8:], x.Port)
		copy(o[10:16], x.PeerMAC)
	}
	return b
}

// decodeStage is the inverse of encodeStage (used by the fake node in tests).
func decodeStage(b []byte) (contextRecord, []binding, error) {
	var c contextRecord
	if len(b) < parser.ContextRecordLen {
		return c, nil, fmt.Errorf("STAGE body %d bytes, shorter than the context record", len(b))
	}
	c = contextRecord{
		Role: parser.Role(b[0]), Collective: parser.Collective(b[1]), Input: parser.Format(b[2]),
		Acc: parser.AccPolicy(b[3]), Partial: parser.Format(b[4]), Output: parser.Format(b[5]),
		KulischWidth: binary.BigEndian.Uint16(b[6:]), VectorLen: binary.BigEndian.Uint32(b[8:]),
		MTU: binary.BigEndian.Uint16(b[12:]), Intervals: binary.BigEndian.Uint16(b[16:]),
		ReplayDepth: binary.BigEndian.Uint16(b[18:]), WindowBytes: binary.BigEndian.Uint32(b[20:]),
		WindowElems: binary.BigEndian.Uint32(b[24:]), MaxTerms: binary.BigEndian.Uint32(b[28:]),
		TimeoutMS: binary.BigEndian.Uint32(b[32:]), bindingsCount: int(b[14]),
	}
	if len(b) < parser.ContextRecordLen+c.bindingsCount*parser.BindingLen {
		return c, nil, fmt.Errorf("STAGE body %d bytes, too short for %d bindings", len(b), c.bindingsCount)
	}
	bs := make([]binding, c.bindingsCount)
	for i := range bs {
		o := b[parser.ContextRecordLen+i*parser.BindingLen:]
		bs[i] = binding{Kind: parser.BindingKind(o[0]), Flags: o[1], Stream: binary.BigEndian.Uint16(o[2:]),
			Local: binary.BigEndian.Uint16(o[4:]), Peer: binary.BigEndian.Uint16(o[6:]),
			Port: binary.BigEndian.Uint16(o[8:]), PeerMAC: append(net.HardwareAddr(nil), o[10:16]...)}
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
	n := int(b[0])
	p.PortCount = binary.BigEndian.Uint16(b[2:])
	p.MaxMTU = binary.BigEndian.Uint16(b[4:])
	p.MaxOps = binary.BigEndian.Uint16(b[6:])
	if n > parser.MaxCapRecords || len(b) < parser.CapsPageHdrLen+n*parser.CapRecordLen {
		return p, fmt.Errorf("CAPS page claims %d records in %d bytes", n, len(b))
	}
	for i := 0; i < n; i++ {
		o := b[parser.CapsPageHdrLen+i*parser.CapRecordLen:]
		p.Records = append(p.Records, capRecord{
			Input: parser.Format(o[0]), Acc: parser.AccPolicy(o[1]), Partial: parser.Format(o[2]), Output: parser.Format(o[3]),
			MinKW: binary.BigEndian.Uint16(o[4:]), MaxKW: binary.BigEndian.Uint16(o[6:]),
			MaxVector: binary.BigEndian.Uint32(o[8:]), MaxTerms: binary.BigEndian.Uint32(o[12:]),
			MaxMTU: binary.BigEndian.Uint16(o[16:]), MaxBindings: binary.BigEndian.Uint16(o[18:]),
			MaxIntervals: binary.BigEndian.Uint16(o[20:]), MaxReplay: binary.BigEndian.Uint16(o[22:]),
			MaxWinBytes: binary.BigEndian.Uint32(o[24:]), MaxWinElem: binary.BigEndian.Uint32(o[28:]),
		})
	}
	return p, nil
}

func encodeCaps(p capsPage) []byte {
	b := make([]byte, parser.CapsPageHdrLen+len(p.Records)*parser.CapRecordLen)
	b[0] = byte(len(p.Records))
	binary.BigEndian.PutUint16(b[2:], p.PortCount)
	binary.BigEndian.PutUint16(b[4:], p.MaxMTU)
	binary.BigEndian.PutUint16(b[6:], p.MaxOps)
	for i, r := range p.Records {
		o := b[parser.CapsPageHdrLen+i*parser.CapRecordLen:]
		o[0], o[1], o[2], o[3] = byte(r.Input), byte(r.Acc), byte(r.Partial), byte(r.Output)
		binary.BigEndian.PutUint16(o[4:], r.MinKW)
		binary.BigEndian.PutUint16(o[6:], r.MaxKW)
		binary.BigEndian.PutUint32(o[8:], r.MaxVector)
		binary.BigEndian.PutUint32(o[12:], r.MaxTerms)
		binary.BigEndian.PutUint16(o[16:], r.MaxMTU)
		binary.BigEndian.PutUint16(o[18:], r.MaxBindings)
		binary.BigEndian.PutUint16(o[20:], r.MaxIntervals)
		binary.BigEndian.PutUint16(o[22:], r.MaxReplay)
		binary.BigEndian.PutUint32(o[24:], r.MaxWinBytes)
		binary.BigEndian.PutUint32(o[28:], r.MaxWinElem)
	}
	return b
}

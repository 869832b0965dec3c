package conformance

// An encoder and decoder of PRISM frames written only from docs/protocol.md
// (sections 1-8). Every encode function returns the bytes after the 14-byte
// Ethernet header (control word first); ethFrame adds the header. Decoders
// apply the receiver rules of the spec and return a *ruleError naming the
// reason of section 10 when a rule fails.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
)

var be = binary.BigEndian

const (
	etherType = 0x88B5
	version10 = 0x10

	classControl  = 1
	classData     = 2
	classResult   = 3
	classProgress = 4
)

// CONTROL commands (section 5).
const (
	cmdStage        = 1
	cmdCommit       = 2
	cmdComplete     = 3
	cmdRelease      = 4
	cmdAck          = 5
	cmdAbort        = 6
	cmdCapsQuery    = 7
	cmdCapsResponse = 8
)

// ACK statuses (section 5).
const (
	stOK             = 0
	stInvalid        = 1
	stUnsupported    = 2
	stNoResources    = 3
	stBadState       = 4
	stStaleGen       = 5
	stConflict       = 6
	stInvalidBinding = 7
)

// Operation states (section 5.2).
const (
	osNone     = 0
	osStaged   = 1
	osActive   = 2
	osComplete = 3
	osFailed   = 4
	osReleased = 5
	osAborted  = 6
)

// Failure causes (section 5.2).
const (
	fcNone       = 0
	fcTimeout    = 1
	fcPeerFailed = 2
	fcInternal   = 3
)

// Roles, collectives, policies (section 5.1).
const (
	roleSingle   = 1
	roleLeaf     = 2
	roleInternal = 3
	roleRoot     = 4

	collReduce    = 1
	collAllreduce = 2
	collBitmap    = 3

	accFP32Arrival  = 0x01
	accKulischFixed = 0x03
)

// Format codes (section 6).
const (
	fmtINT8    = 1
	fmtFP16    = 2
	fmtBF16    = 3
	fmtFP32    = 4
	fmtKulisch = 5
	fmtAuto    = 6
	fmtScaled  = 7
	fmtF64     = 8 // KULISCH_F64: exact Kulisch values as IEEE binary64
)

// Binding kinds and flags (section 5.1).
const (
	bkContributor = 1
	bkParent      = 2
	bkResultIn    = 3
	bkResultOut   = 4

	bfRank = 0x01
)

// DATA/RESULT flags (section 6).
const (
	dfLast       = 0x01
	dfInexact    = 0x02
	dfExt        = 0x04
	dfRetransmit = 0x08
	dfPush       = 0x10
)

// PROGRESS statuses and flags (section 7).
const (
	psOK         = 0
	psDuplicate  = 1
	psInvalid    = 2
	psNoCredit   = 3
	psUnknownOp  = 4
	psFailed     = 5
	pfResult     = 0x01
	pfComplete   = 0x02
	progressHdr  = 44
	dataHdr      = 40
	controlHdr   = 32
	stageCtxSize = 40
	bindingSize  = 16
)

// Extension encodings and xflags (section 8).
const (
	encFlat = 1
	encHier = 2
	encList = 3

	xfInstall = 0x01
	xfPartial = 0x02
	xfAuth    = 0x04
)

// ruleError is a receiver-rule failure: the reason label of section 10.
type ruleError struct {
	Reason string
	What   string
}

func (e *ruleError) Error() string { return e.Reason + ": " + e.What }

func fail(reason, format string, a ...any) error {
	return &ruleError{Reason: reason, What: fmt.Sprintf(format, a...)}
}

// ---- Ethernet ----

type mac [6]byte

func (m mac) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// ethFrame prepends the Ethernet II header (EtherType 0x88B5).
func ethFrame(dst, src mac, payload []byte) []byte {
	b := make([]byte, 14+len(payload))
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	be.PutUint16(b[12:14], etherType)
	copy(b[14:], payload)
	return b
}

type ethHdr struct {
	Dst, Src mac
	Type     uint16
}

func splitEth(b []byte) (ethHdr, []byte, error) {
	if len(b) < 14 {
		return ethHdr{}, nil, fail("short_frame", "%d bytes", len(b))
	}
	var h ethHdr
	copy(h.Dst[:], b[0:6])
	copy(h.Src[:], b[6:12])
	h.Type = be.Uint16(b[12:14])
	return h, b[14:], nil
}

// ---- section 3: operation identity ----

type ident struct {
	Job      uint64
	Group    uint16
	GroupGen uint16
	Op       uint16
	OpGen    uint32
}

func (id ident) put(b []byte) {
	be.PutUint64(b[0:], id.Job)
	be.PutUint16(b[8:], id.Group)
	be.PutUint16(b[10:], id.GroupGen)
	be.PutUint16(b[12:], id.Op)
	be.PutUint32(b[14:], id.OpGen)
}

func getIdent(b []byte) ident {
	return ident{Job: be.Uint64(b[0:]), Group: be.Uint16(b[8:]), GroupGen: be.Uint16(b[10:]),
		Op: be.Uint16(b[12:]), OpGen: be.Uint32(b[14:])}
}

func (id ident) String() string {
	return fmt.Sprintf("%d-%d-%d-%d-%d", id.Job, id.Group, id.GroupGen, id.Op, id.OpGen)
}

// ---- section 5: CONTROL ----

type control struct {
	ID        ident
	Txn       uint32
	SrcEP     uint16
	DstEP     uint16
	Cmd       uint8
	Status    uint8
	FragIdx   uint8
	FragCount uint8
	Body      []byte
}

func (c control) encode() []byte {
	b := make([]byte, 2+controlHdr+len(c.Body))
	b[0], b[1] = version10, classControl
	h := b[2:]
	c.ID.put(h)
	be.PutUint32(h[18:], c.Txn)
	be.PutUint16(h[22:], c.SrcEP)
	be.PutUint16(h[24:], c.DstEP)
	h[26] = c.Cmd
	h[27] = c.Status
	be.PutUint16(h[28:], uint16(len(c.Body)))
	h[30] = c.FragIdx
	h[31] = c.FragCount
	copy(h[controlHdr:], c.Body)
	return b
}

// decodeControl applies rules C2-C13 (C1 and C14 need the link MTU and the
// node: C14 is decodeStage).
func decodeControl(b []byte) (control, error) {
	var c control
	if len(b) < 2+controlHdr {
		return c, fail("truncated", "%d bytes, CONTROL needs 34", len(b))
	}
	if b[0]>>4 != 1 {
		return c, fail("bad_version", "version %#x", b[0])
	}
	if b[1] != classControl {
		return c, fail("unknown_class", "class %d", b[1])
	}
	h := b[2:]
	c.ID = getIdent(h)
	c.Txn = be.Uint32(h[18:])
	c.SrcEP = be.Uint16(h[22:])
	c.DstEP = be.Uint16(h[24:])
	c.Cmd = h[26]
	c.Status = h[27]
	bl := int(be.Uint16(h[28:]))
	c.FragIdx = h[30]
	c.FragCount = h[31]
	if c.Cmd < 1 || c.Cmd > 8 {
		return c, fail("out_of_range", "command %d", c.Cmd)
	}
	if c.Cmd != cmdAck && c.Status != 0 || c.Cmd == cmdAck && c.Status > 7 {
		return c, fail("out_of_range", "status %d with command %d", c.Status, c.Cmd)
	}
	if c.FragCount < 1 || c.FragCount != 1 && c.Cmd != cmdCapsResponse {
		return c, fail("out_of_range", "fragment count %d", c.FragCount)
	}
	if c.FragIdx >= c.FragCount {
		return c, fail("out_of_range", "fragment index %d of %d", c.FragIdx, c.FragCount)
	}
	if 2+controlHdr+bl > len(b) {
		return c, fail("truncated", "body length %d, %d bytes present", bl, len(b)-2-controlHdr)
	}
	c.Body = b[2+controlHdr : 2+controlHdr+bl]
	switch c.Cmd {
	case cmdCommit, cmdComplete, cmdRelease, cmdAbort:
		if bl != 0 {
			return c, fail("bad_length", "command %d with body %d", c.Cmd, bl)
		}
	case cmdAck:
		if bl != 16 {
			return c, fail("bad_length", "ACK body %d", bl)
		}
		if _, err := decodeAck(c.Body); err != nil {
			return c, err
		}
	case cmdCapsQuery:
		if bl != 4 {
			return c, fail("bad_length", "CAPS_QUERY body %d", bl)
		}
		if c.Body[1]|c.Body[2]|c.Body[3] != 0 {
			return c, fail("reserved_nonzero", "CAPS_QUERY reserved")
		}
	case cmdCapsResponse:
		if _, err := decodeCapsPage(c.Body); err != nil {
			return c, err
		}
	}
	return c, nil
}

// ---- section 5.1: STAGE ----

type stageCtx struct {
	Role, Collective, In, Acc, Partial, Out uint8
	W                                       uint16
	VecLen                                  uint32
	MTU                                     uint16
	NBind, NSet                             uint8 // filled by encodeStage unless forceCounts
	WI, RD                                  uint16
	WB, WE, MaxTerms, Timeout, Tenant       uint32
}

type binding struct {
	Kind, Flags               uint8
	Stream, Local, Peer, Port uint16
	MAC                       mac
}

// setRecord is a STAGE set record: Binding Index, reserved, Length (= 4 +
// len(Set), the Encoding prefix counted), Encoding, 3 reserved, set body.
type setRecord struct {
	Index    uint8
	Encoding uint8
	Set      []byte
}

type stage struct {
	Ctx         stageCtx
	Bindings    []binding
	Sets        []setRecord
	forceCounts bool // keep Ctx.NBind / Ctx.NSet as given (negative tests)
}

func (s stage) encode() []byte {
	c := s.Ctx
	if !s.forceCounts {
		c.NBind, c.NSet = uint8(len(s.Bindings)), uint8(len(s.Sets))
	}
	b := make([]byte, stageCtxSize, stageCtxSize+bindingSize*len(s.Bindings))
	b[0], b[1], b[2], b[3], b[4], b[5] = c.Role, c.Collective, c.In, c.Acc, c.Partial, c.Out
	be.PutUint16(b[6:], c.W)
	be.PutUint32(b[8:], c.VecLen)
	be.PutUint16(b[12:], c.MTU)
	b[14], b[15] = c.NBind, c.NSet
	be.PutUint16(b[16:], c.WI)
	be.PutUint16(b[18:], c.RD)
	be.PutUint32(b[20:], c.WB)
	be.PutUint32(b[24:], c.WE)
	be.PutUint32(b[28:], c.MaxTerms)
	be.PutUint32(b[32:], c.Timeout)
	be.PutUint32(b[36:], c.Tenant)
	for _, x := range s.Bindings {
		var r [bindingSize]byte
		r[0], r[1] = x.Kind, x.Flags
		be.PutUint16(r[2:], x.Stream)
		be.PutUint16(r[4:], x.Local)
		be.PutUint16(r[6:], x.Peer)
		be.PutUint16(r[8:], x.Port)
		copy(r[10:], x.MAC[:])
		b = append(b, r[:]...)
	}
	for _, r := range s.Sets {
		h := make([]byte, 8)
		h[0] = r.Index
		be.PutUint16(h[2:], uint16(4+len(r.Set)))
		h[4] = r.Encoding
		b = append(b, h...)
		b = append(b, r.Set...)
	}
	return b
}

// decodeStage parses a STAGE body and applies the content rules of 5.1 that
// need no node state. It returns (stage, detail, err): framing errors have
// detail -1 (dropped without reply), content errors the ACK INVALID Detail.
func decodeStage(b []byte) (stage, int, error) {
	var s stage
	if len(b) < stageCtxSize {
		return s, -1, fail("bad_length", "STAGE body %d < 40", len(b))
	}
	c := &s.Ctx
	c.Role, c.Collective, c.In, c.Acc, c.Partial, c.Out = b[0], b[1], b[2], b[3], b[4], b[5]
	c.W = be.Uint16(b[6:])
	c.VecLen = be.Uint32(b[8:])
	c.MTU = be.Uint16(b[12:])
	c.NBind, c.NSet = b[14], b[15]
	c.WI = be.Uint16(b[16:])
	c.RD = be.Uint16(b[18:])
	c.WB = be.Uint32(b[20:])
	c.WE = be.Uint32(b[24:])
	c.MaxTerms = be.Uint32(b[28:])
	c.Timeout = be.Uint32(b[32:])
	c.Tenant = be.Uint32(b[36:])
	kw := c.Acc == accKulischFixed || c.Partial == fmtKulisch || c.Out == fmtKulisch
	switch {
	case c.Role < 1 || c.Role > 4:
		return s, 0, fail("out_of_range", "role")
	case c.Collective < 1 || c.Collective > 3:
		return s, 1, fail("out_of_range", "collective")
	case c.In < 1 || c.In > 4:
		return s, 2, fail("bad_format", "input format")
	case c.Acc != accFP32Arrival && c.Acc != accKulischFixed:
		return s, 3, fail("out_of_range", "accumulator")
	case c.Partial < 1 || c.Partial > 6:
		return s, 4, fail("bad_format", "partial policy")
	case c.Out < 1 || c.Out > 6:
		return s, 5, fail("bad_format", "output format")
	case kw && (c.W < 64 || c.W > 4096 || c.W%8 != 0) || !kw && c.W != 0 ||
		c.Acc == accKulischFixed && c.MaxTerms >= 1 && int(c.W) < 278+ceilLog2(c.MaxTerms):
		return s, 6, fail("out_of_range", "kulisch width")
	case c.VecLen < 1:
		return s, 8, fail("out_of_range", "vector length")
	case c.MTU != 576 && c.MTU != 1500 && c.MTU != 9000:
		return s, 12, fail("out_of_range", "mtu")
	case c.NBind < 1 || c.NBind > 64:
		return s, 14, fail("bad_count", "binding count")
	case c.NSet > 64 || c.NSet != 0 && c.Collective != collBitmap:
		return s, 15, fail("bad_count", "set record count")
	case c.WI < 1:
		return s, 16, fail("out_of_range", "window intervals")
	case c.RD < 1:
		return s, 18, fail("out_of_range", "replay depth")
	case c.WB < uint32(c.MTU):
		return s, 20, fail("out_of_range", "window bytes")
	case c.WE < uint32(maxElemsPerFrame(int(c.MTU))):
		return s, 24, fail("out_of_range", "window elements")
	case c.MaxTerms < 1:
		return s, 28, fail("out_of_range", "max terms")
	case c.Timeout < 1 || c.Timeout > 600000:
		return s, 32, fail("out_of_range", "timeout")
	case c.Tenant != 0 && c.Collective != collBitmap:
		return s, 36, fail("out_of_range", "tenant")
	}
	if stageCtxSize+bindingSize*int(c.NBind) > len(b) {
		return s, -1, fail("bad_length", "bindings past the body")
	}
	for i := 0; i < int(c.NBind); i++ {
		off := stageCtxSize + bindingSize*i
		r := b[off:]
		x := binding{Kind: r[0], Flags: r[1], Stream: be.Uint16(r[2:]), Local: be.Uint16(r[4:]),
			Peer: be.Uint16(r[6:]), Port: be.Uint16(r[8:])}
		copy(x.MAC[:], r[10:16])
		if x.Kind < 1 || x.Kind > 4 {
			return s, off, fail("out_of_range", "binding %d kind", i)
		}
		if x.Flags&0xFE != 0 {
			return s, off + 1, fail("reserved_nonzero", "binding %d flags", i)
		}
		s.Bindings = append(s.Bindings, x)
	}
	off := stageCtxSize + bindingSize*int(c.NBind)
	seen := map[uint8]bool{}
	for i := 0; i < int(c.NSet); i++ {
		if off+8 > len(b) {
			return s, -1, fail("bad_length", "set record %d header", i)
		}
		r := b[off:]
		idx := r[0]
		if !(idx == 0xFF || idx == 0xFE || idx < c.NBind) || seen[idx] {
			return s, off, fail("out_of_range", "set record %d binding index", i)
		}
		seen[idx] = true
		if r[1] != 0 {
			return s, off + 1, fail("reserved_nonzero", "set record %d byte 1", i)
		}
		l := int(be.Uint16(r[2:]))
		if l%4 != 0 || l < 8 {
			return s, off + 2, fail("bad_length", "set record %d length %d", i, l)
		}
		if off+4+l > len(b) {
			return s, -1, fail("bad_length", "set record %d past the body", i)
		}
		enc := r[4]
		if enc < 1 || enc > 3 {
			return s, off + 4, fail("bad_format", "set record %d encoding", i)
		}
		if r[5]|r[6]|r[7] != 0 {
			return s, off + 5, fail("reserved_nonzero", "set record %d prefix", i)
		}
		body := r[8 : 4+l]
		if _, err := decodeSet(enc, body, c.MaxTerms); err != nil {
			return s, off + 8, err
		}
		s.Sets = append(s.Sets, setRecord{Index: idx, Encoding: enc, Set: append([]byte(nil), body...)})
		off += 4 + l
	}
	if off != len(b) {
		return s, -1, fail("bad_length", "STAGE ends at %d, body %d", off, len(b))
	}
	return s, 0, nil
}

func ceilLog2(n uint32) int {
	k := 0
	for uint64(1)<<k < uint64(n) {
		k++
	}
	return k
}

// maxElemsPerFrame is 4 x floor((MTU - 46) / 4): the Element Count of one
// full INT8 group (5.1, Window Elements).
func maxElemsPerFrame(mtu int) int { return 4 * ((mtu - 46) / 4) }

// ---- section 5.2: ACK ----

type ack struct {
	Acked, State  uint8
	Detail        uint16
	Completed     uint32
	MissingStream uint16
	Cause         uint8
	Reserved      uint8
	MissingFrom   uint32
}

func (a ack) encode() []byte {
	b := make([]byte, 16)
	b[0], b[1] = a.Acked, a.State
	be.PutUint16(b[2:], a.Detail)
	be.PutUint32(b[4:], a.Completed)
	be.PutUint16(b[8:], a.MissingStream)
	b[10], b[11] = a.Cause, a.Reserved
	be.PutUint32(b[12:], a.MissingFrom)
	return b
}

func decodeAck(b []byte) (ack, error) {
	if len(b) != 16 {
		return ack{}, fail("bad_length", "ACK body %d", len(b))
	}
	a := ack{Acked: b[0], State: b[1], Detail: be.Uint16(b[2:]), Completed: be.Uint32(b[4:]),
		MissingStream: be.Uint16(b[8:]), Cause: b[10], Reserved: b[11], MissingFrom: be.Uint32(b[12:])}
	if a.Acked < 1 || a.Acked > 8 || a.Acked == cmdAck {
		return a, fail("out_of_range", "acked command %d", a.Acked)
	}
	if a.State > 6 {
		return a, fail("out_of_range", "operation state %d", a.State)
	}
	if a.Cause > 4 || a.Cause != 0 && a.State != osFailed {
		return a, fail("out_of_range", "failure cause %d with state %d", a.Cause, a.State)
	}
	if a.Reserved != 0 {
		return a, fail("reserved_nonzero", "ACK byte 11")
	}
	return a, nil
}

// ---- section 5.3: CAPS ----

type capRecord struct {
	In, Acc, Partial, Out uint8
	MinW, MaxW            uint16
	MaxVector, MaxTerms   uint32
	MaxMTU, MaxBindings   uint16
	MaxWI, MaxRD          uint16
	MaxWB, MaxWE          uint32
}

type capsPage struct {
	PortCount, MaxMTU, MaxOps uint16
	Records                   []capRecord
}

func (p capsPage) encode() []byte {
	b := make([]byte, 12, 12+32*len(p.Records))
	b[0] = uint8(len(p.Records))
	be.PutUint16(b[2:], p.PortCount)
	be.PutUint16(b[4:], p.MaxMTU)
	be.PutUint16(b[6:], p.MaxOps)
	for _, r := range p.Records {
		var x [32]byte
		x[0], x[1], x[2], x[3] = r.In, r.Acc, r.Partial, r.Out
		be.PutUint16(x[4:], r.MinW)
		be.PutUint16(x[6:], r.MaxW)
		be.PutUint32(x[8:], r.MaxVector)
		be.PutUint32(x[12:], r.MaxTerms)
		be.PutUint16(x[16:], r.MaxMTU)
		be.PutUint16(x[18:], r.MaxBindings)
		be.PutUint16(x[20:], r.MaxWI)
		be.PutUint16(x[22:], r.MaxRD)
		be.PutUint32(x[24:], r.MaxWB)
		be.PutUint32(x[28:], r.MaxWE)
		b = append(b, x[:]...)
	}
	return b
}

// decodeCapsPage applies rule C13.
func decodeCapsPage(b []byte) (capsPage, error) {
	var p capsPage
	if len(b) < 12 {
		return p, fail("bad_length", "CAPS_RESPONSE body %d", len(b))
	}
	n := int(b[0])
	if n > 16 {
		return p, fail("bad_count", "record count %d", n)
	}
	if b[1] != 0 || b[8]|b[9]|b[10]|b[11] != 0 {
		return p, fail("reserved_nonzero", "CAPS_RESPONSE reserved")
	}
	if len(b) != 12+32*n {
		return p, fail("bad_length", "body %d for %d records", len(b), n)
	}
	p.PortCount, p.MaxMTU, p.MaxOps = be.Uint16(b[2:]), be.Uint16(b[4:]), be.Uint16(b[6:])
	for i := 0; i < n; i++ {
		x := b[12+32*i:]
		r := capRecord{In: x[0], Acc: x[1], Partial: x[2], Out: x[3], MinW: be.Uint16(x[4:]), MaxW: be.Uint16(x[6:]),
			MaxVector: be.Uint32(x[8:]), MaxTerms: be.Uint32(x[12:]), MaxMTU: be.Uint16(x[16:]),
			MaxBindings: be.Uint16(x[18:]), MaxWI: be.Uint16(x[20:]), MaxRD: be.Uint16(x[22:]),
			MaxWB: be.Uint32(x[24:]), MaxWE: be.Uint32(x[28:])}
		if r.In < 1 || r.In > 4 {
			return p, fail("bad_format", "record %d input format %d", i, r.In)
		}
		if r.Acc != accFP32Arrival && r.Acc != accKulischFixed {
			return p, fail("out_of_range", "record %d accumulator %d", i, r.Acc)
		}
		if r.Partial < 1 || r.Partial > 6 || r.Out < 1 || r.Out > 6 {
			return p, fail("bad_format", "record %d partial/output %d/%d", i, r.Partial, r.Out)
		}
		p.Records = append(p.Records, r)
	}
	return p, nil
}

// ---- section 6: NumberGroups ----

type group struct {
	Format uint8
	Count  uint16
	Bytes  uint16 // Format Word bits 11..0: W/8 (KULISCH) or B (KULISCH_SCALED); 0 otherwise
	Shift  uint16 // KULISCH_SCALED only
	Values []byte // Count values of the group's width, no padding
}

func pad4(n int) int { return (n + 3) &^ 3 }

// valueWidth is the width of one value of a group (section 6 table).
func valueWidth(format uint8, bytes uint16) int {
	switch format {
	case fmtINT8:
		return 1
	case fmtFP16, fmtBF16:
		return 2
	case fmtFP32:
		return 4
	case fmtKulisch, fmtScaled:
		return 1 + int(bytes)
	case fmtF64:
		return 8
	}
	return 0
}

func (g group) length() int {
	if g.Format == fmtScaled {
		return 4 + pad4(4+int(g.Count)*valueWidth(g.Format, g.Bytes))
	}
	return 4 + pad4(int(g.Count)*valueWidth(g.Format, g.Bytes))
}

func (g group) appendTo(b []byte) []byte {
	var d [4]byte
	be.PutUint16(d[0:], g.Count)
	be.PutUint16(d[2:], uint16(g.Format)<<12|g.Bytes&0x0FFF)
	b = append(b, d[:]...)
	n := len(g.Values)
	if g.Format == fmtScaled {
		var s [4]byte
		be.PutUint16(s[0:], g.Shift)
		b = append(b, s[:]...)
		n += 4
	}
	b = append(b, g.Values...)
	return append(b, make([]byte, pad4(n)-n)...)
}

func fp32Group(v []float32) group {
	g := group{Format: fmtFP32, Count: uint16(len(v)), Values: make([]byte, 4*len(v))}
	for i, x := range v {
		binary.LittleEndian.PutUint32(g.Values[4*i:], math.Float32bits(x))
	}
	return g
}

func bf16Group(bits []uint16) group {
	g := group{Format: fmtBF16, Count: uint16(len(bits)), Values: make([]byte, 2*len(bits))}
	for i, x := range bits {
		binary.LittleEndian.PutUint16(g.Values[2*i:], x)
	}
	return g
}

// kulischVal is one Kulisch value: state (0 FINITE, 1 +0, 2 -0, 3 +inf,
// 4 -inf, 5 NaN) and an integer in units of 2^-149 (or 2^Shift units).
type kulischVal struct {
	State uint8
	Int   *big.Int
}

// putTwos writes v as an n-byte two's-complement little-endian integer.
func putTwos(dst []byte, v *big.Int, n int) {
	m := new(big.Int).Set(v)
	if m.Sign() < 0 {
		m.Add(m, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	mag := m.Bytes() // big-endian magnitude
	for i := 0; i < n; i++ {
		if i < len(mag) {
			dst[i] = mag[len(mag)-1-i]
		} else {
			dst[i] = 0
		}
	}
}

func getTwos(src []byte) *big.Int {
	n := len(src)
	bb := make([]byte, n)
	for i := range src {
		bb[n-1-i] = src[i]
	}
	v := new(big.Int).SetBytes(bb)
	if n > 0 && src[n-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	return v
}

// kulischGroup builds a KULISCH group of integer byte count wb (W/8).
func kulischGroup(wb int, vals []kulischVal) group {
	g := group{Format: fmtKulisch, Count: uint16(len(vals)), Bytes: uint16(wb), Values: make([]byte, len(vals)*(1+wb))}
	for i, v := range vals {
		o := i * (1 + wb)
		g.Values[o] = v.State
		putTwos(g.Values[o+1:o+1+wb], v.Int, wb)
	}
	return g
}

func scaledGroup(b, shift int, vals []kulischVal) group {
	g := kulischGroup(b, vals)
	g.Format, g.Shift = fmtScaled, uint16(shift)
	return g
}

// f64Group builds a KULISCH_F64 group of raw binary64 bit patterns.
func f64Group(bs []uint64) group {
	g := group{Format: fmtF64, Count: uint16(len(bs)), Values: make([]byte, 8*len(bs))}
	for i, x := range bs {
		binary.LittleEndian.PutUint64(g.Values[8*i:], x)
	}
	return g
}

// f64NaN is the only NaN encoding KULISCH_F64 admits (6).
const f64NaN = 0x7FF8000000000000

// f64Kulisch maps one KULISCH_F64 value (its binary64 bit pattern) to the
// Kulisch value it stands for, by the table of section 6: +0, -0, +inf,
// -inf, the one NaN pattern, or FINITE (-1)^s x (2^52 + F) x 2^(E - 1075)
// as an integer in units of 2^-149. A subnormal, any other NaN pattern, a
// finite value that is not a multiple of 2^-149 (E - 1075 + t < -149, t
// the trailing zero bits of 2^52 + F) and, where W is known (w > 0), a
// magnitude outside the signed W-bit range (E - 1023 > W - 151) are
// malformed (D11: `out_of_range`).
func f64Kulisch(x uint64, w int) (kulischVal, error) {
	neg := x>>63 != 0
	e := int(x>>52) & 0x7FF
	f := x & (1<<52 - 1)
	zero := new(big.Int)
	switch {
	case x == 0:
		return kulischVal{State: 1, Int: zero}, nil
	case x == 1<<63:
		return kulischVal{State: 2, Int: zero}, nil
	case e == 0x7FF && f == 0 && !neg:
		return kulischVal{State: 3, Int: zero}, nil
	case e == 0x7FF && f == 0:
		return kulischVal{State: 4, Int: zero}, nil
	case x == f64NaN:
		return kulischVal{State: 5, Int: zero}, nil
	case e == 0x7FF:
		return kulischVal{}, fmt.Errorf("NaN pattern %#016x (only %#016x is a KULISCH_F64 NaN)", x, uint64(f64NaN))
	case e == 0:
		return kulischVal{}, fmt.Errorf("binary64 subnormal %#016x", x)
	}
	m := uint64(1)<<52 | f
	t := bits.TrailingZeros64(m)
	if e-1075+t < -149 {
		return kulischVal{}, fmt.Errorf("%#016x is not a multiple of 2^-149 (lowest set bit 2^%d)", x, e-1075+t)
	}
	if w > 0 && e-1023 > w-151 {
		return kulischVal{}, fmt.Errorf("%#016x outside the signed %d-bit Kulisch range (E - 1023 = %d > W - 151 = %d)", x, w, e-1023, w-151)
	}
	u := new(big.Int).SetUint64(m)
	if sh := e - 1075 + 149; sh >= 0 {
		u.Lsh(u, uint(sh))
	} else {
		u.Rsh(u, uint(-sh))
	}
	if neg {
		u.Neg(u)
	}
	return kulischVal{State: 0, Int: u}, nil
}

func (g group) fp32s() []float32 {
	r := make([]float32, g.Count)
	for i := range r {
		r[i] = math.Float32frombits(binary.LittleEndian.Uint32(g.Values[4*i:]))
	}
	return r
}

// kulischVals are the Kulisch values of a KULISCH group (units of 2^-149),
// a KULISCH_SCALED group (units of 2^Shift x 2^-149) or a KULISCH_F64
// group (units of 2^-149; a malformed binary64 gets state 0xFF).
func (g group) kulischVals() []kulischVal {
	w := valueWidth(g.Format, g.Bytes)
	r := make([]kulischVal, g.Count)
	if g.Format == fmtF64 {
		for i := range r {
			kv, err := f64Kulisch(binary.LittleEndian.Uint64(g.Values[8*i:]), 0)
			if err != nil {
				kv = kulischVal{State: 0xFF, Int: new(big.Int)}
			}
			r[i] = kv
		}
		return r
	}
	for i := range r {
		v := g.Values[i*w : (i+1)*w]
		r[i] = kulischVal{State: v[0], Int: getTwos(v[1:])}
	}
	return r
}

// ---- section 8: endpoint-set extension ----

type extension struct {
	Encoding, XFlags uint8
	Tenant           uint32
	Token            uint64
	Set              []byte // endpoint set body (8.3)
	Tag              []byte // 16 bytes when XFlags has AUTH
}

func (e *extension) length() int {
	n := 16 + len(e.Set)
	if e.XFlags&xfAuth != 0 {
		n += 16
	}
	return n
}

func (e *extension) appendTo(b []byte) []byte {
	h := make([]byte, 16)
	be.PutUint16(h[0:], uint16(e.length()))
	h[2], h[3] = e.Encoding, e.XFlags
	be.PutUint32(h[4:], e.Tenant)
	be.PutUint64(h[8:], e.Token)
	b = append(b, h...)
	b = append(b, e.Set...)
	if e.XFlags&xfAuth != 0 {
		tag := make([]byte, 16)
		copy(tag, e.Tag)
		b = append(b, tag...)
	}
	return b
}

// bitmapSet sets bit b with the spec's numbering: bit (7 - b%8) of byte b/8.
func bitmapSet(bm []byte, b int) { bm[b/8] |= 0x80 >> (b % 8) }
func bitmapHas(bm []byte, b int) bool {
	return bm[b/8]&(0x80>>(b%8)) != 0
}

func flatSet(setID, words int, endpoints ...uint32) []byte {
	b := make([]byte, 4+8*words)
	be.PutUint16(b[0:], uint16(setID))
	be.PutUint16(b[2:], uint16(words))
	for _, e := range endpoints {
		bitmapSet(b[4:], int(e)-setID*words*64)
	}
	return b
}

func hierSet(blockBits, blockCount int, endpoints ...uint32) []byte {
	upper := make([]byte, (blockCount+63)/64*8)
	lower := map[int][]byte{}
	for _, e := range endpoints {
		blk := int(e) / blockBits
		bitmapSet(upper, blk)
		if lower[blk] == nil {
			lower[blk] = make([]byte, blockBits/8)
		}
		bitmapSet(lower[blk], int(e)%blockBits)
	}
	b := make([]byte, 4)
	be.PutUint16(b[0:], uint16(blockBits))
	be.PutUint16(b[2:], uint16(blockCount))
	b = append(b, upper...)
	for k := 0; k < blockCount; k++ {
		if lower[k] != nil {
			b = append(b, lower[k]...)
		}
	}
	return b
}

func listSet(endpoints ...uint32) []byte {
	b := make([]byte, 4+4*len(endpoints))
	be.PutUint16(b[0:], uint16(len(endpoints)))
	for i, e := range endpoints {
		be.PutUint32(b[4+4*i:], e)
	}
	return b
}

// decodeSet applies the set validity rules of 8.3 and returns the
// endpoints in ascending order. listCap 0 means no cap known.
func decodeSet(enc uint8, b []byte, listCap uint32) ([]uint32, error) {
	if len(b) < 4 {
		return nil, fail("truncated", "set body %d bytes", len(b))
	}
	var eps []uint32
	switch enc {
	case encFlat:
		id, words := int(be.Uint16(b[0:])), int(be.Uint16(b[2:]))
		if words < 1 {
			return nil, fail("bad_count", "FLAT word count 0")
		}
		if len(b) != 4+8*words {
			return nil, fail("bad_length", "FLAT body %d for %d words", len(b), words)
		}
		if uint64(id+1)*uint64(words)*64 > 1<<32 {
			return nil, fail("out_of_range", "FLAT set id %d", id)
		}
		for i := 0; i < words*64; i++ {
			if bitmapHas(b[4:], i) {
				eps = append(eps, uint32(id*words*64+i))
			}
		}
		if len(eps) == 0 {
			return nil, fail("bad_count", "empty FLAT set")
		}
	case encHier:
		bits, count := int(be.Uint16(b[0:])), int(be.Uint16(b[2:]))
		if bits == 0 || bits%64 != 0 {
			return nil, fail("out_of_range", "HIER block bits %d", bits)
		}
		if count < 1 {
			return nil, fail("bad_count", "HIER block count 0")
		}
		ub := (count + 63) / 64 * 8
		if len(b) < 4+ub {
			return nil, fail("bad_length", "HIER upper bitmap")
		}
		upper := b[4 : 4+ub]
		var blocks []int
		for k := 0; k < ub*8; k++ {
			if bitmapHas(upper, k) {
				if k >= count {
					return nil, fail("reserved_nonzero", "HIER upper bit %d", k)
				}
				blocks = append(blocks, k)
			}
		}
		if len(blocks) == 0 {
			return nil, fail("bad_count", "HIER empty upper bitmap")
		}
		rest := b[4+ub:]
		if len(rest)%(bits/8) != 0 {
			return nil, fail("bad_length", "HIER lower bitmaps")
		}
		if len(rest)/(bits/8) != len(blocks) {
			return nil, fail("bad_count", "HIER %d lower bitmaps for %d blocks", len(rest)/(bits/8), len(blocks))
		}
		for i, k := range blocks {
			lb := rest[i*bits/8 : (i+1)*bits/8]
			n := 0
			for j := 0; j < bits; j++ {
				if bitmapHas(lb, j) {
					eps = append(eps, uint32(k*bits+j))
					n++
				}
			}
			if n == 0 {
				return nil, fail("bad_count", "HIER empty lower bitmap")
			}
		}
	case encList:
		n := int(be.Uint16(b[0:]))
		if b[2]|b[3] != 0 {
			return nil, fail("reserved_nonzero", "LIST reserved")
		}
		if n < 1 || listCap > 0 && uint32(n) > listCap {
			return nil, fail("bad_count", "LIST count %d", n)
		}
		if len(b) != 4+4*n {
			return nil, fail("bad_length", "LIST body %d for %d", len(b), n)
		}
		for i := 0; i < n; i++ {
			e := be.Uint32(b[4+4*i:])
			if i > 0 && e <= eps[i-1] {
				return nil, fail("out_of_range", "LIST not ascending")
			}
			eps = append(eps, e)
		}
	default:
		return nil, fail("bad_format", "encoding %d", enc)
	}
	return eps, nil
}

// ---- section 6: DATA and RESULT ----

type dataFrame struct {
	Class     uint8 // classData or classResult
	ID        ident
	SrcEP     uint16
	DstEP     uint16
	PacketID  uint32
	First     uint32
	ElemCount uint16 // decoded; encode computes it from the groups
	Flags     uint8
	Stream    uint16
	Reserved  uint16
	Ext       *extension
	Groups    []group
}

func (d dataFrame) encode() []byte {
	body := []byte{}
	n := 0
	for _, g := range d.Groups {
		body = g.appendTo(body)
		n += int(g.Count)
	}
	b := make([]byte, 2+dataHdr, 2+dataHdr+len(body)+64)
	b[0], b[1] = version10, d.Class
	h := b[2:]
	d.ID.put(h)
	be.PutUint16(h[18:], d.SrcEP)
	be.PutUint16(h[20:], d.DstEP)
	be.PutUint32(h[22:], d.PacketID)
	be.PutUint32(h[26:], d.First)
	be.PutUint16(h[30:], uint16(n))
	h[32] = uint8(len(d.Groups))
	h[33] = d.Flags
	be.PutUint16(h[34:], uint16(len(body)))
	be.PutUint16(h[36:], d.Stream)
	be.PutUint16(h[38:], d.Reserved)
	if d.Ext != nil {
		b = d.Ext.appendTo(b)
	}
	return append(b, body...)
}

// signFrame writes the AUTH tag (8.6) into an encoded DATA/RESULT frame
// (bytes from the control word) that carries an extension with AUTH.
func signFrame(b []byte, key []byte) {
	el := int(be.Uint16(b[2+dataHdr:]))
	tag := b[2+dataHdr+el-16 : 2+dataHdr+el]
	for i := range tag {
		tag[i] = 0
	}
	m := hmac.New(sha256.New, key)
	m.Write(b)
	copy(tag, m.Sum(nil)[:16])
}

// opCtx is what a receiver knows about the operation (0 = unknown).
type opCtx struct {
	MTU    int
	VecLen uint32
	W      int // Kulisch width in bits
}

// decodeData applies rules D1-D15 (and E1-E8 for EXT) to the bytes after
// the Ethernet header.
func decodeData(b []byte, op opCtx) (dataFrame, error) {
	var d dataFrame
	if op.MTU > 0 && len(b) > op.MTU {
		return d, fail("over_mtu", "%d > %d", len(b), op.MTU)
	}
	if len(b) < 2+dataHdr {
		return d, fail("truncated", "%d bytes", len(b))
	}
	if b[0]>>4 != 1 {
		return d, fail("bad_version", "%#x", b[0])
	}
	if b[1] != classData && b[1] != classResult {
		return d, fail("unknown_class", "class %d", b[1])
	}
	d.Class = b[1]
	h := b[2:]
	d.ID = getIdent(h)
	d.SrcEP, d.DstEP = be.Uint16(h[18:]), be.Uint16(h[20:])
	d.PacketID, d.First = be.Uint32(h[22:]), be.Uint32(h[26:])
	d.ElemCount = be.Uint16(h[30:])
	gc := int(h[32])
	d.Flags = h[33]
	bl := int(be.Uint16(h[34:]))
	d.Stream, d.Reserved = be.Uint16(h[36:]), be.Uint16(h[38:])
	if d.Reserved != 0 {
		return d, fail("reserved_nonzero", "offset 38")
	}
	if d.Flags&0xE0 != 0 {
		return d, fail("reserved_nonzero", "flags %#x", d.Flags)
	}
	off := 2 + dataHdr
	if d.Flags&dfExt != 0 {
		r := b[off:]
		if len(r) < 16 {
			return d, fail("truncated", "extension header")
		}
		el := int(be.Uint16(r[0:]))
		if el%4 != 0 || el < 20 {
			return d, fail("bad_length", "extension length %d", el)
		}
		if el > len(r) {
			return d, fail("truncated", "extension length %d > %d", el, len(r))
		}
		e := &extension{Encoding: r[2], XFlags: r[3], Tenant: be.Uint32(r[4:]), Token: be.Uint64(r[8:])}
		if e.Encoding < 1 || e.Encoding > 3 {
			return d, fail("bad_format", "encoding %d", e.Encoding)
		}
		if e.XFlags&0xF8 != 0 {
			return d, fail("reserved_nonzero", "xflags %#x", e.XFlags)
		}
		if d.Class == classData && e.XFlags&xfInstall != 0 || e.XFlags&xfInstall != 0 && e.XFlags&xfPartial != 0 {
			return d, fail("out_of_range", "xflags %#x in class %d", e.XFlags, d.Class)
		}
		tl := 0
		if e.XFlags&xfAuth != 0 {
			tl = 16
			if el < 16+4+16 {
				return d, fail("bad_length", "AUTH extension length %d", el)
			}
			e.Tag = append([]byte(nil), r[el-16:el]...)
		}
		e.Set = append([]byte(nil), r[16:el-tl]...)
		if _, err := decodeSet(e.Encoding, e.Set, 0); err != nil {
			return d, err
		}
		d.Ext = e
		off += el
	}
	if off+bl > len(b) {
		return d, fail("truncated", "body length %d", bl)
	}
	if d.Flags&dfInexact != 0 {
		if d.Flags&dfLast == 0 {
			return d, fail("out_of_range", "INEXACT without LAST")
		}
		if d.ElemCount != 0 || gc != 0 {
			return d, fail("bad_count", "INEXACT with elements")
		}
		if bl != 0 {
			return d, fail("bad_length", "INEXACT with body")
		}
	}
	if gc == 0 {
		if d.ElemCount != 0 {
			return d, fail("bad_count", "no groups, %d elements", d.ElemCount)
		}
		if bl != 0 {
			return d, fail("bad_length", "no groups, body %d", bl)
		}
		if d.Flags&(dfInexact|dfExt) == 0 {
			return d, fail("bad_count", "no groups without INEXACT or EXT")
		}
	}
	body := b[off : off+bl]
	p := 0
	sum := 0
	for i := 0; i < gc; i++ {
		if p+4 > len(body) {
			return d, fail("bad_length", "group %d descriptor", i)
		}
		g := group{Count: be.Uint16(body[p:])}
		fw := be.Uint16(body[p+2:])
		g.Format, g.Bytes = uint8(fw>>12), fw&0x0FFF
		if g.Count < 1 {
			return d, fail("bad_count", "group %d count 0", i)
		}
		switch g.Format {
		case fmtINT8, fmtFP16, fmtBF16, fmtFP32:
			if g.Bytes != 0 {
				return d, fail("bad_format", "group %d format word %#x", i, fw)
			}
		case fmtKulisch:
			if g.Bytes < 8 || g.Bytes > 512 || op.W > 0 && int(g.Bytes) != op.W/8 {
				return d, fail("bad_format", "group %d KULISCH W/8 %d", i, g.Bytes)
			}
		case fmtScaled:
			if d.Class != classData || d.Ext != nil {
				return d, fail("bad_format", "KULISCH_SCALED outside DATA without EXT")
			}
			if g.Bytes < 1 || g.Bytes > 512 {
				return d, fail("bad_format", "group %d B %d", i, g.Bytes)
			}
		case fmtF64:
			// D11: bits 11..0 zero (the Format Word row: 0 for every
			// format but KULISCH and KULISCH_SCALED), DATA without EXT.
			if g.Bytes != 0 {
				return d, fail("bad_format", "group %d format word %#x", i, fw)
			}
			if d.Class != classData || d.Ext != nil {
				return d, fail("bad_format", "KULISCH_F64 outside DATA without EXT")
			}
		default:
			return d, fail("bad_format", "group %d format %d", i, g.Format)
		}
		p += 4
		vw := valueWidth(g.Format, g.Bytes)
		n := int(g.Count) * vw
		if g.Format == fmtScaled {
			n += 4
		}
		if p+pad4(n) > len(body) {
			return d, fail("bad_length", "group %d values", i)
		}
		v := body[p : p+n]
		for _, x := range body[p+n : p+pad4(n)] {
			if x != 0 {
				return d, fail("reserved_nonzero", "group %d padding", i)
			}
		}
		if g.Format == fmtScaled {
			g.Shift = be.Uint16(v[0:])
			if v[2]|v[3] != 0 {
				return d, fail("reserved_nonzero", "group %d scale word", i)
			}
			wmax := 4096
			if op.W > 0 {
				wmax = op.W
			}
			if int(g.Shift)+8*int(g.Bytes) > wmax {
				return d, fail("out_of_range", "group %d shift %d + 8x%d > %d", i, g.Shift, g.Bytes, wmax)
			}
			v = v[4:]
		}
		g.Values = append([]byte(nil), v...)
		if g.Format == fmtKulisch || g.Format == fmtScaled {
			for j, kv := range g.kulischVals() {
				if kv.State > 5 || (kv.State == 0) != (kv.Int.Sign() != 0) {
					return d, fail("out_of_range", "group %d value %d state %d", i, j, kv.State)
				}
			}
		}
		if g.Format == fmtF64 {
			for j := 0; j < int(g.Count); j++ {
				if _, err := f64Kulisch(binary.LittleEndian.Uint64(g.Values[8*j:]), op.W); err != nil {
					return d, fail("out_of_range", "group %d value %d: %v", i, j, err)
				}
			}
		}
		p += pad4(n)
		sum += int(g.Count)
		d.Groups = append(d.Groups, g)
	}
	if p != len(body) {
		return d, fail("bad_length", "groups end at %d, body %d", p, len(body))
	}
	if sum != int(d.ElemCount) {
		return d, fail("bad_count", "groups hold %d, element count %d", sum, d.ElemCount)
	}
	if d.ElemCount > 0 {
		end := uint64(d.First) + uint64(d.ElemCount)
		if end > math.MaxUint32 || op.VecLen > 0 && end > uint64(op.VecLen) {
			return d, fail("out_of_range", "range [%d,%d)", d.First, end)
		}
		if op.VecLen > 0 && (end == uint64(op.VecLen)) != (d.Flags&dfLast != 0) {
			return d, fail("out_of_range", "LAST %v on [%d,%d) of %d", d.Flags&dfLast != 0, d.First, end, op.VecLen)
		}
	}
	return d, nil
}

// ---- section 7: PROGRESS ----

type hole struct{ Start, End uint32 }

type progress struct {
	ID              ident
	SrcEP, DstEP    uint16
	Stream          uint16
	PacketID        uint32
	Committed       uint32
	IntervalCredits uint16
	ByteCredits     uint32
	Status, Flags   uint8
	Holes           []hole
	// FailCause and FailHops (offsets 42, 43): with Status FAILED, the
	// cause where the failure began and the FAILED hops it crossed.
	FailCause, FailHops uint8
}

func (p progress) encode() []byte {
	b := make([]byte, 2+progressHdr+8*len(p.Holes))
	b[0], b[1] = version10, classProgress
	h := b[2:]
	p.ID.put(h)
	be.PutUint16(h[18:], p.SrcEP)
	be.PutUint16(h[20:], p.DstEP)
	be.PutUint16(h[22:], p.Stream)
	be.PutUint32(h[24:], p.PacketID)
	be.PutUint32(h[28:], p.Committed)
	be.PutUint16(h[32:], p.IntervalCredits)
	be.PutUint32(h[34:], p.ByteCredits)
	h[38], h[39] = p.Status, p.Flags
	be.PutUint16(h[40:], uint16(len(p.Holes)))
	h[42], h[43] = p.FailCause, p.FailHops
	for i, x := range p.Holes {
		be.PutUint32(h[progressHdr+8*i:], x.Start)
		be.PutUint32(h[progressHdr+8*i+4:], x.End)
	}
	return b
}

// decodeProgress applies rules P1-P11 (vecLen 0: unknown).
func decodeProgress(b []byte, mtu int, vecLen uint32) (progress, error) {
	var p progress
	if mtu > 0 && len(b) > mtu {
		return p, fail("over_mtu", "%d", len(b))
	}
	if len(b) < 2+progressHdr {
		return p, fail("truncated", "%d bytes", len(b))
	}
	if b[0]>>4 != 1 {
		return p, fail("bad_version", "%#x", b[0])
	}
	if b[1] != classProgress {
		return p, fail("unknown_class", "class %d", b[1])
	}
	h := b[2:]
	p.ID = getIdent(h)
	p.SrcEP, p.DstEP, p.Stream = be.Uint16(h[18:]), be.Uint16(h[20:]), be.Uint16(h[22:])
	p.PacketID, p.Committed = be.Uint32(h[24:]), be.Uint32(h[28:])
	p.IntervalCredits, p.ByteCredits = be.Uint16(h[32:]), be.Uint32(h[34:])
	p.Status, p.Flags = h[38], h[39]
	nh := int(be.Uint16(h[40:]))
	p.FailCause, p.FailHops = h[42], h[43]
	// P5: both zero unless Status is FAILED; with FAILED a cause of at
	// most 4, and no hops without a cause.
	switch {
	case p.Status != 5 && p.FailCause != 0:
		return p, fail("reserved_nonzero", "offset 42")
	case p.Status != 5 && p.FailHops != 0:
		return p, fail("reserved_nonzero", "offset 43")
	case p.FailCause > 4:
		return p, fail("out_of_range", "failure cause %d", p.FailCause)
	case p.FailCause == 0 && p.FailHops != 0:
		return p, fail("reserved_nonzero", "offset 43")
	}
	if p.Flags&0xFC != 0 {
		return p, fail("reserved_nonzero", "flags %#x", p.Flags)
	}
	if p.Status > 5 {
		return p, fail("out_of_range", "status %d", p.Status)
	}
	if nh > 32 {
		return p, fail("bad_count", "%d holes", nh)
	}
	if 2+progressHdr+8*nh > len(b) {
		return p, fail("truncated", "%d holes", nh)
	}
	if vecLen > 0 && p.Committed > vecLen {
		return p, fail("out_of_range", "committed %d > %d", p.Committed, vecLen)
	}
	prev := p.Committed
	for i := 0; i < nh; i++ {
		x := hole{be.Uint32(h[progressHdr+8*i:]), be.Uint32(h[progressHdr+8*i+4:])}
		if x.Start < prev || x.End <= x.Start || vecLen > 0 && x.End > vecLen {
			return p, fail("out_of_range", "hole %d [%d,%d)", i, x.Start, x.End)
		}
		prev = x.End
		p.Holes = append(p.Holes, x)
	}
	return p, nil
}

// One table row per receiver rule of docs/protocol.md: a valid frame, one
// mutation, the expected sentinel and field name.

package parser

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func exampleFrame(t testing.TB, marker string) []byte {
	for _, e := range examples(t) {
		if e.Marker == marker {
			return append([]byte(nil), e.Frame...)
		}
	}
	t.Fatalf("no example %q", marker)
	return nil
}

func put16(b []byte, off int, v uint16) { be.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { be.PutUint32(b[off:], v) }

type rule struct {
	name  string
	base  string
	mut   func(b []byte) []byte
	lim   *Limits // nil: the example's own limits
	err   error   // nil: must be accepted
	field string
}

// decoders is what a dataplane worker keeps: one long-lived decoder value
// per class, so that the errors they return (which live inside them) cost
// nothing.
type decoders struct {
	c Control
	d Data
	g Progress
}

func (x *decoders) decode(b []byte, lim Limits) error {
	c, err := Classify(b)
	if err != nil {
		return err
	}
	switch c {
	case ClassControl:
		return x.c.Decode(b, lim)
	case ClassData, ClassResult:
		return x.d.Decode(b, lim)
	default:
		return x.g.Decode(b, lim)
	}
}

func decodeAny(b []byte, lim Limits) error {
	var x decoders // escapes with the error it returns: fine in a test
	return x.decode(b, lim)
}

const (
	dOff  = HdrOff // DATA header offset in the frame
	cOff  = HdrOff
	cBody = ControlBodyOff
	pOff  = HdrOff
	xOff  = DataBodyOff // extension offset
	sOff  = DataBodyOff + ExtHdrLen
)

func setB(off int, v byte) func([]byte) []byte {
	return func(b []byte) []byte { b[off] = v; return b }
}

// setBs sets several bytes: offset, value, offset, value...
func setBs(ov ...int) func([]byte) []byte {
	return func(b []byte) []byte {
		for i := 0; i+1 < len(ov); i += 2 {
			b[ov[i]] = byte(ov[i+1])
		}
		return b
	}
}

func set16(off int, v uint16) func([]byte) []byte {
	return func(b []byte) []byte { put16(b, off, v); return b }
}
func set32(off int, v uint32) func([]byte) []byte {
	return func(b []byte) []byte { put32(b, off, v); return b }
}

// setF64 writes binary64 bits little-endian, the way KULISCH_F64 carries them.
func setF64(off int, bits uint64) func([]byte) []byte {
	return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], bits); return b }
}

// f64Val is the offset of value i of the data-f64 example's group.
func f64Val(i int) int { return DataBodyOff + GroupDescLen + 8*i }

// KULISCH_F64 bit patterns for the rules, from package math rather than
// from the decoder's constants.
var (
	f64One        = math.Float64bits(1)
	f64Unit       = math.Float64bits(math.Ldexp(1, -149))                // 2^-149, the Kulisch unit
	f64Half       = math.Float64bits(math.Ldexp(1, -150))                // 2^-150 = 0x3690000000000000
	f64ThreeHalf  = math.Float64bits(math.Ldexp(3, -150))                // 1.5 x 2^-149: t = 51, one bit too fine
	f64FineOne    = math.Float64bits(math.Nextafter(1, 2))               // 1 + 2^-52: t = 0, still a multiple
	f64Subnormal  = math.Float64bits(math.SmallestNonzeroFloat64)        // E = 0, F = 1
	f64NegSubnorm = math.Float64bits(-math.Ldexp(1, -1030))              // E = 0, F = 2^44, negative
	f64GoNaN      = math.Float64bits(math.NaN())                         // Go's NaN has payload 1: not canonical
	f64NegNaN     = math.Float64bits(math.Copysign(math.NaN(), -1)) &^ 1 // the canonical pattern with the sign set
	f64Pow130     = math.Float64bits(math.Ldexp(1, 130))                 // 2^130 = 2^279 units: outside W = 280
	f64NegPow130  = math.Float64bits(-math.Ldexp(1, 130))                // -2^130: outside too (the range is symmetric here)
	f64Below130   = math.Float64bits(math.Nextafter(math.Ldexp(1, 130), 0))
	f64Max        = math.Float64bits(math.MaxFloat64)
	f64NegZero    = math.Float64bits(math.Copysign(0, -1))
	f64PosInf     = math.Float64bits(math.Inf(1))
)

// f64CanonicalNaN is the one NaN encoding docs/protocol.md section 6 admits,
// copied from the document.
const f64CanonicalNaN = 0x7FF8000000000000

// f64WithExt turns data-flat-ext's group of two FP32 values (8 bytes,
// descriptor at 84) into one KULISCH_F64 value 1.0: the same bytes count,
// so only the format makes the frame illegal.
func f64WithExt(b []byte) []byte {
	d := DataBodyOff + 28
	put16(b, d, 1)
	put16(b, d+2, uint16(FormatKulischF64)<<12)
	put16(b, dOff+dataCount, 1)
	binary.LittleEndian.PutUint64(b[d+GroupDescLen:], f64One)
	return b
}

func cut(n int) func([]byte) []byte { return func(b []byte) []byte { return b[:n] } }
func lim(l Limits) *Limits          { return &l }

var stageCtx = cBody // context record offset in the STAGE example

var rules = []rule{
	// Control word (every class).
	{"short control word", "data-fp32", cut(15), nil, ErrTruncated, "control_word"},
	{"major version 2", "data-fp32", setB(CWOff, 0x20), nil, ErrVersion, "version"},
	{"minor version accepted", "data-fp32", setB(CWOff, 0x1F), nil, nil, ""},
	{"class 0", "data-fp32", setB(CWOff+1, 0), nil, ErrClass, "class"},
	{"class 5", "data-fp32", setB(CWOff+1, 5), nil, ErrClass, "class"},

	// DATA / RESULT.
	{"data truncated header", "data-fp32", cut(DataBodyOff - 1), nil, ErrTruncated, "header"},
	{"data over mtu", "data-fp32", nil, lim(Limits{MTU: 60}), ErrMTU, "frame"},
	{"data reserved", "data-fp32", setB(dOff+dataReserved+1, 1), nil, ErrReserved, "reserved"},
	{"data flags reserved", "data-fp32", setB(dOff+dataFlags, 0x20), nil, ErrReserved, "flags"},
	{"data body past frame", "data-fp32", set16(dOff+dataBodyLen, 24), nil, ErrTruncated, "body_length"},
	{"data body shorter than group", "data-fp32", set16(dOff+dataBodyLen, 16), nil, ErrLength, "body_length"},
	{"data body longer than groups", "data-fp32", func(b []byte) []byte { put16(b, dOff+dataBodyLen, 24); return append(b, 0, 0, 0, 0) }, nil, ErrLength, "body_length"},
	{"data zero groups", "data-fp32", func(b []byte) []byte {
		b[dOff+dataGroups] = 0
		put16(b, dOff+dataCount, 0)
		put16(b, dOff+dataBodyLen, 0)
		return b[:DataBodyOff]
	}, nil, ErrCount, "group_count"},
	{"data zero groups with elements", "data-fp32", setB(dOff+dataGroups, 0), nil, ErrCount, "element_count"},
	{"data zero groups with body", "data-fp32", func(b []byte) []byte { b[dOff+dataGroups] = 0; put16(b, dOff+dataCount, 0); return b }, nil, ErrLength, "body_length"},
	{"data group count too high", "data-fp32", setB(dOff+dataGroups, 2), nil, ErrLength, "body_length"},
	{"data element count mismatch", "data-fp32", set16(dOff+dataCount, 5), nil, ErrCount, "element_count"},
	{"group count zero", "data-fp32", set16(DataBodyOff, 0), nil, ErrCount, "group.count"},
	{"group format 0", "data-fp32", set16(DataBodyOff+2, 0x0000), nil, ErrFormat, "group.format"},
	{"group format AUTO", "data-fp32", set16(DataBodyOff+2, 0x6000), nil, ErrFormat, "group.format"},
	{"group format 9", "data-fp32", set16(DataBodyOff+2, 0x9000), nil, ErrFormat, "group.format"},
	{"group format 15", "data-fp32", set16(DataBodyOff+2, 0xF000), nil, ErrFormat, "group.format"},
	{"group fp32 with kulisch bytes", "data-fp32", set16(DataBodyOff+2, 0x4001), nil, ErrFormat, "group.format"},
	{"kulisch bytes vs operation", "data-mixed", nil, lim(Limits{VectorLen: 1024, KulischBytes: 36}), ErrFormat, "group.kulisch_bytes"},
	{"kulisch bytes below 8", "data-mixed", set16(DataBodyOff+12+2, 0x5007), lim(Limits{}), ErrFormat, "group.kulisch_bytes"},
	{"kulisch state 6", "data-mixed", setB(DataBodyOff+12+4, 6), nil, ErrRange, "group.kulisch_state"},
	{"kulisch finite zero", "data-mixed", setB(DataBodyOff+12+4+19, 0), nil, ErrRange, "group.kulisch_value"},
	{"kulisch +inf nonzero", "data-mixed", setB(DataBodyOff+12+4, KulischPosInf), nil, ErrRange, "group.kulisch_value"},
	{"group padding nonzero", "data-int8", setB(DataBodyOff+4+3, 1), nil, ErrReserved, "group.padding"},

	// KULISCH_SCALED (data-scaled: descriptor 56, Scale Word 60, values 64).
	{"scaled accepted without limits", "data-scaled", nil, lim(Limits{}), nil, ""},
	{"scaled in RESULT", "data-scaled", setB(CWOff+1, byte(ClassResult)), nil, ErrFormat, "group.format"},
	{"scaled B 0", "data-scaled", set16(DataBodyOff+2, 0x7000), nil, ErrFormat, "group.scaled_bytes"},
	{"scaled B 513", "data-scaled", set16(DataBodyOff+2, 0x7201), lim(Limits{}), ErrFormat, "group.scaled_bytes"},
	{"scaled group past body", "data-scaled", set16(DataBodyOff, 6), nil, ErrLength, "body_length"},
	{"scaled reserved", "data-scaled", setB(DataBodyOff+4+3, 1), nil, ErrReserved, "group.scale_reserved"},
	{"scaled shift + 8B = W", "data-scaled", set16(DataBodyOff+4, 280-32), nil, nil, ""},
	{"scaled shift + 8B > W", "data-scaled", set16(DataBodyOff+4, 280-32+1), nil, ErrRange, "group.scale_shift"},
	{"scaled shift at 4096", "data-scaled", set16(DataBodyOff+4, 4096-32), lim(Limits{}), nil, ""},
	{"scaled shift past 4096", "data-scaled", set16(DataBodyOff+4, 4096-32+1), lim(Limits{}), ErrRange, "group.scale_shift"},
	{"scaled state 6", "data-scaled", setB(DataBodyOff+8, 6), nil, ErrRange, "group.kulisch_state"},
	{"scaled finite zero", "data-scaled", set32(DataBodyOff+9, 0), nil, ErrRange, "group.kulisch_value"},
	{"scaled +0 nonzero", "data-scaled", setB(DataBodyOff+8+10+1, 1), nil, ErrRange, "group.kulisch_value"},
	{"scaled padding nonzero", "data-scaled", setB(DataBodyOff+35, 1), nil, ErrReserved, "group.padding"},

	// KULISCH_F64 (data-f64: descriptor 56, values 60, 68, 76, 84, 92 =
	// 1.0, -1.5 x 2^-148, +0, 2^-149, -inf; W = 280).
	{"f64 accepted without limits", "data-f64", nil, lim(Limits{}), nil, ""},
	{"f64 in RESULT", "data-f64", setB(CWOff+1, byte(ClassResult)), nil, ErrFormat, "group.format"},
	{"f64 with EXT", "data-flat-ext", f64WithExt, nil, ErrFormat, "group.format"},
	{"f64 bits 11..0 nonzero", "data-f64", set16(DataBodyOff+2, 0x8001), nil, ErrFormat, "group.format"},
	{"f64 bits 11..0 = 0x800", "data-f64", set16(DataBodyOff+2, 0x8800), lim(Limits{}), ErrFormat, "group.format"},
	{"f64 group past body", "data-f64", set16(DataBodyOff, 6), nil, ErrLength, "body_length"},
	{"f64 -0 +inf accepted", "data-f64", func(b []byte) []byte {
		return setF64(f64Val(1), f64PosInf)(setF64(f64Val(2), f64NegZero)(b))
	}, nil, nil, ""},
	{"f64 canonical NaN accepted", "data-f64", setF64(f64Val(2), f64CanonicalNaN), nil, nil, ""},
	{"f64 2^-149 accepted", "data-f64", setF64(f64Val(0), f64Unit), nil, nil, ""},
	{"f64 1 + 2^-52 accepted", "data-f64", setF64(f64Val(0), f64FineOne), nil, nil, ""},
	{"f64 subnormal", "data-f64", setF64(f64Val(3), f64Subnormal), nil, ErrRange, "group.f64_value"},
	{"f64 negative subnormal", "data-f64", setF64(f64Val(2), f64NegSubnorm), lim(Limits{}), ErrRange, "group.f64_value"},
	{"f64 NaN with payload", "data-f64", setF64(f64Val(2), f64GoNaN), nil, ErrRange, "group.f64_value"},
	{"f64 negative NaN", "data-f64", setF64(f64Val(4), f64NegNaN), lim(Limits{}), ErrRange, "group.f64_value"},
	{"f64 2^-150", "data-f64", setF64(f64Val(1), f64Half), nil, ErrRange, "group.f64_value"},
	{"f64 1.5 x 2^-149", "data-f64", setF64(f64Val(0), f64ThreeHalf), lim(Limits{}), ErrRange, "group.f64_value"},
	{"f64 below 2^130 within W 280", "data-f64", setF64(f64Val(0), f64Below130), nil, nil, ""},
	{"f64 2^130 beyond W 280", "data-f64", setF64(f64Val(4), f64Pow130), nil, ErrRange, "group.f64_value"},
	{"f64 -2^130 beyond W 280", "data-f64", setF64(f64Val(0), f64NegPow130), nil, ErrRange, "group.f64_value"},
	{"f64 2^130 without W", "data-f64", setF64(f64Val(4), f64Pow130), lim(Limits{}), nil, ""},
	{"f64 max within W 4096", "data-f64", setF64(f64Val(4), f64Max), lim(Limits{KulischBytes: MaxKulischBytes}), nil, ""},

	{"beyond vector", "data-fp32", set32(dOff+dataFirst, 1021), nil, ErrRange, "first_element"},
	{"beyond 2^32", "data-fp32", set32(dOff+dataFirst, 0xFFFFFFFE), lim(Limits{}), ErrRange, "first_element"},
	{"end of vector without LAST", "result-last", setB(dOff+dataFlags, 0), nil, ErrRange, "flags.last"},
	{"LAST before the end", "data-fp32", setB(dOff+dataFlags, FlagLast), nil, ErrRange, "flags.last"},
	{"LAST unchecked without vector length", "data-fp32", setB(dOff+dataFlags, FlagLast), lim(Limits{}), nil, ""},
	{"inexact without LAST", "data-inexact", setB(dOff+dataFlags, FlagInexact), nil, ErrRange, "flags.last"},
	{"inexact with elements", "data-fp32", setB(dOff+dataFlags, FlagInexact|FlagLast), nil, ErrCount, "element_count"},
	{"inexact with groups", "data-inexact", setB(dOff+dataGroups, 1), nil, ErrCount, "group_count"},
	{"inexact with body", "data-inexact", func(b []byte) []byte { put16(b, dOff+dataBodyLen, 4); return append(b, 0, 1, 0x40, 0) }, nil, ErrLength, "body_length"},
	{"retransmit flag accepted", "data-fp32", setB(dOff+dataFlags, FlagRetransmit), nil, nil, ""},

	// Extension.
	{"ext truncated", "data-flat-ext", cut(xOff + 8), nil, ErrTruncated, "ext"},
	{"ext length past frame", "data-hier-ext", set16(xOff, 400), nil, ErrTruncated, "ext.length"},
	{"ext length not multiple of 4", "data-flat-ext", set16(xOff, 30), nil, ErrLength, "ext.length"},
	{"ext length too small", "data-flat-ext", set16(xOff, 16), nil, ErrLength, "ext.length"},
	{"ext length vs set", "data-flat-ext", set16(xOff, 32), nil, ErrLength, "set.length"},
	{"ext encoding 0", "data-flat-ext", setB(xOff+2, 0), nil, ErrFormat, "ext.encoding"},
	{"ext encoding 4", "data-flat-ext", setB(xOff+2, 4), nil, ErrFormat, "ext.encoding"},
	{"ext xflags reserved", "data-flat-ext", setB(xOff+3, 0x10), nil, ErrReserved, "ext.xflags"},
	{"INSTALL in DATA", "data-flat-ext", setB(xOff+3, XFlagInstall), nil, ErrRange, "ext.xflags"},
	{"PARTIAL with INSTALL", "result-install-list", setB(xOff+3, XFlagInstall|XFlagPartial), nil, ErrRange, "ext.xflags"},
	{"PARTIAL in RESULT accepted", "result-install-list", setB(xOff+3, XFlagPartial), nil, nil, ""},
	{"PARTIAL in DATA accepted", "data-flat-ext", setB(xOff+3, XFlagPartial), nil, nil, ""},
	{"AUTH without room for tag", "data-flat-ext", setB(xOff+3, XFlagAuth), nil, ErrLength, "ext.length"},
	{"flat word count 0", "data-flat-ext", set16(sOff+2, 0), nil, ErrCount, "set.word_count"},
	{"flat word count vs length", "data-flat-ext", set16(sOff+2, 2), nil, ErrLength, "set.length"},
	{"flat empty", "data-flat-ext", setB(sOff+4, 0), nil, ErrCount, "set.empty"},
	{"list count 0", "result-install-list", set16(sOff, 0), nil, ErrCount, "set.list_count"},
	{"list count over cap", "result-install-list", nil, lim(Limits{VectorLen: 1024, ListCap: 3}), ErrCount, "set.list_count"},
	{"list count vs length", "result-install-list", set16(sOff, 3), nil, ErrLength, "set.length"},
	{"list reserved", "result-install-list", setB(sOff+3, 1), nil, ErrReserved, "set.reserved"},
	{"list not ascending", "result-install-list", set32(sOff+8, 1), nil, ErrRange, "set.list_order"},
	{"list duplicate", "result-install-list", set32(sOff+8, 0), func() *Limits { return nil }(), ErrRange, "set.list_order"},
	{"hier block bits 0", "data-hier-ext", set16(sOff, 0), nil, ErrRange, "set.block_bits"},
	{"hier block bits 65", "data-hier-ext", set16(sOff, 65), nil, ErrRange, "set.block_bits"},
	{"hier block count 0", "data-hier-ext", set16(sOff+2, 0), nil, ErrCount, "set.block_count"},
	{"hier upper bit beyond count", "data-hier-ext", setB(sOff+4, 0xA8), nil, ErrReserved, "set.upper"},
	{"hier more upper bits than lowers", "data-hier-ext", setB(sOff+4, 0xB0), nil, ErrCount, "set.lower_count"},
	{"hier fewer upper bits than lowers", "data-hier-ext", setB(sOff+4, 0x80), nil, ErrCount, "set.lower_count"},
	{"hier empty upper", "data-hier-ext", setB(sOff+4, 0), nil, ErrCount, "set.empty"},
	{"hier empty lower", "data-hier-ext", setB(sOff+12, 0), nil, ErrCount, "set.lower_empty"},

	// CONTROL.
	{"control truncated header", "control-commit", cut(ControlBodyOff - 1), nil, ErrTruncated, "header"},
	{"control over mtu", "control-stage", nil, lim(Limits{MTU: 100}), ErrMTU, "frame"},
	{"control command 0", "control-commit", setB(cOff+ctlCmd, 0), nil, ErrRange, "command"},
	{"control command 9", "control-commit", setB(cOff+ctlCmd, 9), nil, ErrRange, "command"},
	{"control status in request", "control-commit", setB(cOff+ctlStatus, 1), nil, ErrRange, "status"},
	{"ack status 8", "control-ack", setB(cOff+ctlStatus, 8), nil, ErrRange, "status"},
	{"ack status 7", "control-ack", setB(cOff+ctlStatus, 7), nil, nil, ""},
	{"fragment count 0", "control-commit", setB(cOff+ctlFragCnt, 0), nil, ErrRange, "fragment_count"},
	{"fragment count 2 outside caps", "control-commit", setB(cOff+ctlFragCnt, 2), nil, ErrRange, "fragment_count"},
	{"fragment index >= count", "control-caps-response", setB(cOff+ctlFragIdx, 1), nil, ErrRange, "fragment_index"},
	{"caps fragments accepted", "control-caps-response", func(b []byte) []byte { b[cOff+ctlFragIdx], b[cOff+ctlFragCnt] = 2, 3; return b }, nil, nil, ""},
	{"control body past frame", "control-caps-query", set16(cOff+ctlBodyLen, 8), nil, ErrTruncated, "body_length"},
	{"commit with body", "control-caps-query", setB(cOff+ctlCmd, uint8(CmdCommit)), nil, ErrLength, "body_length"},
	{"ack body length", "control-ack", set16(cOff+ctlBodyLen, 15), nil, ErrLength, "body_length"},
	{"ack acked command ACK", "control-ack", setB(cBody, uint8(CmdAck)), nil, ErrRange, "ack.command"},
	{"ack state 7", "control-ack", setB(cBody+1, 7), nil, ErrRange, "ack.state"},
	{"ack reserved", "control-ack", setB(cBody+11, 1), nil, ErrReserved, "ack.reserved"},
	{"ack fail cause 5", "control-ack", func(b []byte) []byte { b[cBody+1], b[cBody+10] = uint8(StateFailed), 5; return b }, nil, ErrRange, "ack.fail_cause"},
	{"ack fail cause while ACTIVE", "control-ack", setB(cBody+10, uint8(FailTimeout)), nil, ErrRange, "ack.fail_cause"},
	{"ack fail cause of a FAILED context", "control-ack", func(b []byte) []byte { b[cBody+1], b[cBody+10] = uint8(StateFailed), uint8(FailPeer); return b }, nil, nil, ""},
	{"ack FAILED without a cause", "control-ack", setB(cBody+1, uint8(StateFailed)), nil, nil, ""},
	{"caps query length", "control-caps-query", set16(cOff+ctlBodyLen, 3), nil, ErrLength, "body_length"},
	{"caps query reserved", "control-caps-query", setB(cBody+2, 1), nil, ErrReserved, "caps_query.reserved"},
	{"caps record count 17", "control-caps-response", setB(cBody, 17), nil, ErrCount, "caps.record_count"},
	{"caps record count vs length", "control-caps-response", setB(cBody, 2), nil, ErrLength, "body_length"},
	{"caps reserved", "control-caps-response", setB(cBody+1, 1), nil, ErrReserved, "caps.reserved"},
	{"caps reserved tail", "control-caps-response", setB(cBody+11, 1), nil, ErrReserved, "caps.reserved"},
	{"caps input format", "control-caps-response", setB(cBody+12, 5), nil, ErrFormat, "caps.record.input_format"},
	{"caps accumulator 2", "control-caps-response", setB(cBody+13, 2), nil, ErrRange, "caps.record.accumulator"},
	{"caps partial", "control-caps-response", setB(cBody+14, 7), nil, ErrFormat, "caps.record.partial_policy"},
	{"caps output", "control-caps-response", setB(cBody+15, 0), nil, ErrFormat, "caps.record.output_format"},
	{"stage short body", "control-stage", set16(cOff+ctlBodyLen, 39), nil, ErrLength, "body_length"},
	{"stage role 5", "control-stage", setB(stageCtx+ctxRole, 5), nil, ErrRange, "stage.context.role"},
	{"stage collective 4", "control-stage", setB(stageCtx+ctxColl, 4), nil, ErrRange, "stage.context.collective"},
	{"stage input kulisch", "control-stage", setB(stageCtx+ctxIn, 5), nil, ErrFormat, "stage.context.input_format"},
	{"stage accumulator 2", "control-stage", setB(stageCtx+ctxAcc, 2), nil, ErrRange, "stage.context.accumulator"},
	{"stage partial 7", "control-stage", setB(stageCtx+ctxPartial, 7), nil, ErrFormat, "stage.context.partial_policy"},
	{"stage output 0", "control-stage", setB(stageCtx+ctxOut, 0), nil, ErrFormat, "stage.context.output_format"},
	{"stage kulisch width odd", "control-stage", set16(stageCtx+ctxKulW, 281), nil, ErrRange, "stage.context.kulisch_width"},
	{"stage kulisch width too big", "control-stage", set16(stageCtx+ctxKulW, 4104), nil, ErrRange, "stage.context.kulisch_width"},
	{"stage kulisch width too small for N", "control-stage", set32(stageCtx+ctxMaxTerms, 5), nil, ErrRange, "stage.context.kulisch_width"},
	{"stage kulisch width without kulisch", "control-stage", func(b []byte) []byte {
		b[stageCtx+ctxAcc], b[stageCtx+ctxPartial] = uint8(AccFP32Arrival), uint8(FormatFP32)
		return b
	}, nil, ErrRange, "stage.context.kulisch_width"},
	{"stage vector 0", "control-stage", set32(stageCtx+ctxVecLen, 0), nil, ErrRange, "stage.context.vector_length"},
	{"stage mtu 1400", "control-stage", set16(stageCtx+ctxMTU, 1400), nil, ErrRange, "stage.context.mtu"},
	{"stage binding count 0", "control-stage", setB(stageCtx+ctxBindings, 0), nil, ErrCount, "stage.context.binding_count"},
	{"stage binding count 65", "control-stage", setB(stageCtx+ctxBindings, 65), nil, ErrCount, "stage.context.binding_count"},
	{"stage set records outside BITMAP", "control-stage", setB(stageCtx+ctxSets, 1), nil, ErrCount, "stage.context.set_count"},
	{"stage window intervals 0", "control-stage", set16(stageCtx+ctxWinIv, 0), nil, ErrRange, "stage.context.window_intervals"},
	{"stage replay 0", "control-stage", set16(stageCtx+ctxReplay, 0), nil, ErrRange, "stage.context.replay_depth"},
	{"stage window bytes < mtu", "control-stage", set32(stageCtx+ctxWinBytes, 1499), nil, ErrRange, "stage.context.window_bytes"},
	{"stage window elements < packet", "control-stage", set32(stageCtx+ctxWinElems, 1451), nil, ErrRange, "stage.context.window_elements"},
	{"stage window elements = packet", "control-stage", set32(stageCtx+ctxWinElems, 1452), nil, nil, ""},
	{"stage max terms 0", "control-stage", func(b []byte) []byte {
		put32(b, stageCtx+ctxMaxTerms, 0)
		b[stageCtx+ctxAcc], b[stageCtx+ctxPartial], b[stageCtx+ctxOut] = uint8(AccFP32Arrival), uint8(FormatFP32), uint8(FormatFP32)
		put16(b, stageCtx+ctxKulW, 0)
		return b
	}, nil, ErrRange, "stage.context.max_terms"},
	{"stage timeout 0", "control-stage", set32(stageCtx+ctxTimeout, 0), nil, ErrRange, "stage.context.timeout"},
	{"stage timeout 600001", "control-stage", set32(stageCtx+ctxTimeout, 600001), nil, ErrRange, "stage.context.timeout"},
	{"stage tenant outside BITMAP", "control-stage", setB(stageCtx+ctxTenant+3, 1), nil, ErrRange, "stage.context.tenant"},
	{"stage bindings past body", "control-stage", setB(stageCtx+ctxBindings, 3), nil, ErrLength, "body_length"},
	{"stage body longer than records", "control-stage", func(b []byte) []byte { put16(b, cOff+ctlBodyLen, 76); return append(b, 0, 0, 0, 0) }, nil, ErrLength, "body_length"},
	{"stage binding kind 0", "control-stage", setB(cBody+ContextRecordLen+bndKind, 0), nil, ErrRange, "stage.binding.kind"},
	{"stage binding kind 5", "control-stage", setB(cBody+ContextRecordLen+BindingLen+bndKind, 5), nil, ErrRange, "stage.binding.kind"},
	{"stage binding flags", "control-stage", setB(cBody+ContextRecordLen+bndFlags, 0x02), nil, ErrReserved, "stage.binding.flags"},

	// PROGRESS.
	{"progress truncated header", "progress-holes", cut(ProgressHoleOff - 1), nil, ErrTruncated, "header"},
	{"progress holes truncated", "progress-holes", cut(ProgressHoleOff + 15), nil, ErrTruncated, "hole_count"},
	{"progress over mtu", "progress-holes", nil, lim(Limits{MTU: 50}), ErrMTU, "frame"},
	{"progress cause without FAILED", "progress-holes", setB(pOff+prgFailCause, 1), nil, ErrReserved, "fail_cause"},
	{"progress hops without FAILED", "progress-holes", setB(pOff+prgFailHops, 1), nil, ErrReserved, "fail_hops"},
	{"progress FAILED cause 5", "progress-holes", setBs(pOff+prgStatus, 5, pOff+prgFailCause, 5), nil, ErrRange, "fail_cause"},
	{"progress FAILED hops without cause", "progress-holes", setBs(pOff+prgStatus, 5, pOff+prgFailHops, 1), nil, ErrReserved, "fail_hops"},
	{"progress FAILED LINK_DOWN 3 hops", "progress-holes", setBs(pOff+prgStatus, 5, pOff+prgFailCause, 4, pOff+prgFailHops, 3), nil, nil, ""},
	{"progress FAILED no cause", "progress-holes", setB(pOff+prgStatus, 5), nil, nil, ""},
	{"progress flags reserved", "progress-holes", setB(pOff+prgFlags, 0x04), nil, ErrReserved, "flags"},
	{"progress status 6", "progress-holes", setB(pOff+prgStatus, 6), nil, ErrRange, "status"},
	{"progress hole count 33", "progress-holes", set16(pOff+prgHoles, 33), nil, ErrCount, "hole_count"},
	{"progress committed beyond vector", "progress-holes", set32(pOff+prgCommitted, 1025), nil, ErrRange, "committed"},
	{"hole below committed", "progress-holes", set32(ProgressHoleOff, 99), nil, ErrRange, "hole"},
	{"hole empty", "progress-holes", set32(ProgressHoleOff+4, 200), nil, ErrRange, "hole"},
	{"holes overlap", "progress-holes", set32(ProgressHoleOff+8, 299), nil, ErrRange, "hole"},
	{"holes touching accepted", "progress-holes", set32(ProgressHoleOff+8, 300), nil, nil, ""},
	{"hole beyond vector", "progress-holes", set32(ProgressHoleOff+12, 1025), nil, ErrRange, "hole"},
}

// ruleExamples are the base frames of the rules table.
func ruleExamples(t testing.TB) map[string]Example {
	ex := map[string]Example{}
	for _, e := range examples(t) {
		ex[e.Marker] = e
	}
	// An INT8 group of 3 values carries one padding byte.
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp, SrcEP: 1, DstEP: 2, PacketID: 1, Stream: 1}
	ex["data-int8"] = Example{Frame: mustData(&h, nil, Group{Format: FormatINT8, Count: 3, Values: []byte{1, 2, 3}}), Limits: exLim}
	return ex
}

// ruleFrame applies r to its base frame (a fresh copy) and returns the frame
// and the limits to decode it under.
func ruleFrame(t testing.TB, ex map[string]Example, r rule) ([]byte, Limits) {
	e, ok := ex[r.base]
	if !ok {
		t.Fatalf("%s: no base %q", r.name, r.base)
	}
	b := append([]byte(nil), e.Frame...)
	if r.mut != nil {
		b = r.mut(b)
	}
	l := e.Limits
	if r.lim != nil {
		l = *r.lim
	}
	return b, l
}

func TestValidationRules(t *testing.T) {
	ex := ruleExamples(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			b, l := ruleFrame(t, ex, r)
			err := decodeAny(b, l)
			if r.err == nil {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, r.err) || !errors.As(err, &fe) {
				t.Fatalf("got %v, want %v", err, r.err)
			}
			if fe.Field != r.field {
				t.Fatalf("field %q, want %q (%v)", fe.Field, r.field, err)
			}
			if fe.Reason() == "invalid" || fe.Reason() != Reason(r.err) {
				t.Fatalf("reason %q", fe.Reason())
			}
			if fe.Offset < 0 || fe.Offset > len(b) {
				t.Fatalf("offset %d outside frame of %d", fe.Offset, len(b))
			}
		})
	}
}

// Sets that need more bytes than a frame example: checked through ValidateSet.
func TestValidateSetDirect(t *testing.T) {
	big := func(setID, words uint16) []byte {
		b := AppendFlatSet(nil, 0, words, 0)
		put16(b, 0, setID)
		return b
	}
	cases := []struct {
		name  string
		enc   uint8
		set   []byte
		cap   int
		err   error
		field string
	}{
		{"flat highest id fits", EncFlat, big(0xFFFF, 1024), 0, nil, ""},
		{"flat id overflow", EncFlat, big(0xFFFF, 1025), 0, ErrRange, "set.set_id"},
		{"short set", EncList, []byte{0, 1}, 0, ErrTruncated, "set"},
		{"unknown encoding", 9, []byte{0, 1, 0, 0}, 0, ErrFormat, "set.encoding"},
		{"list at cap", EncList, AppendListSet(nil, 1, 2, 3), 3, nil, ""},
		{"list over cap", EncList, AppendListSet(nil, 1, 2, 3, 4), 3, ErrCount, "set.list_count"},
		{"hier 65 blocks upper pad", EncHier, AppendHierSet(nil, 64, 65, 64*64), 0, nil, ""},
		{"hier truncated upper", EncHier, []byte{0, 64, 0, 65, 0, 0, 0, 0}, 0, ErrLength, "set.length"},
		{"hier lower length", EncHier, append(AppendHierSet(nil, 64, 1, 1), 0, 0, 0, 0), 0, ErrLength, "set.length"},
	}
	for _, c := range cases {
		err := ValidateSet(c.enc, c.set, c.cap)
		if c.err == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.Is(err, c.err) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: got %v, want %v %s", c.name, err, c.err, c.field)
		}
	}
}

func TestStageDetail(t *testing.T) {
	b := exampleFrame(t, "control-stage")
	b[stageCtx+ctxMTU+1]++ // MTU 1501
	var c Control
	err := c.Decode(b, Limits{})
	if d, ok := StageDetail(err); !ok || d != ctxMTU {
		t.Fatalf("detail %d %v (%v)", d, ok, err)
	}
	b = exampleFrame(t, "control-stage")
	b[stageCtx+ctxBindings] = 3
	if _, ok := StageDetail(c.Decode(b, Limits{})); ok {
		t.Fatal("a length error is framing, not an INVALID detail")
	}
}

func TestReasonsClosed(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons {
		seen[r] = true
	}
	for _, e := range []error{ErrTruncated, ErrReserved, ErrVersion, ErrRange, ErrLength, ErrCount, ErrFormat, ErrClass, ErrMTU, ErrAuth} {
		if r := Reason(fieldErr(0, "x", 0, e)); !seen[r] || r == "invalid" {
			t.Errorf("%v: reason %q", e, r)
		}
	}
}

// Each class decoder rejects the other classes and a foreign major version
// on its own (the dispatcher normally prevents the first). Every error is
// checked before the next Decode on the same value, which reuses it.
func TestDecoderClassAndVersion(t *testing.T) {
	ctl, dat, prg := exampleFrame(t, "control-commit"), exampleFrame(t, "data-fp32"), exampleFrame(t, "progress-holes")
	var c Control
	var d Data
	var g Progress
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", name, err, want)
		}
	}
	check("control decodes data", c.Decode(dat, Limits{}), ErrClass)
	check("data decodes control", d.Decode(exampleFrame(t, "control-stage"), Limits{}), ErrClass)
	check("data decodes progress", d.Decode(prg, Limits{}), ErrClass)
	check("progress decodes data", g.Decode(dat, Limits{}), ErrClass)
	check("control short ethernet", c.Decode(ctl[:10], Limits{}), ErrTruncated)
	check("data short ethernet", d.Decode(dat[:10], Limits{}), ErrTruncated)
	check("progress short ethernet", g.Decode(prg[:10], Limits{}), ErrTruncated)
	check("data one byte of control word", d.Decode(dat[:15], Limits{}), ErrTruncated)
	for _, f := range [][]byte{ctl, dat, prg} {
		f[CWOff] = 0x20
	}
	check("control version", c.Decode(ctl, Limits{}), ErrVersion)
	check("progress version", g.Decode(prg, Limits{}), ErrVersion)
}

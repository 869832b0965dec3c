// This file owns DATA and RESULT (section 6): the validating decoder, the
// zero-allocation NumberGroup iterator and the in-place frame builder.

package parser

import (
	"encoding/binary"
	"math/bits"
)

// Limits are the per-operation bounds a receiver knows from STAGE. A zero
// field means "unknown, do not check"; the engine passes the operation's
// values, so every rule of docs/protocol.md is applied on the hot path.
type Limits struct {
	VectorLen    uint32 // First+Count <= VectorLen; LAST iff First+Count == VectorLen
	KulischBytes int    // every KULISCH group must use exactly this W/8; KULISCH_SCALED Shift + 8B <= 8 x this; KULISCH_F64 values below 2^(8 x this - 150)
	MTU          int    // bytes after the Ethernet header, padding included
	ListCap      int    // maximum Count of a LIST endpoint set
}

// Data is a decoded DATA or RESULT frame. Body and Ext's slices alias the frame.
type Data struct {
	Class    Class // ClassData or ClassResult
	Op       OpKey
	SrcEP    uint16
	DstEP    uint16
	PacketID uint32
	First    uint32
	Count    uint16
	Groups   uint8
	Flags    uint8
	BodyLen  uint16
	Stream   uint16
	Ext      Ext    // valid when Flags&FlagExt != 0
	Body     []byte // the NumberGroups, exactly BodyLen bytes

	err FieldError // what Decode returns on rejection (see Decode)
}

// Group is one NumberGroup. Values aliases the frame: Count values of
// Format.Width(KBytes) bytes each, little-endian, without the Scale Word
// and the padding.
type Group struct {
	Format Format
	KBytes uint16 // Kulisch integer bytes: W/8 (KULISCH), B (KULISCH_SCALED); 0 for other formats
	Count  uint16
	First  uint32 // global position of the first value
	Values []byte
	Shift  uint16 // KULISCH_SCALED: value = integer x 2^Shift units; 0 for other formats
}

// GroupIter is the state of Data.NextGroup; the zero value starts at the
// first group.
type GroupIter struct {
	off int
	pos uint32
	n   int
}

// Decode validates a whole DATA or RESULT Ethernet frame against every rule
// of section 6 and lim, and fills d. On error d is zeroed and the error is a
// *FieldError held inside d, so rejecting a frame allocates nothing: it stays
// valid until the next Decode on d (copy it to keep it longer).
func (d *Data) Decode(frame []byte, lim Limits) error {
	if len(frame) < EthLen {
		*d = Data{}
		return d.err.set(0, "ethernet", 0, ErrTruncated)
	}
	return d.decode(frame[EthLen:], &lim)
}

// DecodePRISM is Decode for the bytes after the Ethernet header.
func (d *Data) DecodePRISM(prism []byte, lim Limits) error { return d.decode(prism, &lim) }

func (d *Data) decode(p []byte, lim *Limits) error {
	*d = Data{}
	err := d.decode1(p, lim)
	if err == nil {
		return nil
	}
	if err != error(&d.err) { // not ours (there is none today): pass it on
		*d = Data{}
		return err
	}
	fe := d.err // the reset below must not wipe the error it returns
	*d = Data{err: fe}
	return &d.err
}

func (d *Data) decode1(p []byte, lim *Limits) error {
	e := &d.err
	if lim.MTU > 0 && len(p) > lim.MTU {
		return e.set(0, "frame", EthLen, ErrMTU)
	}
	if len(p) < CWLen+DataHdrLen {
		if len(p) >= CWLen {
			return e.set(Class(p[1]), "header", HdrOff, ErrTruncated)
		}
		return e.set(0, "header", CWOff, ErrTruncated)
	}
	if p[0]>>4 != VersionMajor {
		return e.set(Class(p[1]), "version", CWOff, ErrVersion)
	}
	c := Class(p[1])
	if c != ClassData && c != ClassResult {
		return e.set(c, "class", CWOff+1, ErrClass)
	}
	h := DataHeader(p[CWLen : CWLen+DataHdrLen])
	if h.Reserved() != 0 {
		return e.set(c, "reserved", HdrOff+dataReserved, ErrReserved)
	}
	flags := h.Flags()
	if flags&flagsReserved != 0 {
		return e.set(c, "flags", HdrOff+dataFlags, ErrReserved)
	}
	off := CWLen + DataHdrLen
	if flags&FlagExt != 0 {
		n, err := d.Ext.decode(e, p[off:], c, EthLen+off, lim)
		if err != nil {
			return err
		}
		off += n
	}
	bodyLen := int(h.BodyLen())
	if off+bodyLen > len(p) {
		return e.set(c, "body_length", HdrOff+dataBodyLen, ErrTruncated)
	}
	body := p[off : off+bodyLen : off+bodyLen]
	bodyBase := EthLen + off
	cnt, groups := int(h.Count()), int(h.Groups())
	if flags&FlagInexact != 0 {
		// ACCUMULATION_INEXACT is terminal and carries no values.
		switch {
		case flags&FlagLast == 0:
			return e.set(c, "flags.last", HdrOff+dataFlags, ErrRange)
		case cnt != 0:
			return e.set(c, "element_count", HdrOff+dataCount, ErrCount)
		case groups != 0:
			return e.set(c, "group_count", HdrOff+dataGroups, ErrCount)
		case bodyLen != 0:
			return e.set(c, "body_length", HdrOff+dataBodyLen, ErrLength)
		}
	}
	if groups == 0 {
		switch {
		case cnt != 0:
			return e.set(c, "element_count", HdrOff+dataCount, ErrCount)
		case bodyLen != 0:
			return e.set(c, "body_length", HdrOff+dataBodyLen, ErrLength)
		case flags&(FlagInexact|FlagExt) == 0:
			return e.set(c, "group_count", HdrOff+dataGroups, ErrCount)
		}
	}
	o, sum := 0, 0
	for g := 0; g < groups; g++ {
		if o+GroupDescLen > bodyLen {
			return e.set(c, "body_length", bodyBase+o, ErrLength)
		}
		gd := GroupDescriptor(body[o : o+GroupDescLen])
		n := int(gd.Count())
		if n == 0 {
			return e.set(c, "group.count", bodyBase+o, ErrCount)
		}
		f, kb := gd.Format(), int(gd.KulischBytes())
		var w, sl int
		switch f {
		case FormatINT8, FormatFP16, FormatBF16, FormatFP32:
			if kb != 0 {
				return e.set(c, "group.format", bodyBase+o+2, ErrFormat)
			}
			w = f.Width(0)
		case FormatKulisch:
			if kb < MinKulischBytes || kb > MaxKulischBytes || (lim.KulischBytes != 0 && kb != lim.KulischBytes) {
				return e.set(c, "group.kulisch_bytes", bodyBase+o+2, ErrFormat)
			}
			w = 1 + kb
		case FormatKulischScaled:
			// Only a switch's partial to its parent: never in RESULT (so a
			// rank never meets one) nor in bitmap (EXT) frames.
			if c != ClassData || flags&FlagExt != 0 {
				return e.set(c, "group.format", bodyBase+o+2, ErrFormat)
			}
			if kb < MinScaledBytes || kb > MaxScaledBytes {
				return e.set(c, "group.scaled_bytes", bodyBase+o+2, ErrFormat)
			}
			w, sl = 1+kb, ScaleWordLen
		case FormatKulischF64:
			// Same place as KULISCH_SCALED; its Format Word carries no
			// byte count (binary64 has a fixed width).
			if c != ClassData || flags&FlagExt != 0 || kb != 0 {
				return e.set(c, "group.format", bodyBase+o+2, ErrFormat)
			}
			w = f.Width(0)
		default:
			return e.set(c, "group.format", bodyBase+o+2, ErrFormat)
		}
		vb := n * w
		vo := o + GroupDescLen + sl // first value
		end := o + GroupDescLen + pad4(sl+vb)
		if end > bodyLen {
			return e.set(c, "body_length", bodyBase+o, ErrLength)
		}
		vals := body[vo : vo+vb]
		for i := vo + vb; i < end; i++ {
			if body[i] != 0 {
				return e.set(c, "group.padding", bodyBase+i, ErrReserved)
			}
		}
		if sl != 0 {
			sw := o + GroupDescLen
			if body[sw+2] != 0 || body[sw+3] != 0 {
				return e.set(c, "group.scale_reserved", bodyBase+sw+2, ErrReserved)
			}
			// Every value must lie in the operation's signed W-bit range, so
			// the receiver's accumulator can never wrap: |integer| <
			// 2^(8B-1) and Shift + 8B <= W bound it by 2^(W-1).
			maxW := 8 * MaxKulischBytes
			if lim.KulischBytes != 0 {
				maxW = 8 * lim.KulischBytes
			}
			if int(be.Uint16(body[sw:]))+8*kb > maxW {
				return e.set(c, "group.scale_shift", bodyBase+sw, ErrRange)
			}
		}
		if f == FormatKulischF64 {
			if i, ok := f64Valid(vals, maxF64Exp(lim)); !ok {
				return e.set(c, "group.f64_value", bodyBase+vo+i, ErrRange)
			}
		} else if f == FormatKulisch || f == FormatKulischScaled {
			i := 0
			if kb <= 8 && f == FormatKulischScaled {
				// Short integers (every gradient-like partial): one
				// 8-byte load per value, masked to its B bytes, while
				// the load stays inside the values.
				sh := 64 - 8*uint(kb)
				for ; i+9 <= vb; i += w {
					st := vals[i]
					nz := binary.LittleEndian.Uint64(vals[i+1:])<<sh != 0
					if st > KulischNaN || nz != (st == KulischFinite) {
						break // the loop below names the fault
					}
				}
			}
			for ; i < vb; i += w {
				st := vals[i]
				if st > KulischNaN {
					return e.set(c, "group.kulisch_state", bodyBase+vo+i, ErrRange)
				}
				// FINITE carries a nonzero integer; every special state a zero one.
				if allZero(vals[i+1:i+w]) == (st == KulischFinite) {
					return e.set(c, "group.kulisch_value", bodyBase+vo+i, ErrRange)
				}
			}
		}
		sum += n
		o = end
	}
	if o != bodyLen {
		return e.set(c, "body_length", HdrOff+dataBodyLen, ErrLength)
	}
	if sum != cnt {
		return e.set(c, "element_count", HdrOff+dataCount, ErrCount)
	}
	first := h.First()
	if cnt > 0 {
		end := uint64(first) + uint64(cnt)
		if end > 0xFFFFFFFF || (lim.VectorLen != 0 && end > uint64(lim.VectorLen)) {
			return e.set(c, "first_element", HdrOff+dataFirst, ErrRange)
		}
		if lim.VectorLen != 0 && (end == uint64(lim.VectorLen)) != (flags&FlagLast != 0) {
			return e.set(c, "flags.last", HdrOff+dataFlags, ErrRange)
		}
	}
	d.Class = c
	d.Op = h.Op()
	d.SrcEP, d.DstEP = h.SrcEP(), h.DstEP()
	d.PacketID, d.First = h.PacketID(), first
	d.Count, d.Groups, d.Flags = uint16(cnt), uint8(groups), flags
	d.BodyLen, d.Stream = uint16(bodyLen), h.Stream()
	d.Body = body
	return nil
}

// Binary64 fields of a KULISCH_F64 value (docs/protocol.md section 6).
const (
	f64FracBits = 52
	f64ExpMask  = 0x7FF
	f64NaN      = 0x7FF8000000000000 // the only NaN a KULISCH_F64 value may be
	// f64MinExpTZ is the least E + t of a multiple of 2^-149: the value's
	// lowest set bit, E - 1075 + t, must be at least -149.
	f64MinExpTZ = 1075 - 149
)

// maxF64Exp is the largest biased exponent E a KULISCH_F64 value of the
// operation may have: E - 1023 <= W - 151 keeps its magnitude below
// 2^(W-150), i.e. inside the signed W-bit Kulisch range, so the receiver's
// accumulator cannot wrap. Where W is unknown every finite binary64 fits
// (the largest W is 4096), so only the exponent field's range applies.
func maxF64Exp(lim *Limits) int {
	if lim.KulischBytes == 0 {
		return f64ExpMask - 1
	}
	return 8*lim.KulischBytes - 151 + 1023
}

// f64Valid checks the KULISCH_F64 values in vals (8 bytes each,
// little-endian) and returns the offset of the first invalid one. Every root
// switch runs it over every partial it receives, so it is one load and a few
// integer operations per value, branching only on the exponent class.
func f64Valid(vals []byte, maxExp int) (int, bool) {
	for i := 0; i+8 <= len(vals); i += 8 {
		x := binary.LittleEndian.Uint64(vals[i:])
		ex := int(x>>f64FracBits) & f64ExpMask
		if uint(ex-1) < f64ExpMask-1 { // normal, E in 1..2046
			// The trailing zeros of 2^52 + F: bit 52 stands in for the
			// implicit leading one, so the count never exceeds 52.
			if ex+bits.TrailingZeros64(x|1<<f64FracBits) < f64MinExpTZ || ex > maxExp {
				return i, false
			}
			continue
		}
		// E = 0 or 2047: zeros and infinities have F = 0; of the rest only
		// the canonical NaN is an encoding (a subnormal is below 2^-149).
		if x&(1<<f64FracBits-1) != 0 && x != f64NaN {
			return i, false
		}
	}
	return 0, true
}

// NextGroup returns the next NumberGroup of a decoded frame.
func (d *Data) NextGroup(it *GroupIter) (Group, bool) {
	if it.n >= int(d.Groups) || it.off+GroupDescLen > len(d.Body) {
		return Group{}, false
	}
	if it.n == 0 {
		it.pos = d.First
	}
	gd := GroupDescriptor(d.Body[it.off:])
	g := Group{Format: gd.Format(), KBytes: gd.KulischBytes(), Count: gd.Count(), First: it.pos}
	vb := int(g.Count) * g.Format.Width(int(g.KBytes))
	s := it.off + GroupDescLen
	sl := g.Format.ScaleLen()
	if sl != 0 {
		g.Shift = be.Uint16(d.Body[s:])
	}
	g.Values = d.Body[s+sl : s+sl+vb : s+sl+vb]
	it.off = s + pad4(sl+vb)
	it.pos += uint32(g.Count)
	it.n++
	return g, true
}

// Len is the number of bytes d encodes to after the Ethernet header.
func (d *Data) Len() int {
	n := CWLen + DataHdrLen + len(d.Body)
	if d.Flags&FlagExt != 0 {
		n += d.Ext.Len()
	}
	return n
}

// Encode writes d as a whole Ethernet frame into buf and returns its length.
// Body Length is len(d.Body); Count, Groups and Flags are written as they are
// (the caller keeps them consistent; DataBuilder does it for you).
func (d *Data) Encode(buf []byte, eth Eth) (int, error) {
	if len(buf) < EthLen+d.Len() {
		return 0, fieldErr(d.Class, "buffer", 0, ErrTruncated)
	}
	eth.put(buf)
	n, err := d.EncodePRISM(buf[EthLen:])
	return EthLen + n, err
}

// EncodePRISM writes d after the Ethernet header (control word first).
func (d *Data) EncodePRISM(p []byte) (int, error) {
	n := d.Len()
	if len(p) < n {
		return 0, fieldErr(d.Class, "buffer", 0, ErrTruncated)
	}
	if len(d.Body) > 0xFFFF {
		return 0, fieldErr(d.Class, "body_length", HdrOff+dataBodyLen, ErrLength)
	}
	ControlWord(p).Set(d.Class)
	h := DataHeader(p[CWLen : CWLen+DataHdrLen])
	h.SetOp(d.Op)
	h.SetSrcEP(d.SrcEP)
	h.SetDstEP(d.DstEP)
	h.SetPacketID(d.PacketID)
	h.SetFirst(d.First)
	h.SetCount(d.Count)
	h.SetGroups(d.Groups)
	h.SetFlags(d.Flags)
	h.SetBodyLen(uint16(len(d.Body)))
	h.SetStream(d.Stream)
	h.SetReserved(0)
	off := CWLen + DataHdrLen
	if d.Flags&FlagExt != 0 {
		off += d.Ext.put(p[off:])
	}
	copy(p[off:], d.Body)
	return n, nil
}

// DataFields are the header fields a sender chooses; DataBuilder computes
// Element Count, Group Count, Body Length and the EXT flag.
type DataFields struct {
	Eth      Eth
	Class    Class // ClassData or ClassResult
	Op       OpKey
	SrcEP    uint16
	DstEP    uint16
	PacketID uint32
	First    uint32
	Flags    uint8 // FlagLast, FlagInexact, FlagRetransmit; FlagExt is set from ext
	Stream   uint16
}

// DataBuilder builds one DATA or RESULT frame in place in a caller buffer:
// Reset, then Room/AddGroup as often as needed, then Finish. It never
// allocates, not even for an error (Reset and AddGroup return a *FieldError
// held in the builder, valid until the next call), and never writes past
// min(len(buf), EthLen+mtu).
type DataBuilder struct {
	buf    []byte
	limit  int
	body   int // offset of the body in buf
	off    int // end of the last group
	count  int
	groups int
	scaled bool       // KULISCH_SCALED and KULISCH_F64 groups are legal (DATA without EXT)
	err    FieldError // what Reset and AddGroup return; valid until the next call
}

// Reset starts a frame in buf. mtu 0 means "limited by len(buf) only".
func (b *DataBuilder) Reset(buf []byte, h *DataFields, ext *Ext, mtu int) error {
	*b = DataBuilder{}
	limit := len(buf)
	if mtu > 0 && EthLen+mtu < limit {
		limit = EthLen + mtu
	}
	need := DataBodyOff
	if ext != nil {
		need += ext.Len()
	}
	if need > limit {
		return b.err.set(h.Class, "buffer", 0, ErrMTU)
	}
	if h.Class != ClassData && h.Class != ClassResult {
		return b.err.set(h.Class, "class", CWOff+1, ErrClass)
	}
	h.Eth.put(buf)
	ControlWord(buf[CWOff:]).Set(h.Class)
	dh := DataHeader(buf[HdrOff:DataBodyOff])
	dh.SetOp(h.Op)
	dh.SetSrcEP(h.SrcEP)
	dh.SetDstEP(h.DstEP)
	dh.SetPacketID(h.PacketID)
	dh.SetFirst(h.First)
	flags := h.Flags &^ FlagExt
	if ext != nil {
		flags |= FlagExt
	}
	dh.SetFlags(flags)
	dh.SetStream(h.Stream)
	dh.SetReserved(0)
	dh.SetCount(0)
	dh.SetGroups(0)
	dh.SetBodyLen(0)
	off := DataBodyOff
	if ext != nil {
		off += ext.put(buf[off:])
	}
	b.buf, b.limit, b.body, b.off = buf, limit, off, off
	b.scaled = h.Class == ClassData && ext == nil
	return nil
}

// Room reports how many more values of format f (Kulisch integer bytes
// kbytes: W/8 for KULISCH, B for KULISCH_SCALED, ignored otherwise) fit in
// one more group of this frame.
func (b *DataBuilder) Room(f Format, kbytes int) int {
	w := f.Width(kbytes)
	if w == 0 || b.groups >= MaxGroups || b.buf == nil {
		return 0
	}
	sl := f.ScaleLen()
	rem := (b.limit-b.off-GroupDescLen)&^3 - sl
	if rem < w {
		return 0
	}
	n := rem / w
	if n > 0xFFFF-b.count {
		n = 0xFFFF - b.count
	}
	if b.body-b.off+0xFFFF < GroupDescLen+pad4(sl+n*w) { // Body Length is 16 bits
		n = ((0xFFFF-(b.off-b.body)-GroupDescLen)&^3 - sl) / w
	}
	if n < 0 {
		n = 0
	}
	return n
}

// AddGroup appends a NumberGroup descriptor and its zero padding and returns
// the slot for count values, which the caller fills (little-endian).
// KULISCH_SCALED groups need their Shift: use AddScaledGroup. KULISCH_F64
// groups (kbytes is ignored) are legal only in DATA without EXT, like
// KULISCH_SCALED. The builder does not look at the values: a KULISCH_F64
// value that is not a multiple of 2^-149 inside W (package kulisch encodes
// them) gets the frame dropped by the receiver.
func (b *DataBuilder) AddGroup(f Format, kbytes int, count int) ([]byte, error) {
	if f == FormatKulischScaled {
		return nil, b.err.set(0, "group.format", b.off+2, ErrFormat)
	}
	return b.addGroup(f, kbytes, 0, count)
}

// AddScaledGroup appends a KULISCH_SCALED group of count values of B = bytes
// integer bytes with Shift shift: descriptor, Scale Word and zero padding,
// and returns the slot for the values (state byte and integer each), which
// the caller fills. Only DATA frames without EXT may carry one. The builder
// checks Shift + 8B <= 4096; the operation's tighter Shift + 8B <= W is the
// caller's (package kulisch plans it).
func (b *DataBuilder) AddScaledGroup(bytes, shift, count int) ([]byte, error) {
	return b.addGroup(FormatKulischScaled, bytes, shift, count)
}

func (b *DataBuilder) addGroup(f Format, kbytes, shift, count int) ([]byte, error) {
	switch {
	case f < FormatINT8 || f > FormatKulischF64 || f == FormatAuto:
		return nil, b.err.set(0, "group.format", b.off+2, ErrFormat)
	case f == FormatKulischF64 && !b.scaled:
		return nil, b.err.set(0, "group.format", b.off+2, ErrFormat)
	case f == FormatKulisch && (kbytes < MinKulischBytes || kbytes > MaxKulischBytes):
		return nil, b.err.set(0, "group.kulisch_bytes", b.off+2, ErrFormat)
	case f == FormatKulischScaled && !b.scaled:
		return nil, b.err.set(0, "group.format", b.off+2, ErrFormat)
	case f == FormatKulischScaled && (kbytes < MinScaledBytes || kbytes > MaxScaledBytes):
		return nil, b.err.set(0, "group.scaled_bytes", b.off+2, ErrFormat)
	case f == FormatKulischScaled && (shift < 0 || shift+8*kbytes > 8*MaxKulischBytes):
		return nil, b.err.set(0, "group.scale_shift", b.off+GroupDescLen, ErrRange)
	case f < FormatKulisch || f == FormatKulischF64:
		kbytes = 0 // the Format Word's bits 11..0 are zero for these
	}
	if count < 1 {
		return nil, b.err.set(0, "group.count", b.off, ErrCount)
	}
	if count > b.Room(f, kbytes) {
		return nil, b.err.set(0, "group.count", b.off, ErrMTU)
	}
	w := f.Width(kbytes)
	gd := GroupDescriptor(b.buf[b.off : b.off+GroupDescLen])
	gd.SetCount(uint16(count))
	gd.SetFormat(f, uint16(kbytes))
	s := b.off + GroupDescLen
	if f == FormatKulischScaled {
		be.PutUint16(b.buf[s:], uint16(shift))
		be.PutUint16(b.buf[s+2:], 0)
		s += ScaleWordLen
	}
	vb := count * w
	end := b.off + GroupLen(f, kbytes, count)
	clear(b.buf[s+vb : end])
	b.off = end
	b.count += count
	b.groups++
	return b.buf[s : s+vb : s+vb], nil
}

// Len is the frame length so far.
func (b *DataBuilder) Len() int { return b.off }

// Finish writes Element Count, Group Count and Body Length and returns the
// frame (aliasing buf).
func (b *DataBuilder) Finish() []byte {
	if b.buf == nil {
		return nil
	}
	dh := DataHeader(b.buf[HdrOff:DataBodyOff])
	dh.SetCount(uint16(b.count))
	dh.SetGroups(uint8(b.groups))
	dh.SetBodyLen(uint16(b.off - b.body))
	return b.buf[:b.off]
}

// AppendData appends a whole DATA/RESULT frame made of groups (each Values
// holding exactly Count values) to dst. For tests and tools: it may allocate.
func AppendData(dst []byte, h *DataFields, ext *Ext, groups ...Group) ([]byte, error) {
	n := DataBodyOff
	if ext != nil {
		n += ext.Len()
	}
	for _, g := range groups {
		n += GroupLen(g.Format, int(g.KBytes), int(g.Count))
	}
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	var b DataBuilder // its errors are copied out, so b stays on the stack
	if b.Reset(dst[start:], h, ext, 0) != nil {
		return dst[:start], b.err.clone()
	}
	for _, g := range groups {
		slot, err := b.addGroup(g.Format, int(g.KBytes), int(g.Shift), int(g.Count))
		if err != nil {
			return dst[:start], b.err.clone()
		}
		if len(g.Values) != len(slot) {
			return dst[:start], fieldErr(h.Class, "group.values", 0, ErrLength)
		}
		copy(slot, g.Values)
	}
	f := b.Finish()
	return dst[:start+len(f)], nil
}

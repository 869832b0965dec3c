// This file owns the endpoint-set extension (section 8) and the byte layout
// of the three endpoint-set encodings: validation, enumeration of endpoint IDs
// and construction from a list of IDs. Set algebra (AND/OR/equality, BIFT
// masks) belongs to package bitmapfwd, which works on the validated bytes.

package parser

import "math/bits"

// Ext is a decoded endpoint-set extension. Set and Tag alias the frame.
type Ext struct {
	Encoding uint8  // EncFlat, EncHier, EncList
	XFlags   uint8  // XFlagInstall | XFlagPartial | XFlagAuth
	Tenant   uint32 // tenant of the job; 0 = none [choice]
	Token    uint64 // token / sequence / window identifier
	Set      []byte // encoding-specific set body, exactly as long as it declares
	Tag      []byte // TagLen bytes when XFlagAuth, else nil

	err FieldError // what Decode returns on rejection (see Decode)
}

// Len is the Extension Length the extension encodes to.
func (e *Ext) Len() int {
	n := ExtHdrLen + len(e.Set)
	if e.XFlags&XFlagAuth != 0 {
		n += TagLen
	}
	return n
}

// put writes the extension into b (len(b) >= e.Len()). A missing tag is
// written as zeros, ready for Authenticator.Sign.
func (e *Ext) put(b []byte) int {
	n := e.Len()
	h := ExtHeader(b)
	h.SetLen(uint16(n))
	h.SetEncoding(e.Encoding)
	h.SetXFlags(e.XFlags)
	h.SetTenant(e.Tenant)
	h.SetToken(e.Token)
	copy(b[ExtHdrLen:], e.Set)
	if e.XFlags&XFlagAuth != 0 {
		t := b[ExtHdrLen+len(e.Set) : n]
		if len(e.Tag) == TagLen {
			copy(t, e.Tag)
		} else {
			clear(t)
		}
	}
	return n
}

// decode validates the extension at b (b runs to the end of the frame) for a
// frame of class c; base is b's offset in the Ethernet frame. It returns the
// Extension Length. A rejection is written to dst (the enclosing decoder's
// FieldError) and returned.
func (e *Ext) decode(dst *FieldError, b []byte, c Class, base int, lim *Limits) (int, error) {
	*e = Ext{}
	if len(b) < ExtHdrLen {
		return 0, dst.set(c, "ext", base, ErrTruncated)
	}
	h := ExtHeader(b)
	n := int(h.Len())
	if n%4 != 0 || n < ExtHdrLen+4 {
		return 0, dst.set(c, "ext.length", base+extLen, ErrLength)
	}
	if n > len(b) {
		return 0, dst.set(c, "ext.length", base+extLen, ErrTruncated)
	}
	enc := h.Encoding()
	if enc < EncFlat || enc > EncList {
		return 0, dst.set(c, "ext.encoding", base+extEnc, ErrFormat)
	}
	xf := h.XFlags()
	if xf&xflagsReserved != 0 {
		return 0, dst.set(c, "ext.xflags", base+extXFlags, ErrReserved)
	}
	// INSTALL belongs to the multicast direction; PARTIAL marks an aggregate
	// (a DATA partial, or the RESULT made from it, section 8.7) and so never
	// rides on a dispatch [choice].
	if (c == ClassData && xf&XFlagInstall != 0) || xf&(XFlagInstall|XFlagPartial) == XFlagInstall|XFlagPartial {
		return 0, dst.set(c, "ext.xflags", base+extXFlags, ErrRange)
	}
	setEnd := n
	if xf&XFlagAuth != 0 {
		setEnd -= TagLen
		if setEnd < ExtHdrLen+4 {
			return 0, dst.set(c, "ext.length", base+extLen, ErrLength)
		}
		e.Tag = b[setEnd:n:n]
	}
	set := b[ExtHdrLen:setEnd:setEnd]
	if err := validateSet(dst, &extSetNames, enc, set, c, base+ExtHdrLen, lim.ListCap); err != nil {
		return 0, err
	}
	e.Encoding, e.XFlags, e.Tenant, e.Token, e.Set = enc, xf, h.Tenant(), h.Token(), set
	return n, nil
}

// ValidateSet checks one endpoint-set body of encoding enc; it must be
// exactly as long as it declares. listCap (0 = no cap) bounds a LIST. It is
// for sets outside a frame (control plane, tools): unlike a Decode, its
// error is a fresh value (one allocation per rejection, none on success).
func ValidateSet(enc uint8, set []byte, listCap int) error {
	var fe FieldError
	if validateSet(&fe, &extSetNames, enc, set, 0, 0, listCap) != nil {
		return fe.clone()
	}
	return nil
}

// setNames are the Field names of the endpoint-set checks. A set sits in an
// extension (names "set.*") or in a STAGE set record ("stage.set.*"); both
// spellings are constants, because building "stage."+name per rejection
// would allocate. TestSetNames checks the two tables agree.
type setNames struct {
	set, wordCount, length, setID, empty, blockBits, blockCount, upper,
	lowerCount, lowerEmpty, reserved, listCount, listOrder, encoding string
}

var extSetNames = setNames{
	set: "set", wordCount: "set.word_count", length: "set.length", setID: "set.set_id", empty: "set.empty",
	blockBits: "set.block_bits", blockCount: "set.block_count", upper: "set.upper", lowerCount: "set.lower_count",
	lowerEmpty: "set.lower_empty", reserved: "set.reserved", listCount: "set.list_count", listOrder: "set.list_order",
	encoding: "set.encoding",
}

var stageSetNames = setNames{
	set: "stage.set", wordCount: "stage.set.word_count", length: "stage.set.length", setID: "stage.set.set_id",
	empty: "stage.set.empty", blockBits: "stage.set.block_bits", blockCount: "stage.set.block_count",
	upper: "stage.set.upper", lowerCount: "stage.set.lower_count", lowerEmpty: "stage.set.lower_empty",
	reserved: "stage.set.reserved", listCount: "stage.set.list_count", listOrder: "stage.set.list_order",
	encoding: "stage.set.encoding",
}

func validateSet(dst *FieldError, nm *setNames, enc uint8, set []byte, c Class, base, listCap int) error {
	if len(set) < 4 {
		return dst.set(c, nm.set, base, ErrTruncated)
	}
	a, b := int(be.Uint16(set[0:])), int(be.Uint16(set[2:]))
	switch enc {
	case EncFlat:
		setID, wc := a, b
		if wc == 0 {
			return dst.set(c, nm.wordCount, base+2, ErrCount)
		}
		if len(set) != 4+8*wc {
			return dst.set(c, nm.length, base, ErrLength)
		}
		// Endpoint IDs are 32 bits: the highest one must fit.
		if uint64(setID+1)*uint64(wc)*64 > 1<<32 {
			return dst.set(c, nm.setID, base, ErrRange)
		}
		if allZero(set[4:]) {
			return dst.set(c, nm.empty, base+4, ErrCount)
		}
	case EncHier:
		bb, bc := a, b
		if bb == 0 || bb%64 != 0 {
			return dst.set(c, nm.blockBits, base, ErrRange)
		}
		if bc == 0 {
			return dst.set(c, nm.blockCount, base+2, ErrCount)
		}
		ul := (bc + 63) / 64 * 8
		if len(set) < 4+ul {
			return dst.set(c, nm.length, base, ErrLength)
		}
		upper := set[4 : 4+ul]
		// Bits for blocks >= Block Count are padding of the upper bitmap.
		if last := bc % 64; last != 0 {
			w := be.Uint64(upper[ul-8:])
			if w<<uint(last) != 0 {
				return dst.set(c, nm.upper, base+4+ul-8, ErrReserved)
			}
		}
		pop := 0
		for i := 0; i < ul; i += 8 {
			pop += bits.OnesCount64(be.Uint64(upper[i:]))
		}
		if pop == 0 {
			return dst.set(c, nm.empty, base+4, ErrCount)
		}
		lb := bb / 8
		rest := len(set) - 4 - ul
		if rest%lb != 0 {
			return dst.set(c, nm.length, base, ErrLength)
		}
		if rest/lb != pop {
			return dst.set(c, nm.lowerCount, base+4, ErrCount)
		}
		for i := 0; i < pop; i++ {
			off := 4 + ul + i*lb
			if allZero(set[off : off+lb]) {
				return dst.set(c, nm.lowerEmpty, base+off, ErrCount)
			}
		}
	case EncList:
		cnt := a
		if b != 0 {
			return dst.set(c, nm.reserved, base+2, ErrReserved)
		}
		if cnt == 0 {
			return dst.set(c, nm.listCount, base, ErrCount)
		}
		if listCap > 0 && cnt > listCap {
			return dst.set(c, nm.listCount, base, ErrCount)
		}
		if len(set) != 4+4*cnt {
			return dst.set(c, nm.length, base, ErrLength)
		}
		prev := be.Uint32(set[4:])
		for i := 1; i < cnt; i++ {
			v := be.Uint32(set[4+4*i:])
			if v <= prev {
				return dst.set(c, nm.listOrder, base+4+4*i, ErrRange)
			}
			prev = v
		}
	default:
		return dst.set(c, nm.encoding, base, ErrFormat)
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if be.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// SetIter walks the endpoint IDs of a validated set. The zero value starts at
// the beginning.
type SetIter struct {
	pos   int // FLAT/HIER: next bit; LIST: next index
	blk   int // HIER: next upper bit to look at
	lower int // HIER: index of the current lower bitmap
	cur   int // HIER: block number of the current lower bitmap, -1 before the first
	init  bool
}

// NextEndpoint returns the next endpoint ID of a set (validated by
// ValidateSet or a Decode), in ascending order, without allocating.
func NextEndpoint(enc uint8, set []byte, it *SetIter) (uint32, bool) {
	switch enc {
	case EncFlat:
		wc := int(be.Uint16(set[2:]))
		bm := set[4:]
		b := nextBit(bm, it.pos)
		if b < 0 {
			it.pos = len(bm) * 8
			return 0, false
		}
		it.pos = b + 1
		return uint32(int(be.Uint16(set[0:]))*wc*64 + b), true
	case EncHier:
		bb, bc := int(be.Uint16(set[0:])), int(be.Uint16(set[2:]))
		ul := (bc + 63) / 64 * 8
		upper := set[4 : 4+ul]
		lb := bb / 8
		if !it.init {
			it.init, it.cur, it.lower = true, -1, -1
		}
		for {
			if it.cur >= 0 {
				lo := set[4+ul+it.lower*lb : 4+ul+(it.lower+1)*lb]
				if b := nextBit(lo, it.pos); b >= 0 {
					it.pos = b + 1
					return uint32(it.cur*bb + b), true
				}
			}
			blk := nextBit(upper, it.blk)
			if blk < 0 || blk >= bc {
				it.blk = ul * 8
				return 0, false
			}
			it.blk = blk + 1
			it.cur, it.lower, it.pos = blk, it.lower+1, 0
		}
	case EncList:
		cnt := int(be.Uint16(set[0:]))
		if it.pos >= cnt {
			return 0, false
		}
		v := be.Uint32(set[4+4*it.pos:])
		it.pos++
		return v, true
	}
	return 0, false
}

// NextEndpoint walks the extension's set.
func (e *Ext) NextEndpoint(it *SetIter) (uint32, bool) { return NextEndpoint(e.Encoding, e.Set, it) }

// nextBit returns the first set bit >= from, numbering bits most significant
// first within each byte (bit b is bit 7-b%8 of byte b/8), or -1.
func nextBit(bm []byte, from int) int {
	i := from / 8
	if i >= len(bm) {
		return -1
	}
	if x := bm[i] & (0xFF >> uint(from%8)); x != 0 {
		return i*8 + bits.LeadingZeros8(x)
	}
	for i++; i < len(bm); i++ {
		if bm[i] != 0 {
			return i*8 + bits.LeadingZeros8(bm[i])
		}
	}
	return -1
}

// AppendFlatSet appends a FLAT set body with the given Set ID and Word Count
// holding eps (each must lie in [setID*words*64, (setID+1)*words*64)). It is
// for tests, tools and the control plane, not the hot path.
func AppendFlatSet(dst []byte, setID, words uint16, eps ...uint32) []byte {
	dst = be.AppendUint16(dst, setID)
	dst = be.AppendUint16(dst, words)
	start := len(dst)
	dst = append(dst, make([]byte, int(words)*8)...)
	base := uint32(setID) * uint32(words) * 64
	for _, ep := range eps {
		b := ep - base
		dst[start+int(b/8)] |= 0x80 >> (b % 8)
	}
	return dst
}

// AppendHierSet appends a HIER set body holding eps (ascending order not
// required; duplicates are harmless).
func AppendHierSet(dst []byte, blockBits, blockCount uint16, eps ...uint32) []byte {
	dst = be.AppendUint16(dst, blockBits)
	dst = be.AppendUint16(dst, blockCount)
	ul := (int(blockCount) + 63) / 64 * 8
	upper := make([]byte, ul)
	for _, ep := range eps {
		blk := ep / uint32(blockBits)
		upper[blk/8] |= 0x80 >> (blk % 8)
	}
	dst = append(dst, upper...)
	lb := int(blockBits) / 8
	for blk := 0; blk < int(blockCount); blk++ {
		if upper[blk/8]&(0x80>>(blk%8)) == 0 {
			continue
		}
		lo := make([]byte, lb)
		for _, ep := range eps {
			if int(ep)/int(blockBits) == blk {
				b := int(ep) % int(blockBits)
				lo[b/8] |= 0x80 >> (b % 8)
			}
		}
		dst = append(dst, lo...)
	}
	return dst
}

// AppendListSet appends a LIST set body; eps must be strictly ascending.
func AppendListSet(dst []byte, eps ...uint32) []byte {
	dst = be.AppendUint16(dst, uint16(len(eps)))
	dst = be.AppendUint16(dst, 0)
	for _, ep := range eps {
		dst = be.AppendUint32(dst, ep)
	}
	return dst
}

// Decode validates an extension that starts at b[0] (b runs to the end of the
// frame) for a frame of class c, as Data.Decode does at rule D7, and returns
// its Extension Length. Error offsets assume the extension sits at
// DataBodyOff. Set and Tag alias b. On error e is zeroed and the error is a
// *FieldError held inside e, valid until the next Decode on e.
func (e *Ext) Decode(b []byte, c Class, lim Limits) (int, error) {
	n, err := e.decode(&e.err, b, c, DataBodyOff, &lim)
	if err == nil {
		return n, nil
	}
	if err != error(&e.err) { // not ours (there is none today): pass it on
		*e = Ext{}
		return 0, err
	}
	fe := e.err // the reset below must not wipe the error it returns
	*e = Ext{err: fe}
	return 0, &e.err
}

// Encode writes the extension into b and returns its length. A nil or short
// Tag with XFlagAuth is written as zeros (Authenticator.Sign fills it).
func (e *Ext) Encode(b []byte) (int, error) {
	if len(b) < e.Len() || e.Len() > 0xFFFF {
		return 0, fieldErr(0, "buffer", 0, ErrTruncated)
	}
	return e.put(b), nil
}

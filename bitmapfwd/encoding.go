// This file owns the endpoint-set BODY encodings of docs/protocol.md
// section 8 (FLAT, HIER, LIST): decoding into a Set with full validation and
// encoding a Set. The bytes around the body (extension header, auth tag) are
// the parser's.

package bitmapfwd

import (
	"encoding/binary"
	"math/bits"
	"strconv"
)

// Encoding is the endpoint-set encoding code carried in the extension header.
type Encoding uint8

// Encoding codes (docs/protocol.md section 8). Zero is invalid.
const (
	Flat Encoding = 1
	Hier Encoding = 2
	List Encoding = 3
)

func (e Encoding) String() string {
	switch e {
	case Flat:
		return "FLAT"
	case Hier:
		return "HIER"
	case List:
		return "LIST"
	}
	return "Encoding(" + strconv.Itoa(int(e)) + ")"
}

// Body layouts. All header integers big-endian.
//
//	FLAT:  0 Set ID (2) | 2 Word Count (2) | 4 Word Count*8 bytes bitmap
//	HIER:  0 Block Bits (2) | 2 Block Count (2) | 4 upper bitmap ceil(BC/64)*8
//	       | one lower bitmap of Block Bits/8 bytes per set upper bit, ascending
//	LIST:  0 Count (2) | 2 reserved (2) | 4 Count * Endpoint ID (4), strictly ascending
const (
	bodyHeaderLen = 4
	listIDLen     = 4

	// MaxWordCount and MaxBlockCount are the 16-bit field limits.
	MaxWordCount  = 0xFFFF
	MaxBlockCount = 0xFFFF
	// MaxBlockBits is the largest multiple of 64 a 16-bit field holds.
	MaxBlockBits = 0xFFFF &^ 63
	// MaxListCount is the 16-bit Count limit.
	MaxListCount = 0xFFFF
)

// Params are a job's negotiated encoding parameters (fixed at setup, per
// bitmap-framework section 6). Choose produces them.
type Params struct {
	Encoding Encoding
	// WordCount (FLAT): bitmap words per Set ID, i.e. BSL/64. Decode rejects
	// a body with another Word Count when non-zero.
	WordCount int
	// SetID (FLAT, Append only): the window Append encodes.
	SetID int
	// BlockBits (HIER): endpoints per block, a multiple of 64. Decode rejects
	// a body with another Block Bits when non-zero.
	BlockBits int
	// ListCap (LIST): the job's cap on endpoints per body (K); 0 means the
	// field limit, MaxListCount.
	ListCap int
}

// putWords appends words big-endian: with MSB-first words that is the wire.
func putWords(dst []byte, w []uint64) []byte {
	for _, x := range w {
		dst = binary.BigEndian.AppendUint64(dst, x)
	}
	return dst
}

func putZeros(dst []byte, n int) []byte {
	for range n {
		dst = append(dst, 0)
	}
	return dst
}

// FlatLen is the FLAT body length for wordCount words.
func FlatLen(wordCount int) int { return bodyHeaderLen + 8*wordCount }

// checkFlatParams validates Word Count and Set ID for encoding.
func checkFlatParams(setID, wordCount int) error {
	if wordCount < 1 || wordCount > MaxWordCount {
		return paramErr(Flat, "Word Count", wordCount, ErrParam)
	}
	if setID < 0 || setID > 0xFFFF {
		return paramErr(Flat, "Set ID", setID, ErrParam)
	}
	return nil
}

// FlatSetCount is the number of Set IDs needed to cover a domain of n
// endpoints with wordCount-word bitmaps (BIER: one copy per set).
func FlatSetCount(n, wordCount int) int {
	bsl := 64 * wordCount
	return (n + bsl - 1) / bsl
}

// NextFlatSet returns the smallest Set ID >= from whose window holds a member
// of s, or -1. Splitting a large job's set into per-set-ID bodies:
//
//	for id := NextFlatSet(s, wc, 0); id >= 0; id = NextFlatSet(s, wc, id+1) {
//		body, _ = AppendFlatWindow(body[:0], s, id, wc)
//	}
func NextFlatSet(s *Set, wordCount, from int) int {
	if wordCount < 1 {
		return -1
	}
	from = max(from, 0)
	if from > 0xFFFF {
		return -1
	}
	e := s.Next(from * 64 * wordCount)
	if e < 0 || e/(64*wordCount) > 0xFFFF {
		return -1
	}
	return e / (64 * wordCount)
}

// AppendFlat appends the FLAT body of s for Set ID setID with wordCount
// words (BSL = 64*wordCount). It fails with ErrTooLarge rather than drop a
// member outside the window [setID*BSL, (setID+1)*BSL); use
// AppendFlatWindow to split a large set on purpose.
func AppendFlat(dst []byte, s *Set, setID, wordCount int) ([]byte, error) {
	if err := checkFlatParams(setID, wordCount); err != nil {
		return dst, err
	}
	lo := setID * wordCount
	if s.anyInWords(0, lo) || s.anyInWords(lo+wordCount, len(s.w)) {
		return dst, paramErr(Flat, "Set ID (members outside its window)", setID, ErrTooLarge)
	}
	return appendFlatWindow(dst, s, setID, wordCount), nil
}

// AppendFlatWindow appends the FLAT body for the members of s inside Set ID
// setID's window only; members elsewhere are not encoded.
func AppendFlatWindow(dst []byte, s *Set, setID, wordCount int) ([]byte, error) {
	if err := checkFlatParams(setID, wordCount); err != nil {
		return dst, err
	}
	return appendFlatWindow(dst, s, setID, wordCount), nil
}

func appendFlatWindow(dst []byte, s *Set, setID, wordCount int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(setID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(wordCount))
	lo := setID * wordCount
	hi := lo + wordCount
	if lo < len(s.w) {
		have := min(hi, len(s.w))
		dst = putWords(dst, s.w[lo:have])
		lo = have
	}
	return putZeros(dst, 8*(hi-lo))
}

// ParseFlatHeader returns a FLAT body's Set ID and Word Count after checking
// that the body length matches them.
func ParseFlatHeader(body []byte) (setID, wordCount int, err error) {
	if len(body) < bodyHeaderLen {
		return 0, 0, decodeErr(Flat, "header", 0, uint64(len(body)), ErrShort)
	}
	setID = int(binary.BigEndian.Uint16(body[0:]))
	wordCount = int(binary.BigEndian.Uint16(body[2:]))
	if wordCount == 0 {
		return 0, 0, decodeErr(Flat, "Word Count", 2, 0, ErrFieldValue)
	}
	if want := FlatLen(wordCount); len(body) != want {
		e := ErrShort
		if len(body) > want {
			e = ErrLength
		}
		return 0, 0, decodeErr(Flat, "bitmap", bodyHeaderLen, uint64(len(body)), e)
	}
	return setID, wordCount, nil
}

// DecodeFlat replaces the contents of into with the set a FLAT body encodes.
// Endpoint = Set ID * (Word Count*64) + b. On error into is left empty.
func DecodeFlat(body []byte, into *Set) error {
	err := decodeFlat(body, into, 0)
	if err != nil {
		into.Clear()
	}
	return err
}

func decodeFlat(body []byte, into *Set, wantWC int) error {
	setID, wc, err := ParseFlatHeader(body)
	if err != nil {
		return err
	}
	if wantWC != 0 && wc != wantWC {
		return decodeErr(Flat, "Word Count", 2, uint64(wc), ErrParamMismatch)
	}
	into.Clear()
	base := setID * wc
	for j := range wc {
		x := binary.BigEndian.Uint64(body[bodyHeaderLen+8*j:])
		if x == 0 {
			continue
		}
		i := base + j
		if i >= len(into.w) || (i == len(into.w)-1 && x&^into.tailMask() != 0) {
			b := j*64 + bits.LeadingZeros64(x)
			if i == len(into.w)-1 {
				b = j*64 + bits.LeadingZeros64(x&^into.tailMask())
			}
			return decodeErr(Flat, "bitmap", bodyHeaderLen+8*j, uint64(base*64+b), ErrOutOfDomain)
		}
		into.w[i] = x
	}
	return nil
}

// hierShape computes the HIER Block Count for a set of capacity n.
func hierShape(n, blockBits int) (blockCount int, err error) {
	if blockBits < 64 || blockBits > MaxBlockBits || blockBits%64 != 0 {
		return 0, paramErr(Hier, "Block Bits", blockBits, ErrParam)
	}
	blockCount = (n + blockBits - 1) / blockBits
	if blockCount > MaxBlockCount {
		return 0, paramErr(Hier, "Block Count", blockCount, ErrTooLarge)
	}
	return blockCount, nil
}

// HierLen is the HIER body length of s with blocks of blockBits endpoints.
func HierLen(s *Set, blockBits int) (int, error) {
	bc, err := hierShape(s.n, blockBits)
	if err != nil {
		return 0, err
	}
	wpb := blockBits / 64
	n := bodyHeaderLen + (bc+63)/64*8
	for k := range bc {
		if s.anyInWords(k*wpb, (k+1)*wpb) {
			n += blockBits / 8
		}
	}
	return n, nil
}

// AppendHier appends the HIER body of s: blocks of blockBits endpoints
// (a multiple of 64), Block Count = ceil(Cap/blockBits), one lower bitmap per
// block holding a member. The encoding is lossless for every set.
func AppendHier(dst []byte, s *Set, blockBits int) ([]byte, error) {
	bc, err := hierShape(s.n, blockBits)
	if err != nil {
		return dst, err
	}
	wpb := blockBits / 64
	dst = binary.BigEndian.AppendUint16(dst, uint16(blockBits))
	dst = binary.BigEndian.AppendUint16(dst, uint16(bc))
	// Upper bitmap, one word per 64 blocks, MSB first like every bitmap.
	for u := 0; u < bc; u += 64 {
		var up uint64
		for k := u; k < min(u+64, bc); k++ {
			if s.anyInWords(k*wpb, (k+1)*wpb) {
				up |= mask(k)
			}
		}
		dst = binary.BigEndian.AppendUint64(dst, up)
	}
	for k := range bc {
		lo, hi := k*wpb, (k+1)*wpb
		if !s.anyInWords(lo, hi) {
			continue
		}
		have := min(hi, len(s.w))
		dst = putWords(dst, s.w[lo:have])
		dst = putZeros(dst, 8*(hi-have))
	}
	return dst, nil
}

// ParseHierHeader returns a HIER body's Block Bits and Block Count after
// checking the fields and that the body is long enough for its upper bitmap.
func ParseHierHeader(body []byte) (blockBits, blockCount int, err error) {
	if len(body) < bodyHeaderLen {
		return 0, 0, decodeErr(Hier, "header", 0, uint64(len(body)), ErrShort)
	}
	blockBits = int(binary.BigEndian.Uint16(body[0:]))
	blockCount = int(binary.BigEndian.Uint16(body[2:]))
	if blockBits == 0 || blockBits%64 != 0 {
		return 0, 0, decodeErr(Hier, "Block Bits", 0, uint64(blockBits), ErrFieldValue)
	}
	if blockCount == 0 {
		return 0, 0, decodeErr(Hier, "Block Count", 2, 0, ErrFieldValue)
	}
	if len(body) < bodyHeaderLen+(blockCount+63)/64*8 {
		return 0, 0, decodeErr(Hier, "upper bitmap", bodyHeaderLen, uint64(len(body)), ErrShort)
	}
	return blockBits, blockCount, nil
}

// DecodeHier replaces the contents of into with the set a HIER body encodes.
// Endpoint = block * Block Bits + b. Upper-bitmap padding bits (blocks at or
// above Block Count) must be zero and every selected block non-empty. On
// error into is left empty.
func DecodeHier(body []byte, into *Set) error {
	err := decodeHier(body, into, 0)
	if err != nil {
		into.Clear()
	}
	return err
}

func decodeHier(body []byte, into *Set, wantBB int) error {
	bb, bc, err := ParseHierHeader(body)
	if err != nil {
		return err
	}
	if wantBB != 0 && bb != wantBB {
		return decodeErr(Hier, "Block Bits", 0, uint64(bb), ErrParamMismatch)
	}
	upWords := (bc + 63) / 64
	upper := body[bodyHeaderLen : bodyHeaderLen+8*upWords]
	selected := 0
	for u := range upWords {
		x := binary.BigEndian.Uint64(upper[8*u:])
		if u == upWords-1 && bc%64 != 0 {
			if pad := x & (^uint64(0) >> uint(bc%64)); pad != 0 {
				return decodeErr(Hier, "upper bitmap padding", bodyHeaderLen+8*u, uint64(u*64+bits.LeadingZeros64(pad)), ErrReserved)
			}
		}
		selected += bits.OnesCount64(x)
	}
	lowerLen := bb / 8
	want := bodyHeaderLen + 8*upWords + selected*lowerLen
	if len(body) != want {
		e := ErrShort
		if len(body) > want {
			e = ErrLength
		}
		return decodeErr(Hier, "lower bitmaps", bodyHeaderLen+8*upWords, uint64(len(body)), e)
	}
	into.Clear()
	wpb := bb / 64
	off := bodyHeaderLen + 8*upWords
	for u := range upWords {
		x := binary.BigEndian.Uint64(upper[8*u:])
		for x != 0 {
			z := bits.LeadingZeros64(x)
			x &^= 1 << (63 - uint(z))
			k := u*64 + z
			var seen uint64
			for j := range wpb {
				w := binary.BigEndian.Uint64(body[off+8*j:])
				if w == 0 {
					continue
				}
				seen |= w
				i := k*wpb + j
				if i >= len(into.w) || (i == len(into.w)-1 && w&^into.tailMask() != 0) {
					if i == len(into.w)-1 {
						w &^= into.tailMask()
					}
					return decodeErr(Hier, "lower bitmap", off+8*j, uint64(i*64+bits.LeadingZeros64(w)), ErrOutOfDomain)
				}
				into.w[i] = w
			}
			if seen == 0 {
				return decodeErr(Hier, "lower bitmap", off, uint64(k), ErrEmptyBlock)
			}
			off += lowerLen
		}
	}
	return nil
}

// ListLen is the LIST body length of s.
func ListLen(s *Set) int { return bodyHeaderLen + listIDLen*s.Count() }

// AppendList appends the LIST body of s. listCap is the job's cap on K
// (0 = MaxListCount); a larger set fails with ErrTooLarge.
func AppendList(dst []byte, s *Set, listCap int) ([]byte, error) {
	if listCap <= 0 || listCap > MaxListCount {
		listCap = MaxListCount
	}
	c := s.Count()
	if c > listCap {
		return dst, paramErr(List, "Count (cap "+strconv.Itoa(listCap)+")", c, ErrTooLarge)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(c))
	dst = binary.BigEndian.AppendUint16(dst, 0)
	for i, x := range s.w {
		for x != 0 {
			z := bits.LeadingZeros64(x)
			x &^= 1 << (63 - uint(z))
			dst = binary.BigEndian.AppendUint32(dst, uint32(i*64+z))
		}
	}
	return dst, nil
}

// parseListHeader validates Count, reserved and the exact length.
func parseListHeader(body []byte, listCap int) (int, error) {
	if len(body) < bodyHeaderLen {
		return 0, decodeErr(List, "header", 0, uint64(len(body)), ErrShort)
	}
	c := int(binary.BigEndian.Uint16(body[0:]))
	if r := binary.BigEndian.Uint16(body[2:]); r != 0 {
		return 0, decodeErr(List, "reserved", 2, uint64(r), ErrReserved)
	}
	if listCap > 0 && c > listCap {
		return 0, decodeErr(List, "Count", 0, uint64(c), ErrListCap)
	}
	if want := bodyHeaderLen + listIDLen*c; len(body) != want {
		e := ErrShort
		if len(body) > want {
			e = ErrLength
		}
		return 0, decodeErr(List, "Endpoint IDs", bodyHeaderLen, uint64(len(body)), e)
	}
	return c, nil
}

// DecodeList replaces the contents of into with the set a LIST body encodes.
// listCap is the job's cap on K (0 = no cap below the 16-bit Count). IDs must
// be strictly ascending and inside the domain. On error into is left empty.
func DecodeList(body []byte, into *Set, listCap int) error {
	err := decodeList(body, into, listCap)
	if err != nil {
		into.Clear()
	}
	return err
}

func decodeList(body []byte, into *Set, listCap int) error {
	c, err := parseListHeader(body, listCap)
	if err != nil {
		return err
	}
	into.Clear()
	prev := int64(-1)
	for i := range c {
		off := bodyHeaderLen + listIDLen*i
		id := binary.BigEndian.Uint32(body[off:])
		if int64(id) <= prev {
			return decodeErr(List, "Endpoint ID", off, uint64(id), ErrNotAscending)
		}
		if uint64(id) >= uint64(into.n) {
			return decodeErr(List, "Endpoint ID", off, uint64(id), ErrOutOfDomain)
		}
		prev = int64(id)
		into.w[id>>6] |= mask(int(id))
	}
	return nil
}

// Decode dispatches on p.Encoding and enforces the job's negotiated shape:
// p.WordCount (FLAT) and p.BlockBits (HIER) when non-zero, p.ListCap (LIST).
// On error into is left empty.
func Decode(body []byte, into *Set, p Params) error {
	var err error
	switch p.Encoding {
	case Flat:
		err = decodeFlat(body, into, p.WordCount)
	case Hier:
		err = decodeHier(body, into, p.BlockBits)
	case List:
		err = decodeList(body, into, p.ListCap)
	default:
		err = decodeErr(p.Encoding, "Encoding", 0, uint64(p.Encoding), ErrUnknownEncoding)
	}
	if err != nil {
		into.Clear()
	}
	return err
}

// Append encodes s with p (FLAT: window p.SetID, lossless or ErrTooLarge).
func Append(dst []byte, s *Set, p Params) ([]byte, error) {
	switch p.Encoding {
	case Flat:
		return AppendFlat(dst, s, p.SetID, p.WordCount)
	case Hier:
		return AppendHier(dst, s, p.BlockBits)
	case List:
		return AppendList(dst, s, p.ListCap)
	}
	return dst, paramErr(p.Encoding, "Encoding", int(p.Encoding), ErrUnknownEncoding)
}

// EncodedLen is the body length Append(nil, s, p) produces, without
// encoding (FLAT does not depend on s; LIST ignores the cap here).
func EncodedLen(s *Set, p Params) (int, error) {
	switch p.Encoding {
	case Flat:
		if err := checkFlatParams(p.SetID, p.WordCount); err != nil {
			return 0, err
		}
		return FlatLen(p.WordCount), nil
	case Hier:
		return HierLen(s, p.BlockBits)
	case List:
		return ListLen(s), nil
	}
	return 0, paramErr(p.Encoding, "Encoding", int(p.Encoding), ErrUnknownEncoding)
}

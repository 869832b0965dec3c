// This file owns the translation between endpoint-set bodies on the wire and
// the context's bitmapfwd.Set, keeping each frame's encoding parameters so
// that what a node derives from a frame (split D-BMs, merged P-BMs) goes out
// in the encoding it came in. bitmapfwd's own Decode rejects endpoints beyond
// the set's capacity; here they are counted instead, because section 8.8
// wants unknown D-BM bits dropped from the copies, not the frame dropped.

package bitmap

import (
	"encoding/binary"
	"math/bits"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/parser"
)

var be = binary.BigEndian

// encParams is the shape of one wire set: its Encoding and, for FLAT, Set ID
// and Word Count, for HIER, Block Bits and Block Count. Two sets with equal
// encParams are byte-identical when equal (section 8.1 canonical encodings).
type encParams struct {
	enc  uint8
	a, b uint16
}

// paramsOf reads the shape of a set body already validated by the parser.
func paramsOf(enc uint8, body []byte) encParams {
	p := encParams{enc: enc}
	if enc != parser.EncList {
		p.a, p.b = be.Uint16(body[0:]), be.Uint16(body[2:])
	}
	return p
}

// decodeSet replaces into with the endpoints of a validated set body that lie
// inside into's capacity and returns how many lay outside. into's capacity
// is a multiple of 64 (see capacityFor), so whole words are copied. No
// allocation.
func decodeSet(enc uint8, body []byte, into *bitmapfwd.Set) (outside int) {
	into.Clear()
	w := into.Words()
	switch enc {
	case parser.EncFlat:
		setID, wc := int(be.Uint16(body[0:])), int(be.Uint16(body[2:]))
		base := setID * wc
		for j := 0; j < wc; j++ {
			x := be.Uint64(body[4+8*j:])
			if x == 0 {
				continue
			}
			if i := base + j; i < len(w) {
				w[i] = x
			} else {
				outside += bits.OnesCount64(x)
			}
		}
	case parser.EncHier:
		bb, bc := int(be.Uint16(body[0:])), int(be.Uint16(body[2:]))
		ul := (bc + 63) / 64 * 8
		wpb := bb / 64
		off := 4 + ul
		for blk := 0; blk < bc; blk++ {
			if body[4+blk/8]&(0x80>>(blk%8)) == 0 {
				continue
			}
			for j := 0; j < wpb; j++ {
				x := be.Uint64(body[off+8*j:])
				if x == 0 {
					continue
				}
				if i := blk*wpb + j; i < len(w) {
					w[i] = x
				} else {
					outside += bits.OnesCount64(x)
				}
			}
			off += bb / 8
		}
	case parser.EncList:
		n := int(be.Uint16(body[0:]))
		for k := 0; k < n; k++ {
			if !into.Add(int(be.Uint32(body[4+4*k:]))) {
				outside++
			}
		}
	}
	return outside
}

// setLen is the body length of s encoded with p.
func setLen(s *bitmapfwd.Set, p encParams) int {
	switch p.enc {
	case parser.EncFlat:
		return 4 + 8*int(p.b)
	case parser.EncHier:
		n := 4 + (int(p.b)+63)/64*8
		wpb := int(p.a) / 64
		w := s.Words()
		for blk := 0; blk < int(p.b); blk++ {
			if anyWord(w, blk*wpb, (blk+1)*wpb) {
				n += int(p.a) / 8
			}
		}
		return n
	case parser.EncList:
		return 4 + 4*s.Count()
	}
	return 0
}

func anyWord(w []uint64, lo, hi int) bool {
	for i := lo; i < hi && i < len(w); i++ {
		if w[i] != 0 {
			return true
		}
	}
	return false
}

// putSet writes s encoded with p into dst (len(dst) >= setLen(s, p)) and
// returns the length. Members of s outside a FLAT window or a HIER block
// range are not representable with p; callers only encode subsets of a set
// that arrived with p, or of the A-BM with its own p. No allocation.
func putSet(dst []byte, s *bitmapfwd.Set, p encParams) int {
	w := s.Words()
	switch p.enc {
	case parser.EncFlat:
		be.PutUint16(dst[0:], p.a)
		be.PutUint16(dst[2:], p.b)
		base := int(p.a) * int(p.b)
		for j := 0; j < int(p.b); j++ {
			var x uint64
			if i := base + j; i < len(w) {
				x = w[i]
			}
			be.PutUint64(dst[4+8*j:], x)
		}
		return 4 + 8*int(p.b)
	case parser.EncHier:
		be.PutUint16(dst[0:], p.a)
		be.PutUint16(dst[2:], p.b)
		bc, wpb := int(p.b), int(p.a)/64
		ul := (bc + 63) / 64 * 8
		clear(dst[4 : 4+ul])
		off := 4 + ul
		for blk := 0; blk < bc; blk++ {
			if !anyWord(w, blk*wpb, (blk+1)*wpb) {
				continue
			}
			dst[4+blk/8] |= 0x80 >> (blk % 8)
			for j := 0; j < wpb; j++ {
				var x uint64
				if i := blk*wpb + j; i < len(w) {
					x = w[i]
				}
				be.PutUint64(dst[off+8*j:], x)
			}
			off += int(p.a) / 8
		}
		return off
	case parser.EncList:
		n := 0
		for i, x := range w {
			for x != 0 {
				z := bits.LeadingZeros64(x)
				x &^= 1 << (63 - uint(z))
				be.PutUint32(dst[4+4*n:], uint32(i*64+z))
				n++
			}
		}
		be.PutUint16(dst[0:], uint16(n))
		be.PutUint16(dst[2:], 0)
		return 4 + 4*n
	}
	return 0
}

// maxEndpoint returns the largest endpoint of a validated set body, or -1.
// Setup path only.
func maxEndpoint(enc uint8, body []byte) int64 {
	var it parser.SetIter
	m := int64(-1)
	for {
		e, ok := parser.NextEndpoint(enc, body, &it)
		if !ok {
			return m
		}
		m = int64(e)
	}
}

// capacityFor rounds a bit space up to whole 64-bit words (at least one), so
// decodeSet and putSet work on words and never on a partial tail.
func capacityFor(maxEP int64) int {
	n := int(maxEP) + 1
	if n < 64 {
		n = 64
	}
	return (n + 63) &^ 63
}

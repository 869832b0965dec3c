// This file owns the readers of an element whose value is its lane alone
// (no digits, no special flag): its AUTO set, its extent and its
// KULISCH_SCALED integer, read from the float64 without folding it into
// the digits. A leaf switch asks all three of every element it sends up;
// folding and resolving a row for each was a quarter of its CPU.

package kulisch

import (
	"math"
	"math/bits"
)

// laneOnly returns element i's lane when the lane is the whole finite,
// nonzero value.
func (v *Vector) laneOnly(i int) (float64, bool) {
	x := v.lane[i]
	return x, x != 0 && v.empty(i) && v.flags[i]&(fNaN|fPosInf|fNegInf|fHuge) == 0
}

// laneParts splits a nonzero lane value into sign, an odd significand m
// and the unit position of its lowest bit: |x| = m * 2^lo units. Lane
// values are multiples of the unit (2^-ScaleExp) below 2^127, so lo >= 0.
func laneParts(x float64) (neg bool, m uint64, lo int) {
	b := math.Float64bits(x)
	m = b&(1<<52-1) | 1<<52
	lo = int(b>>52&0x7FF) - 1075 + ScaleExp
	tz := bits.TrailingZeros64(m)
	return b>>63 != 0, m >> uint(tz), lo + tz
}

// exactIn reports whether |x| = m * 2^(lo-ScaleExp) (m odd) is a finite
// value of f: its most significant bit within f's exponent range, its
// lowest bit no finer than f's quantum at that exponent.
func exactIn(f floatFmt, m uint64, lo int) bool {
	msb := lo + bits.Len64(m) - 1 - ScaleExp // exponent of the leading bit
	return msb <= f.emax && lo-ScaleExp >= max(msb, f.emin)-(f.p-1)
}

// laneSet is AutoSet for a lane-only value.
func laneSet(x float64) FormatSet {
	if i := int64(x); float64(i) == x && i > -1<<24 && i < 1<<24 {
		// A nonzero integer below 2^24, what sums of integers are (the
		// integral data of prismctl bench: 20-bit values). The general
		// path below, reading sign, odd significand and exponent and
		// testing each float format, was a fifth of a leaf's CPU planning
		// AUTO partials of such data; here the odd part decides: FP32
		// always, FP16 with at most 11 significant bits up to its largest
		// finite value 65504, BF16 with at most 8.
		a := uint64(i)
		if i < 0 {
			a = uint64(-i)
		}
		odd := a >> bits.TrailingZeros64(a)
		s := FormatSet(1<<KULISCH | 1<<FP32)
		if odd < 1<<11 && a <= 65504 {
			s |= 1 << FP16
		}
		if odd < 1<<8 {
			s |= 1 << BF16
		}
		if i >= -128 && i <= 127 {
			s |= 1 << INT8
		}
		return s
	}
	s := FormatSet(1 << KULISCH)
	if x == math.Trunc(x) && x >= -128 && x <= 127 {
		s |= 1 << INT8
	}
	_, m, lo := laneParts(x)
	if exactIn(fmt32, m, lo) {
		s |= 1 << FP32
		if exactIn(fmt16, m, lo) {
			s |= 1 << FP16
		}
		if exactIn(fmtBF, m, lo) {
			s |= 1 << BF16
		}
	}
	return s
}

// laneSpan is spanOf for a lane-only value: the lowest set bit, and the
// signed width (the bit length of x, or of ^x = |x|-1 for x < 0, plus the
// sign bit).
func laneSpan(x float64) Span { return partsSpan(laneParts(x)) }

// partsSpan is laneSpan of a value already split by laneParts.
func partsSpan(neg bool, m uint64, lo int) Span {
	hi := lo + bits.Len64(m) + 1
	if neg && m == 1 { // |x| a power of two: |x|-1 is a bit shorter
		hi--
	}
	return Span{Lo: uint16(lo), Hi: uint16(hi)}
}

// putLaneScaled writes x / 2^shift as the b-byte little-endian two's
// complement into out, x split by laneParts (its span already checked to
// lie in [shift, shift+8b)).
func putLaneScaled(out []byte, neg bool, m uint64, lo, shift int) {
	q := lo - shift // m << q is |x| / 2^shift; q >= 0 by the span check
	if q+bits.Len64(m) <= 63 {
		// |x| / 2^shift fits a signed 64-bit word (always, for gradient-
		// like sums at their own extent): negate it there and write its
		// bytes, the sign filling those above the eighth. The byte-wise
		// two's complement below was a tenth of a leaf's CPU.
		v := int64(m << uint(q))
		if neg {
			v = -v
		}
		for t := range out {
			out[t] = byte(v >> min(8*t, 63))
		}
		return
	}
	borrow := uint64(1)
	for t := range out {
		var p uint64 // byte t of m << q
		if s := 8*t - q; s >= 0 && s < 64 {
			p = m >> uint(s) & 0xFF
		} else if s < 0 && s > -8 {
			p = m << uint(-s) & 0xFF
		}
		if neg { // two's complement: invert and add one, byte by byte
			p = (^p & 0xFF) + borrow
			borrow = p >> 8
			p &= 0xFF
		}
		out[t] = byte(p)
	}
}

// This file owns KULISCH_F64, exact Kulisch partials carried as IEEE
// binary64: which elements binary64 holds (F64Run), the encoder (PutF64),
// the validator (CheckF64) and the exact merge (MergeF64). A sum of a few
// FP32 terms of similar magnitude lives in an element's float64 lane
// (lane.go), which is already its binary64 encoding: sending it costs a
// copy, where KULISCH_SCALED costs an extent, a grouping decision and a
// byte-wise integer per value, and merging it costs one add and the TwoSum
// test. The price is 8 bytes a value instead of KULISCH_SCALED's 5 to 7.

package kulisch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// KULISCH_F64 is format code 8 (docs/protocol.md section 6): exact Kulisch
// values as little-endian binary64. Like KULISCH_SCALED it appears only in
// a switch's partials to its parent, never in a policy or a capability
// record.
const KULISCH_F64 Format = 8

// F64Size is the wire size of one KULISCH_F64 value.
const F64Size = 8

// f64NaN is the one NaN encoding KULISCH_F64 admits.
const f64NaN = 0x7FF8000000000000

// f64Exact reports whether element i's exact value is a binary64 that
// KULISCH_F64 carries: a special (an infinity or NaN is that whatever the
// finite terms summed to, and binary64 encodes it: f64Bits), or no digits
// (the value is its lane, a multiple of 2^-149 below 2^127, or a zero) and
// no overflow flag. An infinity plus finite terms keeps their digits:
// without the first case AutoSet offered KULISCH_F64 for it and PutF64
// refused it, and the operation ended ACCUMULATION_INEXACT where the sum
// was +Inf.
func (v *Vector) f64Exact(i int) bool {
	f := v.flags[i]
	return f&(fPosInf|fNegInf|fNaN) != 0 || v.empty(i) && f&fHuge == 0
}

// F64Run returns how many of the elements first, first+1, ... (at most n)
// are, from the first on, values KULISCH_F64 holds exactly. A sender sends
// those as KULISCH_F64 and the element after them some other way.
func (v *Vector) F64Run(first, n int) int {
	if first < 0 || n <= 0 || first >= v.n {
		return 0
	}
	n = min(n, v.n-first)
	flags, nlo, hi := v.flags[first:first+n], v.nlo[first:first+n], v.hi[first:first+n]
	k := 0
	// Eight at a time while no element has digits (both bounds bytes zero:
	// a row nothing but the lane touched) or the overflow flag; the
	// element-wise test decides the rest.
	for ; k+8 <= n; k += 8 {
		f := binary.LittleEndian.Uint64(flags[k:])
		b := binary.LittleEndian.Uint64(nlo[k:]) | binary.LittleEndian.Uint64(hi[k:])
		if f&(uint64(fHuge)*0x0101010101010101) != 0 || b != 0 {
			break
		}
	}
	for ; k < n; k++ {
		if !v.f64Exact(first + k) {
			return k
		}
	}
	return n
}

// f64Bits is element i's KULISCH_F64 encoding; the element must be
// f64Exact.
func (v *Vector) f64Bits(i int) uint64 {
	f := v.flags[i]
	switch {
	case f&fNaN != 0 || f&(fPosInf|fNegInf) == fPosInf|fNegInf:
		return f64NaN
	case f&fPosInf != 0:
		return math.Float64bits(math.Inf(1))
	case f&fNegInf != 0:
		return math.Float64bits(math.Inf(-1))
	}
	if x := v.lane[i]; x != 0 {
		return math.Float64bits(x)
	}
	if f&fNonNegZero != 0 {
		return 0 // +0
	}
	return 1 << 63 // -0: every input was -0, or none came
}

// PutF64 writes accumulators first .. first+count-1 as KULISCH_F64 values
// into dst[:8*count]. An element that binary64 does not hold exactly (its
// value has digits: check F64Run first) is ErrNotLossless; on error the
// contents of dst are unspecified. It does not allocate.
func (v *Vector) PutF64(dst []byte, first, count int) error {
	if first < 0 || count < 0 || first+count > v.n {
		return ErrRange
	}
	if len(dst) < F64Size*count {
		return ErrLength
	}
	k := 0
	for k < count {
		if haveAVX2 {
			// Lane-only elements, four at a time: a copy.
			k += laneCopyBulk(dst[F64Size*k:F64Size*count], v.lane[first+k:first+count],
				v.flags[first+k:first+count], v.nlo[first+k:first+count], v.hi[first+k:first+count])
			if k == count {
				break
			}
		}
		i := first + k
		k++
		if !v.f64Exact(i) {
			return fmt.Errorf("%w: element %d is not a binary64 (KULISCH_F64)", ErrNotLossless, i)
		}
		binary.LittleEndian.PutUint64(dst[F64Size*(k-1):], v.f64Bits(i))
	}
	return nil
}

// checkF64 checks one KULISCH_F64 value at width w (the rules of
// docs/protocol.md section 6): no binary64 subnormal, no NaN but the
// canonical one, a finite nonzero value a multiple of 2^-149 whose
// magnitude is below 2^(w-150), so it fits the signed w-bit accumulator.
func checkF64(b uint64, w int) error {
	e := int(b >> 52 & 0x7FF)
	frac := b & (1<<52 - 1)
	switch {
	case e == 0x7FF:
		if frac != 0 && b != f64NaN {
			return fmt.Errorf("%w: KULISCH_F64 NaN %#016x is not 0x7FF8000000000000", ErrWire, b)
		}
		return nil
	case e == 0:
		if frac != 0 {
			return fmt.Errorf("%w: KULISCH_F64 subnormal %#016x is not a multiple of 2^-149", ErrWire, b)
		}
		return nil
	}
	if lo := e - 1075 + bits.TrailingZeros64(frac|1<<52); lo < -ScaleExp {
		return fmt.Errorf("%w: KULISCH_F64 value %#016x is not a multiple of 2^-149", ErrWire, b)
	}
	if e-1023 > w-151 {
		return fmt.Errorf("%w: KULISCH_F64 value %#016x does not fit W=%d", ErrWire, b, w)
	}
	return nil
}

// CheckF64 validates packed KULISCH_F64 values against this vector's width.
func (v *Vector) CheckF64(values []byte) error {
	if len(values)%F64Size != 0 {
		return ErrLength
	}
	for off := 0; off < len(values); off += F64Size {
		if err := checkF64(binary.LittleEndian.Uint64(values[off:]), v.w); err != nil {
			return err
		}
	}
	return nil
}

// MergeF64 adds packed KULISCH_F64 values (a child's exact partials) to
// accumulators first, first+1, ... exactly. All values are validated
// before any is applied, so an error leaves the vector unchanged. It does
// not allocate.
func (v *Vector) MergeF64(first int, values []byte) error {
	if err := v.CheckF64(values); err != nil {
		return err
	}
	return v.MergeF64Checked(first, values)
}

// MergeF64Checked is MergeF64 for values that already passed CheckF64 at
// this width (the parser checks them when it knows W): it skips that pass.
func (v *Vector) MergeF64Checked(first int, values []byte) error {
	if len(values)%F64Size != 0 {
		return ErrLength
	}
	n := len(values) / F64Size
	if err := v.span(first, n); err != nil {
		return err
	}
	// The AVX2 kernel takes groups of four finite nonzero terms while all
	// four stay in their lanes; a group it stops at goes one value at a
	// time, then the kernel resumes.
	for j := 0; j < n; {
		if haveAVX2 {
			j += laneAdd64Bulk(v.lane[first+j:first+n], values[F64Size*j:F64Size*n], v.flags[first+j:first+n], v.laneLim)
		}
		m := n - j
		if haveAVX2 {
			m = min(4, m)
		}
		for k := j; k < j+m; k++ {
			v.mergeF64One(first+k, binary.LittleEndian.Uint64(values[F64Size*k:]))
		}
		j += m
	}
	return nil
}

// mergeF64One adds one checked KULISCH_F64 value b to element i.
func (v *Vector) mergeF64One(i int, b uint64) {
	switch {
	case b == 0: // +0
		v.flags[i] |= fNonNegZero
	case b == 1<<63: // -0
	case b>>52&0x7FF == 0x7FF:
		if b&(1<<52-1) != 0 {
			v.flags[i] |= fNaN
		} else {
			v.special(i, false, b>>63 != 0)
		}
	default:
		v.flags[i] |= fNonNegZero
		if !v.laneAdd64(i, math.Float64frombits(b)) {
			v.addF64Digits(i, b)
		}
	}
}

// laneAdd64 adds the finite x to element i's lane if the sum stays exact
// and below the limit (the TwoSum error is zero), as the FP32 add does,
// and reports whether it did.
func (v *Vector) laneAdd64(i int, x float64) bool {
	a := v.lane[i]
	s := a + x
	if math.Abs(s) >= v.laneLim {
		return false
	}
	if bb := s - a; (a-(s-bb))+(x-bb) != 0 {
		return false
	}
	v.lane[i] = s
	return true
}

// addF64Digits adds a checked finite nonzero binary64 b to element i's
// digits exactly. Its significand m (53 bits) times 2^sh units is written
// as a signed 8-byte integer at Shift min(sh, W-64), so Shift + 64 <= W as
// addShiftedInt requires: m << (sh - Shift) is below 2^63 because a
// checked value's top bit lies below W-1.
func (v *Vector) addF64Digits(i int, b uint64) {
	m := b&(1<<52-1) | 1<<52
	sh := int(b>>52&0x7FF) - 1075 + ScaleExp
	if sh < 0 { // exact: the value is a multiple of 2^-149
		m >>= uint(-sh)
		sh = 0
	}
	shift := min(sh, v.w-64)
	n := int64(m << uint(sh-shift))
	if b>>63 != 0 {
		n = -n
	}
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(n))
	addShiftedInt(v.digits[i*v.d:(i+1)*v.d], buf[:], 8, shift)
	v.wide(i)
}

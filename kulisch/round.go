// This file owns the single final rounding of an exact value to FP32, FP16
// or BF16 (round to nearest, ties to even), the INT8 integrality check and
// the test of which formats hold a value losslessly.

package kulisch

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// floatFmt describes an IEEE-style binary format.
type floatFmt struct {
	p      int    // precision, hidden bit included
	emin   int    // exponent of the smallest normal
	emax   int    // exponent of the largest finite, also the bias
	expAll uint32 // all-ones exponent field
	sign   uint32 // sign bit
	nan    uint32 // canonical NaN
}

var (
	fmt32 = floatFmt{p: 24, emin: -126, emax: 127, expAll: 0xFF, sign: 1 << 31, nan: NaN32}
	fmt16 = floatFmt{p: 11, emin: -14, emax: 15, expAll: 0x1F, sign: 1 << 15, nan: uint32(NaN16)}
	fmtBF = floatFmt{p: 8, emin: -126, emax: 127, expAll: 0xFF, sign: 1 << 15, nan: uint32(NaNBF)}
)

func floatFor(f Format) (*floatFmt, bool) {
	switch f {
	case FP32:
		return &fmt32, true
	case FP16:
		return &fmt16, true
	case BF16:
		return &fmtBF, true
	}
	return nil, false
}

func (ff *floatFmt) inf(neg bool) uint32 {
	x := ff.expAll << (ff.p - 1)
	if neg {
		x |= ff.sign
	}
	return x
}

// magnitude is |V| in units of 2^-149 as 32-bit digits (the top digit may be
// wider), with the position of its most significant bit.
type magnitude struct {
	dg  [maxDigits]uint64
	n   int // digits in use
	msb int // index of the highest set bit
	neg bool
}

// load fills m from resolved nonzero digits.
func (m *magnitude) load(dg []int64) {
	n := len(dg)
	m.n = n
	m.neg = dg[n-1] < 0
	if !m.neg {
		for j, x := range dg {
			m.dg[j] = uint64(x)
		}
	} else {
		c := uint64(1)
		for j := 0; j < n-1; j++ {
			x := (^uint64(dg[j]) & digitMask) + c
			m.dg[j] = x & digitMask
			c = x >> digitBits
		}
		m.dg[n-1] = ^uint64(dg[n-1]) + c
	}
	for j := n - 1; j >= 0; j-- {
		if m.dg[j] != 0 {
			m.msb = j*digitBits + bits.Len64(m.dg[j]) - 1
			return
		}
	}
	m.msb = -1
}

// field returns up to 32 bits of m starting at bit pos.
func (m *magnitude) field(pos, width int) uint64 {
	j, r := pos/digitBits, uint(pos%digitBits)
	x := m.dg[j] >> r
	if j+1 < m.n {
		x |= m.dg[j+1] << (digitBits - r)
	}
	return x & (1<<width - 1)
}

// below reports whether any bit below pos is set.
func (m *magnitude) below(pos int) bool {
	if pos <= 0 {
		return false
	}
	j, r := pos/digitBits, uint(pos%digitBits)
	for k := 0; k < j; k++ {
		if m.dg[k] != 0 {
			return true
		}
	}
	return r != 0 && m.dg[j]&(1<<r-1) != 0
}

// lowest is the index of the lowest set bit (m nonzero).
func (m *magnitude) lowest() int {
	for j := 0; j < m.n; j++ {
		if m.dg[j] != 0 {
			return j*digitBits + bits.TrailingZeros64(m.dg[j])
		}
	}
	return -1
}

// quantum is the bit position (in units) of the last significand bit when
// a value with highest bit msb is held in ff.
func (ff *floatFmt) quantum(msb int) int {
	e := msb - ScaleExp
	if e < ff.emin {
		e = ff.emin
	}
	return e - (ff.p - 1) + ScaleExp // >= 0 for all three formats
}

// round rounds the nonzero magnitude to ff with ties to even.
func (ff *floatFmt) round(m *magnitude) uint32 {
	var sign uint32
	if m.neg {
		sign = ff.sign
	}
	if m.msb-ScaleExp > ff.emax {
		return ff.inf(m.neg)
	}
	q := ff.quantum(m.msb)
	s := m.field(q, ff.p)
	if q > 0 && m.field(q-1, 1) == 1 && (s&1 == 1 || m.below(q-1)) {
		s++
		if s == 1<<ff.p {
			s >>= 1
			q++
		}
	}
	if s < 1<<(ff.p-1) { // subnormal: biased exponent 0
		return sign | uint32(s)
	}
	be := q - ScaleExp + ff.p - 1 + ff.emax
	if be >= int(ff.expAll) {
		return ff.inf(m.neg)
	}
	return sign | uint32(be)<<(ff.p-1) | uint32(s)&(1<<(ff.p-1)-1)
}

// exact reports whether ff holds the nonzero magnitude without rounding.
func (ff *floatFmt) exact(m *magnitude) bool {
	return m.msb-ScaleExp <= ff.emax && m.lowest() >= ff.quantum(m.msb)
}

// int8Of returns the INT8 value of the nonzero magnitude if it is integral
// and in range.
func int8Of(m *magnitude) (int8, bool) {
	if m.lowest() < ScaleExp || m.msb > ScaleExp+7 {
		return 0, false
	}
	x := int(m.field(ScaleExp, 8))
	if m.neg {
		x = -x
	}
	if x < -128 || x > 127 {
		return 0, false
	}
	return int8(x), true
}

// special encodes a non-finite or zero state in ff.
func (ff *floatFmt) special(s State) uint32 {
	switch s {
	case PosZero:
		return 0
	case NegZero:
		return ff.sign
	case PosInf:
		return ff.inf(false)
	case NegInf:
		return ff.inf(true)
	}
	return ff.nan
}

// Round rounds accumulator i once to f (FP32, FP16 or BF16; the result is
// the bit pattern in the low bits) or converts it to INT8 (the byte in the
// low 8 bits). Errors: ErrOverflow (finite sum does not fit W), ErrNotInt8,
// ErrFormat.
func (v *Vector) Round(i int, f Format) (uint32, error) {
	x := v.get(i)
	if x.over {
		return 0, v.overErr(i)
	}
	if f == INT8 {
		r, err := int8Value(x, &v.mag)
		return uint32(uint8(r)), err
	}
	ff, ok := floatFor(f)
	if !ok {
		return 0, ErrFormat
	}
	if x.state != Finite {
		return ff.special(x.state), nil
	}
	m := &v.mag
	m.load(x.dg)
	return ff.round(m), nil
}

func int8Value(x value, m *magnitude) (int8, error) {
	switch x.state {
	case PosZero, NegZero:
		return 0, nil
	case Finite:
		m.load(x.dg)
		if r, ok := int8Of(m); ok {
			return r, nil
		}
	}
	return 0, ErrNotInt8
}

// RoundFP32 rounds accumulator i once to binary32.
func (v *Vector) RoundFP32(i int) (uint32, error) { return v.Round(i, FP32) }

// RoundFP16 rounds accumulator i once to binary16.
func (v *Vector) RoundFP16(i int) (uint16, error) {
	r, err := v.Round(i, FP16)
	return uint16(r), err
}

// RoundBF16 rounds accumulator i once to bfloat16.
func (v *Vector) RoundBF16(i int) (uint16, error) {
	r, err := v.Round(i, BF16)
	return uint16(r), err
}

// INT8 returns accumulator i as an int8 when it is integral and in range,
// else ErrNotInt8 (never clamped). Both zeros give 0.
func (v *Vector) INT8(i int) (int8, error) {
	x := v.get(i)
	if x.over {
		return 0, v.overErr(i)
	}
	return int8Value(x, &v.mag)
}

// FormatSet is a set of concrete formats, bit 1<<f for format f.
type FormatSet uint8

// Has reports whether f is in s.
func (s FormatSet) Has(f Format) bool { return f < 8 && s&(1<<f) != 0 }

// Set builds a FormatSet.
func SetOf(fs ...Format) FormatSet {
	var s FormatSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

const floatsSet = FormatSet(1<<FP16 | 1<<BF16 | 1<<FP32)

// AutoSet returns the formats that hold accumulator i losslessly (encode
// then decode gives the same state and exact value): KULISCH always when the
// sum fits W, INT8 only for integral finite values in range and +0 (INT8 has
// no -0, inf or NaN). A sum that does not fit W is ErrOverflow.
func (v *Vector) AutoSet(i int) (FormatSet, error) {
	if l, ok := v.laneOnly(i); ok {
		return laneSet(l), nil
	}
	x := v.get(i)
	if x.over {
		return 0, v.overErr(i)
	}
	s := FormatSet(1 << KULISCH)
	switch x.state {
	case PosZero:
		return s | floatsSet | 1<<INT8, nil
	case Finite:
	default:
		return s | floatsSet, nil
	}
	m := &v.mag
	m.load(x.dg)
	if _, ok := int8Of(m); ok {
		s |= 1 << INT8
	}
	if fmt32.exact(m) {
		s |= 1 << FP32
		if fmt16.exact(m) {
			s |= 1 << FP16
		}
		if fmtBF.exact(m) {
			s |= 1 << BF16
		}
	}
	return s, nil
}

// PutValues writes accumulators first..first+count-1 in concrete format f
// into dst (values only: no descriptor, no padding) and returns the bytes
// written. Float formats round once (RNE); under AUTO the caller picks f
// from AutoSet so the rounding is exact.
func (v *Vector) PutValues(dst []byte, first, count int, f Format) (int, error) {
	if first < 0 || count < 0 || first+count > v.n {
		return 0, ErrRange
	}
	w := f.Width(v.w)
	if w == 0 {
		return 0, ErrFormat
	}
	if len(dst) < count*w {
		return 0, ErrLength
	}
	if f == FP32 {
		// Every RESULT and FP32 partial of a Kulisch job comes through
		// here: most of a switch's work per frame.
		return v.putFP32(dst, first, count)
	}
	if f == KULISCH_F64 { // exact or ErrNotLossless, never rounded
		return count * F64Size, v.PutF64(dst, first, count)
	}
	for k := 0; k < count; k++ {
		i := first + k
		out := dst[k*w:]
		switch f {
		case KULISCH:
			if err := v.PutWire(out, i); err != nil {
				return 0, err
			}
		default:
			// A lane-only value that f holds exactly needs no rounding:
			// AUTO plans put every value in a format that holds it, and
			// sums of small integers (FP16 groups) went through Round's
			// fold and carry resolution, about half of a leaf's CPU.
			if x, ok := v.laneOnly(i); ok {
				if r, ok := laneBits(x, f); ok {
					putBits(out, f, r)
					continue
				}
			}
			r, err := v.Round(i, f)
			if err != nil {
				return 0, err
			}
			putBits(out, f, r)
		}
	}
	return count * w, nil
}

// laneBits returns the INT8, FP16 or BF16 bits of the finite nonzero lane
// value x when f represents x exactly; false otherwise (Round then rounds,
// or reports what f cannot hold). An exact value rounds to itself, so
// the bits are Round's.
func laneBits(x float64, f Format) (uint32, bool) {
	if f == INT8 {
		if x != math.Trunc(x) || x < -128 || x > 127 {
			return 0, false
		}
		return uint32(uint8(int8(x))), true
	}
	f32 := float32(x)
	if float64(f32) != x {
		return 0, false // not even FP32 holds it
	}
	b := math.Float32bits(f32)
	switch f {
	case BF16:
		if b&0xFFFF != 0 {
			return 0, false
		}
		return b >> 16, true
	case FP16:
		if b>>23&0xFF == 0 {
			return 0, false // FP32 subnormal: far below FP16's least value
		}
		sign := b >> 16 & 0x8000
		e := int(b>>23&0xFF) - 127
		full := b&(1<<23-1) | 1<<23 // x = full * 2^(e-23)
		switch {
		case e > 15:
			return 0, false
		case e >= -14: // normal: 10 fraction bits
			if full&(1<<13-1) != 0 {
				return 0, false
			}
			return sign | uint32(e+15)<<10 | full>>13&(1<<10-1), true
		case e >= -24: // subnormal: x = m * 2^-24, m = full * 2^(e+1)
			sh := uint(-e - 1)
			if full&(1<<sh-1) != 0 {
				return 0, false
			}
			return sign | full>>sh, true
		}
	}
	return 0, false
}

func putBits(out []byte, f Format, r uint32) {
	switch f {
	case INT8:
		out[0] = byte(r)
	case FP16, BF16:
		out[0], out[1] = byte(r), byte(r>>8)
	case FP32:
		out[0], out[1], out[2], out[3] = byte(r), byte(r>>8), byte(r>>16), byte(r>>24)
	}
}

// putFP32 is PutValues for FP32: one bottom-up pass resolves the carries
// and notes the lowest nonzero digit and the highest digit that is not
// sign extension, then roundFP32 reads only the two digits under the most
// significant bit; anything but a finite nonzero value that rounds to a
// finite FP32 goes through Round. (Loading the whole magnitude, checking
// the width and scanning again for the sticky bit cost 2x as much per
// element: the switch rounds every element of every RESULT.)
func (v *Vector) putFP32(dst []byte, first, count int) (int, error) {
	d := v.d
	next := 0 // where the AVX2 kernel takes over again
	for k := 0; k < count; k++ {
		if k == next && haveAVX2 {
			// Lane-only elements four at a time; the group the kernel
			// stops at goes through this loop, then it resumes.
			end := first + count
			k += laneOutBulk(dst[4*k:4*count], v.lane[first+k:end], v.flags[first+k:end], v.nlo[first+k:end], v.hi[first+k:end])
			next = k + 4
			if k == count {
				break
			}
		}
		i := first + k
		if x := v.lane[i]; x != 0 {
			// The lane alone is the exact value: one conversion rounds it.
			if v.empty(i) && v.flags[i]&(fNaN|fPosInf|fNegInf|fHuge) == 0 {
				if f := float32(x); !math.IsInf(float64(f), 0) {
					binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits(f))
					continue
				}
			}
			v.fold(i)
		}
		dg := v.digits[i*d : i*d+d : i*d+d]
		// Resolve digits lo..hi only (the rest are zero) when the row has
		// a zero digit above hi to take the carry: that digit becomes the
		// signed top of the shorter row dg[:t+1], which holds the same
		// value. Otherwise resolve the whole row.
		lo, t := 0, d-1
		if h := int(v.hi[i]); h < d-1 {
			lo, t = int(^v.nlo[i]), h+1
			// The common case, every input of one binade or two: three
			// digits make one 128-bit integer, rounded without resolving
			// anything (the row stays as it is).
			if h-lo <= 2 && lo+2 < d && v.flags[i]&(fNaN|fPosInf|fNegInf|fHuge) == 0 {
				if r, ok := roundShort(dg[lo], dg[lo+1], dg[lo+2], lo, v.w); ok {
					binary.LittleEndian.PutUint32(dst[4*k:], r)
					continue
				}
			}
		}
		var c int64
		low, hiNZ, hiNM := t+1, -1, lo-1 // lowest nonzero; highest nonzero; highest not all ones
		for j := lo; j < t; j++ {
			x := dg[j] + c
			c = x >> digitBits
			x &= digitMask
			dg[j] = x
			if x != 0 {
				low = min(low, j)
				hiNZ = j
			}
			if x != digitMask {
				hiNM = j
			}
		}
		top := dg[t] + c
		dg[t] = top
		if top != 0 {
			low = min(low, t)
			hiNZ = t
			// The signed top now sits in digit t: the bounds must say
			// so even when t is the row's last digit, or resolve would
			// take the row as short and overwrite digit t with a carry.
			v.hi[i] = uint8(t)
		}
		if top != -1 {
			hiNM = t
		}
		if top > hugeLimit || top < -hugeLimit {
			v.flags[i] |= fHuge
		}
		r, ok := uint32(0), false
		if v.flags[i]&(fNaN|fPosInf|fNegInf|fHuge) == 0 && low <= t {
			h := hiNZ
			if top < 0 {
				h = max(hiNM, low)
			}
			r, ok = roundFP32(dg[:t+1], low, h, v.w)
		}
		if !ok {
			var err error
			if r, err = v.Round(i, FP32); err != nil {
				return 0, err
			}
		}
		binary.LittleEndian.PutUint32(dst[4*k:], r)
	}
	return 4 * count, nil
}

// roundShort rounds V = a0 + a1*2^32 + a2*2^64 units to FP32, ties to
// even, where a0..a2 are the carry-save digits lo..lo+2 of a row whose
// other digits are zero. Each |a| < 2^62, so V fits a signed 128-bit
// integer. ok is false for V = 0 (its sign lives in the flags) and where
// roundFP32 would also decline (out of FP32's finite range, or reaching
// bit w-1): the caller takes the general path.
func roundShort(a0, a1, a2 int64, lo, w int) (uint32, bool) {
	l, h := uint64(a0), uint64(a0>>63)
	var c uint64
	l, c = bits.Add64(l, uint64(a1)<<digitBits, 0)
	h += uint64(a1>>digitBits) + c
	h += uint64(a2)
	var sign uint32
	neg := int64(h) < 0
	if neg {
		sign = 1 << 31
		l, c = bits.Sub64(0, l, 0)
		h = -h - c
	}
	m := bits.Len64(l) - 1 // local msb
	if h != 0 {
		m = 64 + bits.Len64(h) - 1
	} else if l == 0 {
		return 0, false
	}
	msb := lo*digitBits + m
	if msb-ScaleExp > fmt32.emax || msb >= w-1 {
		return 0, false
	}
	q := max(msb-23, 0) // quantum: FP32's last significand bit (0 = subnormal range)
	sh := q - lo*digitBits
	var sv uint64
	if sh <= 0 {
		sv = l << uint(-sh) // fewer than 24 bits: exact
	} else {
		// sv = V >> sh (< 2^24); round bit sh-1; sticky: bits below it.
		us := uint(sh)
		if us >= 64 {
			sv = h >> (us - 64)
		} else {
			sv = l>>us | h<<(64-us)
		}
		rb := us - 1
		var rbit uint64
		var sticky bool
		if rb >= 64 {
			rbit = h >> (rb - 64) & 1
			sticky = l != 0 || h&(1<<(rb-64)-1) != 0
		} else {
			rbit = l >> rb & 1
			sticky = l&(1<<rb-1) != 0
		}
		sv &= 1<<24 - 1
		if rbit == 1 && (sv&1 == 1 || sticky) {
			sv++
			if sv == 1<<24 {
				sv >>= 1
				q++
			}
		}
	}
	return packFP32(sign, neg, sv, q), true
}

// packFP32 is the binary32 of the rounded significand s (< 2^24) with
// quantum bit q (units of 2^-149), sign bit sign: subnormal below 2^23,
// infinity when the exponent overflows.
func packFP32(sign uint32, neg bool, s uint64, q int) uint32 {
	if s < 1<<23 { // subnormal: biased exponent 0
		return sign | uint32(s)
	}
	be := q + 1 // q - ScaleExp + (p-1) + emax
	if be >= 0xFF {
		return fmt32.inf(neg)
	}
	return sign | uint32(be)<<23 | uint32(s)&(1<<23-1)
}

// roundFP32 rounds the resolved, nonzero digits dg to FP32, ties to even,
// as fmt32.round does from a full magnitude. low is the lowest nonzero
// digit, h the highest nonzero digit of |V|. ok is false, and the caller
// takes the general path, when |V| is out of FP32's finite range or
// reaches bit w-1 (an infinity or a width overflow, which Round tells
// apart).
//
// |V| is needed only in digits h and h-1: for V < 0, |V| = ^V + 1, and the
// +1 carries up to digit low exactly (every digit below it is zero), so
// magnitude digit j is 0 below low, (^dg[j] & mask) + 1 at low and
// ^dg[j] & mask above it. The bits of |V| below digit j are nonzero
// exactly when low < j: the sticky bit for everything under the window.
func roundFP32(dg []int64, low, h, w int) (uint32, bool) {
	top := len(dg) - 1
	neg := dg[top] < 0
	mag := func(j int) uint64 { // resolved digits below the top are < 2^32
		if !neg {
			return uint64(dg[j])
		}
		if j < low {
			return 0 // ^0 plus the carry of the +1
		}
		m := uint64(^dg[j])
		if j < top {
			m &= digitMask
		}
		if j == low {
			m++
		}
		return m
	}
	if h >= fp32Digits {
		return 0, false // >= 2^288: beyond FP32 (and maybe W)
	}
	mh := mag(h)
	if mh == 0 || mh > digitMask {
		return 0, false // a top digit past 2^32: far beyond FP32
	}
	msb := h*digitBits + bits.Len64(mh) - 1
	if msb-ScaleExp > fmt32.emax || msb >= w-1 {
		return 0, false
	}
	var sign uint32
	if neg {
		sign = 1 << 31
	}
	// The window holds digits h and h-1: at least 33 bits from the msb
	// down, enough for 24 significand bits and the round bit.
	win, base := mh, h*digitBits
	if h > 0 {
		win = mh<<digitBits | mag(h-1)
		base -= digitBits
	}
	q := max(msb-23, 0) // quantum: FP32's last significand bit (0 = subnormal range)
	s := win >> uint(q-base) & (1<<24 - 1)
	if q > 0 {
		rb := uint(q - 1 - base)
		if win>>rb&1 == 1 && (s&1 == 1 || win&(1<<rb-1) != 0 || low < h-1) {
			s++
			if s == 1<<24 {
				s >>= 1
				q++
			}
		}
	}
	return packFP32(sign, neg, s, q), true
}

// This file owns Vector, the bank of exact (KULISCH_FIXED) accumulators:
// element-wise adds of packed input values, merging of Kulisch wire values,
// carry resolution, the overflow check and the wire encoding.

package kulisch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Per-element flag bits.
const (
	fNonNegZero uint8 = 1 << iota // some finite input was not -0
	fPosInf
	fNegInf
	fNaN
	fHuge // internal headroom exhausted (needs ~2^41 adds): sticky overflow
)

// State is a Kulisch wire state byte.
type State uint8

// Kulisch wire states (docs/protocol.md section 6).
const (
	Finite  State = 0
	PosZero State = 1
	NegZero State = 2
	PosInf  State = 3
	NegInf  State = 4
	NaN     State = 5
)

func (s State) String() string {
	switch s {
	case Finite:
		return "FINITE"
	case PosZero:
		return "+0"
	case NegZero:
		return "-0"
	case PosInf:
		return "+inf"
	case NegInf:
		return "-inf"
	case NaN:
		return "NaN"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

const (
	digitBits = 32
	digitMask = 1<<digitBits - 1
	// fp32Digits: an FP32 term occupies bits 0..276, i.e. digits 0..8.
	fp32Digits = 9
	// normLimit bounds the batches between full carry resolutions. One
	// batch adds less than 2^32 to any digit, and a resolved digit is below
	// 2^32, so 2^29 batches keep every word below 2^62: no int64 overflow.
	normLimit = 1 << 29
	// hugeLimit: a resolved top digit this large could overflow within the
	// next normLimit batches; it is far beyond any legal width.
	hugeLimit = 1 << 60
	maxDigits = MaxWidth/digitBits + 1
)

// Vector is a bank of n exact accumulators of width W. Element i owns the
// carry-save digits digits[i*d:(i+1)*d]: digit j weighs 2^(32j) units and
// holds a signed int64 so adds never propagate carries. d is at least
// W/32+1 (room for the sign bit past W) and at least 9 (room for any FP32
// term, whatever W is), so no exact intermediate value ever wraps.
//
// A Vector is not safe for concurrent use.
type Vector struct {
	n, w, d int
	digits  []int64
	flags   []uint8
	// Row i's digits outside [^nlo[i], hi[i]] are zero: the FP32 and FP16
	// adds touch two digits, so rounding an element resolves two or three
	// digits instead of d (PutValues to FP32 is most of a KULISCH switch's
	// work). nlo holds the complement so that cleared memory (nlo 0, lo
	// 255 > hi 0) reads as an empty row. Every other writer of digits
	// widens the bounds to the whole row.
	nlo, hi []uint8
	// lane[i] is a float64 part of element i's value, which is the lane
	// plus the digits: FP32 and BF16 adds go to the lane while it holds
	// the sum exactly (the TwoSum error is zero and the magnitude is below
	// laneLim), and to the digits otherwise. For a few contributors of
	// similar magnitude, as gradients are, the digits are never touched:
	// 8 bytes an element instead of a row of d digits, which is what the
	// exact add cost in a switch (memory, not arithmetic: 2.4 ns a value
	// in cache, 9 in the switch's accumulator ring). Readers fold the lane
	// into the digits first (fold), except putFP32, which rounds a lane
	// alone with one float64 -> float32 conversion, as exact as rounding
	// the digits since the lane is the exact sum.
	lane    []float64
	laneLim float64
	pending uint32 // batches since the last full carry resolution
	// mag is scratch for rounding: a local would be zeroed (1 KiB) on
	// every call.
	mag magnitude
}

// NewVector returns n accumulators of width w bits, all empty (-0).
func NewVector(n, w int) (*Vector, error) {
	if err := ValidWidth(w); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: length %d", ErrRange, n)
	}
	d := w/digitBits + 1
	if d < fp32Digits {
		d = fp32Digits
	}
	// A lane value stays below 2^127 (so its bits fit digits 0..8 when
	// folded, and FP32 rounding sees no overflow it would not) and two
	// binades below what the width holds (so the width's range check
	// sees the same values either way).
	lim := math.Ldexp(1, min(127, w-ScaleExp-3))
	return &Vector{n: n, w: w, d: d, digits: make([]int64, n*d), flags: make([]uint8, n),
		nlo: make([]uint8, n), hi: make([]uint8, n), lane: make([]float64, n), laneLim: lim}, nil
}

// Len is the number of accumulators.
func (v *Vector) Len() int { return v.n }

// Width is W in bits.
func (v *Vector) Width() int { return v.w }

// WireSize is the byte size of one wire value, 1 + W/8.
func (v *Vector) WireSize() int { return WireSize(v.w) }

// Reset empties accumulator i (it reads as -0 again).
func (v *Vector) Reset(i int) {
	clear(v.digits[i*v.d : (i+1)*v.d])
	v.flags[i] = 0
	v.nlo[i], v.hi[i] = 0, 0
	v.lane[i] = 0
}

// empty reports whether row i's digits are all zero by its bounds.
func (v *Vector) empty(i int) bool { return int(^v.nlo[i]) > int(v.hi[i]) }

// fold adds element i's lane into its digits, exactly, and empties the
// lane. A lane value is a sum of FP32-domain values, so it is a multiple
// of the unit 2^-ScaleExp and below 2^127: its 53-bit significand, placed
// at that unit, spans at most three digits, the highest at most 8.
func (v *Vector) fold(i int) {
	x := v.lane[i]
	if x == 0 {
		return
	}
	v.lane[i] = 0
	b := math.Float64bits(x)
	m := b&(1<<52-1) | 1<<52 // normal: lane values are at least 2^-149
	sh := int(b>>52&0x7FF) - 1075 + ScaleExp
	if sh < 0 {
		m >>= uint(-sh) // exact: the bits shifted out are zero
		sh = 0
	}
	k, s := sh/digitBits, uint(sh%digitBits)
	lo, hi := m<<s, m>>(64-s) // m>>64 is 0 in Go
	dg := v.digits[i*v.d : (i+1)*v.d]
	parts := [3]int64{int64(lo & digitMask), int64(lo >> digitBits), int64(hi)}
	neg := b>>63 != 0
	for j, p := range parts {
		if neg {
			p = -p
		}
		dg[k+j] += p
	}
	v.nlo[i] = max(v.nlo[i], ^uint8(k))
	v.hi[i] = max(v.hi[i], uint8(k+2))
	// No resolve needed for headroom: a fold needs a lane add since the
	// last one, and each batch adds at most once per element, so between
	// two full resolutions (normLimit batches) a digit takes at most
	// 2*normLimit adds below 2^32: 2^62.
}

// wide marks row i as possibly nonzero in every digit.
func (v *Vector) wide(i int) { v.nlo[i], v.hi[i] = ^uint8(0), uint8(v.d-1) }

// ResetRange empties accumulators first..first+n-1.
func (v *Vector) ResetRange(first, n int) error {
	if first < 0 || n < 0 || first+n > v.n {
		return ErrRange
	}
	// Only rows with digits need clearing: the digits outside a row's
	// bounds are zero, and with the lane most rows have none. A row whose
	// nlo is 0 has none (its bounds start at ^0 = 255, past any hi), so
	// eight of those are skipped with one load: on lane-only sums the
	// test per row was most of the reset, a twentieth of a KULISCH
	// switch's CPU.
	nlo := v.nlo[first : first+n]
	for k := 0; k < len(nlo); {
		if k+8 <= len(nlo) && binary.LittleEndian.Uint64(nlo[k:]) == 0 {
			k += 8
			continue
		}
		if i := first + k; nlo[k] != 0 && !v.empty(i) {
			clear(v.digits[i*v.d : (i+1)*v.d])
		}
		k++
	}
	clear(v.flags[first : first+n])
	clear(v.nlo[first : first+n])
	clear(v.hi[first : first+n])
	clear(v.lane[first : first+n])
	return nil
}

func (v *Vector) span(first, n int) error {
	if first < 0 || first+n > v.n {
		return fmt.Errorf("%w: %d+%d > %d", ErrRange, first, n, v.n)
	}
	// Each batch touches each element at most once, so counting batches
	// bounds every digit's growth.
	v.pending++
	if v.pending >= normLimit {
		v.resolveAll()
	}
	return nil
}

func (v *Vector) resolveAll() {
	for i := 0; i < v.n; i++ {
		v.resolve(i)
	}
	v.pending = 0
}

// resolve propagates carries of element i: digits 0..d-2 end in [0,2^32),
// the top digit carries the sign.
func (v *Vector) resolve(i int) {
	dg := v.digits[i*v.d : (i+1)*v.d]
	if h := int(v.hi[i]); h < len(dg)-1 {
		// A short row (digits outside lo..h are zero): resolve lo..h and
		// put the carry in digit h+1. A non-negative value is then fully
		// resolved and stays short; a negative one is all ones above.
		var c int64
		for j := int(^v.nlo[i]); j <= h; j++ {
			x := dg[j] + c
			c = x >> digitBits
			dg[j] = x & digitMask
		}
		if c >= 0 { // |c| < 2^31: it fits digit h+1 as it is
			if c != 0 {
				dg[h+1] = c
				v.hi[i] = uint8(h + 1)
			}
			return
		}
		if h+1 == len(dg)-1 {
			dg[h+1] = c // the top digit holds the sign itself
		} else {
			dg[h+1] = c & digitMask
			for j := h + 2; j < len(dg)-1; j++ {
				dg[j] = digitMask
			}
			dg[len(dg)-1] = -1
		}
		v.wide(i)
		return
	}
	var c int64
	for j := 0; j < len(dg)-1; j++ {
		x := dg[j] + c
		c = x >> digitBits
		dg[j] = x & digitMask
	}
	top := dg[len(dg)-1] + c
	dg[len(dg)-1] = top
	if top > hugeLimit || top < -hugeLimit {
		v.flags[i] |= fHuge
	}
	v.wide(i) // a negative value is all ones up to the top
}

func (v *Vector) special(i int, nan, neg bool) {
	switch {
	case nan:
		v.flags[i] |= fNaN
	case neg:
		v.flags[i] |= fNegInf
	default:
		v.flags[i] |= fPosInf
	}
}

// AddFP32LE adds len(values)/4 packed little-endian binary32 values to
// accumulators first, first+1, ... exactly.
func (v *Vector) AddFP32LE(first int, values []byte) error {
	if len(values)%4 != 0 {
		return ErrLength
	}
	n := len(values) / 4
	if err := v.span(first, n); err != nil {
		return err
	}
	v.addFP32Rows(first, n, values[:4*n], false)
	return nil
}

// specialFlag is the flag of an infinity or NaN input.
func specialFlag(nan, neg bool) uint8 {
	switch {
	case nan:
		return fNaN
	case neg:
		return fNegInf
	}
	return fPosInf
}

// addScaled adds (-1)^neg * m * 2^sh units (m < 2^24, sh < 256) to a row:
// m<<(sh%32) has at most 55 bits, so it lands in two 32-bit digits, and the
// sign is applied without a branch (neg is 0 or -1).
func addScaled(row *[fp32Digits]int64, m uint64, sh uint32, neg int64) {
	x := m << (sh & 31)
	k := (sh >> 5) & 7
	row[k] += (int64(x&digitMask) ^ neg) - neg
	row[k+1] += (int64(x>>32) ^ neg) - neg
}

// AddBF16LE adds packed little-endian bfloat16 values exactly.
func (v *Vector) AddBF16LE(first int, values []byte) error {
	if len(values)%2 != 0 {
		return ErrLength
	}
	n := len(values) / 2
	if err := v.span(first, n); err != nil {
		return err
	}
	v.addFP32Rows(first, n, values[:2*n], true)
	return nil
}

// AddFP16LE adds packed little-endian binary16 values exactly.
func (v *Vector) AddFP16LE(first int, values []byte) error {
	if len(values)%2 != 0 {
		return ErrLength
	}
	n := len(values) / 2
	if err := v.span(first, n); err != nil {
		return err
	}
	v.addFP16Rows(first, n, values[:2*n])
	return nil
}

// AddINT8 adds int8 values (one byte each) exactly.
func (v *Vector) AddINT8(first int, values []byte) error {
	n := len(values)
	if err := v.span(first, n); err != nil {
		return err
	}
	d := v.d
	dg := v.digits[first*d : (first+n)*d]
	fl := v.flags[first : first+n]
	// x * 2^149 units = x * 2^21 in digit 4 (149 = 4*32 + 21); |x|*2^21 < 2^29.
	for j := range fl {
		dg[j*d+4] += int64(int8(values[j])) << 21
		fl[j] |= fNonNegZero // INT8 has no -0
		v.nlo[first+j] = max(v.nlo[first+j], ^uint8(4))
		v.hi[first+j] = max(v.hi[first+j], 4)
	}
	return nil
}

func checkWire(w int, values []byte) error { return checkValues(WireSize(w), values) }

// checkValues checks packed values of ws bytes each (a state byte, then the
// integer): the state is 0..5 and the integer nonzero exactly for FINITE.
// KULISCH and KULISCH_SCALED values share the rule; only ws differs.
func checkValues(ws int, values []byte) error {
	if len(values)%ws != 0 {
		return ErrLength
	}
	for off := 0; off < len(values); off += ws {
		st := values[off]
		if st > uint8(NaN) {
			return fmt.Errorf("%w: state %d", ErrWire, st)
		}
		nz := false
		for _, c := range values[off+1 : off+ws] {
			if c != 0 {
				nz = true
				break
			}
		}
		if nz != (st == uint8(Finite)) {
			if nz {
				return fmt.Errorf("%w: state %v with a nonzero integer", ErrWire, State(st))
			}
			return fmt.Errorf("%w: FINITE with a zero integer", ErrWire)
		}
	}
	return nil
}

// MergeKulisch adds packed Kulisch wire values (a child's exact partials, W
// bits each) to accumulators first, first+1, ... exactly. All values are
// validated before any is applied, so an error leaves the vector unchanged.
func (v *Vector) MergeKulisch(first int, values []byte) error {
	if err := checkWire(v.w, values); err != nil {
		return err
	}
	ws := WireSize(v.w)
	n := len(values) / ws
	if err := v.span(first, n); err != nil {
		return err
	}
	nb := v.w / 8
	for j := 0; j < n; j++ {
		val := values[j*ws : (j+1)*ws]
		i := first + j
		switch State(val[0]) {
		case PosZero:
			v.flags[i] |= fNonNegZero
		case NegZero:
		case PosInf, NegInf:
			v.special(i, false, val[0] == uint8(NegInf))
		case NaN:
			v.flags[i] |= fNaN
		case Finite:
			v.flags[i] |= fNonNegZero
			addWireInt(v.digits[i*v.d:(i+1)*v.d], val[1:], nb)
			v.wide(i)
		}
	}
	return nil
}

// addWireInt adds a little-endian two's-complement integer of nb bytes: its
// unsigned reading U, minus 2^(8nb) when the sign bit is set.
func addWireInt(dg []int64, b []byte, nb int) {
	j := 0
	for ; 4*j+4 <= nb; j++ {
		dg[j] += int64(binary.LittleEndian.Uint32(b[4*j:]))
	}
	if r := nb - 4*j; r > 0 {
		var x uint32
		for k := r - 1; k >= 0; k-- {
			x = x<<8 | uint32(b[4*j+k])
		}
		dg[j] += int64(x)
	}
	if b[nb-1]&0x80 != 0 {
		w := 8 * nb
		dg[w/digitBits] -= 1 << (w % digitBits)
	}
}

// value is a resolved view of one accumulator.
type value struct {
	state State
	over  bool // finite and does not fit W
	dg    []int64
}

// get resolves element i and classifies it.
func (v *Vector) get(i int) value {
	v.fold(i)
	v.resolve(i)
	f := v.flags[i]
	dg := v.digits[i*v.d : (i+1)*v.d]
	switch {
	case f&fNaN != 0 || f&(fPosInf|fNegInf) == fPosInf|fNegInf:
		return value{state: NaN}
	case f&fPosInf != 0:
		return value{state: PosInf}
	case f&fNegInf != 0:
		return value{state: NegInf}
	}
	if f&fHuge != 0 {
		return value{state: Finite, over: true, dg: dg}
	}
	zero := true
	for _, x := range dg {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		if f&fNonNegZero != 0 {
			return value{state: PosZero}
		}
		return value{state: NegZero}
	}
	return value{state: Finite, over: !fits(dg, v.w), dg: dg}
}

// fits reports whether resolved digits hold a value in [-2^(w-1), 2^(w-1)).
func fits(dg []int64, w int) bool {
	top := len(dg) - 1
	b := w - 1 // every bit at position >= b must equal the sign
	jb, rb := b/digitBits, b%digitBits
	if dg[top] >= 0 {
		if jb == top {
			return dg[top]>>rb == 0
		}
		if dg[jb]>>rb != 0 {
			return false
		}
		for _, x := range dg[jb+1:] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	if jb == top {
		return dg[top]>>rb == -1
	}
	if dg[jb]>>rb != digitMask>>rb {
		return false
	}
	for _, x := range dg[jb+1 : top] {
		if x != digitMask {
			return false
		}
	}
	return dg[top] == -1
}

// State resolves accumulator i and returns its wire state; err is
// ErrOverflow when the finite sum does not fit W.
func (v *Vector) State(i int) (State, error) {
	x := v.get(i)
	if x.over {
		return Finite, v.overErr(i)
	}
	return x.state, nil
}

func (v *Vector) overErr(i int) error {
	return fmt.Errorf("%w: element %d, W=%d", ErrOverflow, i, v.w)
}

// PutWire writes the Kulisch wire value of accumulator i into
// dst[:WireSize()]. A finite sum that does not fit W is ErrOverflow and
// nothing is written.
func (v *Vector) PutWire(dst []byte, i int) error {
	ws := WireSize(v.w)
	if len(dst) < ws {
		return ErrLength
	}
	x := v.get(i)
	if x.over {
		return v.overErr(i)
	}
	dst[0] = uint8(x.state)
	out := dst[1:ws]
	if x.state != Finite {
		clear(out)
		return nil
	}
	// Resolved digits are the two's-complement bits; the top digit's
	// int64 bits continue the sign.
	nb := len(out)
	j := 0
	for ; 4*j+4 <= nb; j++ {
		binary.LittleEndian.PutUint32(out[4*j:], uint32(x.dg[j]))
	}
	if r := nb - 4*j; r > 0 {
		u := uint32(x.dg[j])
		for k := 0; k < r; k++ {
			out[4*j+k] = byte(u >> (8 * k))
		}
	}
	return nil
}

// AppendWire appends the wire value of accumulator i to dst.
func (v *Vector) AppendWire(dst []byte, i int) ([]byte, error) {
	ws := WireSize(v.w)
	n := len(dst)
	if cap(dst)-n < ws {
		nd := make([]byte, n, n+ws)
		copy(nd, dst)
		dst = nd
	}
	if err := v.PutWire(dst[n:n+ws], i); err != nil {
		return dst[:n], err
	}
	return dst[:n+ws], nil
}

// Overflow reports whether accumulator i holds a finite sum that does not
// fit W (every export of it fails with ErrOverflow).
func (v *Vector) Overflow(i int) bool { return v.get(i).over }

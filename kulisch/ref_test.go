// The slow, obviously correct reference: exact sums as math/big integers in
// units of 2^-149, values decoded through float64 or the IEEE formulas, and
// rounding by big.Float (FP32) or by searching sorted tables of every finite
// binary16 / bfloat16 value (FP16, BF16).

package kulisch

import (
	"math"
	"math/big"
	"sort"
	"sync"
)

type refSum struct {
	sum        big.Int
	nan        bool
	pinf, ninf bool
	nonNegZero bool
}

var two149 = new(big.Int).Lsh(big.NewInt(1), 149)

// ratUnits converts an exact float64 to units of 2^-149 (must be integral).
func f64Units(x float64) *big.Int {
	bf := new(big.Float).SetPrec(2000).SetFloat64(x)
	bf.SetMantExp(bf, 149)
	i, acc := bf.Int(nil)
	if acc != big.Exact {
		panic("reference: not a multiple of 2^-149")
	}
	return i
}

func (r *refSum) addFloat(x float64, isNaN bool) {
	switch {
	case isNaN:
		r.nan = true
	case math.IsInf(x, 1):
		r.pinf = true
	case math.IsInf(x, -1):
		r.ninf = true
	default:
		if !(x == 0 && math.Signbit(x)) {
			r.nonNegZero = true
		}
		r.sum.Add(&r.sum, f64Units(x))
	}
}

func (r *refSum) addFP32(b uint32) {
	x := math.Float32frombits(b)
	r.addFloat(float64(x), x != x)
}

func (r *refSum) addBF16(h uint16) { r.addFP32(uint32(h) << 16) }

// refFP16Value decodes binary16 from the IEEE 754 definition.
func refFP16Value(h uint16) (float64, bool) {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 31
	f := float64(h & 0x3FF)
	switch e {
	case 31:
		if f != 0 {
			return 0, true
		}
		return math.Inf(int(s)), false
	case 0:
		return s * math.Ldexp(f, -24), false
	}
	return s * math.Ldexp(1+f/1024, e-15), false
}

func (r *refSum) addFP16(h uint16) {
	x, nan := refFP16Value(h)
	r.addFloat(x, nan)
}

func (r *refSum) addINT8(v int8) { r.addFloat(float64(v), false) }

func (r *refSum) merge(o *refSum) {
	r.nan = r.nan || o.nan
	r.pinf = r.pinf || o.pinf
	r.ninf = r.ninf || o.ninf
	r.nonNegZero = r.nonNegZero || o.nonNegZero
	r.sum.Add(&r.sum, &o.sum)
}

func (r *refSum) state() State {
	switch {
	case r.nan || (r.pinf && r.ninf):
		return NaN
	case r.pinf:
		return PosInf
	case r.ninf:
		return NegInf
	case r.sum.Sign() != 0:
		return Finite
	case r.nonNegZero:
		return PosZero
	}
	return NegZero
}

// fits reports -2^(w-1) <= sum < 2^(w-1).
func (r *refSum) fits(w int) bool {
	lim := new(big.Int).Lsh(big.NewInt(1), uint(w-1))
	neg := new(big.Int).Neg(lim)
	return r.sum.Cmp(neg) >= 0 && r.sum.Cmp(lim) < 0
}

// wire is the reference wire value (nil when a finite sum overflows).
func (r *refSum) wire(w int) []byte {
	out := make([]byte, 1+w/8)
	st := r.state()
	out[0] = byte(st)
	if st != Finite {
		return out
	}
	if !r.fits(w) {
		return nil
	}
	x := new(big.Int).Set(&r.sum)
	if x.Sign() < 0 {
		x.Add(x, new(big.Int).Lsh(big.NewInt(1), uint(w)))
	}
	be := x.Bytes()
	for k := range be {
		out[1+k] = be[len(be)-1-k]
	}
	return out
}

func (r *refSum) exactFloat() *big.Float {
	bf := new(big.Float).SetPrec(5000).SetInt(&r.sum)
	return bf.SetMantExp(bf, -149)
}

func (r *refSum) fp32() uint32 {
	switch st := r.state(); st {
	case NaN:
		return NaN32
	case PosInf:
		return 0x7F800000
	case NegInf:
		return 0xFF800000
	case PosZero:
		return 0
	case NegZero:
		return 0x80000000
	}
	f, _ := r.exactFloat().Float32()
	return math.Float32bits(f)
}

// A table of every finite nonnegative value of a 16-bit format, ascending,
// with its pattern; the entry past the largest finite is 2^(emax+1) with
// the infinity pattern, so IEEE overflow rounding falls out of the search.
type table16 struct {
	units []*big.Int
	pat   []uint16
}

var (
	tabOnce        sync.Once
	tabFP16, tabBF *table16
)

func tables() (*table16, *table16) {
	tabOnce.Do(func() {
		build := func(dec func(uint16) (float64, bool), inf uint16, top float64) *table16 {
			t := &table16{}
			for h := 0; h < int(inf); h++ {
				x, _ := dec(uint16(h))
				t.units = append(t.units, f64Units(x))
				t.pat = append(t.pat, uint16(h))
			}
			t.units = append(t.units, f64Units(top))
			t.pat = append(t.pat, inf)
			if !sort.SliceIsSorted(t.units, func(i, j int) bool { return t.units[i].Cmp(t.units[j]) < 0 }) {
				panic("table not sorted")
			}
			return t
		}
		tabFP16 = build(refFP16Value, 0x7C00, 65536)
		tabBF = build(func(h uint16) (float64, bool) {
			return float64(math.Float32frombits(uint32(h) << 16)), false
		}, 0x7F80, math.Ldexp(1, 128))
	})
	return tabFP16, tabBF
}

// round16 rounds |sum| by table search, ties to the even pattern.
func (t *table16) round(r *refSum, sign uint16, nan uint16) uint16 {
	switch st := r.state(); st {
	case NaN:
		return nan
	case PosInf:
		return t.pat[len(t.pat)-1]
	case NegInf:
		return sign | t.pat[len(t.pat)-1]
	case PosZero:
		return 0
	case NegZero:
		return sign
	}
	m := new(big.Int).Abs(&r.sum)
	var s uint16
	if r.sum.Sign() < 0 {
		s = sign
	}
	last := len(t.units) - 1
	if m.Cmp(t.units[last]) >= 0 {
		return s | t.pat[last]
	}
	i := sort.Search(len(t.units), func(i int) bool { return t.units[i].Cmp(m) > 0 }) - 1
	lo, hi := t.units[i], t.units[i+1]
	d1 := new(big.Int).Sub(m, lo)
	d2 := new(big.Int).Sub(hi, m)
	switch c := d1.Cmp(d2); {
	case c < 0:
		return s | t.pat[i]
	case c > 0:
		return s | t.pat[i+1]
	}
	if t.pat[i]&1 == 0 {
		return s | t.pat[i]
	}
	return s | t.pat[i+1]
}

func (r *refSum) fp16() uint16 { a, _ := tables(); return a.round(r, 0x8000, NaN16) }
func (r *refSum) bf16() uint16 { _, b := tables(); return b.round(r, 0x8000, NaNBF) }

// int8 returns the INT8 result and whether it exists.
func (r *refSum) int8() (int8, bool) {
	switch r.state() {
	case PosZero, NegZero:
		return 0, true
	case Finite:
	default:
		return 0, false
	}
	q, m := new(big.Int).DivMod(&r.sum, two149, new(big.Int))
	if m.Sign() != 0 || !q.IsInt64() || q.Int64() < -128 || q.Int64() > 127 {
		return 0, false
	}
	return int8(q.Int64()), true
}

// autoSet is the reference lossless set: a format belongs when rounding to
// it loses nothing (decoding the rounded value gives the same state and
// exact sum).
func (r *refSum) autoSet(w int) FormatSet {
	var s FormatSet
	st := r.state()
	if st != Finite || r.fits(w) {
		s |= 1 << KULISCH
	}
	if _, ok := r.int8(); ok && st != NegZero {
		s |= 1 << INT8
	}
	back := func(add func(*refSum)) bool {
		var b refSum
		add(&b)
		return b.state() == st && (st != Finite || b.sum.Cmp(&r.sum) == 0)
	}
	if back(func(b *refSum) { b.addFP32(r.fp32()) }) {
		s |= 1 << FP32
	}
	if back(func(b *refSum) { b.addFP16(r.fp16()) }) {
		s |= 1 << FP16
	}
	if back(func(b *refSum) { b.addBF16(r.bf16()) }) {
		s |= 1 << BF16
	}
	return s
}

func bigOne() *big.Int { return big.NewInt(1) }

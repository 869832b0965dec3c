package conformance

// Exact values for the multi-switch tests (tree_*_test.go), written only
// from docs/protocol.md section 6: every NumberGroup value (INT8, FP16,
// BF16, FP32, KULISCH, KULISCH_SCALED) is decoded into a Kulisch state and
// an exact integer in units of 2^-149, so partials can be compared with
// math/big sums bit for bit.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
)

// Kulisch value states (section 6).
const (
	trFinite  = 0
	trPosZero = 1
	trNegZero = 2
	trPosInf  = 3
	trNegInf  = 4
	trNaN     = 5
)

// trVal is an exact value: a Kulisch state and, for FINITE, a nonzero
// integer U in units of 2^-149.
type trVal struct {
	State uint8
	U     *big.Int
}

func (x trVal) String() string {
	switch x.State {
	case trFinite:
		return fmt.Sprintf("%s x 2^-149", x.U)
	case trPosZero:
		return "+0"
	case trNegZero:
		return "-0"
	case trPosInf:
		return "+inf"
	case trNegInf:
		return "-inf"
	}
	return "NaN"
}

func (x trVal) equal(y trVal) bool {
	if x.State != y.State {
		return false
	}
	return x.State != trFinite || x.U.Cmp(y.U) == 0
}

// trUnits is the value u x 2^-149 (FINITE, or +0 for u == 0).
func trUnits(u *big.Int) trVal {
	if u.Sign() == 0 {
		return trVal{State: trPosZero, U: new(big.Int)}
	}
	return trVal{State: trFinite, U: new(big.Int).Set(u)}
}

// trFloat is the exact value of f, which must be a multiple of 2^-149
// (every FP32, FP16, BF16 and INT8 value is).
func trFloat(f float64) trVal {
	switch {
	case math.IsNaN(f):
		return trVal{State: trNaN, U: new(big.Int)}
	case math.IsInf(f, 1):
		return trVal{State: trPosInf, U: new(big.Int)}
	case math.IsInf(f, -1):
		return trVal{State: trNegInf, U: new(big.Int)}
	case f == 0:
		if math.Signbit(f) {
			return trVal{State: trNegZero, U: new(big.Int)}
		}
		return trVal{State: trPosZero, U: new(big.Int)}
	}
	mant, exp := math.Frexp(f) // f = mant x 2^exp, 0.5 <= |mant| < 1
	u := big.NewInt(int64(math.Ldexp(mant, 53)))
	e := exp - 53 + 149
	if e >= 0 {
		u.Lsh(u, uint(e))
	} else {
		if int(u.TrailingZeroBits()) < -e {
			panic(fmt.Sprintf("trFloat: %g is not a multiple of 2^-149", f))
		}
		neg := u.Sign() < 0
		u.Abs(u)
		u.Rsh(u, uint(-e))
		if neg {
			u.Neg(u)
		}
	}
	return trVal{State: trFinite, U: u}
}

func trF32(f float32) trVal { return trFloat(float64(f)) }

// trAdd is the exact sum of finite values and zeros (the only values these
// tests sum); an exact zero sum of nonzero terms is +0.
func trAdd(xs ...trVal) trVal {
	s := new(big.Int)
	allNegZero := true
	for _, x := range xs {
		switch x.State {
		case trFinite:
			s.Add(s, x.U)
			allNegZero = false
		case trPosZero:
			allNegZero = false
		case trNegZero:
		default:
			panic("trAdd: special value")
		}
	}
	if s.Sign() == 0 && allNegZero && len(xs) > 0 {
		return trVal{State: trNegZero, U: new(big.Int)}
	}
	return trUnits(s)
}

// round32 rounds x to the nearest binary32, ties to even.
func (x trVal) round32() float32 {
	switch x.State {
	case trPosZero:
		return 0
	case trNegZero:
		return float32(math.Copysign(0, -1))
	case trPosInf:
		return float32(math.Inf(1))
	case trNegInf:
		return float32(math.Inf(-1))
	case trNaN:
		return float32(math.NaN())
	}
	f := new(big.Float).SetInt(x.U)
	f.SetMantExp(f, -149)
	r, _ := f.Float32()
	return r
}

// trHalf decodes an IEEE binary16.
func trHalf(b uint16) float64 {
	sign := 1.0
	if b&0x8000 != 0 {
		sign = -1
	}
	exp := int(b>>10) & 0x1F
	m := float64(b & 0x3FF)
	switch exp {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+m, exp-25)
}

func trInt8Group(v []int8) group {
	g := group{Format: fmtINT8, Count: uint16(len(v)), Values: make([]byte, len(v))}
	for i, x := range v {
		g.Values[i] = byte(x)
	}
	return g
}

func trFP16Group(bits []uint16) group {
	g := group{Format: fmtFP16, Count: uint16(len(bits)), Values: make([]byte, 2*len(bits))}
	for i, x := range bits {
		binary.LittleEndian.PutUint16(g.Values[2*i:], x)
	}
	return g
}

// trGroupVals decodes every value of a group exactly.
func trGroupVals(g group) []trVal {
	r := make([]trVal, g.Count)
	var kv []kulischVal
	if g.Format == fmtKulisch || g.Format == fmtScaled {
		kv = g.kulischVals()
	}
	for i := range r {
		switch g.Format {
		case fmtINT8:
			r[i] = trFloat(float64(int8(g.Values[i])))
		case fmtFP16:
			r[i] = trFloat(trHalf(binary.LittleEndian.Uint16(g.Values[2*i:])))
		case fmtBF16:
			r[i] = trFloat(float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(g.Values[2*i:])) << 16)))
		case fmtFP32:
			r[i] = trFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(g.Values[4*i:]))))
		case fmtKulisch:
			r[i] = trVal{State: kv[i].State, U: kv[i].Int}
		case fmtScaled:
			u := new(big.Int).Lsh(kv[i].Int, uint(g.Shift))
			r[i] = trVal{State: kv[i].State, U: u}
		}
	}
	return r
}

func trKulischVals(xs []trVal, shift int) []kulischVal {
	r := make([]kulischVal, len(xs))
	for i, x := range xs {
		v := new(big.Int)
		if x.State == trFinite {
			if int(x.U.TrailingZeroBits()) < shift {
				panic("trKulischVals: value not a multiple of 2^shift")
			}
			v.Abs(x.U)
			v.Rsh(v, uint(shift))
			if x.U.Sign() < 0 {
				v.Neg(v)
			}
		}
		r[i] = kulischVal{State: x.State, Int: v}
	}
	return r
}

// trKulischGroup is a KULISCH group of width w bits.
func trKulischGroup(w int, xs []trVal) group { return kulischGroup(w/8, trKulischVals(xs, 0)) }

// trScaledGroup is a KULISCH_SCALED group with the given B and Shift.
func trScaledGroup(b, shift int, xs []trVal) group {
	return scaledGroup(b, shift, trKulischVals(xs, shift))
}

// trMinBytes is the fewest bytes of a two's-complement integer holding v.
func trMinBytes(v *big.Int) int {
	m := new(big.Int).Set(v)
	if m.Sign() < 0 {
		m.Neg(m)
		m.Sub(m, big.NewInt(1))
	}
	n := (m.BitLen() + 1 + 7) / 8
	if n < 1 {
		n = 1
	}
	return n
}

// trScaledCanon is the Shift and B of section 6's description of prismd's
// KULISCH_SCALED groups: Shift = the lowest set bit over the FINITE values,
// B = the fewest bytes holding every shifted value with its sign, Shift
// lowered to W - 8B if Shift + 8B > W. ok is false when the group has no
// FINITE value (then nothing constrains either).
func trScaledCanon(w int, xs []trVal) (shift, b int, ok bool) {
	tz := -1
	for _, x := range xs {
		if x.State == trFinite {
			if z := int(x.U.TrailingZeroBits()); tz < 0 || z < tz {
				tz = z
			}
		}
	}
	if tz < 0 {
		return 0, 1, false
	}
	b = 1
	for _, x := range xs {
		if x.State == trFinite {
			v := new(big.Int).Abs(x.U)
			v.Rsh(v, uint(tz))
			if x.U.Sign() < 0 {
				v.Neg(v)
			}
			if n := trMinBytes(v); n > b {
				b = n
			}
		}
	}
	shift = tz
	if shift+8*b > w {
		shift = w - 8*b
	}
	return shift, b, true
}

// trCheckScaled checks a received KULISCH_SCALED group against section 6's
// description of prismd's encoder; "" when it matches.
func trCheckScaled(g group, w int) string {
	s, b, ok := trScaledCanon(w, trGroupVals(g))
	if ok && (int(g.Shift) != s || int(g.Bytes) != b) {
		return fmt.Sprintf("%d values with Shift %d, B %d; the lowest set bit and fewest bytes give Shift %d, B %d", g.Count, g.Shift, g.Bytes, s, b)
	}
	if plain := 4 + pad4(int(g.Count)*(1+w/8)); g.length() >= plain {
		return fmt.Sprintf("%d values in %d bytes scaled; plain KULISCH holds them in %d (a group plain KULISCH holds in no more bytes is sent as KULISCH)", g.Count, g.length(), plain)
	}
	return ""
}

package conformance

// Exact values for the multi-switch tests (tree_*_test.go), written only
// from docs/protocol.md section 6: every NumberGroup value (INT8, FP16,
// BF16, FP32, KULISCH, KULISCH_SCALED, KULISCH_F64) is decoded into a Kulisch state and
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
	if g.Format == fmtKulisch || g.Format == fmtScaled || g.Format == fmtF64 {
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
		case fmtKulisch, fmtF64:
			// KULISCH_F64: the binary64 table of 6 (f64Kulisch), already
			// in units of 2^-149, so the value equals the KULISCH or
			// KULISCH_SCALED encoding of the same number.
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

// trF64Bits is the KULISCH_F64 encoding of x (6): the binary64 bit
// pattern of the same number (ok false when binary64 does not hold x
// exactly, i.e. its integer needs more than 53 significant bits).
func trF64Bits(x trVal) (uint64, bool) {
	switch x.State {
	case trPosZero:
		return 0, true
	case trNegZero:
		return 1 << 63, true
	case trPosInf:
		return 0x7FF0000000000000, true
	case trNegInf:
		return 0xFFF0000000000000, true
	case trNaN:
		return f64NaN, true
	}
	f := new(big.Float).SetPrec(0).SetInt(x.U) // exact
	f.SetMantExp(f, -149)
	v, acc := f.Float64()
	if acc != big.Exact || math.IsInf(v, 0) || v == 0 {
		return 0, false
	}
	return math.Float64bits(v), true
}

// trF64Exact reports whether binary64 holds x exactly.
func trF64Exact(x trVal) bool { _, ok := trF64Bits(x); return ok }

// trFP32Exact reports whether binary32 holds x exactly.
func trFP32Exact(x trVal) bool {
	if x.State != trFinite {
		return true
	}
	return trF32(x.round32()).equal(x)
}

// trF64Group is a KULISCH_F64 group of xs; every value must be one binary64
// holds exactly.
func trF64Group(xs []trVal) group {
	bs := make([]uint64, len(xs))
	for i, x := range xs {
		b, ok := trF64Bits(x)
		if !ok {
			panic(fmt.Sprintf("trF64Group: binary64 does not hold %v", x))
		}
		bs[i] = b
	}
	return f64Group(bs)
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

// Values one group carries at MTU 1500 (6, Packetisation): 181 KULISCH_F64
// and 363 FP32 values.
const (
	trF64PerFrame  = 181
	trFP32PerFrame = 363
)

// trCheckChoice checks one partial frame of a KULISCH_FIXED operation
// (first transmission) against section 6's [choice] paragraph on how prismd
// encodes exact partials by default (`kulisch_partials: f64`, the lab's
// configuration): a frame goes as ONE KULISCH_F64 group when binary64
// holds every value the frame would carry at 8 bytes each (up to what the
// MTU budget holds: 181 values); under an AUTO Partial Policy a frame whose
// values FP32 holds exactly goes as FP32 first; any other frame is planned
// as KULISCH_SCALED (and KULISCH) groups. want is the exact partial of the
// whole vector. "" when the frame agrees.
//
// A receiver does not know how many values were ready when the frame was
// built, so the checks are the ones that hold whatever that number was:
// a frame with KULISCH or KULISCH_SCALED groups is wrong only when binary64
// holds every value of [First, First + 181) (then the 1..181 values the
// KULISCH_F64 frame would have carried were all exact), and an AUTO frame
// sent as KULISCH_F64 is wrong only when FP32 holds every value of
// [First, First + 363).
func trCheckChoice(d dataFrame, want []trVal, partial uint8) string {
	all := func(k int, ok func(trVal) bool) bool {
		for i := int(d.First); i < len(want) && i < int(d.First)+k; i++ {
			if !ok(want[i]) {
				return false
			}
		}
		return true
	}
	f64, exact := 0, 0
	for _, g := range d.Groups {
		switch g.Format {
		case fmtF64:
			f64++
		case fmtKulisch, fmtScaled:
			exact++
		}
	}
	end := d.First + uint32(d.ElemCount)
	switch {
	case f64 > 0 && len(d.Groups) != 1:
		return fmt.Sprintf("[%d,%d) has %d groups, %d of them KULISCH_F64; 6 [choice]: prismd sends such a frame as one KULISCH_F64 group", d.First, end, len(d.Groups), f64)
	case f64 > 0 && partial == fmtAuto && all(trFP32PerFrame, trFP32Exact):
		return fmt.Sprintf("[%d,%d) sent as KULISCH_F64 under AUTO, but FP32 holds every value of [%d,%d); 6 [choice]: a frame whose values FP32 holds exactly goes as FP32 first", d.First, end, d.First, min(int(d.First)+trFP32PerFrame, len(want)))
	case exact > 0 && all(trF64PerFrame, trF64Exact):
		return fmt.Sprintf("[%d,%d) sent as %d KULISCH/KULISCH_SCALED group(s) of %d, but binary64 holds every value of [%d,%d); 6 [choice]: prismd by default sends a frame as one KULISCH_F64 group when binary64 holds every value it would carry", d.First, end, exact, len(d.Groups), d.First, min(int(d.First)+trF64PerFrame, len(want)))
	}
	return ""
}

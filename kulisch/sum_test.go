package kulisch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

func soak() bool { return os.Getenv("PRISMD_SOAK") == "1" }

// term is one contribution in some input format.
type term struct {
	f    Format
	bits uint32 // pattern in the low bits
}

func (t term) addRef(r *refSum) {
	switch t.f {
	case FP32:
		r.addFP32(t.bits)
	case FP16:
		r.addFP16(uint16(t.bits))
	case BF16:
		r.addBF16(uint16(t.bits))
	case INT8:
		r.addINT8(int8(t.bits))
	}
}

func (t term) put(b []byte) []byte {
	switch t.f {
	case FP32:
		return binary.LittleEndian.AppendUint32(b, t.bits)
	case FP16, BF16:
		return binary.LittleEndian.AppendUint16(b, uint16(t.bits))
	}
	return append(b, byte(t.bits))
}

// gen draws values of one generator class.
type gen struct {
	r    *rand.Rand
	kind int
}

const nKinds = 8

func (g *gen) fp32() uint32 {
	r := g.r
	sign := uint32(r.IntN(2)) << 31
	switch g.kind {
	case 0: // any pattern, NaN and inf included
		return r.Uint32()
	case 1: // mixed exponents across the whole range
		return sign | uint32(r.IntN(255))<<23 | r.Uint32()&0x7FFFFF
	case 2: // subnormals and the smallest normals
		return sign | uint32(r.IntN(3))<<23 | r.Uint32()&0x7FFFFF>>r.IntN(23)
	case 3: // huge values: overflow of the rounded result
		return sign | uint32(250+r.IntN(5))<<23 | r.Uint32()&0x7FFFFF
	case 4: // specials and zeros mixed with small values
		switch r.IntN(6) {
		case 0:
			return 0x7F800000 | sign
		case 1:
			return 0x7FC00000 | r.Uint32()&0x3FFFFF | sign
		case 2, 3:
			return sign
		}
		return sign | uint32(120+r.IntN(10))<<23 | r.Uint32()&0x7FFFFF
	case 5: // few significant bits, nearby exponents: many ties
		return sign | uint32(100+r.IntN(40))<<23 | (r.Uint32()&0x7)<<20
	}
	// narrow exponent band
	return sign | uint32(126+r.IntN(4))<<23 | r.Uint32()&0x7FFFFF
}

func (g *gen) term() term {
	r := g.r
	switch r.IntN(8) {
	case 0:
		return term{FP16, r.Uint32() & 0xFFFF}
	case 1:
		return term{BF16, g.fp32() >> 16}
	case 2:
		return term{INT8, r.Uint32() & 0xFF}
	}
	return term{FP32, g.fp32()}
}

// sumTerms builds a sum of n terms; kind 6 makes it cancellation heavy and
// kind 7 constructs exact halfway values for some output format.
func (g *gen) sumTerms(n int) []term {
	r := g.r
	ts := make([]term, 0, n+4)
	switch g.kind {
	case 6: // cancellation: pairs x, -x with small remainders
		for len(ts) < n {
			x := g.fp32()
			ts = append(ts, term{FP32, x}, term{FP32, x ^ 1<<31})
			if r.IntN(2) == 0 {
				ts = append(ts, term{FP32, uint32(r.IntN(255))<<23 | r.Uint32()&0x7FFFFF})
			}
		}
	case 7: // a value plus exactly half of its ulp in some format
		var ulpExp int
		var base uint32
		switch r.IntN(3) {
		case 0: // FP32: base has ulp 2^(e-150) (normal) or 2^-149
			e := r.IntN(254)
			base = uint32(e)<<23 | r.Uint32()&0x7FFFFF
			ulpExp = max(e, 1) - 150
		case 1: // FP16 value, ulp 2^(e-25)
			e := 1 + r.IntN(30)
			b16 := uint16(e)<<10 | uint16(r.Uint32()&0x3FF)
			base = FP16ToFP32(b16)
			ulpExp = e - 25
		default: // BF16 value, ulp 2^(e-134)
			e := 1 + r.IntN(253)
			base = uint32(e)<<23 | (r.Uint32()&0x7F)<<16
			ulpExp = e - 134
		}
		half := ulpExp - 1
		if half < -149 {
			half = -149 // FP32 subnormal grid: no exact half, still a boundary
		}
		hb := math.Float32bits(float32(math.Ldexp(1, half)))
		sign := uint32(r.IntN(2)) << 31
		ts = append(ts, term{FP32, base | sign}, term{FP32, hb | sign})
		if r.IntN(2) == 0 { // perturb by the smallest step: just off the tie
			ts = append(ts, term{FP32, 1 | uint32(r.IntN(2))<<31})
		}
		for len(ts) < n { // cancelling noise keeps the tie
			x := g.fp32()
			if x&0x7F800000 == 0x7F800000 {
				continue
			}
			ts = append(ts, term{FP32, x}, term{FP32, x ^ 1<<31})
		}
	default:
		for range n {
			ts = append(ts, g.term())
		}
	}
	r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	return ts
}

var widths = []int{64, 128, 280, 288, 320, 512, 4096}

// checkElement compares element i of v with the reference.
func checkElement(t *testing.T, v *Vector, i int, ref *refSum, ctx func() string) bool {
	t.Helper()
	w := v.Width()
	st := ref.state()
	over := st == Finite && !ref.fits(w)
	got := make([]byte, WireSize(w))
	err := v.PutWire(got, i)
	if over {
		if !errors.Is(err, ErrOverflow) {
			t.Errorf("%s: overflowing sum exported: err=%v", ctx(), err)
			return false
		}
		if _, err := v.RoundFP32(i); !errors.Is(err, ErrOverflow) {
			t.Errorf("%s: RoundFP32 of overflowing sum: err=%v", ctx(), err)
			return false
		}
		if _, err := v.PutValues(make([]byte, 4), i, 1, FP32); !errors.Is(err, ErrOverflow) {
			t.Errorf("%s: PutValues FP32 of overflowing sum: err=%v", ctx(), err)
			return false
		}
		return true
	}
	if err != nil {
		t.Errorf("%s: PutWire: %v", ctx(), err)
		return false
	}
	if want := ref.wire(w); !bytes.Equal(got, want) {
		t.Errorf("%s: wire\n got %x\nwant %x", ctx(), got, want)
		return false
	}
	if g, _ := v.RoundFP32(i); g != ref.fp32() {
		t.Errorf("%s: FP32 got %#08x want %#08x", ctx(), g, ref.fp32())
		return false
	}
	// PutValues has its own fused FP32 path (what RESULT frames use).
	var p4 [4]byte
	if n, err := v.PutValues(p4[:], i, 1, FP32); err != nil || n != 4 || binary.LittleEndian.Uint32(p4[:]) != ref.fp32() {
		t.Errorf("%s: PutValues FP32 got %#08x (%v) want %#08x", ctx(), binary.LittleEndian.Uint32(p4[:]), err, ref.fp32())
		return false
	}
	if g, _ := v.RoundFP16(i); g != ref.fp16() {
		t.Errorf("%s: FP16 got %#04x want %#04x", ctx(), g, ref.fp16())
		return false
	}
	if g, _ := v.RoundBF16(i); g != ref.bf16() {
		t.Errorf("%s: BF16 got %#04x want %#04x", ctx(), g, ref.bf16())
		return false
	}
	wi, wok := ref.int8()
	gi, gerr := v.INT8(i)
	if wok != (gerr == nil) || (wok && wi != gi) {
		t.Errorf("%s: INT8 got %d,%v want %d,%v", ctx(), gi, gerr, wi, wok)
		return false
	}
	if gerr != nil && !errors.Is(gerr, ErrNotInt8) {
		t.Errorf("%s: INT8 error %v", ctx(), gerr)
		return false
	}
	gs, _ := v.AutoSet(i)
	if ws := ref.autoSet(w); gs != ws {
		t.Errorf("%s: AutoSet got %08b want %08b", ctx(), gs, ws)
		return false
	}
	return true
}

// TestRandomSums compares element-wise vector sums with the math/big
// reference: 10^6 sums in a normal run (1.6*10^7 with PRISMD_SOAK=1).
func TestRandomSums(t *testing.T) {
	const elems = 64
	batches := 1_000_000 / elems / nKinds
	if soak() {
		batches *= 16
	}
	for kind := 0; kind < nKinds; kind++ {
		kind := kind
		t.Run("kind"+string(rune('0'+kind)), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(kind), 0x5eed))
			g := &gen{r: r, kind: kind}
			refs := make([]refSum, elems)
			var buf []byte
			fails := 0
			for b := 0; b < batches && fails < 5; b++ {
				w := widths[r.IntN(len(widths))]
				if r.IntN(2) == 0 {
					w = max(w, RequiredWidth(16))
				}
				v, _ := NewVector(elems, w)
				for i := range refs {
					refs[i] = refSum{}
				}
				nt := 1 + r.IntN(6)
				sums := make([][]term, elems)
				for i := range sums {
					sums[i] = g.sumTerms(nt)
				}
				// Deliver step by step; at each step consecutive elements
				// with the same format share one batch call.
				for step := 0; ; step++ {
					any := false
					for i := 0; i < elems; {
						if step >= len(sums[i]) {
							i++
							continue
						}
						any = true
						f := sums[i][step].f
						j := i
						buf = buf[:0]
						for j < elems && step < len(sums[j]) && sums[j][step].f == f {
							buf = sums[j][step].put(buf)
							sums[j][step].addRef(&refs[j])
							j++
						}
						if err := v.Add(i, f, buf); err != nil {
							t.Fatal(err)
						}
						i = j
					}
					if !any {
						break
					}
				}
				for i := range refs {
					ts := sums[i]
					if !checkElement(t, v, i, &refs[i], func() string {
						return "W=" + itoa(w) + " terms=" + fmtTerms(ts)
					}) {
						fails++
					}
				}
			}
		})
	}
}

func itoa(n int) string {
	return string(binary.AppendUvarint(nil, 0)[:0]) + func() string {
		s := ""
		if n == 0 {
			return "0"
		}
		neg := n < 0
		if neg {
			n = -n
		}
		for n > 0 {
			s = string(rune('0'+n%10)) + s
			n /= 10
		}
		if neg {
			s = "-" + s
		}
		return s
	}()
}

func fmtTerms(ts []term) string {
	s := "["
	for _, t := range ts {
		s += t.f.String() + ":" + hex(t.bits) + " "
	}
	return s + "]"
}

func hex(x uint32) string {
	const d = "0123456789abcdef"
	s := ""
	for k := 7; k >= 0; k-- {
		s += string(d[(x>>(4*k))&15])
	}
	return s
}

// TestSoakKulisch is what `make soak` (-run Soak, PRISMD_SOAK=1) runs: the
// randomized comparisons scaled up (1.6*10^7 sums), every FP32 pattern
// round-tripped, and more permutations, trees and AUTO plans.
func TestSoakKulisch(t *testing.T) {
	if !soak() {
		t.Skip("set PRISMD_SOAK=1")
	}
	t.Run("sums", TestRandomSums)
	t.Run("fp32", TestFP32RoundTrip)
	t.Run("permutations", TestPermutations)
	t.Run("trees", TestTreeShapes)
	t.Run("auto", TestAutoRandom)
	t.Run("f64", TestMergeF64AgainstReference)
	t.Run("f64-values", TestCheckF64EachValue)
}

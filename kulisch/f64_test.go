package kulisch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// f64Ref decodes a KULISCH_F64 value from the binary64 definition into the
// reference (nil: malformed at width w), independently of f64.go: the
// value through big.Float, its multiple-of-2^-149 and range tests on the
// exact integer.
func f64Ref(b uint64, w int) *refSum {
	r := &refSum{}
	x := math.Float64frombits(b)
	switch {
	case math.IsNaN(x):
		if b != 0x7FF8000000000000 {
			return nil
		}
		r.nan = true
		return r
	case math.IsInf(x, 0):
		r.addFloat(x, false)
		return r
	case x == 0:
		r.addFloat(x, false)
		return r
	}
	bf := new(big.Float).SetPrec(2000).SetFloat64(x)
	bf.SetMantExp(bf, ScaleExp)
	i, acc := bf.Int(nil)
	if acc != big.Exact {
		return nil // not a multiple of 2^-149
	}
	lim := new(big.Int).Lsh(big.NewInt(1), uint(w-1))
	if new(big.Int).Abs(i).Cmp(lim) >= 0 {
		return nil // magnitude 2^(w-1) units or more
	}
	r.nonNegZero = true
	r.sum.Set(i)
	return r
}

// f64Sample draws binary64 values of every kind a partial may carry, and
// malformed ones.
func f64Sample(rng *rand.Rand, w int) uint64 {
	switch rng.IntN(16) {
	case 0:
		return 0
	case 1:
		return 1 << 63
	case 2:
		return math.Float64bits(math.Inf(1 - 2*rng.IntN(2)))
	case 3:
		return 0x7FF8000000000000
	case 4: // another NaN: malformed
		return 0x7FF0000000000001 | rng.Uint64()&(1<<51-1)
	case 5: // binary64 subnormal: malformed
		return 1 + rng.Uint64()&(1<<52-2)
	case 6: // near the bottom: 2^-149 .. 2^-100 times small odd integers, some too fine
		return math.Float64bits(math.Ldexp(float64(1+2*rng.IntN(1000)), -160+rng.IntN(60)))
	case 7: // near the top of W, some past it
		return math.Float64bits(math.Ldexp(float64(1+2*rng.IntN(1<<20)), w-175+rng.IntN(10)))
	case 8: // random bits
		return rng.Uint64()
	}
	// Sums of two FP32 gradients: what a leaf sends.
	a := float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
	c := float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
	return math.Float64bits(float64(a) + float64(c))
}

// TestMergeF64AgainstReference: every KULISCH_F64 value is accepted exactly
// when the reference decodes it; accepted ones merge to the reference's
// exact sum (several per element, some spilling into the digits), and a
// refused batch leaves the vector unchanged.
func TestMergeF64AgainstReference(t *testing.T) {
	eachKernel(t, "avx2", &haveAVX2, testMergeF64AgainstReference)
}

func testMergeF64AgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	for _, w := range []int{280, 288, 640} {
		const n = 64
		v, _ := NewVector(n, w)
		refs := make([]*refSum, n)
		for i := range refs {
			refs[i] = &refSum{}
		}
		accepted, refused := 0, 0
		rounds := 400
		if soak() {
			rounds = 40000
		}
		for round := 0; round < rounds; round++ {
			vals := make([]byte, 8*n)
			batch := make([]*refSum, n)
			ok := true
			// One batch in four may hold malformed values; the others
			// redraw until the reference accepts, so most batches apply.
			mayRefuse := round%4 == 0
			for i := range n {
				b := f64Sample(rng, w)
				for !mayRefuse && f64Ref(b, w) == nil {
					b = f64Sample(rng, w)
				}
				binary.LittleEndian.PutUint64(vals[8*i:], b)
				if batch[i] = f64Ref(b, w); batch[i] == nil {
					ok = false
				}
			}
			before := wires(t, v, w)
			err := v.MergeF64(0, vals)
			if !ok {
				refused++
				if !errors.Is(err, ErrWire) {
					t.Fatalf("W=%d: malformed batch: %v", w, err)
				}
				if !bytes.Equal(before, wires(t, v, w)) {
					t.Fatalf("W=%d: a refused batch changed the vector", w)
				}
				continue
			}
			if err != nil {
				t.Fatalf("W=%d: valid batch refused: %v", w, err)
			}
			accepted++
			for i := range n {
				refs[i].merge(batch[i])
			}
			for i := range n {
				want := refs[i].wire(w)
				got := make([]byte, WireSize(w))
				err := v.PutWire(got, i)
				if want == nil {
					if !errors.Is(err, ErrOverflow) {
						t.Fatalf("W=%d element %d: sum past W: %v", w, i, err)
					}
					refs[i] = &refSum{} // start the element again
					v.Reset(i)
					continue
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("W=%d round %d element %d: %x %v, want %x", w, round, i, got, err, want)
				}
			}
		}
		if accepted < 5 || refused < 5 {
			t.Fatalf("W=%d: %d batches accepted, %d refused: the sample does not exercise both", w, accepted, refused)
		}
	}
}

// TestCheckF64EachValue: one value at a time, MergeF64 accepts exactly
// what the reference decodes, and yields its exact value.
func TestCheckF64EachValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(85, 86))
	for _, w := range []int{64, 280, 288, 640, 4096} {
		seen := [2]int{}
		values := 20000
		if soak() {
			values = 2000000
		}
		for range values {
			b := f64Sample(rng, w)
			ref := f64Ref(b, w)
			v, _ := NewVector(1, w)
			var buf [8]byte
			binary.LittleEndian.PutUint64(buf[:], b)
			err := v.MergeF64(0, buf[:])
			if (err == nil) != (ref != nil) {
				t.Fatalf("W=%d %#016x: %v, reference accepts: %v", w, b, err, ref != nil)
			}
			if ref == nil {
				seen[0]++
				continue
			}
			seen[1]++
			got := make([]byte, WireSize(w))
			if err := v.PutWire(got, 0); err != nil || !bytes.Equal(got, ref.wire(w)) {
				t.Fatalf("W=%d %#016x: %x %v, want %x", w, b, got, err, ref.wire(w))
			}
		}
		if seen[0] < 1000 || seen[1] < 1000 {
			t.Fatalf("W=%d: %d refused, %d accepted", w, seen[0], seen[1])
		}
	}
}

// wires is every element's Kulisch wire value (zeros for one past W).
func wires(t *testing.T, v *Vector, w int) []byte {
	out := make([]byte, v.Len()*WireSize(w))
	for i := range v.Len() {
		_ = v.PutWire(out[i*WireSize(w):], i)
	}
	return out
}

// TestF64RoundTrip: a leaf's sums (FP32 terms added into a vector) that
// F64Run reports binary64 holds go out through PutF64 and merge at a parent
// into exactly the values a KULISCH encoding gives; F64Run stops at the
// first element whose value needs the digits.
func TestF64RoundTrip(t *testing.T) { eachKernel(t, "avx2", &haveAVX2, testF64RoundTrip) }

func testF64RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(83, 84))
	const w, n = 288, 500
	leaf, _ := NewVector(n, w)
	for range 3 {
		vals := make([]byte, 4*n)
		for i := range n {
			x := float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
			switch rng.IntN(50) {
			case 0:
				x = float32(math.Inf(1))
			case 1:
				x = float32(math.Copysign(0, -1))
			}
			binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(x))
		}
		leaf.AddFP32LE(0, vals)
	}
	// Element 300 gets a term 2^100 times larger: its exact sum needs more
	// than 53 bits, so it lives in the digits.
	big1 := make([]byte, 4)
	binary.LittleEndian.PutUint32(big1, math.Float32bits(float32(math.Ldexp(1, 90))))
	leaf.AddFP32LE(300, big1)
	if got := leaf.F64Run(0, n); got != 300 {
		t.Fatalf("F64Run = %d, want 300 (element 300 needs the digits)", got)
	}
	if err := leaf.PutF64(make([]byte, 8), 300, 1); !errors.Is(err, ErrNotLossless) {
		t.Fatalf("PutF64 of a digit element: %v", err)
	}
	// The same element inside a run the vector kernel takes four at a time.
	if err := leaf.PutF64(make([]byte, 8*16), 292, 16); !errors.Is(err, ErrNotLossless) {
		t.Fatalf("PutF64 of a run holding a digit element: %v", err)
	}
	f64 := make([]byte, 8*300)
	if err := leaf.PutF64(f64, 0, 300); err != nil {
		t.Fatal(err)
	}
	parent, _ := NewVector(n, w)
	if err := parent.MergeF64(0, f64); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		a, b := make([]byte, WireSize(w)), make([]byte, WireSize(w))
		if err := leaf.PutWire(a, i); err != nil {
			t.Fatal(err)
		}
		if err := parent.PutWire(b, i); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("element %d: leaf %x, parent after KULISCH_F64 %x", i, a, b)
		}
	}
}

// TestF64Examples: the worked values of docs/protocol.md section 6.
func TestF64Examples(t *testing.T) {
	for _, c := range []struct {
		bits uint64
		ok   bool
	}{
		{0x3FF0000000000000, true},  // 1.0
		{0x36A0000000000000, true},  // 2^-149
		{0xB6B8000000000000, true},  // -1.5 x 2^-148
		{0x3690000000000000, false}, // 2^-150
		{0x7FF8000000000000, true},  // NaN
		{0x7FF8000000000001, false}, // another NaN
		{0x0000000000000001, false}, // subnormal
		{0x4B00000000000000, false}, // 2^177: past W=288 (2^137 is the last binade)
		{0x4880000000000000, true},  // 2^137
		{0x4890000000000000, false}, // 2^138 = 2^287 units: past the signed range of W=288
	} {
		v, _ := NewVector(1, 288)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], c.bits)
		if err := v.MergeF64(0, b[:]); (err == nil) != c.ok {
			t.Errorf("%#016x: %v, want ok=%v", c.bits, err, c.ok)
		}
	}
}

// TestF64Allocs: encoding and merging allocate nothing.
func TestF64Allocs(t *testing.T) {
	v, _ := NewVector(400, 288)
	vals := make([]byte, 4*400)
	for i := range 400 {
		binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(float32(i)*0.37))
	}
	v.AddFP32LE(0, vals)
	out := make([]byte, 8*400)
	p, _ := NewVector(400, 288)
	if a := alloctest.PerRun(100, func() {
		_ = v.F64Run(0, 400)
		_ = v.PutF64(out, 0, 400)
		_ = p.MergeF64Checked(0, out)
	}); a != 0 {
		t.Fatalf("%v allocations per encode and merge", a)
	}
}

// BenchmarkF64Partial: a leaf's KULISCH_F64 encode of a jumbo frame of
// gradient-like sums and the parent's merge, against BenchmarkPlanScaled's
// plan and encode of the same kind of values.
func BenchmarkF64Partial(b *testing.B) {
	const n = 1120 // one jumbo frame of KULISCH_F64
	v := gradientSums(b, n)
	out := make([]byte, 8*n)
	p, _ := NewVector(n, 288)
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if v.F64Run(0, n) != n {
				b.Fatal("not all binary64")
			}
			if err := v.PutF64(out, 0, n); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
	})
	b.Run("merge", func(b *testing.B) {
		for b.Loop() {
			p.ResetRange(0, n)
			if err := p.MergeF64Checked(0, out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
	})
}

// FuzzMergeF64: any bytes as KULISCH_F64 values at any width are accepted
// exactly when the reference decodes every value, and then merge to the
// reference's exact sums; a refused batch changes nothing.
func FuzzMergeF64(f *testing.F) {
	f.Add(uint8(28), []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0xa0, 0x36})
	f.Add(uint8(0), []byte{0, 0, 0, 0, 0, 0, 0x90, 0x36})
	f.Fuzz(func(t *testing.T, wsel uint8, vals []byte) {
		w := MinWidth + 8*(int(wsel)%((MaxWidth-MinWidth)/8+1))
		vals = vals[:len(vals)&^7]
		n := len(vals) / 8
		v, _ := NewVector(max(n, 1), w)
		refs := make([]*refSum, n)
		ok := true
		for i := range refs {
			if refs[i] = f64Ref(binary.LittleEndian.Uint64(vals[8*i:]), w); refs[i] == nil {
				ok = false
			}
		}
		err := v.MergeF64(0, vals)
		if !ok {
			if err == nil {
				t.Fatalf("W=%d: malformed values accepted", w)
			}
			for i := range v.Len() {
				if s, _ := v.State(i); s != NegZero {
					t.Fatalf("W=%d: a refused batch changed element %d", w, i)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("W=%d: %v", w, err)
		}
		for i, r := range refs {
			got := make([]byte, WireSize(w))
			if err := v.PutWire(got, i); err != nil || !bytes.Equal(got, r.wire(w)) {
				t.Fatalf("W=%d element %d: %x %v, want %x", w, i, got, err, r.wire(w))
			}
		}
	})
}

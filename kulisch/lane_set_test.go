package kulisch

import (
	"math"
	"math/rand/v2"
	"testing"
)

// laneSetRef is laneSet without its small-integer path: the general
// reading of sign, odd significand and exponent.
func laneSetRef(x float64) FormatSet {
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

// TestLaneSetSmallIntegers: laneSet agrees with the general reading on every
// nonzero integer up to 70000 in magnitude (past FP16's largest finite
// value), on the edges of the integer path (2^24 and its neighbours), on
// random integers below 2^26 and their multiples by powers of two, and on
// halves, quarters and random fractions.
func TestLaneSetSmallIntegers(t *testing.T) {
	check := func(x float64) {
		if x == 0 {
			return
		}
		if got, want := laneSet(x), laneSetRef(x); got != want {
			t.Fatalf("laneSet(%v) = %08b, want %08b", x, got, want)
		}
	}
	for i := -70000; i <= 70000; i++ {
		check(float64(i))
		check(float64(i) + 0.5)
		check(float64(i) / 4)
	}
	for _, e := range []float64{65504, 65505, 65536, 1<<24 - 1, 1 << 24, 1<<24 + 2, 1 << 30, 1 << 62, 1 << 63, 1 << 70} {
		check(e)
		check(-e)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200000; i++ {
		check((r.Float64() - 0.5) * 5000)
		check(math.Ldexp(float64(r.IntN(1<<20)), r.IntN(40)-20))
		n := float64(r.IntN(1<<26) - 1<<25)
		check(n)
		check(math.Ldexp(n, r.IntN(12)))
	}
}

// BenchmarkLaneSet reads the AUTO sets of sums of 20-bit integers (the
// integral data of prismctl bench) with laneSet and with the general path.
func BenchmarkLaneSet(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = float64(r.IntN(1<<21) - 1<<20)
		if xs[i] == 0 {
			xs[i] = 1
		}
	}
	for _, c := range []struct {
		name string
		f    func(float64) FormatSet
	}{{"laneSet", laneSet}, {"general", laneSetRef}} {
		b.Run(c.name, func(b *testing.B) {
			var acc FormatSet
			for i := 0; i < b.N; i++ {
				acc |= c.f(xs[i&4095])
			}
			_ = acc
		})
	}
}

// TestAutoSetsMatchAutoSet: the bulk AutoSets of a Vector (lane-only
// elements read straight from the lane) gives every element the set its
// own AutoSet gives, on a mix of lane-only sums, elements with digits
// (wide Kulisch values merged in), zeros, infinities and NaN, from any
// first position.
func TestAutoSetsMatchAutoSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 4096
	v, err := NewVector(n, 280)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	add := func(i int, f float32) {
		u := math.Float32bits(f)
		b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		if err := v.AddFP32LE(i, b[:]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		switch rng.IntN(8) {
		case 0: // stays zero
		case 1:
			add(i, float32(math.Inf(1-2*rng.IntN(2))))
		case 2:
			add(i, float32(math.NaN()))
		case 3: // digits: a value no lane holds
			mergeRandom(t, rng, v, i)
		default: // lane-only sums of a few terms
			for k := 0; k < 1+rng.IntN(3); k++ {
				add(i, math.Float32frombits(rng.Uint32()&0xBFFFFFFF))
			}
		}
	}
	for trial := 0; trial < 50; trial++ {
		first := rng.IntN(n)
		sets := make([]FormatSet, rng.IntN(n-first+1))
		if err := AutoSets(v, first, sets); err != nil {
			t.Fatal(err)
		}
		for k, s := range sets {
			want, err := v.AutoSet(first + k)
			if err != nil || s != want {
				t.Fatalf("element %d: AutoSets %08b, AutoSet %08b (%v)", first+k, s, want, err)
			}
		}
	}
	if err := AutoSets(v, n-1, make([]FormatSet, 2)); err == nil {
		t.Fatal("AutoSets past the end succeeded")
	}
}

// TestResetRangeClearsEveryRow: ResetRange empties every row of its range,
// whatever mix of lane-only sums, rows with digits (at any position in the
// eight-row blocks its scan skips) and special values it holds, and
// touches nothing outside: every reset row's digits, lane, flags and
// bounds are zero, every other row is as before.
func TestResetRangeClearsEveryRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n = 1024
	for trial := 0; trial < 200; trial++ {
		v, _ := NewVector(n, 280)
		var b [4]byte
		for i := 0; i < n; i++ {
			switch rng.IntN(10) {
			case 0:
				mergeRandom(t, rng, v, i)
			case 1:
				u := math.Float32bits(float32(math.Inf(1)))
				b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
				v.AddFP32LE(i, b[:])
			case 2, 3, 4, 5, 6:
				u := rng.Uint32() & 0xBFFFFFFF
				b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
				v.AddFP32LE(i, b[:])
			}
		}
		before := *v
		before.digits = append([]int64(nil), v.digits...)
		before.lane = append([]float64(nil), v.lane...)
		before.flags = append([]uint8(nil), v.flags...)
		first := rng.IntN(n)
		cnt := rng.IntN(n - first + 1)
		if err := v.ResetRange(first, cnt); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			row := v.digits[i*v.d : (i+1)*v.d]
			if i >= first && i < first+cnt {
				for _, d := range row {
					if d != 0 {
						t.Fatalf("trial %d: row %d of the reset range [%d, %d) keeps digits", trial, i, first, first+cnt)
					}
				}
				if v.lane[i] != 0 || v.flags[i] != 0 || v.nlo[i] != 0 || v.hi[i] != 0 {
					t.Fatalf("trial %d: row %d of the reset range keeps its lane, flags or bounds", trial, i)
				}
				continue
			}
			for j, d := range row {
				if d != before.digits[i*v.d+j] {
					t.Fatalf("trial %d: row %d outside [%d, %d) changed", trial, i, first, first+cnt)
				}
			}
			if v.lane[i] != before.lane[i] || v.flags[i] != before.flags[i] {
				t.Fatalf("trial %d: row %d outside the range changed its lane or flags", trial, i)
			}
		}
	}
}

// mergeRandom merges a random Kulisch value (digits: no lane holds it) into
// element i of the width-280 vector v.
func mergeRandom(t *testing.T, rng *rand.Rand, v *Vector, i int) {
	t.Helper()
	a, _ := NewAccumulator(280)
	randomValue(rng, a)
	if a.Overflow() {
		a.Reset()
		a.AddINT8(3)
	}
	wire, _ := a.AppendWire(nil)
	if err := v.MergeKulisch(i, wire); err != nil {
		t.Fatal(err)
	}
}

// TestFP32ExactMatchesAutoSet: FP32Exact counts, from any first position,
// exactly the leading elements whose AutoSet holds FP32, on a mix of lane
// sums (some beyond FP32's precision: three terms of far apart
// magnitudes), digits, zeros and special values.
func TestFP32ExactMatchesAutoSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const n = 2048
	v, _ := NewVector(n, 280)
	var b [4]byte
	add := func(i int, f float32) {
		u := math.Float32bits(f)
		b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		v.AddFP32LE(i, b[:])
	}
	for i := 0; i < n; i++ {
		switch rng.IntN(40) {
		case 0:
			mergeRandom(t, rng, v, i)
		case 1:
			add(i, float32(math.Inf(1)))
		case 2: // not FP32-exact: 2^30 + 1
			add(i, 1<<30)
			add(i, 1)
		case 3: // stays zero
		default: // integer sums FP32 holds
			add(i, float32(rng.IntN(1<<20)-1<<19))
			add(i, float32(rng.IntN(1<<20)-1<<19))
		}
	}
	// Both paths: the scalar loop, and the AVX2 kernel where the CPU has it.
	save := haveAVX2
	defer func() { haveAVX2 = save }()
	for _, simd := range []bool{false, true} {
		if simd && !save {
			t.Log("no AVX2 here: the kernel path is not tested")
			continue
		}
		haveAVX2 = simd
		for trial := 0; trial < 1000; trial++ {
			first := rng.IntN(n)
			cnt := rng.IntN(n - first + 1)
			want := 0
			for want < cnt {
				s, err := v.AutoSet(first + want)
				if err != nil || !s.Has(FP32) {
					break
				}
				want++
			}
			if got := v.FP32Exact(first, cnt); got != want {
				t.Fatalf("AVX2 %v: FP32Exact(%d, %d) = %d, want %d", simd, first, cnt, got, want)
			}
		}
	}
}

// BenchmarkFP32Exact: the FP32 fast path's check over one MTU-9000 frame
// of integer sums (2238 values).
func BenchmarkFP32Exact(b *testing.B) {
	const n = 2238
	v, _ := NewVector(n, 280)
	var buf [4]byte
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		for range 4 {
			u := math.Float32bits(float32(rng.IntN(1<<20) - 1<<19))
			buf[0], buf[1], buf[2], buf[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			v.AddFP32LE(i, buf[:])
		}
	}
	if v.FP32Exact(0, n) != n {
		b.Fatal("integer sums below 2^22 not all FP32-exact")
	}
	b.ResetTimer()
	for range b.N {
		if v.FP32Exact(0, n) != n {
			b.Fatal("changed")
		}
	}
}

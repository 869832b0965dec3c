package kulisch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func addTerm(a *Accumulator, t term) {
	switch t.f {
	case FP32:
		a.AddFP32(t.bits)
	case FP16:
		a.AddFP16(uint16(t.bits))
	case BF16:
		a.AddBF16(uint16(t.bits))
	case INT8:
		a.AddINT8(int8(t.bits))
	}
}

func permute(ts []term, k int, f func([]term)) {
	if k == len(ts) {
		f(ts)
		return
	}
	for i := k; i < len(ts); i++ {
		ts[k], ts[i] = ts[i], ts[k]
		permute(ts, k+1, f)
		ts[k], ts[i] = ts[i], ts[k]
	}
}

// TestPermutations: every order of the same contributors gives identical
// wire bytes and FP32 result.
func TestPermutations(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	trials := 300
	if soak() {
		trials = 5000
	}
	const w = 288
	for trial := 0; trial < trials; trial++ {
		g := &gen{r: r, kind: trial % nKinds}
		ts := g.sumTerms(2 + r.IntN(5))
		if len(ts) > 7 {
			ts = ts[:7]
		}
		var want []byte
		var want32 uint32
		permute(ts, 0, func(p []term) {
			a, _ := NewAccumulator(w)
			for _, x := range p {
				addTerm(a, x)
			}
			got, _ := a.AppendWire(nil)
			g32, _ := a.RoundFP32()
			if want == nil {
				want, want32 = got, g32
				var ref refSum
				for _, x := range p {
					x.addRef(&ref)
				}
				if !bytes.Equal(got, ref.wire(w)) {
					t.Fatalf("%s: wire %x want %x", fmtTerms(p), got, ref.wire(w))
				}
				return
			}
			if !bytes.Equal(got, want) || g32 != want32 {
				t.Fatalf("order %s: %x/%#x differs from %x/%#x", fmtTerms(p), got, g32, want, want32)
			}
		})
	}
}

// treeSum sums ts through a random tree: leaves add terms, inner nodes merge
// children's partials in random order, sent as Kulisch wire values or in a
// random lossless AUTO format.
func treeSum(t *testing.T, r *rand.Rand, ts []term, w int) (*Accumulator, error) {
	a, _ := NewAccumulator(w)
	if len(ts) <= 2 || r.IntN(4) == 0 {
		for _, x := range ts {
			addTerm(a, x)
		}
		return a, nil
	}
	k := 2 + r.IntN(min(4, len(ts)-1))
	cuts := r.Perm(len(ts) - 1)[:k-1]
	parts := make([][]term, 0, k)
	bounds := append([]int{0}, make([]int, 0, k)...)
	for _, c := range cuts {
		bounds = append(bounds, c+1)
	}
	bounds = append(bounds, len(ts))
	sortInts(bounds)
	for i := 0; i+1 < len(bounds); i++ {
		parts = append(parts, ts[bounds[i]:bounds[i+1]])
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	for _, p := range parts {
		c, err := treeSum(t, r, p, w)
		if err != nil {
			return nil, err
		}
		set, err := c.AutoSet()
		if err != nil {
			return nil, err
		}
		f := KULISCH
		if r.IntN(2) == 0 { // AUTO transport: any lossless format
			for {
				f = Format(1 + r.IntN(5))
				if set.Has(f) {
					break
				}
			}
		}
		buf := make([]byte, f.Width(w))
		if _, err := c.v.PutValues(buf, 0, 1, f); err != nil {
			t.Fatal(err)
		}
		if err := a.v.Add(0, f, buf); err != nil {
			t.Fatal(err)
		}
	}
	return a, nil
}

func sortInts(x []int) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] < x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

// TestTreeShapes: random trees and merge orders give the flat sum's bytes.
func TestTreeShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	trials := 2000
	if soak() {
		trials = 50000
	}
	for trial := 0; trial < trials; trial++ {
		g := &gen{r: r, kind: trial % nKinds}
		ts := g.sumTerms(3 + r.IntN(30))
		w := RequiredWidth(uint32(len(ts)))
		if r.IntN(3) == 0 {
			w = 64 + 8*r.IntN(60)
		}
		var ref refSum
		for _, x := range ts {
			x.addRef(&ref)
		}
		want := ref.wire(w)
		if want == nil {
			continue // the flat sum itself overflows this W
		}
		for shape := 0; shape < 5; shape++ {
			a, err := treeSum(t, r, ts, w)
			var got []byte
			if err == nil {
				got, err = a.AppendWire(nil)
			}
			if err != nil {
				// A partial may overflow a small W even when the total
				// fits; that is reported, never wrapped.
				if w >= RequiredWidth(uint32(len(ts))) {
					t.Fatalf("W=%d %s: %v", w, fmtTerms(ts), err)
				}
				continue
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("W=%d %s: tree %x want %x", w, fmtTerms(ts), got, want)
			}
		}
	}
}

// arrivalRef is one IEEE binary32 addition computed exactly and rounded by
// big.Float (subnormals and overflow included).
func arrivalRef(s, x uint32) uint32 {
	fs, fx := math.Float32frombits(s), math.Float32frombits(x)
	if fs != fs || fx != fx || math.IsInf(float64(fs), 0) || math.IsInf(float64(fx), 0) {
		sum := float64(fs) + float64(fx)
		if sum != sum {
			return NaN32
		}
		return math.Float32bits(float32(sum))
	}
	e := new(big.Float).SetPrec(1000).SetFloat64(float64(fs))
	e.Add(e, new(big.Float).SetPrec(1000).SetFloat64(float64(fx)))
	if e.Sign() == 0 {
		if s == 0x80000000 && x == 0x80000000 {
			return 0x80000000
		}
		return 0
	}
	f, _ := e.Float32()
	return math.Float32bits(f)
}

func TestArrival(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const n = 32
	v, _ := NewArrivalVector(n)
	state := make([]uint32, n)
	for i := range state {
		state[i] = 0x80000000
	}
	steps := 20000
	for step := 0; step < steps; step++ {
		g := &gen{r: r, kind: r.IntN(6)}
		f := []Format{FP32, FP16, BF16, INT8}[r.IntN(4)]
		first := r.IntN(n)
		cnt := 1 + r.IntN(n-first)
		var buf []byte
		for i := first; i < first+cnt; i++ {
			var tm term
			switch f {
			case FP32:
				tm = term{FP32, g.fp32()}
			case BF16:
				tm = term{BF16, g.fp32() >> 16}
			case FP16:
				tm = term{FP16, r.Uint32() & 0xFFFF}
			default:
				tm = term{INT8, r.Uint32() & 0xFF}
			}
			buf = tm.put(buf)
			var x32 uint32
			switch f {
			case FP32:
				x32 = tm.bits
			case FP16:
				x32 = FP16ToFP32(uint16(tm.bits))
			case BF16:
				x32 = BF16ToFP32(uint16(tm.bits))
			default:
				x32 = INT8ToFP32(int8(tm.bits))
			}
			state[i] = arrivalRef(state[i], x32)
		}
		if err := v.Add(first, f, buf); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if g, _ := v.RoundFP32(i); g != state[i] {
				t.Fatalf("step %d elem %d: %#08x want %#08x", step, i, g, state[i])
			}
		}
		if r.IntN(50) == 0 {
			i := r.IntN(n)
			v.Reset(i)
			state[i] = 0x80000000
		}
	}
	// Order dependence, as documented.
	a, _ := NewArrivalVector(1)
	b, _ := NewArrivalVector(1)
	le := func(xs ...float32) []byte {
		var out []byte
		for _, x := range xs {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
		}
		return out
	}
	for _, x := range []float32{1e8, 1, -1e8} {
		a.AddFP32LE(0, le(x))
	}
	for _, x := range []float32{1e8, -1e8, 1} {
		b.AddFP32LE(0, le(x))
	}
	ga, _ := a.RoundFP32(0)
	gb, _ := b.RoundFP32(0)
	if ga == gb {
		t.Errorf("FP32_ARRIVAL expected to be order dependent: %#x", ga)
	}
	if err := a.Add(0, KULISCH, make([]byte, 9)); err == nil {
		t.Error("KULISCH accepted under FP32_ARRIVAL")
	}
}

package kulisch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// benchValues is one MTU-1500 FP32 group: 363 values with exponents over
// the normal range a gradient typically uses.
func benchValues(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		x := uint32(r.IntN(2))<<31 | uint32(100+r.IntN(40))<<23 | r.Uint32()&0x7FFFFF
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// BenchmarkAddFP32 is the switch's hot operation: one packet of 363 FP32
// values added exactly into 363 Kulisch-288 accumulators.
func BenchmarkAddFP32(b *testing.B) {
	const n = 363
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	b.SetBytes(int64(len(vals)))
	b.ReportAllocs()
	for b.Loop() {
		v.AddFP32LE(0, vals)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
}

// BenchmarkAddFP32Plain is the rounded baseline: a[i] += b[i] on float32.
func BenchmarkAddFP32Plain(b *testing.B) {
	const n = 363
	vals := benchValues(n)
	src := make([]float32, n)
	for i := range src {
		src[i] = math.Float32frombits(binary.LittleEndian.Uint32(vals[4*i:]))
	}
	acc := make([]float32, n)
	b.SetBytes(int64(len(vals)))
	b.ReportAllocs()
	for b.Loop() {
		for i := range acc {
			acc[i] += src[i]
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
}

// BenchmarkAddFP32Arrival is FP32_ARRIVAL on the same packet, decoding
// little-endian bytes as the engine does.
func BenchmarkAddFP32Arrival(b *testing.B) {
	const n = 363
	v, _ := NewArrivalVector(n)
	vals := benchValues(n)
	b.SetBytes(int64(len(vals)))
	b.ReportAllocs()
	for b.Loop() {
		v.AddFP32LE(0, vals)
	}
}

// BenchmarkMergeKulisch merges 40 Kulisch-280 partials (one MTU-1500 group).
func BenchmarkMergeKulisch(b *testing.B) {
	const n = 40
	v, _ := NewVector(n, 280)
	src, _ := NewVector(n, 280)
	src.AddFP32LE(0, benchValues(n))
	wire := make([]byte, n*WireSize(280))
	src.PutValues(wire, 0, n, KULISCH)
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		v.MergeKulisch(0, wire)
	}
}

// BenchmarkRoundFP32 rounds one accumulated Kulisch-288 value.
func BenchmarkRoundFP32(b *testing.B) {
	const n = 363
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	for range 8 {
		v.AddFP32LE(0, vals)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		v.RoundFP32(i)
		if i++; i == n {
			i = 0
		}
	}
}

// BenchmarkPutWire encodes one Kulisch-288 value.
func BenchmarkPutWire(b *testing.B) {
	const n = 363
	v, _ := NewVector(n, 288)
	v.AddFP32LE(0, benchValues(n))
	dst := make([]byte, WireSize(288))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		v.PutWire(dst, i)
		if i++; i == n {
			i = 0
		}
	}
}

// BenchmarkPlanAuto plans an MTU-1500 packet of mixed FP16/FP32 values.
func BenchmarkPlanAuto(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	sets := make([]FormatSet, 1500)
	for i := range sets {
		if r.IntN(3) == 0 {
			sets[i] = SetOf(FP32, KULISCH)
		} else {
			sets[i] = SetOf(FP16, FP32, KULISCH)
		}
	}
	dst := make([]Group, 0, MaxGroups)
	b.ReportAllocs()
	for b.Loop() {
		PlanAuto(dst, sets, KULISCH, 288, 1458)
	}
}

// TestNoAllocs proves the per-packet paths allocate nothing.
func TestNoAllocs(t *testing.T) {
	const n = 363
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	h := make([]byte, 2*n)
	i8 := make([]byte, n)
	wire := make([]byte, 40*WireSize(288))
	v.AddFP32LE(0, vals)
	if _, err := v.PutValues(wire, 0, 40, KULISCH); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, WireSize(288))
	out := make([]byte, 4*n)
	av, _ := NewArrivalVector(n)
	sets := make([]FormatSet, n)
	groups := make([]Group, 0, MaxGroups)
	a, _ := NewAccumulator(288)
	if err := AutoSets(v, 0, sets); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"AddFP32LE":     func() { v.AddFP32LE(0, vals) },
		"AddFP16LE":     func() { v.AddFP16LE(0, h) },
		"AddBF16LE":     func() { v.AddBF16LE(0, h) },
		"AddINT8":       func() { v.AddINT8(0, i8) },
		"MergeKulisch":  func() { v.MergeKulisch(0, wire) },
		"RoundFP32":     func() { v.RoundFP32(7) },
		"Round FP16":    func() { v.Round(7, FP16) },
		"PutWire":       func() { v.PutWire(dst, 7) },
		"AutoSet":       func() { v.AutoSet(7) },
		"PutValues":     func() { v.PutValues(out, 0, n, FP32) },
		"Arrival add":   func() { av.AddFP32LE(0, vals) },
		"Arrival round": func() { av.RoundFP32(3) },
		"AutoSets":      func() { AutoSets(v, 0, sets) },
		"PlanAuto":      func() { PlanAuto(groups, sets, KULISCH, 288, 1458) },
		"Accumulator":   func() { a.AddFP32(0x3F800000); a.AddFP16(0x3C00); a.RoundFP32() },
	} {
		f()
		if got := alloctest.PerRun(50, f); got != 0 {
			t.Errorf("%s: %v allocs", name, got)
		}
	}
}

// BenchmarkPutValuesFP32 rounds a packet's worth (363) of Kulisch-288
// accumulators to FP32 wire values, as the switch does for every RESULT:
// ns/value is the per-element rounding cost on the hot path.
func BenchmarkPutValuesFP32(b *testing.B) {
	const n = 363
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	for range 4 {
		v.AddFP32LE(0, vals)
	}
	dst := make([]byte, 4*n)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.PutValues(dst, 0, n, FP32); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
}

// BenchmarkPlanScaled plans one jumbo frame of KULISCH_SCALED groups for
// gradient-like sums (two N(0,1) values scaled by 2^-12..2^-4, as a leaf
// of two ranks sees with 'prismctl bench --data gradient'), and encodes it.
func BenchmarkPlanScaled(b *testing.B) {
	const n = 4000
	v := gradientSums(b, n)
	spans := make([]Span, n)
	if err := v.Spans(0, spans); err != nil {
		b.Fatal(err)
	}
	budget := BodyBudget(9000, 0)
	dst := make([]ScaledGroup, 0, MaxGroups)
	out := make([]byte, budget)
	var p ScaledPlanner
	b.Run("plan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Plan(dst, spans, 288, budget)
		}
	})
	gs, used, err := p.Plan(dst, spans, 288, budget)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d values in %d groups", used, len(gs))
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			at := 0
			for _, g := range gs {
				if g.Bytes == 0 {
					at += g.Count
					continue
				}
				if err := v.PutScaled(out, at, g.Count, g.Shift, g.Bytes); err != nil {
					b.Fatal(err)
				}
				at += g.Count
			}
		}
	})
}

// gradientSums is a leaf's vector after two ranks' gradient-like FP32
// values (N(0,1) scaled by 2^-12..2^-4, 'prismctl bench --data gradient'):
// n Kulisch-288 accumulators, the partials the encoding benchmarks send.
func gradientSums(tb testing.TB, n int) *Vector {
	tb.Helper()
	r := rand.New(rand.NewPCG(7, 8))
	v, err := NewVector(n, 288)
	if err != nil {
		tb.Fatal(err)
	}
	for range 2 {
		vals := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			x := float32(r.NormFloat64() * math.Ldexp(1, -12+r.IntN(9)))
			binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(x))
		}
		if err := v.AddFP32LE(0, vals); err != nil {
			tb.Fatal(err)
		}
	}
	return v
}

package kulisch

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
	"time"
)

// TestSpeedRatio measures exact vs plain FP32 accumulation with min-of-N
// timing, which survives a loaded machine better than go test -bench.
// Run with PRISMD_RATIO=1.
func TestSpeedRatio(t *testing.T) {
	if os.Getenv("PRISMD_RATIO") != "1" {
		t.Skip("set PRISMD_RATIO=1")
	}
	const n, reps = 363, 200
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	src := make([]float32, n)
	for i := range src {
		src[i] = math.Float32frombits(binary.LittleEndian.Uint32(vals[4*i:]))
	}
	acc := make([]float32, n)
	best := func(f func()) float64 {
		m := time.Hour
		for range 300 {
			s := time.Now()
			for range reps {
				f()
			}
			if d := time.Since(s); d < m {
				m = d
			}
		}
		return float64(m.Nanoseconds()) / (reps * n)
	}
	for range 3 {
		e := best(func() { v.AddFP32LE(0, vals) })
		p := best(func() {
			for i := range acc {
				acc[i] += src[i]
			}
		})
		t.Logf("exact %.3f ns/value, plain %.3f ns/value, ratio %.2f", e, p, e/p)
	}
}

func TestSpeedRound(t *testing.T) {
	if os.Getenv("PRISMD_RATIO") != "1" {
		t.Skip("set PRISMD_RATIO=1")
	}
	const n = 363
	v, _ := NewVector(n, 288)
	vals := benchValues(n)
	for range 8 {
		v.AddFP32LE(0, vals)
	}
	dst := make([]byte, WireSize(288))
	best := func(f func(i int)) float64 {
		m := time.Hour
		for range 300 {
			s := time.Now()
			for i := range n {
				f(i)
			}
			if d := time.Since(s); d < m {
				m = d
			}
		}
		return float64(m.Nanoseconds()) / n
	}
	for range 3 {
		t.Logf("RoundFP32 %.1f ns/value, PutWire %.1f ns/value, AutoSet %.1f ns/value",
			best(func(i int) { v.RoundFP32(i) }), best(func(i int) { v.PutWire(dst, i) }), best(func(i int) { v.AutoSet(i) }))
	}
}

func TestSpeedPlan(t *testing.T) {
	if os.Getenv("PRISMD_RATIO") != "1" {
		t.Skip("set PRISMD_RATIO=1")
	}
	mixed := make([]FormatSet, 1500)
	same := make([]FormatSet, 1500)
	for i := range mixed {
		mixed[i] = SetOf(FP16, FP32, KULISCH)
		if i%3 == 0 {
			mixed[i] = SetOf(FP32, KULISCH)
		}
		same[i] = SetOf(FP32, KULISCH)
	}
	dst := make([]Group, 0, MaxGroups)
	for _, c := range []struct {
		name string
		sets []FormatSet
	}{{"mixed FP16/FP32", mixed}, {"homogeneous FP32", same}} {
		m := time.Hour
		var n int
		for range 200 {
			s := time.Now()
			_, n, _ = PlanAuto(dst, c.sets, KULISCH, 288, 1458)
			if d := time.Since(s); d < m {
				m = d
			}
		}
		t.Logf("PlanAuto %s: %v per packet (%d values)", c.name, m, n)
	}
}

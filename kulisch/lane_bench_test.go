package kulisch

import (
	"encoding/binary"
	"math"
	"testing"
)

// BenchmarkAddFP32Lane is the KULISCH_FIXED exact add where a switch spends
// it: one MTU-1500 packet of 363 FP32 values whose sums stay exact in the
// float64 lane (the AVX2 lane kernel, no digits). The packet and its
// negation alternate, so every element returns to zero and stays in the
// lane however long the benchmark runs.
func BenchmarkAddFP32Lane(b *testing.B) {
	const n = 363
	v, _ := NewVector(n, 280)
	pos, neg := make([]byte, 4*n), make([]byte, 4*n)
	for i := 0; i < n; i++ {
		x := float32(i%97)*0.25 + 1
		binary.LittleEndian.PutUint32(pos[4*i:], math.Float32bits(x))
		binary.LittleEndian.PutUint32(neg[4*i:], math.Float32bits(-x))
	}
	b.SetBytes(4 * n)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i&1 == 0 {
			v.AddFP32LE(0, pos)
		} else {
			v.AddFP32LE(0, neg)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
}

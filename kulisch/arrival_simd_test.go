package kulisch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// awkward32 draws binary32 patterns that stress an adder: NaNs with
// payloads, infinities, signed zeros, subnormals, values whose sums
// round, cancel or overflow.
func awkward32(r *rand.Rand) uint32 {
	switch r.IntN(10) {
	case 0:
		return 0x7F800000 | r.Uint32()&0x807FFFFF | 1 // NaN (payload, either sign)
	case 1:
		return 0x7F800000 | r.Uint32()&0x80000000 // ±Inf
	case 2:
		return r.Uint32() & 0x80000000 // ±0
	case 3:
		return r.Uint32() & 0x807FFFFF // subnormal
	case 4:
		return 0x7F000000 | r.Uint32()&0x80FFFFFF // near the top: sums overflow
	case 5:
		return math.Float32bits(float32(r.IntN(200) - 100)) // cancels exactly
	}
	return r.Uint32()
}

func isNaN32(x float32) bool { return x != x }

// TestArrivalKernelsMatchScalar checks the vector kernels (AVX2 where the
// CPU has it) against the one-element-at-a-time IEEE loop, bit for bit, at
// every length and offset around the 8- and 32-lane boundaries. A NaN
// state only has to stay a NaN: which operand's payload survives is not
// specified (by Go or by the protocol), and every output makes NaN
// canonical, which the PutValues check holds to the bit.
func TestArrivalKernelsMatchScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 7))
	for _, simd := range []bool{false, true} {
		if simd && !haveAVX2 {
			t.Log("no AVX2 on this CPU: the vector kernels are not exercised")
			continue
		}
		save := haveAVX2
		haveAVX2 = simd
		for n := 0; n <= 80; n++ {
			for first := 0; first < 3; first++ {
				a, _ := NewArrivalVector(first + n + 3)
				ref := make([]float32, first+n+3)
				for i := range ref {
					ref[i] = negZero
				}
				for round := 0; round < 3; round++ {
					vals := make([]byte, 4*n)
					for k := range n {
						binary.LittleEndian.PutUint32(vals[4*k:], awkward32(r))
					}
					if err := a.AddFP32LE(first, vals); err != nil {
						t.Fatal(err)
					}
					for k := range n {
						ref[first+k] += math.Float32frombits(binary.LittleEndian.Uint32(vals[4*k:]))
					}
				}
				for i, want := range ref {
					got := a.s[i]
					if math.Float32bits(got) != math.Float32bits(want) && !(isNaN32(got) && isNaN32(want)) {
						t.Fatalf("simd=%v n=%d first=%d: element %d = %#x, want %#x", simd, n, first, i, math.Float32bits(got), math.Float32bits(want))
					}
				}
				out := make([]byte, 4*n+4)
				if _, err := a.PutValues(out, first, n, FP32); err != nil {
					t.Fatal(err)
				}
				for k := range n {
					want := math.Float32bits(ref[first+k])
					if want&0x7FFFFFFF > 0x7F800000 {
						want = NaN32
					}
					if got := binary.LittleEndian.Uint32(out[4*k:]); got != want {
						t.Fatalf("simd=%v n=%d: PutValues element %d = %#x, want %#x", simd, n, k, got, want)
					}
				}
				if binary.LittleEndian.Uint32(out[4*n:]) != 0 {
					t.Fatalf("simd=%v n=%d: PutValues wrote past its count", simd, n)
				}
				if err := a.ResetRange(first, n); err != nil {
					t.Fatal(err)
				}
				for i := range ref {
					want := math.Float32bits(ref[i])
					if isNaN32(ref[i]) {
						want = math.Float32bits(a.s[i]) // payloads are not part of the contract
					}
					if i >= first && i < first+n {
						want = 0x80000000
					}
					if got := math.Float32bits(a.s[i]); got != want {
						t.Fatalf("simd=%v n=%d first=%d: after ResetRange element %d = %#x, want %#x", simd, n, first, i, got, want)
					}
				}
			}
		}
		haveAVX2 = save
	}
}

// BenchmarkArrivalAddFP32 adds one 363-value FP32 packet.
func BenchmarkArrivalAddFP32(b *testing.B) {
	a, _ := NewArrivalVector(363)
	vals := make([]byte, 4*363)
	for k := range 363 {
		binary.LittleEndian.PutUint32(vals[4*k:], math.Float32bits(float32(k)*0.25))
	}
	b.SetBytes(int64(len(vals)))
	for b.Loop() {
		a.AddFP32LE(0, vals)
	}
}

package kulisch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestArrivalPutValuesFP32 checks the FP32 fast path of PutValues against
// the definition: the binary32 state, little-endian, every NaN (any sign,
// any payload) written as the canonical quiet NaN.
func TestArrivalPutValuesFP32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 4096
	a, err := NewArrivalVector(n)
	if err != nil {
		t.Fatal(err)
	}
	special := []uint32{0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x00000001, 0x807FFFFF, 0x7F7FFFFF}
	for i := range a.s {
		b := rng.Uint32()
		if i < len(special) {
			b = special[i]
		}
		a.s[i] = math.Float32frombits(b)
	}
	out := make([]byte, 4*n)
	for _, r := range [][2]int{{0, n}, {3, 100}, {n - 1, 1}, {17, 0}} {
		w, err := a.PutValues(out, r[0], r[1], FP32)
		if err != nil || w != 4*r[1] {
			t.Fatalf("PutValues(%d,%d) = %d, %v", r[0], r[1], w, err)
		}
		for k := 0; k < r[1]; k++ {
			b := math.Float32bits(a.s[r[0]+k])
			want := b
			if e, m := b>>23&0xFF, b&0x7FFFFF; e == 0xFF && m != 0 {
				want = 0x7FC00000
			}
			if got := binary.LittleEndian.Uint32(out[4*k:]); got != want {
				t.Fatalf("element %d: state %08x written %08x, want %08x", r[0]+k, b, got, want)
			}
		}
	}
	if _, err := a.PutValues(out[:7], 0, 2, FP32); err != ErrLength {
		t.Fatalf("short dst: %v, want ErrLength", err)
	}
	if _, err := a.PutValues(out, n-1, 2, FP32); err != ErrRange {
		t.Fatalf("past the end: %v, want ErrRange", err)
	}
}

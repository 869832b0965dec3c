package kulisch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestLaneAgainstReference drives the float64 lane through its cases, one
// element each, against the math/big reference: sums that stay exact in
// the lane (gradient-like values), sums that spill some terms to the
// digits (magnitudes 2^60 apart), exact cancellation to +0 and to -0,
// subnormal terms, and terms near the lane's limit. Every element is read
// by PutValues to FP32 (the lane-only shortcut), then by Round and
// AppendWire (which fold the lane into the digits), then read again.
func TestLaneAgainstReference(t *testing.T) {
	const w = 280
	rng := rand.New(rand.NewPCG(5, 6))
	f32 := func(x float32) uint32 { return math.Float32bits(x) }
	cases := map[string]func(k int) uint32{
		"gradient": func(int) uint32 { return f32(float32(rng.NormFloat64() * 1e-3)) },
		"spill": func(k int) uint32 {
			if k%3 == 0 {
				return f32(float32(rng.NormFloat64() * 1e20))
			}
			return f32(float32(rng.NormFloat64() * 1e-20))
		},
		"subnormal": func(int) uint32 { return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(3))<<23 },
		"limit": func(int) uint32 { return f32(float32(rng.NormFloat64() * 1e38)) },
		"wide":  func(int) uint32 { return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(254))<<23 },
	}
	for name, draw := range cases {
		t.Run(name, func(t *testing.T) {
			const n, terms = 64, 6
			v, err := NewVector(n, w)
			if err != nil {
				t.Fatal(err)
			}
			refs := make([]refSum, n)
			for k := 0; k < terms; k++ {
				vals := make([]byte, 4*n)
				for i := range n {
					b := draw(k)
					if i%8 == 7 && k == terms-1 { // a +0 term
						b = 0
					}
					binary.LittleEndian.PutUint32(vals[4*i:], b)
					refs[i].addFP32(b)
				}
				if err := v.AddFP32LE(0, vals); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]byte, 4*n)
			for pass := 0; pass < 2; pass++ {
				if _, err := v.PutValues(out, 0, n, FP32); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if got, want := binary.LittleEndian.Uint32(out[4*i:]), refs[i].fp32(); got != want {
						t.Fatalf("pass %d: PutValues element %d = %#08x, want %#08x", pass, i, got, want)
					}
					got, err := v.AppendWire(nil, i)
					if err != nil {
						t.Fatal(err)
					}
					if want := refs[i].wire(w); !bytes.Equal(got, want) {
						t.Fatalf("pass %d: wire of element %d = %x, want %x", pass, i, got, want)
					}
				}
			}
		})
	}
}

// TestLaneCancelsToSignedZero: the lane keeps IEEE's zero rules, which are
// the package's: x + (-x) is +0, and -0 + -0 stays -0.
func TestLaneCancelsToSignedZero(t *testing.T) {
	v, _ := NewVector(2, 280)
	vals := make([]byte, 8)
	binary.LittleEndian.PutUint32(vals, math.Float32bits(1.25))
	binary.LittleEndian.PutUint32(vals[4:], 0x80000000)
	_ = v.AddFP32LE(0, vals)
	binary.LittleEndian.PutUint32(vals, math.Float32bits(-1.25))
	_ = v.AddFP32LE(0, vals)
	out := make([]byte, 8)
	if _, err := v.PutValues(out, 0, 2, FP32); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(out); got != 0 {
		t.Errorf("1.25 + -1.25 = %#08x, want +0", got)
	}
	if got := binary.LittleEndian.Uint32(out[4:]); got != 0x80000000 {
		t.Errorf("-0 + -0 = %#08x, want -0", got)
	}
}

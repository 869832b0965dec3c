package main

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// roundTo against the standard library's binary32 conversion (big.Float.Float32
// rounds to nearest even with subnormals) and hand-checked binary16 values.
func TestRoundTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		x := new(big.Float).SetPrec(200).SetFloat64(rng.NormFloat64() * math.Ldexp(1, rng.IntN(300)-150))
		x.Add(x, new(big.Float).SetFloat64(rng.NormFloat64()*math.Ldexp(1, rng.IntN(300)-150)))
		want, _ := x.Float32()
		got, ok := roundTo(x, "fp32", false)
		if !ok || got != math.Float32bits(want) {
			t.Fatalf("%s: got %#x want %#x", x.Text('g', 30), got, math.Float32bits(want))
		}
	}
	for _, c := range []struct {
		x    float64
		want uint32
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {math.Ldexp(1, -24), 0x0001},
		{math.Ldexp(1, -25), 0x0000}, {math.Ldexp(3, -26), 0x0001}, {1 + math.Ldexp(1, -11), 0x3c00}, {1 + math.Ldexp(3, -11), 0x3c02},
	} {
		if got, _ := roundTo(big.NewFloat(c.x), "fp16", false); got != c.want {
			t.Errorf("fp16(%g) = %#x, want %#x", c.x, got, c.want)
		}
	}
	if got, _ := roundTo(big.NewFloat(1+math.Ldexp(1, -8)), "bf16", false); got != 0x3f80 {
		t.Errorf("bf16 tie: %#x", got)
	}
	if _, ok := roundTo(big.NewFloat(128), "int8", false); ok {
		t.Error("int8 128 accepted")
	}
	for b := uint16(0); b < 0x7c00; b++ {
		if f32ToF16Exact(f16ToF32(b)) != b || f32ToF16Exact(f16ToF32(b|0x8000)) != b|0x8000 {
			t.Fatalf("fp16 %#x does not round trip", b)
		}
	}
}

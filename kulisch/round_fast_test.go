package kulisch

import (
	"math"
	"math/rand/v2"
	"testing"
)

// roundFP32 (the PutValues fast path) against Round, the general path
// checked against math/big elsewhere, on accumulators built to hit its
// edges: both signs, every digit boundary of the two-digit window, ties and
// near-ties (the sticky bit in a far lower digit), subnormals, the largest
// finite and the first overflow, values that cancel to a few low bits.
func TestRoundFP32MatchesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, w := range []int{280, 288, 320, 1024} {
		v, err := NewVector(1, w)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4)
		add := func(f float32) error {
			var b [4]byte
			u := math.Float32bits(f)
			b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			return v.AddFP32LE(0, b[:])
		}
		for it := 0; it < 200000; it++ {
			v.Reset(0)
			terms := 1 + rng.IntN(4)
			for k := 0; k < terms; k++ {
				var f float32
				switch rng.IntN(6) {
				case 0: // a subnormal or tiny
					f = math.Float32frombits(rng.Uint32() & 0x80FFFFFF)
				case 1: // the top of the range
					f = math.Float32frombits(rng.Uint32()&0x80FFFFFF | 0x7E800000)
				case 2: // exactly a power of two apart: ties and sticky in low digits
					f = float32(math.Ldexp(1, rng.IntN(250)-149))
					if rng.IntN(2) == 0 {
						f = -f
					}
				case 3: // cancellation
					f = math.Float32frombits(rng.Uint32()&^0x7F800000 | uint32(100+rng.IntN(40))<<23)
				default:
					f = math.Float32frombits(rng.Uint32())
				}
				if f != f || math.IsInf(float64(f), 0) {
					continue
				}
				if err := add(f); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(3) == 0 { // an exact negation: the sum of a pair cancels
				if err := add(-math.Float32frombits(rng.Uint32() & 0x7EFFFFFF)); err != nil {
					t.Fatal(err)
				}
			}
			want, werr := v.Round(0, FP32)
			_, gerr := v.PutValues(out, 0, 1, FP32)
			got := uint32(out[0]) | uint32(out[1])<<8 | uint32(out[2])<<16 | uint32(out[3])<<24
			if (werr == nil) != (gerr == nil) || werr == nil && got != want {
				t.Fatalf("W=%d iteration %d: PutValues %#08x (%v), Round %#08x (%v)", w, it, got, gerr, want, werr)
			}
		}
	}
}

package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// TestTreeSpecialsAtFrameStarts: an infinity or NaN among gradient-like
// finite terms, at the first element of a partial frame (where KULISCH_F64
// frames of 181 values and FP32 frames of 363 begin) and elsewhere, in a
// leaf's own sum or only at the root, comes out as the exact sum says:
// +Inf, -Inf or the canonical NaN, for every partial policy and encoding.
// An infinity plus finite terms keeps their digits in the accumulator,
// and a leaf planning AUTO partials with KULISCH_F64 offered it as a
// binary64, then refused to write it: the operation ended
// ACCUMULATION_INEXACT (ErrInexact on every rank) where the sum was +Inf.
func TestTreeSpecialsAtFrameStarts(t *testing.T) {
	const vlen = 2000
	rng := rand.New(rand.NewPCG(3, 4))
	vecs := make([][]float32, 4)
	for r := range vecs {
		vecs[r] = make([]float32, vlen)
		for i := range vecs[r] {
			vecs[r][i] = float32(rng.NormFloat64() * math.Ldexp(1, -4-rng.IntN(9)))
		}
	}
	inf, ninf, nan := float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())
	for _, c := range []struct {
		i, r int
		v    float32
	}{
		{0, 2, inf}, {181, 2, inf}, {182, 0, ninf}, {183, 1, nan}, {363, 3, inf}, {364, 2, nan},
		{365, 0, inf}, {727, 2, inf}, {728, 1, ninf}, {1000, 0, inf}, {1000, 3, ninf}, // +Inf + -Inf: NaN
		{1451, 2, inf}, {1452, 3, inf}, {1452, 2, inf}, // both of a leaf's ranks
	} {
		vecs[c.r][c.i] = c.v
	}
	for _, partial := range []kulisch.Format{kulisch.AUTO, kulisch.KULISCH} {
		for _, m := range []enc{encF64, encScaled, encPlain} {
			tr := newTree(t, partial, vlen, 4096, m)
			for r := range vecs {
				tr.contribute(t, r, vecs[r])
			}
			tr.run(t)
			for i, n := range tr.n {
				if s, _ := n.e.Status(tr.key); s.State != parser.StateComplete || s.Inexact {
					t.Fatalf("partial %v, %v: node %d %+v", partial, m, i, s)
				}
			}
			for i := 0; i < vlen; i++ {
				if want := exactFP32(vecs[0][i], vecs[1][i], vecs[2][i], vecs[3][i]); tr.res[i] != want {
					t.Fatalf("partial %v, %v: element %d is %#08x, want %#08x", partial, m, i, tr.res[i], want)
				}
			}
		}
	}
}

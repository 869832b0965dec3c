package bitmap

import (
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/bitmapfwd"
)

// TestChosenExactCover checks the parts a root picks against a brute-force
// oracle: whenever some subset of the fully received parts tiles the target
// (pairwise disjoint, union = target), chosen finds a tiling, and whatever it
// returns is pairwise disjoint and matches the union it reports.
func TestChosenExactCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const bits = 64
	for iter := 0; iter < 3000; iter++ {
		width := 2 + rng.IntN(7)
		target := bitmapfwd.NewSet(bits)
		for e := 0; e < width; e++ {
			target.Add(e)
		}
		a := newTokenAgg(0, 0, 0, target) // zero elements: every part is complete on arrival
		var sets []*bitmapfwd.Set
		for n := 1 + rng.IntN(9); len(sets) < n; {
			s := bitmapfwd.NewSet(bits)
			for e := 0; e < width; e++ {
				if rng.IntN(3) == 0 {
					s.Add(e)
				}
			}
			if s.IsEmpty() {
				continue
			}
			if _, err := a.partFor(s); err != nil {
				t.Fatal(err)
			}
			sets = append(sets, s)
		}
		// Oracle: any subset of the parts that tiles the target.
		want := false
		for m := 1; m < 1<<len(a.parts) && !want; m++ {
			u := bitmapfwd.NewSet(bits)
			ok := true
			for i, p := range a.parts {
				if m&(1<<i) == 0 {
					continue
				}
				if p.set.Intersects(u) {
					ok = false
					break
				}
				u.Or(u, p.set)
			}
			want = ok && u.Equal(target)
		}
		ps, got := a.chosen()
		u := bitmapfwd.NewSet(bits)
		for _, p := range ps {
			if p.set.Intersects(u) {
				t.Fatalf("iteration %d: chosen parts overlap (%v)", iter, sets)
			}
			u.Or(u, p.set)
		}
		if !u.Equal(got) {
			t.Fatalf("iteration %d: reported union %v, parts give %v", iter, got, u)
		}
		if a.complete() != want {
			t.Fatalf("iteration %d: complete %v, a tiling exists %v (parts %v)", iter, a.complete(), want, sets)
		}
	}
}

// TestChosenGreedyBlocked is the case the greedy pick alone gets wrong: a
// late merged {b,c} is the largest part, but {a,b} and {c,d} tile the target.
func TestChosenGreedyBlocked(t *testing.T) {
	target := setOf(64, 0, 1, 2, 3)
	a := newTokenAgg(0, 0, 0, target)
	for _, s := range []*bitmapfwd.Set{setOf(64, 1, 2), setOf(64, 0, 1), setOf(64, 2, 3)} {
		if _, err := a.partFor(s); err != nil {
			t.Fatal(err)
		}
	}
	if _, got := a.greedy(); got.Equal(target) {
		t.Fatal("greedy covers the target: the case does not exercise the exact cover")
	}
	if !a.complete() {
		t.Fatalf("not complete: missing %v", a.missing())
	}
}

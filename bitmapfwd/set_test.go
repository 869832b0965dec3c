package bitmapfwd

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

var testCaps = []int{1, 7, 8, 63, 64, 65, 128, 200, 256, 512, 1000, 1024, 4096, 65536}

func TestSetOpsAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range testCaps {
		iters := 60
		if n >= 65536 {
			iters = 8
		}
		for it := range iters {
			d := []float64{0, 0.01, 0.3, 0.9}[it%4]
			oa, ob := randOracle(r, n, d), randOracle(r, n, d)
			a, b := fromOracle(t, n, oa), fromOracle(t, n, ob)
			checkSet(t, "a", a, oa)
			and, or, andNot := oracle{}, oracle{}, oracle{}
			subset, inter := true, false
			for e := range oa {
				or[e] = true
				if ob[e] {
					and[e] = true
					inter = true
				} else {
					andNot[e] = true
					subset = false
				}
			}
			for e := range ob {
				or[e] = true
			}
			dst := NewSet(n)
			dst.And(a, b)
			checkSet(t, "And", dst, and)
			dst.Or(a, b)
			checkSet(t, "Or", dst, or)
			dst.AndNot(a, b)
			checkSet(t, "AndNot", dst, andNot)
			if a.SubsetOf(b) != subset || a.Intersects(b) != inter {
				t.Fatalf("n=%d SubsetOf=%v Intersects=%v want %v %v", n, a.SubsetOf(b), a.Intersects(b), subset, inter)
			}
			// Aliasing: dst is an operand.
			c := NewSet(n)
			c.Copy(a)
			c.Or(c, b)
			checkSet(t, "Or aliased", c, or)
			if !c.Equal(dst.orOf(a, b)) {
				t.Fatalf("Equal false for equal sets")
			}
			wantEq := len(andNot) == 0 && len(oa) == len(ob)
			if a.Equal(b) != (wantEq && len(and) == len(oa)) {
				t.Fatalf("Equal mismatch")
			}
			// Membership, All, Remove.
			for range 20 {
				e := r.IntN(n + 10)
				if a.Contains(e) != oa[e] {
					t.Fatalf("Contains(%d)=%v", e, a.Contains(e))
				}
			}
			var all []int
			for e := range a.All() {
				all = append(all, e)
			}
			if !slices.Equal(all, oa.sorted()) {
				t.Fatalf("All: got %v want %v", trunc(all), trunc(oa.sorted()))
			}
			for e := range oa {
				a.Remove(e)
				delete(oa, e)
				break
			}
			checkSet(t, "Remove", a, oa)
		}
	}
}

// orOf is a test helper: a fresh a OR b.
func (s *Set) orOf(a, b *Set) *Set {
	x := NewSet(a.n)
	x.Or(a, b)
	return x
}

func TestSetBounds(t *testing.T) {
	s := NewSet(65)
	for _, e := range []int{-1, 65, 1 << 40} {
		if s.Add(e) || s.Contains(e) || s.Remove(e) {
			t.Fatalf("out-of-range %d accepted", e)
		}
	}
	if !s.IsEmpty() {
		t.Fatal("out-of-range Add changed the set")
	}
	s.Add(64)
	if s.Next(-5) != 64 || s.Next(65) != -1 || s.Next(64) != 64 {
		t.Fatalf("Next at edges wrong")
	}
	for _, n := range []int{0, -1, MaxBits + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewSet(%d) did not panic", n)
				}
			}()
			NewSet(n)
		}()
	}
}

func TestSetCapacityMismatchPanics(t *testing.T) {
	a, b := NewSet(64), NewSet(128)
	if a.Equal(b) {
		t.Fatal("sets of different capacity are Equal")
	}
	for name, f := range map[string]func(){
		"And":    func() { a.And(a, b) },
		"Or":     func() { b.Or(a, b) },
		"AndNot": func() { a.AndNot(b, a) },
		"Copy":   func() { a.Copy(b) },
		"Subset": func() { a.SubsetOf(b) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s on capacities 64 and 128 did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestParseBitsFigureNotation(t *testing.T) {
	s := mustBits(t, "1100 0000")
	if s.Cap() != 8 || !s.Contains(0) || !s.Contains(1) || s.Count() != 2 {
		t.Fatalf("11000000 parsed as %v", s)
	}
	if s.String() != "11000000" {
		t.Fatalf("String %q", s.String())
	}
	// The wire: endpoint 0 is the most significant bit of byte 0.
	if s.Words()[0] != 0xC000000000000000 {
		t.Fatalf("word %#x", s.Words()[0])
	}
	if _, err := ParseBits("10x"); err == nil {
		t.Fatal("bad character accepted")
	}
}

func TestSetOpsAllocs(t *testing.T) {
	n := 65536
	r := rand.New(rand.NewPCG(3, 4))
	a, b := fromOracle(t, n, randOracle(r, n, 0.5)), fromOracle(t, n, randOracle(r, n, 0.5))
	dst := NewSet(n)
	sink := 0
	allocs := alloctest.PerRun(100, func() {
		dst.And(a, b)
		dst.Or(a, b)
		dst.AndNot(a, b)
		dst.Copy(a)
		if dst.Equal(b) || dst.IsEmpty() || dst.SubsetOf(b) {
			sink++
		}
		sink += dst.Count()
		dst.Add(5)
		dst.Remove(5)
		if dst.Contains(7) {
			sink++
		}
		for e := dst.Next(0); e >= 0 && e < 1000; e = dst.Next(e + 1) {
			sink += e
		}
		for e := range dst.All() {
			if e > 1000 {
				break
			}
			sink += e
		}
	})
	if allocs != 0 {
		t.Fatalf("set ops allocate %v times per run", allocs)
	}
	_ = sink
}

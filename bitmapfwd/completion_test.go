package bitmapfwd

import (
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// TestFig1AllReduceCompletion is bitmap-framework Fig. 1: s1 aggregates w1,w2
// (A-BM 11000000), s7 aggregates w3,w4 (00110000), the root s6 aggregates
// s1's and s7's results (11110000). Completion when OR(P-BM) == A-BM;
// duplicates never over-complete.
func TestFig1AllReduceCompletion(t *testing.T) {
	s1, s7, s6 := NewCompletion(8), NewCompletion(8), NewCompletion(8)
	s1.Reset(mustBits(t, "11000000"))
	s7.Reset(mustBits(t, "00110000"))
	s6.Reset(mustBits(t, "11110000"))
	type step struct {
		node     *Completion
		name     string
		pbm      string
		want     AdmitStatus
		complete bool
	}
	for i, st := range []step{
		{s1, "s1", "10000000", AdmitNew, false},       // w1
		{s1, "s1", "10000000", AdmitDuplicate, false}, // w1 retransmitted: no over-completion
		{s1, "s1", "00100000", AdmitNotOurs, false},   // w3 passes s1 toward the root
		{s1, "s1", "01000000", AdmitNew, true},        // w2: OR = A-BM
		{s1, "s1", "01000000", AdmitDuplicate, true},
		{s7, "s7", "00010000", AdmitNew, false}, // w4
		{s7, "s7", "00110000", AdmitOverlap, false},
		{s7, "s7", "00101000", AdmitForeign, false}, // w5 is not s7's
		{s7, "s7", "00100000", AdmitNew, true},
		{s6, "s6", "11000000", AdmitNew, false}, // s1's result: P-BM = s1's A-BM
		{s6, "s6", "11000000", AdmitDuplicate, false},
		{s6, "s6", "10000000", AdmitDuplicate, false}, // w1 replayed: already covered
		{s6, "s6", "00000000", AdmitEmpty, false},
		{s6, "s6", "00110000", AdmitNew, true}, // s7's result
	} {
		got := st.node.Admit(mustBits(t, st.pbm))
		if got != st.want || st.node.Complete() != st.complete {
			t.Fatalf("step %d %s P-BM %s: %v complete=%v, want %v %v", i, st.name, st.pbm, got, st.node.Complete(), st.want, st.complete)
		}
	}
	if s6.Received().String() != "11110000" || s6.MissingCount() != 0 {
		t.Fatalf("s6 received %v", s6.Received())
	}
	// The merged result s6 multicasts carries its A-BM as D-BM.
	if !s6.Received().Equal(s6.Target()) {
		t.Fatal("received != A-BM at completion")
	}
}

func TestCompletionMissingAndRestart(t *testing.T) {
	c := NewCompletion(8)
	if !c.Complete() {
		t.Fatal("empty target not complete")
	}
	c.Reset(mustBits(t, "11110000"))
	c.Admit(mustBits(t, "01000000"))
	miss := NewSet(8)
	c.Missing(miss)
	if miss.String() != "10110000" || c.MissingCount() != 3 {
		t.Fatalf("missing %v (%d)", miss, c.MissingCount())
	}
	c.Restart()
	if c.MissingCount() != 4 || !c.Received().IsEmpty() {
		t.Fatal("Restart kept received bits")
	}
}

func TestCompletionAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{8, 64, 100, 4096, 65536} {
		iters := 30
		if n == 65536 {
			iters = 3
		}
		for range iters {
			target := randOracle(r, n, 0.3)
			c := NewCompletion(n)
			c.Reset(fromOracle(t, n, target))
			recv := oracle{}
			tl := target.sorted()
			for range 40 {
				// Mostly subsets of the target, sometimes foreign bits.
				p := oracle{}
				for range r.IntN(4) {
					if len(tl) > 0 {
						p[tl[r.IntN(len(tl))]] = true
					}
				}
				if r.IntN(5) == 0 {
					p[r.IntN(n)] = true
				}
				want := naiveAdmit(target, recv, p)
				got := c.Admit(fromOracle(t, n, p))
				if got != want {
					t.Fatalf("n=%d: Admit %v, want %v", n, got, want)
				}
				if want == AdmitNew {
					for e := range p {
						recv[e] = true
					}
				}
				checkSet(t, "received", c.Received(), recv)
				if c.Complete() != (len(recv) == len(target)) {
					t.Fatalf("Complete %v with %d of %d", c.Complete(), len(recv), len(target))
				}
			}
		}
	}
}

func naiveAdmit(target, recv, p oracle) AdmitStatus {
	if len(p) == 0 {
		return AdmitEmpty
	}
	in, out, seen, fresh := 0, 0, 0, 0
	for e := range p {
		if target[e] {
			in++
		} else {
			out++
		}
		if recv[e] {
			seen++
		} else {
			fresh++
		}
	}
	switch {
	case in == 0:
		return AdmitNotOurs
	case out > 0:
		return AdmitForeign
	case fresh == 0:
		return AdmitDuplicate
	case seen > 0:
		return AdmitOverlap
	}
	return AdmitNew
}

func TestAdmitAllocs(t *testing.T) {
	const n = 256
	c := NewCompletion(n)
	target := NewSet(n)
	for e := range n {
		target.Add(e)
	}
	p := NewSet(n)
	p.Add(17)
	allocs := alloctest.PerRun(200, func() {
		c.Reset(target)
		_ = c.Admit(p)
		_ = c.Admit(p)
		_ = c.Complete()
	})
	if allocs != 0 {
		t.Fatalf("Admit allocates %v per run", allocs)
	}
}

func TestAdmitStatusString(t *testing.T) {
	seen := map[string]bool{}
	for s := AdmitNew; s <= AdmitNoState; s++ {
		str := s.String()
		if seen[str] || str == "" {
			t.Fatalf("status %d name %q", s, str)
		}
		seen[str] = true
	}
	if AdmitStatus(0).String() != "AdmitStatus(0)" {
		t.Fatal("zero status has a name")
	}
}

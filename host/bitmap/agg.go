// This file owns exact accumulation of what arrives at a root for one Token:
// contributions keyed by their P-BM, each possibly spread over several
// frames (a merged partial in KULISCH or AUTO formats rarely fits one
// frame), completion when fully received contributions with pairwise
// disjoint P-BMs cover the target, and the single final rounding.

package bitmap

import (
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// part is one contribution: the values of one P-BM over the token's range.
type part struct {
	set  *bitmapfwd.Set
	vec  *kulisch.Vector
	have []bool
	left int
}

// tokenAgg aggregates one Token over elements [first, first+n) against
// target.
type tokenAgg struct {
	first, n int
	w        int
	target   *bitmapfwd.Set
	parts    []*part
	frames   int       // frames admitted
	partials int       // frames with XFlag PARTIAL
	last     time.Time // last admitted frame
}

func newTokenAgg(first, n, w int, target *bitmapfwd.Set) *tokenAgg {
	return &tokenAgg{first: first, n: n, w: w, target: target}
}

func (a *tokenAgg) partFor(s *bitmapfwd.Set) (*part, error) {
	for _, p := range a.parts {
		if p.set.Equal(s) {
			return p, nil
		}
	}
	p := &part{set: s, have: make([]bool, a.n), left: a.n}
	if a.n > 0 {
		v, err := kulisch.NewVector(a.n, a.w)
		if err != nil {
			return nil, err
		}
		p.vec = v
	}
	a.parts = append(a.parts, p)
	return p, nil
}

// add admits one frame. Frames whose P-BM leaves the target, or whose values
// fall outside the token's range, change nothing. A repeated value (a
// duplicate frame) is not added again.
func (a *tokenAgg) add(r *rx, now time.Time) bool {
	if r.set.IsEmpty() || !r.set.SubsetOf(a.target) {
		return false
	}
	p, err := a.partFor(r.set)
	if err != nil {
		return false
	}
	a.frames++
	a.last = now
	if r.d.Ext.XFlags&parser.XFlagPartial != 0 {
		a.partials++
	}
	var it parser.GroupIter
	for g, ok := r.d.NextGroup(&it); ok; g, ok = r.d.NextGroup(&it) {
		wd := g.Format.Width(int(g.KBytes))
		for i := 0; i < int(g.Count); {
			pos := int(g.First) + i - a.first
			if pos < 0 || pos >= a.n || p.have[pos] {
				i++
				continue
			}
			// A run of new positions, added in one call.
			j := i
			for j < int(g.Count) && int(g.First)+j-a.first < a.n && !p.have[int(g.First)+j-a.first] {
				p.have[int(g.First)+j-a.first] = true
				j++
			}
			if err := p.vec.Add(pos, kulisch.Format(g.Format), g.Values[i*wd:j*wd]); err != nil {
				// A malformed value: forget the run (it is retransmitted
				// like a loss).
				for k := i; k < j; k++ {
					p.have[int(g.First)+k-a.first] = false
				}
				return false
			}
			p.left -= j - i
			i = j
		}
	}
	return true
}

// chosen returns fully received parts with pairwise disjoint P-BMs (a
// PARTIAL {a} and a later merged {a,b} cannot both count): larger sets
// first, and when that greedy pick leaves the target uncovered, an exact
// cover if the parts hold one (below).
func (a *tokenAgg) chosen() ([]*part, *bitmapfwd.Set) {
	r, got := a.greedy()
	if got.Equal(a.target) {
		return r, got
	}
	if c := a.exactCover(); c != nil {
		got = bitmapfwd.NewSet(a.target.Cap())
		for _, p := range c {
			got.Or(got, p.set)
		}
		return c, got
	}
	return r, got
}

func (a *tokenAgg) greedy() ([]*part, *bitmapfwd.Set) {
	got := bitmapfwd.NewSet(a.target.Cap())
	var r []*part
	done := make([]bool, len(a.parts))
	for {
		best := -1
		for i, p := range a.parts {
			if done[i] || p.left != 0 || p.set.Intersects(got) {
				continue
			}
			if best < 0 || p.set.Count() > a.parts[best].set.Count() {
				best = i
			}
		}
		if best < 0 {
			return r, got
		}
		done[best] = true
		r = append(r, a.parts[best])
		got.Or(got, a.parts[best].set)
	}
}

// coverSteps bounds the exact-cover search. Parts per token are few (the
// merge points of one tree, a PARTIAL or two, repairs), so the search
// normally ends in a handful of steps; the bound only keeps a pathological
// pile of overlapping late frames from costing more than a retransmission.
const coverSteps = 4096

// exactCover looks for fully received parts, pairwise disjoint, whose union
// is the target: the greedy pick misses one when a large overlapping part
// (a merged frame that arrived after a PARTIAL of the same bits) blocks the
// two smaller parts that tile it. It returns nil when there is none (or the
// search ran out of steps): the token then still misses endpoints.
func (a *tokenAgg) exactCover() []*part {
	var cand []*part
	for _, p := range a.parts {
		if p.left == 0 && !p.set.IsEmpty() {
			cand = append(cand, p)
		}
	}
	steps := 0
	got := bitmapfwd.NewSet(a.target.Cap())
	var pick []*part
	var dfs func() bool
	dfs = func() bool {
		// The lowest target endpoint not covered yet: some part must hold it.
		first := -1
		for e := a.target.Next(0); e >= 0; e = a.target.Next(e + 1) {
			if !got.Contains(e) {
				first = e
				break
			}
		}
		if first < 0 {
			return true
		}
		for _, p := range cand {
			if steps++; steps > coverSteps {
				return false
			}
			if !p.set.Contains(first) || p.set.Intersects(got) {
				continue
			}
			got.Or(got, p.set)
			pick = append(pick, p)
			if dfs() {
				return true
			}
			pick = pick[:len(pick)-1]
			got.AndNot(got, p.set)
		}
		return false
	}
	if dfs() {
		return pick
	}
	return nil
}

// received is the union of the fully received, disjoint contributions.
func (a *tokenAgg) received() *bitmapfwd.Set {
	_, got := a.chosen()
	return got
}

// complete reports whether the target is covered.
func (a *tokenAgg) complete() bool {
	_, got := a.chosen()
	return got.Equal(a.target)
}

// missing is target AND NOT received.
func (a *tokenAgg) missing() *bitmapfwd.Set {
	m := bitmapfwd.NewSet(a.target.Cap())
	m.AndNot(a.target, a.received())
	return m
}

// sum writes round(local + the chosen contributions) into dst (len n): the
// one final rounding of an exact sum, ties to even. local may be nil.
func (a *tokenAgg) sum(dst []float32, local *kulisch.Vector) error {
	if a.n == 0 {
		return nil
	}
	acc := local
	if acc == nil {
		v, err := kulisch.NewVector(a.n, a.w)
		if err != nil {
			return err
		}
		acc = v
	}
	ps, _ := a.chosen()
	buf := make([]byte, kulisch.WireSize(a.w))
	for _, p := range ps {
		for i := 0; i < a.n; i++ {
			if err := p.vec.PutWire(buf, i); err != nil {
				return err
			}
			if err := acc.MergeKulisch(i, buf); err != nil {
				return err
			}
		}
	}
	for i := range dst[:a.n] {
		b, err := acc.RoundFP32(i)
		if err != nil {
			return err
		}
		dst[i] = float32frombits(b)
	}
	return nil
}

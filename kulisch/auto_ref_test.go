package kulisch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// planAutoRef is PlanAuto as it was before the bulk extension of an open
// group (one value per step): the oracle TestPlanAutoBulkMatchesRef holds
// the fast path to, plan for plan.
func planAutoRef(dst []Group, sets []FormatSet, base Format, w, budget int) ([]Group, int, error) {
	p := planner{sets: sets}
	for f := INT8; f <= FP32; f++ {
		p.width[f] = f.Width(w)
		p.allow |= 1 << f
	}
	if ValidWidth(w) == nil {
		p.width[KULISCH] = KULISCH.Width(w)
		p.allow |= 1 << KULISCH
	} else if w != 0 {
		return dst[:0], 0, ErrWidth
	}
	if !p.allow.Has(base) {
		return dst[:0], 0, fmt.Errorf("%w: base %v", ErrFormat, base)
	}
	maxG := min(cap(dst), MaxGroups)
	if maxG == 0 {
		return dst[:0], 0, fmt.Errorf("%w: no room for a group in dst", ErrLength)
	}
	n := len(sets)
	// Only the first budget values can fit (each takes at least one byte);
	// the window may look Lookahead further.
	for j := 0; j < min(n, budget+Lookahead); j++ {
		if !sets[j].Has(base) {
			return dst[:0], 0, fmt.Errorf("%w: position %d not representable in %v", ErrNotLossless, j, base)
		}
	}
	out := dst[:0]
	pos, used := 0, 0
	var cur Format
	cnt, okUntil := 0, 0
plan:
	for pos < n {
		g, l := Format(0), 0
		if cur != 0 {
			end := min(pos+Lookahead, n)
			okUntil = max(okUntil, pos)
			for okUntil < end && sets[okUntil].Has(cur) && p.width[cur] == p.minWidth(sets[okUntil]) {
				okUntil++
			}
			if okUntil >= end {
				g, l = cur, 1
			}
		}
		if l == 0 {
			mod := 0
			if cur != 0 {
				mod = (cnt * p.width[cur]) & 3
			}
			g, l = p.window(pos, cur, mod)
			if l == 0 {
				break
			}
		}
		for k := 0; k < l; k++ {
			if g == cur && cnt < MaxGroupCount {
				c := pad4((cnt+1)*p.width[g]) - pad4(cnt*p.width[g])
				if used+c > budget {
					break plan
				}
				used += c
				cnt++
				out[len(out)-1].Count = cnt
			} else {
				c := DescriptorSize + pad4(p.width[g])
				if len(out) == maxG || used+c > budget {
					break plan
				}
				out = append(out, Group{Format: g, Count: 1})
				used += c
				cur, cnt, okUntil = g, 1, 0
			}
			pos++
		}
	}
	if nb := min(MaxCount(base, w, budget), n); pos < nb || (pos == nb && used > GroupBytes(base, nb, w)) {
		out = append(dst[:0], Group{Format: base, Count: nb})
		pos = nb
	}
	if pos == 0 && n > 0 {
		return dst[:0], 0, ErrBudget
	}
	return out, pos, nil
}

// TestPlanAutoBulkMatchesRef: PlanAuto with the bulk extension returns the
// same groups and count as the value-by-value reference on runs of every
// kind: long homogeneous runs, rare transitions, dense mixes, budgets from
// one value to a jumbo frame, bases FP32 and KULISCH.
func TestPlanAutoBulkMatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	pick := []FormatSet{SetOf(FP32, KULISCH), SetOf(FP16, FP32, KULISCH), SetOf(BF16, FP32, KULISCH),
		SetOf(INT8, FP16, BF16, FP32, KULISCH), SetOf(KULISCH), SetOf(FP16, BF16, FP32, KULISCH)}
	for it := 0; it < 3000; it++ {
		n := 1 + r.IntN(5000)
		if it%200 == 0 {
			n = 65535 + r.IntN(70000) // past one group's count limit
		}
		sets := make([]FormatSet, n)
		// Runs of one set with a per-case switching rate, from never to
		// every value.
		rate := []int{0, 2, 10, 100, 1000, 100000}[r.IntN(6)]
		base := KULISCH
		if it%3 == 0 {
			base = FP32
		}
		cur := pick[r.IntN(len(pick))]
		if it%200 == 0 {
			cur, rate = pick[3], 0 // INT8 throughout: one byte a value
		}
		for i := range sets {
			if rate > 0 && r.IntN(rate) == 0 {
				cur = pick[r.IntN(len(pick))]
			}
			s := cur
			if base == FP32 {
				s &^= SetOf(KULISCH)
				if s == 0 {
					s = SetOf(FP32)
				}
			}
			sets[i] = s
		}
		w := 288
		if base == FP32 {
			w = 0
		}
		budget := []int{8, 40, 1458, 8958, 3 * 65535, 1 + r.IntN(9000)}[r.IntN(6)]
		if it%200 == 0 {
			budget = 3 * 65535
			if base == FP32 {
				budget = 4 * 65535 // FP32-base: the plan must still beat one FP32 group
			}
		}
		ncap := []int{1, 3, MaxGroups}[r.IntN(3)]
		g1, n1, e1 := PlanAuto(make([]Group, 0, ncap), sets, base, w, budget)
		g2, n2, e2 := planAutoRef(make([]Group, 0, ncap), sets, base, w, budget)
		if n1 != n2 || !reflect.DeepEqual(g1, g2) || fmt.Sprint(e1) != fmt.Sprint(e2) {
			t.Fatalf("case %d (n %d rate %d base %v budget %d cap %d): got %v %d %v, reference %v %d %v",
				it, n, rate, base, budget, ncap, g1, n1, e1, g2, n2, e2)
		}
	}
}

// BenchmarkPlanAutoRuns plans a jumbo frame of FP32-exact values with a rare
// narrower one (sums of random 20-bit integers: the integral data of
// prismctl bench), with the bulk extension and value by value.
func BenchmarkPlanAutoRuns(b *testing.B) {
	dst := make([]Group, 0, MaxGroups)
	for _, every := range []int{32, 0} { // a narrower value every 32 on average, none
		r := rand.New(rand.NewPCG(5, 6))
		// 8952 sets: what a leaf holds at MTU 9000 when its parent's
		// window let it fall behind (o.sets is one INT8 frame long); a
		// plan of FP32 values uses a quarter of them.
		sets := make([]FormatSet, 8952)
		for i := range sets {
			sets[i] = SetOf(FP32, KULISCH)
			if every > 0 && r.IntN(every) == 0 {
				sets[i] = SetOf(BF16, FP32, KULISCH)
			}
		}
		for _, c := range []struct {
			name string
			plan func([]Group, []FormatSet, Format, int, int) ([]Group, int, error)
		}{{"bulk", PlanAuto}, {"value-by-value", planAutoRef}} {
			b.Run(fmt.Sprintf("narrow-1-in-%d/%s", every, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					c.plan(dst, sets, KULISCH, 288, 8958)
				}
			})
		}
	}
}

// dpState is a state of windowDP's program (window's before its cells
// were made compact).
type dpState struct {
	cost   int
	first  Format // format of the window's first value
	flen   int    // values of the first group within the window
	closed bool   // a later value started another group
}

// windowDP is planner.window without its shortcut: the dynamic program
// alone, the oracle of TestWindowShortcutMatchesDP.
func (p *planner) windowDP(pos int, open Format, mod int) (Format, int) {
	m := min(Lookahead, len(p.sets)-pos)
	for j := 0; j < m; j++ {
		if p.sets[pos+j]&p.allow == 0 {
			m = j // defensive: PlanAuto rejects such sets before planning
			break
		}
	}
	var cur, nxt [KULISCH + 1][4]dpState
	reset := func(t *[KULISCH + 1][4]dpState) {
		for f := range t {
			for r := range t[f] {
				t[f][r] = dpState{cost: inf}
			}
		}
	}
	reset(&cur)
	cur[open][mod] = dpState{}
	padClose := func(f Format, r int) int {
		if f == 0 {
			return 0
		}
		return (4 - r) & 3
	}
	for j := 0; j < m; j++ {
		reset(&nxt)
		s := p.sets[pos+j] & p.allow
		relax := func(f Format, r int, st dpState) {
			if st.cost < nxt[f][r].cost {
				nxt[f][r] = st
			}
		}
		for f := Format(0); f <= KULISCH; f++ {
			for r := 0; r < 4; r++ {
				st := cur[f][r]
				if st.cost >= inf {
					continue
				}
				if f != 0 && s.Has(f) {
					ns := st
					ns.cost += p.width[f]
					if j == 0 {
						ns.first, ns.flen = f, 1
					} else if !ns.closed {
						ns.flen++
					}
					relax(f, (r+p.width[f])&3, ns)
				}
				for g := INT8; g <= KULISCH; g++ {
					if g == f || !s.Has(g) {
						continue // a new group of the open format never beats extending
					}
					ns := st
					ns.cost += padClose(f, r) + DescriptorSize + p.width[g]
					if j == 0 {
						ns.first, ns.flen = g, 1
					} else {
						ns.closed = true
					}
					relax(g, p.width[g]&3, ns)
				}
			}
		}
		cur = nxt
	}
	// The group open at the window's end usually continues past it, so its
	// padding is only charged when the window reaches the last value.
	last := pos+m == len(p.sets)
	best := dpState{cost: inf}
	for f := INT8; f <= KULISCH; f++ {
		for r := 0; r < 4; r++ {
			st := cur[f][r]
			if st.cost >= inf {
				continue
			}
			if last {
				st.cost += padClose(f, r)
			}
			if st.cost < best.cost {
				best = st
			}
		}
	}
	return best.first, best.flen
}

// TestWindowShortcutMatchesDP: the window's shortcut (extend the open group
// when narrower formats could save less than a descriptor) returns what
// the full dynamic program returns, on random windows of every kind of
// set, open format and alignment, including the sets' last window.
func TestWindowShortcutMatchesDP(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	pick := []FormatSet{SetOf(FP32, KULISCH), SetOf(FP16, FP32, KULISCH), SetOf(BF16, FP32, KULISCH),
		SetOf(INT8, FP16, BF16, FP32, KULISCH), SetOf(KULISCH), SetOf(FP16, BF16, FP32, KULISCH), SetOf(INT8, FP32, KULISCH)}
	shortcuts := 0
	for it := 0; it < 200000; it++ {
		n := 1 + r.IntN(20)
		sets := make([]FormatSet, n)
		// Mostly one set with the odd other, as on real data, or any.
		common := pick[r.IntN(len(pick))]
		for i := range sets {
			sets[i] = common
			if r.IntN(4) == 0 {
				sets[i] = pick[r.IntN(len(pick))]
			}
		}
		p := planner{sets: sets}
		for f := INT8; f <= FP32; f++ {
			p.width[f] = f.Width(288)
			p.allow |= 1 << f
		}
		p.width[KULISCH] = KULISCH.Width(288)
		p.allow |= 1 << KULISCH
		pos := r.IntN(n)
		open := Format(r.IntN(int(KULISCH) + 1))
		mod := 0
		if open != 0 {
			mod = r.IntN(4)
		}
		g1, l1 := p.window(pos, open, mod)
		g2, l2 := p.windowDP(pos, open, mod)
		if g1 != g2 || l1 != l2 {
			t.Fatalf("sets %v pos %d open %v mod %d: window %v,%d, program %v,%d", sets, pos, open, mod, g1, l1, g2, l2)
		}
		if open != 0 && g1 == open && l1 == min(Lookahead, n-pos) {
			shortcuts++
		}
	}
	if shortcuts == 0 {
		t.Fatal("no case extended the open group over a whole window: the test does not reach the shortcut")
	}
}

// TestAutoCounterMatchesAutoMaxCount: an AutoCounter fed and drained like a
// leaf's set cache answers every question as AutoMaxCount does on the sets
// it holds.
func TestAutoCounterMatchesAutoMaxCount(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	pick := []FormatSet{SetOf(FP32, KULISCH), SetOf(FP16, FP32, KULISCH), SetOf(BF16, FP32, KULISCH),
		SetOf(INT8, FP16, BF16, FP32, KULISCH), SetOf(KULISCH), SetOf(INT8, FP32, KULISCH)}
	for _, w := range []int{0, 288, 4096} {
		var c AutoCounter
		c.Reset(w, 0)
		var held []FormatSet
		for it := 0; it < 20000; it++ {
			switch r.IntN(3) {
			case 0:
				add := make([]FormatSet, r.IntN(300))
				for i := range add {
					add[i] = pick[r.IntN(len(pick))]
				}
				c.Append(add)
				held = append(held, add...)
			case 1:
				k := r.IntN(len(held) + 1)
				c.Drop(k)
				held = held[k:]
			}
			if c.Len() != len(held) {
				t.Fatalf("Len %d, holding %d", c.Len(), len(held))
			}
			n := r.IntN(len(held) + 1)
			budget := []int{3, 4, 40, 1458, 8958, r.IntN(20000)}[r.IntN(6)]
			if got, want := c.MaxCount(n, budget), AutoMaxCount(held[:n], w, budget); got != want {
				t.Fatalf("w %d: MaxCount(%d, %d) = %d, AutoMaxCount %d", w, n, budget, got, want)
			}
		}
	}
}

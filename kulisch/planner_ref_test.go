package kulisch

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refLookahead is the reference planner's bound on new groups per value:
// a group of the last 1..12 values (longer groups grow by extension).
const refLookahead = 12

// refState is the cheapest plan the reference finds for a prefix of the
// run: its last group is [start, end) with extent e, the groups before it
// cost closed bytes, the whole plan total bytes in ng groups.
type refState struct {
	closed, total int32
	start         int32
	ng            int32
	e             extent
}

// planRef is the byte-optimal reference the greedy planner is measured
// against (prismd's planner before it became greedy): a dynamic program
// over the run in exact body bytes that keeps, for every prefix, the
// cheapest plan whose last group either extends the previous prefix's
// last group or is a new group of the last 1..refLookahead values, and
// ends the frame at the longest prefix within the budget.
func planRef(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	maxG := min(cap(dst), MaxGroups)
	n := len(spans)
	st := make([]refState, n+1)
	end := 0
	for j := 1; j <= n; j++ {
		x := spans[j-1]
		var c refState
		c.total = 1 << 30
		if j > 1 && st[j-1].e.n < MaxGroupCount {
			prev := &st[j-1]
			e := prev.e.add(x)
			b, _ := groupBytes(e, w)
			c = refState{closed: prev.closed, total: prev.closed + int32(b), start: prev.start, ng: prev.ng, e: e}
		}
		lo, hi := noLo, 0
		best, bi := c.total, -1
		for i := j - 1; i >= max(0, j-refLookahead); i-- {
			if h := int(spans[i].Hi); h != 0 {
				lo, hi = min(lo, int(spans[i].Lo)), max(hi, h)
			}
			size, _ := groupBytes(extent{n: j - i, lo: lo, hi: hi}, w)
			if t := st[i].total + int32(size); t < best || t == best && bi >= 0 && st[i].ng < st[bi].ng {
				best, bi = t, i
			}
		}
		if bi >= 0 && (best < c.total || best == c.total && st[bi].ng+1 < c.ng) {
			e := extent{lo: noLo}
			for i := bi; i < j; i++ {
				e = e.add(spans[i])
			}
			c = refState{closed: st[bi].total, total: best, start: int32(bi), ng: st[bi].ng + 1, e: e}
		}
		st[j] = c
		end = j
		if int(c.total) > budget {
			break
		}
	}
	for end > 0 && (int(st[end].total) > budget || int(st[end].ng) > maxG) {
		end--
	}
	var out []ScaledGroup
	for j := end; j > 0; j = int(st[j].start) {
		out = append(out, groupOf(st[j].e, w))
	}
	slices.Reverse(out)
	pos, used := end, int(st[end].total)
	if nb := min(MaxCount(KULISCH, w, budget), n); pos < nb || (pos == nb && used >= GroupBytes(KULISCH, nb, w)) {
		out = []ScaledGroup{{Count: nb}}
		pos = nb
	}
	if pos == 0 && n > 0 {
		return nil, 0, ErrBudget
	}
	return out, pos, nil
}

// spanRuns are the extents the planner is compared on: gradient-like sums
// (the common case), sums of mixed magnitudes, runs with zeros and
// specials, and huge extents that send steps to the slow path.
func spanRuns(t testing.TB, rng *rand.Rand, w, n int) map[string][]Span {
	runs := map[string][]Span{}
	grad := make([]*refSum, n)
	for i := range grad {
		grad[i] = &refSum{}
		for range 2 {
			x := float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
			grad[i].addFP32(math.Float32bits(x))
		}
	}
	normal := make([]*refSum, n)
	for i := range normal {
		normal[i] = &refSum{}
		for range 2 {
			normal[i].addFP32(math.Float32bits(float32(rng.NormFloat64())))
		}
	}
	mixed := make([]*refSum, n)
	for i := range mixed {
		mixed[i] = randRef(rng, w)
	}
	for name, refs := range map[string][]*refSum{"gradient": grad, "normal": normal, "mixed": mixed} {
		v := load(t, w, refs)
		sp := make([]Span, n)
		if err := v.Spans(0, sp); err != nil {
			t.Fatal(err)
		}
		runs[name] = sp
	}
	synth := make([]Span, n)
	for i := range synth {
		switch rng.IntN(12) {
		case 0: // a zero or special
		case 1: // huge: plain KULISCH may be cheaper
			lo := rng.IntN(8)
			synth[i] = Span{Lo: uint16(lo), Hi: uint16(w - rng.IntN(8))}
		case 2:
			lo := rng.IntN(w / 4)
			synth[i] = Span{Lo: uint16(lo), Hi: uint16(min(w, lo+w/2+rng.IntN(w/2)))}
		default:
			lo := 100 + rng.IntN(40)
			synth[i] = Span{Lo: uint16(lo), Hi: uint16(lo + 1 + rng.IntN(40))}
		}
	}
	runs["synthetic"] = synth
	runs["zeros"] = make([]Span, n)
	return runs
}

// planBytes is the body bytes of plan gs at width w.
func planBytes(gs []ScaledGroup, w int) int {
	n := 0
	for _, g := range gs {
		if g.Bytes == 0 {
			n += GroupBytes(KULISCH, g.Count, w)
		} else {
			n += ScaledGroupBytes(g.Count, g.Bytes)
		}
	}
	return n
}

// streamBytes plans a whole run frame by frame with plan and returns the
// body bytes per value.
func streamBytes(t *testing.T, sp []Span, w, budget int, plan func([]ScaledGroup, []Span, int, int) ([]ScaledGroup, int, error)) float64 {
	t.Helper()
	dst := make([]ScaledGroup, 0, MaxGroups)
	total := 0
	for pos := 0; pos < len(sp); {
		g, used, err := plan(dst, sp[pos:], w, budget)
		if err != nil {
			t.Fatal(err)
		}
		total += planBytes(g, w)
		pos += used
	}
	return float64(total) / float64(len(sp))
}

// TestPlannerNearOptimal: the greedy planner's partials are within a few
// percent of the byte-optimal reference on every kind of run, at MTU 1500
// and 9000, so the CPU it saves is not paid back on the link.
func TestPlannerNearOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	const w = 288
	for name, sp := range spanRuns(t, rng, w, 20000) {
		for _, mtu := range []int{1500, 9000} {
			budget := BodyBudget(mtu, 0)
			var p ScaledPlanner
			got := streamBytes(t, sp, w, budget, p.Plan)
			ref := streamBytes(t, sp, w, budget, planRef)
			t.Logf("%s MTU %d: %.3f body bytes per value (reference %.3f, +%.1f%%)", name, mtu, got, ref, 100*(got/ref-1))
			if got > ref*1.05 {
				t.Errorf("%s MTU %d: %.3f body bytes per value, more than 5%% over the reference's %.3f", name, mtu, got, ref)
			}
		}
	}
}

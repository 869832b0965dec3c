// This file owns the AUTO planner: the choice of concrete, lossless
// NumberGroup formats for a run of consecutive accumulator outputs within one
// packet's body budget.

package kulisch

import (
	"fmt"
	"math/bits"
)

// Group is one planned NumberGroup: Count consecutive values in Format.
type Group struct {
	Format Format
	Count  int
}

const (
	// Lookahead is the AUTO window in values (prism-protocol: "bounded
	// eight-element lookahead").
	Lookahead = 8
	// MaxGroups and MaxGroupCount are the protocol's limits: an 8-bit
	// Group Count and a 16-bit per-group Count.
	MaxGroups     = 255
	MaxGroupCount = 65535
	// DescriptorSize is the NumberGroup descriptor.
	DescriptorSize = 4
	// HeaderOverhead is the control word plus the DATA/RESULT header.
	HeaderOverhead = 2 + 40
)

func pad4(n int) int { return (n + 3) &^ 3 }

// GroupBytes is the body bytes of a group of count values of format f
// (descriptor, values, zero padding to 4); w is the Kulisch width.
func GroupBytes(f Format, count, w int) int {
	return DescriptorSize + pad4(count*f.Width(w))
}

// BodyBudget is the NumberGroup budget of a DATA/RESULT frame at mtu with
// ext bytes of endpoint-set extension: 1458 at MTU 1500 without extension.
func BodyBudget(mtu, ext int) int { return mtu - HeaderOverhead - ext }

// MaxCount is the largest count of one group of format f within budget.
func MaxCount(f Format, w, budget int) int {
	wd := f.Width(w)
	if wd == 0 || budget < DescriptorSize {
		return 0
	}
	return min(((budget-DescriptorSize)&^3)/wd, MaxGroupCount)
}

// AutoSets fills sets[k] with b.AutoSet(first+k).
func AutoSets(b Bank, first int, sets []FormatSet) error {
	if v, ok := b.(*Vector); ok {
		return v.autoSets(first, sets)
	}
	for k := range sets {
		s, err := b.AutoSet(first + k)
		if err != nil {
			return err
		}
		sets[k] = s
	}
	return nil
}

type planner struct {
	sets  []FormatSet
	width [KULISCH + 1]int
	allow FormatSet
}

// minWidth is the narrowest width among the allowed formats of s (widths
// are ordered INT8 < FP16 = BF16 < FP32 < KULISCH).
func (p *planner) minWidth(s FormatSet) int {
	s &= p.allow
	switch {
	case s.Has(INT8):
		return 1
	case s.Has(FP16) || s.Has(BF16):
		return 2
	case s.Has(FP32):
		return 4
	}
	return p.width[KULISCH]
}

// narrowest[f][s] reports whether f is in s and as narrow as the narrowest
// format of s: whether extending a group of f by a value of set s is
// what the planner's run test asks. The widths it compares do not depend
// on the Kulisch width (KULISCH is the widest format, so it is the
// narrowest only of a set holding nothing else) nor on whether KULISCH is
// allowed (a set holding f has a narrower format than KULISCH). A table
// lookup replaced four set tests per value in PlanAuto's run scan.
var narrowest = func() (t [KULISCH + 1][256]bool) {
	p := planner{allow: 1<<INT8 | 1<<FP16 | 1<<BF16 | 1<<FP32 | 1<<KULISCH}
	for f := INT8; f <= FP32; f++ {
		p.width[f] = f.Width(0)
	}
	p.width[KULISCH] = KULISCH.Width(64)
	for f := INT8; f <= KULISCH; f++ {
		for s := range t[f] {
			t[f][s] = FormatSet(s).Has(f) && p.width[f] == p.minWidth(FormatSet(s))
		}
	}
	return t
}()

const inf = 1 << 30

// window plans sets[pos:pos+Lookahead] exactly (minimum bytes: value
// widths, 4-byte descriptors, padding of every group closed in the window,
// and of the last group when the window ends the run), starting from the open group (open, mod) (open 0: none),
// and returns the first group's format and length within the window. Ties
// keep the first plan found in a fixed order (extend first, then formats in
// code order), so the result is deterministic.
func (p *planner) window(pos int, open Format, mod int) (Format, int) {
	m := min(Lookahead, len(p.sets)-pos)
	for j := 0; j < m; j++ {
		if p.sets[pos+j]&p.allow == 0 {
			m = j // defensive: PlanAuto rejects such sets before planning
			break
		}
	}
	if open != 0 && pos+m < len(p.sets) {
		// Every plan but extending the open group over the window opens
		// a group of another format: a descriptor, DescriptorSize bytes,
		// plus its padding. So when the bytes narrower formats could save
		// over the window are fewer than that, extending is strictly
		// cheapest and the program below would return it: skip it. (On
		// sums of small integers, mostly FP16 with the odd INT8-able
		// value, this was most of a leaf's planning.) The window's end is
		// excluded: there the open group's final padding counts too.
		save := 0
		for j := 0; j < m && save < DescriptorSize; j++ {
			s := p.sets[pos+j] & p.allow
			if !s.Has(open) {
				save = DescriptorSize
				break
			}
			save += p.width[open] - p.minWidth(s)
		}
		if save < DescriptorSize && m > 0 {
			return open, m
		}
	}
	// The program's states are (open format, bytes mod 4) pairs, cell
	// f*4+r; live marks the reachable ones, visited in ascending order
	// (extend first, then new groups in format order) so that ties
	// resolve as in the plain program (windowDP in the tests). Compact
	// cells and skipping unreachable ones halved its cost, which on sums
	// of small integers (mixed INT8, FP16, BF16 sets) was half a leaf's
	// CPU.
	var cur, nxt [(KULISCH + 1) * 4]dpCell
	cur = infCells
	cur[int(open)*4+mod] = dpCell{}
	live := uint32(1) << (int(open)*4 + mod)
	for j := 0; j < m; j++ {
		nxt = infCells
		var nlive uint32
		s := p.sets[pos+j] & p.allow
		// Extending: each state has one successor, and no two states
		// extend into the same cell. Closing the open group (padding it)
		// and opening one of format g is the same from every state but
		// for its cost, so only the cheapest closing state per open
		// format matters (the first in cell order on ties, as the plain
		// program relaxes them): five candidates per step instead of
		// five per state.
		var bestC [KULISCH + 1]int32
		var bestI [KULISCH + 1]int8
		for f := range bestC {
			bestC[f], bestI[f] = infCost, -1
		}
		for l := live; l != 0; l &= l - 1 {
			c := bits.TrailingZeros32(l)
			f, r := Format(c>>2), c&3
			st := cur[c]
			if f != 0 && s.Has(f) {
				ns := st
				ns.cost += int32(p.width[f])
				if j == 0 {
					ns.first, ns.flen = f, 1
				} else if !ns.closed {
					ns.flen++
				}
				d := int(f)*4 + (r+p.width[f])&3
				nxt[d], nlive = ns, nlive|1<<d
			}
			closeCost := st.cost
			if f != 0 {
				closeCost += int32((4 - r) & 3)
			}
			if closeCost < bestC[f] {
				bestC[f], bestI[f] = closeCost, int8(c)
			}
		}
		// b1: the cheapest closing state; b2: the cheapest of another
		// open format (what a group of b1's format must open from).
		b1, b2 := Format(0), Format(0)
		for f := Format(1); f <= KULISCH; f++ {
			if bestC[f] < bestC[b1] || bestC[f] == bestC[b1] && bestI[f] >= 0 && (bestI[b1] < 0 || bestI[f] < bestI[b1]) {
				b1 = f
			}
		}
		if b1 == 0 {
			b2 = 1
		}
		for f := b2 + 1; f <= KULISCH; f++ {
			if f != b1 && (bestC[f] < bestC[b2] || bestC[f] == bestC[b2] && bestI[f] >= 0 && (bestI[b2] < 0 || bestI[f] < bestI[b2])) {
				b2 = f
			}
		}
		for g := INT8; g <= KULISCH; g++ {
			if !s.Has(g) {
				continue
			}
			src := b1
			if src == g {
				src = b2 // a new group of the open format never beats extending
			}
			if bestI[src] < 0 {
				continue
			}
			cost := bestC[src] + DescriptorSize + int32(p.width[g])
			// The only other way into this cell is extending from (g, 0),
			// cell 4g: on a tie the earlier cell wins.
			d := int(g)*4 + p.width[g]&3
			if cost < nxt[d].cost || cost == nxt[d].cost && int(bestI[src]) < int(g)*4 {
				ns := cur[bestI[src]]
				ns.cost = cost
				if j == 0 {
					ns.first, ns.flen = g, 1
				} else {
					ns.closed = true
				}
				nxt[d], nlive = ns, nlive|1<<d
			}
		}
		cur, live = nxt, nlive
	}
	// The group open at the window's end usually continues past it, so its
	// padding is only charged when the window reaches the last value.
	last := pos+m == len(p.sets)
	best := dpCell{cost: infCost}
	for l := live &^ 0xF; l != 0; l &= l - 1 { // format 0 (no group) is never an end state
		c := bits.TrailingZeros32(l)
		st := cur[c]
		if last {
			st.cost += int32((4 - c&3) & 3)
		}
		if st.cost < best.cost {
			best = st
		}
	}
	return best.first, int(best.flen)
}

// dpCell is a state of window's program: its cost in bytes, and the
// window's first group (format, length) on the cheapest way to it.
type dpCell struct {
	cost   int32
	first  Format
	flen   uint8 // at most Lookahead
	closed bool  // a later value started another group
}

const infCost = inf

// infCells is every state unreachable.
var infCells = func() (t [(KULISCH + 1) * 4]dpCell) {
	for i := range t {
		t[i].cost = infCost
	}
	return t
}()

// AutoMaxCount bounds how many of the values with these AUTO sets any
// PlanAuto plan can carry in budget bytes: each takes at least its
// narrowest format's width, and the frame at least one descriptor. A
// caller comparing AUTO with another encoding by values carried can skip
// planning AUTO when the other one already carries more (planning is a
// small dynamic program per group, and a leaf plans every frame).
func AutoMaxCount(sets []FormatSet, w, budget int) int {
	p := planner{}
	p.allow = 1<<INT8 | 1<<FP16 | 1<<BF16 | 1<<FP32 | 1<<KULISCH
	p.width[KULISCH] = KULISCH.Width(w)
	room := budget - DescriptorSize
	for k, s := range sets {
		if room -= p.minWidth(s); room < 0 {
			return k
		}
	}
	return len(sets)
}

// PlanAuto plans one packet's NumberGroups for the values whose lossless
// format sets are sets (sets[k] for position first+k, from AutoSet), within
// budget body bytes (BodyBudget). base is the policy's base format
// (Policy.Base: KULISCH or FP32) and must be lossless for every value; w is
// the Kulisch width (0 when KULISCH is not in use: it is then never
// chosen).
//
// Groups are written into dst[:0] (at most min(cap(dst), 255) groups; PlanAuto
// does not allocate); the result is that slice and the number of values
// consumed from the front of sets. The caller sends the rest in the next
// packet.
//
// The plan uses an exact lookahead over the next eight values (value widths,
// descriptors, padding), emits the first group of that window's best plan,
// merges it with the open group when the format is the same, slides the
// window, and stops at the first value that no longer fits the budget.
// When the open group's format is already the narrowest lossless one for
// all eight values ahead, extending it is optimal and the window is skipped,
// so homogeneous runs cost O(1) per value. Finally, if one group of base
// would carry more values, or as many in fewer bytes, that group is used
// instead: AUTO never does worse than the base format.
func PlanAuto(dst []Group, sets []FormatSet, base Format, w, budget int) ([]Group, int, error) {
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
	out := dst[:0]
	pos, used := 0, 0
	var cur Format
	cnt, okUntil := 0, 0
plan:
	for pos < n {
		g, l := Format(0), 0
		if cur != 0 {
			// Extending the open group is optimal at every position whose
			// next Lookahead values all have cur as their narrowest format:
			// find the run of such values, then add the positions whose
			// window lies inside it in one step (a value at a time, this
			// loop was most of the planning on homogeneous data).
			okUntil = max(okUntil, pos)
			ok := &narrowest[cur]
			for okUntil < n && ok[sets[okUntil]] {
				okUntil++
			}
			switch {
			case okUntil == n:
				l = n - pos
			case okUntil-pos >= Lookahead:
				l = okUntil - pos - (Lookahead - 1)
			}
			if l > 0 {
				// As many as the budget and the group count allow: the cost
				// of cnt+k values is pad4((cnt+k)*width), monotone in k.
				wd := p.width[cur]
				room := (budget - used + pad4(cnt*wd)) &^ 3
				fit := min(l, room/wd-cnt, MaxGroupCount-cnt)
				if fit > 0 {
					used += pad4((cnt+fit)*wd) - pad4(cnt*wd)
					cnt += fit
					out[len(out)-1].Count = cnt
					pos += fit
				}
				if fit < l && fit < MaxGroupCount-cnt+fit {
					break plan // the budget is spent
				}
				if fit == l {
					continue
				}
				// The group is full (MaxGroupCount): the next value opens
				// another, as the value-by-value loop would.
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
	nb := min(MaxCount(base, w, budget), n)
	// Every value the plan, or the one group of base it is weighed
	// against, could carry or look at must be representable in base.
	// Checked after planning, over those only: checking every value that
	// could fit a frame (budget of them, one byte each) up front was three
	// quarters of the planning of a leaf holding a few frames of
	// FP32-exact sums (MTU 9000), which a plan uses a quarter of.
	for j, end := 0, min(n, max(pos, nb)+Lookahead); j < end; j++ {
		if !sets[j].Has(base) {
			return dst[:0], 0, fmt.Errorf("%w: position %d not representable in %v", ErrNotLossless, j, base)
		}
	}
	if pos < nb || (pos == nb && used > GroupBytes(base, nb, w)) {
		out = append(dst[:0], Group{Format: base, Count: nb})
		pos = nb
	}
	if pos == 0 && n > 0 {
		return dst[:0], 0, ErrBudget
	}
	return out, pos, nil
}

// FrameElements is the most values one frame of format f carries at mtu
// (W = w for KULISCH): how many elements a receive window must allow per
// interval on a stream of f. AUTO may pick any concrete format, INT8 the
// densest. With scaled, KULISCH may also arrive as KULISCH_SCALED groups,
// up to one value per two bytes.
func FrameElements(f Format, w, mtu int, scaled bool) int {
	budget := BodyBudget(mtu, 0)
	if f == AUTO {
		f = INT8
	}
	n := MaxCount(f, w, budget)
	if f == KULISCH && scaled {
		n = max(n, MaxScaledCount(budget))
	}
	return max(1, n)
}

// AutoCounter answers AutoMaxCount for the AUTO sets of a sliding run of
// positions, as a leaf keeps them (new sets appended as elements complete,
// the front dropped as frames go out), in O(log n) per question instead
// of a pass over every set: a leaf asks before each frame whether the
// values it has could all fit, and on sums of integers those passes were
// a twentieth of its CPU. It keeps prefix sums of the narrowest widths.
type AutoCounter struct {
	minW [256]int32 // narrowest width of each set
	pre  []int32    // pre[k]: narrowest widths of the first k sets (at most 512 B each)
}

// Reset empties c for Kulisch width w (0: KULISCH never chosen, as in
// AutoMaxCount), with room for n sets before Append allocates.
func (c *AutoCounter) Reset(w, n int) {
	p := planner{allow: 1<<INT8 | 1<<FP16 | 1<<BF16 | 1<<FP32 | 1<<KULISCH}
	p.width[KULISCH] = KULISCH.Width(w)
	for s := range c.minW {
		c.minW[s] = int32(p.minWidth(FormatSet(s)))
	}
	if cap(c.pre) < n+1 {
		c.pre = make([]int32, 0, n+1)
	}
	c.pre = append(c.pre[:0], 0)
}

// Len is the number of sets c holds.
func (c *AutoCounter) Len() int { return len(c.pre) - 1 }

// Drop forgets the first k sets.
func (c *AutoCounter) Drop(k int) {
	if k == 0 {
		return // a pass over every sum for nothing
	}
	base := c.pre[k]
	n := copy(c.pre, c.pre[k:])
	c.pre = c.pre[:n]
	for i := range c.pre {
		c.pre[i] -= base
	}
}

// Append adds sets after those c holds.
func (c *AutoCounter) Append(sets []FormatSet) {
	t := c.pre[len(c.pre)-1]
	for _, s := range sets {
		t += c.minW[s]
		c.pre = append(c.pre, t)
	}
}

// MaxCount is AutoMaxCount of the first n sets c holds.
func (c *AutoCounter) MaxCount(n, budget int) int {
	room := budget - DescriptorSize
	// The largest k <= n with pre[k] <= room (pre is nondecreasing).
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if int(c.pre[mid]) <= room {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// autoSets is AutoSets for a Vector: the lane-only elements (most of them,
// for sums of a few inputs) go to laneSet without a call through the Bank
// interface per element; a leaf computes the set of every element it sends
// up (under KULISCH_FIXED with AUTO partials, a sixth of its CPU on sums of
// 20-bit integers).
func (v *Vector) autoSets(first int, sets []FormatSet) error {
	if first < 0 || first+len(sets) > v.n {
		return ErrRange
	}
	for k := range sets {
		if x, ok := v.laneOnly(first + k); ok {
			sets[k] = laneSet(x)
			continue
		}
		s, err := v.AutoSet(first + k)
		if err != nil {
			return err
		}
		sets[k] = s
	}
	return nil
}

// FP32Exact returns how many of the n elements from first FP32 holds
// exactly, counted from first up to the first it does not: the elements a
// partial may carry as one FP32 group. Lane-only values take one
// conversion each; others (zeros, digits, special values) their AutoSet.
func (v *Vector) FP32Exact(first, n int) int {
	if first < 0 || n < 0 || first+n > v.n {
		return 0
	}
	next := 0 // where the AVX2 kernel takes over again
	for k := 0; k < n; k++ {
		if k == next && haveAVX2 {
			// Lane-only elements four at a time (on integer sums, the
			// check was a tenth of a leaf's CPU one element at a time);
			// the group the kernel stops at goes through this loop.
			end := first + n
			k += laneExactBulk(v.lane[first+k:end], v.flags[first+k:end], v.nlo[first+k:end], v.hi[first+k:end])
			next = k + 4
			if k == n {
				break
			}
		}
		if x, ok := v.laneOnly(first + k); ok {
			if float64(float32(x)) != x {
				return k // beyond FP32's precision or range
			}
			continue
		}
		if s, err := v.AutoSet(first + k); err != nil || !s.Has(FP32) {
			return k
		}
	}
	return n
}

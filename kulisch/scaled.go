// This file owns KULISCH_SCALED, the compact exact representation of Kulisch
// partials: a run of values shares one exponent offset (Shift) and one
// integer byte count (B), so a partial whose values span a few dozen
// significant bits costs a few bytes per value instead of 1 + W/8. It holds
// the per-value extents (Spans), the group planner (ScaledPlanner), the encoder
// (PutScaled) and the exact merge (MergeScaled). The parser writes the
// descriptor, the Scale Word and the padding; this file only sees values.

package kulisch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// KULISCH_SCALED is format code 7 (docs/protocol.md section 6): a group of
// Kulisch values that share Shift and B. It appears only in a switch's
// partials to its parent, never in a policy or a capability record.
const KULISCH_SCALED Format = 7

const (
	// ScaleWordSize is the Scale Word that opens a KULISCH_SCALED value
	// area: Shift (2 bytes) and 2 reserved bytes, which keep the values
	// 4-byte aligned relative to the descriptor.
	ScaleWordSize = 4
	// MaxScaledBytes bounds B: no value of a legal width needs more than
	// MaxWidth/8 integer bytes.
	MaxScaledBytes = MaxWidth / 8
	// ScaledLookahead bounds the new groups the planner tries per value:
	// a group of the last 1..12 values (longer groups grow by extension).
	// A new group costs 8 bytes (descriptor, Scale Word), so it pays when
	// it saves a byte per value over about 8 values: 12 finds those cuts
	// (sums of N(0,1) FP32: 5.3 bytes per value, 5.7 with 8) while
	// planning stays O(12) per value.
	ScaledLookahead = 12
)

// Span is the extent of one exact value's significant bits, in units of
// 2^-149: the value is a multiple of 2^Lo and lies in the signed range
// [-2^(Hi-1), 2^(Hi-1)). Hi is 0 for the special states (zeros, infinities,
// NaN), whose integer is zero and constrains no group.
type Span struct {
	Lo, Hi uint16
}

// ScaledGroup is one planned group of consecutive values: a KULISCH_SCALED
// group with Shift and Bytes (B), or a plain KULISCH group when Bytes is 0.
type ScaledGroup struct {
	Count int
	Shift int
	Bytes int
}

// ScaledGroupBytes is the body bytes of a KULISCH_SCALED group of count
// values of b integer bytes: descriptor, Scale Word, values, zero padding.
func ScaledGroupBytes(count, b int) int {
	return DescriptorSize + pad4(ScaleWordSize+count*(1+b))
}

// MaxScaledCount is the most values one frame body of budget bytes can
// carry in KULISCH_SCALED groups (one group, B = 1): the bound a receiver
// needs for its element credits.
func MaxScaledCount(budget int) int {
	n := (((budget - DescriptorSize) &^ 3) - ScaleWordSize) / 2
	return max(0, min(n, MaxGroupCount))
}

// ScaleFor is the (Shift, B) of a group whose finite values have the
// combined extent lo (minimum Lo) and hi (maximum Hi; 0 when the group holds
// no finite value) at width w: B is the fewest bytes that hold every value
// shifted right by lo, and Shift is lo lowered, if needed, so that
// Shift + 8B <= w (lowering Shift only appends zero bits, so it stays exact).
func ScaleFor(lo, hi, w int) (shift, b int) {
	if hi == 0 {
		return 0, 1
	}
	b = max(1, (hi-lo+7)/8)
	return min(lo, w-8*b), b
}

// checkScale validates a group's Shift and B against width w: B in
// 1..MaxScaledBytes, Shift >= 0 and Shift + 8B <= w, which is exactly what
// keeps every value of the group inside the signed W-bit range.
func checkScale(shift, b, w int) error {
	if b < 1 || b > MaxScaledBytes || shift < 0 || shift+8*b > w {
		return fmt.Errorf("%w: Shift %d, B %d at W=%d (need B in 1..%d and Shift + 8B <= W)", ErrWire, shift, b, w, MaxScaledBytes)
	}
	return nil
}

// spanOf is the extent of a finite nonzero resolved value.
func spanOf(dg []int64) Span {
	top := len(dg) - 1
	j := 0
	for j < top && dg[j] == 0 {
		j++
	}
	var lo int
	if j < top {
		lo = digitBits*j + bits.TrailingZeros32(uint32(dg[j]))
	} else {
		lo = digitBits*top + bits.TrailingZeros64(uint64(dg[top]))
	}
	// The signed width of x is the bit length of x (x >= 0) or of ^x
	// (x < 0), plus the sign bit.
	neg := dg[top] < 0
	t := dg[top]
	if neg {
		t = ^t
	}
	if t != 0 {
		return Span{Lo: uint16(lo), Hi: uint16(digitBits*top + bits.Len64(uint64(t)) + 1)}
	}
	for k := top - 1; k >= 0; k-- {
		x := uint32(dg[k])
		if neg {
			x = ^x
		}
		if x != 0 {
			return Span{Lo: uint16(lo), Hi: uint16(digitBits*k + bits.Len32(x) + 1)}
		}
	}
	return Span{Lo: uint16(lo), Hi: 1} // -1 unit
}

// Spans fills dst[k] with the extent of accumulator first+k. A finite sum
// that does not fit W is ErrOverflow.
func (v *Vector) Spans(first int, dst []Span) error {
	if first < 0 || first+len(dst) > v.n {
		return ErrRange
	}
	for k := range dst {
		if l, ok := v.laneOnly(first + k); ok {
			dst[k] = laneSpan(l)
			continue
		}
		x := v.get(first + k)
		if x.over {
			return v.overErr(first + k)
		}
		if x.state != Finite {
			dst[k] = Span{}
			continue
		}
		dst[k] = spanOf(x.dg)
	}
	return nil
}

// extract32 returns bits [p, p+32) of a resolved two's-complement value.
func extract32(dg []int64, p int) uint32 {
	top := len(dg) - 1
	j, r := p/digitBits, uint(p%digitBits)
	switch {
	case j > top:
		return uint32(dg[top] >> 63)
	case j == top:
		return uint32(dg[top] >> r)
	}
	// dg[j] is in [0, 2^32); the next digit supplies the upper r bits.
	return uint32(uint64(dg[j])>>r | uint64(dg[j+1])<<(digitBits-r))
}

// PutScaled writes accumulators first..first+count-1 as KULISCH_SCALED
// values with Shift shift and B b into dst[:count*(1+b)]: per value the
// state byte and the b-byte little-endian two's complement of value/2^shift.
// A value that is not a multiple of 2^shift or does not fit b bytes after
// the shift is ErrNotLossless, a finite sum that does not fit W ErrOverflow;
// on error the contents of dst are unspecified.
func (v *Vector) PutScaled(dst []byte, first, count, shift, b int) error {
	if first < 0 || count < 0 || first+count > v.n {
		return ErrRange
	}
	if err := checkScale(shift, b, v.w); err != nil {
		return err
	}
	ws := 1 + b
	if len(dst) < count*ws {
		return ErrLength
	}
	for k := 0; k < count; k++ {
		i := first + k
		out := dst[k*ws : (k+1)*ws]
		if l, ok := v.laneOnly(i); ok {
			neg, m, lo := laneParts(l) // once for the check and the bytes
			if s := partsSpan(neg, m, lo); int(s.Lo) < shift || int(s.Hi) > shift+8*b {
				return fmt.Errorf("%w: element %d (bits %d..%d) in KULISCH_SCALED Shift %d, B %d", ErrNotLossless, i, s.Lo, s.Hi, shift, b)
			}
			out[0] = uint8(Finite)
			putLaneScaled(out[1:], neg, m, lo, shift)
			continue
		}
		x := v.get(i)
		if x.over {
			return v.overErr(i)
		}
		out[0] = uint8(x.state)
		if x.state != Finite {
			clear(out[1:])
			continue
		}
		if s := spanOf(x.dg); int(s.Lo) < shift || int(s.Hi) > shift+8*b {
			return fmt.Errorf("%w: element %d (bits %d..%d) in KULISCH_SCALED Shift %d, B %d", ErrNotLossless, i, s.Lo, s.Hi, shift, b)
		}
		for c := 0; 4*c < b; c++ {
			u := extract32(x.dg, shift+32*c)
			for t := 0; t < 4 && 4*c+t < b; t++ {
				out[1+4*c+t] = byte(u >> (8 * t))
			}
		}
	}
	return nil
}

// CheckScaled validates packed KULISCH_SCALED values with Shift shift and B
// b against this vector's width: the scale rule, whole values, a state byte
// 0..5 and a nonzero integer exactly for FINITE.
func (v *Vector) CheckScaled(shift, b int, values []byte) error {
	if err := checkScale(shift, b, v.w); err != nil {
		return err
	}
	return checkValues(1+b, values)
}

// MergeScaled adds packed KULISCH_SCALED values (a child's exact partials
// with Shift shift and B b) to accumulators first, first+1, ... exactly.
// All values are validated before any is applied, so an error leaves the
// vector unchanged. It does not allocate.
func (v *Vector) MergeScaled(first, shift, b int, values []byte) error {
	if err := v.CheckScaled(shift, b, values); err != nil {
		return err
	}
	return v.mergeScaled(first, shift, b, values)
}

// MergeScaledChecked is MergeScaled for values that already passed
// CheckScaled with the same shift and b: it skips the pass over the values
// (a receiver that validates a whole frame before applying any of it made
// that pass twice, and a third time decoding it; each was 3-4% of a root's
// CPU merging scaled partials). Shift, B and the range are still checked.
func (v *Vector) MergeScaledChecked(first, shift, b int, values []byte) error {
	if err := checkScale(shift, b, v.w); err != nil {
		return err
	}
	if len(values)%(1+b) != 0 {
		return ErrLength
	}
	return v.mergeScaled(first, shift, b, values)
}

func (v *Vector) mergeScaled(first, shift, b int, values []byte) error {
	ws := 1 + b
	n := len(values) / ws
	if err := v.span(first, n); err != nil {
		return err
	}
	for j := 0; j < n; j++ {
		val := values[j*ws : (j+1)*ws]
		i := first + j
		switch State(val[0]) {
		case PosZero:
			v.flags[i] |= fNonNegZero
		case NegZero:
		case PosInf, NegInf:
			v.special(i, false, val[0] == uint8(NegInf))
		case NaN:
			v.flags[i] |= fNaN
		case Finite:
			v.flags[i] |= fNonNegZero
			if b <= 8 && v.mergeLane(i, val[1:], shift) {
				continue
			}
			addShiftedInt(v.digits[i*v.d:(i+1)*v.d], val[1:], b, shift)
			v.wide(i)
		}
	}
	return nil
}

// mergeLane adds a KULISCH_SCALED integer of at most 8 bytes, times
// 2^shift units, to element i's lane if it is a float64 (at most 53
// significant bits) and the lane's sum stays exact and below the limit,
// as the FP32 add does; it reports whether it did. A child's partial of
// a few similar terms is such a value, so a parent keeps its elements in
// lanes too.
func (v *Vector) mergeLane(i int, b []byte, shift int) bool {
	var u uint64
	for k := len(b) - 1; k >= 0; k-- {
		u = u<<8 | uint64(b[k])
	}
	sh := 64 - 8*uint(len(b))
	n := int64(u<<sh) >> sh // sign-extended
	if n >= 1<<53 || n <= -1<<53 {
		return false
	}
	x := math.Ldexp(float64(n), shift-ScaleExp)
	a := v.lane[i]
	s := a + x
	if math.Abs(s) >= v.laneLim {
		return false
	}
	if bb := s - a; (a-(s-bb))+(x-bb) != 0 {
		return false
	}
	v.lane[i] = s
	return true
}

// addShiftedInt adds the nb-byte little-endian two's-complement integer b,
// times 2^shift, to carry-save digits: its unsigned reading U shifted in
// 32-bit chunks, minus 2^(shift+8nb) when the sign bit is set. Each digit
// receives less than 2^32 in magnitude (a chunk's low part and the previous
// chunk's high part occupy disjoint bits), the bound resolveAll relies on.
// Callers guarantee shift + 8nb <= W, so every index is inside the row.
func addShiftedInt(dg []int64, b []byte, nb, shift int) {
	j0, r := shift/digitBits, uint(shift%digitBits)
	var carry uint64
	k := 0
	for ; 4*k+4 <= nb; k++ {
		x := uint64(binary.LittleEndian.Uint32(b[4*k:]))<<r | carry
		dg[j0+k] += int64(x & digitMask)
		carry = x >> digitBits
	}
	if rem := nb - 4*k; rem > 0 {
		var c uint64
		for t := rem - 1; t >= 0; t-- {
			c = c<<8 | uint64(b[4*k+t])
		}
		x := c<<r | carry
		dg[j0+k] += int64(x & digitMask)
		carry = x >> digitBits
		k++
	}
	if carry != 0 {
		// Nonzero only below bit shift+8nb <= W, so inside the row.
		dg[j0+k] += int64(carry)
	}
	if b[nb-1]&0x80 != 0 {
		q := shift + 8*nb
		dg[q/digitBits] -= 1 << (q % digitBits)
	}
}

// extent is a group's combined extent: n values, minimum Lo, maximum Hi.
type extent struct {
	n, lo, hi int
}

const noLo = 1 << 20

func (e extent) add(s Span) extent {
	e.n++
	if s.Hi != 0 {
		e.lo = min(e.lo, int(s.Lo))
		e.hi = max(e.hi, int(s.Hi))
	}
	return e
}

// groupBytes is the body bytes of group e at width w and its B (0: plain
// KULISCH is no larger and is used instead). Plain KULISCH can only be no
// larger when n(W/8 - B) <= 7 (the Scale Word and padding are at most 7
// bytes), so its size is computed only then.
func groupBytes(e extent, w int) (int, int) {
	if e.n == 0 {
		return 0, 0
	}
	b := 1
	if e.hi != 0 {
		b = max(1, (e.hi-e.lo+7)>>3)
	}
	s := DescriptorSize + pad4(ScaleWordSize+e.n*(1+b))
	if e.n*(w/8-b) <= 7 {
		if pl := DescriptorSize + pad4(e.n*WireSize(w)); pl <= s {
			return pl, 0
		}
	}
	return s, b
}

// planState is the cheapest plan found for a prefix of the run: its last
// group is [start, end) with extent e, the groups before it cost closed
// bytes, the whole plan total bytes in ng groups.
type planState struct {
	closed, total int32
	start         int32
	ng            int32
	e             extent
}

// ScaledPlanner cuts runs of values into KULISCH_SCALED groups. Its zero
// value is ready; it keeps scratch between calls, so once Reserve (or the
// first plans) sized it for the longest run, planning does not allocate.
// Not safe for concurrent use.
type ScaledPlanner struct {
	st []planState
	// The dynamic program of the last call: st[1..done] are final for its
	// run; full says it stopped because the plan outgrew the budget.
	done      int
	full      bool
	w, budget int
}

// Reserve sizes the scratch for runs of up to n values (keeping the state
// Extend resumes from).
func (p *ScaledPlanner) Reserve(n int) {
	if cap(p.st) < n+1 {
		st := make([]planState, max(n+1, 2*cap(p.st)))
		copy(st, p.st[:cap(p.st)])
		p.st = st
	}
	p.st = p.st[:cap(p.st)]
}

// Plan plans one frame's groups for the values whose extents are spans
// (spans[k] for position first+k, from Vector.Spans) at width w within
// budget body bytes (BodyBudget). It writes at most min(cap(dst), 255)
// groups into dst[:0] and returns them with the number of values consumed
// from the front of spans; the caller sends the rest in the next frame.
//
// Per group, Shift and B follow ScaleFor. The cut is a dynamic program over
// the run in exact body bytes (values, descriptors, Scale Words, padding):
// for every prefix it keeps the cheapest plan found, whose last group either
// extends the last group of the previous prefix's plan (so homogeneous runs
// make long groups) or is a new group of the last 1..ScaledLookahead values
// (so mixed magnitudes get short groups of similar values), and the frame
// ends at the longest prefix within budget; O(ScaledLookahead) per value.
// A group that plain KULISCH holds in no more bytes is planned as plain
// KULISCH (Bytes 0), and if one plain KULISCH group would carry more values,
// or as many in no more bytes, the frame is that group: scaled partials are
// never larger than plain ones.
func (p *ScaledPlanner) Plan(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	p.done, p.full = 0, false
	return p.Extend(dst, spans, w, budget)
}

// Extend is Plan for a run that extends the run of the previous Plan or
// Extend call (the same first position, the same extents for the values
// that call saw, more after them): the dynamic program resumes where it
// stopped, so a run that is planned again each time it grows costs each
// value once. A sender that holds back a short frame until more values
// complete uses it; any other change of the run needs Plan.
func (p *ScaledPlanner) Extend(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	if err := ValidWidth(w); err != nil {
		return dst[:0], 0, err
	}
	maxG := min(cap(dst), MaxGroups)
	if maxG == 0 {
		return dst[:0], 0, fmt.Errorf("%w: no room for a group in dst", ErrLength)
	}
	n := len(spans)
	if w != p.w || budget != p.budget || n < p.done {
		p.done, p.full = 0, false
	}
	p.w, p.budget = w, budget
	p.Reserve(n)
	st := p.st[:n+1]
	st[0] = planState{}
	// The smallest B at which plain KULISCH may hold a short new group in
	// as few bytes (B within 7 bytes of W/8: a huge extent).
	plainFrom := w/8 - 7
	for j := p.done + 1; j <= n && !p.full; j++ {
		x := spans[j-1]
		var c planState
		c.total = 1 << 30
		if j > 1 && st[j-1].e.n < MaxGroupCount {
			// Extend the previous prefix's last group.
			prev := &st[j-1]
			e := prev.e.add(x)
			b, _ := groupBytes(e, w)
			c = planState{closed: prev.closed, total: prev.closed + int32(b), start: prev.start, ng: prev.ng, e: e}
		}
		// Or a new group of the last k values: the hot loop, so the
		// extent and the group size are computed inline. Short new groups
		// are never plain KULISCH unless B is within a byte of W/8, which
		// groupBytes decides.
		best, bi := newGroup(st, spans, j, c.total, w, plainFrom)
		if bi >= 0 && (best < c.total || best == c.total && st[bi].ng+1 < c.ng) {
			e := extent{lo: noLo}
			for i := bi; i < j; i++ {
				e = e.add(spans[i])
			}
			c = planState{closed: st[bi].total, total: best, start: int32(bi), ng: st[bi].ng + 1, e: e}
		}
		st[j] = c
		p.done = j
		p.full = int(c.total) > budget // plans only grow with the run
	}
	// The frame ends at the longest planned prefix within the budget and
	// the group limit.
	end := p.done
	for end > 0 && (int(st[end].total) > budget || int(st[end].ng) > maxG) {
		end--
	}
	out := dst[:maxG]
	k := maxG
	for j := end; j > 0; j = int(st[j].start) {
		k--
		g := ScaledGroup{Count: int(st[j].e.n)}
		if _, b := groupBytes(st[j].e, w); b != 0 {
			g.Shift, g.Bytes = ScaleFor(st[j].e.lo, st[j].e.hi, w)
		}
		out[k] = g
	}
	ng := copy(out, out[k:])
	out = out[:ng]
	pos, used := end, int(st[end].total)
	if nb := min(MaxCount(KULISCH, w, budget), n); pos < nb || (pos == nb && used >= GroupBytes(KULISCH, nb, w)) {
		out = append(dst[:0], ScaledGroup{Count: nb})
		pos = nb
	}
	if pos == 0 && n > 0 {
		return dst[:0], 0, ErrBudget
	}
	return out, pos, nil
}

// newGroup finds the cheapest plan for prefix j whose last group is a new
// group of the last 1..ScaledLookahead values: its total and start (bi -1
// when none is cheaper than ext, the total by extension; among equal
// totals, fewer groups, then the longest). A group that plain KULISCH
// holds in no more bytes is costed as plain (groupBytes), which can only
// happen once B is within 7 bytes of W/8 (plainFrom).
//
// It is the planner's hot loop: the candidates below plainFrom are tried
// in a loop without calls, so its state stays in registers (with the
// groupBytes call in it, the compiler spilled that state at every value:
// 76 ns a value), and the rest, from the first candidate whose B reaches
// plainFrom (B only grows with the group), in a second loop.
func newGroup(st []planState, spans []Span, j int, ext int32, w, plainFrom int) (best int32, bi int) {
	lo, hi := noLo, 0
	best, bi = ext, -1
	i0 := max(0, j-ScaledLookahead)
	i := j - 1
	for ; i >= i0; i-- {
		lo2, hi2 := lo, hi
		if h := int(spans[i].Hi); h != 0 {
			lo2, hi2 = min(lo, int(spans[i].Lo)), max(hi, h)
		}
		b := 1
		if hi2 != 0 {
			b = max(1, (hi2-lo2+7)>>3)
		}
		if b >= plainFrom {
			break // this candidate and the longer ones: below
		}
		lo, hi = lo2, hi2
		size := DescriptorSize + (ScaleWordSize+(j-i)*(1+b)+3)&^3
		if t := st[i].total + int32(size); t < best || t == best && bi >= 0 && st[i].ng < st[bi].ng {
			best, bi = t, i
		}
	}
	for ; i >= i0; i-- {
		if h := int(spans[i].Hi); h != 0 {
			lo, hi = min(lo, int(spans[i].Lo)), max(hi, h)
		}
		size, _ := groupBytes(extent{n: j - i, lo: lo, hi: hi}, w)
		if t := st[i].total + int32(size); t < best || t == best && bi >= 0 && st[i].ng < st[bi].ng {
			best, bi = t, i
		}
	}
	return best, bi
}

// PlanScaled is ScaledPlanner.Plan with a fresh planner, which allocates its
// scratch: for tools and tests. The per-frame path keeps a ScaledPlanner.
func PlanScaled(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	var p ScaledPlanner
	return p.Plan(dst, spans, w, budget)
}

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
	// The group's 2^(shift-149) as a float64, so a lane value is the
	// integer times it (exact: a power of two) instead of a math.Ldexp
	// per value (6% of a root's CPU). Outside the normal range (a Shift no
	// lane value can have), 0 sends every value to the digits.
	scale := 0.0
	if e := shift - ScaleExp; e >= -1022 && e <= 1023 {
		scale = math.Float64frombits(uint64(e+1023) << 52)
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
			if b <= 8 && v.mergeLane(i, laneInt(values, j*ws+1, b), scale) {
				continue
			}
			addShiftedInt(v.digits[i*v.d:(i+1)*v.d], val[1:], b, shift)
			v.wide(i)
		}
	}
	return nil
}

// laneInt reads the b-byte (1..8) little-endian two's-complement integer
// at values[off:], sign-extended: one 8-byte load where the slice allows
// it (all but a group's last values), byte by byte otherwise.
func laneInt(values []byte, off, b int) int64 {
	sh := 64 - 8*uint(b)
	if off+8 <= len(values) {
		return int64(binary.LittleEndian.Uint64(values[off:])<<sh) >> sh
	}
	var u uint64
	for k := b - 1; k >= 0; k-- {
		u = u<<8 | uint64(values[off+k])
	}
	return int64(u<<sh) >> sh
}

// mergeLane adds n x scale (a KULISCH_SCALED integer of at most 8 bytes
// times 2^(shift-149), scale 0 when that is no normal float64) to element
// i's lane if n is a float64 (at most 53 significant bits) and the lane's
// sum stays exact and below the limit, as the FP32 add does; it reports
// whether it did. A child's partial of a few similar terms is such a
// value, so a parent keeps its elements in lanes too.
func (v *Vector) mergeLane(i int, n int64, scale float64) bool {
	if n >= 1<<53 || n <= -1<<53 || scale == 0 {
		return false
	}
	return v.laneAdd64(i, float64(n)*scale)
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

// ScaledPlanner cuts runs of values into KULISCH_SCALED groups. Its zero
// value is ready; once Reserve (or the first plans) sized it, planning does
// not allocate. Not safe for concurrent use.
type ScaledPlanner struct {
	// The committed plan of the last call's run (values whose decision
	// saw its whole lookahead): closed groups, the open last group, their
	// bytes; done values planned, full when the next value did not fit
	// the budget or the group limit.
	closed    []extent
	open      extent
	bytes     int
	done      int
	full      bool
	w, budget int
	maxG      int
	// The lookahead windows' extents in O(1) each (van Herk and
	// Gil-Werman): the run is cut into blocks of dropLookahead values;
	// pre[i] is the extent of spans from i's block start to i, suf[i]
	// from i to its block end, so the window [j, j+dropLookahead) is
	// suf[j] with pre[j+dropLookahead-1]. pre is valid below preN, suf
	// below sufN (whole blocks).
	pre, suf   []span32
	preN, sufN int
}

// span32 is a Span as the planner compares it: lo is noLo for a value
// that constrains nothing (hi 0).
type span32 struct{ lo, hi int32 }

func (a span32) union(b span32) span32 { return span32{min(a.lo, b.lo), max(a.hi, b.hi)} }

func span32Of(s Span) span32 {
	if s.Hi == 0 {
		return span32{noLo, 0}
	}
	return span32{int32(s.Lo), int32(s.Hi)}
}

// Reserve sizes the scratch for runs of up to n values (keeping the plan
// Extend resumes).
func (p *ScaledPlanner) Reserve(n int) {
	if cap(p.closed) < MaxGroups+1 {
		p.closed = append(make([]extent, 0, MaxGroups+1), p.closed...)
	}
	if len(p.pre) < n {
		p.pre = append(p.pre[:p.preN], make([]span32, n-p.preN)...)
		p.suf = append(p.suf[:p.sufN], make([]span32, n-p.sufN)...)
	}
}

// window returns the extent of spans[j : j+dropLookahead], which must lie
// inside the run, filling pre and suf as far as it needs.
func (p *ScaledPlanner) window(spans []Span, j int) span32 {
	const L = dropLookahead
	e := j + L - 1
	for ; p.preN <= e; p.preN++ {
		i := p.preN
		x := span32Of(spans[i])
		if i%L != 0 {
			x = x.union(p.pre[i-1])
		}
		p.pre[i] = x
	}
	for p.sufN <= j {
		b := p.sufN // a block start; the block lies inside the run
		acc := span32{noLo, 0}
		for i := b + L - 1; i >= b; i-- {
			acc = acc.union(span32Of(spans[i]))
			p.suf[i] = acc
		}
		p.sufN = b + L
	}
	if j%L == 0 {
		return p.suf[j]
	}
	return p.suf[j].union(p.pre[e])
}

// Plan plans one frame's groups for the values whose extents are spans
// (spans[k] for position first+k, from Vector.Spans) at width w within
// budget body bytes (BodyBudget). It writes at most min(cap(dst), 255)
// groups into dst[:0] and returns them with the number of values consumed
// from the front of spans; the caller sends the rest in the next frame.
//
// Per group, Shift and B follow ScaleFor. The cut is greedy, one decision
// per value: the value joins the open group unless that adds more bytes
// than a group of its own would (8 bytes of descriptor and Scale Word
// plus the value at its own B); and when it is narrower than an open group
// of at least dropAfter values, it also opens a new group if, over the
// next dropLookahead values, a new group costs fewer bytes than extending
// (a group never narrows, so after a wide value it would keep its B). The
// frame ends before the first value that does not fit the budget or the
// group limit. Padding is counted in the budget, not in the decisions. On
// sums of FP32 values (gradient-like, N(0,1), mixed magnitudes) this is
// within about 3% of the byte-optimal cut (a dynamic program over the
// frame, kept in the tests as the reference, TestPlannerNearOptimal) for a
// fraction of its CPU: on a software switch the leaf's CPU, not the link,
// bounds an exact ALLREDUCE. A group that plain KULISCH holds in no more
// bytes is planned as plain KULISCH (Bytes 0), and if one plain KULISCH
// group would carry more values, or as many in no more bytes, the frame is
// that group: scaled partials are never larger than plain ones.
func (p *ScaledPlanner) Plan(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	p.done, p.full = 0, false
	return p.Extend(dst, spans, w, budget)
}

// Extend is Plan for a run that extends the run of the previous Plan or
// Extend call (the same first position, the same extents for the values
// that call saw, more after them): the plan resumes where it stopped, so a
// run that is planned again each time it grows costs each value once. A
// sender that holds back a short frame until more values complete uses
// it; any other change of the run needs Plan.
//
// A value's decision looks dropLookahead values ahead, so only decisions
// that saw their whole lookahead are kept for the next call; the last few
// values of the run are planned on a copy each time. That keeps Extend
// exactly equal to Plan of the grown run.
func (p *ScaledPlanner) Extend(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	if err := ValidWidth(w); err != nil {
		return dst[:0], 0, err
	}
	maxG := min(cap(dst), MaxGroups)
	if maxG == 0 {
		return dst[:0], 0, fmt.Errorf("%w: no room for a group in dst", ErrLength)
	}
	n := len(spans)
	p.Reserve(n)
	if w != p.w || budget != p.budget || maxG != p.maxG || n < p.done || p.done == 0 {
		p.done, p.full = 0, false
		p.closed, p.open, p.bytes = p.closed[:0], extent{}, 0
		p.preN, p.sufN = 0, 0
	}
	p.w, p.budget, p.maxG = w, budget, maxG
	for p.done+dropLookahead <= n && !p.full {
		p.step(spans)
	}
	q := *p // the tail, tentatively (appends land past p.closed's length)
	for q.done < n && !q.full {
		q.step(spans)
	}
	out := dst[:0]
	for _, e := range q.closed {
		out = append(out, groupOf(e, w))
	}
	used := q.bytes
	if q.open.n > 0 {
		out = append(out, groupOf(q.open, w))
		g, _ := groupBytes(q.open, w)
		used += g
	}
	pos := q.done
	if nb := min(MaxCount(KULISCH, w, budget), n); pos < nb || (pos == nb && used >= GroupBytes(KULISCH, nb, w)) {
		out = append(dst[:0], ScaledGroup{Count: nb})
		pos = nb
	}
	if pos == 0 && n > 0 {
		return dst[:0], 0, ErrBudget
	}
	return out, pos, nil
}

// step plans value p.done of spans: into the open group or a new one, or
// sets full when it does not fit.
func (p *ScaledPlanner) step(spans []Span) {
	j := p.done
	x := spans[j]
	one := extent{lo: noLo}.add(x)
	if p.open.n > 0 && p.open.n < MaxGroupCount && !p.cut(spans, x, one) {
		e := p.open.add(x)
		if g, _ := groupBytes(e, p.w); p.bytes+g > p.budget {
			p.full = true
			return
		}
		p.open = e
		p.done++
		return
	}
	g, _ := groupBytes(one, p.w)
	ng := len(p.closed) + 1
	cur := 0
	if p.open.n > 0 {
		cur, _ = groupBytes(p.open, p.w)
		ng++
	}
	if p.bytes+cur+g > p.budget || ng > p.maxG {
		p.full = true
		return
	}
	if p.open.n > 0 {
		p.closed = append(p.closed, p.open)
		p.bytes += cur
	}
	p.open = one
	p.done++
}

// cut decides whether value p.done (extent x, alone one) opens a new group
// instead of joining the open one.
func (p *ScaledPlanner) cut(spans []Span, x Span, one extent) bool {
	e := p.open.add(x)
	bo, be, bx := scaledB(p.open), scaledB(e), scaledB(one)
	if e.n*(1+be)-p.open.n*(1+bo) > DescriptorSize+ScaleWordSize+1+bx {
		return true
	}
	if bx >= bo || p.open.n < dropAfter {
		return false
	}
	// Narrower than the open group: compare the two over the lookahead.
	j := p.done
	k := min(dropLookahead, len(spans)-j)
	var wx span32
	if k == dropLookahead {
		wx = p.window(spans, j)
	} else { // the run's last few values (planned tentatively)
		wx = span32{noLo, 0}
		for _, y := range spans[j : j+k] {
			wx = wx.union(span32Of(y))
		}
	}
	en := extent{n: k, lo: int(wx.lo), hi: int(wx.hi)}
	ee := extent{n: p.open.n + k, lo: min(p.open.lo, en.lo), hi: max(p.open.hi, en.hi)}
	return DescriptorSize+ScaleWordSize+k*(1+scaledB(en)) < ee.n*(1+scaledB(ee))-p.open.n*(1+bo)
}

// dropLookahead and dropAfter tune cut: how many values ahead a narrower
// value looks, and how long the open group must be, before a narrower
// value may open a new group. Chosen on the reference comparison
// (TestPlannerNearOptimal): looking 12 ahead from groups of 8 or more is
// within 3% of the optimum on every kind of run there, and looks ahead at
// about one value in four.
const (
	dropLookahead = 12
	dropAfter     = 8
)

// scaledB is B for group extent e, before the width rule (at least 1).
func scaledB(e extent) int {
	return max(1, (e.hi-e.lo+7)>>3) // hi 0 (no nonzero value): lo is noLo, B 1
}

// groupOf is the ScaledGroup of extent e: KULISCH_SCALED, or plain
// KULISCH (Bytes 0) where that is no larger.
func groupOf(e extent, w int) ScaledGroup {
	g := ScaledGroup{Count: e.n}
	if _, b := groupBytes(e, w); b != 0 {
		g.Shift, g.Bytes = ScaleFor(e.lo, e.hi, w)
	}
	return g
}

// PlanScaled is ScaledPlanner.Plan with a fresh planner, which allocates its
// scratch: for tools and tests. The per-frame path keeps a ScaledPlanner.
func PlanScaled(dst []ScaledGroup, spans []Span, w, budget int) ([]ScaledGroup, int, error) {
	var p ScaledPlanner
	return p.Plan(dst, spans, w, budget)
}

// Tests of KULISCH_SCALED against the math/big reference (ref_test.go):
// extents, encoding, exact merging, every Shift and B boundary, the planner's
// budget and never-worse-than-plain guarantees, and zero allocations.

package kulisch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// refSpan is the extent of a nonzero big integer: trailing zeros, and the
// signed width (bit length of x or of -x-1, plus the sign bit).
func refSpan(x *big.Int) Span {
	a := new(big.Int).Abs(x)
	lo := a.TrailingZeroBits()
	m := new(big.Int).Set(x)
	if x.Sign() < 0 {
		m.Neg(m).Sub(m, bigOne())
	}
	return Span{Lo: uint16(lo), Hi: uint16(m.BitLen() + 1)}
}

// refScaled is the reference KULISCH_SCALED value: state byte and the
// b-byte two's complement of sum/2^shift (ok false when that is not exact
// or does not fit).
func refScaled(r *refSum, shift, b int) ([]byte, bool) {
	out := make([]byte, 1+b)
	st := r.state()
	out[0] = byte(st)
	if st != Finite {
		return out, true
	}
	q, m := new(big.Int), new(big.Int)
	q.DivMod(&r.sum, new(big.Int).Lsh(bigOne(), uint(shift)), m)
	if m.Sign() != 0 {
		return nil, false
	}
	lim := new(big.Int).Lsh(bigOne(), uint(8*b-1))
	if q.Cmp(lim) >= 0 || q.Cmp(new(big.Int).Neg(lim)) < 0 {
		return nil, false
	}
	if q.Sign() < 0 {
		q.Add(q, new(big.Int).Lsh(bigOne(), uint(8*b)))
	}
	be := q.FillBytes(make([]byte, b))
	for k := range be {
		out[1+k] = be[b-1-k]
	}
	return out, true
}

// refOf builds the reference of a value given as state and integer.
func refOf(st State, x *big.Int) *refSum {
	r := &refSum{}
	switch st {
	case PosZero:
		r.nonNegZero = true
	case PosInf:
		r.pinf = true
	case NegInf:
		r.ninf = true
	case NaN:
		r.nan = true
	case Finite:
		r.nonNegZero = true
		r.sum.Set(x)
	}
	return r
}

// load puts reference values into a fresh vector through MergeKulisch
// (already tested against the reference), so any exact value can be set.
func load(t testing.TB, w int, refs []*refSum) *Vector {
	t.Helper()
	v, err := NewVector(len(refs), w)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range refs {
		wire := r.wire(w)
		if wire == nil {
			t.Fatalf("value %d does not fit W=%d", i, w)
		}
		if err := v.MergeKulisch(i, wire); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// randRef is a random exact value of width w: mostly finite sums of FP32
// terms of similar magnitude (what partials carry), sometimes a random
// integer anywhere in the W range, sometimes a special state.
func randRef(rng *rand.Rand, w int) *refSum {
	r := &refSum{}
	switch k := rng.IntN(20); {
	case k == 0:
		r.addFP32([]uint32{0, 0x80000000, 0x7F800000, 0xFF800000, NaN32}[rng.IntN(5)])
	case k < 4:
		bitsN := 1 + rng.IntN(w-1)
		x := randBelow(rng, new(big.Int).Lsh(bigOne(), uint(bitsN)))
		if rng.IntN(2) == 0 {
			x.Neg(x)
		}
		if x.Sign() == 0 {
			x.SetInt64(1)
		}
		lim := new(big.Int).Lsh(bigOne(), uint(w-1))
		if x.Cmp(lim) >= 0 {
			x.Sub(lim, bigOne())
		}
		r.nonNegZero = true
		r.sum.Set(x)
	default:
		if w < FP32TermBits+2 {
			r.nonNegZero = true
			r.sum.SetInt64(int64(rng.IntN(1<<20) - 1<<19))
			if r.sum.Sign() == 0 {
				r.sum.SetInt64(3)
			}
			return r
		}
		e := rng.IntN(40) - 20
		for range 1 + rng.IntN(4) {
			r.addFP32(math.Float32bits(float32(math.Ldexp(rng.NormFloat64(), e))))
		}
	}
	return r
}

// randBelow is a uniform random integer in [0, lim) for a power of two lim.
func randBelow(rng *rand.Rand, lim *big.Int) *big.Int {
	n := lim.BitLen() - 1
	p := make([]byte, (n+7)/8)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	x := new(big.Int).SetBytes(p)
	return x.Mod(x, lim)
}

func TestSpansAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, w := range []int{64, 280, 288, 1024, 4096} {
		refs := make([]*refSum, 500)
		for i := range refs {
			refs[i] = randRef(rng, w)
		}
		v := load(t, w, refs)
		sp := make([]Span, len(refs))
		if err := v.Spans(0, sp); err != nil {
			t.Fatal(err)
		}
		for i, r := range refs {
			want := Span{}
			if r.state() == Finite {
				want = refSpan(&r.sum)
			}
			if sp[i] != want {
				t.Fatalf("W=%d value %d (%v %v): span %+v, want %+v", w, i, r.state(), &r.sum, sp[i], want)
			}
		}
	}
}

// TestScaledRoundTrip plans, encodes and merges random partials: every
// encoded value equals the reference, and the merged vector reads back
// exactly the original wire values.
func TestScaledRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, w := range []int{64, 280, 288, 4096} {
		for _, budget := range []int{12, 100, 1458, 8958} {
			refs := make([]*refSum, 400)
			for i := range refs {
				refs[i] = randRef(rng, w)
			}
			v := load(t, w, refs)
			sp := make([]Span, len(refs))
			if err := v.Spans(0, sp); err != nil {
				t.Fatal(err)
			}
			out, _ := NewVector(len(refs), w)
			gs := make([]ScaledGroup, 0, MaxGroups)
			buf := make([]byte, 16<<10)
			for pos := 0; pos < len(refs); {
				g, used, err := PlanScaled(gs[:0], sp[pos:], w, budget)
				if errors.Is(err, ErrBudget) && budget < ScaledGroupBytes(1, w/8) {
					break // no value of this width fits: nothing to check
				}
				if err != nil || used == 0 {
					t.Fatalf("W=%d budget %d at %d: %v (used %d)", w, budget, pos, err, used)
				}
				total := 0
				at := pos
				for _, x := range g {
					if x.Bytes == 0 {
						total += GroupBytes(KULISCH, x.Count, w)
						for k := 0; k < x.Count; k++ {
							wire := buf[:WireSize(w)]
							if err := v.PutWire(wire, at+k); err != nil {
								t.Fatal(err)
							}
							if err := out.MergeKulisch(at+k, wire); err != nil {
								t.Fatal(err)
							}
						}
						at += x.Count
						continue
					}
					total += ScaledGroupBytes(x.Count, x.Bytes)
					vals := buf[:x.Count*(1+x.Bytes)]
					if err := v.PutScaled(vals, at, x.Count, x.Shift, x.Bytes); err != nil {
						t.Fatalf("W=%d group %+v at %d: %v", w, x, at, err)
					}
					for k := 0; k < x.Count; k++ {
						want, ok := refScaled(refs[at+k], x.Shift, x.Bytes)
						if got := vals[k*(1+x.Bytes) : (k+1)*(1+x.Bytes)]; !ok || !bytes.Equal(got, want) {
							t.Fatalf("W=%d value %d in %+v: %x, want %x (representable %v)", w, at+k, x, got, want, ok)
						}
					}
					if err := out.MergeScaled(at, x.Shift, x.Bytes, vals); err != nil {
						t.Fatal(err)
					}
					at += x.Count
				}
				if at != pos+used || total > budget || len(g) > MaxGroups {
					t.Fatalf("W=%d budget %d: groups cover %d of %d values, %d bytes, %d groups", w, budget, at-pos, used, total, len(g))
				}
				pos += used
			}
			for i, r := range refs {
				got := make([]byte, WireSize(w))
				if err := out.PutWire(got, i); err != nil {
					t.Fatal(err)
				}
				if want := r.wire(w); !bytes.Equal(got, want) && budget >= ScaledGroupBytes(1, w/8) {
					t.Fatalf("W=%d budget %d value %d: merged %x, want %x", w, budget, i, got, want)
				}
			}
		}
	}
}

// TestMergeScaledEqualsPlain: a child's partial merged as scaled groups and
// as plain KULISCH values gives the same exact sums (and the reference's).
func TestMergeScaledEqualsPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const w, n = 288, 300
	for round := 0; round < 20; round++ {
		a := make([]*refSum, n)
		b := make([]*refSum, n)
		for i := range a {
			a[i], b[i] = randRef(rng, w-8), randRef(rng, w-8) // room for the sum
		}
		va, vb := load(t, w, a), load(t, w, b)
		plain, scaled, checked := load(t, w, a), load(t, w, a), load(t, w, a)
		wire := make([]byte, WireSize(w))
		for i := 0; i < n; i++ {
			if err := vb.PutWire(wire, i); err != nil {
				t.Fatal(err)
			}
			if err := plain.MergeKulisch(i, wire); err != nil {
				t.Fatal(err)
			}
		}
		sp := make([]Span, n)
		if err := vb.Spans(0, sp); err != nil {
			t.Fatal(err)
		}
		gs := make([]ScaledGroup, 0, MaxGroups)
		buf := make([]byte, 16<<10)
		for pos := 0; pos < n; {
			g, used, err := PlanScaled(gs[:0], sp[pos:], w, 1458)
			if err != nil {
				t.Fatal(err)
			}
			at := pos
			for _, x := range g {
				if x.Bytes == 0 {
					for k := 0; k < x.Count; k++ {
						_ = vb.PutWire(wire, at+k)
						_ = scaled.MergeKulisch(at+k, wire)
						_ = checked.MergeKulisch(at+k, wire)
					}
				} else {
					vals := buf[:x.Count*(1+x.Bytes)]
					if err := vb.PutScaled(vals, at, x.Count, x.Shift, x.Bytes); err != nil {
						t.Fatal(err)
					}
					if err := scaled.MergeScaled(at, x.Shift, x.Bytes, vals); err != nil {
						t.Fatal(err)
					}
					if err := checked.MergeScaledChecked(at, x.Shift, x.Bytes, vals); err != nil {
						t.Fatal(err)
					}
				}
				at += x.Count
			}
			pos += used
		}
		_ = va
		for i := 0; i < n; i++ {
			var ref refSum
			ref.merge(a[i])
			ref.merge(b[i])
			p, s := make([]byte, WireSize(w)), make([]byte, WireSize(w))
			if err := plain.PutWire(p, i); err != nil {
				t.Fatal(err)
			}
			if err := scaled.PutWire(s, i); err != nil {
				t.Fatal(err)
			}
			c := make([]byte, WireSize(w))
			if err := checked.PutWire(c, i); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(p, s) || !bytes.Equal(s, ref.wire(w)) || !bytes.Equal(c, s) {
				t.Fatalf("round %d value %d: plain %x scaled %x (checked %x) ref %x", round, i, p, s, c, ref.wire(w))
			}
			pf, _ := plain.RoundFP32(i)
			sf, _ := scaled.RoundFP32(i)
			if pf != sf || sf != ref.fp32() {
				t.Fatalf("round %d value %d: FP32 plain %#x scaled %#x ref %#x", round, i, pf, sf, ref.fp32())
			}
		}
	}
}

// TestScaledBoundaries merges one value at every B, at Shift 0, at the
// largest legal Shift W-8B and in between, with the extreme integers of B
// bytes, into accumulators that already hold something (so carries and
// borrows cross digits), and checks against the reference; then checks
// that Shift + 8B = W + 1 and out-of-range B are refused.
func TestScaledBoundaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, w := range []int{64, 280, 288, 4096} {
		bs := []int{}
		for b := 1; b <= w/8; b++ {
			if w <= 288 || b <= 12 || b%61 == 0 || b >= w/8-4 {
				bs = append(bs, b)
			}
		}
		for _, b := range bs {
			shifts := []int{0, w - 8*b}
			for _, s := range []int{1, 7, 8, 31, 32, 33, 63, 64, 149, (w - 8*b) / 2, w - 8*b - 1} {
				if s > 0 && s < w-8*b {
					shifts = append(shifts, s)
				}
			}
			lim := new(big.Int).Lsh(bigOne(), uint(8*b-1))
			ints := []*big.Int{big.NewInt(1), big.NewInt(-1), new(big.Int).Sub(lim, bigOne()), new(big.Int).Neg(lim),
				randBelow(rng, lim), new(big.Int).Neg(randBelow(rng, lim))}
			for _, sh := range shifts {
				for _, x := range ints {
					if x.Sign() == 0 {
						continue
					}
					// A base value of the opposite sign keeps the sum inside W.
					base := refOf(Finite, big.NewInt(int64(rng.IntN(1<<20)+1)))
					if x.Sign() > 0 {
						base.sum.Neg(&base.sum)
					}
					v := load(t, w, []*refSum{base})
					val := make([]byte, 1+b)
					mod := new(big.Int).Lsh(bigOne(), uint(8*b))
					u := new(big.Int).Mod(x, mod).FillBytes(make([]byte, b))
					for k := range u {
						val[1+k] = u[b-1-k]
					}
					if err := v.MergeScaled(0, sh, b, val); err != nil {
						t.Fatalf("W=%d B=%d Shift=%d x=%v: %v", w, b, sh, x, err)
					}
					want := refOf(Finite, new(big.Int).Lsh(x, uint(sh)))
					want.merge(base)
					got := make([]byte, WireSize(w))
					if err := v.PutWire(got, 0); err != nil {
						t.Fatalf("W=%d B=%d Shift=%d x=%v: %v", w, b, sh, x, err)
					}
					if !bytes.Equal(got, want.wire(w)) {
						t.Fatalf("W=%d B=%d Shift=%d x=%v: %x, want %x", w, b, sh, x, got, want.wire(w))
					}
					// And back: the value alone encodes to the same bytes.
					one := load(t, w, []*refSum{refOf(Finite, new(big.Int).Lsh(x, uint(sh)))})
					enc := make([]byte, 1+b)
					if err := one.PutScaled(enc, 0, 1, sh, b); err != nil || !bytes.Equal(enc, val) {
						t.Fatalf("W=%d B=%d Shift=%d x=%v: PutScaled %x %v, want %x", w, b, sh, x, enc, err, val)
					}
				}
			}
			v, _ := NewVector(1, w)
			val := make([]byte, 1+b)
			val[1] = 1
			if err := v.MergeScaled(0, w-8*b+1, b, val); !errors.Is(err, ErrWire) {
				t.Fatalf("W=%d B=%d Shift=W-8B+1 accepted: %v", w, b, err)
			}
			if err := v.MergeScaledChecked(0, w-8*b+1, b, val); !errors.Is(err, ErrWire) {
				t.Fatalf("W=%d B=%d Shift=W-8B+1 accepted by MergeScaledChecked: %v", w, b, err)
			}
		}
		v, _ := NewVector(1, w)
		for _, b := range []int{0, -1, MaxScaledBytes + 1} {
			if err := v.MergeScaled(0, 0, b, make([]byte, 2)); !errors.Is(err, ErrWire) {
				t.Fatalf("W=%d B=%d accepted: %v", w, b, err)
			}
		}
		if err := v.MergeScaled(0, -1, 1, []byte{0, 1}); !errors.Is(err, ErrWire) {
			t.Fatalf("negative shift accepted: %v", err)
		}
		if err := v.MergeScaledChecked(0, -1, 1, []byte{0, 1}); !errors.Is(err, ErrWire) {
			t.Fatalf("negative shift accepted by MergeScaledChecked: %v", err)
		}
		if err := v.MergeScaledChecked(0, 0, 2, []byte{0, 1}); !errors.Is(err, ErrLength) {
			t.Fatalf("a partial value accepted by MergeScaledChecked: %v", err)
		}
	}
}

// TestScaledStatesAndRejects: special states merge like KULISCH's; a bad
// state, a FINITE zero, a special with a nonzero integer or a partial value
// is refused and changes nothing.
func TestScaledStatesAndRejects(t *testing.T) {
	const w = 280
	for _, c := range []struct {
		vals []byte
		want State
	}{
		{[]byte{byte(PosZero), 0}, PosZero},
		{[]byte{byte(NegZero), 0}, NegZero},
		{[]byte{byte(PosInf), 0}, PosInf},
		{[]byte{byte(NegInf), 0}, NegInf},
		{[]byte{byte(NaN), 0}, NaN},
		{[]byte{byte(PosInf), 0, byte(NegInf), 0}, NaN},
		{[]byte{byte(NegZero), 0, byte(NegZero), 0}, NegZero},
		{[]byte{byte(NegZero), 0, byte(PosZero), 0}, PosZero},
		{[]byte{byte(Finite), 0xFF, byte(Finite), 0x01}, PosZero}, // -1 + 1 = +0
	} {
		v, _ := NewVector(1, w)
		for k := 0; k < len(c.vals); k += 2 {
			if err := v.MergeScaled(0, 100, 1, c.vals[k:k+2]); err != nil {
				t.Fatal(err)
			}
		}
		if s, _ := v.State(0); s != c.want {
			t.Errorf("%x: state %v, want %v", c.vals, s, c.want)
		}
	}
	v, _ := NewVector(3, w)
	for _, bad := range [][]byte{
		{6, 0},
		{byte(Finite), 0},
		{byte(PosInf), 1},
		{byte(Finite), 1, 0}, // not a whole number of values
		{byte(Finite), 1, byte(NaN), 0, byte(Finite), 0},
	} {
		if err := v.MergeScaled(0, 0, 1, bad); err == nil {
			t.Fatalf("%x accepted", bad)
		}
	}
	for i := 0; i < 3; i++ {
		if s, _ := v.State(i); s != NegZero {
			t.Fatalf("a refused merge changed element %d: %v", i, s)
		}
	}
	if err := v.MergeScaled(2, 0, 1, []byte{0, 1, 0, 1}); !errors.Is(err, ErrRange) {
		t.Fatalf("merge past the end: %v", err)
	}
}

// TestPutScaledRefuses: a Shift above the value's lowest set bit, a B too
// small for it, and an overflowing sum are errors, never wrong bytes.
func TestPutScaledRefuses(t *testing.T) {
	const w = 280
	x := new(big.Int).Lsh(big.NewInt(0x1234), 100) // bits 102..112, signed width 114
	v := load(t, w, []*refSum{refOf(Finite, x)})
	dst := make([]byte, 64)
	if err := v.PutScaled(dst, 0, 1, 103, 2); !errors.Is(err, ErrNotLossless) {
		t.Fatalf("shift above the lowest bit: %v", err)
	}
	if err := v.PutScaled(dst, 0, 1, 102, 1); !errors.Is(err, ErrNotLossless) {
		t.Fatalf("B too small: %v", err)
	}
	if err := v.PutScaled(dst, 0, 1, 102, 2); err != nil {
		t.Fatalf("exact fit refused: %v", err)
	}
	if err := v.PutScaled(dst, 0, 1, w-15, 2); !errors.Is(err, ErrWire) {
		t.Fatalf("Shift + 8B > W accepted: %v", err)
	}
	if err := v.PutScaled(dst[:2], 0, 1, 102, 2); !errors.Is(err, ErrLength) {
		t.Fatalf("short dst: %v", err)
	}
	// A sum past W: every export fails with ErrOverflow.
	o, _ := NewVector(1, 64)
	big := make([]byte, 9)
	big[8] = 0x40 // 2^62
	for range 2 {
		if err := o.MergeKulisch(0, big); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.PutScaled(dst, 0, 1, 0, 8); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflowing sum: %v", err)
	}
	if err := o.Spans(0, make([]Span, 1)); !errors.Is(err, ErrOverflow) {
		t.Fatalf("overflowing span: %v", err)
	}
}

// TestPlanScaledGuarantees: for every budget from too small to jumbo, the
// plan fits, covers a prefix, respects the group limit, is never larger
// per value carried than one plain KULISCH group, and typical FP32-sum
// partials cost well under 2 x FP32.
func TestPlanScaledGuarantees(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	const w = 280
	n := 4000
	refs := make([]*refSum, n)
	for i := range refs {
		refs[i] = &refSum{}
		for range 2 {
			refs[i].addFP32(math.Float32bits(float32(rng.NormFloat64())))
		}
	}
	v := load(t, w, refs)
	sp := make([]Span, n)
	if err := v.Spans(0, sp); err != nil {
		t.Fatal(err)
	}
	gs := make([]ScaledGroup, 0, MaxGroups)
	for budget := 0; budget <= 9000; budget += 1 + budget/7 {
		g, used, err := PlanScaled(gs[:0], sp, w, budget)
		if _, b := ScaleFor(int(sp[0].Lo), int(sp[0].Hi), w); budget < ScaledGroupBytes(1, b) {
			if !errors.Is(err, ErrBudget) || used != 0 {
				t.Fatalf("budget %d: %v used %d", budget, err, used)
			}
			continue
		}
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		total, cnt := 0, 0
		for _, x := range g {
			if x.Bytes == 0 {
				total += GroupBytes(KULISCH, x.Count, w)
			} else {
				total += ScaledGroupBytes(x.Count, x.Bytes)
			}
			cnt += x.Count
		}
		nb := min(MaxCount(KULISCH, w, budget), n)
		if cnt != used || total > budget || len(g) > MaxGroups || used < nb || (used == nb && total > GroupBytes(KULISCH, nb, w)) {
			t.Fatalf("budget %d: %d groups, %d values (plain %d), %d bytes", budget, len(g), used, nb, total)
		}
	}
	// Whole vector at MTU 1500: bytes per value.
	bytesTotal := 0
	for pos := 0; pos < n; {
		g, used, err := PlanScaled(gs[:0], sp[pos:], w, BodyBudget(1500, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range g {
			bytesTotal += ScaledGroupBytes(x.Count, x.Bytes)
		}
		pos += used
	}
	if per := float64(bytesTotal) / float64(n); per > 7 {
		t.Fatalf("sums of two N(0,1) FP32: %.2f body bytes per value, want < 7 (FP32 4, plain KULISCH %d)", per, WireSize(w))
	} else {
		t.Logf("sums of two N(0,1) FP32 at MTU 1500: %.2f body bytes per value (FP32 4, plain KULISCH %d)", per, WireSize(w))
	}
	// Only specials: one group of B = 1.
	zeros := make([]Span, 50)
	g, used, err := PlanScaled(gs[:0], zeros, w, 1458)
	if err != nil || used != 50 || len(g) != 1 || g[0] != (ScaledGroup{Count: 50, Shift: 0, Bytes: 1}) {
		t.Fatalf("specials: %+v %d %v", g, used, err)
	}
	// Values needing all W bits: plain KULISCH.
	wide := make([]Span, 10)
	for i := range wide {
		wide[i] = Span{Lo: 0, Hi: w}
	}
	if g, used, _ := PlanScaled(gs[:0], wide, w, 1458); used != 10 || len(g) != 1 || g[0].Bytes != 0 {
		t.Fatalf("wide values: %+v %d", g, used)
	}
	if _, _, err := PlanScaled(nil, sp, w, 1458); !errors.Is(err, ErrLength) {
		t.Fatalf("no room for groups: %v", err)
	}
	if _, _, err := PlanScaled(gs, sp, 281, 1458); !errors.Is(err, ErrWidth) {
		t.Fatalf("bad width: %v", err)
	}
}

// TestPlannerExtend: planning a run again as it grows (Extend) gives
// exactly what planning the grown run from scratch gives.
func TestPlannerExtend(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	const w = 280
	refs := make([]*refSum, 1500)
	for i := range refs {
		refs[i] = randRef(rng, w)
	}
	v := load(t, w, refs)
	sp := make([]Span, len(refs))
	if err := v.Spans(0, sp); err != nil {
		t.Fatal(err)
	}
	var inc, fresh ScaledPlanner
	a := make([]ScaledGroup, 0, MaxGroups)
	b := make([]ScaledGroup, 0, MaxGroups)
	for _, budget := range []int{200, 1458, 8958} {
		for start := 0; start < 1200; start += 397 {
			inc.Plan(a[:0], sp[start:start+1], w, budget)
			for n := 1; start+n <= len(sp); n += 1 + rng.IntN(90) {
				ga, ua, ea := inc.Extend(a[:0], sp[start:start+n], w, budget)
				gb, ub, eb := fresh.Plan(b[:0], sp[start:start+n], w, budget)
				if ua != ub || !errors.Is(ea, eb) || !slices.Equal(ga, gb) {
					t.Fatalf("budget %d run %d+%d: Extend %v %d %v, Plan %v %d %v", budget, start, n, ga, ua, ea, gb, ub, eb)
				}
			}
		}
	}
}

func TestScaleFor(t *testing.T) {
	for _, c := range []struct{ lo, hi, w, shift, b int }{
		{0, 0, 280, 0, 1},       // no finite value
		{0, 1, 280, 0, 1},       // -1
		{126, 151, 280, 126, 4}, // a typical FP32 sum
		{0, 280, 280, 0, 35},
		{10, 280, 280, 8, 34}, // Shift lowered so that Shift + 8B <= W
		{279, 280, 280, 272, 1},
	} {
		s, b := ScaleFor(c.lo, c.hi, c.w)
		if s != c.shift || b != c.b {
			t.Errorf("ScaleFor(%d, %d, %d) = %d, %d, want %d, %d", c.lo, c.hi, c.w, s, b, c.shift, c.b)
		}
	}
	if got := MaxScaledCount(BodyBudget(1500, 0)); got != 724 || ScaledGroupBytes(got, 1) > 1458 || ScaledGroupBytes(got+1, 1) <= 1458 {
		t.Fatalf("MaxScaledCount(1458) = %d", got)
	}
}

func TestScaledAllocs(t *testing.T) {
	const w, n = 280, 400
	rng := rand.New(rand.NewPCG(61, 62))
	v, _ := NewVector(n, w)
	vals := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(float32(rng.NormFloat64())))
	}
	_ = v.AddFP32LE(0, vals)
	sp := make([]Span, n)
	gs := make([]ScaledGroup, 0, MaxGroups)
	buf := make([]byte, 16<<10)
	dst, _ := NewVector(n, w)
	var pl ScaledPlanner
	pl.Reserve(n)
	a := alloctest.PerRun(50, func() {
		if err := v.Spans(0, sp); err != nil {
			t.Fatal(err)
		}
		g, _, err := pl.Plan(gs[:0], sp, w, 1458)
		if err != nil {
			t.Fatal(err)
		}
		at := 0
		for _, x := range g {
			vb := buf[:x.Count*(1+x.Bytes)]
			if x.Bytes == 0 {
				continue
			}
			if err := v.PutScaled(vb, at, x.Count, x.Shift, x.Bytes); err != nil {
				t.Fatal(err)
			}
			if err := dst.MergeScaled(at, x.Shift, x.Bytes, vb); err != nil {
				t.Fatal(err)
			}
			at += x.Count
		}
	})
	if a != 0 {
		t.Fatalf("%v allocations per plan+encode+merge", a)
	}
}

// FuzzMergeScaled: arbitrary Shift, B and value bytes never panic; accepted
// values merge exactly (reference) and a refused group changes nothing.
func FuzzMergeScaled(f *testing.F) {
	f.Add(uint16(280), uint16(126), uint16(4), []byte{0, 1, 2, 3, 0x84, 2, 0, 0, 0, 0})
	f.Add(uint16(64), uint16(0), uint16(8), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x80})
	f.Add(uint16(4096), uint16(4095), uint16(1), []byte{0, 0xFF})
	f.Fuzz(func(t *testing.T, wsel, shift, b uint16, vals []byte) {
		w := MinWidth + 8*int(wsel%((MaxWidth-MinWidth)/8+1))
		v, _ := NewVector(1, w)
		if int(b)+1 > 0 && len(vals) > 4*(int(b)+1) {
			vals = vals[:4*(int(b)+1)]
		}
		err := v.MergeScaled(0, int(shift), int(b), vals)
		if err != nil {
			if s, _ := v.State(0); s != NegZero {
				t.Fatal("refused group changed the accumulator")
			}
			return
		}
		ref := &refSum{}
		ws := 1 + int(b)
		for off := 0; off < len(vals); off += ws {
			val := vals[off : off+ws]
			x := new(big.Int)
			if State(val[0]) == Finite {
				be := make([]byte, b)
				for k := range be {
					be[k] = val[ws-1-k]
				}
				x.SetBytes(be)
				if val[ws-1]&0x80 != 0 {
					x.Sub(x, new(big.Int).Lsh(bigOne(), uint(8*b)))
				}
				x.Lsh(x, uint(shift))
			}
			ref.merge(refOf(State(val[0]), x))
		}
		want := ref.wire(w)
		got := make([]byte, WireSize(w))
		err = v.PutWire(got, 0)
		if want == nil {
			if !errors.Is(err, ErrOverflow) {
				t.Fatalf("overflowing sum: %v", err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("merged %x %v, want %x", got, err, want)
		}
	})
}

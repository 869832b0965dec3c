package kulisch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLaneAgainstReference drives the float64 lane through its cases, one
// element each, against the math/big reference: sums that stay exact in
// the lane (gradient-like values), sums that spill some terms to the
// digits (magnitudes 2^60 apart), exact cancellation to +0 and to -0,
// subnormal terms, and terms near the lane's limit. Every element is read
// by PutValues to FP32 (the lane-only shortcut), then by Round and
// AppendWire (which fold the lane into the digits), then read again.
func TestLaneAgainstReference(t *testing.T) {
	const w = 280
	rng := rand.New(rand.NewPCG(5, 6))
	f32 := func(x float32) uint32 { return math.Float32bits(x) }
	cases := map[string]func(k int) uint32{
		"gradient": func(int) uint32 { return f32(float32(rng.NormFloat64() * 1e-3)) },
		"spill": func(k int) uint32 {
			if k%3 == 0 {
				return f32(float32(rng.NormFloat64() * 1e20))
			}
			return f32(float32(rng.NormFloat64() * 1e-20))
		},
		"subnormal": func(int) uint32 { return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(3))<<23 },
		"limit":     func(int) uint32 { return f32(float32(rng.NormFloat64() * 1e38)) },
		"wide":      func(int) uint32 { return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(254))<<23 },
	}
	for name, draw := range cases {
		t.Run(name, func(t *testing.T) {
			const n, terms = 64, 6
			v, err := NewVector(n, w)
			if err != nil {
				t.Fatal(err)
			}
			refs := make([]refSum, n)
			for k := 0; k < terms; k++ {
				vals := make([]byte, 4*n)
				for i := range n {
					b := draw(k)
					if i%8 == 7 && k == terms-1 { // a +0 term
						b = 0
					}
					binary.LittleEndian.PutUint32(vals[4*i:], b)
					refs[i].addFP32(b)
				}
				if err := v.AddFP32LE(0, vals); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]byte, 4*n)
			for pass := 0; pass < 2; pass++ {
				if _, err := v.PutValues(out, 0, n, FP32); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if got, want := binary.LittleEndian.Uint32(out[4*i:]), refs[i].fp32(); got != want {
						t.Fatalf("pass %d: PutValues element %d = %#08x, want %#08x", pass, i, got, want)
					}
					got, err := v.AppendWire(nil, i)
					if err != nil {
						t.Fatal(err)
					}
					if want := refs[i].wire(w); !bytes.Equal(got, want) {
						t.Fatalf("pass %d: wire of element %d = %x, want %x", pass, i, got, want)
					}
				}
			}
		})
	}
}

// TestLaneCancelsToSignedZero: the lane keeps IEEE's zero rules, which are
// the package's: x + (-x) is +0, and -0 + -0 stays -0.
func TestLaneCancelsToSignedZero(t *testing.T) {
	v, _ := NewVector(2, 280)
	vals := make([]byte, 8)
	binary.LittleEndian.PutUint32(vals, math.Float32bits(1.25))
	binary.LittleEndian.PutUint32(vals[4:], 0x80000000)
	_ = v.AddFP32LE(0, vals)
	binary.LittleEndian.PutUint32(vals, math.Float32bits(-1.25))
	_ = v.AddFP32LE(0, vals)
	out := make([]byte, 8)
	if _, err := v.PutValues(out, 0, 2, FP32); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(out); got != 0 {
		t.Errorf("1.25 + -1.25 = %#08x, want +0", got)
	}
	if got := binary.LittleEndian.Uint32(out[4:]); got != 0x80000000 {
		t.Errorf("-0 + -0 = %#08x, want -0", got)
	}
}

// TestLaneKernelMatchesScalar: the AVX2 lane kernel leaves every field of
// the Vector (lanes to the bit, flags, digits, bounds) as the scalar loop
// does, for batches of every length and offset mixing lane-friendly terms
// with -0, +0, infinities, NaNs, spills and terms at the lane's limit.
func TestLaneKernelMatchesScalar(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this machine: the scalar loop is all there is")
	}
	// The eight-wide AVX-512 kernel where the CPU has it, and the AVX2 one
	// alone (as on a CPU without AVX-512).
	eachKernel(t, "avx512", &haveAVX512, testLaneKernelMatchesScalar)
}

// eachKernel runs f with the kernel switch *flag off, then on if the CPU
// has that kernel: the narrower path and the vector kernel it selects.
func eachKernel(t *testing.T, name string, flag *bool, f func(*testing.T)) {
	save := *flag
	defer func() { *flag = save }()
	modes := []bool{false}
	if save {
		modes = append(modes, true)
	}
	for _, on := range modes {
		*flag = on
		t.Run(fmt.Sprintf("%s=%v", name, on), f)
	}
}

func testLaneKernelMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	draw := func() uint32 {
		switch rng.IntN(40) {
		case 0:
			return 0x80000000 // -0
		case 1:
			return 0
		case 2:
			return 0x7F800000 | uint32(rng.IntN(2))<<31 // ±Inf
		case 3:
			return 0x7FC00000 | rng.Uint32()&0x803FFFFF // NaN
		case 4:
			return rng.Uint32()&0x807FFFFF | 0xFE<<23 // near FP32's top: beyond the lane's limit in sums
		case 5:
			return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(254))<<23 // anywhere: spills
		case 6, 7, 8:
			return 0x7E800000 // 2^126: two make 2^127, the lane's limit itself
		}
		return math.Float32bits(float32(rng.NormFloat64()))
	}
	const n = 80
	for it := 0; it < 300; it++ {
		fast, _ := NewVector(n, 280)
		slow, _ := NewVector(n, 280)
		for batch := 0; batch < 4; batch++ {
			first := rng.IntN(n)
			cnt := rng.IntN(n - first + 1)
			vals := make([]byte, 4*cnt)
			for k := range cnt {
				binary.LittleEndian.PutUint32(vals[4*k:], draw())
			}
			if err := fast.AddFP32LE(first, vals); err != nil {
				t.Fatal(err)
			}
			haveAVX2 = false
			err := slow.AddFP32LE(first, vals)
			haveAVX2 = true
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if math.Float64bits(fast.lane[i]) != math.Float64bits(slow.lane[i]) || fast.flags[i] != slow.flags[i] ||
				fast.nlo[i] != slow.nlo[i] || fast.hi[i] != slow.hi[i] ||
				!slices.Equal(fast.digits[i*fast.d:(i+1)*fast.d], slow.digits[i*slow.d:(i+1)*slow.d]) {
				t.Fatalf("iteration %d element %d: kernel lane %x flags %x bounds %d..%d digits %v; scalar lane %x flags %x bounds %d..%d digits %v",
					it, i, math.Float64bits(fast.lane[i]), fast.flags[i], ^fast.nlo[i], fast.hi[i], fast.digits[i*fast.d:(i+1)*fast.d],
					math.Float64bits(slow.lane[i]), slow.flags[i], ^slow.nlo[i], slow.hi[i], slow.digits[i*slow.d:(i+1)*slow.d])
			}
		}
	}
}

// TestLaneOutKernelMatchesScalar: PutValues to FP32 writes the same bytes,
// and leaves the same Vector, with the AVX2 lane kernel as without it,
// over ranges of every offset and length that mix lane-only elements with
// zero sums, -0, infinities, NaNs, rows with digits and empty elements.
func TestLaneOutKernelMatchesScalar(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this machine: the scalar loop is all there is")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 72
	for it := 0; it < 300; it++ {
		var vs [2]*Vector
		for k := range vs {
			vs[k], _ = NewVector(n, 280)
		}
		for batch := 0; batch < 3; batch++ {
			first := rng.IntN(n)
			cnt := rng.IntN(n - first + 1)
			vals := make([]byte, 4*cnt)
			for k := range cnt {
				b := math.Float32bits(float32(rng.NormFloat64()))
				switch rng.IntN(30) {
				case 0:
					b = 0x80000000
				case 1:
					b = 0x7F800000
				case 2:
					b = 0x7FC00001
				case 3:
					b = rng.Uint32()&0x807FFFFF | uint32(rng.IntN(254))<<23
				case 4:
					b = 0 // with a later -x: a zero sum in the lane
				}
				binary.LittleEndian.PutUint32(vals[4*k:], b)
			}
			i8 := []byte{byte(rng.IntN(256))}
			at, digits := rng.IntN(n), rng.IntN(4) == 0
			for _, v := range vs {
				if err := v.AddFP32LE(first, vals); err != nil {
					t.Fatal(err)
				}
				if digits {
					_ = v.AddINT8(at, i8) // a row with digits
				}
			}
		}
		first := rng.IntN(n)
		cnt := rng.IntN(n - first + 1)
		var outs [2][]byte
		for k, v := range vs {
			outs[k] = make([]byte, 4*cnt)
			haveAVX2 = k == 0
			_, err := v.PutValues(outs[k], first, cnt, FP32)
			haveAVX2 = true
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Fatalf("iteration %d [%d, %d): kernel %x, scalar %x", it, first, first+cnt, outs[0], outs[1])
		}
	}
}

// TestLaneReadersMatchDigits: AutoSet, Spans and PutScaled read a
// lane-only element from its float64 (lane.go); they must give what the
// digits give once the lane is folded in. Two vectors take the same adds,
// one is folded element by element, and all three readers are compared,
// for lane values across the whole range: integers (INT8), FP16 and BF16
// values, sums that need FP32 or only KULISCH, subnormal units, powers of
// two of both signs (where the signed width of a negative is a bit less).
func TestLaneReadersMatchDigits(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	draw := func() uint32 {
		switch rng.IntN(8) {
		case 0:
			return math.Float32bits(float32(rng.IntN(300) - 150))
		case 1:
			return math.Float32bits(float32(math.Ldexp(1, rng.IntN(250)-149)) * float32(1-2*rng.IntN(2)))
		case 2:
			return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(3))<<23
		case 3:
			return math.Float32bits(float32(rng.NormFloat64() * 1000))
		}
		return math.Float32bits(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(60)-30)))
	}
	const n, w = 64, 280
	spansL, spansD := make([]Span, n), make([]Span, n)
	for it := 0; it < 200; it++ {
		lane, dig := func() (*Vector, *Vector) { a, _ := NewVector(n, w); b, _ := NewVector(n, w); return a, b }()
		for range 1 + rng.IntN(3) {
			vals := make([]byte, 4*n)
			for k := range n {
				binary.LittleEndian.PutUint32(vals[4*k:], draw())
			}
			_ = lane.AddFP32LE(0, vals)
			_ = dig.AddFP32LE(0, vals)
		}
		for i := range n {
			dig.fold(i)
		}
		for i := range n {
			a, aerr := lane.AutoSet(i)
			b, berr := dig.AutoSet(i)
			if a != b || (aerr == nil) != (berr == nil) {
				t.Fatalf("iteration %d element %d (lane %g): AutoSet %b (%v) from the lane, %b (%v) from the digits", it, i, lane.lane[i], a, aerr, b, berr)
			}
		}
		if err := lane.Spans(0, spansL); err != nil {
			t.Fatal(err)
		}
		if err := dig.Spans(0, spansD); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if spansL[i] != spansD[i] {
				t.Fatalf("iteration %d element %d (lane %g): span %v from the lane, %v from the digits", it, i, lane.lane[i], spansL[i], spansD[i])
			}
			// Scaled at the element's own extent, one byte wider and eight
			// (as in a group with a far larger value: bytes past the
			// eighth carry the sign), both readers; and one bit too narrow
			// must fail for both.
			s := spansD[i]
			if s.Hi == 0 {
				continue
			}
			for _, extra := range []int{0, 8, 64} {
				shift, b := ScaleFor(int(s.Lo), int(s.Hi)+extra, w)
				bl, bd := make([]byte, 1+b), make([]byte, 1+b)
				el, ed := lane.PutScaled(bl, i, 1, shift, b), dig.PutScaled(bd, i, 1, shift, b)
				if (el == nil) != (ed == nil) || !bytes.Equal(bl, bd) && el == nil {
					t.Fatalf("iteration %d element %d (lane %g) Shift %d B %d: lane %x (%v), digits %x (%v)", it, i, lane.lane[i], shift, b, bl, el, bd, ed)
				}
			}
			if s.Lo > 0 {
				shift, b := int(s.Lo)+1, (int(s.Hi)-int(s.Lo)+7)/8
				el, ed := lane.PutScaled(make([]byte, 1+b), i, 1, shift, b), dig.PutScaled(make([]byte, 1+b), i, 1, shift, b)
				if el == nil || ed == nil {
					t.Fatalf("element %d: Shift above its lowest bit accepted (lane %v, digits %v)", i, el, ed)
				}
			}
		}
	}
}

// TestMergeScaledLane: KULISCH_SCALED partials of a few gradient-like
// terms (B <= 8, both signs) merge into the parent's lanes, and the
// parent's value stays exact against math/big, also where the parent's
// lane holds a value the partial cannot join exactly (2^40 apart) and
// where the partial is the parent's first term.
func TestMergeScaledLane(t *testing.T) {
	const n, w = 48, 280
	rng := rand.New(rand.NewPCG(13, 14))
	for it := 0; it < 300; it++ {
		v, _ := NewVector(n, w)
		refs := make([]refSum, n)
		own := make([]byte, 4*n)
		for k := range n {
			x := float32(rng.NormFloat64())
			switch rng.IntN(3) {
			case 0:
				x = 0 // the partial comes first
			case 1:
				x *= 1 << 40
			}
			binary.LittleEndian.PutUint32(own[4*k:], math.Float32bits(x))
			refs[k].addFP32(math.Float32bits(x))
		}
		if err := v.AddFP32LE(0, own); err != nil {
			t.Fatal(err)
		}
		pv, _ := NewVector(n, w)
		vals := make([]byte, 4*n)
		for range 1 + rng.IntN(3) {
			for k := range n {
				b := math.Float32bits(float32(rng.NormFloat64() * 1e-3))
				binary.LittleEndian.PutUint32(vals[4*k:], b)
				refs[k].addFP32(b)
			}
			_ = pv.AddFP32LE(0, vals)
		}
		shift, b, buf := scaledGroup(t, pv)
		if b > 8 {
			t.Fatalf("partial needs B = %d: the test meant B <= 8", b)
		}
		if err := v.MergeScaled(0, shift, b, buf); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4*n)
		if _, err := v.PutValues(out, 0, n, FP32); err != nil {
			t.Fatal(err)
		}
		for k := range n {
			if got, want := binary.LittleEndian.Uint32(out[4*k:]), refs[k].fp32(); got != want {
				t.Fatalf("iteration %d element %d: %#08x, want %#08x", it, k, got, want)
			}
			if got, _ := v.AppendWire(nil, k); !bytes.Equal(got, refs[k].wire(w)) {
				t.Fatalf("iteration %d element %d: wire %x, want %x", it, k, got, refs[k].wire(w))
			}
		}
	}
}

// scaledGroup encodes every element of pv as one KULISCH_SCALED group at
// the group's own extent (as a child switch sends a partial).
func scaledGroup(t *testing.T, pv *Vector) (shift, b int, buf []byte) {
	t.Helper()
	spans := make([]Span, pv.Len())
	if err := pv.Spans(0, spans); err != nil {
		t.Fatal(err)
	}
	lo, hi := 1<<30, 0
	for _, sp := range spans {
		if sp.Hi != 0 {
			lo, hi = min(lo, int(sp.Lo)), max(hi, int(sp.Hi))
		}
	}
	if hi == 0 {
		lo = 0
	}
	shift, b = ScaleFor(lo, hi, pv.Width())
	buf = make([]byte, pv.Len()*(1+b))
	if err := pv.PutScaled(buf, 0, pv.Len(), shift, b); err != nil {
		t.Fatal(err)
	}
	return shift, b, buf
}

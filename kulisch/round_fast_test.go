package kulisch

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// roundFP32 (the PutValues fast path) against Round, the general path
// checked against math/big elsewhere, on accumulators built to hit its
// edges: both signs, every digit boundary of the two-digit window, ties and
// near-ties (the sticky bit in a far lower digit), subnormals, the largest
// finite and the first overflow, values that cancel to a few low bits.
func TestRoundFP32MatchesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, w := range []int{280, 288, 320, 1024} {
		v, err := NewVector(1, w)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 4)
		add := func(f float32) error {
			var b [4]byte
			u := math.Float32bits(f)
			b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			return v.AddFP32LE(0, b[:])
		}
		for it := 0; it < 200000; it++ {
			v.Reset(0)
			terms := 1 + rng.IntN(4)
			for k := 0; k < terms; k++ {
				var f float32
				switch rng.IntN(6) {
				case 0: // a subnormal or tiny
					f = math.Float32frombits(rng.Uint32() & 0x80FFFFFF)
				case 1: // the top of the range
					f = math.Float32frombits(rng.Uint32()&0x80FFFFFF | 0x7E800000)
				case 2: // exactly a power of two apart: ties and sticky in low digits
					f = float32(math.Ldexp(1, rng.IntN(250)-149))
					if rng.IntN(2) == 0 {
						f = -f
					}
				case 3: // cancellation
					f = math.Float32frombits(rng.Uint32()&^0x7F800000 | uint32(100+rng.IntN(40))<<23)
				default:
					f = math.Float32frombits(rng.Uint32())
				}
				if f != f || math.IsInf(float64(f), 0) {
					continue
				}
				if err := add(f); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(3) == 0 { // an exact negation: the sum of a pair cancels
				if err := add(-math.Float32frombits(rng.Uint32() & 0x7EFFFFFF)); err != nil {
					t.Fatal(err)
				}
			}
			// PutValues first: Round resolves the whole row, which would
			// hide the short-row path PutValues takes after FP32 adds.
			_, gerr := v.PutValues(out, 0, 1, FP32)
			want, werr := v.Round(0, FP32)
			got := uint32(out[0]) | uint32(out[1])<<8 | uint32(out[2])<<16 | uint32(out[3])<<24
			if (werr == nil) != (gerr == nil) || werr == nil && got != want {
				t.Fatalf("W=%d iteration %d: PutValues %#08x (%v), Round %#08x (%v)", w, it, got, gerr, want, werr)
			}
		}
	}
}

// TestPutFP32Interleaved holds PutValues to FP32 to the math/big reference
// while rows go through every kind of write, in random order: FP32, FP16,
// BF16 and INT8 adds (which keep a row short), exact KULISCH merges and
// Round (which widen it to every digit), KULISCH_SCALED merges (into the
// lane where they fit, the digits otherwise), PutValues itself (which resolves
// in place and moves the row's top up), resets of a range.
func TestPutFP32Interleaved(t *testing.T) {
	const n, w = 48, 280
	rng := rand.New(rand.NewPCG(11, 12))
	v, err := NewVector(n, w)
	if err != nil {
		t.Fatal(err)
	}
	refs := make([]refSum, n)
	// moderate draws a finite binary32 whose sums of a few hundred terms
	// stay far inside W = 280, of either sign, across the whole exponent
	// range below 2^100 (subnormals included).
	moderate := func() uint32 {
		return rng.Uint32()&0x807FFFFF | uint32(rng.IntN(227))<<23
	}
	out := make([]byte, 4*n)
	for it := 0; it < 4000; it++ {
		first := rng.IntN(n)
		cnt := 1 + rng.IntN(n-first)
		switch op := rng.IntN(10); {
		case op < 4:
			vals := make([]byte, 4*cnt)
			for k := range cnt {
				b := moderate()
				if rng.IntN(8) == 0 && k > 0 { // cancel the previous element's value
					b = binary.LittleEndian.Uint32(vals[4*(k-1):]) ^ 0x80000000
				}
				binary.LittleEndian.PutUint32(vals[4*k:], b)
				refs[first+k].addFP32(b)
			}
			if err := v.AddFP32LE(first, vals); err != nil {
				t.Fatal(err)
			}
		case op == 4:
			vals := make([]byte, 2*cnt)
			for k := range cnt {
				h := uint16(rng.Uint32())&^0x7C00 | uint16(rng.IntN(31))<<10 // finite
				binary.LittleEndian.PutUint16(vals[2*k:], h)
				refs[first+k].addFP16(h)
			}
			if err := v.AddFP16LE(first, vals); err != nil {
				t.Fatal(err)
			}
		case op == 5:
			vals := make([]byte, cnt)
			for k := range cnt {
				vals[k] = byte(rng.Uint32())
				refs[first+k].addINT8(int8(vals[k]))
			}
			if err := v.AddINT8(first, vals); err != nil {
				t.Fatal(err)
			}
		case op == 6: // an exact partial from another switch
			var vals []byte
			for k := range cnt {
				var r refSum
				for range 1 + rng.IntN(3) {
					r.addFP32(moderate())
				}
				vals = append(vals, r.wire(w)...)
				refs[first+k].merge(&r)
			}
			if err := v.MergeKulisch(first, vals); err != nil {
				t.Fatal(err)
			}
		case op == 7:
			if _, err := v.Round(first, FP32); err != nil {
				t.Fatal(err)
			}
		case op == 9: // a KULISCH_SCALED partial from another switch
			pv, _ := NewVector(cnt, w)
			vals := make([]byte, 4*cnt)
			for range 1 + rng.IntN(3) {
				for k := range cnt {
					binary.LittleEndian.PutUint32(vals[4*k:], moderate())
					var r refSum
					r.addFP32(binary.LittleEndian.Uint32(vals[4*k:]))
					refs[first+k].merge(&r)
				}
				if err := pv.AddFP32LE(0, vals); err != nil {
					t.Fatal(err)
				}
			}
			shift, b, buf := scaledGroup(t, pv)
			if err := v.MergeScaled(first, shift, b, buf); err != nil {
				t.Fatal(err)
			}
		case op == 8 && rng.IntN(4) == 0:
			if err := v.ResetRange(first, cnt); err != nil {
				t.Fatal(err)
			}
			for k := range cnt {
				refs[first+k] = refSum{}
			}
		}
		// Read a random range back after every step.
		first = rng.IntN(n)
		cnt = 1 + rng.IntN(n-first)
		if _, err := v.PutValues(out, first, cnt, FP32); err != nil {
			t.Fatalf("iteration %d: PutValues: %v", it, err)
		}
		for k := range cnt {
			if got, want := binary.LittleEndian.Uint32(out[4*k:]), refs[first+k].fp32(); got != want {
				t.Fatalf("iteration %d: element %d = %#08x, want %#08x", it, first+k, got, want)
			}
		}
	}
}

// TestResolveShortRowCarries: a short row whose carry out of its top
// digit is large and negative (thousands of large negative terms in one
// digit pair), at every exponent, so at every digit position up to the
// row's top, resolved through
// every reader (Round, State, the wire value, scaled spans) and checked
// against the math/big reference.
func TestResolveShortRowCarries(t *testing.T) {
	for _, w := range []int{280, 320} {
		for e := uint32(1); e < 0xFF; e++ {
			for _, terms := range []int{1, 3, 700, 3000} {
				v, err := NewVector(1, w)
				if err != nil {
					t.Fatal(err)
				}
				var ref refSum
				b := 0x80000000 | e<<23 | 0x7FFFFF // the largest negative of exponent e
				vals := make([]byte, 4)
				binary.LittleEndian.PutUint32(vals, b)
				for range terms {
					if err := v.AddFP32LE(0, vals); err != nil {
						t.Fatal(err)
					}
				}
				ref.addFP32(b)
				ref.sum.Mul(&ref.sum, big.NewInt(int64(terms)))
				name := func() string { return "W=" + itoa(w) + " e=" + itoa(int(e)) + " terms=" + itoa(terms) }
				st, err := v.State(0)
				if !ref.fits(w) {
					if err == nil {
						t.Fatalf("%s: State %v, want an overflow", name(), st)
					}
					continue
				}
				if err != nil || st != ref.state() {
					t.Fatalf("%s: State %v, %v; want %v", name(), st, err, ref.state())
				}
				if got, err := v.Round(0, FP32); err != nil || got != ref.fp32() {
					t.Fatalf("%s: Round %#08x, %v; want %#08x", name(), got, err, ref.fp32())
				}
				wire := make([]byte, v.WireSize())
				if err := v.PutWire(wire, 0); err != nil || string(wire) != string(ref.wire(w)) {
					t.Fatalf("%s: wire %x, %v; want %x", name(), wire, err, ref.wire(w))
				}
			}
		}
	}
}

// TestPutValuesLaneMatchesRound: PutValues to INT8, FP16 and BF16 writes a
// lane-only value that the format holds exactly without rounding
// (laneBits); what it writes, or the error it returns, must be what Round
// gives for the same accumulator (Round itself is checked against
// math/big elsewhere). Values are sums of one to three FP32 terms around
// every edge of the three formats: INT8's range, FP16's largest finite
// value and its subnormals, BF16's 8-bit significand, and sums one unit
// too fine for the format (so the fast path must decline).
func TestPutValuesLaneMatchesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	term := func() float32 {
		sign := float32(1 - 2*rng.IntN(2))
		switch rng.IntN(7) {
		case 0: // INT8's range and just past it
			return sign * float32(rng.IntN(140))
		case 1: // small integers: FP16 up to 2048 exactly, BF16 up to 256
			return sign * float32(rng.IntN(5000))
		case 2: // around FP16's largest finite value 65504 (and 65520, where it rounds to inf)
			return sign * float32(65504+16*(rng.IntN(5)-2))
		case 3: // FP16 subnormals and the normals above them: multiples of 2^-24
			return sign * float32(math.Ldexp(float64(1+rng.IntN(4096)), -24))
		case 4: // BF16: 8 significant bits, any exponent
			return sign * float32(math.Ldexp(float64(128+rng.IntN(128)), rng.IntN(80)-40))
		case 5: // one unit too fine for FP16 / BF16
			return sign * float32(math.Ldexp(float64(1<<11+1+2*rng.IntN(100)), rng.IntN(20)-10))
		}
		return math.Float32frombits(rng.Uint32() & 0xBFFFFFFF) // anything finite
	}
	// Every edge once, as the first elements' only term.
	edges := []float32{127, 128, -128, -129, 0.5, 2048, 2049, 4098, 65504, 65520, -65504, 65536,
		float32(math.Ldexp(1, -14)), float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -25)), float32(math.Ldexp(3, -25)),
		float32(math.Ldexp(1023, -24)), float32(math.Ldexp(2047, -25)), 256, 257, 255.5,
		math.Float32frombits(0x3F800001), math.Float32frombits(0x3F800100), math.Float32frombits(0x3F810000),
		math.Float32frombits(0x00000001), math.Float32frombits(0x00010000), math.MaxFloat32, -math.MaxFloat32}
	const n = 1 << 16
	for _, f := range []Format{INT8, FP16, BF16} {
		fast, ref := mustVector(t, n), mustVector(t, n)
		for i := 0; i < n; i++ {
			terms := 1 + rng.IntN(3)
			for k := 0; k < terms; k++ {
				x := term()
				if i < len(edges) {
					x, terms = edges[i], 1
				}
				var b [4]byte
				binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
				if err := fast.AddFP32LE(i, b[:]); err != nil {
					t.Fatal(err)
				}
				if err := ref.AddFP32LE(i, b[:]); err != nil {
					t.Fatal(err)
				}
			}
		}
		exact := 0
		for i := 0; i < n; i++ {
			lane, laneOnly := fast.laneOnly(i)
			var got [2]byte
			_, gerr := fast.PutValues(got[:], i, 1, f)
			want, werr := ref.Round(i, f)
			var wb [2]byte
			putBits(wb[:], f, want)
			if (gerr == nil) != (werr == nil) || gerr == nil && got != wb {
				t.Fatalf("%v element %d (lane %g, lane only %v): PutValues %x %v, Round %x %v", f, i, lane, laneOnly, got, gerr, wb, werr)
			}
			if _, ok := laneBits(lane, f); ok && laneOnly {
				exact++
			}
		}
		if exact < n/32 {
			t.Fatalf("%v: only %d of %d values took the fast path: the test does not exercise it", f, exact, n)
		}
		t.Logf("%v: %d of %d values written without rounding", f, exact, n)
	}
}

func mustVector(t *testing.T, n int) *Vector {
	t.Helper()
	v, err := NewVector(n, 280)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

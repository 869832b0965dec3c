package kulisch

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func f32(x float64) uint32 { return math.Float32bits(float32(x)) }

// TestRoundingCases pins hand-computed ties, subnormals and overflows.
func TestRoundingCases(t *testing.T) {
	maxF := uint32(0x7F7FFFFF)
	cases := []struct {
		name  string
		terms []uint32
		fp32  uint32
		fp16  uint16
		bf16  uint16
	}{
		{"1+2^-24 tie to even down", []uint32{f32(1), f32(0x1p-24)}, 0x3F800000, 0x3C00, 0x3F80},
		{"1+2^-23+2^-24 tie to even up", []uint32{f32(1 + 0x1p-23), f32(0x1p-24)}, 0x3F800002, 0x3C00, 0x3F80},
		{"1+2^-11 fp16 tie down", []uint32{f32(1), f32(0x1p-11)}, f32(1 + 0x1p-11), 0x3C00, 0x3F80},
		{"1+2^-10+2^-11 fp16 tie up", []uint32{f32(1 + 0x1p-10), f32(0x1p-11)}, f32(1 + 0x1p-10 + 0x1p-11), 0x3C02, 0x3F80},
		{"1+2^-7+2^-8 bf16 tie up", []uint32{f32(1 + 0x1p-7), f32(0x1p-8)}, f32(1 + 0x1p-7 + 0x1p-8), 0x3C0C, 0x3F82},
		{"fp16 subnormal tie to 0", []uint32{f32(0x1p-25)}, f32(0x1p-25), 0x0000, uint16(f32(0x1p-25) >> 16)},
		{"fp16 subnormal tie up to even", []uint32{f32(3 * 0x1p-25)}, f32(3 * 0x1p-25), 0x0002, uint16(f32(3*0x1p-25) >> 16)},
		{"fp32 smallest subnormal kept", []uint32{1}, 1, 0, 0},
		{"fp32 subnormal sum into normal", []uint32{0x007FFFFF, 1}, 0x00800000, 0, 0x0080},
		{"max+max = inf", []uint32{maxF, maxF}, 0x7F800000, 0x7C00, 0x7F80},
		{"max + half ulp = inf", []uint32{maxF, f32(0x1p103)}, 0x7F800000, 0x7C00, 0x7F80},
		{"max + just under half ulp = max", []uint32{maxF, f32(0x1p103), f32(-0x1p80)}, maxF, 0x7C00, 0x7F80},
		{"fp16 max 65504 + 16 (tie) to inf", []uint32{f32(65504), f32(16)}, f32(65520), 0x7C00, 0x4780},
		{"fp16 65504+15.99 stays max", []uint32{f32(65504), f32(15.5)}, f32(65519.5), 0x7BFF, 0x4780},
		{"-max-max = -inf", []uint32{maxF | 1<<31, maxF | 1<<31}, 0xFF800000, 0xFC00, 0xFF80},
		{"inf + -inf = NaN", []uint32{0x7F800000, 0xFF800000}, NaN32, NaN16, NaNBF},
		{"NaN payload canonical", []uint32{0xFFC01234, f32(1)}, NaN32, NaN16, NaNBF},
		{"inf + finite", []uint32{0x7F800000, f32(-3)}, 0x7F800000, 0x7C00, 0x7F80},
		{"-0 + -0 = -0", []uint32{0x80000000, 0x80000000}, 0x80000000, 0x8000, 0x8000},
		{"-0 + +0 = +0", []uint32{0x80000000, 0}, 0, 0, 0},
		{"x + -x = +0", []uint32{f32(-1.5), f32(1.5)}, 0, 0, 0},
		{"-0 + x - x = +0", []uint32{0x80000000, f32(-1.5), f32(1.5)}, 0, 0, 0},
		{"big cancellation exact", []uint32{f32(1e38), f32(1), f32(-1e38)}, f32(1), 0x3C00, 0x3F80},
	}
	for _, c := range cases {
		a, _ := NewAccumulator(288)
		for _, x := range c.terms {
			a.AddFP32(x)
		}
		if g, _ := a.RoundFP32(); g != c.fp32 {
			t.Errorf("%s: FP32 %#08x want %#08x", c.name, g, c.fp32)
		}
		if g, _ := a.RoundFP16(); g != c.fp16 {
			t.Errorf("%s: FP16 %#04x want %#04x", c.name, g, c.fp16)
		}
		if g, _ := a.RoundBF16(); g != c.bf16 {
			t.Errorf("%s: BF16 %#04x want %#04x", c.name, g, c.bf16)
		}
	}
}

func TestEmptyIsNegZero(t *testing.T) {
	a, _ := NewAccumulator(64)
	if s, _ := a.State(); s != NegZero {
		t.Fatalf("empty state %v", s)
	}
	v, _ := NewArrivalVector(1)
	if g, _ := v.RoundFP32(0); g != 0x80000000 {
		t.Fatalf("arrival empty %#x", g)
	}
}

func TestINT8Output(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want int8
		ok   bool
	}{{127, 127, true}, {-128, -128, true}, {128, 0, false}, {-129, 0, false}, {0.5, 0, false},
		{-3, -3, true}, {1e30, 0, false}, {math.Copysign(0, -1), 0, true}, {0x1p-149, 0, false}} {
		a, _ := NewAccumulator(4096)
		a.AddFP32(f32(c.x))
		g, err := a.INT8()
		if c.ok != (err == nil) || g != c.want {
			t.Errorf("INT8(%g) = %d, %v; want %d ok=%v", c.x, g, err, c.want, c.ok)
		}
		if err != nil && !errors.Is(err, ErrNotInt8) {
			t.Errorf("INT8(%g) error %v", c.x, err)
		}
	}
	a, _ := NewAccumulator(288)
	a.AddFP32(0x7F800000)
	if _, err := a.INT8(); !errors.Is(err, ErrNotInt8) {
		t.Errorf("INT8(inf) err %v", err)
	}
}

// TestExhaustive16 converts all 2^16 FP16 and BF16 patterns in and rounds
// them back: bit-exact, NaNs to the canonical NaN.
func TestExhaustive16(t *testing.T) {
	v, _ := NewVector(1<<16, 280)
	buf := make([]byte, 2<<16)
	for h := 0; h < 1<<16; h++ {
		buf[2*h], buf[2*h+1] = byte(h), byte(h>>8)
	}
	for _, f := range []Format{FP16, BF16} {
		v.ResetRange(0, 1<<16)
		if err := v.Add(0, f, buf); err != nil {
			t.Fatal(err)
		}
		for h := 0; h < 1<<16; h++ {
			want := uint16(h)
			var got uint16
			var w32 uint32
			if f == FP16 {
				got, _ = v.RoundFP16(h)
				w32 = FP16ToFP32(want)
				if h&0x7C00 == 0x7C00 && h&0x3FF != 0 {
					want = NaN16
				}
			} else {
				got, _ = v.RoundBF16(h)
				w32 = BF16ToFP32(want)
				if h&0x7F80 == 0x7F80 && h&0x7F != 0 {
					want = NaNBF
				}
			}
			if got != want {
				t.Fatalf("%v %#04x: round trip %#04x", f, h, got)
			}
			// The FP32 rounding of an exact 16-bit value is its exact widening.
			if g32, _ := v.RoundFP32(h); g32 != w32 {
				t.Fatalf("%v %#04x: FP32 %#08x, widening %#08x", f, h, g32, w32)
			}
			var r refSum
			if f == FP16 {
				r.addFP16(uint16(h))
			} else {
				r.addBF16(uint16(h))
			}
			if r.fp32() != w32 {
				t.Fatalf("%v %#04x: widening %#08x, reference %#08x", f, h, w32, r.fp32())
			}
			if s, _ := v.AutoSet(h); !s.Has(f) || !s.Has(FP32) {
				t.Fatalf("%v %#04x: AutoSet %08b", f, h, s)
			}
		}
	}
	for x := -128; x < 128; x++ {
		a, _ := NewAccumulator(160)
		a.AddINT8(int8(x))
		if g, err := a.INT8(); err != nil || g != int8(x) {
			t.Fatalf("INT8 %d round trip %d %v", x, g, err)
		}
		if g, _ := a.RoundFP32(); g != INT8ToFP32(int8(x)) || math.Float32frombits(g) != float32(x) {
			t.Fatalf("INT8 %d FP32 %#x", x, g)
		}
	}
}

// TestFP32RoundTrip: every FP32 value converts in and rounds back exactly
// (a random sample; all 2^32 patterns with PRISMD_SOAK=1).
func TestFP32RoundTrip(t *testing.T) {
	const chunk = 1 << 16
	v, _ := NewVector(chunk, 280)
	buf := make([]byte, 4*chunk)
	r := rand.New(rand.NewPCG(7, 7))
	n := 1 << 22
	if soak() {
		n = 1 << 32
	}
	for base := 0; base < n; base += chunk {
		for k := 0; k < chunk; k++ {
			x := uint32(base + k)
			if !soak() {
				x = r.Uint32()
			}
			buf[4*k], buf[4*k+1], buf[4*k+2], buf[4*k+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		}
		v.ResetRange(0, chunk)
		v.AddFP32LE(0, buf)
		for k := 0; k < chunk; k++ {
			x := uint32(buf[4*k]) | uint32(buf[4*k+1])<<8 | uint32(buf[4*k+2])<<16 | uint32(buf[4*k+3])<<24
			want := x
			if x&0x7F800000 == 0x7F800000 && x&0x7FFFFF != 0 {
				want = NaN32
			}
			if g, _ := v.RoundFP32(k); g != want {
				t.Fatalf("%#08x: round trip %#08x", x, g)
			}
		}
	}
}

// TestCapacity: sums past W are reported, never wrapped or saturated.
func TestCapacity(t *testing.T) {
	maxF := uint32(0x7F7FFFFF)
	for _, tc := range []struct {
		w, n int
		over bool
	}{{280, 4, false}, {280, 5, true}, {280, 8, true}, {288, 8, false}, {288, 1024, false}, {288, 1025, true}} {
		a, _ := NewAccumulator(tc.w)
		for range tc.n {
			a.AddFP32(maxF)
		}
		buf := make([]byte, WireSize(tc.w))
		err := a.PutWire(buf)
		if tc.over != errors.Is(err, ErrOverflow) || tc.over != a.Overflow() {
			t.Errorf("W=%d n=%d: err %v over %v", tc.w, tc.n, err, a.Overflow())
		}
		if _, err := a.RoundFP32(); tc.over != errors.Is(err, ErrOverflow) {
			t.Errorf("W=%d n=%d: RoundFP32 err %v", tc.w, tc.n, err)
		}
		if _, err := a.AutoSet(); tc.over != errors.Is(err, ErrOverflow) {
			t.Errorf("W=%d n=%d: AutoSet err %v", tc.w, tc.n, err)
		}
		// The negative side holds one more unit: -2^(W-1) fits.
		b, _ := NewAccumulator(tc.w)
		for range tc.n {
			b.AddFP32(maxF | 1<<31)
		}
		if b.Overflow() != tc.over {
			t.Errorf("W=%d n=%d negative: over %v", tc.w, tc.n, b.Overflow())
		}
	}
	// 2^-86 is 2^63 units: one past a 64-bit accumulator; -2^-86 fits.
	a, _ := NewAccumulator(64)
	a.AddFP32(f32(0x1p-86))
	if !a.Overflow() {
		t.Error("2^63 units fits W=64")
	}
	a.Reset()
	a.AddFP32(f32(-0x1p-86))
	if a.Overflow() {
		t.Error("-2^63 units does not fit W=64")
	}
	// An excursion that comes back is exact: overflow is a property of
	// the value, not of the order.
	a.Reset()
	a.AddFP32(f32(0x1p100))
	a.AddFP32(f32(3 * 0x1p-149))
	a.AddFP32(f32(-0x1p100))
	if a.Overflow() {
		t.Error("returned excursion reported")
	}
	if g, _ := a.RoundFP32(); g != 3 {
		t.Errorf("excursion result %#x", g)
	}
	// Width rule.
	for _, c := range []struct {
		n    uint32
		bits int
		w    int
	}{{0, 278, 280}, {1, 278, 280}, {2, 279, 280}, {4, 280, 280}, {5, 281, 288}, {1024, 288, 288}, {1025, 289, 296}, {1 << 31, 309, 312}, {math.MaxUint32, 310, 312}} {
		if RequiredBits(c.n) != c.bits || RequiredWidth(c.n) != c.w {
			t.Errorf("N=%d: bits %d width %d, want %d %d", c.n, RequiredBits(c.n), RequiredWidth(c.n), c.bits, c.w)
		}
	}
	if MinWidthFor(INT8, 1) != 160 || MinWidthFor(FP16, 1) != 168 || MinWidthFor(BF16, 1) != 280 || MinWidthFor(KULISCH, 1) != 0 {
		t.Error("MinWidthFor")
	}
	// MinWidthFor is tight enough: N extreme INT8 / FP16 terms fit.
	for _, c := range []struct {
		f Format
		x uint32
	}{{INT8, 0x80}, {FP16, 0xFBFF}, {FP16, 0x7BFF}, {FP32, maxF}, {FP32, maxF | 1<<31}} {
		for _, n := range []uint32{1, 2, 3, 1000, 1 << 12} {
			w := MinWidthFor(c.f, n)
			a, _ := NewAccumulator(w)
			for range n {
				switch c.f {
				case INT8:
					a.AddINT8(int8(c.x))
				case FP16:
					a.AddFP16(uint16(c.x))
				default:
					a.AddFP32(c.x)
				}
			}
			if a.Overflow() {
				t.Errorf("%v %#x x%d overflows MinWidthFor=%d", c.f, c.x, n, w)
			}
		}
	}
	if err := CheckCapacity(280, FP32, 5); !errors.Is(err, ErrOverflow) {
		t.Errorf("CheckCapacity(280, 5) = %v", err)
	}
	if err := CheckCapacity(280, FP32, 4); err != nil {
		t.Errorf("CheckCapacity(280, 4) = %v", err)
	}
}

func TestWireValidation(t *testing.T) {
	v, _ := NewVector(2, 64)
	bad := [][]byte{
		{6, 0, 0, 0, 0, 0, 0, 0, 0},
		{0, 0, 0, 0, 0, 0, 0, 0, 0},
		{1, 1, 0, 0, 0, 0, 0, 0, 0},
		{5, 0, 0, 0, 0, 0, 0, 0, 0x80},
		{0, 1, 0, 0, 0, 0, 0, 0},
	}
	for _, b := range bad {
		if err := v.MergeKulisch(0, b); err == nil {
			t.Errorf("%x accepted", b)
		}
	}
	// An invalid second value leaves the first unapplied.
	two := []byte{0, 5, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := v.MergeKulisch(0, two); !errors.Is(err, ErrWire) {
		t.Fatal(err)
	}
	if s, _ := v.State(0); s != NegZero {
		t.Errorf("partial merge applied: %v", s)
	}
	// -1 unit and the most negative value.
	for _, b := range [][]byte{{0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, {0, 0, 0, 0, 0, 0, 0, 0, 0x80}} {
		a, _ := NewAccumulator(64)
		if err := a.MergeWire(b); err != nil {
			t.Fatal(err)
		}
		got, err := a.AppendWire(nil)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("%x -> %x %v", b, got, err)
		}
	}
}

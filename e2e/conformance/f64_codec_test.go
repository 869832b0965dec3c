package conformance

// KULISCH_F64 (format code 8), from docs/protocol.md section 6 alone: the
// binary64 value table, the placement rule (DATA without EXT), D11 and the
// mapping to the same exact Kulisch value a KULISCH or KULISCH_SCALED
// encoding of the number stands for. No lab needed.

import (
	"bytes"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// f64Frame is a DATA frame (bytes after Ethernet) of groups from First 0.
func f64Frame(class uint8, flags uint8, ext *extension, gs ...group) []byte {
	return dataFrame{Class: class, ID: exID, SrcEP: 0x200, DstEP: 0x20, PacketID: 1, Stream: 3, Flags: flags,
		Ext: ext, Groups: gs}.encode()
}

func TestKulischF64(t *testing.T) {
	units := func(u int64, sh uint) kulischVal {
		return kulischVal{State: 0, Int: new(big.Int).Lsh(big.NewInt(u), sh)}
	}
	// The table of 6 and its examples.
	t.Run("value_table", func(t *testing.T) {
		for _, c := range []struct {
			name string
			bits uint64
			want kulischVal
		}{
			{"+0", 0, kulischVal{State: 1, Int: new(big.Int)}},
			{"-0", 0x8000000000000000, kulischVal{State: 2, Int: new(big.Int)}},
			{"+inf", 0x7FF0000000000000, kulischVal{State: 3, Int: new(big.Int)}},
			{"-inf", 0xFFF0000000000000, kulischVal{State: 4, Int: new(big.Int)}},
			{"NaN", 0x7FF8000000000000, kulischVal{State: 5, Int: new(big.Int)}},
			{"1.0", 0x3FF0000000000000, units(1, 149)},
			{"2^-149, the unit", 0x36A0000000000000, units(1, 0)},
			{"-1.5 x 2^-148", 0xB6B8000000000000, units(-3, 0)},
			{"-0.75", math.Float64bits(-0.75), units(-3, 147)},
			{"2^-23", math.Float64bits(math.Ldexp(1, -23)), units(1, 126)},
		} {
			got, err := f64Kulisch(c.bits, 280)
			if err != nil || got.State != c.want.State || got.Int.Cmp(c.want.Int) != 0 {
				t.Errorf("%s (%#016x): %v %v, want state %d integer %v", c.name, c.bits, got, err, c.want.State, c.want.Int)
			}
		}
		// "1.0 is `00 00 00 00 00 00 f0 3f`", "2^-149 ... `00 00 00 00 00 00 a0 36`".
		if g := f64Group([]uint64{math.Float64bits(1)}); !bytes.Equal(g.Values, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}) {
			t.Errorf("1.0 encodes as % x", g.Values)
		}
		if g := f64Group([]uint64{0x36A0000000000000}); !bytes.Equal(g.Values, []byte{0, 0, 0, 0, 0, 0, 0xa0, 0x36}) {
			t.Errorf("2^-149 encodes as % x", g.Values)
		}
	})
	t.Run("malformed_values", func(t *testing.T) {
		for _, c := range []struct {
			name string
			bits uint64
			w    int
		}{
			{"2^-150 (the spec's example)", 0x3690000000000000, 0},
			{"smallest subnormal", 1, 0},
			{"largest subnormal", 0x000FFFFFFFFFFFFF, 0},
			{"negative subnormal", 0x8000000000000001, 0},
			{"quiet NaN with payload", 0x7FF8000000000001, 0},
			{"signalling NaN", 0x7FF0000000000001, 0},
			{"negative NaN", 0xFFF8000000000000, 0},
			{"(2^52 + 1) x 2^-202", 925<<52 | 1, 0},
			{"2^130 with W 280", uint64(1023+130) << 52, 280},
			{"-2^130 with W 280", 1<<63 | uint64(1023+130)<<52, 280},
			{"2^-86 with W 64", uint64(1023-86) << 52, 64},
			{"max binary64 with W 280", 0x7FEFFFFFFFFFFFFF, 280},
		} {
			if v, err := f64Kulisch(c.bits, c.w); err == nil {
				t.Errorf("%s (%#016x, W %d): accepted as %v, want malformed (6)", c.name, c.bits, c.w, v)
			}
			b := f64Frame(classData, 0, nil, f64Group([]uint64{0x3FF0000000000000, c.bits}))
			if _, err := decodeData(b, opCtx{W: c.w}); err == nil || err.(*ruleError).Reason != "out_of_range" {
				t.Errorf("%s in a DATA frame (W %d): %v, want out_of_range (D11)", c.name, c.w, err)
			}
		}
	})
	t.Run("range_edge", func(t *testing.T) {
		// "no binary64 exceeds the largest W's range": W 4096 and W unknown
		// admit the largest finite binary64.
		for _, w := range []int{0, 4096} {
			if _, err := f64Kulisch(0x7FEFFFFFFFFFFFFF, w); err != nil {
				t.Errorf("the largest binary64 with W %d: %v, want accepted", w, err)
			}
		}
		for _, w := range []int{64, 280, 288, 4096} {
			// The largest magnitude inside W: E - 1023 = W - 151, every
			// fraction bit set; one binade up is outside.
			e := uint64(1023 + w - 151)
			top := e<<52 | (1<<52 - 1)
			if e < 1 || e > 2046 {
				continue
			}
			v, err := f64Kulisch(top, w)
			lim := new(big.Int).Lsh(big.NewInt(1), uint(w-1)) // 2^(W-1) units
			if err != nil || v.Int.CmpAbs(lim) >= 0 {
				t.Errorf("W %d: %#016x: %v %v, want a FINITE value below 2^(W-1) units", w, top, v, err)
			}
			if _, err := f64Kulisch(1<<63|top, w); err != nil {
				t.Errorf("W %d: -%#016x: %v, want accepted", w, top, err)
			}
			if e+1 <= 2046 {
				if _, err := f64Kulisch((e+1)<<52, w); err == nil {
					t.Errorf("W %d: 2^(W-150) accepted, want outside the W-bit range", w)
				}
				if _, err := f64Kulisch((e+1)<<52, 0); err != nil {
					t.Errorf("W unknown: 2^(W-150) refused (%v); a receiver that does not know W checks only the multiple-of-2^-149 rule", err)
				}
			}
			// Fits the integer of a plain KULISCH value of W bits.
			b := f64Frame(classData, 0, nil, trKulischGroup(w, []trVal{{State: trFinite, U: v.Int}}))
			if _, err := decodeData(b, opCtx{W: w}); err != nil {
				t.Errorf("W %d: the edge value as KULISCH-%d: %v", w, w, err)
			}
		}
	})
	// D11 placement and Format Word, and the group length (no padding).
	t.Run("d11", func(t *testing.T) {
		g := f64Group([]uint64{0x3FF0000000000000, 0, 0xFFF0000000000000})
		if n := g.length(); n != 4+24 {
			t.Errorf("3 values: group length %d, want 28", n)
		}
		b := f64Frame(classData, 0, nil, g)
		d, err := decodeData(b, opCtx{MTU: 1500, W: 280})
		if err != nil || len(d.Groups) != 1 || d.Groups[0].Format != fmtF64 || d.ElemCount != 3 {
			t.Fatalf("valid KULISCH_F64 frame: %+v %v", d, err)
		}
		reason := func(b []byte, op opCtx) string {
			if _, err := decodeData(b, op); err != nil {
				return err.(*ruleError).Reason
			}
			return ""
		}
		for _, c := range []struct {
			name, want string
			b          []byte
		}{
			{"in RESULT", "bad_format", f64Frame(classResult, 0, nil, g)},
			{"in DATA with EXT", "bad_format", f64Frame(classData, dfExt, &extension{Encoding: encList, Tenant: 7, Set: listSet(1)}, g)},
			{"in RESULT with EXT", "bad_format", f64Frame(classResult, dfExt, &extension{Encoding: encList, Tenant: 7, Set: listSet(1)}, g)},
			{"format word bits 11..0 = 1", "bad_format", func() []byte {
				x := append([]byte(nil), b...)
				be.PutUint16(x[2+dataHdr+2:], fmtF64<<12|1)
				return x
			}()},
			{"format word bits 11..0 = W/8", "bad_format", func() []byte {
				x := append([]byte(nil), b...)
				be.PutUint16(x[2+dataHdr+2:], fmtF64<<12|35)
				return x
			}()},
			{"format code 9", "bad_format", func() []byte {
				x := append([]byte(nil), b...)
				be.PutUint16(x[2+dataHdr+2:], 9<<12)
				return x
			}()},
			{"values past the body", "bad_length", func() []byte {
				x := append([]byte(nil), b...)
				be.PutUint16(x[2+dataHdr:], 4) // Count 4: 32 value bytes, 24 in the body
				be.PutUint16(x[2+30:], 4)
				return x
			}()},
			{"body one value short", "bad_length", func() []byte {
				x := append([]byte(nil), b[:len(b)-8]...)
				be.PutUint16(x[2+34:], uint16(len(x)-2-dataHdr))
				return x
			}()},
		} {
			if got := reason(c.b, opCtx{MTU: 1500, W: 280}); got != c.want {
				t.Errorf("KULISCH_F64 %s: %q, want %q (6, D11)", c.name, got, c.want)
			}
		}
		// Mixed with other groups in one frame: the sum of Counts and the
		// Body Length count it like any group.
		mixed := f64Frame(classData, 0, nil, fp32Group([]float32{1, 2, 3}), g, trKulischGroup(280, []trVal{trF32(1)}))
		if d, err := decodeData(mixed, opCtx{MTU: 1500, W: 280}); err != nil || d.ElemCount != 7 {
			t.Errorf("FP32 + KULISCH_F64 + KULISCH frame: %+v %v", d, err)
		}
	})
	// The same number as KULISCH, KULISCH_SCALED and KULISCH_F64 decodes to
	// the same exact Kulisch value (6).
	t.Run("same_value_as_kulisch_and_scaled", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(8, 0xf64))
		var xs []trVal
		for _, b := range []uint64{0, 1 << 63, 0x7FF0000000000000, 0xFFF0000000000000, f64NaN, 0x36A0000000000000, 0xB6B8000000000000} {
			v, _ := f64Kulisch(b, 0)
			xs = append(xs, trVal{State: v.State, U: v.Int})
		}
		for len(xs) < 150 {
			// A random binary64 that is a multiple of 2^-149 inside W 280.
			e := 874 + rng.IntN(1023+129-874+1)
			m := rng.Uint64() & (1<<52 - 1)
			if sh := 926 - e; sh > 0 { // E - 1075 + t >= -149: the low 926 - E bits clear
				m &^= 1<<uint(sh) - 1
			}
			bits := uint64(e)<<52 | m | uint64(rng.IntN(2))<<63
			v, err := f64Kulisch(bits, 280)
			if err != nil {
				continue
			}
			x := trVal{State: v.State, U: v.Int}
			if f, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(v.Int), -149).Float64(); math.Float64bits(f) != bits {
				t.Fatalf("%#016x decodes to %v = %g", bits, x, f)
			}
			if back, ok := trF64Bits(x); !ok || back != bits {
				t.Fatalf("%v encodes back as %#016x (%v), want %#016x", x, back, ok, bits)
			}
			xs = append(xs, x)
		}
		for a := 0; a < len(xs); a += 30 {
			part := xs[a:min(a+30, len(xs))]
			s, b, ok := trScaledCanon(280, part)
			if !ok {
				s, b = 0, 1
			}
			frames := map[string][]byte{
				"KULISCH-280":    f64Frame(classData, 0, nil, trKulischGroup(280, part)),
				"KULISCH_SCALED": f64Frame(classData, 0, nil, trScaledGroup(b, s, part)),
				"KULISCH_F64":    f64Frame(classData, 0, nil, trF64Group(part)),
			}
			for name, fb := range frames {
				d, err := decodeData(fb, opCtx{MTU: 1500, W: 280})
				if err != nil {
					t.Errorf("values %d..: %s: %v", a, name, err)
					continue
				}
				got := trGroupVals(d.Groups[0])
				for i := range part {
					if !got[i].equal(part[i]) {
						t.Errorf("value %d as %s: %v, want %v", a+i, name, got[i], part[i])
					}
				}
			}
		}
		// Values binary64 does not hold have no KULISCH_F64 encoding.
		x := trAdd(trF32(1), trF32(float32(math.Ldexp(1, -60))))
		if _, ok := trF64Bits(x); ok {
			t.Errorf("1 + 2^-60 has a binary64 encoding here")
		}
		// 54 significant bits.
		if _, ok := trF64Bits(trUnits(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 53), big.NewInt(1)))); ok {
			t.Errorf("2^53 + 1 units has a binary64 encoding here")
		}
	})
}

// TestTrCheckChoice: the check of section 6's [choice] paragraph that the
// tree tests apply to prismd's partials flags what it should and only that.
func TestTrCheckChoice(t *testing.T) {
	const n = 400
	narrow := make([]trVal, n) // binary64 holds each, FP32 none
	fp32 := make([]trVal, n)   // FP32 holds each
	for i := range narrow {
		narrow[i] = trAdd(trF32(1+float32(i)), trF32(float32(math.Ldexp(1, -30))))
		fp32[i] = trF32(float32(i) + 0.25)
	}
	wide := append([]trVal(nil), narrow...)
	wide[150] = trAdd(trF32(1), trF32(float32(math.Ldexp(1, -70)))) // 71 significant bits
	frame := func(first int, gs ...group) dataFrame {
		d := dataFrame{Class: classData, First: uint32(first), Groups: gs}
		for _, g := range gs {
			d.ElemCount += g.Count
		}
		return d
	}
	scaled := func(xs []trVal) group {
		s, b, _ := trScaledCanon(280, xs)
		return trScaledGroup(b, s, xs)
	}
	for _, c := range []struct {
		name    string
		d       dataFrame
		want    []trVal
		partial uint8
		flagged bool
	}{
		{"f64_frame", frame(0, trF64Group(narrow[:181])), narrow, fmtKulisch, false},
		{"short_f64_frame", frame(300, trF64Group(narrow[300:310])), narrow, fmtKulisch, false},
		{"scaled_where_f64_holds_all", frame(0, scaled(narrow[:100])), narrow, fmtKulisch, true},
		{"kulisch_where_f64_holds_all", frame(219, trKulischGroup(280, narrow[219:259])), narrow, fmtKulisch, true},
		{"scaled_with_an_inexact_value_within_181", frame(0, scaled(narrow[:100])), wide, fmtKulisch, false},
		{"scaled_past_the_inexact_value", frame(151, scaled(narrow[151:251])), wide, fmtKulisch, true},
		{"f64_with_a_second_group", frame(0, trF64Group(narrow[:100]), scaled(narrow[100:120])), narrow, fmtKulisch, true},
		{"auto_f64_where_fp32_holds_all", frame(0, trF64Group(fp32[:181])), fp32, fmtAuto, true},
		{"kulisch_policy_f64_where_fp32_holds_all", frame(0, trF64Group(fp32[:181])), fp32, fmtKulisch, false},
		{"auto_fp32_frame", frame(0, fp32Group([]float32{0.25, 1.25})), fp32, fmtAuto, false},
		{"auto_f64_frame", frame(0, trF64Group(narrow[:181])), narrow, fmtAuto, false},
	} {
		if msg := trCheckChoice(c.d, c.want, c.partial); (msg != "") != c.flagged {
			t.Errorf("%s: %q, want flagged %v", c.name, msg, c.flagged)
		}
	}
}

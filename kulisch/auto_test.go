package kulisch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const mtu1500 = 1458

// TestAutoMTUNumbers: the worked one-group capacities at MTU 1500.
func TestAutoMTUNumbers(t *testing.T) {
	if BodyBudget(1500, 0) != mtu1500 {
		t.Fatalf("BodyBudget(1500) = %d", BodyBudget(1500, 0))
	}
	only := func(f Format) FormatSet { return SetOf(f, KULISCH) }
	for _, c := range []struct {
		set  FormatSet
		base Format
		w    int
		want int
		f    Format
	}{
		{SetOf(INT8, FP16, BF16, FP32, KULISCH), KULISCH, 288, 1452, INT8},
		{only(FP16) | SetOf(FP32), KULISCH, 288, 726, FP16},
		{only(BF16) | SetOf(FP32), KULISCH, 288, 726, BF16},
		{only(FP32), KULISCH, 288, 363, FP32},
		{SetOf(FP32), FP32, 0, 363, FP32},
		{SetOf(KULISCH), KULISCH, 280, 40, KULISCH},
		{SetOf(KULISCH), KULISCH, 4096, 2, KULISCH},
	} {
		sets := make([]FormatSet, 5000)
		for i := range sets {
			sets[i] = c.set
		}
		dst := make([]Group, 0, MaxGroups)
		gs, n, err := PlanAuto(dst, sets, c.base, c.w, mtu1500)
		if err != nil || n != c.want || len(gs) != 1 || gs[0] != (Group{c.f, c.want}) {
			t.Errorf("%v W=%d: %v %d %v, want one %v group of %d", c.f, c.w, gs, n, err, c.f, c.want)
		}
		if MaxCount(c.f, c.w, mtu1500) != c.want {
			t.Errorf("MaxCount(%v) = %d", c.f, MaxCount(c.f, c.w, mtu1500))
		}
	}
	if MaxCount(INT8, 0, BodyBudget(576, 0)) != 528 {
		t.Errorf("INT8 at MTU 576: %d", MaxCount(INT8, 0, BodyBudget(576, 0)))
	}
}

// TestAutoCoalesce: hand-computed plans.
func TestAutoCoalesce(t *testing.T) {
	h := SetOf(FP16, FP32, KULISCH) // FP16 only among the narrow ones
	b := SetOf(BF16, FP32, KULISCH) // BF16 only
	s := SetOf(FP32, KULISCH)       // FP32
	i8 := SetOf(INT8, FP16, BF16, FP32, KULISCH)
	k := SetOf(KULISCH)
	for _, c := range []struct {
		sets []FormatSet
		want []Group
	}{
		// Separately 8+8+8 bytes, as one FP32 group 4+12.
		{[]FormatSet{h, s, h}, []Group{{FP32, 3}}},
		// FP16 and BF16 are incomparable: a common format is FP32.
		{[]FormatSet{h, b, h, b}, []Group{{FP32, 4}}},
		// Long runs keep their own narrow group.
		{slices.Repeat([]FormatSet{i8}, 20), []Group{{INT8, 20}}},
		{append(slices.Repeat([]FormatSet{i8}, 16), slices.Repeat([]FormatSet{h}, 16)...), []Group{{INT8, 16}, {FP16, 16}}},
		// One Kulisch-only value between FP32 runs.
		{[]FormatSet{s, s, k, s, s}, []Group{{FP32, 2}, {KULISCH, 1}, {FP32, 2}}},
	} {
		gs, n, err := PlanAuto(make([]Group, 0, 16), c.sets, KULISCH, 288, mtu1500)
		if err != nil || n != len(c.sets) || !slices.Equal(gs, c.want) {
			t.Errorf("%08b: got %v %d %v want %v", c.sets, gs, n, err, c.want)
		}
	}
	if _, _, err := PlanAuto(make([]Group, 0, 4), []FormatSet{SetOf(FP32)}, KULISCH, 288, mtu1500); err == nil {
		t.Error("base not in set accepted")
	}
	if _, _, err := PlanAuto(make([]Group, 0, 4), []FormatSet{k}, KULISCH, 288, 30); err == nil {
		t.Error("budget below one value accepted")
	}
}

// randomValue builds a sum whose lossless set varies widely.
func randomValue(r *rand.Rand, a *Accumulator) {
	switch r.IntN(9) {
	case 0:
		a.AddINT8(int8(r.Uint32()))
	case 1:
		a.AddFP16(uint16(r.Uint32()))
	case 2:
		a.AddBF16(uint16(r.Uint32()))
	case 3:
		a.AddFP32(r.Uint32())
	case 4: // needs more than FP32
		a.AddFP32(uint32(100+r.IntN(50))<<23 | r.Uint32()&0x7FFFFF)
		a.AddFP32(1)
	case 5:
		a.AddFP32(0x80000000)
	case 6: // runs: a value repeated later via the same seed pattern
		a.AddINT8(int8(r.IntN(3)))
	case 7:
		a.AddFP16(uint16(0x3C00 + r.IntN(4)))
	default:
		a.AddBF16(uint16(0x3F80 + r.IntN(4)))
	}
}

// TestAutoRandom: AUTO is lossless bit for bit for every state,
// deterministic, never uses more packets than the base format and never
// more bytes for a run that fits one base packet.
func TestAutoRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	trials := 300
	if soak() {
		trials = 10000
	}
	for trial := 0; trial < trials; trial++ {
		w := []int{64, 280, 288, 512, 4096}[r.IntN(5)]
		n := 1 + r.IntN(1500)
		if r.IntN(4) == 0 {
			n = 1 + r.IntN(20)
		}
		budget := []int{mtu1500, BodyBudget(576, 0), BodyBudget(9000, 0), 64 + r.IntN(200)}[r.IntN(4)]
		v, _ := NewVector(n, w)
		run := r.IntN(3) // correlate neighbours so that groups form
		var seed uint64
		for i := 0; i < n; i++ {
			if run == 0 || r.IntN(8) == 0 {
				seed = r.Uint64()
			}
			a, _ := NewAccumulator(w)
			randomValue(rand.New(rand.NewPCG(seed, 0)), a)
			if a.Overflow() {
				a.Reset()
				a.AddINT8(1)
			}
			wire, _ := a.AppendWire(nil)
			v.MergeKulisch(i, wire)
		}
		sets := make([]FormatSet, n)
		if err := AutoSets(v, 0, sets); err != nil {
			t.Fatal(err)
		}
		dec, _ := NewVector(n, w)
		dst := make([]Group, 0, MaxGroups)
		if MaxCount(KULISCH, w, budget) == 0 {
			continue
		}
		pos, packets := 0, 0
		for pos < n {
			gs, used, err := PlanAuto(dst, sets[pos:], KULISCH, w, budget)
			if err != nil {
				t.Fatalf("W=%d budget=%d pos=%d: %v", w, budget, pos, err)
			}
			gs2, used2, _ := PlanAuto(make([]Group, 0, MaxGroups), sets[pos:], KULISCH, w, budget)
			if used2 != used || !slices.Equal(gs, gs2) {
				t.Fatal("not deterministic")
			}
			body, cnt := 0, 0
			for _, g := range gs {
				if g.Count < 1 || g.Count > MaxGroupCount || !g.Format.Concrete() {
					t.Fatalf("bad group %v", g)
				}
				body += GroupBytes(g.Format, g.Count, w)
				buf := make([]byte, g.Count*g.Format.Width(w))
				if _, err := v.PutValues(buf, pos+cnt, g.Count, g.Format); err != nil {
					t.Fatal(err)
				}
				if err := dec.Add(pos+cnt, g.Format, buf); err != nil {
					t.Fatal(err)
				}
				cnt += g.Count
			}
			if cnt != used || body > budget || len(gs) > MaxGroups {
				t.Fatalf("groups %v cover %d of %d, body %d > %d", gs, cnt, used, body, budget)
			}
			nb := min(MaxCount(KULISCH, w, budget), n-pos)
			if used < nb {
				t.Fatalf("AUTO carried %d < base %d", used, nb)
			}
			if used == n-pos && nb == n-pos && body > GroupBytes(KULISCH, nb, w) {
				t.Fatalf("AUTO %d bytes > base %d", body, GroupBytes(KULISCH, nb, w))
			}
			pos += used
			packets++
		}
		basePackets := (n + MaxCount(KULISCH, w, budget) - 1) / MaxCount(KULISCH, w, budget)
		if packets > basePackets {
			t.Fatalf("AUTO %d packets > base %d", packets, basePackets)
		}
		for i := 0; i < n; i++ {
			a := make([]byte, WireSize(w))
			b := make([]byte, WireSize(w))
			v.PutWire(a, i)
			dec.PutWire(b, i)
			if !bytes.Equal(a, b) {
				t.Fatalf("element %d lossy: %x -> %x (set %08b)", i, a, b, sets[i])
			}
		}
	}
}

// TestAutoArrival: AUTO re-encodes FP32_ARRIVAL states losslessly.
func TestAutoArrival(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	n := 3000
	v, _ := NewArrivalVector(n)
	var buf []byte
	for i := 0; i < n; i++ {
		var x uint32
		switch r.IntN(5) {
		case 0:
			x = INT8ToFP32(int8(r.Uint32()))
		case 1:
			x = FP16ToFP32(uint16(r.Uint32()))
		case 2:
			x = r.Uint32() &^ 0xFFFF
		case 3:
			x = 0x80000000
		default:
			x = r.Uint32()
		}
		buf = binary.LittleEndian.AppendUint32(buf, x)
	}
	v.AddFP32LE(0, buf)
	sets := make([]FormatSet, n)
	AutoSets(v, 0, sets)
	dec, _ := NewArrivalVector(n)
	dst := make([]Group, 0, MaxGroups)
	for pos := 0; pos < n; {
		gs, used, err := PlanAuto(dst, sets[pos:], FP32, 0, mtu1500)
		if err != nil {
			t.Fatal(err)
		}
		if used < min(363, n-pos) {
			t.Fatalf("carried %d", used)
		}
		at := pos
		for _, g := range gs {
			if g.Format == KULISCH {
				t.Fatal("KULISCH under FP32_ARRIVAL")
			}
			out := make([]byte, g.Count*g.Format.Width(0))
			if _, err := v.PutValues(out, at, g.Count, g.Format); err != nil {
				t.Fatal(err)
			}
			dec.Add(at, g.Format, out)
			at += g.Count
		}
		pos += used
	}
	for i := 0; i < n; i++ {
		a, _ := v.RoundFP32(i)
		b, _ := dec.RoundFP32(i)
		if a != b {
			t.Fatalf("element %d: %#x -> %#x", i, a, b)
		}
	}
}

func TestTuple(t *testing.T) {
	ok := []struct {
		t Tuple
		w int
	}{
		{Tuple{FP32, FP32Arrival, FP32, FP32}, 0},
		{Tuple{INT8, FP32Arrival, AUTO, AUTO}, 0},
		{Tuple{FP32, KulischFixed, KULISCH, FP32}, 288},
		{Tuple{BF16, KulischFixed, AUTO, KULISCH}, 4096},
		{Tuple{FP16, KulischFixed, AUTO, INT8}, 64},
	}
	for _, c := range ok {
		if err := c.t.ValidateWidth(c.w); err != nil {
			t.Errorf("%+v W=%d: %v", c.t, c.w, err)
		}
	}
	bad := []struct {
		t Tuple
		w int
	}{
		{Tuple{KULISCH, KulischFixed, KULISCH, FP32}, 288},
		{Tuple{0, KulischFixed, KULISCH, FP32}, 288},
		{Tuple{FP32, 0x02, FP32, FP32}, 0},
		{Tuple{FP32, 0, FP32, FP32}, 0},
		{Tuple{FP32, FP32Arrival, KULISCH, FP32}, 0},
		{Tuple{FP32, FP32Arrival, FP16, FP32}, 0},
		{Tuple{FP32, FP32Arrival, FP32, FP16}, 0},
		{Tuple{FP32, FP32Arrival, FP32, FP32}, 288},
		{Tuple{FP32, KulischFixed, FP32, FP32}, 288},
		{Tuple{FP32, KulischFixed, KULISCH, 7}, 288},
		{Tuple{FP32, KulischFixed, KULISCH, FP32}, 0},
		{Tuple{FP32, KulischFixed, KULISCH, FP32}, 290},
		{Tuple{FP32, KulischFixed, KULISCH, FP32}, 4104},
	}
	for _, c := range bad {
		if err := c.t.ValidateWidth(c.w); err == nil {
			t.Errorf("%+v W=%d accepted", c.t, c.w)
		}
	}
	if err := (Tuple{FP32, KulischFixed, AUTO, FP32}).ValidateStage(280, 5); err == nil {
		t.Error("W=280 for 5 terms accepted")
	}
	if err := (Tuple{INT8, KulischFixed, AUTO, FP32}).ValidateStage(160, 1); err != nil {
		t.Error(err)
	}
	for p := 0; p < 256; p++ {
		if Policy(p).Valid() != (p == 1 || p == 3) {
			t.Errorf("policy %#x", p)
		}
	}
}

// TestPlanAutoChecksBase: a value whose set lacks the base format (which
// AutoSet never produces: the check is defensive) fails the plan that
// could carry it or look at it, naming its position, and only that plan:
// a value a frame's plan cannot reach is the next plan's business.
func TestPlanAutoChecksBase(t *testing.T) {
	const budget = 1450 // MTU 1500: 361 FP32 values
	sets := make([]FormatSet, 2000)
	for i := range sets {
		sets[i] = SetOf(FP32, KULISCH)
	}
	dst := make([]Group, 0, MaxGroups)
	_, used, err := PlanAuto(dst, sets, KULISCH, 288, budget)
	if err != nil || used != 361 {
		t.Fatalf("clean plan: %d values, %v; want 361", used, err)
	}
	for _, c := range []struct {
		bad  int
		fail bool
	}{{0, true}, {100, true}, {360, true}, {361 + Lookahead - 1, true}, {361 + Lookahead, false}, {1999, false}} {
		s := append([]FormatSet(nil), sets...)
		s[c.bad] = SetOf(FP16, BF16) // neither KULISCH nor FP32
		_, used, err := PlanAuto(dst, s, KULISCH, 288, budget)
		switch {
		case c.fail && (!errors.Is(err, ErrNotLossless) || !strings.Contains(err.Error(), fmt.Sprintf("position %d ", c.bad))):
			t.Errorf("bad set at %d: %v (%d values), want ErrNotLossless naming position %d", c.bad, err, used, c.bad)
		case !c.fail && (err != nil || used != 361):
			t.Errorf("bad set at %d, out of the plan's reach: %v (%d values), want the clean plan", c.bad, err, used)
		}
	}
}

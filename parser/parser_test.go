package parser

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

func TestRoomMatchesSpec(t *testing.T) {
	// The worked numbers of the source text (docs/protocol.md section 6).
	cases := []struct {
		mtu    int
		f      Format
		kbytes int
		want   int
	}{
		{1500, FormatINT8, 0, 1452}, {1500, FormatFP16, 0, 726}, {1500, FormatBF16, 0, 726}, {1500, FormatFP32, 0, 363},
		{1500, FormatKulisch, 35, 40}, {1500, FormatKulisch, 512, 2}, {576, FormatINT8, 0, 528}, {9000, FormatINT8, 0, 8952},
		{1500, FormatKulischF64, 0, 181},
	}
	buf := make([]byte, 10000)
	for _, c := range cases {
		var b DataBuilder
		h := DataFields{Class: ClassData, Op: exOp}
		if err := b.Reset(buf, &h, nil, c.mtu); err != nil {
			t.Fatal(err)
		}
		if got := b.Room(c.f, c.kbytes); got != c.want {
			t.Errorf("mtu %d %v/%d: room %d, want %d", c.mtu, c.f, c.kbytes, got, c.want)
		}
		if c.f == FormatINT8 && c.want != MaxPacketElements(c.mtu) {
			t.Errorf("MaxPacketElements(%d) = %d", c.mtu, MaxPacketElements(c.mtu))
		}
		if _, err := b.AddGroup(c.f, c.kbytes, c.want); err != nil {
			t.Fatal(err)
		}
		if b.Room(c.f, c.kbytes) != 0 {
			t.Errorf("room after a full group: %d", b.Room(c.f, c.kbytes))
		}
		f := b.Finish()
		if len(f)-EthLen > c.mtu {
			t.Errorf("frame %d over mtu %d", len(f)-EthLen, c.mtu)
		}
	}
}

func TestBuilderFillsAndDecodes(t *testing.T) {
	// Fill a 1500-MTU frame with alternating formats until nothing fits, then
	// decode it and compare every group (naive oracle: the list we added).
	buf := make([]byte, 2000)
	for i := range buf {
		buf[i] = 0xAA // stale bytes must not leak into padding
	}
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassResult, Op: exOp, First: 100, Stream: 2}
	if err := b.Reset(buf, &h, &Ext{Encoding: EncList, Set: AppendListSet(nil, 3)}, 1500); err != nil {
		t.Fatal(err)
	}
	type add struct {
		f Format
		k int
		n int
	}
	var added []add
	fs := []add{{FormatINT8, 0, 3}, {FormatKulisch, 35, 2}, {FormatFP16, 0, 5}, {FormatFP32, 0, 7}}
	for i := 0; ; i++ {
		a := fs[i%len(fs)]
		if r := b.Room(a.f, a.k); r < a.n {
			if r == 0 {
				break
			}
			a.n = r
		}
		slot, err := b.AddGroup(a.f, a.k, a.n)
		if err != nil {
			t.Fatal(err)
		}
		for j := range slot {
			slot[j] = byte(i + j)
		}
		if a.f == FormatKulisch {
			for j := 0; j < len(slot); j += 36 {
				slot[j] = KulischFinite
			}
		}
		added = append(added, a)
	}
	f := b.Finish()
	var d Data
	if err := d.Decode(f, Limits{MTU: 1500, KulischBytes: 35}); err != nil {
		t.Fatal(err)
	}
	if int(d.Groups) != len(added) {
		t.Fatalf("groups %d, added %d", d.Groups, len(added))
	}
	var it GroupIter
	pos := uint32(100)
	for i, a := range added {
		g, ok := d.NextGroup(&it)
		if !ok || g.Format != a.f || int(g.Count) != a.n || g.First != pos || len(g.Values) != a.n*a.f.Width(a.k) {
			t.Fatalf("group %d: %+v, want %+v at %d", i, g, a, pos)
		}
		pos += uint32(a.n)
	}
	if d.Count != uint16(pos-100) {
		t.Fatalf("count %d", d.Count)
	}
}

func TestBuilderErrors(t *testing.T) {
	var b DataBuilder
	h := DataFields{Class: ClassData}
	if err := b.Reset(make([]byte, 40), &h, nil, 0); !errors.Is(err, ErrMTU) {
		t.Fatalf("short buffer: %v", err)
	}
	h.Class = ClassControl
	if err := b.Reset(make([]byte, 100), &h, nil, 0); !errors.Is(err, ErrClass) {
		t.Fatalf("class: %v", err)
	}
	h.Class = ClassData
	b.Reset(make([]byte, 100), &h, nil, 0)
	if _, err := b.AddGroup(FormatAuto, 0, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("auto: %v", err)
	}
	if _, err := b.AddGroup(FormatKulisch, 7, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("kulisch 7: %v", err)
	}
	if _, err := b.AddGroup(FormatINT8, 0, 0); !errors.Is(err, ErrCount) {
		t.Fatalf("count 0: %v", err)
	}
	if _, err := b.AddGroup(FormatFP32, 0, 11); !errors.Is(err, ErrMTU) {
		t.Fatalf("too many: %v", err)
	}
	if _, err := b.AddGroup(FormatFP32, 0, 10); err != nil {
		t.Fatalf("exactly full: %v", err)
	}
}

func TestEncodeDecodeIdentity(t *testing.T) {
	for _, e := range examples(t) {
		out := make([]byte, len(e.Frame))
		var n int
		var err error
		switch c, _ := Classify(e.Frame); c {
		case ClassControl:
			var x Control
			if err = x.Decode(e.Frame, e.Limits); err == nil {
				n, err = x.Encode(out, exEth)
			}
		case ClassData, ClassResult:
			var x Data
			if err = x.Decode(e.Frame, e.Limits); err == nil {
				n, err = x.Encode(out, exEth)
			}
		case ClassProgress:
			var x Progress
			if err = x.Decode(e.Frame, e.Limits); err == nil {
				n, err = x.Encode(out, exEth)
			}
		}
		if err != nil || !bytes.Equal(out[:n], e.Frame) {
			t.Errorf("%s: %v\n got % x\nwant % x", e.Marker, err, out[:n], e.Frame)
		}
	}
}

func TestNoStaleState(t *testing.T) {
	// A value decoded from a rich frame and then from a poor one must equal a
	// fresh decode of the poor one (the gopacket Geneve lesson).
	rich := exampleFrame(t, "result-install-list")
	poor := exampleFrame(t, "data-inexact")
	var d, fresh Data
	if err := d.Decode(rich, exLim); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(poor, exLim); err != nil {
		t.Fatal(err)
	}
	fresh.Decode(poor, exLim)
	if !reflect.DeepEqual(d, fresh) || d.Ext.Set != nil || len(d.Body) != 0 {
		t.Fatalf("stale: %+v", d)
	}
	var g Progress
	g.Decode(exampleFrame(t, "progress-holes"), exLim)
	pf := exampleFrame(t, "progress-holes")
	put16(pf, HdrOff+prgHoles, 0)
	if err := g.Decode(pf[:ProgressHoleOff], exLim); err != nil || g.NHoles != 0 || g.Holes[0] != (Hole{}) {
		t.Fatalf("stale holes: %v %+v", err, g)
	}
	// A failed decode leaves a zero value, not half of the frame.
	bad := exampleFrame(t, "data-fp32")
	bad[DataBodyOff] = 0
	bad[DataBodyOff+1] = 0
	if err := d.Decode(bad, exLim); err == nil || d.Op != (OpKey{}) {
		t.Fatalf("failed decode left %+v", d)
	}
}

func TestPeekAndShard(t *testing.T) {
	f := exampleFrame(t, "data-fp32")
	k, ok := PeekOpKey(f[EthLen:])
	if !ok || k != exOp {
		t.Fatalf("peek %+v", k)
	}
	if _, ok := PeekOpKey(f[EthLen : EthLen+19]); ok {
		t.Fatal("short peek")
	}
	h := ShardHash(f)
	g := append([]byte(nil), f...)
	put32(g, HdrOff+opOpGen, 99) // new generation: same shard
	put16(g, HdrOff+opGroupGen, 98)
	if ShardHash(g) != h {
		t.Fatal("generation changed the shard")
	}
	put16(g, HdrOff+opOp, 8)
	if ShardHash(g) == h {
		t.Fatal("operation ID did not change the hash")
	}
	if ShardHash(f[:HdrOff+17]) != 0 {
		t.Fatal("short frame hash")
	}
	// Sequential operation IDs spread over 4 shards.
	var n [4]int
	for op := 0; op < 4000; op++ {
		put16(g, HdrOff+opOp, uint16(op))
		n[ShardHash(g)%4]++
	}
	for i, c := range n {
		if c < 800 || c > 1200 {
			t.Fatalf("shard %d got %d of 4000", i, c)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, e := range examples(t) {
		c, err := Classify(e.Frame)
		if err != nil || c != Class(e.Frame[CWOff+1]) {
			t.Fatalf("%s: %v %v", e.Marker, c, err)
		}
	}
	if _, err := Classify(make([]byte, 15)); !errors.Is(err, ErrTruncated) {
		t.Fatal(err)
	}
	for _, s := range []string{ClassControl.String(), FormatKulisch.String(), CmdCapsResponse.String(), StatusInvalidBinding.String(), Class(9).String()} {
		if s == "" {
			t.Fatal("empty String")
		}
	}
}

func TestAuth(t *testing.T) {
	f := exampleFrame(t, "data-hier-ext")
	a := NewAuthenticator([]byte("prism-example-key"))
	if err := a.Verify(f); err != nil {
		t.Fatal(err)
	}
	if err := NewAuthenticator([]byte("other")).Verify(f); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong key: %v", err)
	}
	g := append([]byte(nil), f...)
	g[HdrOff+opJob+7] ^= 1
	if err := a.Verify(g); !errors.Is(err, ErrAuth) {
		t.Fatalf("tampered header: %v", err)
	}
	g = append(append([]byte(nil), f...), 0xEE, 0xEE) // Ethernet padding is not covered
	if err := a.Verify(g); err != nil {
		t.Fatalf("padding: %v", err)
	}
	if err := a.Verify(exampleFrame(t, "data-flat-ext")); !errors.Is(err, ErrAuth) {
		t.Fatalf("untagged frame: %v", err)
	}
	if n := alloctest.PerRun(100, func() { a.Verify(f) }); n != 0 {
		t.Fatalf("Verify allocates %v", n)
	}
}

func TestZeroAllocs(t *testing.T) {
	ex := examples(t)
	buf := make([]byte, 2000)
	var d Data
	var c Control
	var g Progress
	for _, e := range ex {
		e := e
		n := alloctest.PerRun(200, func() {
			switch cl, _ := Classify(e.Frame); cl {
			case ClassControl:
				if c.Decode(e.Frame, e.Limits) != nil {
					panic("decode")
				}
				c.Encode(buf, exEth)
				if c.Cmd == CmdStage {
					s := c.Stage()
					_ = s.Binding(0)
					var it SetRecordIter
					s.NextSet(&it)
				}
				_ = c.CapsPage()
			case ClassData, ClassResult:
				if d.Decode(e.Frame, e.Limits) != nil {
					panic("decode")
				}
				var it GroupIter
				for _, ok := d.NextGroup(&it); ok; _, ok = d.NextGroup(&it) {
				}
				if d.Flags&FlagExt != 0 {
					var si SetIter
					for _, ok := d.Ext.NextEndpoint(&si); ok; _, ok = d.Ext.NextEndpoint(&si) {
					}
				}
				d.Encode(buf, exEth)
			case ClassProgress:
				if g.Decode(e.Frame, e.Limits) != nil {
					panic("decode")
				}
				g.Encode(buf, exEth)
			}
			_ = ShardHash(e.Frame)
		})
		if n != 0 {
			t.Errorf("%s: %v allocs", e.Marker, n)
		}
	}
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp}
	ext := Ext{Encoding: EncList, Set: AppendListSet(nil, 1, 2)}
	n := alloctest.PerRun(200, func() {
		b.Reset(buf, &h, &ext, 1500)
		slot, _ := b.AddGroup(FormatFP32, 0, b.Room(FormatFP32, 0)/2)
		slot[0] = 1
		b.AddGroup(FormatKulisch, 35, 3)
		b.Finish()
	})
	if n != 0 {
		t.Errorf("builder: %v allocs", n)
	}
	hd := DataFields{Eth: exEth, Class: ClassData, Op: exOp}
	n = alloctest.PerRun(200, func() {
		b.Reset(buf, &hd, nil, 1500)
		slot, _ := b.AddScaledGroup(4, 126, 10)
		slot[0] = KulischPosZero
		b.AddGroup(FormatKulisch, 35, 3)
		b.AddScaledGroup(9, 0, 1)
		b.Finish()
	})
	if n != 0 {
		t.Errorf("builder with scaled groups: %v allocs", n)
	}
	n = alloctest.PerRun(200, func() {
		b.Reset(buf, &hd, nil, 1500)
		slot, _ := b.AddGroup(FormatKulischF64, 0, b.Room(FormatKulischF64, 0))
		slot[7] = 0x3F
		b.Finish()
	})
	if n != 0 {
		t.Errorf("builder with a KULISCH_F64 group: %v allocs", n)
	}
}

// TestBuilderF64: AddGroup builds KULISCH_F64 groups exactly where
// KULISCH_SCALED ones are legal (DATA without EXT), with a Format Word of
// code 8 and bits 11..0 zero, 8 bytes per value and no Scale Word; the
// decoder returns the values it was given, between groups of other formats.
func TestBuilderF64(t *testing.T) {
	buf := make([]byte, 2000)
	for i := range buf {
		buf[i] = 0xAA // stale bytes must not leak into the frame
	}
	vals := []float64{1, -1.5 * math.Ldexp(1, -148), 0, math.Ldexp(1, -149), math.Inf(-1), math.Ldexp(-12345, -60)}
	want := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(want[8*i:], math.Float64bits(v))
	}
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp, First: 40}
	if err := b.Reset(buf, &h, nil, 1500); err != nil {
		t.Fatal(err)
	}
	fp, _ := b.AddGroup(FormatFP32, 0, 1)
	copy(fp, []byte{0, 0, 0x80, 0x3F})
	// kbytes has no meaning for KULISCH_F64: the builder writes bits 11..0 zero.
	slot, err := b.AddGroup(FormatKulischF64, 3, len(vals))
	if err != nil {
		t.Fatal(err)
	}
	if len(slot) != 8*len(vals) {
		t.Fatalf("slot of %d bytes for %d values", len(slot), len(vals))
	}
	copy(slot, want)
	sc, _ := b.AddScaledGroup(1, 0, 1)
	copy(sc, []byte{KulischFinite, 1})
	f := b.Finish()
	desc := DataBodyOff + 4 + 4
	if !bytes.Equal(f[desc:desc+4], []byte{0, byte(len(vals)), 0x80, 0}) {
		t.Fatalf("descriptor % x", f[desc:desc+4])
	}
	if !bytes.Equal(f[desc+4:desc+4+len(want)], want) {
		t.Fatalf("values % x", f[desc+4:desc+4+len(want)])
	}
	if GroupLen(FormatKulischF64, 0, len(vals)) != 4+8*len(vals) || GroupLen(FormatKulischF64, 0, 5) != 44 {
		t.Fatalf("GroupLen %d", GroupLen(FormatKulischF64, 0, len(vals)))
	}
	var d Data
	if err := d.Decode(f, exLim); err != nil {
		t.Fatal(err)
	}
	// FP32 x1: 4 + 4; KULISCH_F64: 4 + 8 per value; B = 1: 4 + Scale Word 4 + 2 + 2 padding.
	if int(d.BodyLen) != 8+4+8*len(vals)+12 || d.Count != uint16(1+len(vals)+1) {
		t.Fatalf("body %d count %d", d.BodyLen, d.Count)
	}
	var it GroupIter
	d.NextGroup(&it)
	g, ok := d.NextGroup(&it)
	if !ok || !reflect.DeepEqual(g, Group{Format: FormatKulischF64, Count: uint16(len(vals)), First: 41, Values: want}) {
		t.Fatalf("group %+v", g)
	}
	if g, ok := d.NextGroup(&it); !ok || g.Format != FormatKulischScaled || g.First != 41+uint32(len(vals)) {
		t.Fatalf("group after the KULISCH_F64 one: %+v", g)
	}

	// Where KULISCH_SCALED is illegal so is KULISCH_F64, and the error names
	// the format; a code past 8 is unknown.
	hr := DataFields{Eth: exEth, Class: ClassResult, Op: exOp}
	b.Reset(buf, &hr, nil, 1500)
	if _, err := b.AddGroup(FormatKulischF64, 0, 1); !errors.Is(err, ErrFormat) || err.(*FieldError).Field != "group.format" {
		t.Fatalf("KULISCH_F64 group in RESULT: %v", err)
	}
	b.Reset(buf, &h, &Ext{Encoding: EncList, Set: AppendListSet(nil, 1)}, 1500)
	if _, err := b.AddGroup(FormatKulischF64, 0, 1); !errors.Is(err, ErrFormat) || err.(*FieldError).Field != "group.format" {
		t.Fatalf("KULISCH_F64 group with EXT: %v", err)
	}
	b.Reset(buf, &h, nil, 1500)
	if _, err := b.AddGroup(FormatKulischF64+1, 0, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("format 9: %v", err)
	}
	if _, err := b.AddGroup(FormatKulischF64, 0, 182); !errors.Is(err, ErrMTU) {
		t.Fatalf("182 KULISCH_F64 values at MTU 1500: %v", err)
	}
}

// TestF64Oracle checks the KULISCH_F64 value rules against math/big: a
// value is legal when it is ±0, ±inf or the one NaN pattern, or when it is
// finite, times 2^149 an integer, and (W known) of magnitude below
// 2^(W-150). Inputs are random bit patterns, biased to the exponents where
// the rules change (2^-149 and 2^(W-150)) and to fractions with many
// trailing zeros.
func TestF64Oracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 149))
	oracle := func(x uint64, kbytes int) bool {
		v := math.Float64frombits(x)
		switch {
		case math.IsNaN(v):
			return x == 0x7FF8000000000000
		case math.IsInf(v, 0) || v == 0:
			return true
		}
		bf := new(big.Float).SetPrec(0).SetFloat64(v) // exact, subnormals included
		units := new(big.Float).SetMantExp(bf, 149)
		if !units.IsInt() {
			return false
		}
		if kbytes == 0 {
			return true
		}
		lim := new(big.Float).SetMantExp(big.NewFloat(1), 8*kbytes-150)
		return new(big.Float).Abs(bf).Cmp(lim) < 0
	}
	buf := make([]byte, 200)
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp}
	var d Data
	counts := map[bool]int{}
	for i := 0; i < 200000; i++ {
		var x uint64
		switch i % 4 {
		case 0: // anything
			x = rng.Uint64()
		case 1: // near 2^-149: exponents 850..900, fraction with k trailing zeros
			x = uint64(850+rng.IntN(51))<<52 | rng.Uint64()>>12&^(1<<rng.IntN(53)-1)
		case 2: // near the top of W: exponents 900..2046
			x = uint64(900+rng.IntN(1147))<<52 | rng.Uint64()>>12&^(1<<rng.IntN(53)-1)
		case 3: // E = 0 or 2047, a few fraction patterns
			x = uint64(rng.IntN(2)*0x7FF)<<52 | []uint64{0, 1, 1 << 51, rng.Uint64() >> 12}[rng.IntN(4)]
		}
		x |= uint64(rng.IntN(2)) << 63
		for _, kb := range []int{0, 8, 35, 100, MaxKulischBytes} {
			b.Reset(buf, &h, nil, 0)
			slot, _ := b.AddGroup(FormatKulischF64, 0, 1)
			binary.LittleEndian.PutUint64(slot, x)
			err := d.Decode(b.Finish(), Limits{KulischBytes: kb})
			want := oracle(x, kb)
			counts[want]++
			if want != (err == nil) {
				t.Fatalf("%#016x (%v) under W %d: decoder says %v, oracle %v", x, math.Float64frombits(x), 8*kb, err, want)
			}
			if err != nil {
				if fe := err.(*FieldError); fe.Field != "group.f64_value" || fe.Offset != DataBodyOff+4 || !errors.Is(err, ErrRange) {
					t.Fatalf("%#016x: %+v", x, fe)
				}
			}
		}
	}
	if counts[true] < 100000 || counts[false] < 100000 {
		t.Fatalf("unbalanced inputs: %v", counts)
	}
}

// TestBuilderScaled: Room and AddScaledGroup account for the Scale Word and
// padding (worked numbers: at MTU 1500 one group of B = 1 holds 724 values,
// B = 4 holds 289), the Scale Word is written big-endian, and the decoder
// returns the same groups; RESULT and EXT frames refuse the format.
func TestBuilderScaled(t *testing.T) {
	buf := make([]byte, 2000)
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp, First: 7}
	for _, c := range []struct{ bytes, want int }{{1, 724}, {4, 289}, {35, 40}, {512, 2}} {
		if err := b.Reset(buf, &h, nil, 1500); err != nil {
			t.Fatal(err)
		}
		if got := b.Room(FormatKulischScaled, c.bytes); got != c.want {
			t.Errorf("B=%d: room %d, want %d", c.bytes, got, c.want)
		}
		if _, err := b.AddScaledGroup(c.bytes, 0, c.want); err != nil {
			t.Fatalf("B=%d: %v", c.bytes, err)
		}
		if b.Room(FormatKulischScaled, c.bytes) != 0 || len(b.Finish())-EthLen > 1500 {
			t.Errorf("B=%d: room left %d, frame %d", c.bytes, b.Room(FormatKulischScaled, c.bytes), len(b.Finish())-EthLen)
		}
	}
	b.Reset(buf, &h, nil, 1500)
	s1, err := b.AddScaledGroup(3, 0x0102, 2)
	if err != nil {
		t.Fatal(err)
	}
	copy(s1, []byte{KulischFinite, 1, 2, 3, KulischNaN, 0, 0, 0})
	k, _ := b.AddGroup(FormatKulisch, 35, 1)
	k[0] = KulischPosInf
	s2, _ := b.AddScaledGroup(1, 4088, 1)
	copy(s2, []byte{KulischFinite, 0x80})
	f := b.Finish()
	if !bytes.Equal(f[DataBodyOff:DataBodyOff+8], []byte{0, 2, 0x70, 3, 0x01, 0x02, 0, 0}) {
		t.Fatalf("descriptor and Scale Word % x", f[DataBodyOff:DataBodyOff+8])
	}
	var d Data
	if err := d.Decode(f, Limits{}); err != nil {
		t.Fatal(err)
	}
	want := []Group{
		{Format: FormatKulischScaled, KBytes: 3, Count: 2, First: 7, Shift: 0x0102, Values: s1},
		{Format: FormatKulisch, KBytes: 35, Count: 1, First: 9, Values: k},
		{Format: FormatKulischScaled, KBytes: 1, Count: 1, First: 10, Shift: 4088, Values: s2},
	}
	var it GroupIter
	for i, w := range want {
		g, ok := d.NextGroup(&it)
		if !ok || !reflect.DeepEqual(g, w) {
			t.Fatalf("group %d: %+v, want %+v", i, g, w)
		}
	}
	if int(d.BodyLen) != GroupLen(FormatKulischScaled, 3, 2)+GroupLen(FormatKulisch, 35, 1)+GroupLen(FormatKulischScaled, 1, 1) {
		t.Fatalf("body %d", d.BodyLen)
	}
	// Limits of an operation with W = 280: Shift 4088 + 8 > 280.
	if err := d.Decode(f, Limits{KulischBytes: 35}); !errors.Is(err, ErrRange) {
		t.Fatalf("shift past W: %v", err)
	}
	if _, err := b.AddGroup(FormatKulischScaled, 4, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("AddGroup of KULISCH_SCALED: %v", err)
	}
	for _, c := range []struct{ bytes, shift int }{{0, 0}, {513, 0}, {1, -1}, {1, 4089}, {512, 1}} {
		if _, err := b.AddScaledGroup(c.bytes, c.shift, 1); err == nil {
			t.Errorf("B=%d Shift=%d accepted", c.bytes, c.shift)
		}
	}
	hr := DataFields{Eth: exEth, Class: ClassResult, Op: exOp}
	b.Reset(buf, &hr, nil, 1500)
	if _, err := b.AddScaledGroup(4, 0, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("scaled group in RESULT: %v", err)
	}
	b.Reset(buf, &h, &Ext{Encoding: EncList, Set: AppendListSet(nil, 1)}, 1500)
	if _, err := b.AddScaledGroup(4, 0, 1); !errors.Is(err, ErrFormat) {
		t.Fatalf("scaled group with EXT: %v", err)
	}
}

// fullFP32 is a full 1500-MTU DATA frame: one FP32 group of 363 values,
// 1512 bytes with the Ethernet header.
func fullFP32(tb testing.TB) []byte {
	buf := make([]byte, EthLen+1500)
	var b DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp, Stream: 1}
	if err := b.Reset(buf, &h, nil, 1500); err != nil {
		tb.Fatal(err)
	}
	slot, err := b.AddGroup(FormatFP32, 0, b.Room(FormatFP32, 0))
	if err != nil {
		tb.Fatal(err)
	}
	for i := range slot {
		slot[i] = byte(i)
	}
	return b.Finish()
}

func TestFullFrameSize(t *testing.T) {
	// 2 + 40 + 4 + 363*4 = 1498 bytes after the Ethernet header: the largest
	// one-group FP32 frame at MTU 1500 (the last 2 bytes cannot hold a value).
	if f := fullFP32(t); len(f) != EthLen+1498 {
		t.Fatalf("full FP32 frame is %d bytes", len(f))
	}
}

// benchDataGroup starts a 1500-byte DATA frame holding one group of format
// f (Kulisch width kb bytes) as large as fits: the group's slot to fill,
// and finish, which returns the frame.
func benchDataGroup(f Format, kb int) (slot []byte, finish func() []byte) {
	buf := make([]byte, EthLen+1500)
	var db DataBuilder
	h := DataFields{Eth: exEth, Class: ClassData, Op: exOp}
	db.Reset(buf, &h, nil, 1500)
	slot, _ = db.AddGroup(f, kb, db.Room(f, kb))
	return slot, db.Finish
}

// benchDecode measures Data.Decode of frame under lim.
func benchDecode(b *testing.B, frame []byte, lim Limits) {
	var d Data
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if d.Decode(frame, lim) != nil {
			b.Fatal("decode")
		}
	}
}

// BenchmarkValidate compares validating a full 1500-byte DATA frame (one FP32
// group) with copying the same bytes, in the same run.
func BenchmarkValidate(b *testing.B) {
	f := fullFP32(b)
	lim := Limits{VectorLen: 1 << 20, MTU: 1500}
	b.Run("Decode1500FP32", func(b *testing.B) { benchDecode(b, f, lim) })
	// 40 Kulisch-280 values: every state byte and integer is checked.
	b.Run("Decode1500Kulisch280", func(b *testing.B) {
		slot, finish := benchDataGroup(FormatKulisch, 35)
		for i := 0; i < len(slot); i += 36 {
			slot[i+36-1] = 0x01 // FINITE with a nonzero top byte: the scan runs to the end
		}
		benchDecode(b, finish(), Limits{VectorLen: 1 << 20, MTU: 1500, KulischBytes: 35})
	})
	// 181 KULISCH_F64 values, each a sum-like value with a full fraction:
	// every value runs the whole per-value check.
	b.Run("Decode1500F64", func(b *testing.B) {
		slot, finish := benchDataGroup(FormatKulischF64, 0)
		for i := 0; i < len(slot); i += 8 {
			binary.LittleEndian.PutUint64(slot[i:], math.Float64bits(math.Ldexp(float64(1<<52|i*7919), -70)))
		}
		benchDecode(b, finish(), Limits{VectorLen: 1 << 20, MTU: 1500, KulischBytes: 35})
	})
	b.Run("Copy1500", func(b *testing.B) {
		dst := make([]byte, len(f))
		b.SetBytes(int64(len(f)))
		b.ReportAllocs()
		for b.Loop() {
			copy(dst, f)
		}
	})
	b.Run("Build1500FP32", func(b *testing.B) {
		buf := make([]byte, len(f))
		var db DataBuilder
		h := DataFields{Eth: exEth, Class: ClassData, Op: exOp}
		b.SetBytes(int64(len(f)))
		b.ReportAllocs()
		for b.Loop() {
			db.Reset(buf, &h, nil, 1500)
			slot, _ := db.AddGroup(FormatFP32, 0, 363)
			copy(slot, f[DataBodyOff+4:])
			db.Finish()
		}
	})
}

// A rejected frame costs nothing: the *FieldError lives in the decoder value,
// so a flood of bad frames is counted (Reason) without garbage-collector
// work. reject_test.go extends this to every rule of the validation table.
func TestRejectAllocs(t *testing.T) {
	bad := exampleFrame(t, "data-mixed")
	bad[DataBodyOff+12+4] = 9 // Kulisch state 9
	var d Data
	n := alloctest.PerRun(200, func() {
		err := d.Decode(bad, exLim)
		if err == nil || Reason(err) != "out_of_range" {
			panic("accepted")
		}
	})
	if n != 0 {
		t.Fatalf("reject path: %v allocs, want 0", n)
	}
}

package kulisch

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzKulischWire: decoding arbitrary bytes as a wire value of width W never
// panics; valid values round-trip byte for byte and agree with the
// reference; invalid ones change nothing.
func FuzzKulischWire(f *testing.F) {
	f.Add(uint16(64), []byte{0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(280), append([]byte{0}, bytes.Repeat([]byte{0xFF}, 35)...))
	f.Add(uint16(64), []byte{5, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(4096), []byte{3})
	f.Fuzz(func(t *testing.T, wsel uint16, b []byte) {
		w := MinWidth + 8*int(wsel%((MaxWidth-MinWidth)/8+1))
		ws := WireSize(w)
		if len(b) > ws {
			b = b[:ws]
		}
		a, _ := NewAccumulator(w)
		err := a.MergeWire(b)
		if len(b) != ws {
			if err == nil {
				t.Fatal("short value accepted")
			}
			return
		}
		if err != nil {
			if s, _ := a.State(); s != NegZero {
				t.Fatal("rejected value changed the accumulator")
			}
			return
		}
		got, err := a.AppendWire(nil)
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("round trip %x -> %x %v", b, got, err)
		}
		// Reference: the integer as big two's complement.
		var ref refSum
		switch State(b[0]) {
		case PosZero:
			ref.nonNegZero = true
		case PosInf:
			ref.pinf = true
		case NegInf:
			ref.ninf = true
		case NaN:
			ref.nan = true
		case Finite:
			ref.nonNegZero = true
			be := make([]byte, ws-1)
			for k := range be {
				be[k] = b[ws-1-k]
			}
			ref.sum.SetBytes(be)
			if b[ws-1]&0x80 != 0 {
				ref.sum.Sub(&ref.sum, new(refSum).sum.Lsh(bigOne(), uint(w)))
			}
		}
		if g, _ := a.RoundFP32(); g != ref.fp32() {
			t.Fatalf("%x: FP32 %#x want %#x", b, g, ref.fp32())
		}
		// Merging twice doubles exactly (or overflows, reported).
		a.MergeWire(b)
		ref.merge(&ref)
		if want := ref.wire(w); want == nil {
			if !a.Overflow() {
				t.Fatal("doubling overflow not reported")
			}
		} else if got, _ := a.AppendWire(nil); !bytes.Equal(got, want) {
			t.Fatalf("double %x want %x", got, want)
		}
	})
}

// FuzzSum compares a sum of fuzzed terms with the big reference.
func FuzzSum(f *testing.F) {
	f.Add(uint16(288), []byte{4, 0, 0, 0x80, 0x3F, 2, 0, 0x3C})
	f.Add(uint16(64), []byte{1, 0x80, 1, 0x7F, 3, 0x80, 0xFF})
	f.Fuzz(func(t *testing.T, wsel uint16, b []byte) {
		w := MinWidth + 8*int(wsel%((MaxWidth-MinWidth)/8+1))
		v, _ := NewVector(1, w)
		var ref refSum
		var ts []term
		for len(b) > 0 {
			tf := Format(1 + b[0]%4)
			b = b[1:]
			wd := tf.Width(0)
			if len(b) < wd {
				break
			}
			var x uint32
			switch wd {
			case 1:
				x = uint32(b[0])
			case 2:
				x = uint32(binary.LittleEndian.Uint16(b))
			default:
				x = binary.LittleEndian.Uint32(b)
			}
			if err := v.Add(0, tf, b[:wd]); err != nil {
				t.Fatal(err)
			}
			tm := term{tf, x}
			tm.addRef(&ref)
			ts = append(ts, tm)
			b = b[wd:]
		}
		checkElement(t, v, 0, &ref, func() string { return fmtTerms(ts) })
	})
}

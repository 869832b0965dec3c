package kulisch

import (
	"bytes"
	"testing"
)

// TestWireGolden checks hand-built wire bytes: 1.0 is 2^149 units, bit 5 of
// integer byte 18 (149 = 18*8 + 5); -1.0 is its two's complement.
func TestWireGolden(t *testing.T) {
	one := make([]byte, 36)
	one[1+18] = 0x20
	minusOne := make([]byte, 36)
	minusOne[1+18] = 0xE0
	for k := 1 + 19; k < 36; k++ {
		minusOne[k] = 0xFF
	}
	tiny := []byte{0, 1, 0, 0, 0, 0, 0, 0, 0}
	minusTiny := []byte{0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
	for _, c := range []struct {
		w     int
		terms []uint32
		want  []byte
	}{
		{280, []uint32{0x3F800000}, one},
		{280, []uint32{0xBF800000}, minusOne},
		{280, []uint32{0x3F000000, 0x3F000000}, one},
		{64, []uint32{1}, tiny},
		{64, []uint32{0x80000001}, minusTiny},
		{64, []uint32{0x80000000}, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}},
		{64, []uint32{0x80000000, 0}, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}},
		{64, []uint32{1, 0x80000001}, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}},
		{64, []uint32{0x7F800000}, []byte{3, 0, 0, 0, 0, 0, 0, 0, 0}},
		{64, []uint32{0xFF800000, 1}, []byte{4, 0, 0, 0, 0, 0, 0, 0, 0}},
		{64, []uint32{0x7FA00000}, []byte{5, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		a, _ := NewAccumulator(c.w)
		for _, x := range c.terms {
			a.AddFP32(x)
		}
		got, err := a.AppendWire(nil)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("W=%d %x: got %x %v want %x", c.w, c.terms, got, err, c.want)
		}
	}
}

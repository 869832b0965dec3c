package bitmapfwd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// fuzzCap turns a fuzzed selector into a set capacity: small and odd sizes
// reach the tail-mask edges, 65536 the large domain.
func fuzzCap(sel uint16) int {
	caps := []int{1, 8, 63, 64, 65, 100, 128, 256, 1000, 4096, 65536}
	return caps[int(sel)%len(caps)]
}

func checkDecodeErr(t *testing.T, err error, s *Set) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v is not a *DecodeError", err)
	}
	if !s.IsEmpty() {
		t.Fatal("set not empty after a decode error")
	}
}

// bitsOf is the naive reading of a MSB-first bitmap.
func bitsOf(b []byte, base int, o oracle) {
	for i := range 8 * len(b) {
		if b[i/8]&(1<<(7-i%8)) != 0 {
			o[base+i] = true
		}
	}
}

func FuzzDecodeFlat(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0x66, 0, 0, 0, 0, 0, 0, 0}, uint16(3))
	f.Add([]byte{0, 1, 0, 2, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(7))
	f.Add([]byte{0, 0, 0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, sel uint16) {
		n := fuzzCap(sel)
		s := NewSet(n)
		s.Add(0)
		err := DecodeFlat(body, s)
		if err != nil {
			checkDecodeErr(t, err, s)
			return
		}
		setID := int(binary.BigEndian.Uint16(body))
		wc := int(binary.BigEndian.Uint16(body[2:]))
		o := oracle{}
		bitsOf(body[4:], setID*wc*64, o)
		checkSet(t, "FLAT vs naive", s, o)
		again, err := AppendFlat(nil, s, setID, wc)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("re-encode: %x %v, want %x", again, err, body)
		}
		s2 := NewSet(n)
		if err := DecodeFlat(again, s2); err != nil || !s2.Equal(s) {
			t.Fatalf("decode(encode(decode)) differs: %v", err)
		}
	})
}

func FuzzDecodeHier(f *testing.F) {
	f.Add([]byte{0, 0x40, 0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x66, 0, 0, 0, 0, 0, 0, 0}, uint16(3))
	f.Add([]byte{0, 0x40, 0, 2, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(6))
	f.Add([]byte{0, 0x80, 0, 3, 0xA0, 0, 0, 0, 0, 0, 0, 0,
		1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(8))
	f.Fuzz(func(t *testing.T, body []byte, sel uint16) {
		n := fuzzCap(sel)
		s := NewSet(n)
		s.Add(0)
		err := DecodeHier(body, s)
		if err != nil {
			checkDecodeErr(t, err, s)
			return
		}
		bb := int(binary.BigEndian.Uint16(body))
		bc := int(binary.BigEndian.Uint16(body[2:]))
		up := (bc + 63) / 64 * 8
		o := oracle{}
		off := 4 + up
		for k := range bc {
			if body[4+k/8]&(1<<(7-k%8)) != 0 {
				bitsOf(body[off:off+bb/8], k*bb, o)
				off += bb / 8
			}
		}
		checkSet(t, "HIER vs naive", s, o)
		again, err := AppendHier(nil, s, bb)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if bc == (n+bb-1)/bb && !bytes.Equal(again, body) {
			t.Fatalf("canonical body re-encoded differently: %x want %x", again, body)
		}
		s2 := NewSet(n)
		if err := DecodeHier(again, s2); err != nil || !s2.Equal(s) {
			t.Fatalf("decode(encode(decode)) differs: %v", err)
		}
	})
}

func FuzzDecodeList(f *testing.F) {
	f.Add([]byte{0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 6}, uint16(3), uint8(8))
	f.Add([]byte{0, 2, 0, 0, 0, 0, 0, 5, 0, 0, 0, 5}, uint16(3), uint8(0))
	f.Add([]byte{0, 0, 0, 0}, uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, sel uint16, listCap uint8) {
		n := fuzzCap(sel)
		s := NewSet(n)
		s.Add(0)
		err := DecodeList(body, s, int(listCap))
		if err != nil {
			checkDecodeErr(t, err, s)
			return
		}
		c := int(binary.BigEndian.Uint16(body))
		if listCap != 0 && c > int(listCap) {
			t.Fatalf("count %d over cap %d accepted", c, listCap)
		}
		o := oracle{}
		for i := range c {
			o[int(binary.BigEndian.Uint32(body[4+4*i:]))] = true
		}
		if len(o) != c {
			t.Fatalf("duplicates accepted")
		}
		checkSet(t, "LIST vs naive", s, o)
		again, err := AppendList(nil, s, int(listCap))
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("re-encode: %x %v want %x", again, err, body)
		}
		s2 := NewSet(n)
		if err := DecodeList(again, s2, int(listCap)); err != nil || !s2.Equal(s) {
			t.Fatalf("decode(encode(decode)) differs: %v", err)
		}
	})
}

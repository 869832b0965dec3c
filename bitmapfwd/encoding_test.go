package bitmapfwd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.NewReplacer(" ", "", "\n", "", "\t", "").Replace(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Hand-built vectors for the Fig. 2 D-BM 01100110 (endpoints 1,2,5,6) in a
// 64-endpoint domain.
func TestEncodingVectorsFig2(t *testing.T) {
	d := NewSet(64)
	for _, e := range []int{1, 2, 5, 6} {
		d.Add(e)
	}
	flat := unhex(t, "0000 0001  66 00 00 00 00 00 00 00")
	hier := unhex(t, "0040 0001  80 00 00 00 00 00 00 00  66 00 00 00 00 00 00 00")
	list := unhex(t, "0004 0000  00000001 00000002 00000005 00000006")
	for _, c := range []struct {
		name string
		want []byte
		enc  func() ([]byte, error)
		dec  func([]byte, *Set) error
	}{
		{"FLAT", flat, func() ([]byte, error) { return AppendFlat(nil, d, 0, 1) }, DecodeFlat},
		{"HIER", hier, func() ([]byte, error) { return AppendHier(nil, d, 64) }, DecodeHier},
		{"LIST", list, func() ([]byte, error) { return AppendList(nil, d, 8) },
			func(b []byte, s *Set) error { return DecodeList(b, s, 8) }},
	} {
		got, err := c.enc()
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%s: encoded %x (%v), want %x", c.name, got, err, c.want)
		}
		back := NewSet(64)
		back.Add(40) // stale content must vanish
		if err := c.dec(c.want, back); err != nil || !back.Equal(d) {
			t.Fatalf("%s: decoded %v (%v), want %v", c.name, back, err, d)
		}
	}
}

// Set ID and BSL: endpoint = SetID*BSL + b.
func TestFlatSetIDVector(t *testing.T) {
	s := NewSet(256)
	s.Add(128 + 9) // set ID 1 of a 128-bit BSL, bit 9: byte 1, bit 6
	body := unhex(t, "0001 0002  0040000000000000 0000000000000000")
	got, err := AppendFlat(nil, s, 1, 2)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("got %x %v want %x", got, err, body)
	}
	if _, err := AppendFlat(nil, s, 0, 2); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("member outside window 0 not refused: %v", err)
	}
	back := NewSet(256)
	if err := DecodeFlat(body, back); err != nil || !back.Equal(s) {
		t.Fatalf("decode %v %v", back, err)
	}
}

func TestEncodingRoundTripsAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 63, 64, 65, 128, 256, 300, 512, 1024, 4096, 5000, 65536} {
		iters := 40
		if n >= 65536 {
			iters = 6
		}
		for it := range iters {
			o := randOracle(r, n, []float64{0, 0.002, 0.1, 0.6}[it%4])
			s := fromOracle(t, n, o)
			words := (n + 63) / 64

			// FLAT over the whole domain.
			f, err := AppendFlat(nil, s, 0, words)
			if err != nil {
				t.Fatal(err)
			}
			if want := oracleFlat(o, 0, words); !bytes.Equal(f, want) {
				t.Fatalf("n=%d FLAT differs from hand-built bytes", n)
			}
			if l, _ := EncodedLen(s, Params{Encoding: Flat, WordCount: words}); l != len(f) {
				t.Fatalf("FLAT EncodedLen %d, len %d", l, len(f))
			}
			// HIER at several block sizes.
			for _, bb := range []int{64, 128, 256, 1024} {
				h, err := AppendHier(nil, s, bb)
				if err != nil {
					t.Fatal(err)
				}
				if want := oracleHier(o, n, bb); !bytes.Equal(h, want) {
					t.Fatalf("n=%d bb=%d HIER differs from hand-built bytes\n got %x\nwant %x", n, bb, h, want)
				}
				if l, _ := HierLen(s, bb); l != len(h) {
					t.Fatalf("HierLen %d, len %d", l, len(h))
				}
				back := NewSet(n)
				if err := DecodeHier(h, back); err != nil {
					t.Fatalf("n=%d bb=%d: %v", n, bb, err)
				}
				checkSet(t, "HIER round trip", back, o)
			}
			// LIST (when it fits the 16-bit count).
			if len(o) <= MaxListCount {
				l, err := AppendList(nil, s, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(l, oracleList(o)) {
					t.Fatalf("n=%d LIST differs from hand-built bytes", n)
				}
				if ListLen(s) != len(l) {
					t.Fatal("ListLen")
				}
				back := NewSet(n)
				if err := DecodeList(l, back, 0); err != nil {
					t.Fatal(err)
				}
				checkSet(t, "LIST round trip", back, o)
				// LIST -> HIER -> FLAT -> Set chain.
				h, _ := AppendHier(nil, back, 256)
				mid := NewSet(n)
				if err := DecodeHier(h, mid); err != nil {
					t.Fatal(err)
				}
				f2, _ := AppendFlat(nil, mid, 0, words)
				if !bytes.Equal(f2, f) {
					t.Fatalf("LIST->HIER->FLAT changed the set")
				}
			}
			back := NewSet(n)
			if err := DecodeFlat(f, back); err != nil {
				t.Fatal(err)
			}
			checkSet(t, "FLAT round trip", back, o)

			// Split into Set IDs of a small BSL and reassemble with OR.
			for _, wc := range []int{1, 2, 4} {
				acc, part := NewSet(n), NewSet(n)
				ids := 0
				for id := NextFlatSet(s, wc, 0); id >= 0; id = NextFlatSet(s, wc, id+1) {
					b, err := AppendFlatWindow(nil, s, id, wc)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(b, oracleFlat(o, id, wc)) {
						t.Fatalf("window %d differs from hand-built", id)
					}
					if err := DecodeFlat(b, part); err != nil {
						t.Fatal(err)
					}
					acc.Or(acc, part)
					ids++
				}
				checkSet(t, "FLAT split/merge", acc, o)
				if ids > FlatSetCount(n, wc) {
					t.Fatalf("%d set IDs for a domain of %d sets", ids, FlatSetCount(n, wc))
				}
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	s := NewSet(128)
	for _, c := range []struct {
		name  string
		body  string
		dec   func([]byte, *Set) error
		want  error
		field string
	}{
		{"flat short header", "0000 00", DecodeFlat, ErrShort, "header"},
		{"flat word count 0", "0000 0000", DecodeFlat, ErrFieldValue, "Word Count"},
		{"flat truncated", "0000 0001 00000000", DecodeFlat, ErrShort, "bitmap"},
		{"flat trailing", "0000 0001 0000000000000000 00000000", DecodeFlat, ErrLength, "bitmap"},
		{"flat set id beyond domain", "0002 0001 8000000000000000", DecodeFlat, ErrOutOfDomain, "bitmap"},
		{"flat window past capacity", "0000 0003 0000000000000000 0000000000000000 0000000000000001", DecodeFlat, ErrOutOfDomain, "bitmap"},
		{"hier block bits 0", "0000 0001 0000000000000000", DecodeHier, ErrFieldValue, "Block Bits"},
		{"hier block bits 100", "0064 0001 0000000000000000", DecodeHier, ErrFieldValue, "Block Bits"},
		{"hier block count 0", "0040 0000", DecodeHier, ErrFieldValue, "Block Count"},
		{"hier upper short", "0040 0002 00000000", DecodeHier, ErrShort, "upper bitmap"},
		{"hier padding bit", "0040 0002 2000000000000000", DecodeHier, ErrReserved, "upper bitmap padding"},
		{"hier lower missing", "0040 0002 8000000000000000", DecodeHier, ErrShort, "lower bitmaps"},
		{"hier trailing", "0040 0002 0000000000000000 00000000", DecodeHier, ErrLength, "lower bitmaps"},
		{"hier empty block", "0040 0002 8000000000000000 0000000000000000", DecodeHier, ErrEmptyBlock, "lower bitmap"},
		{"hier block beyond domain", "0040 0003 2000000000000000 8000000000000000", DecodeHier, ErrOutOfDomain, "lower bitmap"},
		{"list reserved", "0000 0001", dl(0), ErrReserved, "reserved"},
		{"list short", "0002 0000 00000001", dl(0), ErrShort, "Endpoint IDs"},
		{"list trailing", "0001 0000 00000001 00000002", dl(0), ErrLength, "Endpoint IDs"},
		{"list duplicate", "0002 0000 00000001 00000001", dl(0), ErrNotAscending, "Endpoint ID"},
		{"list descending", "0002 0000 00000005 00000001", dl(0), ErrNotAscending, "Endpoint ID"},
		{"list beyond domain", "0001 0000 00000080", dl(0), ErrOutOfDomain, "Endpoint ID"},
		{"list over cap", "0003 0000 00000001 00000002 00000003", dl(2), ErrListCap, "Count"},
	} {
		s.Add(3) // decoding must not leave stale or partial members
		err := c.dec(unhex(t, c.body), s)
		var de *DecodeError
		if !errors.Is(err, c.want) || !errors.As(err, &de) || de.Field != c.field {
			t.Errorf("%s: got %v, want %v in field %q", c.name, err, c.want, c.field)
		}
		if !s.IsEmpty() {
			t.Errorf("%s: set not empty after error", c.name)
		}
	}
	// Capacity 100: bit 100 sits inside the last word, past the tail.
	odd := NewSet(100)
	for name, err := range map[string]error{
		"flat tail": DecodeFlat(unhex(t, "0000 0002 0000000000000000 0000000008000000"), odd),
		"hier tail": DecodeHier(unhex(t, "0040 0002 4000000000000000 0000000008000000"), odd),
		"list tail": DecodeList(unhex(t, "0001 0000 00000064"), odd, 0),
		"flat last": DecodeFlat(unhex(t, "0000 0002 0000000000000000 0000000010000000"), odd),
		"hier last": DecodeHier(unhex(t, "0040 0002 4000000000000000 0000000010000000"), odd),
		"list last": DecodeList(unhex(t, "0001 0000 00000063"), odd, 0),
	} {
		var de *DecodeError
		last := strings.HasSuffix(name, "last")
		if last && err != nil {
			t.Errorf("%s: endpoint 99 of 100 refused: %v", name, err)
		}
		if !last && (!errors.Is(err, ErrOutOfDomain) || !errors.As(err, &de) || de.Value != 100) {
			t.Errorf("%s: %v, want endpoint 100 out of domain", name, err)
		}
	}
	// Negotiated shape.
	body, _ := AppendFlat(nil, s, 0, 2)
	if err := Decode(body, s, Params{Encoding: Flat, WordCount: 1}); !errors.Is(err, ErrParamMismatch) {
		t.Errorf("word count mismatch: %v", err)
	}
	body, _ = AppendHier(nil, s, 64)
	if err := Decode(body, s, Params{Encoding: Hier, BlockBits: 128}); !errors.Is(err, ErrParamMismatch) {
		t.Errorf("block bits mismatch: %v", err)
	}
	if err := Decode(body, s, Params{}); !errors.Is(err, ErrUnknownEncoding) {
		t.Errorf("encoding 0: %v", err)
	}
}

func dl(listCap int) func([]byte, *Set) error {
	return func(b []byte, s *Set) error { return DecodeList(b, s, listCap) }
}

func TestEncodeParamErrors(t *testing.T) {
	s := NewSet(100)
	s.Add(99)
	for name, err := range map[string]error{
		"flat wc 0":       second(AppendFlat(nil, s, 0, 0)),
		"flat wc 65536":   second(AppendFlat(nil, s, 0, 65536)),
		"flat set id -1":  second(AppendFlatWindow(nil, s, -1, 1)),
		"hier bb 100":     second(AppendHier(nil, s, 100)),
		"hier bb 65536":   second(AppendHier(nil, s, 65536)),
		"hier bb 0":       second(AppendHier(nil, s, 0)),
		"unknown":         second(Append(nil, s, Params{Encoding: 9})),
		"list cap":        second(AppendList(nil, fromOracle(t, 100, oracle{1: true, 2: true}), 1)),
		"flat outside id": second(AppendFlat(nil, s, 0, 1)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	big := NewSet(1 << 22)
	if _, err := AppendHier(nil, big, 64); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65536 blocks accepted: %v", err)
	}
}

func second(_ []byte, err error) error { return err }

// Domains of 65536 endpoints: dense sets through every encoding, and the
// shapes a large job negotiates.
func TestDomain65536Encodings(t *testing.T) {
	const n = 65536
	s := NewSet(n)
	for e := 0; e < n; e += 3 {
		s.Add(e)
	}
	f, err := AppendFlat(nil, s, 0, n/64)
	if err != nil || len(f) != 4+n/8 {
		t.Fatalf("flat %d %v", len(f), err)
	}
	h, err := AppendHier(nil, s, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 4+8+16*512 {
		t.Fatalf("hier len %d", len(h))
	}
	if _, err := AppendList(nil, s, 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("21846-member list over cap 1000: %v", err)
	}
	full := NewSet(n)
	for e := range n {
		full.Add(e)
	}
	if _, err := AppendList(nil, full, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("65536 members fit a 16-bit Count: %v", err)
	}
	l, err := AppendList(nil, s, 0)
	if err != nil || len(l) != 4+4*s.Count() {
		t.Fatalf("list %d %v", len(l), err)
	}
	back := NewSet(n)
	if err := DecodeList(l, back, 0); err != nil || !back.Equal(s) {
		t.Fatal("list round trip")
	}
	if err := DecodeFlat(f, back); err != nil || !back.Equal(s) {
		t.Fatal("flat round trip")
	}
	if err := DecodeHier(h, back); err != nil || !back.Equal(s) {
		t.Fatal("hier round trip")
	}
	// The top endpoint in a list.
	top := NewSet(n)
	top.Add(n - 1)
	l, _ = AppendList(nil, top, 4)
	if err := DecodeList(l, back, 4); err != nil || !back.Equal(top) {
		t.Fatal("list top endpoint")
	}
}

func TestDecodeAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	s := fromOracle(t, 4096, randOracle(r, 4096, 0.3))
	f, _ := AppendFlat(nil, s, 0, 64)
	h, _ := AppendHier(nil, s, 256)
	small := fromOracle(t, 4096, oracle{3: true, 900: true, 4000: true})
	l, _ := AppendList(nil, small, 8)
	into := NewSet(4096)
	buf := make([]byte, 0, 1<<14)
	allocs := alloctest.PerRun(50, func() {
		_ = DecodeFlat(f, into)
		_ = DecodeHier(h, into)
		_ = DecodeList(l, into, 8)
		buf, _ = AppendFlat(buf[:0], s, 0, 64)
		buf, _ = AppendHier(buf[:0], s, 256)
		buf, _ = AppendList(buf[:0], small, 8)
	})
	if allocs != 0 {
		t.Fatalf("decode/encode allocate %v per run", allocs)
	}
}

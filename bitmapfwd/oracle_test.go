// Naive references the fast code is compared against: map[int]bool sets and
// byte-at-a-time encoders written straight from docs/protocol.md section 8.

package bitmapfwd

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

type oracle map[int]bool

func (o oracle) sorted() []int {
	var out []int
	for e, ok := range o {
		if ok {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

// randOracle draws a set of capacity n with the given density; it sometimes
// clusters members so that blocks and words are left empty.
func randOracle(r *rand.Rand, n int, density float64) oracle {
	o := oracle{}
	switch r.IntN(4) {
	case 0: // sparse handful
		for range r.IntN(9) {
			o[r.IntN(n)] = true
		}
	case 1: // a cluster
		lo := r.IntN(n)
		hi := min(n, lo+1+r.IntN(300))
		for e := lo; e < hi; e++ {
			if r.Float64() < 0.7 {
				o[e] = true
			}
		}
	default:
		for e := range n {
			if r.Float64() < density {
				o[e] = true
			}
		}
	}
	if r.IntN(8) == 0 {
		o[n-1] = true // the last bit, the tail-mask edge
	}
	return o
}

func fromOracle(t testing.TB, n int, o oracle) *Set {
	t.Helper()
	s := NewSet(n)
	for e, ok := range o {
		if ok && !s.Add(e) {
			t.Fatalf("Add(%d) on capacity %d failed", e, n)
		}
	}
	return s
}

func checkSet(t testing.TB, what string, s *Set, o oracle) {
	t.Helper()
	want := o.sorted()
	var got []int
	for e := s.Next(0); e >= 0; e = s.Next(e + 1) {
		got = append(got, e)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got members %v, want %v", what, trunc(got), trunc(want))
	}
	if s.Count() != len(want) {
		t.Fatalf("%s: Count %d, want %d", what, s.Count(), len(want))
	}
	if s.IsEmpty() != (len(want) == 0) {
		t.Fatalf("%s: IsEmpty %v with %d members", what, s.IsEmpty(), len(want))
	}
}

func trunc(x []int) []int {
	if len(x) > 20 {
		return x[:20]
	}
	return x
}

// Hand-built encodings, one byte and one bit at a time.

func oracleBitmap(nbits int, has func(b int) bool) []byte {
	out := make([]byte, nbits/8)
	for b := range nbits {
		if has(b) {
			out[b/8] |= 1 << (7 - b%8)
		}
	}
	return out
}

func oracleFlat(o oracle, setID, wc int) []byte {
	out := binary.BigEndian.AppendUint16(nil, uint16(setID))
	out = binary.BigEndian.AppendUint16(out, uint16(wc))
	bsl := 64 * wc
	return append(out, oracleBitmap(bsl, func(b int) bool { return o[setID*bsl+b] })...)
}

func oracleHier(o oracle, n, bb int) []byte {
	bc := (n + bb - 1) / bb
	out := binary.BigEndian.AppendUint16(nil, uint16(bb))
	out = binary.BigEndian.AppendUint16(out, uint16(bc))
	blockHas := func(k int) bool {
		for b := range bb {
			if o[k*bb+b] {
				return true
			}
		}
		return false
	}
	out = append(out, oracleBitmap((bc+63)/64*64, func(k int) bool { return k < bc && blockHas(k) })...)
	for k := range bc {
		if blockHas(k) {
			out = append(out, oracleBitmap(bb, func(b int) bool { return o[k*bb+b] })...)
		}
	}
	return out
}

func oracleList(o oracle) []byte {
	ids := o.sorted()
	out := binary.BigEndian.AppendUint16(nil, uint16(len(ids)))
	out = append(out, 0, 0)
	for _, e := range ids {
		out = binary.BigEndian.AppendUint32(out, uint32(e))
	}
	return out
}

func mustBits(t testing.TB, s string) *Set {
	t.Helper()
	x, err := ParseBits(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

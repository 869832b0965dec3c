// This file owns Set, the canonical in-memory endpoint set, and its word-wise
// operations.

package bitmapfwd

import (
	"iter"
	"math/bits"
	"strconv"
	"strings"
)

// MaxBits bounds a Set's capacity. 1<<24 endpoints (2 MiB per set) is two
// orders of magnitude above the largest data-center domains the framework
// targets (hundreds of thousands of accelerators) while keeping a corrupted
// configuration from asking for gigabytes.
const MaxBits = 1 << 24

// Set is an endpoint set of fixed capacity: a flat bitmap of 64-bit words.
// Endpoint e lives in word e/64 at bit 63-e%64 (most significant first, the
// wire order, see doc.go). Bits at or above Cap are always zero.
//
// The zero Set has capacity 0 and holds nothing; make sets with NewSet or
// MakeSet. Binary operations require operands of equal capacity and panic
// otherwise: sets of two jobs (or of a job and a misconfigured table) must
// never be combined.
type Set struct {
	n int      // capacity in bits
	w []uint64 // ceil(n/64) words
}

// NewSet returns an empty set able to hold endpoints 0..n-1.
// It panics if n is not in 1..MaxBits.
func NewSet(n int) *Set {
	s := MakeSet(n)
	return &s
}

// MakeSet is NewSet returning a value, for embedding in preallocated slabs.
func MakeSet(n int) Set {
	if n < 1 || n > MaxBits {
		panic("bitmapfwd: set capacity " + strconv.Itoa(n) + " out of range 1.." + strconv.Itoa(MaxBits))
	}
	return Set{n: n, w: make([]uint64, (n+63)/64)}
}

// makeSetOn builds a set over caller-provided words (slab allocation).
func makeSetOn(n int, w []uint64) Set {
	return Set{n: n, w: w[: (n+63)/64 : (n+63)/64]}
}

// Cap returns the capacity in bits: members are 0..Cap()-1.
func (s *Set) Cap() int { return s.n }

// Words returns the backing words, most significant bit first. It is a view,
// not a copy: callers may read it (for hashing or a hardware table) but must
// keep bits at or above Cap zero if they write.
func (s *Set) Words() []uint64 { return s.w }

func mask(e int) uint64 { return 1 << (63 - uint(e&63)) }

// tailMask returns the valid bits of the last word.
func (s *Set) tailMask() uint64 {
	r := uint(s.n & 63)
	if r == 0 {
		return ^uint64(0)
	}
	return ^uint64(0) << (64 - r)
}

// same panics unless o has s's capacity. Kept tiny so it inlines into every
// operation; the message is built out of line.
func (s *Set) same(o *Set) {
	if s.n != o.n {
		capacityPanic(s.n, o.n)
	}
}

func capacityPanic(a, b int) {
	panic("bitmapfwd: sets of capacity " + strconv.Itoa(a) + " and " + strconv.Itoa(b) + " combined")
}

// Add inserts endpoint e. It reports false, changing nothing, when e is
// outside 0..Cap()-1.
func (s *Set) Add(e int) bool {
	if uint(e) >= uint(s.n) {
		return false
	}
	s.w[e>>6] |= mask(e)
	return true
}

// Remove deletes endpoint e; false when e is outside the capacity.
func (s *Set) Remove(e int) bool {
	if uint(e) >= uint(s.n) {
		return false
	}
	s.w[e>>6] &^= mask(e)
	return true
}

// Contains reports whether e is a member. Out-of-range e is never a member.
func (s *Set) Contains(e int) bool {
	if uint(e) >= uint(s.n) {
		return false
	}
	return s.w[e>>6]&mask(e) != 0
}

// Clear empties s.
func (s *Set) Clear() { clear(s.w) }

// Copy makes s equal to src.
func (s *Set) Copy(src *Set) {
	s.same(src)
	copy(s.w, src.w)
}

// And sets s = a AND b. s may alias a or b.
func (s *Set) And(a, b *Set) {
	s.same(a)
	s.same(b)
	w, aw, bw := s.w, a.w[:len(s.w)], b.w[:len(s.w)]
	for i := range w {
		w[i] = aw[i] & bw[i]
	}
}

// Or sets s = a OR b. s may alias a or b.
func (s *Set) Or(a, b *Set) {
	s.same(a)
	s.same(b)
	w, aw, bw := s.w, a.w[:len(s.w)], b.w[:len(s.w)]
	for i := range w {
		w[i] = aw[i] | bw[i]
	}
}

// AndNot sets s = a AND NOT b (the members of a that are not in b). s may
// alias a or b. This is the "missing" computation: target AND NOT received.
func (s *Set) AndNot(a, b *Set) {
	s.same(a)
	s.same(b)
	w, aw, bw := s.w, a.w[:len(s.w)], b.w[:len(s.w)]
	for i := range w {
		w[i] = aw[i] &^ bw[i]
	}
}

// Equal reports whether s and o have the same capacity and members.
func (s *Set) Equal(o *Set) bool {
	if s.n != o.n {
		return false
	}
	ow := o.w[:len(s.w)]
	for i, x := range s.w {
		if x != ow[i] {
			return false
		}
	}
	return true
}

// IsEmpty reports whether s has no members.
func (s *Set) IsEmpty() bool {
	for _, x := range s.w {
		if x != 0 {
			return false
		}
	}
	return true
}

// Count returns the number of members.
func (s *Set) Count() int {
	c := 0
	for _, x := range s.w {
		c += bits.OnesCount64(x)
	}
	return c
}

// Intersects reports whether s AND o is non-empty.
func (s *Set) Intersects(o *Set) bool {
	s.same(o)
	ow := o.w[:len(s.w)]
	for i, x := range s.w {
		if x&ow[i] != 0 {
			return true
		}
	}
	return false
}

// SubsetOf reports whether every member of s is a member of o.
func (s *Set) SubsetOf(o *Set) bool {
	s.same(o)
	ow := o.w[:len(s.w)]
	for i, x := range s.w {
		if x&^ow[i] != 0 {
			return false
		}
	}
	return true
}

// Next returns the smallest member >= from, or -1 if there is none. It is the
// allocation-free iteration primitive:
//
//	for e := s.Next(0); e >= 0; e = s.Next(e + 1) { ... }
func (s *Set) Next(from int) int {
	if from < 0 {
		from = 0
	}
	if from >= s.n {
		return -1
	}
	i := from >> 6
	x := s.w[i] & (^uint64(0) >> uint(from&63))
	for {
		if x != 0 {
			return i<<6 + bits.LeadingZeros64(x)
		}
		i++
		if i >= len(s.w) {
			return -1
		}
		x = s.w[i]
	}
}

// All iterates over the members in ascending order.
func (s *Set) All() iter.Seq[int] {
	return func(yield func(int) bool) {
		for i, x := range s.w {
			for x != 0 {
				z := bits.LeadingZeros64(x)
				if !yield(i<<6 + z) {
					return
				}
				x &^= 1 << (63 - uint(z))
			}
		}
	}
}

// anyInWords reports whether any of words [lo, hi) is non-zero.
func (s *Set) anyInWords(lo, hi int) bool {
	if lo >= len(s.w) {
		return false
	}
	hi = min(hi, len(s.w))
	for _, x := range s.w[lo:hi] {
		if x != 0 {
			return true
		}
	}
	return false
}

// String prints a set of at most 64 endpoints in the figures' notation
// ("11000000": endpoint 0 first); larger sets as a member list. For tests and
// logs, not the hot path.
func (s *Set) String() string {
	var b strings.Builder
	if s.n <= 64 {
		for e := 0; e < s.n; e++ {
			if s.Contains(e) {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		return b.String()
	}
	b.WriteString("{")
	first := true
	for e := range s.All() {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(strconv.Itoa(e))
	}
	b.WriteString("}/" + strconv.Itoa(s.n))
	return b.String()
}

// ParseBits builds a set from the figures' notation: one character per
// endpoint, '1' a member and '0' not, endpoint 0 first; the capacity is the
// string length. Spaces and underscores are ignored. For tests, tools and
// configuration, not the hot path.
func ParseBits(str string) (*Set, error) {
	str = strings.NewReplacer(" ", "", "_", "").Replace(str)
	if len(str) < 1 || len(str) > MaxBits {
		return nil, &EncodeError{Param: "bit string length", Value: len(str), Err: ErrParam}
	}
	s := NewSet(len(str))
	for i, c := range str {
		switch c {
		case '1':
			s.Add(i)
		case '0':
		default:
			return nil, &EncodeError{Param: "bit string character", Value: i, Err: ErrParam}
		}
	}
	return s, nil
}

func popcount(x uint64) int { return bits.OnesCount64(x) }

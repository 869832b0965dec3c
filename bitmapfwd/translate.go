// This file owns translation at a domain boundary (bitmap-framework
// section 7): a host carries a LIST of global endpoint IDs; a pod-scale
// aggregation domain works on a local bitmap.

package bitmapfwd

import (
	"encoding/binary"
	"slices"
)

// Translator maps global endpoint IDs to the local bit positions of one
// domain and back. Built at setup; read-only afterwards (safe to share).
type Translator struct {
	globals   []uint32 // ascending
	locals    []int32  // locals[i] is the local bit of globals[i]
	globalOf  []uint32 // by local bit
	monotonic bool     // local order == global order
}

// NewTranslator builds the table from globalOf, where globalOf[b] is the
// global ID of local bit b; the local bit space has capacity len(globalOf).
// Global IDs must be distinct.
func NewTranslator(globalOf []uint32) (*Translator, error) {
	n := len(globalOf)
	if n < 1 || n > MaxBits {
		return nil, paramErr(0, "Translator size", n, ErrParam)
	}
	t := &Translator{
		globals:   make([]uint32, n),
		locals:    make([]int32, n),
		globalOf:  slices.Clone(globalOf),
		monotonic: true,
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := globalOf[a], globalOf[b]
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	for i, b := range order {
		t.globals[i] = globalOf[b]
		t.locals[i] = b
		if int(b) != i {
			t.monotonic = false
		}
		if i > 0 && t.globals[i] == t.globals[i-1] {
			return nil, paramErr(0, "Translator duplicate global ID at local bit", int(b), ErrParam)
		}
	}
	return t, nil
}

// Bits is the local bit space's capacity.
func (t *Translator) Bits() int { return len(t.globalOf) }

// Local returns the local bit of global ID g.
func (t *Translator) Local(g uint32) (int, bool) {
	i, ok := slices.BinarySearch(t.globals, g)
	if !ok {
		return -1, false
	}
	return int(t.locals[i]), true
}

// Global returns the global ID of local bit b.
func (t *Translator) Global(b int) (uint32, bool) {
	if uint(b) >= uint(len(t.globalOf)) {
		return 0, false
	}
	return t.globalOf[b], true
}

// Translate decodes a LIST body of global IDs (validated as DecodeList does,
// with listCap) into the local bitmap into, whose capacity must be Bits. A
// global ID outside the domain fails with ErrOutOfDomain naming it. On error
// into is left empty. No allocation.
func (t *Translator) Translate(listBody []byte, into *Set, listCap int) error {
	err := t.translate(listBody, into, listCap)
	if err != nil {
		into.Clear()
	}
	return err
}

func (t *Translator) translate(body []byte, into *Set, listCap int) error {
	if into.n != len(t.globalOf) {
		return decodeErr(List, "local set capacity", 0, uint64(into.n), ErrCapacity)
	}
	c, err := parseListHeader(body, listCap)
	if err != nil {
		return err
	}
	into.Clear()
	prev := int64(-1)
	for i := range c {
		off := bodyHeaderLen + listIDLen*i
		g := binary.BigEndian.Uint32(body[off:])
		if int64(g) <= prev {
			return decodeErr(List, "Endpoint ID", off, uint64(g), ErrNotAscending)
		}
		prev = int64(g)
		b, ok := t.Local(g)
		if !ok {
			return decodeErr(List, "Endpoint ID", off, uint64(g), ErrOutOfDomain)
		}
		into.w[b>>6] |= mask(b)
	}
	return nil
}

// AppendGlobalList is the reverse translation: the LIST body of the global
// IDs of s's members, ascending, for the host side of the boundary. listCap
// as in AppendList. No allocation beyond growing dst.
func (t *Translator) AppendGlobalList(dst []byte, s *Set, listCap int) ([]byte, error) {
	if s.n != len(t.globalOf) {
		return dst, paramErr(List, "local set capacity", s.n, ErrCapacity)
	}
	if listCap <= 0 || listCap > MaxListCount {
		listCap = MaxListCount
	}
	c := s.Count()
	if c > listCap {
		return dst, paramErr(List, "Count", c, ErrTooLarge)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(c))
	dst = binary.BigEndian.AppendUint16(dst, 0)
	if t.monotonic {
		for b := s.Next(0); b >= 0; b = s.Next(b + 1) {
			dst = binary.BigEndian.AppendUint32(dst, t.globalOf[b])
		}
		return dst, nil
	}
	// Local order differs from global order: walk the table in global order.
	// O(Bits), acceptable at the host boundary, which is not a per-hop path.
	for i, g := range t.globals {
		if s.Contains(int(t.locals[i])) {
			dst = binary.BigEndian.AppendUint32(dst, g)
		}
	}
	return dst, nil
}

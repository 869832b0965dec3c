// This file owns the bit index forwarding table (BIFT) of one switch for one
// job and BIER-style replication through it.

package bitmapfwd

import (
	"strconv"
	"sync/atomic"
)

// LocalPort is the port Replicate passes to emit for the bits of endpoints
// attached to this node itself (BIER: the BFER's own bit, delivered locally).
const LocalPort = -1

// BIFT is one switch's bit index forwarding table for one job: for every
// neighbour port, the mask of endpoints reached through it, plus the mask of
// endpoints attached to the node itself. Masks are pairwise disjoint, so every
// bit belongs to exactly one neighbour and Replicate never sends a bit twice;
// SetMask enforces it.
//
// A BIFT is mutated only while it is built; afterwards it is read-only and
// safe for concurrent Replicate calls (each with its own scratch set).
type BIFT struct {
	n        int
	masks    []Set
	span     [][2]int // per port: words [lo, hi) where its mask is non-zero
	local    Set
	localLo  int
	localHi  int
	routable Set // OR of every mask and local
}

// NewBIFT returns a table for ports neighbour ports over a bit space of
// capacity bits, every mask empty.
func NewBIFT(bits, ports int) (*BIFT, error) {
	if bits < 1 || bits > MaxBits {
		return nil, paramErr(0, "BIFT capacity", bits, ErrParam)
	}
	if ports < 0 || ports > 1<<16 {
		return nil, paramErr(0, "BIFT port count", ports, ErrParam)
	}
	b := &BIFT{
		n:        bits,
		masks:    make([]Set, ports),
		span:     make([][2]int, ports),
		local:    MakeSet(bits),
		routable: MakeSet(bits),
	}
	for p := range b.masks {
		b.masks[p] = MakeSet(bits)
	}
	return b, nil
}

// Cap is the capacity of the table's bit space.
func (b *BIFT) Cap() int { return b.n }

// Ports is the number of neighbour ports.
func (b *BIFT) Ports() int { return len(b.masks) }

// Mask returns port's mask (a view; do not modify). Nil for an unknown port.
func (b *BIFT) Mask(port int) *Set {
	if port == LocalPort {
		return &b.local
	}
	if uint(port) >= uint(len(b.masks)) {
		return nil
	}
	return &b.masks[port]
}

// SetMask installs the mask of neighbour port (LocalPort for the node's own
// endpoints), replacing the previous one. It fails with ErrOverlap naming
// the other port if the mask shares a bit with another port's mask: each bit
// must belong to exactly one neighbour.
func (b *BIFT) SetMask(port int, m *Set) error {
	dst := b.Mask(port)
	if dst == nil {
		return paramErr(0, "BIFT port", port, ErrParam)
	}
	if m.n != b.n {
		return paramErr(0, "BIFT mask capacity", m.n, ErrCapacity)
	}
	// Masks are disjoint, so routable AND NOT dst is the union of the other
	// masks: one pass checks the overlap, the port is searched only on error.
	rw, dw := b.routable.w, dst.w
	for i, x := range m.w {
		if x&(rw[i]&^dw[i]) != 0 {
			for q := LocalPort; q < len(b.masks); q++ {
				if q != port && b.Mask(q).w[i]&x != 0 {
					return paramErr(0, "BIFT port "+strconv.Itoa(port)+" mask overlaps port", q, ErrOverlap)
				}
			}
		}
	}
	for i, x := range m.w {
		rw[i] = rw[i]&^dw[i] | x
		dw[i] = x
	}
	lo, hi := wordSpan(dst)
	if port == LocalPort {
		b.localLo, b.localHi = lo, hi
	} else {
		b.span[port] = [2]int{lo, hi}
	}
	return nil
}

// wordSpan returns the smallest word range holding every member of s.
func wordSpan(s *Set) (lo, hi int) {
	lo, hi = len(s.w), 0
	for i, x := range s.w {
		if x != 0 {
			lo = min(lo, i)
			hi = i + 1
		}
	}
	if hi == 0 {
		return 0, 0
	}
	return lo, hi
}

// ReplicateResult counts what one Replicate call did.
type ReplicateResult struct {
	Copies   int  // emit calls, local delivery included
	Bits     int  // bits carried by all copies together
	Local    int  // bits delivered to LocalPort
	Looped   int  // bits routed via the ingress port: dropped, would loop
	Unrouted int  // bits no port or local mask holds: dropped
	Empty    bool // dst was empty: nothing to do
}

// Replicate sends dst (a destination set, D-BM) the BIER way: one copy per
// neighbour whose mask intersects dst, carrying only dst AND mask, in port
// order, then the local copy (port LocalPort). Because the masks are
// disjoint, every bit is carried at most once (the handled bits are cleared,
// as BIER clears them). Bits routed through inPort are not sent back: they
// are counted as Looped. inPort < 0 (or any value that is not a port) means
// the packet originated at this node. Bits no mask holds are counted as
// Unrouted. An empty dst produces no copy and sets Empty.
//
// scratch is the caller's set of capacity Cap; emit receives it as subset,
// valid only during the call: emit must encode or copy it, never keep or
// modify it. dst is not modified. No allocation.
func (b *BIFT) Replicate(dst *Set, inPort int, scratch *Set, emit func(port int, subset *Set)) ReplicateResult {
	var r ReplicateResult
	b.routable.same(dst)
	b.routable.same(scratch)
	// One pass: emptiness and unrouted bits together.
	nonEmpty := false
	rw := b.routable.w[:len(dst.w)]
	for i, x := range dst.w {
		if x != 0 {
			nonEmpty = true
			r.Unrouted += popcount(x &^ rw[i])
		}
	}
	if !nonEmpty {
		r.Empty = true
		return r
	}
	scratch.Clear()
	sw := scratch.w
	for p := range b.masks {
		lo, hi := b.span[p][0], b.span[p][1]
		if lo == hi {
			continue
		}
		mw := b.masks[p].w
		c := 0
		for i := lo; i < hi; i++ {
			x := dst.w[i] & mw[i]
			sw[i] = x
			c += popcount(x)
		}
		if c != 0 {
			if p == inPort {
				r.Looped += c
			} else {
				r.Copies++
				r.Bits += c
				emit(p, scratch)
			}
		}
		clear(sw[lo:hi])
	}
	if b.localLo != b.localHi {
		c := 0
		for i := b.localLo; i < b.localHi; i++ {
			x := dst.w[i] & b.local.w[i]
			sw[i] = x
			c += popcount(x)
		}
		if c != 0 {
			r.Copies++
			r.Bits += c
			r.Local = c
			emit(LocalPort, scratch)
		}
		clear(sw[b.localLo:b.localHi])
	}
	return r
}

// Branch reports whether the call replicated toward more than one next hop:
// only such a node installs C-BM soft state (bitmap-framework section 4).
func (r ReplicateResult) Branch() bool { return r.Copies > 1 }

// Forwarded sets out = the union of the subsets Replicate(dst, inPort, ...)
// emits: dst AND (every mask) AND NOT inPort's mask. It is the C-BM a branch
// node installs for the returning aggregation. out may alias dst.
func (b *BIFT) Forwarded(out, dst *Set, inPort int) {
	out.And(dst, &b.routable)
	if uint(inPort) < uint(len(b.masks)) {
		out.AndNot(out, &b.masks[inPort])
	}
}

// ReplicateCounters accumulate ReplicateResults for the metrics package
// (node_exporter style: plain atomics on the hot path, read at scrape time).
// One per engine worker avoids sharing a cache line between cores.
type ReplicateCounters struct {
	Calls    atomic.Uint64 // Replicate calls
	Copies   atomic.Uint64 // copies emitted
	Bits     atomic.Uint64 // bits carried by the copies
	Looped   atomic.Uint64 // bits dropped: routed via the ingress port
	Unrouted atomic.Uint64 // bits dropped: no route
	Empty    atomic.Uint64 // calls with an empty destination set
}

// Add accounts one result. No allocation; zero fields are skipped so the
// common case touches two or three words.
func (c *ReplicateCounters) Add(r ReplicateResult) {
	c.Calls.Add(1)
	if r.Empty {
		c.Empty.Add(1)
		return
	}
	if r.Copies != 0 {
		c.Copies.Add(uint64(r.Copies))
		c.Bits.Add(uint64(r.Bits))
	}
	if r.Looped != 0 {
		c.Looped.Add(uint64(r.Looped))
	}
	if r.Unrouted != 0 {
		c.Unrouted.Add(uint64(r.Unrouted))
	}
}

package xdp

// This file owns the index arithmetic of the AF_XDP rings. Each ring is a
// single-producer/single-consumer queue shared with the kernel: the producer
// only ever writes the producer index, the consumer only the consumer index,
// both free-running uint32 counters (the slot is index & mask), so the fill
// level is prod - cons in modular arithmetic and stays right across the
// 2^32 wrap. Each side keeps a cached copy of the other side's index and
// re-reads the shared word (an atomic load: the acquire that orders the
// descriptor reads or writes after it) only when the cache says there is not
// enough; the atomic store of its own index is the release that publishes
// the descriptors written before it. One load and one store per batch, none
// per frame.

import "sync/atomic"

// ring is the index state of one ring, seen from user space. Whether it is
// used as producer (fill, TX) or consumer (RX, completion) is up to the
// caller; a ring is used by one goroutine at a time.
type ring struct {
	prod, cons *uint32 // shared with the kernel
	flags      *uint32 // XDP_RING_NEED_WAKEUP; informational (copy mode always kicks)
	size, mask uint32
	// cachedProd and cachedCons: for a producer ring cachedProd is ours and
	// authoritative, cachedCons a possibly stale copy of the kernel's; for a
	// consumer ring the other way round.
	cachedProd, cachedCons uint32
}

// newRing wraps shared indices; size must be a power of two.
func newRing(prod, cons, flags *uint32, size uint32) ring {
	return ring{prod: prod, cons: cons, flags: flags, size: size, mask: size - 1,
		cachedProd: atomic.LoadUint32(prod), cachedCons: atomic.LoadUint32(cons)}
}

// free returns how many slots a producer may fill, re-reading the consumer
// index only when fewer than want are known to be free.
func (r *ring) free(want uint32) uint32 {
	if n := r.size - (r.cachedProd - r.cachedCons); n >= want {
		return n
	}
	r.cachedCons = atomic.LoadUint32(r.cons)
	return r.size - (r.cachedProd - r.cachedCons)
}

// reserve claims n slots (free(n) >= n must hold) and returns the index of
// the first; the caller writes slot(i) for i in [start, start+n) and then
// publishes.
func (r *ring) reserve(n uint32) uint32 {
	start := r.cachedProd
	r.cachedProd += n
	return start
}

// publish makes every reserved slot visible to the kernel.
func (r *ring) publish() { atomic.StoreUint32(r.prod, r.cachedProd) }

// drained reports whether the kernel has consumed everything produced.
func (r *ring) drained() bool {
	r.cachedCons = atomic.LoadUint32(r.cons)
	return r.cachedCons == r.cachedProd
}

// avail returns how many entries a consumer may read (at most max),
// re-reading the producer index only when fewer than max are known.
func (r *ring) avail(max uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n < max {
		r.cachedProd = atomic.LoadUint32(r.prod)
		n = r.cachedProd - r.cachedCons
	}
	if n > max {
		n = max
	}
	return n
}

// release hands n consumed entries (starting at cachedCons) back to the kernel.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.cons, r.cachedCons)
}

// slot maps a free-running index to a position in the descriptor array.
func (r *ring) slot(i uint32) uint32 { return i & r.mask }

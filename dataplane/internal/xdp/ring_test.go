package xdp

import (
	"math/rand/v2"
	"testing"
)

// fakeKernel plays the kernel's side of one ring with the plain arithmetic
// of include/uapi/linux/if_xdp.h users: it reads and writes the shared
// indices directly, so a mistake in ring's caching or wrap handling shows up
// as a difference from a naive FIFO.
type fakeKernel struct {
	prod, cons uint32
	entries    []uint64
}

// TestRingMatchesFIFO drives a producer ring (user produces, "kernel"
// consumes) and a consumer ring (kernel produces, user consumes) with random
// batch sizes, starting just below the 2^32 wrap, and compares every entry
// and every fill level with a slice used as a FIFO.
func TestRingMatchesFIFO(t *testing.T) {
	for _, size := range []uint32{1, 2, 8, 64} {
		for _, start := range []uint32{0, 1 << 31, ^uint32(0) - 5, ^uint32(0)} {
			rng := rand.New(rand.NewPCG(uint64(size), uint64(start)))
			t.Run("producer", func(t *testing.T) { producerRun(t, rng, size, start) })
			t.Run("consumer", func(t *testing.T) { consumerRun(t, rng, size, start) })
		}
	}
}

func producerRun(t *testing.T, rng *rand.Rand, size, start uint32) {
	k := &fakeKernel{prod: start, cons: start, entries: make([]uint64, size)}
	var flags uint32
	r := newRing(&k.prod, &k.cons, &flags, size)
	var fifo []uint64 // published, not yet consumed by the kernel
	next := uint64(1)
	for step := 0; step < 2000; step++ {
		if rng.IntN(2) == 0 {
			want := uint32(rng.IntN(int(size) + 2))
			free := r.free(want)
			// A stale consumer copy may under-report, never over-report, and
			// is refreshed whenever it cannot satisfy want.
			if naive := size - uint32(len(fifo)); free > naive || free < want && free != naive {
				t.Fatalf("size %d start %#x step %d: free(%d) = %d, naive %d", size, start, step, want, free, naive)
			}
			n := min(want, free)
			i := r.reserve(n)
			for j := uint32(0); j < n; j++ {
				k.entries[r.slot(i+j)] = next
				fifo = append(fifo, next)
				next++
			}
			r.publish()
			continue
		}
		// The kernel consumes what it sees published.
		n := uint32(rng.IntN(int(size) + 1))
		if have := k.prod - k.cons; n > have {
			n = have
		}
		for j := uint32(0); j < n; j++ {
			got := k.entries[(k.cons+j)%size]
			if got != fifo[j] {
				t.Fatalf("size %d start %#x step %d: kernel read %d, want %d", size, start, step, got, fifo[j])
			}
		}
		fifo = fifo[n:]
		k.cons += n
		if rng.IntN(4) == 0 && r.drained() != (len(fifo) == 0) {
			t.Fatalf("drained() = %v with %d entries outstanding", !(len(fifo) == 0), len(fifo))
		}
	}
}

func consumerRun(t *testing.T, rng *rand.Rand, size, start uint32) {
	k := &fakeKernel{prod: start, cons: start, entries: make([]uint64, size)}
	var flags uint32
	r := newRing(&k.prod, &k.cons, &flags, size)
	var fifo []uint64
	next := uint64(1)
	for step := 0; step < 2000; step++ {
		if rng.IntN(2) == 0 {
			// The kernel produces into whatever the consumer has released.
			n := uint32(rng.IntN(int(size) + 1))
			if free := size - (k.prod - k.cons); n > free {
				n = free
			}
			for j := uint32(0); j < n; j++ {
				k.entries[(k.prod+j)%size] = next
				fifo = append(fifo, next)
				next++
			}
			k.prod += n
			continue
		}
		max := uint32(rng.IntN(int(size) + 2))
		n := r.avail(max)
		if naive := min(max, uint32(len(fifo))); n != naive {
			t.Fatalf("size %d start %#x step %d: avail(%d) = %d, naive %d", size, start, step, max, n, naive)
		}
		for j := uint32(0); j < n; j++ {
			if got := k.entries[r.slot(r.cachedCons+j)]; got != fifo[j] {
				t.Fatalf("size %d start %#x step %d: read %d, want %d", size, start, step, got, fifo[j])
			}
		}
		fifo = fifo[n:]
		r.release(n)
		if k.cons != start+uint32(next-1)-uint32(len(fifo)) {
			t.Fatalf("consumer index %#x, want %#x", k.cons, start+uint32(next-1)-uint32(len(fifo)))
		}
	}
}

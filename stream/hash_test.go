package stream

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// nhRef is NH written from its definition, word by word, with no shared
// code: the oracle for nh (kernel and generic).
func nhRef(b []byte, key []uint32) uint64 {
	words := (len(b) + 3) / 4
	words += words & 1
	w := make([]uint32, words)
	for i, c := range b {
		w[i/4] |= uint32(c) << (8 * (i % 4))
	}
	var h uint64
	for i := 0; i < words; i += 2 {
		h += uint64(w[i]+key[i]) * uint64(w[i+1]+key[i+1])
	}
	return h
}

// TestNHMatchesDefinition: the kernel (where the CPU has it) and the Go
// loop both give the definition's value for every length up to two
// key-lengths' worth of small bodies and for random large ones, with
// bytes chosen so word sums wrap and products are large.
func TestNHMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := make([]uint32, hashKeyWords)
	for i := range key {
		key[i] = rng.Uint32() | 0xF0000000 // sums wrap mod 2^32
	}
	lengths := []int{9000, 9216, 8972, 1456, 4 * hashKeyWords}
	for n := 0; n <= 700; n++ {
		lengths = append(lengths, n)
	}
	for _, kernel := range []bool{false, true} {
		if kernel && !haveNHKernel {
			t.Log("no NH kernel on this CPU: the Go loop only")
			continue
		}
		saved := haveNHKernel
		haveNHKernel = kernel
		for _, n := range lengths {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(0xC0 | rng.IntN(64))
			}
			if got, want := nh(b, key), nhRef(b, key); got != want {
				t.Errorf("kernel %v, %d bytes: nh %#x, definition %#x", kernel, n, got, want)
			}
		}
		haveNHKernel = saved
	}
}

// TestHashLengthAndChunks: bodies that differ only by trailing zeros, and
// bodies longer than the key, hash apart.
func TestHashLengthAndChunks(t *testing.T) {
	seen := map[uint64]int{}
	for n := 0; n <= 64; n++ {
		h := Hash(make([]byte, n))
		if m, ok := seen[h]; ok {
			t.Fatalf("%d and %d zero bytes hash alike", m, n)
		}
		seen[h] = n
	}
	long := make([]byte, 3*4*hashKeyWords+5)
	for i := range long {
		long[i] = byte(i * 7)
	}
	h := Hash(long)
	long[len(long)-1000] ^= 1
	if Hash(long) == h {
		t.Error("a change in a long body's last chunk kept its hash")
	}
}

// BenchmarkHash: the content hash against CRC-32C (the hash before NH) on
// an MTU 1500 and an MTU 9000 DATA body.
func BenchmarkHash(b *testing.B) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	for _, n := range []int{1456, 8972} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i)
		}
		b.Run("NH/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sinkHash = Hash(body)
			}
		})
		b.Run("CRC32C/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sinkHash = uint64(crc32.Checksum(body, tab))
			}
		})
	}
}

var sinkHash uint64

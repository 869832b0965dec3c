// This file owns the content hash a RecvWindow compares to tell an
// identical repeat of a frame from changed bytes under an old Packet ID.

package stream

import (
	"encoding/binary"
	"math/rand/v2"
)

// hashKeyWords is the NH key's length in 32-bit words: one word per body
// word of the largest body (MTU 9000), rounded up to whole 32-byte blocks.
// A longer body is hashed in chunks of this size (hashChunked).
const hashKeyWords = 9216 / 4

// hashKey is the NH key, random per process: nothing outside the process
// sees a hash, and a key nobody knows leaves a sender no way to craft a
// changed body with the original's hash (with a CRC anyone can).
var hashKey = func() *[hashKeyWords]uint32 {
	var k [hashKeyWords]uint32
	for i := range k {
		k[i] = rand.Uint32()
	}
	return &k
}()

// hashLenKey folds the body length in, so bodies that differ only by
// trailing zero bytes (NH pads with zeros) hash apart; odd, so distinct
// lengths never map to one product.
var hashLenKey = rand.Uint64() | 1

// Hash returns the content hash Admit compares for duplicates. It is NH
// (the UMAC/VMAC inner hash) over the body's little-endian 32-bit words
// w, zero-padded to whole 32-byte blocks, with the per-process random key
// k:
//
//	sum over even i of uint64(w[i]+k[i]) * uint64(w[i+1]+k[i+1])   (mod 2^64)
//
// plus the length times an odd key. For any two different bodies of one
// length the odds of equal hashes are at most 2^-32 over the key (NH is
// 2^-32 almost-universal), which is what the CRC-32C it replaced gave
// against a random change, and a change of one value (up to 4 bytes in one
// word) needs the other word of its pair plus key to be 0 mod 2^32.
//
// A collision cannot make a result wrong: identical bodies always hash
// alike, so the only error is a changed resend taken for an identical one,
// and that is answered DUPLICATE and not applied (the first copy was); what
// is lost, with those odds, is the INVALID that would have named the
// misbehaving sender.
//
// Why not a CRC: every DATA and RESULT frame a switch or rank accepts is
// hashed, and CRC-32C is a chain of dependent instructions the frame's
// cache misses stall. NH is four vector instructions per 32 bytes: in the
// SINGLE lab's ALLREDUCE (make bench part 3), leaving the hash out
// altogether cut the switch's user time per DATA frame by a fifth, and NH
// keeps most of that (BenchmarkHash: CRC-32C against NH per body size).
func Hash(b []byte) uint64 {
	if len(b) > 4*hashKeyWords {
		return hashChunked(b)
	}
	return nh(b, hashKey[:]) + uint64(len(b))*hashLenKey
}

// hashChunked hashes a body longer than the key (never a valid PRISM
// body, but Admit must not care) as a polynomial in its chunks' NH values.
func hashChunked(b []byte) uint64 {
	var h uint64
	n := len(b)
	for len(b) > 0 {
		c := min(len(b), 4*hashKeyWords)
		h = h*hashLenKey + nh(b[:c], hashKey[:])
		b = b[c:]
	}
	return h + uint64(n)*hashLenKey
}

// nh is NH of b under key (len(key) >= the words of b rounded up to 8):
// the vector kernel for whole 32-byte blocks, nhGeneric for the rest.
func nh(b []byte, key []uint32) uint64 {
	blocks := len(b) / 32
	var h uint64
	if blocks > 0 && haveNHKernel {
		h = nhBlocks(b[:32*blocks], key)
		b, key = b[32*blocks:], key[8*blocks:]
	}
	return h + nhGeneric(b, key)
}

// nhGeneric is NH in plain Go, the definition the kernel must match: a
// trailing partial word, and a trailing unpaired word, are zero-padded.
func nhGeneric(b []byte, key []uint32) uint64 {
	var h uint64
	i := 0
	for ; len(b) >= 8; b, i = b[8:], i+2 {
		x := binary.LittleEndian.Uint32(b) + key[i]
		y := binary.LittleEndian.Uint32(b[4:]) + key[i+1]
		h += uint64(x) * uint64(y)
	}
	if len(b) > 0 {
		var pad [8]byte
		copy(pad[:], b)
		x := binary.LittleEndian.Uint32(pad[:]) + key[i]
		y := binary.LittleEndian.Uint32(pad[4:]) + key[i+1]
		h += uint64(x) * uint64(y)
	}
	return h
}

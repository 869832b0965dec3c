package stream

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveNHKernel: the AVX2 kernel runs where the CPU has AVX2 (a variable so
// tests can compare it with nhGeneric).
var haveNHKernel = cpu.X86.HasAVX2

//go:noescape
func nhAVX2(b *byte, key *uint32, blocks int) uint64

// nhBlocks is NH of b (whole 32-byte blocks) under key, four word pairs
// per instruction.
func nhBlocks(b []byte, key []uint32) uint64 {
	blocks := len(b) / 32
	_ = key[8*blocks-1] // the kernel reads 8 key words per block
	return nhAVX2(unsafe.SliceData(b), unsafe.SliceData(key), blocks)
}

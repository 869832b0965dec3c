// This file owns the AVX2 kernels of ArrivalVector: FP32_ARRIVAL adds each
// element independently, so eight lanes at a time give the same bits as the
// scalar loop (one IEEE binary32 addition per element, state as the first
// operand) at a tenth of the cost. The bulk of a FP32_ARRIVAL switch's
// arithmetic is these three loops.

package kulisch

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var haveAVX2 = cpu.X86.HasAVX2

//go:noescape
func addFP32AVX2(s *float32, v *byte, n int)

//go:noescape
func putFP32AVX2(dst *byte, s *float32, n int)

//go:noescape
func fillAVX2(s *float32, n int, bits uint32)

// addFP32Bulk adds the leading multiple of 8 of s and returns how many
// elements it did; the caller does the rest. vals holds 4*len(s) bytes.
func addFP32Bulk(s []float32, vals []byte) int {
	n := len(s) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	addFP32AVX2(unsafe.SliceData(s), unsafe.SliceData(vals), n)
	return n
}

// putFP32Bulk writes the leading multiple of 8 of s, NaN made canonical,
// into dst (4*len(s) bytes) and returns how many it wrote.
func putFP32Bulk(dst []byte, s []float32) int {
	n := len(s) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	putFP32AVX2(unsafe.SliceData(dst), unsafe.SliceData(s), n)
	return n
}

// fillBulk sets the leading multiple of 8 of s to bits and returns how
// many it set.
func fillBulk(s []float32, bits uint32) int {
	n := len(s) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	fillAVX2(unsafe.SliceData(s), n, bits)
	return n
}

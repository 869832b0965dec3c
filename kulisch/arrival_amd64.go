// This file owns the package's vector kernels (AVX2, one AVX-512).
// ArrivalVector's: FP32_ARRIVAL adds each element independently, so eight
// lanes at a time give the same
// bits as the scalar loop (one IEEE binary32 addition per element, state as
// the first operand) at a tenth of the cost; the bulk of a FP32_ARRIVAL
// switch's arithmetic is these three loops. Vector's lane: the FP32 add
// (with its TwoSum exactness check) and the FP32 output of lane-only
// elements, four float64 lanes at a time, which took a KULISCH_FIXED
// switch's exact add from 5.1 to 1.8 us per two DATA frames
// (BenchmarkAbsorbKulischFixed); where the CPU has AVX-512 the lane add
// takes eight at a time (1.6 x BenchmarkAddFP32Lane). KULISCH_F64's lane
// copy and binary64 lane add are here too.

package kulisch

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var haveAVX2 = cpu.X86.HasAVX2

// haveAVX512 selects the eight-wide lane add: AVX-512 F, DQ (VANDPD on
// Z registers) and VL (VPCMPD on Y registers), and BMI2 (PDEP).
var haveAVX512 = haveAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && cpu.X86.HasBMI2

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

//go:noescape
func laneAddAVX512(lane *float64, vals *byte, flags *uint8, n int, lim float64) int

//go:noescape
func laneAddAVX2(lane *float64, vals *byte, flags *uint8, n int, lim float64) int

// laneAddBulk adds the leading binary32 values of vals (4*len(lane) bytes)
// to the Vector lanes four at a time while a whole group stays in its
// lanes (exact sums below lim, no infinity or NaN), setting fNonNegZero
// for every term that is not -0, as the scalar loop does. It returns how
// many it added, a multiple of 4: the group after them, if any, is the
// caller's.
func laneAddBulk(lane []float64, vals []byte, flags []uint8, lim float64) int {
	if haveAVX512 && len(lane) >= 8 {
		k := laneAddAVX512(unsafe.SliceData(lane), unsafe.SliceData(vals), unsafe.SliceData(flags), len(lane)&^7, lim)
		if k < len(lane)&^7 || len(lane)&7 < 4 {
			return k // stopped at a group, or fewer than four left
		}
		lane, vals, flags = lane[k:], vals[4*k:], flags[k:]
		return k + laneAddAVX2(unsafe.SliceData(lane), unsafe.SliceData(vals), unsafe.SliceData(flags), 4, lim)
	}
	n := len(lane) &^ 3
	if n == 0 {
		return 0
	}
	return laneAddAVX2(unsafe.SliceData(lane), unsafe.SliceData(vals), unsafe.SliceData(flags), n, lim)
}

//go:noescape
func laneOutAVX2(dst *byte, lane *float64, flags, nlo, hi *uint8, n int, special uint32) int

// laneSpecial is the byte mask of the flags that make an element not
// lane-only (infinities, NaN, overflow), four copies for the kernels.
const laneSpecial = uint32(fNaN|fPosInf|fNegInf|fHuge) * 0x01010101

// laneOutBulk writes the leading lane-only elements of a Vector range
// (lane, flags and bounds slices of one length; dst 4 bytes each) as
// rounded FP32, four at a time, and returns how many it wrote, a multiple
// of 4: the group after them, if any, is the caller's.
func laneOutBulk(dst []byte, lane []float64, flags, nlo, hi []uint8) int {
	return laneRowsBulk(laneOutAVX2, 4, dst, lane, flags, nlo, hi)
}

// laneRowsBulk runs kernel (laneOutAVX2, laneCopyAVX2: stop at the first
// group of four that is not lane-only, write width bytes per element) on
// the leading multiple of 4 of a Vector range.
func laneRowsBulk(kernel func(dst *byte, lane *float64, flags, nlo, hi *uint8, n int, special uint32) int,
	width int, dst []byte, lane []float64, flags, nlo, hi []uint8) int {
	n := len(lane) &^ 3
	if n == 0 {
		return 0
	}
	_ = dst[width*n-1]
	_, _, _ = flags[n-1], nlo[n-1], hi[n-1]
	return kernel(unsafe.SliceData(dst), unsafe.SliceData(lane), unsafe.SliceData(flags),
		unsafe.SliceData(nlo), unsafe.SliceData(hi), n, laneSpecial)
}

//go:noescape
func laneExactAVX2(lane *float64, flags, nlo, hi *uint8, n int, special uint32) int

// laneExactBulk counts the leading lane-only elements of a Vector range
// (lane, flags and bounds slices of one length) that FP32 holds exactly,
// four at a time, and returns how many, a multiple of 4: the group after
// them, if any, is the caller's. It is laneOutBulk's test without the
// output, for FP32Exact.
func laneExactBulk(lane []float64, flags, nlo, hi []uint8) int {
	n := len(lane) &^ 3
	if n == 0 {
		return 0
	}
	return laneExactAVX2(unsafe.SliceData(lane), unsafe.SliceData(flags), unsafe.SliceData(nlo), unsafe.SliceData(hi), n, laneSpecial)
}

//go:noescape
func laneAdd64AVX2(lane *float64, vals *byte, flags *uint8, n int, lim float64) int

// laneAdd64Bulk adds the leading binary64 values of vals (8*len(lane)
// bytes) to the Vector lanes four at a time while a whole group is finite,
// nonzero and stays in its lanes, setting fNonNegZero for each. It returns
// how many it added, a multiple of 4: the group after them, if any, is the
// caller's.
func laneAdd64Bulk(lane []float64, vals []byte, flags []uint8, lim float64) int {
	n := len(lane) &^ 3
	if n == 0 {
		return 0
	}
	_ = vals[8*n-1]
	_ = flags[n-1]
	return laneAdd64AVX2(unsafe.SliceData(lane), unsafe.SliceData(vals), unsafe.SliceData(flags), n, lim)
}

//go:noescape
func laneCopyAVX2(dst *byte, lane *float64, flags, nlo, hi *uint8, n int, special uint32) int

// laneCopyBulk writes the leading lane-only elements of a Vector range
// (lane, flags and bounds slices of one length; dst 8 bytes each) as
// binary64, four at a time, and returns how many it wrote, a multiple of
// 4: the group after them, if any, is the caller's.
func laneCopyBulk(dst []byte, lane []float64, flags, nlo, hi []uint8) int {
	return laneRowsBulk(laneCopyAVX2, 8, dst, lane, flags, nlo, hi)
}

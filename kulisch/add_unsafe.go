// This file owns the one unsafe concern of the package: the element-wise
// add loops of Vector. Bounds are checked once per batch (span and the
// length checks of the callers), then the loop addresses a row's two
// touched digits without per-value bounds checks: measured on the 363-value
// FP32 packet this takes the exact add from 3.5 to 2.4 ns per value.

package kulisch

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// addFP32Rows adds n binary32 values, read from vals (already checked to
// hold 4n bytes, or 2n for bf16 with the pattern in the high half), to rows
// first.. of v. bf16 selects 16-bit patterns widened by <<16.
func (v *Vector) addFP32Rows(first, n int, vals []byte, bf16 bool) {
	if n == 0 {
		return
	}
	if bf16 || !haveAVX2 {
		v.addFP32Scalar(first, n, vals, bf16)
		return
	}
	// The AVX2 kernel takes groups of four while all four stay in the
	// lane; a group it stops at (a spill, an infinity, a NaN) goes through
	// the scalar loop, then the kernel resumes.
	for j := 0; j < n; {
		k := laneAddBulk(v.lane[first+j:first+n], vals[4*j:4*n], v.flags[first+j:first+n], v.laneLim)
		j += k
		if m := min(4, n-j); m > 0 {
			v.addFP32Scalar(first+j, m, vals[4*j:4*(j+m)], false)
			j += m
		}
	}
}

// addFP32Scalar is addFP32Rows one value at a time.
func (v *Vector) addFP32Scalar(first, n int, vals []byte, bf16 bool) {
	fl := v.flags[first : first+n]
	lane := v.lane[first : first+n : first+n]
	lo, hi := v.nlo[first:first+n:first+n], v.hi[first:first+n:first+n]
	_ = v.digits[(first+n)*v.d-1] // the last row exists
	base := unsafe.Pointer(&v.digits[first*v.d])
	stride := uintptr(v.d) * 8
	vp := unsafe.Pointer(unsafe.SliceData(vals))
	lim := v.laneLim
	var off uintptr
	for j := range fl {
		var b uint32
		if bf16 {
			b = uint32(binary.LittleEndian.Uint16((*[2]byte)(unsafe.Add(vp, 2*j))[:])) << 16
		} else {
			b = binary.LittleEndian.Uint32((*[4]byte)(unsafe.Add(vp, 4*j))[:])
		}
		e := (b >> 23) & 0xFF
		if e == 0xFF {
			fl[j] |= specialFlag(b&0x7FFFFF != 0, b>>31 != 0)
			off += stride
			continue
		}
		z := b ^ 0x80000000 // zero only for -0
		fl[j] |= uint8((z | -z) >> 31)
		// The lane first: a float64 holds the sum exactly while the
		// error of the addition (TwoSum) is zero.
		a, x := lane[j], float64(math.Float32frombits(b))
		if s := a + x; math.Abs(s) < lim {
			bb := s - a
			if (a-(s-bb))+(x-bb) == 0 {
				lane[j] = s
				off += stride
				continue
			}
		}
		// value = m * 2^s units with s = max(e-1, 0), m = fraction plus
		// the hidden bit for normal numbers; m<<(s%32) spans two digits.
		m := uint64(b&0x7FFFFF | ((e+0xFF)>>8)<<23)
		sh := e - 1 + (e-1)>>31
		neg := -int64(b >> 31)
		x64 := m << (sh & 31)
		q := (*[2]int64)(unsafe.Add(base, off+uintptr(sh>>5)*8))
		q[0] += (int64(x64&digitMask) ^ neg) - neg
		q[1] += (int64(x64>>32) ^ neg) - neg
		lo[j] = max(lo[j], ^uint8(sh>>5))
		hi[j] = max(hi[j], uint8(sh>>5+1))
		off += stride
	}
}

// addFP16Rows adds n binary16 values (vals holds 2n bytes).
func (v *Vector) addFP16Rows(first, n int, vals []byte) {
	if n == 0 {
		return
	}
	fl := v.flags[first : first+n]
	lo, hi := v.nlo[first:first+n:first+n], v.hi[first:first+n:first+n]
	_ = v.digits[(first+n)*v.d-1]
	base := unsafe.Pointer(&v.digits[first*v.d])
	stride := uintptr(v.d) * 8
	vp := unsafe.Pointer(unsafe.SliceData(vals))
	var off uintptr
	for j := range fl {
		h := uint32(binary.LittleEndian.Uint16((*[2]byte)(unsafe.Add(vp, 2*j))[:]))
		e := (h >> 10) & 0x1F
		if e == 0x1F {
			fl[j] |= specialFlag(h&0x3FF != 0, h>>15 != 0)
			off += stride
			continue
		}
		// Normal: m*2^(e-25) = m*2^(e+124) units; subnormal: f*2^125.
		m := uint64(h&0x3FF | ((e+0x1F)>>5)<<10)
		sh := e + 124 + ((e+0x1F)>>5 ^ 1)
		neg := -int64(h >> 15)
		x := m << (sh & 31)
		q := (*[2]int64)(unsafe.Add(base, off+uintptr(sh>>5)*8))
		q[0] += (int64(x&digitMask) ^ neg) - neg
		q[1] += (int64(x>>32) ^ neg) - neg
		lo[j] = max(lo[j], ^uint8(sh>>5))
		hi[j] = max(hi[j], uint8(sh>>5+1))
		z := h ^ 0x8000
		fl[j] |= uint8((z | -z) >> 31)
		off += stride
	}
}

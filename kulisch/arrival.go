// This file owns ArrivalVector, the FP32_ARRIVAL bank: one FP32 state per
// element, every contribution added with round to nearest, ties to even, in
// the order the engine admits it.

package kulisch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ArrivalVector is a bank of n FP32_ARRIVAL accumulators. Its result depends
// on arrival order and tree shape (see the package documentation). It is
// not safe for concurrent use.
type ArrivalVector struct {
	s []float32
}

// negZero is the empty state: -0 is the identity of IEEE addition, so an
// element whose only inputs were -0 stays -0 and any other input replaces
// it exactly.
var negZero = math.Float32frombits(0x80000000)

// NewArrivalVector returns n FP32_ARRIVAL accumulators, all empty (-0).
func NewArrivalVector(n int) (*ArrivalVector, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: length %d", ErrRange, n)
	}
	a := &ArrivalVector{s: make([]float32, n)}
	for i := range a.s {
		a.s[i] = negZero
	}
	return a, nil
}

// Len is the number of accumulators.
func (a *ArrivalVector) Len() int { return len(a.s) }

// Reset empties accumulator i.
func (a *ArrivalVector) Reset(i int) { a.s[i] = negZero }

// ResetRange empties accumulators first..first+n-1.
func (a *ArrivalVector) ResetRange(first, n int) error {
	if first < 0 || n < 0 || first+n > len(a.s) {
		return ErrRange
	}
	r := a.s[first : first+n]
	for i := fillBulk(r, 0x80000000); i < len(r); i++ {
		r[i] = negZero
	}
	return nil
}

func (a *ArrivalVector) span(first, n int) ([]float32, error) {
	if first < 0 || first+n > len(a.s) {
		return nil, fmt.Errorf("%w: %d+%d > %d", ErrRange, first, n, len(a.s))
	}
	return a.s[first : first+n], nil
}

// AddFP32LE adds packed little-endian binary32 values, each rounded (RNE)
// into its element's state. Go's float32 addition is one IEEE binary32
// addition with round to nearest even, subnormals kept.
func (a *ArrivalVector) AddFP32LE(first int, values []byte) error {
	if len(values)%4 != 0 {
		return ErrLength
	}
	s, err := a.span(first, len(values)/4)
	if err != nil {
		return err
	}
	for j := addFP32Bulk(s, values); j < len(s); j++ {
		s[j] += math.Float32frombits(binary.LittleEndian.Uint32(values[4*j:]))
	}
	return nil
}

// AddFP16LE converts each binary16 value exactly to binary32, then adds it.
func (a *ArrivalVector) AddFP16LE(first int, values []byte) error {
	if len(values)%2 != 0 {
		return ErrLength
	}
	s, err := a.span(first, len(values)/2)
	if err != nil {
		return err
	}
	for j := range s {
		s[j] += math.Float32frombits(FP16ToFP32(binary.LittleEndian.Uint16(values[2*j:])))
	}
	return nil
}

// AddBF16LE converts each bfloat16 value exactly to binary32, then adds it.
func (a *ArrivalVector) AddBF16LE(first int, values []byte) error {
	if len(values)%2 != 0 {
		return ErrLength
	}
	s, err := a.span(first, len(values)/2)
	if err != nil {
		return err
	}
	for j := range s {
		s[j] += math.Float32frombits(uint32(binary.LittleEndian.Uint16(values[2*j:])) << 16)
	}
	return nil
}

// AddINT8 converts each int8 exactly to binary32, then adds it.
func (a *ArrivalVector) AddINT8(first int, values []byte) error {
	s, err := a.span(first, len(values))
	if err != nil {
		return err
	}
	for j := range s {
		s[j] += float32(int8(values[j]))
	}
	return nil
}

// Add adds one group of packed values of concrete format f (an input or
// an AUTO-encoded FP32 partial). KULISCH has no meaning here: ErrFormat.
func (a *ArrivalVector) Add(first int, f Format, values []byte) error {
	switch f {
	case INT8:
		return a.AddINT8(first, values)
	case FP16:
		return a.AddFP16LE(first, values)
	case BF16:
		return a.AddBF16LE(first, values)
	case FP32:
		return a.AddFP32LE(first, values)
	}
	return fmt.Errorf("%w: %v under FP32_ARRIVAL", ErrFormat, f)
}

// RoundFP32 returns the FP32 state of element i, NaN made canonical. It
// never fails; the error keeps the signature of Vector.RoundFP32.
func (a *ArrivalVector) RoundFP32(i int) (uint32, error) {
	b := math.Float32bits(a.s[i])
	if b&0x7F800000 == 0x7F800000 && b&0x7FFFFF != 0 {
		return NaN32, nil
	}
	return b, nil
}

// Round returns element i in f. FP32_ARRIVAL results are FP32 or an AUTO
// re-encoding of it, so f other than FP32 must hold the state exactly
// (ErrNotLossless, or ErrNotInt8 for INT8).
func (a *ArrivalVector) Round(i int, f Format) (uint32, error) {
	b, _ := a.RoundFP32(i)
	switch f {
	case FP32:
		return b, nil
	case INT8:
		x := a.s[i]
		// The range test also rejects NaN and infinities.
		if !(x >= -128 && x <= 127) || x != float32(int32(x)) {
			return 0, ErrNotInt8
		}
		return uint32(uint8(int8(int32(x)))), nil
	case FP16:
		h, ok := fp32ToFP16Exact(b)
		if !ok {
			return 0, ErrNotLossless
		}
		return uint32(h), nil
	case BF16:
		if b&0xFFFF != 0 {
			return 0, ErrNotLossless
		}
		return b >> 16, nil
	}
	return 0, ErrFormat
}

// fp32ToFP16Exact converts b to binary16 when that is exact (NaN becomes the
// canonical binary16 NaN).
func fp32ToFP16Exact(b uint32) (uint16, bool) {
	sign := uint16(b>>16) & 0x8000
	e := int(b>>23) & 0xFF
	f := b & 0x7FFFFF
	switch {
	case e == 0xFF:
		if f != 0 {
			return NaN16, true
		}
		return sign | 0x7C00, true
	case e == 0 && f == 0:
		return sign, true
	case e == 0:
		return 0, false // binary32 subnormals are below binary16's range
	}
	x := e - 127
	m := f | 1<<23
	switch {
	case x > 15:
		return 0, false
	case x >= -14:
		if m&(1<<13-1) != 0 {
			return 0, false
		}
		return sign | uint16(x+15)<<10 | uint16(f>>13), true
	case x >= -24:
		sh := uint(13 + (-14 - x)) // subnormal: quantum 2^-24
		if m&(1<<sh-1) != 0 {
			return 0, false
		}
		return sign | uint16(m>>sh), true
	}
	return 0, false
}

// AutoSet returns the formats that hold element i's FP32 state exactly.
func (a *ArrivalVector) AutoSet(i int) (FormatSet, error) {
	b, _ := a.RoundFP32(i)
	s := FormatSet(1 << FP32)
	if b&0xFFFF == 0 {
		s |= 1 << BF16
	}
	if _, ok := fp32ToFP16Exact(b); ok {
		s |= 1 << FP16
	}
	if b != 0x80000000 {
		if _, err := a.Round(i, INT8); err == nil {
			s |= 1 << INT8
		}
	}
	return s, nil
}

// PutValues writes elements first..first+count-1 in f (values only) and
// returns the bytes written.
func (a *ArrivalVector) PutValues(dst []byte, first, count int, f Format) (int, error) {
	if first < 0 || count < 0 || first+count > len(a.s) {
		return 0, ErrRange
	}
	w := f.Width(0)
	if w == 0 || f == KULISCH || f == KULISCH_F64 {
		return 0, ErrFormat
	}
	if len(dst) < count*w {
		return 0, ErrLength
	}
	if f == FP32 {
		// The common case (every RESULT of an FP32 job) without the
		// per-element format switch: it is most of a switch's work per frame.
		d := dst[:count*4]
		src := a.s[first : first+count]
		for k := putFP32Bulk(d, src); k < len(src); k++ {
			b := math.Float32bits(src[k])
			if b&0x7FFFFFFF > 0x7F800000 {
				b = NaN32
			}
			binary.LittleEndian.PutUint32(d[4*k:], b)
		}
		return count * 4, nil
	}
	for k := 0; k < count; k++ {
		r, err := a.Round(first+k, f)
		if err != nil {
			return 0, err
		}
		putBits(dst[k*w:], f, r)
	}
	return count * w, nil
}

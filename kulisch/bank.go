// This file owns the Bank interface the engine drives for either policy,
// the per-group dispatch, and Accumulator, the single-value convenience
// type.

package kulisch

import (
	"encoding/binary"
	"fmt"
)

// Bank is what the engine needs from either accumulator policy: element-wise
// adds of one NumberGroup's packed values, reads in a concrete format, the
// AUTO lossless set, and resets. *Vector (KULISCH_FIXED) and *ArrivalVector
// (FP32_ARRIVAL) implement it.
type Bank interface {
	Len() int
	// Add adds count packed values of concrete format f to positions
	// first.. (count = len(values)/width).
	Add(first int, f Format, values []byte) error
	Reset(i int)
	ResetRange(first, n int) error
	// Round returns element i in f (bit pattern in the low bits).
	Round(i int, f Format) (uint32, error)
	RoundFP32(i int) (uint32, error)
	AutoSet(i int) (FormatSet, error)
	PutValues(dst []byte, first, count int, f Format) (int, error)
}

var (
	_ Bank = (*Vector)(nil)
	_ Bank = (*ArrivalVector)(nil)
)

// NewBank returns the bank for policy p: a Vector of width w for
// KULISCH_FIXED, an ArrivalVector (w ignored) for FP32_ARRIVAL.
func NewBank(p Policy, n, w int) (Bank, error) {
	switch p {
	case KulischFixed:
		return NewVector(n, w)
	case FP32Arrival:
		return NewArrivalVector(n)
	}
	return nil, fmt.Errorf("%w: %v", ErrPolicy, p)
}

// Add adds one group of packed values of concrete format f: inputs, or a
// child's partial group (KULISCH wire values or AUTO-chosen formats, all
// exact).
func (v *Vector) Add(first int, f Format, values []byte) error {
	switch f {
	case INT8:
		return v.AddINT8(first, values)
	case FP16:
		return v.AddFP16LE(first, values)
	case BF16:
		return v.AddBF16LE(first, values)
	case FP32:
		return v.AddFP32LE(first, values)
	case KULISCH:
		return v.MergeKulisch(first, values)
	}
	return fmt.Errorf("%w: %v", ErrFormat, f)
}

// Accumulator is one exact accumulator of width W, for simple uses and
// tests. The zero value is not usable; call NewAccumulator.
type Accumulator struct {
	v Vector
}

// NewAccumulator returns an empty (-0) accumulator of width w bits.
func NewAccumulator(w int) (*Accumulator, error) {
	v, err := NewVector(1, w)
	if err != nil {
		return nil, err
	}
	return &Accumulator{v: *v}, nil
}

// Width is W in bits.
func (a *Accumulator) Width() int { return a.v.w }

// Reset empties the accumulator.
func (a *Accumulator) Reset() { a.v.Reset(0) }

// AddFP32 adds a binary32 bit pattern exactly.
func (a *Accumulator) AddFP32(b uint32) {
	var buf [4]byte
	binary.LittleEndian.PutUint32(buf[:], b)
	_ = a.v.AddFP32LE(0, buf[:])
}

// AddFP16 adds a binary16 bit pattern exactly.
func (a *Accumulator) AddFP16(h uint16) {
	var buf [2]byte
	binary.LittleEndian.PutUint16(buf[:], h)
	_ = a.v.AddFP16LE(0, buf[:])
}

// AddBF16 adds a bfloat16 bit pattern exactly.
func (a *Accumulator) AddBF16(h uint16) {
	var buf [2]byte
	binary.LittleEndian.PutUint16(buf[:], h)
	_ = a.v.AddBF16LE(0, buf[:])
}

// AddINT8 adds an int8 exactly.
func (a *Accumulator) AddINT8(x int8) {
	buf := [1]byte{byte(x)}
	_ = a.v.AddINT8(0, buf[:])
}

// MergeWire adds one Kulisch wire value of this width (1 + W/8 bytes).
func (a *Accumulator) MergeWire(b []byte) error {
	if len(b) != WireSize(a.v.w) {
		return ErrLength
	}
	return a.v.MergeKulisch(0, b)
}

// Merge adds another accumulator's exact value (same width).
func (a *Accumulator) Merge(o *Accumulator) error {
	var buf [1 + MaxWidth/8]byte
	ws := WireSize(o.v.w)
	if err := o.v.PutWire(buf[:ws], 0); err != nil {
		return err
	}
	return a.MergeWire(buf[:ws])
}

// State returns the wire state (ErrOverflow if the sum does not fit W).
func (a *Accumulator) State() (State, error) { return a.v.State(0) }

// Overflow reports whether the finite sum does not fit W.
func (a *Accumulator) Overflow() bool { return a.v.Overflow(0) }

// AppendWire appends the wire value.
func (a *Accumulator) AppendWire(dst []byte) ([]byte, error) { return a.v.AppendWire(dst, 0) }

// PutWire writes the wire value into dst[:1+W/8].
func (a *Accumulator) PutWire(dst []byte) error { return a.v.PutWire(dst, 0) }

// Round rounds once to f (FP32, FP16, BF16) or converts to INT8.
func (a *Accumulator) Round(f Format) (uint32, error) { return a.v.Round(0, f) }

// RoundFP32 rounds once to binary32.
func (a *Accumulator) RoundFP32() (uint32, error) { return a.v.RoundFP32(0) }

// RoundFP16 rounds once to binary16.
func (a *Accumulator) RoundFP16() (uint16, error) { return a.v.RoundFP16(0) }

// RoundBF16 rounds once to bfloat16.
func (a *Accumulator) RoundBF16() (uint16, error) { return a.v.RoundBF16(0) }

// INT8 returns the value as an int8 if integral and in range.
func (a *Accumulator) INT8() (int8, error) { return a.v.INT8(0) }

// AutoSet returns the formats that hold the value losslessly.
func (a *Accumulator) AutoSet() (FormatSet, error) { return a.v.AutoSet(0) }

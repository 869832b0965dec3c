// This file owns format and policy codes, widths, the width rule, exact
// scalar conversions between the small float formats, and the policy tuple
// rules shared by capability records and STAGE validation.

package kulisch

import (
	"errors"
	"fmt"
	"math/bits"
)

// Format is a NumberGroup format code (docs/protocol.md section 6). The zero
// value is invalid.
type Format uint8

// Format codes; the parser uses the same numbers in the descriptor's top
// four bits.
const (
	INT8    Format = 1
	FP16    Format = 2
	BF16    Format = 3
	FP32    Format = 4
	KULISCH Format = 5
	AUTO    Format = 6 // policy only, never in a descriptor
)

func (f Format) String() string {
	switch f {
	case INT8:
		return "INT8"
	case FP16:
		return "FP16"
	case BF16:
		return "BF16"
	case FP32:
		return "FP32"
	case KULISCH:
		return "KULISCH"
	case AUTO:
		return "AUTO"
	case KULISCH_SCALED:
		return "KULISCH_SCALED"
	case KULISCH_F64:
		return "KULISCH_F64"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Concrete reports whether f may appear in a group descriptor.
func (f Format) Concrete() bool { return f >= INT8 && f <= KULISCH }

// Width is the byte width of one value of format f; w is the Kulisch width
// in bits (only used for KULISCH). It is 0 for AUTO and invalid codes.
func (f Format) Width(w int) int {
	switch f {
	case INT8:
		return 1
	case FP16, BF16:
		return 2
	case FP32:
		return 4
	case KULISCH:
		return WireSize(w)
	case KULISCH_F64:
		return F64Size
	}
	return 0
}

// Policy is an accumulator policy ID. The zero value and 0x02 are invalid.
type Policy uint8

const (
	// FP32Arrival (FP32_ARRIVAL) rounds every contribution into an FP32
	// state in arrival order.
	FP32Arrival Policy = 0x01
	// KulischFixed (KULISCH_FIXED) keeps the exact sum in a fixed-width
	// Kulisch accumulator and rounds once at final output.
	KulischFixed Policy = 0x03
)

func (p Policy) String() string {
	switch p {
	case FP32Arrival:
		return "FP32_ARRIVAL"
	case KulischFixed:
		return "KULISCH_FIXED"
	}
	return fmt.Sprintf("Policy(%#02x)", uint8(p))
}

// Valid reports whether p is an assigned policy ID (0x02 is not).
func (p Policy) Valid() bool { return p == FP32Arrival || p == KulischFixed }

const (
	// MinWidth and MaxWidth bound the Kulisch width W in bits
	// (docs/protocol.md 5.1); the wire format word holds W/8 in 12 bits.
	MinWidth = 64
	MaxWidth = 4096
	// ScaleExp: the Kulisch integer counts units of 2^-ScaleExp, the FP32
	// subnormal quantum, the smallest step of every supported input.
	ScaleExp = 149
	// FP32TermBits is the signed width of one FP32-domain term:
	// (2^24-1)*2^253 units < 2^277, plus a sign bit.
	FP32TermBits = 278
)

// Errors. Typed errors below wrap these sentinels.
var (
	ErrWidth       = errors.New("kulisch: invalid Kulisch width")
	ErrFormat      = errors.New("kulisch: unsupported format")
	ErrPolicy      = errors.New("kulisch: invalid accumulator policy")
	ErrTuple       = errors.New("kulisch: invalid policy tuple")
	ErrRange       = errors.New("kulisch: position range outside the vector")
	ErrLength      = errors.New("kulisch: value bytes not a whole number of values")
	ErrWire        = errors.New("kulisch: malformed Kulisch wire value")
	ErrOverflow    = errors.New("kulisch: exact sum does not fit the Kulisch width")
	ErrNotInt8     = errors.New("kulisch: value is not an integer in -128..127")
	ErrNotLossless = errors.New("kulisch: value has no lossless encoding in the format")
	ErrBudget      = errors.New("kulisch: packet budget too small for one value")
)

// WireSize is the byte size of one Kulisch value of width w bits.
func WireSize(w int) int { return 1 + w/8 }

// ValidWidth checks that w is a legal Kulisch width.
func ValidWidth(w int) error {
	if w < MinWidth || w > MaxWidth || w%8 != 0 {
		return fmt.Errorf("%w: %d (multiple of 8 in %d..%d)", ErrWidth, w, MinWidth, MaxWidth)
	}
	return nil
}

func ceilLog2(n uint32) int {
	if n <= 1 {
		return 0
	}
	return bits.Len32(n - 1)
}

// RequiredBits is 278 + ceil(log2 terms), the sufficient signed width for
// terms FP32-domain terms (0 and 1 terms both need 278).
func RequiredBits(terms uint32) int { return FP32TermBits + ceilLog2(terms) }

// RequiredWidth is RequiredBits rounded up to a legal width (multiple of 8):
// the smallest W a STAGE for terms FP32 or BF16 contributions may use.
func RequiredWidth(terms uint32) int { return MinWidthFor(FP32, terms) }

// MinWidthFor is the smallest legal width that holds the exact sum of terms
// values of input format in: each INT8 term is at most 2^7 in magnitude
// (2^156 units, 157 signed bits), each FP16 term below 2^16 (166 signed
// bits), each FP32 or BF16 term below 2^128 (278 signed bits). It returns 0
// for formats that are not inputs.
func MinWidthFor(in Format, terms uint32) int {
	var b int
	switch in {
	case INT8:
		b = 157
	case FP16:
		b = 166
	case BF16, FP32:
		b = FP32TermBits
	default:
		return 0
	}
	b += ceilLog2(terms)
	b = (b + 7) &^ 7
	if b < MinWidth {
		b = MinWidth
	}
	return b
}

// CheckCapacity reports whether width w is legal and holds every exact sum
// of terms inputs of format in.
func CheckCapacity(w int, in Format, terms uint32) error {
	if err := ValidWidth(w); err != nil {
		return err
	}
	need := MinWidthFor(in, terms)
	if need == 0 {
		return fmt.Errorf("%w: %v is not an input format", ErrFormat, in)
	}
	if w < need {
		return fmt.Errorf("%w: W=%d < %d for %d %v terms", ErrOverflow, w, need, terms, in)
	}
	return nil
}

// Canonical NaN patterns.
const (
	NaN32 uint32 = 0x7FC00000
	NaN16 uint16 = 0x7E00
	NaNBF uint16 = 0x7FC0
)

// FP16ToFP32 converts a binary16 pattern to the binary32 pattern of the same
// value, exactly (every binary16 value is a binary32 value). NaNs become the
// canonical NaN.
func FP16ToFP32(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1F
	f := uint32(h & 0x3FF)
	switch {
	case e == 0x1F:
		if f != 0 {
			return NaN32
		}
		return sign | 0x7F800000
	case e == 0:
		if f == 0 {
			return sign
		}
		// Subnormal f*2^-24: normalise into binary32.
		l := bits.Len32(f) // 1..10
		exp := uint32(l-1) - 24 + 127
		return sign | exp<<23 | (f<<(24-uint32(l)))&0x7FFFFF
	}
	return sign | (e-15+127)<<23 | f<<13
}

// BF16ToFP32 widens a bfloat16 pattern; NaNs become the canonical NaN.
func BF16ToFP32(b uint16) uint32 {
	x := uint32(b) << 16
	if x&0x7F800000 == 0x7F800000 && x&0x7FFFFF != 0 {
		return NaN32
	}
	return x
}

// INT8ToFP32 converts an int8 exactly.
func INT8ToFP32(v int8) uint32 {
	if v == 0 {
		return 0
	}
	var sign uint32
	m := int32(v)
	if m < 0 {
		sign = 1 << 31
		m = -m
	}
	l := bits.Len32(uint32(m))
	return sign | uint32(l-1+127)<<23 | (uint32(m)<<(24-uint32(l)))&0x7FFFFF
}

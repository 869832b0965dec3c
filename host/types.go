// This file owns the element types a rank passes in and their formats.

package host

import (
	"fmt"
	"unsafe"

	"github.com/prismd/prismd/parser"
)

// Float16 is an IEEE binary16 value as its bit pattern.
type Float16 uint16

// BFloat16 is a bfloat16 value as its bit pattern (the top half of a binary32).
type BFloat16 uint16

// elems is a typed slice viewed as wire bytes.
type elems struct {
	format parser.Format
	n      int
	bytes  []byte // aliases the caller's slice
}

// view maps a supported slice to its format and byte view. nil (or an
// untyped nil) gives a zero elems.
func view(x any) (elems, error) {
	switch s := x.(type) {
	case nil:
		return elems{}, nil
	case []int8:
		return elems{parser.FormatINT8, len(s), asBytes(s)}, nil
	case []Float16:
		return elems{parser.FormatFP16, len(s), asBytes(s)}, nil
	case []BFloat16:
		return elems{parser.FormatBF16, len(s), asBytes(s)}, nil
	case []float32:
		return elems{parser.FormatFP32, len(s), asBytes(s)}, nil
	}
	return elems{}, fmt.Errorf("%w: %T (want []int8, []host.Float16, []host.BFloat16 or []float32)", ErrType, x)
}

// asBytes views a slice of fixed-size little-endian values as bytes. The
// wire order is little-endian and NewComm refuses big-endian hosts, so the
// view is the wire encoding without a copy.
func asBytes[T int8 | Float16 | BFloat16 | float32](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// partialOverlap reports whether a and b share memory without being the
// same bytes. MPI allows a collective in place (recv is send) and no other
// aliasing: with recv shifted against send, RESULT written into recv
// overwrites elements of send whose DATA has not gone out yet, and the
// sum silently includes results instead of inputs.
func partialOverlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := addr(a), addr(b)
	a1, b1 := a0+uintptr(len(a)), b0+uintptr(len(b))
	return a0 < b1 && b0 < a1 && (a0 != b0 || a1 != b1)
}

// addr is where b starts in memory (for messages).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

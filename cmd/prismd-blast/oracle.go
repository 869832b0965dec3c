// This file owns the data 'prismd-blast contribute' sends and the oracle
// that checks every RESULT it receives: each rank's values repeat with the
// DATA frame's element count as period, so a DATA frame's payload is one
// prebuilt template, and the exact sum is a prebuilt pattern compared
// byte-wise.

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// rankValue is rank r's value at offset q of a period: small dyadic numbers
// (two fraction bits, magnitudes far below 2^24), so every partial sum of
// every rank's values is exact in FP32 whatever the order, and FP32_ARRIVAL
// must give the exact sum too.
func rankValue(r, q int) float32 { return float32(q%97)*0.25 + float32(r+1) }

// oracle holds one rank's DATA payload and the exact sum of every rank's.
type oracle struct {
	per  int    // elements per full DATA frame: the period of every pattern
	tmpl []byte // this rank's values for one period, FP32 little-endian
	want []byte // the exact sum for two periods, FP32 little-endian
}

// newOracle builds the templates of rank (of size ranks) for per elements
// per frame. The expected sum is computed in float64 from every rank's
// values, independently of the FP32 arithmetic under test, and must be
// exactly representable in FP32.
func newOracle(rank, size, per int) (*oracle, error) {
	if per < 1 || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("oracle: rank %d of %d, %d elements per frame", rank, size, per)
	}
	o := &oracle{per: per, tmpl: make([]byte, 4*per), want: make([]byte, 8*per)}
	for q := 0; q < per; q++ {
		binary.LittleEndian.PutUint32(o.tmpl[4*q:], math.Float32bits(rankValue(rank, q)))
	}
	for q := 0; q < 2*per; q++ {
		s := 0.0
		for r := 0; r < size; r++ {
			s += float64(rankValue(r, q%per))
		}
		if float64(float32(s)) != s {
			return nil, fmt.Errorf("oracle: the sum %v of %d ranks is not exact in FP32; use fewer ranks", s, size)
		}
		binary.LittleEndian.PutUint32(o.want[4*q:], math.Float32bits(float32(s)))
	}
	return o, nil
}

// mismatchError is a RESULT value that is not the exact sum.
type mismatchError struct {
	Element   uint32
	Got, Want uint32 // FP32 bit patterns
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("RESULT element %d is %g (%#08x), want the exact sum %g (%#08x)", e.Element,
		math.Float32frombits(e.Got), e.Got, math.Float32frombits(e.Want), e.Want)
}

// check compares FP32 values (little-endian) of consecutive elements from
// first on with the exact sum. A RESULT group need not start or end where a
// DATA frame did, so the pattern is indexed by first mod the period; two
// periods hold any run of up to one period from any offset.
func (o *oracle) check(first uint32, vals []byte) error {
	if len(vals)%4 != 0 {
		return fmt.Errorf("RESULT group at element %d has %d bytes, not whole FP32 values", first, len(vals))
	}
	for len(vals) > 0 {
		off := int(first % uint32(o.per))
		n := min(len(vals)/4, o.per)
		w := o.want[4*off : 4*(off+n)]
		if !bytes.Equal(vals[:4*n], w) {
			for i := 0; i < n; i++ {
				g, x := binary.LittleEndian.Uint32(vals[4*i:]), binary.LittleEndian.Uint32(w[4*i:])
				if g != x {
					return &mismatchError{Element: first + uint32(i), Got: g, Want: x}
				}
			}
		}
		vals = vals[4*n:]
		first += uint32(n)
	}
	return nil
}

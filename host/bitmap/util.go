// This file owns small value helpers.

package bitmap

import (
	"encoding/binary"
	"math"

	"github.com/prismd/prismd/bitmapfwd"
)

func putF32(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }
func getF32(b []byte) float32    { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// members lists a set's members.
func members(s *bitmapfwd.Set) []int {
	var r []int
	for e := s.Next(0); e >= 0; e = s.Next(e + 1) {
		r = append(r, e)
	}
	return r
}

func setOf(bits int, ids ...int) *bitmapfwd.Set {
	s := bitmapfwd.NewSet(bits)
	for _, id := range ids {
		s.Add(id)
	}
	return s
}
func float32frombits(b uint32) float32 { return math.Float32frombits(b) }

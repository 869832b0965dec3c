package kulisch_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/prismd/prismd/kulisch"
)

func le32(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// A leaf sums two ranks exactly, ships its partial as Kulisch wire values,
// and the root merges it with a third rank and rounds once.
func Example() {
	const w = 288 // kulisch.RequiredWidth(3) is 280; any larger legal W works
	leaf, _ := kulisch.NewVector(2, w)
	leaf.AddFP32LE(0, le32(1e8, 1))
	leaf.AddFP32LE(0, le32(1, -1))

	partial := make([]byte, 2*leaf.WireSize())
	leaf.PutValues(partial, 0, 2, kulisch.KULISCH)

	root, _ := kulisch.NewVector(2, w)
	root.MergeKulisch(0, partial)
	root.AddFP32LE(0, le32(-1e8, 0.5))
	for i := 0; i < 2; i++ {
		r, _ := root.RoundFP32(i)
		fmt.Println(math.Float32frombits(r))
	}

	// AUTO: 1 fits INT8 and 0.5 does not; one FP16 group (8 bytes) beats
	// an INT8 group plus an FP16 group (16 bytes).
	sets := make([]kulisch.FormatSet, 2)
	kulisch.AutoSets(root, 0, sets)
	groups, n, _ := kulisch.PlanAuto(make([]kulisch.Group, 0, 8), sets, kulisch.KULISCH, w, kulisch.BodyBudget(1500, 0))
	fmt.Println(groups, n)
	// Output:
	// 1
	// 0.5
	// [{FP16 2}] 2
}

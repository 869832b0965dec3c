package bitmapfwd_test

import (
	"fmt"

	"github.com/prismd/prismd/bitmapfwd"
)

// The branch node of Fig. 2: a D-BM arrives from the token's home node on
// port 0 and leaves as one copy per subtree; the union of the copies is the
// C-BM the node installs for the combine.
func ExampleBIFT_Replicate() {
	topo := &bitmapfwd.Topology{Nodes: []bitmapfwd.Node{
		{Name: "br", Neighbors: []int{1, 2, 3}},
		{Name: "src", Neighbors: []int{0}},
		{Name: "s1", Neighbors: []int{0}, Endpoints: []int{0, 1, 2, 3}},
		{Name: "s7", Neighbors: []int{0}, Endpoints: []int{4, 5, 6, 7}},
	}}
	bift, _ := bitmapfwd.ComputeBIFT(topo, 0, 8)
	dbm, _ := bitmapfwd.ParseBits("01100110")
	scratch := bitmapfwd.NewSet(8)
	r := bift.Replicate(dbm, 0, scratch, func(port int, subset *bitmapfwd.Set) {
		fmt.Println("port", port, subset)
	})
	cbm := bitmapfwd.NewSet(8)
	bift.Forwarded(cbm, dbm, 0)
	fmt.Println("copies", r.Copies, "branch", r.Branch(), "C-BM", cbm)
	// Output:
	// port 1 01100000
	// port 2 00000110
	// copies 2 branch true C-BM 01100110
}

// Admit against the A-BM of s1 in Fig. 1.
func ExampleCompletion_Admit() {
	abm, _ := bitmapfwd.ParseBits("11000000")
	c := bitmapfwd.NewCompletion(8)
	c.Reset(abm)
	for _, p := range []string{"10000000", "10000000", "01000000"} {
		pbm, _ := bitmapfwd.ParseBits(p)
		fmt.Println(p, c.Admit(pbm), c.Complete())
	}
	// Output:
	// 10000000 new false
	// 10000000 duplicate false
	// 01000000 new true
}

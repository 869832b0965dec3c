package bitmap

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/parser"
)

// quietNodes lists the nodes of f whose shard reports Quiet.
func quietNodes(f *fabric) map[string]bool {
	q := map[string]bool{}
	for name, n := range f.nodes {
		q[name] = n.sh.Quiet()
	}
	return q
}

// TestQuiet: a shard is Quiet exactly when no ACTIVE context holds an open
// aggregation or C-BM soft state, the only timers Tick serves. Checked
// against each node's own snapshot (the open slots it lists) through an
// aggregation that completes, one that times out into PARTIALs, and C-BM
// soft state that INSTALL opens and its timeout closes.
func TestQuiet(t *testing.T) {
	// The oracle: a node has armed timers iff its snapshot lists open slots.
	check := func(t *testing.T, f *fabric, when string) {
		t.Helper()
		for name, q := range quietNodes(f) {
			sh := f.nodes[name].sh
			sh.publish(f.now)
			open := 0
			for _, c := range sh.Snapshot().Ctxs {
				open += len(c.Slots)
			}
			if q != (open == 0) {
				t.Fatalf("%s: %s: Quiet %v with %d open slots", name, when, q, open)
			}
		}
	}
	t.Run("aggregation", func(t *testing.T) {
		f := fig1(t, nil)
		check(t, f, "committed, nothing sent")
		for name, q := range quietNodes(f) {
			if !q {
				t.Fatalf("%s not quiet before any frame", name)
			}
		}
		r := rand.New(rand.NewPCG(5, 6))
		in := arInputs(r, 2)
		// Token 1 completes; token 2 lacks w4.
		for w := 0; w < 4; w++ {
			f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, 1, in[0].vals[w]))
		}
		f.run()
		check(t, f, "token 1 complete")
		for w := 0; w < 3; w++ {
			f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, 2, in[1].vals[w]))
		}
		f.run()
		check(t, f, "token 2 without w4")
		if q := quietNodes(f); q["s7"] || q["s6"] || !q["s1"] || !q["s5"] {
			t.Fatalf("token 2 open at s7 and the root only; quiet: %v", q)
		}
		f.tick(60*msT, "s7", "s5", "s1", "s6") // s7's timeout: PARTIAL to the root
		check(t, f, "s7 timed out")
		if q := quietNodes(f); !q["s7"] || q["s6"] {
			t.Fatalf("after s7's PARTIAL: quiet %v, want s7 quiet and the root waiting", q)
		}
		f.tick(200 * msT) // the root's timeout
		check(t, f, "the root timed out")
		for name, q := range quietNodes(f) {
			if !q {
				t.Fatalf("%s not quiet after every aggregation closed", name)
			}
		}
		checkResults(t, f, in, map[uint64][]int{1: {0, 1, 2, 3}, 2: {0, 1, 2}})
	})
	t.Run("soft state", func(t *testing.T) {
		f := fig2(t, 50)
		f.inject("src", f.hostFrame("src", parser.ClassResult, 0x77, parser.XFlagInstall, flat(1, 2, 5, 6), parser.EncFlat, 0, []float32{1, 2, 3, 4}))
		f.run()
		check(t, f, "INSTALL")
		if q := quietNodes(f); q["sb"] || q["s1"] || q["s7"] {
			t.Fatalf("C-BM soft state installed on every node, yet quiet: %v", q)
		}
		f.tick(200 * msT)
		f.tick(200 * msT)
		check(t, f, "soft state expired")
		for name, q := range quietNodes(f) {
			if !q {
				t.Fatalf("%s not quiet after its soft state expired", name)
			}
		}
	})
}

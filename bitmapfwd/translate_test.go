package bitmapfwd

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// A host's list of global endpoint IDs becomes a pod's local bitmap: the pod
// holds global IDs 100000..100255, local bit b = global 100000+b (monotonic),
// or a shuffled assignment.
func TestTranslateAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, shuffle := range []bool{false, true} {
		const n = 256
		globalOf := make([]uint32, n)
		for b := range globalOf {
			globalOf[b] = 100000 + uint32(b)*3
		}
		if shuffle {
			r.Shuffle(n, func(i, j int) { globalOf[i], globalOf[j] = globalOf[j], globalOf[i] })
		}
		tr, err := NewTranslator(globalOf)
		if err != nil {
			t.Fatal(err)
		}
		local := NewSet(n)
		for range 50 {
			// Pick local bits, build the host's global list by hand.
			want := oracle{}
			var globals []int
			for range r.IntN(12) {
				b := r.IntN(n)
				if !want[b] {
					want[b] = true
					globals = append(globals, int(globalOf[b]))
				}
			}
			slices.Sort(globals)
			body := oracleList(oracleFromInts(globals))
			if err := tr.Translate(body, local, 16); err != nil {
				t.Fatal(err)
			}
			checkSet(t, "translated", local, want)
			back, err := tr.AppendGlobalList(nil, local, 16)
			if err != nil || !bytes.Equal(back, body) {
				t.Fatalf("reverse: %x %v, want %x", back, err, body)
			}
		}
		// A global ID outside the pod: rejected, named.
		bad := oracleList(oracleFromInts([]int{100000, 100001}))
		var de *DecodeError
		if err := tr.Translate(bad, local, 16); !errors.Is(err, ErrOutOfDomain) || !errors.As(err, &de) || de.Value != 100001 {
			t.Fatalf("foreign global: %v", err)
		}
		if !local.IsEmpty() {
			t.Fatal("partial translation left bits")
		}
		if err := tr.Translate(oracleList(oracleFromInts([]int{1, 2, 3})), local, 2); !errors.Is(err, ErrListCap) {
			t.Fatalf("cap: %v", err)
		}
	}
	if _, err := NewTranslator([]uint32{5, 5}); !errors.Is(err, ErrParam) {
		t.Fatalf("duplicate global: %v", err)
	}
}

func oracleFromInts(x []int) oracle {
	o := oracle{}
	for _, e := range x {
		o[e] = true
	}
	return o
}

func TestTranslateAllocs(t *testing.T) {
	globalOf := make([]uint32, 4096)
	for b := range globalOf {
		globalOf[b] = uint32(b) * 7
	}
	tr, _ := NewTranslator(globalOf)
	body := oracleList(oracleFromInts([]int{7, 700, 7000, 28000}))
	local := NewSet(4096)
	buf := make([]byte, 0, 64)
	allocs := alloctest.PerRun(100, func() {
		_ = tr.Translate(body, local, 8)
		buf, _ = tr.AppendGlobalList(buf[:0], local, 8)
	})
	if allocs != 0 {
		t.Fatalf("Translate allocates %v per run", allocs)
	}
}

package engine

import (
	"encoding/binary"
	"testing"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// TestBankReusedEmpty: an operation removed with values still in its ring
// leaves its bank for the next operation of the same shape, which gets it
// back empty (every element reads -0, as a new bank's do); one of another
// shape gets a new bank.
func TestBankReusedEmpty(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		r := newRig(t, acc, 1<<20)
		r.e.HandleData(r.now, 0, r.data[0], r.tx) // rank 0 only: the range never completes
		old := r.e.ops[r.key]
		used := old.bank
		if !r.e.Remove(r.key) {
			t.Fatal("Remove found nothing")
		}
		spec := old.spec
		spec.Op.OpGen++
		if err := r.e.Stage(r.now, &spec, 4); err != nil {
			t.Fatal(err)
		}
		o := r.e.ops[spec.Op]
		if o.bank != used {
			t.Fatalf("%v: the next operation of the same shape got a new bank", acc)
		}
		out := make([]byte, 4*o.bank.Len())
		if _, err := o.bank.PutValues(out, 0, o.bank.Len(), kulisch.FP32); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < o.bank.Len(); i++ {
			if v := binary.LittleEndian.Uint32(out[4*i:]); v != 0x80000000 {
				t.Fatalf("%v: reused bank element %d = %#08x, want -0 (empty)", acc, i, v)
			}
		}
		other := spec
		other.Op.OpGen++
		other.WindowElements *= 2
		if err := r.e.Stage(r.now, &other, 4); err != nil {
			t.Fatal(err)
		}
		if r.e.ops[other.Op].bank == used {
			t.Fatalf("%v: an operation of another shape got the same bank", acc)
		}
	}
}

// BenchmarkStageJumbo: STAGE, COMMIT and removal of a SINGLE ALLREDUCE
// at MTU 9000 with a 64-frame window, back to back as a job runs them.
func BenchmarkStageJumbo(b *testing.B) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		b.Run(acc.String(), func(b *testing.B) {
			e := New(Config{Logger: quiet()})
			for i := 0; i < b.N; i++ {
				key := parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: uint32(i + 1)}
				spec := singleSpec(key, acc, 1<<20, 9000, 64*2250)
				if err := e.Stage(1e9, &spec, 4); err != nil {
					b.Fatal(err)
				}
				if err := e.Commit(1e9, key); err != nil {
					b.Fatal(err)
				}
				e.Remove(key)
			}
		})
	}
}

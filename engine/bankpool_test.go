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
		checkBankEmpty(t, acc, o.bank)
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

// TestSlabReused: the replay buffers of a removed operation's RESULT_OUT
// windows, dirtied by the RESULT frames it sent, serve the next operation
// of the same shape, which still delivers the exact sums; a PROGRESS owed
// to the removed operation at the end of the batch is not sent.
func TestSlabReused(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		e := New(Config{Logger: quiet(), CoalesceProgress: true})
		a := newRigOn(t, e, parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 1}, acc, 726)
		a.tx.keep = true
		a.step() // both ranks' first frames: RESULT [0, 363) out to both
		e.Flush(a.now, a.tx)
		old := map[*byte]bool{}
		for i := range e.ops[a.key].outs {
			old[&e.ops[a.key].outs[i].sw.Buffer()[0]] = true
		}
		// Rank 0's second frame: accepted, its PROGRESS owed until Flush.
		h := parser.DataHeader(a.data[0][parser.HdrOff:parser.DataBodyOff])
		h.SetPacketID(2)
		h.SetFirst(363)
		h.SetFlags(parser.FlagLast)
		e.HandleData(a.now, 0, a.data[0], a.tx)
		if e.nOwed == 0 {
			t.Fatalf("%v: no PROGRESS owed after an accepted frame", acc)
		}
		if !e.Remove(a.key) {
			t.Fatal("Remove found nothing")
		}
		sent := a.tx.sent
		e.Flush(a.now, a.tx)
		if a.tx.sent != sent {
			t.Fatalf("%v: Flush sent %d frames for a removed operation", acc, a.tx.sent-sent)
		}

		b := newRigOn(t, e, parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 2}, acc, 726)
		for i := range e.ops[b.key].outs {
			if !old[&e.ops[b.key].outs[i].sw.Buffer()[0]] {
				t.Fatalf("%v: RESULT_OUT %d of the next operation of the same shape got new replay buffers", acc, i)
			}
		}
		b.tx.keep = true
		b.step()
		b.step()
		checkSingleResult(t, acc, b)
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

// TestBankPoolHoldsTwoRootRings: a spine's KULISCH_FIXED ring for a 1M
// jumbo-MTU collective (4x a leaf's window, 47.5 MB) is pooled twice, so
// back-to-back operations (one released, one running, one prepared) never
// fault in a fresh ring; after PoolIdle without a Stage the pools are
// dropped and the next operation gets a new bank.
func TestBankPoolHoldsTwoRootRings(t *testing.T) {
	e := New(Config{Logger: quiet()})
	now := int64(1e9)
	stage := func(gen uint32) *op {
		t.Helper()
		key := parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: gen}
		spec := singleSpec(key, kulisch.KulischFixed, 1<<20, 9000, 4*64*2238)
		if err := e.Stage(now, &spec, 4); err != nil {
			t.Fatal(err)
		}
		return e.ops[key]
	}
	a, b := stage(1), stage(2)
	banks := map[kulisch.Bank]bool{a.bank: true, b.bank: true}
	if n := bankBytes(bankShape{kulisch.KulischFixed, a.bank.Len(), a.spec.KulischWidth}); n < 40<<20 {
		t.Fatalf("ring is %d bytes; the test wants a spine-sized one", n)
	}
	e.Remove(a.spec.Op)
	e.Remove(b.spec.Op)
	for gen := uint32(3); gen < 9; gen += 2 {
		c, d := stage(gen), stage(gen+1)
		if !banks[c.bank] || !banks[d.bank] || c.bank == d.bank {
			t.Fatalf("operations %d and %d did not get the two pooled banks back", gen, gen+1)
		}
		e.Remove(c.spec.Op)
		e.Remove(d.spec.Op)
	}
	e.Tick(now+int64(PoolIdle)/2, nil)
	if e.bankBytes == 0 {
		t.Fatal("pool dropped before PoolIdle")
	}
	e.Tick(now+int64(PoolIdle)+1, nil)
	if e.bankBytes != 0 || len(e.banks) != 0 || e.slabs.Bytes() != 0 {
		t.Fatalf("after PoolIdle the pools still hold %d bytes of banks, %d of slabs", e.bankBytes, e.slabs.Bytes())
	}
	if c := stage(20); banks[c.bank] {
		t.Fatal("an operation after the pools were dropped got a dropped bank")
	}
}

// TestCompletedBankReusedClean: an operation that emitted every element
// leaves its bank clean (emit reset each range), so the next operation of
// the same shape takes it without a reset; it must still read empty
// everywhere and sum exactly.
func TestCompletedBankReusedClean(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		e := New(Config{Logger: quiet()})
		a := newRigOn(t, e, parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 1}, acc, 726)
		a.tx.keep = true
		a.step()
		a.step()
		checkSingleResult(t, acc, a)
		used := e.ops[a.key].bank
		e.Remove(a.key)
		var pooled []pooledBank
		for _, l := range e.banks {
			pooled = append(pooled, l...)
		}
		if len(pooled) != 1 || pooled[0].Bank != used || !pooled[0].clean {
			t.Fatalf("%v: pool after a completed operation = %+v, want its bank, clean", acc, pooled)
		}
		b := newRigOn(t, e, parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 2}, acc, 726)
		o := e.ops[b.key]
		if o.bank != used {
			t.Fatalf("%v: the next operation got a new bank", acc)
		}
		checkBankEmpty(t, acc, o.bank)
		b.tx.keep = true
		b.step()
		b.step()
		checkSingleResult(t, acc, b)
	}
}

// checkBankEmpty fails unless every element of b reads -0, as a new
// bank's do.
func checkBankEmpty(t *testing.T, acc kulisch.Policy, b kulisch.Bank) {
	t.Helper()
	out := make([]byte, 4*b.Len())
	if _, err := b.PutValues(out, 0, b.Len(), kulisch.FP32); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < b.Len(); i++ {
		if v := binary.LittleEndian.Uint32(out[4*i:]); v != 0x80000000 {
			t.Fatalf("%v: reused bank element %d = %#08x, want -0 (empty)", acc, i, v)
		}
	}
}

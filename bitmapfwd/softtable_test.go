package bitmapfwd

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prismd/prismd/internal/alloctest"
)

// fig2 is the Fig. 2 tree: the token's home node (src) under a branch
// switch (br), which reaches s1 (experts e1..e4) and s7 (e5..e8). Nodes:
// 0 src, 1 br, 2 s1, 3 s7, 4..11 e1..e8; ei holds endpoint i-1.
func fig2() *Topology {
	t := &Topology{Nodes: make([]Node, 12)}
	link := func(a, b int) {
		t.Nodes[a].Neighbors = append(t.Nodes[a].Neighbors, b)
		t.Nodes[b].Neighbors = append(t.Nodes[b].Neighbors, a)
	}
	link(0, 1)
	link(1, 2)
	link(1, 3)
	for i := range 8 {
		t.Nodes[4+i].Endpoints = []int{i}
		link([]int{2, 2, 2, 2, 3, 3, 3, 3}[i], 4+i)
	}
	return t
}

// TestFig2MoEDispatchCombine is bitmap-framework Fig. 2: the token selects
// e2,e3,e6,e7 (D-BM 01100110). Dispatch: br installs C-BM 01100110, s1
// 01100000, s7 00000110, each copy carrying only its subtree's bits.
// Combine: each node merges when OR(P-BM) equals its C-BM and sends one
// packet whose P-BM is the C-BM.
func TestFig2MoEDispatchCombine(t *testing.T) {
	const job, token = 7, 0xabc
	tables, err := ComputeAllBIFTs(fig2(), 8)
	if err != nil {
		t.Fatal(err)
	}
	soft := map[int]*SoftTable{}
	for _, node := range []int{1, 2, 3} {
		st, err := NewSoftTable(SoftTableConfig{Slots: 4, Bits: 8, Timeout: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetQuota(job, 4); err != nil {
			t.Fatal(err)
		}
		soft[node] = st
	}
	// Dispatch, hop by hop. A copy on port p of node u arrives at
	// Neighbors[p] on the port that leads back to u.
	topo := fig2()
	type hop struct {
		node, inPort int
		dbm          *Set
	}
	queue := []hop{{1, 0, mustBits(t, "01100110")}}
	delivered := oracle{}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if len(topo.Nodes[h.node].Endpoints) > 0 {
			for e := range h.dbm.All() {
				delivered[e] = true
			}
			continue
		}
		var copies []hop
		r := tables[h.node].Replicate(h.dbm, h.inPort, NewSet(8), func(port int, sub *Set) {
			next := topo.Nodes[h.node].Neighbors[port]
			back := slices.Index(topo.Nodes[next].Neighbors, h.node)
			c := NewSet(8)
			c.Copy(sub)
			copies = append(copies, hop{next, back, c})
		})
		if r.Branch() {
			cbm := NewSet(8)
			tables[h.node].Forwarded(cbm, h.dbm, h.inPort)
			if _, err := soft[h.node].Install(job, token, cbm, 0); err != nil {
				t.Fatal(err)
			}
		}
		queue = append(queue, copies...)
	}
	if got := delivered.sorted(); !slices.Equal(got, []int{1, 2, 5, 6}) {
		t.Fatalf("delivered to %v", got)
	}
	for node, want := range map[int]string{1: "01100110", 2: "01100000", 3: "00000110"} {
		slot, ok := soft[node].Lookup(job, token)
		if !ok || soft[node].Completion(slot).Target().String() != want {
			t.Fatalf("node %d C-BM missing or wrong (want %s)", node, want)
		}
	}

	// Combine.
	admit := func(node int, pbm string) (AdmitStatus, bool) {
		slot, st := soft[node].Admit(job, token, mustBits(t, pbm))
		if st != AdmitNew {
			return st, false
		}
		done := soft[node].Completion(slot).Complete()
		if done {
			soft[node].Release(slot)
		}
		return st, done
	}
	for i, c := range []struct {
		node int
		pbm  string
		want AdmitStatus
		done bool
	}{
		{2, "01000000", AdmitNew, false},       // e2 at s1
		{2, "01000000", AdmitDuplicate, false}, // e2 again
		{3, "00000100", AdmitNew, false},       // e6 at s7
		{2, "00100000", AdmitNew, true},        // e3: s1 complete, sends 01100000
		{2, "00100000", AdmitNoState, false},   // late duplicate at s1: forwarded up
		{1, "00100000", AdmitNew, false},       // ...which br takes alone
		{1, "01100000", AdmitOverlap, false},   // then s1's merge overlaps: rejected
		{3, "00000010", AdmitNew, true},        // e7: s7 complete, sends 00000110
		{1, "00000110", AdmitNew, false},
	} {
		st, done := admit(c.node, c.pbm)
		if st != c.want || done != c.done {
			t.Fatalf("step %d node %d P-BM %s: %v done=%v, want %v %v", i, c.node, c.pbm, st, done, c.want, c.done)
		}
	}
	// br is missing e2 (its s1 merge was rejected as overlapping the
	// forwarded duplicate): the timeout names it.
	var missing string
	n := soft[1].Expire(int64(time.Millisecond), func(slot int, j, tok uint64, miss, recv *Set) {
		if j != job || tok != token {
			t.Errorf("expired key %d/%d", j, tok)
		}
		missing = miss.String() + " " + recv.String()
	})
	if n != 1 || missing != "01000000 00100110" {
		t.Fatalf("expire: %d %q", n, missing)
	}
}

func TestSoftTableQuotasAndErrors(t *testing.T) {
	st, err := NewSoftTable(SoftTableConfig{Slots: 4, Bits: 64, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cbm := NewSet(64)
	cbm.Add(3)
	if _, err := st.Install(1, 1, cbm, 0); !errors.Is(err, ErrQuota) {
		t.Fatalf("install without quota: %v", err)
	}
	if err := st.SetQuota(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := st.SetQuota(2, 2); !errors.Is(err, ErrQuota) {
		t.Fatalf("quotas over Slots accepted: %v", err)
	}
	if err := st.SetQuota(2, 1); err != nil {
		t.Fatal(err)
	}
	for tok := range uint64(3) {
		if _, err := st.Install(1, tok, cbm, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Install(1, 9, cbm, 0); !errors.Is(err, ErrQuota) {
		t.Fatalf("job 1 over quota: %v", err)
	}
	// Job 2 still has its slot: job 1's flood cannot take it.
	if _, err := st.Install(2, 0, cbm, 0); err != nil {
		t.Fatal(err)
	}
	// Same C-BM again: idempotent; another: conflict.
	s1, err := st.Install(1, 0, cbm, 5)
	if err != nil || s1 < 0 {
		t.Fatal(err)
	}
	other := NewSet(64)
	other.Add(4)
	if _, err := st.Install(1, 0, other, 0); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflict: %v", err)
	}
	if _, err := st.Install(2, 5, NewSet(64), 0); !errors.Is(err, ErrParam) {
		t.Fatalf("empty C-BM: %v", err)
	}
	if _, err := st.Install(2, 5, NewSet(65), 0); !errors.Is(err, ErrCapacity) {
		t.Fatalf("capacity: %v", err)
	}
	s := st.Stats()
	if s.Installs != 4 || s.Reinstalls != 1 || s.Conflicts != 1 || s.QuotaRejects != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Removing job 1 frees its entries.
	if err := st.SetQuota(1, 0); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 1 {
		t.Fatalf("len %d after removing job 1", st.Len())
	}
	if _, ok := st.Lookup(1, 1); ok {
		t.Fatal("job 1 entry survived")
	}
	if _, ok := st.Lookup(2, 0); !ok {
		t.Fatal("job 2 entry lost")
	}
	if st.Release(99) || st.Completion(-1) != nil {
		t.Fatal("bad slot accepted")
	}
	for _, cfg := range []SoftTableConfig{{0, 8, 1}, {1, 0, 1}, {1, 8, 0}} {
		if _, err := NewSoftTable(cfg); !errors.Is(err, ErrParam) {
			t.Errorf("config %+v: %v", cfg, err)
		}
	}
}

// Random operations against a map model, on a small table so that the
// index wraps, probe runs collide and backward-shift deletion is exercised.
func TestSoftTableAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	const slots, bits = 16, 96
	type key struct{ job, tok uint64 }
	type ent struct {
		target, recv oracle
		deadline     int64
	}
	st, _ := NewSoftTable(SoftTableConfig{Slots: slots, Bits: bits, Timeout: 100})
	quota := map[uint64]int{1: 8, 2: 5, 3: 3}
	for j, q := range quota {
		if err := st.SetQuota(j, q); err != nil {
			t.Fatal(err)
		}
	}
	model := map[key]*ent{}
	used := func(j uint64) int {
		n := 0
		for k := range model {
			if k.job == j {
				n++
			}
		}
		return n
	}
	now := int64(0)
	for step := range 20000 {
		now += int64(r.IntN(5))
		k := key{uint64(1 + r.IntN(3)), uint64(r.IntN(40))}
		switch op := r.IntN(10); {
		case op < 4: // install
			tg := randOracle(r, bits, 0.2)
			if len(tg) == 0 {
				tg[0] = true
			}
			if e := model[k]; e != nil && r.IntN(2) == 0 {
				tg = oracleFromInts(e.target.sorted()) // the dispatch again
			}
			_, err := st.Install(k.job, k.tok, fromOracle(t, bits, tg), now)
			e := model[k]
			switch {
			case e != nil && slices.Equal(e.target.sorted(), tg.sorted()):
				if err != nil {
					t.Fatalf("step %d: reinstall %v", step, err)
				}
			case e != nil:
				if !errors.Is(err, ErrConflict) {
					t.Fatalf("step %d: conflict not reported: %v", step, err)
				}
			case used(k.job) >= quota[k.job]:
				if !errors.Is(err, ErrQuota) {
					t.Fatalf("step %d: quota not enforced: %v", step, err)
				}
			default:
				if err != nil {
					t.Fatalf("step %d: install %v", step, err)
				}
				model[k] = &ent{tg, oracle{}, now + 100}
			}
		case op < 7: // admit
			e := model[k]
			p := oracle{}
			if e != nil && r.IntN(4) != 0 {
				tl := e.target.sorted()
				p[tl[r.IntN(len(tl))]] = true
			} else {
				p[r.IntN(bits)] = true
			}
			slot, stt := st.Admit(k.job, k.tok, fromOracle(t, bits, p))
			if e == nil {
				if stt != AdmitNoState || slot != -1 {
					t.Fatalf("step %d: admit without state: %v", step, stt)
				}
				continue
			}
			if want := naiveAdmit(e.target, e.recv, p); stt != want {
				t.Fatalf("step %d: admit %v want %v", step, stt, want)
			}
			if stt == AdmitNew {
				for x := range p {
					e.recv[x] = true
				}
			}
			if st.Completion(slot).Complete() {
				st.Release(slot)
				delete(model, k)
			}
		case op < 8: // release
			slot, ok := st.Lookup(k.job, k.tok)
			if ok != (model[k] != nil) {
				t.Fatalf("step %d: lookup %v", step, ok)
			}
			if ok {
				st.Release(slot)
				delete(model, k)
			}
		default: // expire
			var got []key
			st.Expire(now, func(slot int, j, tok uint64, miss, recv *Set) {
				kk := key{j, tok}
				e := model[kk]
				if e == nil || e.deadline > now {
					t.Fatalf("step %d: expired %v not due", step, kk)
				}
				m := oracle{}
				for x := range e.target {
					if !e.recv[x] {
						m[x] = true
					}
				}
				checkSet(t, "missing", miss, m)
				checkSet(t, "received", recv, e.recv)
				got = append(got, kk)
			})
			for _, kk := range got {
				delete(model, kk)
			}
			for kk, e := range model {
				if e.deadline <= now {
					t.Fatalf("step %d: %v due but not expired", step, kk)
				}
			}
		}
		if st.Len() != len(model) {
			t.Fatalf("step %d: len %d model %d", step, st.Len(), len(model))
		}
		for kk := range model {
			if _, ok := st.Lookup(kk.job, kk.tok); !ok {
				t.Fatalf("step %d: %v lost from the index", step, kk)
			}
		}
	}
	// Every path was taken.
	s := st.Stats()
	if s.Installs == 0 || s.Reinstalls == 0 || s.Conflicts == 0 || s.QuotaRejects == 0 || s.Released == 0 || s.Expired == 0 {
		t.Fatalf("model run missed a path: %+v", s)
	}
}

func TestSoftTableSteadyStateAllocs(t *testing.T) {
	st, _ := NewSoftTable(SoftTableConfig{Slots: 64, Bits: 256, Timeout: 10})
	_ = st.SetQuota(1, 64)
	cbm := NewSet(256)
	cbm.Add(1)
	cbm.Add(200)
	p1, p2 := NewSet(256), NewSet(256)
	p1.Add(1)
	p2.Add(200)
	tok := uint64(0)
	now := int64(0)
	fn := func(int, uint64, uint64, *Set, *Set) {}
	allocs := alloctest.PerRun(500, func() {
		tok++
		now++
		if _, err := st.Install(1, tok, cbm, now); err != nil {
			t.Fatal(err)
		}
		slot, _ := st.Admit(1, tok, p1)
		if tok%2 == 0 {
			st.Admit(1, tok, p2)
			if st.Completion(slot).Complete() {
				st.Release(slot)
			}
		}
		st.Expire(now, fn)
		_, _ = st.Install(1, tok, cbm, now) // reinstall path
	})
	if allocs != 0 {
		t.Fatalf("soft table allocates %v per run", allocs)
	}
}

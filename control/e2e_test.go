package control

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/parser"
)

// ---- oracles ----

// exactSum rounds the exact sum of column i once to float32 (math/big),
// which is what KULISCH_FIXED must deliver whatever the tree and order.
func exactSum(vecs [][]float32, i int) uint32 {
	s := new(big.Float).SetPrec(2000)
	allNegZero := true
	for _, v := range vecs {
		x := v[i]
		if !(x == 0 && math.Signbit(float64(x))) {
			allNegZero = false
		}
		s.Add(s, new(big.Float).SetPrec(2000).SetFloat64(float64(x)))
	}
	f, _ := s.Float32()
	if f == 0 {
		if allNegZero {
			return 0x80000000
		}
		return 0
	}
	return math.Float32bits(f)
}

// arrivalSum adds column i in float32 in the given order, starting from -0.
func arrivalSum(vecs [][]float32, i int, order []int) uint32 {
	acc := float32(math.Copysign(0, -1))
	for _, r := range order {
		acc = float32(acc + vecs[r][i])
	}
	return math.Float32bits(acc)
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch rng.IntN(10) {
		case 0:
			v[i] = float32(rng.IntN(200) - 100) // small integers
		case 1:
			v[i] = float32(rng.NormFloat64() * 1e-38) // subnormal territory
		default:
			v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(60)-30))
		}
	}
	return v
}

// cancel makes column values cancel heavily so rounding order matters.
func cancel(vecs [][]float32) {
	for i := range vecs[0] {
		if i%3 == 0 && len(vecs) > 1 {
			vecs[1][i] = -vecs[0][i] * (1 + 1.0/1024)
		}
	}
}

func baseCtx(role parser.Role, coll parser.Collective, acc parser.AccPolicy, vlen uint32, nterms uint32) parser.ContextRecord {
	c := parser.ContextRecord{Role: role, Collective: coll, InputFormat: parser.FormatFP32, AccPolicy: acc,
		OutputFormat: parser.FormatFP32, VectorLen: vlen, MTU: 1500, WindowIntervals: 16, ReplayDepth: 16,
		WindowBytes: 16 * 1514, WindowElements: 2904, MaxTerms: nterms, TimeoutMs: 2000}
	if acc == parser.AccKulischFixed {
		c.PartialPolicy, c.KulischWidth = parser.FormatKulisch, 288
	} else {
		c.PartialPolicy = parser.FormatFP32
	}
	return c
}

// ---- topologies ----

// single builds one SINGLE switch with n ranks on ports 0..n-1 (ports
// first..first+n-1 when sharing a switch) and installs op key.
func single(t testing.TB, f *fabric, s *swNode, first int, key parser.OpKey, ctx parser.ContextRecord, vecs [][]float32, dests []int) []*rank {
	var bs []parser.Binding
	var rs []*rank
	for i := range vecs {
		p := first + i
		r := f.addRank(s, p, key, vecs[i], &ctx)
		r.contrib, r.swEP = uint16(100+i), uint16(1000+i)
		rs = append(rs, r)
		bs = append(bs, parser.Binding{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: r.contrib,
			LocalEP: r.swEP, PeerEP: r.ep, Port: uint16(p), PeerMAC: r.mac})
	}
	for _, d := range dests {
		r := rs[d]
		r.expectResult(uint16(200+d), uint16(2000+d), &ctx)
		bs = append(bs, parser.Binding{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank, Stream: uint16(200 + d),
			LocalEP: uint16(2000 + d), PeerEP: r.ep, Port: uint16(first + d), PeerMAC: r.mac})
	}
	s.install(t, key, ctx, bs)
	return rs
}

// tree builds leaves L0 (switch 0: r0, r1), L1 (switch 1: r2, r3) and root
// S0 (switch 2), with the result delivered to dests (rank indices).
func tree(t testing.TB, f *fabric, key parser.OpKey, acc parser.AccPolicy, coll parser.Collective, vlen uint32, vecs [][]float32, dests []int, tune func(*parser.ContextRecord)) []*rank {
	window := uint32(2904)
	if acc == parser.AccFP32Arrival {
		window = 8192 // ranks send one after the other: each needs its whole vector in flight
	}
	l := []*swNode{f.addSwitch(3), f.addSwitch(3)}
	root := f.addSwitch(2)
	for j := range 2 {
		f.link(endpoint{-1, l[j].id, 2}, endpoint{-1, root.id, j})
	}
	var ranks []*rank
	var rootBs []parser.Binding
	for j := range 2 {
		ctx := baseCtx(parser.RoleLeaf, coll, acc, vlen, 4)
		ctx.WindowElements = window
		if tune != nil {
			tune(&ctx)
		}
		var bs []parser.Binding
		var leafRanks []*rank
		for k := range 2 {
			i := 2*j + k
			r := f.addRank(l[j], k, key, vecs[i], &ctx)
			r.contrib, r.swEP = uint16(100+i), uint16(1000+i)
			leafRanks = append(leafRanks, r)
			ranks = append(ranks, r)
			bs = append(bs, parser.Binding{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: r.contrib,
				LocalEP: r.swEP, PeerEP: r.ep, Port: uint16(k), PeerMAC: r.mac})
		}
		bs = append(bs, parser.Binding{Kind: parser.KindParent, Stream: uint16(10 + j), LocalEP: 3000, PeerEP: uint16(4000 + j),
			Port: 2, PeerMAC: swMAC(root.id, j)})
		rootBs = append(rootBs, parser.Binding{Kind: parser.KindContributor, Stream: uint16(10 + j), LocalEP: uint16(4000 + j),
			PeerEP: 3000, Port: uint16(j), PeerMAC: swMAC(l[j].id, 2)})
		onPath := false
		for _, d := range dests {
			if d/2 != j {
				continue
			}
			onPath = true
			r := leafRanks[d%2]
			r.expectResult(uint16(200+d), uint16(2000+d), &ctx)
			bs = append(bs, parser.Binding{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank, Stream: uint16(200 + d),
				LocalEP: uint16(2000 + d), PeerEP: r.ep, Port: uint16(d % 2), PeerMAC: r.mac})
		}
		if onPath {
			bs = append(bs, parser.Binding{Kind: parser.KindResultIn, Stream: uint16(20 + j), LocalEP: 3001, PeerEP: uint16(4100 + j),
				Port: 2, PeerMAC: swMAC(root.id, j)})
			rootBs = append(rootBs, parser.Binding{Kind: parser.KindResultOut, Stream: uint16(20 + j), LocalEP: uint16(4100 + j),
				PeerEP: 3001, Port: uint16(j), PeerMAC: swMAC(l[j].id, 2)})
		}
		l[j].install(t, key, ctx, bs)
	}
	rctx := baseCtx(parser.RoleRoot, coll, acc, vlen, 4)
	rctx.WindowElements = window
	if tune != nil {
		tune(&rctx)
	}
	root.install(t, key, rctx, rootBs)
	return ranks
}

func allDone(rs []*rank) func() bool {
	return func() bool {
		for _, r := range rs {
			if !r.done() {
				return false
			}
		}
		return true
	}
}

func checkResults(t *testing.T, rs []*rank, want func(i int) uint32) {
	t.Helper()
	got := 0
	for _, r := range rs {
		if r.rw == nil {
			continue
		}
		got++
		if r.inexact {
			t.Fatalf("rank %d: ACCUMULATION_INEXACT", r.id)
		}
		for i, b := range r.result {
			if w := want(i); b != w {
				t.Fatalf("rank %d element %d: got %#08x (%g), want %#08x (%g)", r.id, i, b, math.Float32frombits(b), w, math.Float32frombits(w))
			}
		}
	}
	if got == 0 {
		t.Fatal("no rank received a result")
	}
}

func dests(coll parser.Collective, n, reduceTo int) []int {
	if coll == parser.CollReduce {
		return []int{reduceTo}
	}
	d := make([]int, n)
	for i := range d {
		d[i] = i
	}
	return d
}

func TestE2ESingleKulisch(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, coll := range []parser.Collective{parser.CollReduce, parser.CollAllReduce} {
			t.Run(coll.String()+"/"+string(rune('0'+n)), func(t *testing.T) {
				f := newFabric(t, uint64(n))
				rng := rand.New(rand.NewPCG(uint64(n), uint64(coll)))
				const vlen = 5000
				vecs := make([][]float32, n)
				for i := range vecs {
					vecs[i] = randVec(rng, vlen)
				}
				cancel(vecs)
				s := f.addSwitch(n)
				key := parser.OpKey{Job: 7, Group: 1, GroupGen: 1, Op: 3, OpGen: 1}
				rs := single(t, f, s, 0, key, baseCtx(parser.RoleSingle, coll, parser.AccKulischFixed, vlen, 4), vecs, dests(coll, n, 1))
				if !f.runUntil(5*time.Second, allDone(rs)) {
					t.Fatalf("not complete: %+v", s.snapshotOp(key))
				}
				checkResults(t, rs, func(i int) uint32 { return exactSum(vecs, i) })
				f.runUntil(time.Second, func() bool { return s.snapshotOp(key).State == "COMPLETE" })
				if st, a := s.ack(t, key, parser.CmdComplete, nil); st != parser.StatusOK || a.State != parser.StateComplete || a.Completed != vlen {
					t.Fatalf("COMPLETE: %v %+v", st, a)
				}
			})
		}
	}
}

func TestE2ESingleArrivalOrder(t *testing.T) {
	f := newFabric(t, 5)
	rng := rand.New(rand.NewPCG(5, 5))
	const n, vlen = 4, 3000
	vecs := make([][]float32, n)
	for i := range vecs {
		vecs[i] = randVec(rng, vlen)
	}
	cancel(vecs)
	s := f.addSwitch(n)
	key := parser.OpKey{Job: 8, Group: 1, Op: 1, OpGen: 1}
	ctx := baseCtx(parser.RoleSingle, parser.CollAllReduce, parser.AccFP32Arrival, vlen, 4)
	ctx.WindowElements = 4096 // one rank can send its whole vector before the next starts
	rs := single(t, f, s, 0, key, ctx, vecs, dests(parser.CollAllReduce, n, 0))
	// The test controls arrival order: rank i starts once rank i-1's data
	// is fully acknowledged.
	order := []int{2, 0, 3, 1}
	for _, r := range rs {
		r.started = false
	}
	for k, i := range order {
		rs[i].started = true
		if k+1 < len(order) {
			prev := rs[i]
			if !f.runUntil(2*time.Second, func() bool { return prev.next == vlen && prev.sw.Idle() }) {
				t.Fatalf("rank %d did not finish", i)
			}
		}
	}
	if !f.runUntil(5*time.Second, allDone(rs)) {
		t.Fatalf("not complete: %+v", s.snapshotOp(key))
	}
	checkResults(t, rs, func(i int) uint32 { return arrivalSum(vecs, i, order) })
	// And the order matters for these inputs (the test could fail).
	differs := false
	for i := 0; i < vlen && !differs; i++ {
		differs = arrivalSum(vecs, i, order) != arrivalSum(vecs, i, []int{0, 1, 2, 3})
	}
	if !differs {
		t.Fatal("inputs do not exercise arrival order")
	}
}

func TestE2ETree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		acc    parser.AccPolicy
		coll   parser.Collective
		impair bool
		tune   func(*parser.ContextRecord)
	}{
		{"kulisch/reduce", parser.AccKulischFixed, parser.CollReduce, false, nil},
		{"kulisch/allreduce", parser.AccKulischFixed, parser.CollAllReduce, false, nil},
		{"kulisch/allreduce/lossy", parser.AccKulischFixed, parser.CollAllReduce, true, nil},
		{"kulisch/reduce/lossy", parser.AccKulischFixed, parser.CollReduce, true, nil},
		{"arrival/allreduce", parser.AccFP32Arrival, parser.CollAllReduce, false, nil},
		// AUTO partials (lossless per-group formats chosen by kulisch) and
		// AUTO output (the rank rounds Kulisch groups once itself).
		{"kulisch-auto/allreduce/lossy", parser.AccKulischFixed, parser.CollAllReduce, true, func(c *parser.ContextRecord) {
			c.PartialPolicy, c.OutputFormat = parser.FormatAuto, parser.FormatAuto
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabric(t, 11)
			if tc.impair {
				f.loss, f.dup, f.jitter = 0.05, 0.05, 300e3
			}
			rng := rand.New(rand.NewPCG(11, 12))
			const vlen = 7000
			vecs := make([][]float32, 4)
			for i := range vecs {
				vecs[i] = randVec(rng, vlen)
			}
			cancel(vecs)
			key := parser.OpKey{Job: 9, Group: 2, GroupGen: 1, Op: 4, OpGen: 1}
			rs := tree(t, f, key, tc.acc, tc.coll, vlen, vecs, dests(tc.coll, 4, 1), tc.tune)
			if tc.acc == parser.AccFP32Arrival {
				for _, r := range rs {
					r.started = false
				}
				for i, r := range rs {
					r.started = true
					if i < 3 {
						if !f.runUntil(2*time.Second, func() bool { return r.next == vlen && r.sw.Idle() }) {
							t.Fatalf("rank %d did not finish", i)
						}
					}
				}
			}
			if !f.runUntil(20*time.Second, allDone(rs)) {
				for _, s := range f.sws {
					t.Logf("switch %d: %+v", s.id, s.snapshotOp(key))
				}
				t.Fatal("not complete")
			}
			if tc.acc == parser.AccKulischFixed {
				checkResults(t, rs, func(i int) uint32 { return exactSum(vecs, i) })
			} else {
				checkResults(t, rs, func(i int) uint32 {
					l0 := math.Float32frombits(arrivalSum(vecs, i, []int{0, 1}))
					l1 := math.Float32frombits(arrivalSum(vecs, i, []int{2, 3}))
					return arrivalSum([][]float32{{l0}, {l1}}, 0, []int{0, 1})
				})
			}
			for _, s := range f.sws {
				if !f.runUntil(2*time.Second, func() bool { return s.snapshotOp(key).State == "COMPLETE" }) {
					t.Fatalf("switch %d: %+v", s.id, s.snapshotOp(key))
				}
			}
			if tc.impair && f.dropped == 0 {
				t.Fatal("no frame was dropped: the impairment did not happen")
			}
		})
	}
}

func TestE2ESingleLossy(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		f := newFabric(t, seed)
		f.loss, f.dup, f.jitter = 0.1, 0.1, 500e3
		rng := rand.New(rand.NewPCG(seed, 3))
		const n, vlen = 4, 6000
		vecs := make([][]float32, n)
		for i := range vecs {
			vecs[i] = randVec(rng, vlen)
		}
		s := f.addSwitch(n)
		key := parser.OpKey{Job: seed, Op: 1, OpGen: 1}
		rs := single(t, f, s, 0, key, baseCtx(parser.RoleSingle, parser.CollAllReduce, parser.AccKulischFixed, vlen, 4), vecs, dests(parser.CollAllReduce, n, 0))
		if !f.runUntil(20*time.Second, allDone(rs)) {
			t.Fatalf("seed %d not complete: %+v", seed, s.snapshotOp(key))
		}
		checkResults(t, rs, func(i int) uint32 { return exactSum(vecs, i) })
		if s.w.eng.Metrics().Retransmits.Load() == 0 || s.w.eng.Metrics().Duplicates.Load() == 0 {
			t.Fatal("loss and duplication were not exercised")
		}
	}
}

// TestE2ETimeout: a rank stops sending; its operation fails within the
// timeout naming it, while another job's operation on the same switch
// completes.
func TestE2ETimeout(t *testing.T) {
	f := newFabric(t, 21)
	rng := rand.New(rand.NewPCG(21, 21))
	const vlen = 4000
	s := f.addSwitch(4)
	ctx := baseCtx(parser.RoleSingle, parser.CollAllReduce, parser.AccKulischFixed, vlen, 4)
	ctx.TimeoutMs = 300
	k1 := parser.OpKey{Job: 1, Op: 1, OpGen: 1}
	k2 := parser.OpKey{Job: 2, Op: 1, OpGen: 1}
	v1 := [][]float32{randVec(rng, vlen), randVec(rng, vlen)}
	v2 := [][]float32{randVec(rng, vlen), randVec(rng, vlen)}
	r1 := single(t, f, s, 0, k1, ctx, v1, []int{0, 1})
	r2 := single(t, f, s, 2, k2, ctx, v2, []int{0, 1})
	r1[1].stopAt = 1089 // three frames, then silence
	start := f.now
	if !f.runUntil(5*time.Second, allDone(r2)) {
		t.Fatalf("job 2 not complete: %+v", s.snapshotOp(k2))
	}
	checkResults(t, r2, func(i int) uint32 { return exactSum(v2, i) })
	if !f.runUntil(2*time.Second, func() bool { return s.snapshotOp(k1).State == "FAILED" }) {
		t.Fatalf("job 1 did not fail: %+v", s.snapshotOp(k1))
	}
	elapsed := time.Duration(f.now - start)
	if elapsed > 600*time.Millisecond {
		t.Fatalf("failed after %v, timeout 300ms", elapsed)
	}
	op := s.snapshotOp(k1)
	for _, want := range []string{"stream 101", "peer endpoint 501", "02:4b:00:00:01:02", "[1089, 4000)"} {
		if !strings.Contains(op.Error, want) {
			t.Fatalf("error %q does not name %q", op.Error, want)
		}
	}
	if st, a := s.ack(t, k1, parser.CmdComplete, nil); st != parser.StatusOK || a.State != parser.StateFailed || a.MissingStream != 101 || a.MissingFrom != 1089 {
		t.Fatalf("COMPLETE: %v %+v", st, a)
	}
	// Completed ranges may have been delivered, but never the whole vector.
	for _, r := range r1 {
		if r.rw.Done() {
			t.Fatal("a failed operation delivered a complete result")
		}
	}
	if st, _ := s.ack(t, k1, parser.CmdRelease, nil); st != parser.StatusOK {
		t.Fatalf("RELEASE after failure: %v", st)
	}
}

// TestE2EInexact: INT8 output of a non-integral exact sum is never clamped:
// the root sends ACCUMULATION_INEXACT, the leaves relay it, every rank gets
// it, and no value is delivered.
func TestE2EInexact(t *testing.T) {
	f := newFabric(t, 31)
	const vlen = 3000
	vecs := make([][]float32, 4)
	for i := range vecs {
		vecs[i] = make([]float32, vlen)
		for k := range vecs[i] {
			vecs[i][k] = 0.3
		}
	}
	key := parser.OpKey{Job: 31, Op: 1, OpGen: 1}
	rs := tree(t, f, key, parser.AccKulischFixed, parser.CollAllReduce, vlen, vecs, dests(parser.CollAllReduce, 4, 0),
		func(c *parser.ContextRecord) { c.OutputFormat = parser.FormatINT8 })
	if !f.runUntil(5*time.Second, allDone(rs)) {
		t.Fatal("INEXACT not delivered")
	}
	for _, r := range rs {
		if !r.inexact || r.rw.Committed() != 0 {
			t.Fatalf("rank %d: inexact %v committed %d", r.id, r.inexact, r.rw.Committed())
		}
	}
	for _, s := range f.sws {
		if !f.runUntil(2*time.Second, func() bool { return s.snapshotOp(key).State == "COMPLETE" }) {
			t.Fatalf("switch %d: %+v", s.id, s.snapshotOp(key))
		}
		if s.id == 2 && !s.snapshotOp(key).Inexact {
			t.Fatal("root does not report ACCUMULATION_INEXACT")
		}
	}
}

// TestE2EThreeLevels: leaves L0 (r0, r1) and L1 (r2, r3) under INTERNAL
// node I0, under a ROOT with a single child; ALLREDUCE with loss,
// duplication and reordering, so the result is relayed twice on its way
// down. KULISCH_FIXED must still be bit-exact.
func TestE2EThreeLevels(t *testing.T) {
	f := newFabric(t, 41)
	f.loss, f.dup, f.jitter = 0.05, 0.05, 300e3
	rng := rand.New(rand.NewPCG(41, 41))
	const vlen = 5000
	vecs := make([][]float32, 4)
	for i := range vecs {
		vecs[i] = randVec(rng, vlen)
	}
	cancel(vecs)
	key := parser.OpKey{Job: 77, Group: 3, GroupGen: 2, Op: 9, OpGen: 5}
	l := []*swNode{f.addSwitch(3), f.addSwitch(3)}
	mid := f.addSwitch(3)
	root := f.addSwitch(1)
	f.link(endpoint{-1, l[0].id, 2}, endpoint{-1, mid.id, 0})
	f.link(endpoint{-1, l[1].id, 2}, endpoint{-1, mid.id, 1})
	f.link(endpoint{-1, mid.id, 2}, endpoint{-1, root.id, 0})
	ctxFor := func(role parser.Role) parser.ContextRecord {
		c := baseCtx(role, parser.CollAllReduce, parser.AccKulischFixed, vlen, 4)
		return c
	}
	var ranks []*rank
	var midBs []parser.Binding
	for j := range 2 {
		ctx := ctxFor(parser.RoleLeaf)
		var bs []parser.Binding
		for k := range 2 {
			i := 2*j + k
			r := f.addRank(l[j], k, key, vecs[i], &ctx)
			r.contrib, r.swEP = uint16(100+i), uint16(1000+i)
			r.expectResult(uint16(200+i), uint16(2000+i), &ctx)
			ranks = append(ranks, r)
			bs = append(bs,
				parser.Binding{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: r.contrib, LocalEP: r.swEP, PeerEP: r.ep, Port: uint16(k), PeerMAC: r.mac},
				parser.Binding{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank, Stream: uint16(200 + i), LocalEP: uint16(2000 + i), PeerEP: r.ep, Port: uint16(k), PeerMAC: r.mac})
		}
		bs = append(bs,
			parser.Binding{Kind: parser.KindParent, Stream: uint16(10 + j), LocalEP: 3000, PeerEP: uint16(4000 + j), Port: 2, PeerMAC: swMAC(mid.id, j)},
			parser.Binding{Kind: parser.KindResultIn, Stream: uint16(20 + j), LocalEP: 3001, PeerEP: uint16(4100 + j), Port: 2, PeerMAC: swMAC(mid.id, j)})
		midBs = append(midBs,
			parser.Binding{Kind: parser.KindContributor, Stream: uint16(10 + j), LocalEP: uint16(4000 + j), PeerEP: 3000, Port: uint16(j), PeerMAC: swMAC(l[j].id, 2)},
			parser.Binding{Kind: parser.KindResultOut, Stream: uint16(20 + j), LocalEP: uint16(4100 + j), PeerEP: 3001, Port: uint16(j), PeerMAC: swMAC(l[j].id, 2)})
		l[j].install(t, key, ctx, bs)
	}
	midBs = append(midBs,
		parser.Binding{Kind: parser.KindParent, Stream: 30, LocalEP: 5000, PeerEP: 6000, Port: 2, PeerMAC: swMAC(root.id, 0)},
		parser.Binding{Kind: parser.KindResultIn, Stream: 40, LocalEP: 5001, PeerEP: 6001, Port: 2, PeerMAC: swMAC(root.id, 0)})
	mid.install(t, key, ctxFor(parser.RoleInternal), midBs)
	root.install(t, key, ctxFor(parser.RoleRoot), []parser.Binding{
		{Kind: parser.KindContributor, Stream: 30, LocalEP: 6000, PeerEP: 5000, Port: 0, PeerMAC: swMAC(mid.id, 2)},
		{Kind: parser.KindResultOut, Stream: 40, LocalEP: 6001, PeerEP: 5001, Port: 0, PeerMAC: swMAC(mid.id, 2)},
	})
	if !f.runUntil(30*time.Second, allDone(ranks)) {
		for _, s := range f.sws {
			t.Logf("switch %d: %+v", s.id, s.snapshotOp(key))
		}
		t.Fatal("not complete")
	}
	checkResults(t, ranks, func(i int) uint32 { return exactSum(vecs, i) })
	for _, s := range f.sws {
		if !f.runUntil(2*time.Second, func() bool { return s.snapshotOp(key).State == "COMPLETE" }) {
			t.Fatalf("switch %d: %+v", s.id, s.snapshotOp(key))
		}
		if st, a := s.ack(t, key, parser.CmdComplete, nil); st != parser.StatusOK || a.State != parser.StateComplete || a.Completed != vlen {
			t.Fatalf("switch %d COMPLETE: %v %+v", s.id, st, a)
		}
	}
	for _, s := range f.sws {
		if st, _ := s.ack(t, key, parser.CmdRelease, nil); st != parser.StatusOK {
			t.Fatalf("switch %d RELEASE: %v", s.id, st)
		}
	}
}

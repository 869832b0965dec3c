package bitmap

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/parser"
)

// fig1 builds Fig. 1: workers w1..w4 (endpoints 0..3), s1 aggregates w1,w2
// (A-BM 11000000), s7 aggregates w3,w4 (A-BM 00110000), s5 is a plain
// BITMAP forwarder between s7 and the root, s6 is the root (A-BM 11110000)
// and disseminates the result through its BIFT. Parents get twice their
// children's Timeout so that a child's PARTIAL arrives before the parent's
// own timer fires.
func fig1(t testing.TB, tweak func(*parser.ContextRecord)) *fabric {
	f := newFabric(t)
	f.node("s1", 3)
	f.node("s7", 3)
	f.node("s5", 2)
	f.node("s6", 2)
	for i := 1; i <= 4; i++ {
		f.host(fmt.Sprintf("w%d", i))
	}
	f.link("w1", 0, "s1", 0)
	f.link("w2", 0, "s1", 1)
	f.link("w3", 0, "s7", 0)
	f.link("w4", 0, "s7", 1)
	f.link("s1", 2, "s6", 0)
	f.link("s7", 2, "s5", 0)
	f.link("s5", 1, "s6", 1)
	ctx := func(role parser.Role, to uint32) parser.ContextRecord {
		cr := baseContext(role)
		cr.TimeoutMs = to
		if tweak != nil {
			tweak(&cr)
		}
		return cr
	}
	leaf := func(name, abm, m0, m1 string) {
		f.stage(name, ctx(parser.RoleLeaf, 50), abm, 1, []bspec{
			{kind: parser.KindContributor, port: 0, rank: true},
			{kind: parser.KindContributor, port: 1, rank: true},
			{kind: parser.KindResultOut, port: 0, mask: m0, rank: true},
			{kind: parser.KindResultOut, port: 1, mask: m1, rank: true},
			{kind: parser.KindParent, port: 2},
			{kind: parser.KindResultIn, port: 2},
		})
	}
	leaf("s1", "11000000", "10000000", "01000000")
	leaf("s7", "00110000", "00100000", "00010000")
	f.stage("s5", ctx(parser.RoleInternal, 100), "", 1, []bspec{
		{kind: parser.KindContributor, port: 0},
		{kind: parser.KindParent, port: 1},
		{kind: parser.KindResultIn, port: 1},
		{kind: parser.KindResultOut, port: 0, mask: "00110000"},
	})
	f.stage("s6", ctx(parser.RoleRoot, 200), "11110000", 1, []bspec{
		{kind: parser.KindContributor, port: 0},
		{kind: parser.KindContributor, port: 1},
		{kind: parser.KindResultOut, port: 0, mask: "11000000"},
		{kind: parser.KindResultOut, port: 1, mask: "00110000"},
	})
	return f
}

const chunk = 16

type arInput struct {
	vals [4][]float32 // per worker
}

func arInputs(r *rand.Rand, tokens int) []arInput {
	in := make([]arInput, tokens)
	for k := range in {
		for w := 0; w < 4; w++ {
			for i := 0; i < chunk; i++ {
				in[k].vals[w] = append(in[k].vals[w], randF32(r))
			}
		}
	}
	return in
}

func workerFrame(f *fabric, w int, token uint64, vals []float32) []byte {
	return f.hostFrame(fmt.Sprintf("w%d", w+1), parser.ClassData, token, 0, flat(uint32(w)), parser.EncFlat, uint32(token-1)*chunk, vals)
}

// checkResults verifies that every worker in want got exactly one RESULT
// per token, addressed to itself only, equal to the FP32 rounding of the
// exact sum over the contributors in want.
func checkResults(t *testing.T, f *fabric, in []arInput, want map[uint64][]int) {
	t.Helper()
	for w := 0; w < 4; w++ {
		h := f.hosts[fmt.Sprintf("w%d", w+1)]
		seen := map[uint64]int{}
		for _, fr := range h.got {
			x := decodeFrame(t, fr)
			if x.d.Class != parser.ClassResult {
				t.Fatalf("w%d got class %v", w+1, x.d.Class)
			}
			if len(x.eps) != 1 || x.eps[0] != uint32(w) {
				t.Fatalf("w%d got a copy for %v", w+1, x.eps)
			}
			tok := x.d.Ext.Token
			seen[tok]++
			contrib := want[tok]
			if x.d.First != uint32(tok-1)*chunk || len(x.vals) != chunk {
				t.Fatalf("w%d token %d: range %d+%d", w+1, tok, x.d.First, len(x.vals))
			}
			for i := 0; i < chunk; i++ {
				var terms []float32
				for _, c := range contrib {
					terms = append(terms, in[tok-1].vals[c][i])
				}
				if exp := roundFP32(exactSum(terms...)); x.vals[i].Cmp(exp) != 0 {
					t.Fatalf("w%d token %d element %d: got %v want %v (contributors %v)", w+1, tok, i,
						x.vals[i].FloatString(20), exp.FloatString(20), contrib)
				}
			}
		}
		for tok, c := range want {
			inSet := false
			for _, x := range c {
				inSet = inSet || x == w
			}
			n := seen[tok]
			if inSet && n != 1 || !inSet && n != 0 {
				t.Fatalf("w%d token %d: %d results, want %v", w+1, tok, n, inSet)
			}
		}
	}
}

// resultsPartial counts the RESULT frames the workers hold, and those with
// XFlag PARTIAL.
func resultsPartial(t *testing.T, f *fabric) (n, partial int) {
	for w := 0; w < 4; w++ {
		for _, fr := range f.hosts[fmt.Sprintf("w%d", w+1)].got {
			n++
			if decodeFrame(t, fr).d.Ext.XFlags&parser.XFlagPartial != 0 {
				partial++
			}
		}
	}
	return n, partial
}

func TestFig1AllReduce(t *testing.T) {
	const tokens = 8
	for _, tc := range []struct {
		name    string
		tweak   func(*parser.ContextRecord)
		shuffle bool
		dups    bool
	}{
		{name: "kulisch-partials"},
		{name: "auto-partials", tweak: func(c *parser.ContextRecord) { c.PartialPolicy = parser.FormatAuto }},
		{name: "shuffled-with-duplicates", shuffle: true, dups: true},
		{name: "auto-shuffled-with-duplicates", tweak: func(c *parser.ContextRecord) { c.PartialPolicy = parser.FormatAuto }, shuffle: true, dups: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			f := fig1(t, tc.tweak)
			in := arInputs(r, tokens)
			var frames []delivery
			for k := 0; k < tokens; k++ {
				for w := 0; w < 4; w++ {
					fr := workerFrame(f, w, uint64(k+1), in[k].vals[w])
					frames = append(frames, delivery{end{fmt.Sprintf("w%d", w+1), 0}, fr})
					if tc.dups && r.IntN(3) == 0 {
						dup := append([]byte(nil), fr...)
						dup[parser.HdrOff+33] |= parser.FlagRetransmit
						frames = append(frames, delivery{end{fmt.Sprintf("w%d", w+1), 0}, dup})
					}
				}
			}
			if tc.shuffle {
				r.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
				f.rng = r
			}
			f.q = append(f.q, frames...)
			f.run()
			want := map[uint64][]int{}
			for k := 1; k <= tokens; k++ {
				want[uint64(k)] = []int{0, 1, 2, 3}
			}
			checkResults(t, f, in, want)
			if n, p := resultsPartial(t, f); n != 4*tokens || p != 0 {
				t.Errorf("%d results, %d of them PARTIAL", n, p)
			}
			for name, n := range f.nodes {
				if _, _, open, _ := n.sh.Status(testOp); open != 0 {
					t.Errorf("%s: %d aggregations left open", name, open)
				}
			}
			if tc.dups && f.cnt.Duplicates.Load() == 0 {
				t.Errorf("duplicates injected but none recognised")
			}
			if got := f.cnt.Completed.Load(); got != 3*tokens {
				t.Errorf("completed aggregations %d, want %d (s1, s7, s6 per token)", got, 3*tokens)
			}
			if got := f.cnt.Forwarded.Load(); got != tokens {
				t.Errorf("s5 forwarded %d, want %d", got, tokens)
			}
		})
	}
}

// TestFig1MissingWorker: w4 never sends token 1. s7 emits a PARTIAL whose
// P-BM names exactly the contributions it holds; the root's result goes to
// exactly the contributors and holds exactly their sum.
func TestFig1MissingWorker(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	f := fig1(t, nil)
	in := arInputs(r, 1)
	var partials []decoded
	f.tap = func(to end, fr []byte) bool {
		if to.name == "s6" {
			if x := decodeFrame(t, fr); x.d.Ext.XFlags&parser.XFlagPartial != 0 {
				partials = append(partials, x)
			}
		}
		return true
	}
	for w := 0; w < 3; w++ {
		f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, 1, in[0].vals[w]))
	}
	f.run()
	for _, h := range f.hosts {
		if len(h.got) != 0 {
			t.Fatalf("%s got a result before the timeout", h.name)
		}
	}
	// Introspection names what each open aggregation waits for.
	s7 := f.nodes["s7"].sh
	s7.publish(f.now)
	if sl := s7.Snapshot().Ctxs[0].Slots; len(sl) != 1 || sl[0].Kind != "abm" || sl[0].Target[:8] != "00110000" ||
		sl[0].Received[:8] != "00100000" || sl[0].WaitingFor[:8] != "00010000" {
		t.Fatalf("s7 snapshot slots %+v", sl)
	}
	f.tick(60*msT, "s7", "s5", "s1", "s6") // s7's timer (50 ms) only
	if len(partials) != 1 {
		t.Fatalf("%d PARTIALs reached the root, want 1", len(partials))
	}
	p := partials[0]
	// Miss set = s7's A-BM AND NOT P-BM = {w4} (endpoint 3).
	if fmt.Sprint(p.eps) != "[2]" {
		t.Fatalf("PARTIAL P-BM %v, want [2] (w3): miss set must be exactly w4", p.eps)
	}
	for i := 0; i < chunk; i++ {
		if p.vals[i].Cmp(exactSum(in[0].vals[2][i])) != 0 {
			t.Fatalf("PARTIAL element %d carries %v", i, p.vals[i])
		}
	}
	snap := f.nodes["s7"].sh
	snap.publish(f.now)
	if ps := snap.Snapshot().Ctxs[0].Partials; len(ps) != 1 || ps[0].Missing[:8] != "00010000" {
		t.Fatalf("s7 snapshot partials %+v", ps)
	}
	f.tick(200 * msT) // the root's timer
	checkResults(t, f, in, map[uint64][]int{1: {0, 1, 2}})
	// The result lacks w4's contribution: it says so (8.7).
	if n, p := resultsPartial(t, f); n != 3 || p != 3 {
		t.Fatalf("%d results, %d of them PARTIAL; want 3 and 3", n, p)
	}
	if got := f.cnt.Partials.Load(); got != 2 {
		t.Fatalf("PARTIALs %d, want 2 (s7 and the root)", got)
	}
}

// TestIsolation: a contribution with another tenant's ID, and one whose P-BM
// holds a bit outside the node's A-BM, are dropped and change nothing.
func TestIsolation(t *testing.T) {
	f := fig1(t, nil)
	s1 := f.nodes["s1"].sh
	vals := make([]float32, chunk)
	good := workerFrame(f, 0, 1, vals)
	tenant := append([]byte(nil), good...)
	parser.ExtHeader(tenant[parser.DataBodyOff:]).SetTenant(testTenant + 1)
	foreign := f.hostFrame("w1", parser.ClassData, 1, 0, flat(0, 5), parser.EncFlat, 0, vals)
	for _, tc := range []struct {
		name string
		fr   []byte
		drop Drop
	}{{"tenant", tenant, DropTenantMismatch}, {"foreign", foreign, DropBadEndpoint}} {
		before := f.cnt.Drops[tc.drop].Load()
		f.inject("w1", tc.fr)
		f.run()
		if f.cnt.Drops[tc.drop].Load() != before+1 {
			t.Fatalf("%s: not counted as %v", tc.name, tc.drop)
		}
		if _, _, open, _ := s1.Status(testOp); open != 0 || f.cnt.Merged.Load() != 0 {
			t.Fatalf("%s: state changed (open %d)", tc.name, open)
		}
		for _, h := range f.hosts {
			if len(h.got) != 0 {
				t.Fatalf("%s: %s received something", tc.name, h.name)
			}
		}
	}
	// Another worker's bit from w1's binding (P-BM {w3}) is not s1's: it is
	// not aggregated at s1 but forwarded toward the root (A-BM AND P-BM = 0).
	f.inject("w1", f.hostFrame("w1", parser.ClassData, 1, 0, flat(2), parser.EncFlat, 0, vals))
	f.run()
	if f.cnt.Forwarded.Load() != 1 {
		t.Fatalf("not-ours contribution not forwarded")
	}
	_ = big.NewInt
}

// TestAuth: a keyed job drops frames without a valid tag and signs
// everything it derives.
func TestAuth(t *testing.T) {
	f := fig1(t, nil)
	key := []byte("0123456789abcdef0123456789abcdef")
	f.keys.Set(testOp.Job, key)
	vals := make([]float32, chunk)
	for i := range vals {
		vals[i] = float32(i)
	}
	unsigned := workerFrame(f, 0, 1, vals)
	f.inject("w1", unsigned)
	f.run()
	if f.cnt.Drops[DropAuthFailed].Load() != 1 {
		t.Fatalf("unsigned frame of a keyed job not dropped")
	}
	bad := f.hostFrame("w1", parser.ClassData, 1, parser.XFlagAuth, flat(0), parser.EncFlat, 0, vals)
	bad[len(bad)-1] ^= 1 // corrupt a value: the tag no longer matches
	f.inject("w1", bad)
	f.run()
	if f.cnt.Drops[DropAuthFailed].Load() != 2 {
		t.Fatalf("corrupted frame of a keyed job not dropped")
	}
	for w := 0; w < 4; w++ {
		f.inject(fmt.Sprintf("w%d", w+1), f.hostFrame(fmt.Sprintf("w%d", w+1), parser.ClassData, 1, parser.XFlagAuth,
			flat(uint32(w)), parser.EncFlat, 0, vals))
	}
	var derived int
	auth := parser.NewAuthenticator(key)
	f.tap = func(to end, fr []byte) bool {
		derived++
		if err := auth.Verify(fr); err != nil {
			t.Errorf("derived frame to %v not signed: %v", to, err)
		}
		return true
	}
	f.run()
	if derived < 4 {
		t.Fatalf("only %d frames", derived)
	}
	for w := 0; w < 4; w++ {
		if n := len(f.hosts[fmt.Sprintf("w%d", w+1)].got); n != 1 {
			t.Fatalf("w%d got %d results", w+1, n)
		}
	}
}

// TestFig1Repair: w4's contribution is late. s7 times out and sends a
// PARTIAL for w3; the root (whose timer is long) keeps waiting; w4's
// retransmission reaches s7, which aggregates only the still-missing part
// and sends it up at once, and the root completes with the full exact sum.
func TestFig1Repair(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	f := fig1(t, nil)
	// Re-stage the root with a long timer.
	s6 := f.nodes["s6"].sh
	s6.Abort(testOp)
	cr := baseContext(parser.RoleRoot)
	cr.TimeoutMs = 10000
	f.stage("s6", cr, "11110000", 1, []bspec{
		{kind: parser.KindContributor, port: 0},
		{kind: parser.KindContributor, port: 1},
		{kind: parser.KindResultOut, port: 0, mask: "11000000"},
		{kind: parser.KindResultOut, port: 1, mask: "00110000"},
	})
	in := arInputs(r, 1)
	for w := 0; w < 3; w++ {
		f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, 1, in[0].vals[w]))
	}
	f.run()
	f.tick(60 * msT) // s7's PARTIAL {w3} goes up; the root waits
	if f.cnt.Partials.Load() != 1 {
		t.Fatalf("PARTIALs %d", f.cnt.Partials.Load())
	}
	// A duplicate of w3 after the PARTIAL is recognised, not re-sent.
	f.inject("w3", workerFrame(f, 2, 1, in[0].vals[2]))
	f.run()
	if f.cnt.Duplicates.Load() != 1 {
		t.Fatalf("late duplicate not recognised")
	}
	f.inject("w4", workerFrame(f, 3, 1, in[0].vals[3]))
	f.run()
	checkResults(t, f, in, map[uint64][]int{1: {0, 1, 2, 3}})
	// The root merged s7's PARTIAL: its result is marked PARTIAL although
	// the repair made the sum complete. The mark is conservative (8.7): a
	// node cannot tell an exact PARTIAL from one below a domain boundary;
	// here the P-BM (D-BM = all four) shows that nobody is missing.
	if n, p := resultsPartial(t, f); n != 4 || p != 4 {
		t.Fatalf("%d results, %d of them PARTIAL; want 4 and 4", n, p)
	}
}

// TestAggregateEncodings: s1's A-BM and the workers' P-BMs in each
// encoding; the merged DATA carries P-BM {w1,w2} in the A-BM's encoding,
// byte for byte canonical, and the root's result reaches everyone.
// TestAggregateEncodings: hosts send P-BMs in one encoding, the node's A-BM
// is in the same or another: the node reads any encoding and its partial
// carries the OR in its own A-BM's encoding (protocol 8.2: a node may
// translate a host's node list into the local bitmap), and every host still
// gets one result.
func TestAggregateEncodings(t *testing.T) {
	for _, c := range []struct{ host, node uint8 }{
		{parser.EncFlat, parser.EncFlat}, {parser.EncHier, parser.EncHier}, {parser.EncList, parser.EncList},
		{parser.EncList, parser.EncFlat}, {parser.EncHier, parser.EncFlat}, {parser.EncFlat, parser.EncList}} {
		f := fig1(t, nil)
		s1 := f.nodes["s1"].sh
		s1.Abort(testOp)
		spec := f.stageSpec("s1", baseContext(parser.RoleLeaf), "11000000", 1, []bspec{
			{kind: parser.KindContributor, port: 0, rank: true},
			{kind: parser.KindContributor, port: 1, rank: true},
			{kind: parser.KindResultOut, port: 0, mask: "10000000", rank: true},
			{kind: parser.KindResultOut, port: 1, mask: "01000000", rank: true},
			{kind: parser.KindParent, port: 2},
			{kind: parser.KindResultIn, port: 2},
		})
		spec.Sets[2] = parser.SetRecord{BindingIndex: parser.OwnSet, Encoding: c.node, Set: encodeSet(c.node, 64, []uint32{0, 1})}
		stg := decodeStage(t, testOp, &spec)
		if st, _ := s1.Stage(f.now, testOp, &stg, 3); st != parser.StatusOK || s1.Commit(f.now, testOp) != parser.StatusOK {
			t.Fatalf("%d->%d: re-stage s1: %v", c.host, c.node, st)
		}
		var up []decoded
		f.tap = func(to end, fr []byte) bool {
			if to.name == "s6" && to.port == 0 {
				up = append(up, decodeFrame(t, fr))
			}
			return true
		}
		vals := []float32{1, 2, 3}
		for w := 0; w < 4; w++ {
			name := fmt.Sprintf("w%d", w+1)
			f.inject(name, f.hostFrame(name, parser.ClassData, 1, 0, encodeSet(c.host, 64, []uint32{uint32(w)}), c.host, 0, vals))
		}
		f.run()
		if len(up) != 1 || up[0].d.Ext.Encoding != c.node || string(up[0].d.Ext.Set) != string(encodeSet(c.node, 64, []uint32{0, 1})) {
			t.Fatalf("%d->%d: s1 sent %d frames up (want 1 with the A-BM in encoding %d)", c.host, c.node, len(up), c.node)
		}
		for w := 0; w < 4; w++ {
			if n := len(f.hosts[fmt.Sprintf("w%d", w+1)].got); n != 1 {
				t.Fatalf("%d->%d: w%d got %d results", c.host, c.node, w+1, n)
			}
		}
	}
}

// TestFig1LostMergedRepair: s1 merges w1+w2 and sends the merged DATA up;
// it is lost before the root. w1 and w2 retransmit (after the late guard);
// s1 already emitted that token and must not drop them nor merge them again:
// it forwards each unmerged on PARENT, the root merges them into what it
// holds from s7 and multicasts the exact four-worker sum to everyone,
// exactly once. A second copy of w1 after the root completed is a duplicate
// there and changes nothing.
func TestFig1LostMergedRepair(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	f := fig1(t, nil)
	in := arInputs(r, 1)
	lost := 0
	f.tap = func(to end, fr []byte) bool {
		if to.name == "s6" && to.port == 0 && lost == 0 {
			lost++
			return false // s1's merged {w1,w2}
		}
		return true
	}
	for w := 0; w < 4; w++ {
		f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, 1, in[0].vals[w]))
	}
	f.run()
	if lost != 1 || f.cnt.Completed.Load() != 2 { // s1 and s7 completed; the root waits
		t.Fatalf("lost %d, completed %d", lost, f.cnt.Completed.Load())
	}
	for w := 0; w < 4; w++ {
		if n := len(f.hosts[fmt.Sprintf("w%d", w+1)].got); n != 0 {
			t.Fatalf("w%d got %d results before the repair", w+1, n)
		}
	}
	f.tick(5 * msT) // host retransmission interval; no timer fires yet
	var up []decoded
	f.tap = func(to end, fr []byte) bool {
		if to.name == "s6" && to.port == 0 {
			up = append(up, decodeFrame(t, fr))
		}
		return true
	}
	merged := f.cnt.Merged.Load()
	f.inject("w1", workerFrame(f, 0, 1, in[0].vals[0]))
	f.inject("w2", workerFrame(f, 1, 1, in[0].vals[1]))
	f.inject("w1", workerFrame(f, 0, 1, in[0].vals[0])) // a duplicated retransmission
	f.run()
	if got := f.cnt.LateForward.Load(); got != 3 {
		t.Fatalf("late_forward %d, want 3", got)
	}
	// Each went up unmerged: its own single-bit P-BM.
	if len(up) != 3 || len(up[0].eps) != 1 || up[0].eps[0] != 0 || len(up[1].eps) != 1 || up[1].eps[0] != 1 {
		t.Fatalf("frames up from s1: %d %+v", len(up), up)
	}
	if d := f.cnt.Merged.Load() - merged; d != 2 { // at the root only, never again at s1
		t.Fatalf("merged %d contributions in the repair, want 2", d)
	}
	if f.cnt.Duplicates.Load() != 1 || f.cnt.Partials.Load() != 0 {
		t.Fatalf("duplicates %d, partials %d", f.cnt.Duplicates.Load(), f.cnt.Partials.Load())
	}
	checkResults(t, f, in, map[uint64][]int{1: {0, 1, 2, 3}})
}

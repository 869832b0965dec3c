package bitmap

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/parser"
)

func TestStageChecks(t *testing.T) {
	f := fig1(t, nil)
	sh := NewShard(Config{})
	ok := f.stageSpec("s6", baseContext(parser.RoleRoot), "11110000", 1, []bspec{
		{kind: parser.KindContributor, port: 0},
		{kind: parser.KindContributor, port: 1},
		{kind: parser.KindResultOut, port: 0, mask: "11000000"},
		{kind: parser.KindResultOut, port: 1, mask: "00110000"},
	})
	// Set records follow the 4 bindings: 40 + 64 = 104 is the first one.
	for _, tc := range []struct {
		name   string
		mod    func(s *parser.StageSpec)
		ports  int
		st     parser.Status
		detail uint16
	}{
		{"not bitmap", func(s *parser.StageSpec) {
			s.Context.Collective = parser.CollAllReduce
			s.Context.Tenant = 0
			s.Sets = nil
		}, 2, parser.StatusUnsupported, parser.NoDetail},
		{"port", nil, 1, parser.StatusInvalidBinding, 40 + 16 + 8},
		{"group MAC", func(s *parser.StageSpec) { s.Bindings[2].PeerMAC[0] |= 1 }, 2, parser.StatusInvalidBinding, 40 + 32 + 10},
		{"duplicate stream", func(s *parser.StageSpec) { s.Bindings[1].Stream = s.Bindings[0].Stream }, 2, parser.StatusInvalidBinding, 40 + 16 + 2},
		{"root with parent", func(s *parser.StageSpec) { s.Bindings[0].Kind = parser.KindParent }, 2, parser.StatusInvalidBinding, 14},
		{"overlapping masks", func(s *parser.StageSpec) { s.Sets[1].Set = figSet(t, "01100000", 1) }, 2, parser.StatusInvalid, 104 + 20},
		{"mask on a contributor", func(s *parser.StageSpec) { s.Sets[0].BindingIndex = 0 }, 2, parser.StatusInvalid, 104},
		{"ok", nil, 2, parser.StatusOK, parser.NoDetail},
		{"again", nil, 2, parser.StatusBadState, parser.NoDetail},
	} {
		spec := ok
		spec.Bindings = append([]parser.Binding(nil), ok.Bindings...)
		spec.Sets = append([]parser.SetRecord(nil), ok.Sets...)
		if tc.mod != nil {
			tc.mod(&spec)
		}
		stg := decodeStage(t, testOp, &spec)
		st, det := sh.Stage(0, testOp, &stg, tc.ports)
		if st != tc.st || det != tc.detail {
			t.Errorf("%s: %v detail %d, want %v detail %d", tc.name, st, det, tc.st, tc.detail)
		}
	}
}

func TestLifecycle(t *testing.T) {
	f := fig1(t, nil)
	s1 := f.nodes["s1"].sh
	other := testOp
	other.OpGen++
	if s1.HandleData(f.now, 0, workerFrame(f, 0, 1, make([]float32, chunk)), f.nodes["s1"].tx) {
		// testOp is ours: HandleData must report true; checked below.
	} else {
		t.Fatal("HandleData refused an installed context")
	}
	fr := workerFrame(f, 0, 2, make([]float32, chunk))
	parser.OpIdentity(fr[parser.HdrOff:]).SetKey(other)
	if s1.HandleData(f.now, 0, fr, f.nodes["s1"].tx) || s1.Owns(other) {
		t.Fatal("a frame of another generation was taken")
	}
	// Token 1 is open at s1 (w1 only): RELEASE refused, ABORT accepted.
	if st, _, open, _ := s1.Status(testOp); st != parser.StateActive || open != 1 {
		t.Fatalf("state %v open %d", st, open)
	}
	if st := s1.Release(testOp); st != parser.StatusBadState {
		t.Fatalf("RELEASE with open state: %v", st)
	}
	if st := s1.Abort(testOp); st != parser.StatusOK || s1.Owns(testOp) {
		t.Fatalf("ABORT: %v", st)
	}
	// s7 is ACTIVE with nothing open: RELEASE frees it.
	s7 := f.nodes["s7"].sh
	if st := s7.Release(testOp); st != parser.StatusOK {
		t.Fatalf("RELEASE of an idle context: %v", st)
	}
	if st := s7.Commit(0, testOp); st != parser.StatusBadState {
		t.Fatalf("COMMIT after RELEASE: %v", st)
	}
	f.q = nil
	s7.Tick(f.now, f.nodes["s7"].tx)
	if len(s7.Snapshot().Ctxs) != 0 {
		t.Fatal("snapshot still shows a released context")
	}
}

func TestNotActive(t *testing.T) {
	f := fig1(t, nil)
	spec := f.stageSpec("s1", baseContext(parser.RoleLeaf), "11000000", 1, []bspec{
		{kind: parser.KindContributor, port: 0, rank: true}, {kind: parser.KindParent, port: 2}})
	op := testOp
	op.Op++
	stg := decodeStage(t, op, &spec)
	s1 := f.nodes["s1"].sh
	if st, _ := s1.Stage(0, op, &stg, 3); st != parser.StatusOK {
		t.Fatal(st)
	}
	fr := workerFrame(f, 0, 1, make([]float32, chunk))
	parser.OpIdentity(fr[parser.HdrOff:]).SetKey(op)
	if !s1.HandleData(f.now, 0, fr, f.nodes["s1"].tx) || f.cnt.Drops[DropNotActive].Load() != 1 {
		t.Fatal("frame for a STAGED context not dropped as not_active")
	}
}

// TestFig1Arrival: FP32_ARRIVAL with FP32 partials. Each node adds its two
// inputs with one rounding, so the oracle is the float32 tree
// (w1+w2)+(w3+w4), whatever the arrival order.
func TestFig1Arrival(t *testing.T) {
	f := fig1(t, func(c *parser.ContextRecord) {
		c.AccPolicy, c.PartialPolicy, c.OutputFormat, c.KulischWidth = parser.AccFP32Arrival, parser.FormatFP32, parser.FormatFP32, 0
	})
	r := rand.New(rand.NewPCG(9, 9))
	in := arInputs(r, 4)
	f.rng = r
	for k := 0; k < 4; k++ {
		for w := 0; w < 4; w++ {
			f.inject(fmt.Sprintf("w%d", w+1), workerFrame(f, w, uint64(k+1), in[k].vals[w]))
		}
	}
	f.run()
	for w := 0; w < 4; w++ {
		h := f.hosts[fmt.Sprintf("w%d", w+1)]
		if len(h.got) != 4 {
			t.Fatalf("w%d got %d results", w+1, len(h.got))
		}
		for _, fr := range h.got {
			x := decodeFrame(t, fr)
			v := in[x.d.Ext.Token-1].vals
			for i := 0; i < chunk; i++ {
				want := (v[0][i] + v[1][i]) + (v[2][i] + v[3][i])
				if x.vals[i].Cmp(new(big.Rat).SetFloat64(float64(want))) != 0 {
					t.Fatalf("token %d element %d: %v want %v", x.d.Ext.Token, i, x.vals[i].FloatString(20), want)
				}
			}
		}
	}
}

// TestOversizeTokenPassesThrough: a token whose KULISCH partial cannot fit
// one frame is not merged at s1/s7 but forwarded unmerged; the root (FP32
// output, which fits) merges all four and the result is still exact. A token
// at exactly MaxTokenElements is merged in the network.
func TestOversizeTokenPassesThrough(t *testing.T) {
	f := fig1(t, nil)
	cr := baseContext(parser.RoleLeaf)
	limit := MaxTokenElements(&cr, parser.ExtHdrLen+12)
	r := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct {
		n      int
		merged bool
	}{{limit, true}, {limit + 1, false}, {100, false}} {
		before := f.cnt.PassThrough.Load()
		beforeDone := f.cnt.Completed.Load()
		var in arInput
		for w := 0; w < 4; w++ {
			for i := 0; i < tc.n; i++ {
				in.vals[w] = append(in.vals[w], randF32(r))
			}
		}
		for w := 0; w < 4; w++ {
			f.inject(fmt.Sprintf("w%d", w+1), f.hostFrame(fmt.Sprintf("w%d", w+1), parser.ClassData, uint64(tc.n), 0, flat(uint32(w)), parser.EncFlat, 0, in.vals[w]))
		}
		f.run()
		pass, done := f.cnt.PassThrough.Load()-before, f.cnt.Completed.Load()-beforeDone
		if tc.merged && (pass != 0 || done != 3) || !tc.merged && (pass != 4 || done != 1) {
			t.Fatalf("%d elements: %d passed through, %d aggregations completed", tc.n, pass, done)
		}
		for w := 0; w < 4; w++ {
			h := f.hosts[fmt.Sprintf("w%d", w+1)]
			if len(h.got) != 1 {
				t.Fatalf("%d elements: w%d got %d results", tc.n, w+1, len(h.got))
			}
			x := decodeFrame(t, h.got[0])
			h.got = nil
			for i := 0; i < tc.n; i++ {
				want := roundFP32(exactSum(in.vals[0][i], in.vals[1][i], in.vals[2][i], in.vals[3][i]))
				if x.vals[i].Cmp(want) != 0 {
					t.Fatalf("%d elements: element %d %v want %v", tc.n, i, x.vals[i], want)
				}
			}
		}
	}
}

func TestMaxTokenElements(t *testing.T) {
	cr := baseContext(parser.RoleLeaf)
	ext := parser.ExtHdrLen + 12 // one-word FLAT set
	n := MaxTokenElements(&cr, ext)
	// 1500 - 42 - 28 - 4 = 1426 bytes of KULISCH-288 values (37 bytes each).
	if n != 38 {
		t.Fatalf("MaxTokenElements = %d, want 38", n)
	}
	cr.AccPolicy, cr.PartialPolicy, cr.KulischWidth = parser.AccFP32Arrival, parser.FormatFP32, 0
	if n := MaxTokenElements(&cr, ext); n != 356 {
		t.Fatalf("FP32: %d, want 356", n)
	}
}

package conformance

// TestRankAM: ranks written only from docs/protocol.md (sections 6, 7 and
// the runtime channel of section 9) against the real Aggregation Manager
// (`prismctl am`) and three real prismd switches of the spine-leaf lab.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
)

func TestRankAM(t *testing.T) {
	start := time.Now()
	e := newRkEnv(t)
	t.Logf("lab and AM up in %v", time.Since(start).Round(time.Millisecond))
	t.Run("caps", e.rkCaps)
	t.Run("allreduce_kulisch", func(t *testing.T) {
		e.rkCollective(t, rkCase{coll: "allreduce", acc: "kulisch", n: 3000, seed: 1})
	})
	t.Run("allreduce_fp32_arrival", func(t *testing.T) {
		e.rkCollective(t, rkCase{coll: "allreduce", acc: "fp32", n: 2500, seed: 2})
	})
	t.Run("reduce_kulisch_root2", func(t *testing.T) {
		e.rkCollective(t, rkCase{coll: "reduce", acc: "kulisch", n: 2900, root: 2, seed: 3})
	})
	t.Run("reduce_fp32_arrival_root1", func(t *testing.T) {
		e.rkCollective(t, rkCase{coll: "reduce", acc: "fp32", n: 2000, root: 1, seed: 4})
	})
	t.Run("prepared_next_invocation", e.rkPrepared)
	t.Run("errors", e.rkErrors)
	t.Run("silent_rank", e.rkSilentRank)
	t.Run("persistent", e.rkPersistent)
	t.Run("persistent_keepalive_lost", e.rkKeepaliveLost)
	t.Run("am_metrics", e.rkMetrics)
	t.Logf("TestRankAM: %v", time.Since(start).Round(time.Millisecond))
}

// rkCaps reads every switch's capability records (5.3) from h4, a host
// the lab's switches accept CONTROL from, for the unsupported-tuple test.
func (e *rkEnv) rkCaps(t *testing.T) {
	e.fromCaps = map[string][]capRecord{}
	m := &manager{nic: e.nics[3], txn: uint32(time.Now().UnixNano()) | 1<<31}
	for _, sw := range []string{"s1", "l1", "l2"} {
		count := 1
		for p := 0; p < count; p++ {
			c := control{Txn: m.nextTxn(), SrcEP: 0xFFFE, DstEP: 1, Cmd: cmdCapsQuery, FragCount: 1, Body: []byte{byte(p), 0, 0, 0}}
			r, err := m.requestRaw(t, c, c.encode(), e.macOf(sw, deploy.NodeMACIface), 5)
			if err != nil || r.C.Cmd != cmdCapsResponse {
				t.Fatalf("%s CAPS_QUERY page %d: %v %+v", sw, p, err, r.C)
			}
			count = int(r.C.FragCount)
			pg, err := decodeCapsPage(r.C.Body)
			if err != nil {
				t.Fatalf("%s page %d: %v", sw, p, err)
			}
			e.fromCaps[sw] = append(e.fromCaps[sw], pg.Records...)
		}
		t.Logf("%s: %d capability records", sw, len(e.fromCaps[sw]))
	}
}

type rkCase struct {
	job     uint64 // 0: a fresh one
	seq     int
	coll    string
	acc     string
	n       uint32
	root    int
	seed    uint64
	timeout uint32
}

// rkFormat is the JSON name of a format code (9).
var rkFormat = map[uint8]string{fmtINT8: "int8", fmtFP16: "fp16", fmtBF16: "bf16", fmtFP32: "fp32", fmtKulisch: "kulisch", fmtAuto: "auto"}

// checkGrant checks one grant against 9.1 and the lab's topology.
func (e *rkEnv) checkGrant(t *testing.T, g *rkGrant, req map[string]any) {
	t.Helper()
	r := req["rank"].(int)
	what := fmt.Sprintf("rank %d grant", r)
	for _, f := range []string{"id", "op", "rank", "size", "collective", "input_format", "acc_policy", "partial_policy",
		"output_format", "kulisch_width", "vector_len", "mtu", "timeout_ms", "data", "rank_mac", "leaf", "leaf_mac",
		"leaf_port", "tree", "window"} {
		if _, ok := g.fields[f]; !ok {
			t.Errorf("%s has no field %q (9.1): %s", what, f, g.raw)
		}
	}
	persistent, _ := req["persistent"].(bool)
	if !persistent {
		for _, f := range []string{"persistent", "keepalive_ms"} {
			if _, ok := g.fields[f]; ok {
				t.Errorf("%s of an ordinary operation has %q (9.1: absent otherwise)", what, f)
			}
		}
	}
	if g.ID != g.Op.ident().String() {
		t.Errorf("%s: id %q, op %+v: want id = job-group-groupgen-opid-opgen (9)", what, g.ID, g.Op)
	}
	grp, _ := req["group"].(int)
	if g.Op.Job != req["job"].(uint64) || int(g.Op.Group) != grp {
		t.Errorf("%s: op job %d group %d, requested job %d group %d", what, g.Op.Job, g.Op.Group, req["job"], grp)
	}
	if g.Op.GroupGen < 1 {
		t.Errorf("%s: group_gen %d (9.5: starts at 1)", what, g.Op.GroupGen)
	}
	if int64(g.Op.OpGen) < e.amStart.Unix()-1 {
		t.Errorf("%s: op_gen %d below the Unix seconds at AM start %d (9.5)", what, g.Op.OpGen, e.amStart.Unix())
	}
	if g.Rank != r || g.Size != req["size"].(int) || g.Collective != req["collective"].(string) {
		t.Errorf("%s: rank %d size %d collective %q, requested %d %d %q", what, g.Rank, g.Size, g.Collective, r, req["size"], req["collective"])
	}
	if rr, ok := req["root_rank"].(int); ok && (g.RootRank == nil || *g.RootRank != rr) {
		t.Errorf("%s: root_rank %v, requested %d", what, g.RootRank, rr)
	}
	acc := req["acc_policy"].(string)
	wantPartial, wantW := "fp32", 0
	if acc == "kulisch" {
		wantPartial, wantW = "auto", 280 // 278 + ceil(log2 4) = 280, a whole byte
	}
	if g.InputFormat != "fp32" || g.AccPolicy != acc || g.PartialPolicy != wantPartial || g.OutputFormat != "fp32" {
		t.Errorf("%s: tuple %s/%s/%s/%s, want fp32/%s/%s/fp32 (9.1: defaults filled in)", what,
			g.InputFormat, g.AccPolicy, g.PartialPolicy, g.OutputFormat, acc, wantPartial)
	}
	if g.KulischWidth != wantW {
		t.Errorf("%s: kulisch_width %d, want %d (9.1)", what, g.KulischWidth, wantW)
	}
	wantTimeout := uint32(5000)
	if v, ok := req["timeout_ms"].(uint32); ok && v != 0 {
		wantTimeout = v
	}
	if g.VectorLen != req["vector_len"].(uint32) || g.MTU != 1500 || g.TimeoutMS != wantTimeout {
		t.Errorf("%s: vector_len %d mtu %d timeout_ms %d, want %d 1500 %d", what, g.VectorLen, g.MTU, g.TimeoutMS, req["vector_len"], wantTimeout)
	}
	if g.Data == nil || g.Data.StreamID == 0 || g.Data.SrcEndpoint == 0 || g.Data.DstEndpoint == 0 {
		t.Errorf("%s: data %+v (9.5: stream IDs and endpoints from 1 upward)", what, g.Data)
	}
	wantResult := req["collective"] == "allreduce" || req["root_rank"] == r
	if (g.Result != nil) != wantResult {
		t.Errorf("%s: result %+v, want present %v (9.1: absent for a REDUCE rank that is not root_rank)", what, g.Result, wantResult)
	}
	if g.Result != nil && (g.Result.StreamID == 0 || g.Result.SrcEndpoint == 0 || g.Result.DstEndpoint == 0) {
		t.Errorf("%s: result %+v", what, g.Result)
	}
	if want := e.macOf(e.hosts[r], "eth0").String(); g.RankMAC != want {
		t.Errorf("%s: rank_mac %q, want the topology's %s", what, g.RankMAC, want)
	}
	leaf, ifc := e.leafOf(r)
	if g.Leaf != leaf || g.LeafMAC != e.macOf(leaf, ifc).String() || g.LeafPort != deploy.PortIndex(e.lab.Topo, leaf, ifc) {
		t.Errorf("%s: leaf %s mac %s port %d, want %s, %s (%s:%s), %d", what, g.Leaf, g.LeafMAC, g.LeafPort,
			leaf, e.macOf(leaf, ifc), leaf, ifc, deploy.PortIndex(e.lab.Topo, leaf, ifc))
	}
	if g.Tree != "TREE" {
		t.Errorf("%s: tree %q, want TREE (4 ranks under two leaves)", what, g.Tree)
	}
	if w := g.Window; w != nil {
		perFrame := uint32(maxElemsPerFrame(1500) / 4) // FP32 from the ranks and on RESULT_IN
		wantE := max(uint32(w.Intervals)*perFrame, uint32(maxElemsPerFrame(1500)))
		if w.Intervals < 1 || w.ReplayDepth != w.Intervals || w.Bytes != uint32(w.Intervals)*1514 || w.Elements != wantE {
			t.Errorf("%s: window %+v, want replay_depth = intervals, bytes = intervals x (14 + 1500), elements = max(intervals x %d, 1452) = %d (9.1 [choice])",
				what, *w, perFrame, wantE)
		}
	}
}

// rkSameJSON reports whether two JSON texts hold the same value.
func rkSameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// rkBeginFour posts the four ranks' begins (and, when dup >= 0, a second
// identical one of rank dup) and returns the grants by rank.
func (e *rkEnv) rkBeginFour(t *testing.T, reqs []map[string]any, dup int) ([]*rkGrant, time.Time, bool) {
	t.Helper()
	hosts := []int{0, 1, 2, 3}
	all := reqs
	if dup >= 0 {
		hosts = append(hosts, dup)
		all = append(append([]map[string]any(nil), reqs...), reqs[dup])
	}
	sent := time.Now()
	ans := e.beginAll(all, hosts, 20*time.Second)
	grants := make([]*rkGrant, 4)
	ok := true
	for i, a := range ans {
		g, good := a.grant(t, fmt.Sprintf("begin of rank %d (request %d)", hosts[i], i))
		if !good {
			ok = false
			continue
		}
		if i < 4 {
			grants[i] = g
			e.checkGrant(t, g, reqs[i])
		} else if grants[dup] != nil && !rkSameJSON(g.raw, grants[dup].raw) {
			t.Errorf("rank %d arrived twice and got two different answers (9.1: repeated arrivals are ignored and get the same answer):\n%s\n%s", dup, grants[dup].raw, g.raw)
		}
	}
	if !ok {
		return nil, sent, false
	}
	// One operation: the same identity, tree and parameters for every rank;
	// endpoints and streams unique within the operation (9.5).
	eps, streams := map[uint16]int{}, map[uint16]int{}
	for r, g := range grants {
		if g.ID != grants[0].ID || g.Tree != grants[0].Tree || g.VectorLen != grants[0].VectorLen ||
			g.Leaf == grants[0].Leaf && !reflect.DeepEqual(g.Window, grants[0].Window) {
			t.Errorf("rank %d grant differs from rank 0's in identity, tree, vector or window: %s vs %s", r, g.raw, grants[0].raw)
		}
		for _, s := range []*rkStreamJSON{g.Data, g.Result} {
			if s != nil {
				eps[s.SrcEndpoint]++
				eps[s.DstEndpoint]++
				streams[s.StreamID]++
			}
		}
	}
	for k, n := range eps {
		if n > 1 {
			t.Errorf("endpoint %d appears %d times in the grants (9.5: endpoints are unique within the operation)", k, n)
		}
	}
	for k, n := range streams {
		if n > 1 {
			t.Errorf("stream ID %d appears %d times in the grants (9.5: stream IDs are unique within the operation)", k, n)
		}
	}
	return grants, sent, true
}

// rkCollective runs one ordinary REDUCE or ALLREDUCE of four ranks end to
// end: begin, grant, DATA, RESULT, done, and the AM's account of it.
func (e *rkEnv) rkCollective(t *testing.T, c rkCase) []*rkGrant {
	job := c.job
	if job == 0 {
		job = e.job()
	}
	timeout := c.timeout
	if timeout == 0 {
		timeout = 3000
	}
	reqs := make([]map[string]any, 4)
	for r := range reqs {
		reqs[r] = rkBeginReq(job, r, 4, e.hosts[r], c.coll, c.acc, c.n)
		reqs[r]["group"] = 5
		reqs[r]["seq"] = c.seq
		reqs[r]["timeout_ms"] = timeout
		if c.coll == "reduce" {
			reqs[r]["root_rank"] = c.root
		}
	}
	grants, _, ok := e.rkBeginFour(t, reqs, 1)
	if !ok {
		t.FailNow()
	}
	id := grants[0].ID
	in := rkInputs(c.seed, 4, int(c.n))
	ranks := make([]*rkRank, 4)
	for r := range ranks {
		ranks[r] = e.newRank(t, r, grants[r], false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for r := range ranks {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = ranks[r].sendRange(ctx, in[r], 0, int(c.n), false)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d DATA: %v", r, err)
		}
	}
	results := map[int][]float32{}
	for r, k := range ranks {
		if grants[r].Result == nil {
			continue
		}
		if v, ok := k.waitResult(t, c.n, 10*time.Second); ok {
			results[r] = v
		}
	}
	retrans := 0
	for r, k := range ranks {
		if results[r] != nil {
			k.checkResultIDs(t)
		}
		k.report(t)
		retrans += k.retrans
	}
	// done from every rank, with wait: every answer is the final status.
	var dwg sync.WaitGroup
	dans := make([]rkAnswer, 4)
	for r := range ranks {
		dwg.Add(1)
		go func(r int) {
			defer dwg.Done()
			dans[r] = e.done(r, id, true, "", true, 15*time.Second)
		}(r)
	}
	dwg.Wait()
	for r, a := range dans {
		if s, ok := a.status(t, fmt.Sprintf("rank %d done (wait)", r)); ok && s.State != "released" {
			t.Errorf("rank %d done with wait answered state %q, want released (9.2: answer only when final)", r, s.State)
		}
	}
	st, _ := e.opStatus(t, id)
	e.checkReleased(t, st, grants, c)
	// Results, bit for bit.
	leafOf := map[int]string{}
	for r, g := range grants {
		leafOf[r] = g.Leaf
	}
	tree := rkTreeOf(st, leafOf)
	checkStreamPeers(t, st, grants, e.hosts)
	for r, v := range results {
		bad := 0
		for i := 0; i < int(c.n); i++ {
			col := []float32{in[0][i], in[1][i], in[2][i], in[3][i]}
			got := math.Float32bits(v[i])
			var ok bool
			var want string
			if c.acc == "kulisch" {
				w := exactSum(col...)
				ok, want = got == math.Float32bits(w), fmt.Sprintf("%g (exact sum rounded once)", w)
			} else {
				set := tree.arrival(in, i)
				ok, want = set[got], fmt.Sprintf("one of %v (FP32 arrival over the tree)", rkFloats(set))
			}
			if !ok {
				if bad < 5 {
					t.Errorf("rank %d element %d: %g (%#08x), want %s; inputs %v", r, i, v[i], got, want, col)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("rank %d: %d of %d elements wrong", r, bad, c.n)
		}
	}
	if c.acc == "fp32" {
		// The inputs make FP32 arrival differ from the exact sum somewhere,
		// so the check above saw the policy at work.
		diff := 0
		for i := 0; i < int(c.n); i++ {
			if !tree.arrival(in, i)[math.Float32bits(exactSum(in[0][i], in[1][i], in[2][i], in[3][i]))] {
				diff++
			}
		}
		t.Logf("FP32_ARRIVAL: %d of %d elements differ from the exactly rounded sum", diff, c.n)
	}
	t.Logf("operation %s: %d result ranks checked, %d DATA retransmissions", id, len(results), retrans)
	// A repeated arrival after the grant gets the same answer (9.1: until
	// 3 x timeout + 1 minute after a grant).
	a := e.begin(0, reqs[0], 5*time.Second)
	if g, ok := a.grant(t, "rank 0 arriving again after done"); ok && !rkSameJSON(g.raw, grants[0].raw) {
		t.Errorf("rank 0 arriving again after the grant got a different answer (9.1):\n%s\n%s", grants[0].raw, g.raw)
	}
	return grants
}

// rkPrepared: once invocation 0 of (job, group) is granted, the AM sets up
// invocation 1 with the same parameters and hosts under a new Operation ID
// (9.5, prepared); ranks of invocation 1 that arrive with exactly those
// parameters get it.
func (e *rkEnv) rkPrepared(t *testing.T) {
	job := e.job()
	g0 := e.rkCollective(t, rkCase{job: job, seq: 0, coll: "allreduce", acc: "fp32", n: 600, seed: 5})
	if g0 == nil {
		return
	}
	var prepared *rkStatus
	for _, s := range e.opsOfJob(t, job) {
		if s.Seq == 1 {
			s := s
			prepared = &s
		}
	}
	if prepared == nil {
		t.Errorf("GET /v1/ops lists no operation for seq 1 of job %d after seq 0 was granted (9.5: preparation is on by default)", job)
	} else if prepared.State != "prepared" {
		t.Errorf("seq 1 of job %d is in state %q, want prepared (9.5)", job, prepared.State)
	}
	g1 := e.rkCollective(t, rkCase{job: job, seq: 1, coll: "allreduce", acc: "fp32", n: 600, seed: 6})
	if g1 == nil {
		return
	}
	if g1[0].Op.OpID == g0[0].Op.OpID && g1[0].Op.OpGen == g0[0].Op.OpGen {
		t.Errorf("seq 1 got the identity of seq 0: %s", g1[0].ID)
	}
	if prepared != nil && g1[0].ID != prepared.ID {
		t.Errorf("seq 1 was granted %s, not the operation prepared for it, %s (9.5)", g1[0].ID, prepared.ID)
	}
}

func rkFloats(set map[uint32]bool) []float32 {
	var r []float32
	for b := range set {
		r = append(r, math.Float32frombits(b))
	}
	return r
}

// checkReleased checks the status of a finished ordinary operation (9.2,
// 9.3): released, every node RELEASED, every rank done, no error; the tree
// as the grants describe it.
func (e *rkEnv) checkReleased(t *testing.T, st rkStatus, grants []*rkGrant, c rkCase) {
	t.Helper()
	if st.State != "released" || st.Error != nil {
		t.Errorf("status after every rank's done: state %q error %+v, want released without error (9.2): %s", st.State, st.Error, st)
	}
	if st.ID != grants[0].ID || st.Op != grants[0].Op || int(st.Seq) != c.seq || st.Collective != c.coll || st.Size != 4 || st.Persistent != nil {
		t.Errorf("status identity: %s", st)
	}
	if got := rkSortedInts(st.RanksDone); !reflect.DeepEqual(got, []int{0, 1, 2, 3}) {
		t.Errorf("ranks_done %v, want [0 1 2 3]", st.RanksDone)
	}
	if st.Tree != "TREE" || len(st.Nodes) == 0 || st.Nodes[0].Name != st.Root {
		t.Errorf("status tree %q root %q nodes %+v (9.3: every tree node, root first)", st.Tree, st.Root, st.Nodes)
	}
	wantRole := map[string]string{}
	for _, g := range grants {
		wantRole[g.Leaf] = "LEAF"
	}
	wantRole[st.Root] = "ROOT"
	for _, n := range st.Nodes {
		if n.State != "RELEASED" {
			t.Errorf("node %s state %q, want RELEASED (9.2: the AM RELEASEs every node)", n.Name, n.State)
		}
		if want := e.macOf(n.Name, deploy.NodeMACIface).String(); n.MAC != want {
			t.Errorf("node %s mac %q, want its node MAC %s (9.3, 9.5)", n.Name, n.MAC, want)
		}
		if w, ok := wantRole[n.Name]; ok && n.Role != w {
			t.Errorf("node %s role %q, want %s", n.Name, n.Role, w)
		}
		if (n.Name == st.Root) != (n.Parent == "") {
			t.Errorf("node %s parent %q (root %s)", n.Name, n.Parent, st.Root)
		}
	}
	for _, g := range grants {
		if _, ok := st.node(g.Leaf); !ok {
			t.Errorf("rank %d's leaf %s is not among the status's nodes %+v", g.Rank, g.Leaf, st.Nodes)
		}
	}
	found := false
	for _, s := range e.ops(t) {
		if s.ID == st.ID {
			found = true
			if s.State != st.State {
				t.Errorf("GET /v1/ops says state %q for %s, GET /v1/ops/{id} %q", s.State, s.ID, st.State)
			}
		}
	}
	if !found {
		t.Errorf("GET /v1/ops does not list %s (9.3: finished ones are kept 10 minutes)", st.ID)
	}
}

// rkMetrics checks the AM's /metrics (9.3) after the other subtests: the
// series it names exist and counted what those subtests did.
func (e *rkEnv) rkMetrics(t *testing.T) {
	a := e.call("h2", http.MethodGet, "/metrics", nil, 5*time.Second)
	if a.Err != nil || a.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %s", a)
	}
	text := string(a.Body)
	var am []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "prismd_am_") {
			am = append(am, l)
		}
	}
	t.Logf("AM series:\n%s", strings.Join(am, "\n"))
	atLeast := func(name string, min float64, why string) {
		t.Helper()
		v, ok := rkSeries(text, name)
		if !ok {
			t.Errorf("no series %s (9.3)", name)
		} else if v < min {
			t.Errorf("%s = %g, want >= %g: %s", name, v, min, why)
		}
	}
	atLeast("prismd_am_operations_begun_total", 9, "every grant of this test began an operation")
	atLeast("prismd_am_operations_granted_total", 9, "4 collectives, the silent-rank one, 2 persistent ones and 2 granted by finding R1/R2")
	atLeast("prismd_am_operations_completed_total", 5, "4 collectives and one persistent operation freed by every rank (9.3)")
	atLeast(`prismd_am_operations_failed_total{reason="rank_failed"}`, 1, "the silent-rank operation, reported failed by its ranks")
	atLeast(`prismd_am_operations_failed_total{reason="keepalive"}`, 1, "the persistent operation whose rank 1 sent no keepalive (9.7)")
	atLeast(`prismd_am_operations_failed_total{reason="unsupported"}`, 1, "the unsupported tuple (a setup error code of 9.4)")
	atLeast(`prismd_am_operations_failed_total{reason="topology"}`, 1, "the rank on node h9")
	atLeast("prismd_am_barrier_timeouts_total", 1, "the invocation whose rank 3 never arrived")
	atLeast(`prismd_am_prepared_operations_total{outcome="used"}`, 1, "seq 1 of prepared_next_invocation (9.5)")
	atLeast(`prismd_am_prepared_operations_total{outcome="unused"}`, 1, "the seq 1 prepared after every other ordinary grant (9.5)")
	atLeast(`prismd_am_rollbacks_total{result="complete"}`, 2, "the ABORT rounds of the failed and the freed persistent operations")
	if _, ok := rkSeries(text, "prismd_am_active_operations"); !ok {
		t.Errorf("no gauge prismd_am_active_operations (9.3)")
	}
	for _, cmd := range []string{"STAGE", "COMMIT", "RELEASE", "ABORT", "COMPLETE"} {
		found := false
		for _, l := range am {
			if strings.HasPrefix(l, "prismd_am_control_transactions_total{") && strings.Contains(strings.ToUpper(l), `"`+cmd+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no prismd_am_control_transactions_total series for command %s (9.3)", cmd)
		}
	}
}

// rkSeries is the value of one series, name and labels as exposed.
func rkSeries(text, name string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") {
			var v float64
			if _, err := fmt.Sscanf(strings.TrimSpace(l[len(name):]), "%g", &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

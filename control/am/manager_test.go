package am

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/internal/testlog"
	"github.com/prismd/prismd/parser"
)

type rig struct {
	t     *testing.T
	topo  *deploy.Topology
	hub   *hub
	m     *Manager
	nodes map[string]*fakeNode
	conn  *pipeConn // the AM's
}

func newRig(t *testing.T, topoName string, cfg Config) *rig {
	t.Helper()
	return newRigAt(t, topoName, cfg, net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1})
}

// newRigAt is newRig with the AM's CONTROL interface at amMAC (a host
// interface's MAC places the AM there in the topology).
func newRigAt(t *testing.T, topoName string, cfg Config, amMAC net.HardwareAddr) *rig {
	t.Helper()
	topo := loadTopo(t, topoName)
	h := newHub(1)
	r := &rig{t: t, topo: topo, hub: h, nodes: map[string]*fakeNode{}}
	for _, n := range topo.NodesOf(deploy.KindPrismd) {
		m := topo.MAC(n, deploy.NodeMACIface)
		r.nodes[n] = newFakeNode(t, h, n, net.HardwareAddr(m[:]))
	}
	amConn := h.attach(amMAC)
	amConn.parked = true // as PacketConn: replies reach the AM only while it expects them
	r.conn = amConn
	cfg.Topology, cfg.Conn = topo, amConn
	if cfg.RTO == 0 {
		cfg.RTO = 5 * time.Millisecond
	}
	if cfg.CtlTimeout == 0 {
		// Generous: the test host may be heavily loaded; only the tests
		// that wait for a silent node pay it.
		cfg.CtlTimeout = 1500 * time.Millisecond
	}
	// The AM's background work (a preparation whose STAGE a test silenced,
	// a keepalive check) may log after the test returned.
	tl := testlog.Until(t)
	if also := cfg.Logf; also != nil {
		cfg.Logf = func(format string, args ...any) { tl(format, args...); also(format, args...) }
	} else {
		cfg.Logf = tl
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	r.m = m
	return r
}

func req(job uint64, seq uint64, rank, size int, node, coll string) BeginRequest {
	return BeginRequest{Job: job, Group: 1, Seq: seq, Rank: rank, Size: size, Collective: coll,
		InputFormat: "fp32", AccPolicy: "kulisch", VectorLen: 1000, Node: node}
}

type result struct {
	g   *Grant
	err error
}

// beginAll runs Begin for every request concurrently.
func (r *rig) beginAll(reqs []BeginRequest) []result {
	res := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, q := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res[i].g, res[i].err = r.m.Begin(ctx, q)
		}()
	}
	wg.Wait()
	return res
}

// grantAll is beginAll when every rank must get its grant.
func (r *rig) grantAll(t *testing.T, reqs []BeginRequest) []*Grant {
	t.Helper()
	var grants []*Grant
	for i, x := range r.beginAll(reqs) {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
		grants = append(grants, x.g)
	}
	return grants
}

func reqsFor(job, seq uint64, coll string, hosts ...string) []BeginRequest {
	var q []BeginRequest
	for i, h := range hosts {
		q = append(q, req(job, seq, i, len(hosts), h, coll))
	}
	return q
}

// checkPlan verifies every staged context against the topology read by hand
// (deploy.PortIndex / deploy.MAC) and the grants against the leaves'
// bindings: an independent re-derivation of what the AM must have sent.
func (r *rig) checkPlan(op OpIdentity, hosts []string, grants []*Grant, coll parser.Collective, root int) {
	t := r.t
	t.Helper()
	staged := map[string]*fakeCtx{}
	for name, n := range r.nodes {
		if c := n.staged(op); c != nil {
			staged[name] = c
		}
	}
	macOf := func(node, iface string) string { m := r.topo.MAC(node, iface); return net.HardwareAddr(m[:]).String() }
	// Every rank: the leaf has a RANK CONTRIBUTOR on the host's port with
	// the host's MAC whose stream/endpoints match the grant.
	for rank, g := range grants {
		host := hosts[rank]
		peer, _ := r.topo.Peer(deploy.Endpoint{Node: host, Iface: "eth0"})
		leaf := staged[peer.Node]
		if leaf == nil {
			t.Fatalf("rank %d: leaf %s has no staged context", rank, peer.Node)
		}
		if g.Leaf != peer.Node || g.LeafMAC != macOf(peer.Node, peer.Iface) || g.RankMAC != macOf(host, "eth0") {
			t.Errorf("rank %d grant leaf %s %s rank MAC %s", rank, g.Leaf, g.LeafMAC, g.RankMAC)
		}
		port := deploy.PortIndex(r.topo, peer.Node, peer.Iface)
		var found, foundRes bool
		for _, b := range leaf.bindings {
			if b.Kind == parser.KindContributor && b.Stream == g.Data.StreamID {
				found = true
				if b.Flags != parser.BindingFlagRank || int(b.Port) != port || b.PeerMAC.String() != macOf(host, "eth0") ||
					b.Local != g.Data.DstEndpoint || b.Peer != g.Data.SrcEndpoint {
					t.Errorf("rank %d: leaf binding %+v vs grant %+v (port %d)", rank, b, g.Data, port)
				}
			}
			if g.Result != nil && b.Kind == parser.KindResultOut && b.Stream == g.Result.StreamID {
				foundRes = true
				if int(b.Port) != port || b.PeerMAC.String() != macOf(host, "eth0") || b.Local != g.Result.SrcEndpoint || b.Peer != g.Result.DstEndpoint {
					t.Errorf("rank %d: leaf result binding %+v vs grant %+v", rank, b, *g.Result)
				}
			}
		}
		if !found {
			t.Errorf("rank %d: no CONTRIBUTOR for stream %d at %s", rank, g.Data.StreamID, peer.Node)
		}
		wantRes := coll == parser.CollAllReduce || rank == root
		if wantRes != (g.Result != nil) || (wantRes && !foundRes) {
			t.Errorf("rank %d: result binding present=%v found=%v, want %v", rank, g.Result != nil, foundRes, wantRes)
		}
	}
	// Every PARENT / RESULT_IN has its mirror at the peer switch, and each
	// side names the other by the MAC of the port it sends from.
	for name, c := range staged {
		for _, b := range c.bindings {
			if b.Flags&parser.BindingFlagRank != 0 {
				continue
			}
			var mirror parser.BindingKind
			switch b.Kind {
			case parser.KindParent:
				mirror = parser.KindContributor
			case parser.KindResultIn:
				mirror = parser.KindResultOut
			default:
				continue
			}
			var peerName string
			for pn := range staged {
				for _, ifc := range deploy.Ports(r.topo, pn) {
					if macOf(pn, ifc) == b.PeerMAC.String() {
						peerName = pn
					}
				}
			}
			if peerName == "" {
				t.Errorf("%s: %v binding to unknown MAC %v", name, b.Kind, b.PeerMAC)
				continue
			}
			ok := false
			for _, pb := range staged[peerName].bindings {
				if pb.Kind == mirror && pb.Stream == b.Stream && pb.Local == b.Peer && pb.Peer == b.Local &&
					pb.PeerMAC.String() == macOf(name, deploy.Ports(r.topo, name)[b.Port]) &&
					b.PeerMAC.String() == macOf(peerName, deploy.Ports(r.topo, peerName)[pb.Port]) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: %v stream %d has no mirror %v at %s", name, b.Kind, b.Stream, mirror, peerName)
			}
		}
		if c.rec.MaxTerms != uint32(len(hosts)) || c.rec.Collective != coll {
			t.Errorf("%s: context %+v", name, c.rec)
		}
	}
}

func TestSetupSpineLeafAllReduce(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	hosts := []string{"h1", "h2", "h3", "h4"}
	grants := r.grantAll(t, reqsFor(7, 0, "allreduce", hosts...))
	op := grants[0].Op
	for _, g := range grants {
		if g.Op != op || g.Tree != "TREE" || g.KulischWidth != 280 || g.MTU != 1500 {
			t.Fatalf("grant %+v", g)
		}
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if s := r.nodes[n].opState(op); s != parser.StateActive {
			t.Errorf("%s state %v at grant time, want ACTIVE", n, s)
		}
		if c := r.nodes[n].staged(op); c.rec.Role == 0 {
			t.Errorf("%s: no role", n)
		}
	}
	if c := r.nodes["s1"].staged(op); c.rec.Role != parser.RoleRoot {
		t.Errorf("s1 role %v", c.rec.Role)
	}
	r.checkPlan(op, hosts, grants, parser.CollAllReduce, 0)
	// The data phase: no transaction waits, so a PacketConn would have no
	// receive socket, and the setup's replies all arrived while one was.
	if n, e := r.conn.expecting.Load(), r.conn.expects.Load(); n != 0 || e == 0 {
		t.Errorf("at grant time the AM expects %d replies after %d Expect calls, want 0 after some", n, e)
	}

	for i := range grants {
		st, err := r.m.Done(context.Background(), grants[i].ID, DoneRequest{Rank: i, OK: true, Wait: i == len(grants)-1})
		if err != nil {
			t.Fatal(err)
		}
		if i == len(grants)-1 && (st.State != "released" || st.Error != nil) {
			t.Fatalf("final status %+v", st)
		}
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if s := r.nodes[n].opState(op); s != parser.StateReleased {
			t.Errorf("%s state %v after done, want RELEASED", n, s)
		}
	}
	// A repeated arrival after the end still gets the same grant (9.1).
	if again := r.beginAll(reqsFor(7, 0, "allreduce", hosts...)[:1]); again[0].err != nil || again[0].g.ID != grants[0].ID {
		t.Errorf("rank 0 arriving again after done: %+v, want its grant %s", again[0], grants[0].ID)
	}
}

// TestEndedInvocationsBounded: the invocations of ended operations kept to
// answer repeated arrivals are at most maxEndedInvs, oldest out first.
func TestEndedInvocationsBounded(t *testing.T) {
	m := &Manager{invs: map[invKey]*invocation{}}
	var invs []*invocation
	for i := range maxEndedInvs + 100 {
		inv := &invocation{key: invKey{1, 1, uint64(i)}}
		m.invs[inv.key] = inv
		invs = append(invs, inv)
		m.ended(inv)
	}
	if len(m.invs) != maxEndedInvs || m.invs[invs[99].key] != nil || m.invs[invs[100].key] != invs[100] {
		t.Fatalf("%d invocations kept; the 100 oldest gone: %v, the 101st kept: %v", len(m.invs), m.invs[invs[99].key] == nil, m.invs[invs[100].key] != nil)
	}
}

func TestSetupReduceFatTree(t *testing.T) {
	r := newRig(t, "fat-tree", Config{})
	hosts := []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}
	q := reqsFor(9, 0, "reduce", hosts...)
	for i := range q {
		q[i].RootRank = 5
	}
	grants := r.grantAll(t, q)
	r.checkPlan(grants[0].Op, hosts, grants, parser.CollReduce, 5)
	// REDUCE result path: c1 -> c2 -> e3 -> h6 only; e1, e2, e4 get no
	// RESULT bindings; the forwarders a1..a4 nothing at all.
	op := grants[0].Op
	for _, n := range []string{"e1", "e2", "e4"} {
		for _, b := range r.nodes[n].staged(op).bindings {
			if b.Kind == parser.KindResultIn || b.Kind == parser.KindResultOut {
				t.Errorf("%s has result binding %+v", n, b)
			}
		}
	}
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		if r.nodes[n].staged(op) != nil {
			t.Errorf("forwarder %s was staged", n)
		}
	}
	st, _ := r.m.Op(grants[0].ID)
	if st.Root != "c1" || len(st.Nodes) != 6 || strings.Join(st.Forwarders, ",") != "a1,a2,a3,a4" {
		t.Errorf("status %+v", st)
	}
}

func TestIdempotentArrivalAndGenerations(t *testing.T) {
	r := newRig(t, "single", Config{})
	id := uint16(42)
	var prevGen uint32
	for seq := uint64(0); seq < 3; seq++ {
		q := reqsFor(1, seq, "allreduce", "h1", "h2")
		for i := range q {
			q[i].OpID = &id
		}
		// Rank 0 arrives three times.
		res := r.beginAll(append(q, q[0], q[0]))
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("seq %d arrival %d: %v", seq, i, x.err)
			}
		}
		if *res[0].g != *res[2].g || *res[0].g != *res[3].g {
			t.Errorf("repeated arrival got a different grant")
		}
		g := res[0].g
		if g.Op.OpID != 42 || g.Op.OpGen <= prevGen {
			t.Errorf("seq %d: op %+v, want id 42 and generation above %d", seq, g.Op, prevGen)
		}
		prevGen = g.Op.OpGen
		if n := r.nodes["sw1"].count(parser.CmdStage); n != int(seq)+1 {
			t.Errorf("%d STAGEs applied after %d invocations", n, seq+1)
		}
		r.doneAll([]*Grant{res[0].g, res[1].g})
	}
}

// TestPinnedOpIDInUseRefused: an invocation that pins the Operation ID of
// this AM's own operation that still runs is refused (400, naming it) and
// the running operation is left alone; pinned by one rank and left out by
// the other is a mismatch (the rank that pinned it got another). Before,
// the second setup retired the running operation on the switch.
func TestPinnedOpIDInUseRefused(t *testing.T) {
	r := newRig(t, "single", Config{})
	id := uint16(50)
	pin := func(q []BeginRequest) []BeginRequest {
		for i := range q {
			q[i].OpID = &id
		}
		return q
	}
	grants := r.grantAll(t, pin(reqsFor(3, 0, "allreduce", "h1", "h2")))
	stages := r.nodes["sw1"].count(parser.CmdStage)
	for i, x := range r.beginAll(pin(reqsFor(3, 1, "allreduce", "h1", "h2"))) {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "op_id 50 is in use by operation "+grants[0].ID+", which still runs") {
			t.Fatalf("rank %d: %v, want bad_request naming the running operation", i, x.err)
		}
	}
	if n := r.nodes["sw1"].count(parser.CmdStage); n != stages {
		t.Errorf("%d STAGEs after the refused invocation, want %d: nothing staged", n, stages)
	}
	if st, _ := r.m.Op(grants[0].ID); st.State != "active" {
		t.Errorf("the running operation is %q, want active", st.State)
	}
	q := reqsFor(3, 2, "allreduce", "h1", "h2")
	q[0].OpID = &id
	for i, x := range r.beginAll(q) {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeMismatch || !strings.Contains(ae.Message, "op_id") {
			t.Fatalf("one rank pins op_id, the other not: rank %d: %v, want a mismatch naming op_id", i, x.err)
		}
	}
}

func TestUnsupportedTupleNoStage(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	// l2 only knows FP32_ARRIVAL.
	var recs []capRecord
	for _, c := range fullCaps() {
		if c.Acc == parser.AccFP32Arrival {
			recs = append(recs, c)
		}
	}
	r.nodes["l2"].records = recs
	res := r.beginAll(reqsFor(3, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeUnsupported || ae.Node != "l2" {
			t.Fatalf("rank %d: err %v, want unsupported at l2", i, x.err)
		}
	}
	for n, fn := range r.nodes {
		if k := fn.count(parser.CmdStage); k != 0 {
			t.Errorf("%s got %d STAGEs", n, k)
		}
	}
}

func TestStageRefusedRollsBack(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	r.nodes["l2"].refuse[parser.CmdStage] = parser.StatusNoResources
	res := r.beginAll(reqsFor(4, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeSetupFailed || ae.Node != "l2" || !strings.Contains(ae.Message, "NO_RESOURCES") {
			t.Fatalf("rank %d: err %v", i, x.err)
		}
		if x.g != nil {
			t.Fatalf("rank %d got a grant", i)
		}
	}
	for _, n := range []string{"s1", "l1"} {
		if r.nodes[n].count(parser.CmdAbort) != 1 || r.nodes[n].count(parser.CmdCommit) != 0 {
			t.Errorf("%s: %d ABORT %d COMMIT", n, r.nodes[n].count(parser.CmdAbort), r.nodes[n].count(parser.CmdCommit))
		}
	}
}

func TestCommitSilentRollbackIncomplete(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	r.nodes["s1"].silent[parser.CmdCommit] = true
	r.nodes["s1"].silent[parser.CmdAbort] = true
	start := time.Now()
	res := r.beginAll(reqsFor(5, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeRollbackIncomplete || strings.Join(ae.RollbackIncomplete, ",") != "s1" ||
			!strings.Contains(ae.Message, "no acknowledgement") {
			t.Fatalf("rank %d: err %v", i, x.err)
		}
		// The silent node is named by the MAC the AM sent to, with what to check.
		m := r.topo.MAC("s1", deploy.NodeMACIface)
		if want := "to " + net.HardwareAddr(m[:]).String() + ": is prismd running there with that node_mac"; !strings.Contains(ae.Message, want) ||
			!strings.Contains(ae.Message, "am_sources") {
			t.Fatalf("rank %d: %q lacks %q and the am_sources hint", i, ae.Message, want)
		}
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("setup failure took %v", d)
	}
	for _, n := range []string{"l1", "l2"} {
		if s := r.nodes[n].opState(onlyOp(r)); s != parser.StateAborted {
			t.Errorf("%s state %v, want ABORTED", n, s)
		}
	}
}

// onlyOp is the single operation the rig's AM knows.
func onlyOp(r *rig) OpIdentity {
	for _, op := range r.m.Ops().Ops {
		return op.Op
	}
	return OpIdentity{}
}

func TestLossyControlStillExact(t *testing.T) {
	r := newRig(t, "fat-tree", Config{})
	r.hub.loss, r.hub.dup = 0.2, 0.2
	hosts := []string{"h1", "h3", "h5", "h7"}
	for seq := uint64(0); seq < 3; seq++ {
		res := r.beginAll(reqsFor(11, seq, "allreduce", hosts...))
		var grants []*Grant
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("seq %d rank %d: %v", seq, i, x.err)
			}
			grants = append(grants, x.g)
		}
		r.checkPlan(grants[0].Op, hosts, grants, parser.CollAllReduce, 0)
		for i := range grants {
			st, err := r.m.Done(context.Background(), grants[i].ID, DoneRequest{Rank: i, OK: true, Wait: i == len(grants)-1})
			if err != nil || (i == len(grants)-1 && st.State != "released") {
				t.Fatalf("done: %v %+v", err, st)
			}
		}
	}
	for n, fn := range r.nodes {
		fn.mu.Lock()
		if fn.conflict != 0 {
			t.Errorf("%s saw %d conflicting retransmissions (bytes changed under one Transaction ID)", n, fn.conflict)
		}
		fn.mu.Unlock()
	}
	r.m.ctl.mu.Lock()
	t.Logf("CONTROL: %d sent, %d retransmitted", r.m.ctl.sent, r.m.ctl.retrans)
	if r.m.ctl.retrans == 0 {
		t.Error("20% loss caused no retransmission")
	}
	r.m.ctl.mu.Unlock()
}

func TestRankFailureNamesRank(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	// l2 lost rank 3 (h4): it FAILED on that rank's stream.
	st := r.failedOn(t, grants[0], "l2", grants[3].Data.StreamID, 363)
	if st.State != "failed" || st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 3 || st.Error.Node != "l2" ||
		!strings.Contains(st.Error.Message, "rank 3 (h4) stopped contributing") || !strings.Contains(st.Error.Message, "from element 363") {
		t.Fatalf("status %+v err %+v, want rank 3 blamed and node l2 named", st, st.Error)
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if s := r.nodes[n].opState(grants[0].Op); s != parser.StateAborted {
			t.Errorf("%s state %v, want ABORTED", n, s)
		}
	}
}

// TestStalledRankNamedBeforeAnyTimeout: a rank that gives up (Ctrl-C)
// reports at once, while every node is still ACTIVE. Each node's Missing
// Stream is its least advanced one, and l1's is a healthy rank a little
// behind its sibling; the AM must follow the root's (subtree l2) down to
// l2's rank 2 (h3), not blame the first leaf's. (It blamed rank 1.)
func TestStalledRankNamedBeforeAnyTimeout(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	fromL2 := r.rootStreamFrom(t, grants[0].Op, "l2")
	set := r.activeOn
	set("l1", grants[1].Data.StreamID, 5768070)
	set("l2", grants[2].Data.StreamID, 5753187)
	set("s1", fromL2, 5750370)
	// Without local (a client before it, or a rank that gave up waiting)
	// the report names nobody: the chain of what the nodes wait for does.
	st, err := r.m.Done(context.Background(), grants[2].ID, DoneRequest{Rank: 2, OK: false, Error: "cancelled: context canceled", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 2 || !strings.Contains(st.Error.Message, "rank 2 (h3) stopped contributing") ||
		!strings.Contains(st.Error.Message, "node s1 is ACTIVE, waiting for subtree l2 from element 5750370") {
		t.Fatalf("status %+v err %+v, want rank 2 (h3) blamed", st, st.Error)
	}
}

// TestCancelledRankNamedOverStragglers: a rank interrupted (SIGINT) reports
// at once while every node is ACTIVE, and the nodes' least advanced
// streams lead elsewhere: l1 and the root wait most for rank 1, a healthy
// rank a few frames behind. The rank that reported first is the culprit,
// not the chain's end (a user walkthrough saw rank 1 named and the three
// healthy ranks listed as never done, the cause only at the very end).
func TestCancelledRankNamedOverStragglers(t *testing.T) {
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) { testCancelledRank(t, local) })
	}
}

// testCancelledRank: with local false the report is a rank that gave up
// waiting ("no RESULT"), and the chain of what the nodes wait for names
// the culprit (rank 1), as before.
func testCancelledRank(t *testing.T, local bool) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	fromL1 := r.rootStreamFrom(t, grants[0].Op, "l1")
	set := r.activeOn
	set("l1", grants[1].Data.StreamID, 20923232)
	set("l2", grants[2].Data.StreamID, 20950000)
	set("s1", fromL1, 20900000)
	if !local {
		st, err := r.m.Done(context.Background(), grants[3].ID, DoneRequest{Rank: 3, OK: false, Error: "no RESULT for 5s", Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 1 || !strings.Contains(st.Error.Message, "failed: rank 1 (h2) stopped contributing;") {
			t.Fatalf("status %+v err %+v, want rank 1 (h2), what the tree waits for", st, st.Error)
		}
		return
	}
	st, err := r.m.Done(context.Background(), grants[3].ID, DoneRequest{Rank: 3, OK: false, Error: "cancelled: context canceled", Local: true, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 3 ||
		!strings.Contains(st.Error.Message, "failed: rank 3 (h4) reported failure first: cancelled: context canceled;") ||
		strings.Contains(st.Error.Message, "stopped contributing") {
		t.Fatalf("status %+v err %+v, want rank 3 (h4) named first", st, st.Error)
	}
	if strings.Count(st.Error.Message, "cancelled") != 1 {
		t.Errorf("the culprit's report repeated: %s", st.Error.Message)
	}
}

// TestFailureOriginNamed: a FAILED node announces its failure, so when a
// rank dies every node of its tree is FAILED by the time the AM asks. The
// AM names the rank the timed-out node lost, not one a node that was told
// (PEER_FAILED) happens to report: l1, as deep as l2 and before it in the
// plan, failed on rank 0's stream because its parent told it.
func TestFailureOriginNamed(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	set := r.failNode
	set("l1", parser.FailPeer, grants[0].Data.StreamID, 0)
	set("s1", parser.FailPeer, 0xFFFF, 0)
	set("l2", parser.FailTimeout, grants[3].Data.StreamID, 726)
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "failed" || st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 3 ||
		!strings.Contains(st.Error.Message, "failed: rank 3 (h4) stopped contributing; node l2 is FAILED, timed out on rank 3 (h4) from element 726;") ||
		!strings.Contains(st.Error.Message, "node l1 is FAILED, told FAILED by rank 0 (h1);") {
		t.Fatalf("status %+v err %+v", st, st.Error)
	}
	for _, ns := range st.Nodes {
		want := map[string]string{"l1": "PEER_FAILED", "s1": "PEER_FAILED", "l2": "TIMEOUT"}[ns.Name]
		if ns.FailCause != want {
			t.Errorf("node %s: fail_cause %q, want %q", ns.Name, ns.FailCause, want)
		}
	}
}

// failNode makes node n answer COMPLETE with FAILED, cause on stream from
// element from.
func (r *rig) failNode(n string, cause parser.FailCause, stream uint16, from uint32) {
	fn := r.nodes[n]
	fn.mu.Lock()
	fn.final, fn.cause, fn.missing, fn.missFrom = parser.StateFailed, cause, stream, from
	fn.mu.Unlock()
}

// TestLinkDownNamed: a node that timed out on a stream whose port was down
// (LINK_DOWN) is where the failure began, and the diagnosis names the
// link, not a rank that "stopped contributing" (it may be alive). On a
// rank's stream the rank is still the one the error concerns; on a link
// between two switches no rank is blamed.
func TestLinkDownNamed(t *testing.T) {
	for _, c := range []struct {
		name     string
		node     string
		stream   func(g []*Grant, r *rig) uint16
		head     string
		wantRank int // -1: none
	}{
		{"rank link", "l2", func(g []*Grant, r *rig) uint16 { return g[3].Data.StreamID }, "failed: node l2 lost its link to rank 3 (h4); " +
			"node l2 is FAILED, lost its link to rank 3 (h4) (its port toward it is set down or has no carrier) from element 726;", 3},
		{"switch link", "s1", func(g []*Grant, r *rig) uint16 {
			for s, c := range r.m.ops[g[0].ID].plan.nodes["s1"].ownerChild {
				if c == "l2" {
					return s
				}
			}
			t.Fatal("no stream from l2 at s1")
			return 0
		}, "failed: node s1 lost its link to subtree l2; node s1 is FAILED, lost its link to subtree l2 (its port toward it is set down or has no carrier) from element 726;", -1},
		// A leaf whose RESULT stream from its parent timed out on a dead
		// port: the link is to the parent, not to "the RESULT from s1".
		{"leaf's link to its parent", "l1", func(g []*Grant, r *rig) uint16 {
			return streamWhere(t, "l1", r.m.ops[g[0].ID].plan.nodes["l1"].owner, "the RESULT from s1")
		}, "failed: node l1 lost its link to the parent s1; node l1 is FAILED, lost its link to the parent s1 (its port toward it is set down or has no carrier) from element 726;", -1},
		// The lost link is also the AM's way to l2, which is silent:
		// cut off, not where the failure began.
		{"switch link, leaf cut off", "s1", func(g []*Grant, r *rig) uint16 {
			l2 := r.nodes["l2"]
			l2.mu.Lock()
			l2.silent[parser.CmdComplete], l2.silent[parser.CmdAbort] = true, true
			l2.mu.Unlock()
			for s, c := range r.m.ops[g[0].ID].plan.nodes["s1"].ownerChild {
				if c == "l2" {
					return s
				}
			}
			t.Fatal("no stream from l2 at s1")
			return 0
		}, "failed: node s1 lost its link to subtree l2; node s1 is FAILED, lost its link to subtree l2 (its port toward it is set down or has no carrier) from element 726; " +
			"node l1 is FAILED; node l2 does not answer CONTROL, but s1 lost its link to it (LINK_DOWN): probably not at fault itself;", -1},
	} {
		cutOff := c.name == "switch link, leaf cut off"
		cfg := Config{CtlTimeout: 300 * time.Millisecond}
		if cutOff {
			cfg.CtlTimeout = time.Second // well above quickAbort, to tell them apart
		}
		r := newRig(t, "spine-leaf", cfg)
		grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
		set := r.failNode
		r.m.mu.Lock()
		stream := c.stream(grants, r)
		r.m.mu.Unlock()
		for _, n := range []string{"l1", "s1", "l2"} {
			if n != c.node {
				set(n, parser.FailPeer, 0xFFFF, 0)
			}
		}
		set(c.node, parser.FailLinkDown, stream, 726)
		t0 := time.Now()
		st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if cutOff {
			// l2 has just failed to answer the diagnosis's COMPLETE for
			// a whole CONTROL timeout: its ABORT gets quickAbort, not
			// another CONTROL timeout, before the ranks hear the verdict,
			// and the rollback is still reported incomplete.
			if d, most := time.Since(t0), cfg.CtlTimeout+quickAbort+300*time.Millisecond; d > most {
				t.Errorf("%s: verdict after %v, want at most %v (one CONTROL timeout and a short ABORT)", c.name, d, most)
			}
			if st.Error == nil || !strings.Contains(st.Error.Message, "rollback incomplete: no ABORT acknowledgement from [l2]") {
				t.Errorf("%s: error %+v does not report the incomplete rollback at l2", c.name, st.Error)
			}
		}
		if st.State != "failed" || st.Error == nil || st.Error.Node != c.node || !strings.Contains(st.Error.Message, c.head) ||
			strings.Contains(st.Error.Message, "stopped contributing") {
			t.Fatalf("%s: status %+v err %+v, want node %s and a message with %q", c.name, st, st.Error, c.node, c.head)
		}
		if got := st.Error.Rank; (c.wantRank < 0) != (got == nil) || got != nil && *got != c.wantRank {
			t.Fatalf("%s: error rank %v, want %d (-1: none)", c.name, got, c.wantRank)
		}
		for _, ns := range st.Nodes {
			if ns.Name == c.node && ns.FailCause != "LINK_DOWN" {
				t.Errorf("%s: node %s fail_cause %q, want LINK_DOWN", c.name, ns.Name, ns.FailCause)
			}
		}
	}
}

// TestControlSendRefusedLocally: a transmission the AM's own socket
// refuses for a full queue (ENOBUFS) is a lost frame, resent on the timer:
// the setup completes and control_send_errors_total counts it. Refused
// every time, the setup fails naming the AM's own interface, not the node.
func TestControlSendRefusedLocally(t *testing.T) {
	amMAC := net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
	r := newRig(t, "spine-leaf", Config{})
	conn := r.hub.ports[amMAC.String()]
	conn.refuseErr = fmt.Errorf("write packet: %w", syscall.ENOBUFS)
	conn.refuse.Store(3)
	r.grantAll(t, reqsFor(7, 0, "allreduce", "h1", "h2", "h3", "h4"))
	sum := 0.0
	for _, c := range ctlCommands {
		sum += testutil.ToFloat64(r.m.metrics.ctlSendErrors.WithLabelValues(cmdLabel(c)))
	}
	if sum != 3 {
		t.Fatalf("control_send_errors_total %v, want 3", sum)
	}
	r2 := newRig(t, "spine-leaf", Config{CtlTimeout: 200 * time.Millisecond})
	c2 := r2.hub.ports[amMAC.String()]
	c2.refuseErr = fmt.Errorf("write packet: %w", syscall.ENOBUFS)
	c2.refuse.Store(-1)
	for i, x := range r2.beginAll(reqsFor(7, 0, "allreduce", "h1", "h2", "h3", "h4")) {
		if x.err == nil || !strings.Contains(x.err.Error(), "this AM could not send on its own interface (02:aa:00:00:00:01)") ||
			strings.Contains(x.err.Error(), "is prismd running there") || strings.Contains(x.err.Error(), "stopped") {
			t.Fatalf("rank %d: %v, want the AM's own interface named", i, x.err)
		}
	}
}

// A switch whose prismd restarted during an operation answers COMPLETE
// with BAD_STATE NONE: it is named as where the failure began, in words a
// user can act on, and no healthy rank is blamed.
func TestRestartedNodeNamed(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	s1 := r.nodes["s1"]
	s1.mu.Lock()
	delete(s1.ctx, grants[0].Op)
	s1.mu.Unlock()
	l1 := r.nodes["l1"]
	l1.mu.Lock()
	l1.final, l1.cause, l1.missing = parser.StateFailed, parser.FailPeer, grants[0].Result.StreamID
	l1.mu.Unlock()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "failed" || st.Error == nil || st.Error.Node != "s1" || st.Error.Rank != nil ||
		!strings.Contains(st.Error.Message, "node s1 no longer holds the operation (its prismd restarted") {
		t.Fatalf("status %+v err %+v", st, st.Error)
	}
}

// A switch whose prismd died after it acknowledged the setup stops
// answering: it is named as where the failure began, as a node that stopped
// answering, without the hints for a node never reached (node_mac,
// am_sources), which would send the user after a configuration mistake.
func TestDeadNodeNamed(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{CtlTimeout: 300 * time.Millisecond})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	l2 := r.nodes["l2"]
	l2.mu.Lock()
	l2.silent[parser.CmdComplete], l2.silent[parser.CmdAbort] = true, true
	l2.mu.Unlock()
	for _, n := range []string{"s1", "l1"} {
		fn := r.nodes[n]
		fn.mu.Lock()
		fn.final, fn.cause, fn.missing = parser.StateFailed, parser.FailPeer, parser.NoDetail
		if n == "s1" {
			fn.cause = parser.FailTimeout
		}
		fn.mu.Unlock()
	}
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "failed" || st.Error == nil || st.Error.Node != "l2" ||
		!strings.Contains(st.Error.Message, "node l2 stopped answering CONTROL after it acknowledged this operation's setup") ||
		strings.Contains(st.Error.Message, "am_sources") {
		t.Fatalf("status %+v err %+v", st, st.Error)
	}
}

// TestMismatchAndBadRequests: ranks that disagree fail the invocation for
// every rank at once with mismatch (the rank already waiting too, not by a
// barrier timeout); a rank that never comes times the barrier out, named;
// each malformed request is refused alone.
func TestMismatchAndBadRequests(t *testing.T) {
	r := newRig(t, "single", Config{BarrierTimeout: 800 * time.Millisecond})
	q := reqsFor(8, 0, "allreduce", "h1", "h2")
	q[1].VectorLen = 999
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waiting := make(chan error, 1)
	go func() { _, err := r.m.Begin(ctx, q[1]); waiting <- err }()
	for arrived := false; !arrived; time.Sleep(time.Millisecond) {
		r.m.mu.Lock()
		inv := r.m.invs[invKey{8, 1, 0}]
		arrived = inv != nil && len(inv.arrived) == 1
		r.m.mu.Unlock()
	}
	t0 := time.Now()
	_, err := r.m.Begin(ctx, q[0])
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeMismatch || ae.Rank == nil || *ae.Rank != 0 {
		t.Fatalf("the disagreeing rank: err %v, want mismatch naming rank 0", err)
	}
	// The field that differs, in the request's names, and nothing else.
	if want := "differs from rank 1's: vector_len 1000 vs 999 (rank 0's value first"; !strings.Contains(ae.Message, want) || strings.Contains(ae.Message, "{") {
		t.Errorf("mismatch message %q, want it to contain %q and no Go struct", ae.Message, want)
	}
	err = <-waiting
	if !errors.As(err, &ae) || ae.Code != CodeMismatch || time.Since(t0) > 400*time.Millisecond {
		t.Fatalf("the rank already waiting: err %v after %v, want the same mismatch at once", err, time.Since(t0))
	}
	// The barrier times out naming the rank that never came.
	_, err = r.m.Begin(ctx, req(8, 1, 0, 2, "h1", "allreduce"))
	if !errors.As(err, &ae) || ae.Code != CodeBarrierTimeout || !strings.Contains(ae.Message, "ranks [1]") {
		t.Fatalf("err %v", err)
	}
	for _, bad := range []func(*BeginRequest){
		func(b *BeginRequest) { b.Collective = "gather" },
		func(b *BeginRequest) { b.Rank = 5 },
		func(b *BeginRequest) { b.InputFormat = "fp64" },
		func(b *BeginRequest) { b.AccPolicy = "0x02" },
		func(b *BeginRequest) { b.MTU = 1400 },
		func(b *BeginRequest) { b.Node = "" },
		func(b *BeginRequest) { b.KulischWidth = 100 },
		func(b *BeginRequest) { b.KulischWidth = 272 }, // below what 2 exact FP32 terms need
		func(b *BeginRequest) { b.AccPolicy = "fp32"; b.KulischWidth = 280 },
		func(b *BeginRequest) { b.MAC = "zz:zz" },
	} {
		b := req(8, 2, 0, 2, "h1", "allreduce")
		bad(&b)
		if _, err := r.m.Begin(ctx, b); !errors.As(err, &ae) || ae.Code != CodeBadRequest {
			t.Errorf("%+v: err %v", b, err)
		}
	}
}

func TestHTTPRoundTrip(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	c := NewClient(srv.URL)
	hosts := []string{"h1", "h2", "h3", "h4"}
	grants := make([]*Grant, 4)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, q := range reqsFor(12, 0, "allreduce", hosts...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grants[i], errs[i] = c.Begin(context.Background(), q)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	l, err := c.Ops(context.Background())
	if err != nil || len(l.Ops) != 1 || l.Ops[0].State != "active" || len(l.Ops[0].Nodes) != 3 {
		t.Fatalf("ops %+v %v", l, err)
	}
	for i := range grants {
		if _, err := c.Done(context.Background(), grants[i].ID, DoneRequest{Rank: i, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		st, err := c.Op(context.Background(), grants[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == "released" {
			for _, n := range st.Nodes {
				if n.State != "RELEASED" {
					t.Errorf("node %+v", n)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s", st.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Errors come back typed.
	_, err = c.Op(context.Background(), "1-2-3-4-5")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeNotFound {
		t.Errorf("err %v", err)
	}
	b := req(12, 1, 0, 4, "h1", "allreduce")
	b.InputFormat = "fp64"
	if _, err := c.Begin(context.Background(), b); !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "fp64") {
		t.Errorf("err %v", err)
	}
	// Unreachable coordinator: a clear error, quickly.
	dead := NewClient("127.0.0.1:1")
	dead.RetryFor = 200 * time.Millisecond
	if _, err := dead.Ops(context.Background()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("err %v", err)
	}
}

func TestConcurrentJobs(t *testing.T) {
	r := newRig(t, "fat-tree", Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for job := uint64(100); job < 104; job++ {
		hosts := []string{"h1", "h3", "h5", "h7"}
		if job%2 == 1 {
			hosts = []string{"h2", "h4", "h6", "h8"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(0); seq < 3; seq++ {
				res := r.beginAll(reqsFor(job, seq, "allreduce", hosts...))
				for i, x := range res {
					if x.err != nil {
						errs <- fmt.Errorf("job %d seq %d rank %d: %v", job, seq, i, x.err)
						return
					}
				}
				for i := range res {
					if _, err := r.m.Done(context.Background(), res[i].g.ID, DoneRequest{Rank: i, OK: true, Wait: i == len(res)-1}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A node that remembers newer generations (another AM, restarted in the same
// second) refuses STAGE as STALE_GENERATION: the AM rolls back, skips ahead
// and succeeds on the second attempt.
func TestStaleGenerationRetried(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	r.nodes["l2"].staleUpTo = r.m.genBase + 1000
	res := r.beginAll(reqsFor(13, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
		if x.g.Op.OpGen <= r.m.genBase+1000 {
			t.Fatalf("generation %d not past the node's %d", x.g.Op.OpGen, r.m.genBase+1000)
		}
	}
	for _, n := range []string{"s1", "l1"} {
		if r.nodes[n].count(parser.CmdAbort) != 1 || r.nodes[n].count(parser.CmdStage) != 2 {
			t.Errorf("%s: %d ABORT %d STAGE, want 1 and 2", n, r.nodes[n].count(parser.CmdAbort), r.nodes[n].count(parser.CmdStage))
		}
	}
}

// An AM that stopped left an operation installed (running or prepared) on
// some nodes; a restarted AM reuses its Operation ID with a newer
// generation. The nodes refuse that STAGE with BAD_STATE and the old state;
// the rollback's ABORT retires the old context, and the AM sets up once more
// under the same Operation ID instead of failing the job until the nodes
// expire it.
func TestOlderGenerationHeldRetried(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	old := OpIdentity{Job: 13, Group: 1, GroupGen: 1, OpID: 0, OpGen: r.m.genBase - 7}
	for _, n := range []string{"s1", "l1"} {
		r.nodes[n].mu.Lock()
		r.nodes[n].ctx[old] = &fakeCtx{state: parser.StateActive}
		r.nodes[n].mu.Unlock()
	}
	res := r.beginAll(reqsFor(13, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
		if x.g.Op.OpID != old.OpID || x.g.Op.OpGen <= old.OpGen {
			t.Fatalf("rank %d granted %+v, want Operation ID %d above generation %d", i, x.g.Op, old.OpID, old.OpGen)
		}
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if got := r.nodes[n].opState(old); n != "l2" && got != parser.StateAborted {
			t.Errorf("%s: the old generation is %v, want ABORTED", n, got)
		}
		if r.nodes[n].count(parser.CmdAbort) != 1 || r.nodes[n].count(parser.CmdStage) != 2 {
			t.Errorf("%s: %d ABORT %d STAGE, want 1 and 2", n, r.nodes[n].count(parser.CmdAbort), r.nodes[n].count(parser.CmdStage))
		}
		if got := r.nodes[n].opState(res[0].g.Op); got != parser.StateActive {
			t.Errorf("%s: the granted operation is %v, want ACTIVE", n, got)
		}
	}
	if x := testutil.ToFloat64(r.m.metrics.setupRetries.WithLabelValues("older_generation_held")); x != 1 {
		t.Errorf("setup_retries_total{cause=older_generation_held} = %v, want 1", x)
	}
	if x := testutil.ToFloat64(r.m.metrics.setupRetries.WithLabelValues("stale_generation")); x != 0 {
		t.Errorf("setup_retries_total{cause=stale_generation} = %v, want 0", x)
	}
}

// The retry is tried once: a node that refuses the second STAGE as well
// fails the setup with its refusal.
func TestOlderGenerationRetriedOnce(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	r.nodes["l2"].mu.Lock()
	r.nodes["l2"].keepOld = true
	r.nodes["l2"].ctx[OpIdentity{Job: 13, Group: 1, OpID: 0, GroupGen: 1, OpGen: 1}] = &fakeCtx{state: parser.StateFailed}
	r.nodes["l2"].mu.Unlock()
	res := r.beginAll(reqsFor(13, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for i, x := range res {
		if x.err == nil || !strings.Contains(x.err.Error(), "node l2 refused STAGE: BAD_STATE") {
			t.Fatalf("rank %d: %v, want l2's BAD_STATE", i, x.err)
		}
	}
	if n := r.nodes["l2"].count(parser.CmdStage); n > 2 {
		t.Errorf("l2 saw %d STAGE, want at most 2", n)
	}
}

// A granted operation whose ranks never report is failed by the watchdog
// once the nodes stop making progress, not while they still move.
func TestWatchdog(t *testing.T) {
	r := newRig(t, "single", Config{Watchdog: 150 * time.Millisecond})
	r.nodes["sw1"].final = parser.StateActive
	r.nodes["sw1"].progressing = true
	res := r.beginAll(reqsFor(14, 0, "allreduce", "h1", "h2"))
	if res[0].err != nil {
		t.Fatal(res[0].err)
	}
	id := res[0].g.ID
	time.Sleep(600 * time.Millisecond)
	if st, _ := r.m.Op(id); st.State != "active" {
		t.Fatalf("a progressing operation was ended by the watchdog: %+v", st)
	}
	r.nodes["sw1"].mu.Lock()
	r.nodes["sw1"].progressing = false
	r.nodes["sw1"].mu.Unlock()
	deadline := time.Now().Add(3 * time.Second)
	for {
		st, _ := r.m.Op(id)
		if st.State == "failed" {
			if st.Error == nil || !strings.Contains(st.Error.Message, "watchdog") || !strings.Contains(st.Error.Message, "ranks that had not reported when it failed: 0 (h1), 1 (h2)") {
				t.Fatalf("error %+v", st.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watchdog never failed the stalled operation: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s := r.nodes["sw1"].opState(res[0].g.Op); s != parser.StateAborted {
		t.Errorf("node state %v, want ABORTED", s)
	}
}

// TestWindowSetsReplayDepth: a configured window is what a sender may
// have in flight, so the replay depth (the frames it holds for
// retransmission) follows it, and so does the element bound: Intervals
// frames of the input format on a SINGLE node. The default stays 64.
func TestWindowSetsReplayDepth(t *testing.T) {
	perFrame := uint32((1500 - parser.CWLen - parser.DataHdrLen - parser.GroupDescLen) / 4) // FP32 values in one group
	for _, tc := range []struct{ set, want uint16 }{{0, 64}, {200, 200}} {
		r := newRig(t, "single", Config{Window: Window{Intervals: tc.set}})
		res := r.beginAll(reqsFor(7, 0, "allreduce", "h1", "h2"))
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("window %d rank %d: %v", tc.set, i, x.err)
			}
			w := x.g.Window
			if w.Intervals != tc.want || w.ReplayDepth != tc.want || w.Bytes != uint32(tc.want)*1514 ||
				w.Elements != uint32(tc.want)*perFrame {
				t.Fatalf("window %d: grant window %+v, want %d elements", tc.set, w, uint32(tc.want)*perFrame)
			}
		}
	}
}

// TestElementWindowPerNode: every node's element window holds Intervals
// frames of the densest stream it receives, no more: a leaf receives FP32
// from ranks and FP32 RESULT (363 values a frame at MTU 1500), the spine
// KULISCH partials that may come as KULISCH_SCALED (up to one value per two
// bytes: 724), AUTO partials (the KULISCH default) INT8 (1452) and
// FP32_ARRIVAL's FP32 partials 363. The ranks' grants carry their leaf's
// window. An element window is the size
// of the node's ring of accumulators, so a larger one only costs cache.
func TestElementWindowPerNode(t *testing.T) {
	budget := 1500 - parser.CWLen - parser.DataHdrLen // body bytes of one frame
	fp32 := uint32((budget - parser.GroupDescLen) / 4)
	scaled := uint32((((budget - parser.GroupDescLen) &^ 3) - 4) / 2) // minus the Scale Word
	int8s := uint32(parser.MaxPacketElements(1500))
	for _, tc := range []struct {
		acc, partial string
		leaf, spine  uint32
	}{{"kulisch", "kulisch", 64 * fp32, 64 * scaled}, {"kulisch", "", 64 * fp32, 64 * int8s}, {"fp32", "", 64 * fp32, 64 * fp32}} {
		r := newRig(t, "spine-leaf", Config{})
		q := reqsFor(8, 0, "allreduce", "h1", "h2", "h3", "h4")
		for i := range q {
			q[i].AccPolicy, q[i].PartialPolicy = tc.acc, tc.partial
		}
		res := r.beginAll(q)
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("%s/%s rank %d: %v", tc.acc, tc.partial, i, x.err)
			}
			if x.g.Window.Elements != tc.leaf {
				t.Errorf("%s/%s rank %d: grant elements %d, want the leaf's %d", tc.acc, tc.partial, i, x.g.Window.Elements, tc.leaf)
			}
		}
		op := res[0].g.Op
		for n, want := range map[string]uint32{"l1": tc.leaf, "l2": tc.leaf, "s1": tc.spine} {
			if got := r.nodes[n].staged(op).rec.WindowElems; got != want {
				t.Errorf("%s/%s: %s staged %d window elements, want %d", tc.acc, tc.partial, n, got, want)
			}
		}
	}
}

// TestRetiredOperationsBounded: ended operations stay listed (GET /v1/ops)
// but no more than maxRetained of them, oldest out first; an Operation ID
// is busy exactly while its newest operation is live, whatever else the
// AM still lists.
func TestRetiredOperationsBounded(t *testing.T) {
	m := &Manager{ops: map[string]*operation{}, byID: map[genKey]*operation{}}
	mk := func(i int) *operation {
		op := &operation{id: OpIdentity{Job: 3, Group: 1, GroupGen: 1, OpID: uint16(i % 1000), OpGen: uint32(1 + i/1000)}}
		m.mu.Lock()
		m.track(op)
		m.mu.Unlock()
		return op
	}
	gk := opIDKey{3, 1}
	var last *operation
	for i := range maxRetained + 1500 {
		op := mk(i)
		m.mu.Lock()
		busy := m.opIDBusy(gk, op.id.OpID)
		m.mu.Unlock()
		if !busy {
			t.Fatalf("op %d: its ID is free while it runs", i)
		}
		op.ended = time.Now()
		m.retire(op)
		last = op
	}
	if len(m.ops) != maxRetained {
		t.Fatalf("%d operations listed after %d ended, want the newest %d", len(m.ops), maxRetained+1500, maxRetained)
	}
	if m.ops[last.id.Key()] != last {
		t.Fatal("the newest ended operation is not listed")
	}
	for i := 0; i < 1000; i++ {
		m.mu.Lock()
		busy := m.opIDBusy(gk, uint16(i))
		m.mu.Unlock()
		if busy {
			t.Fatalf("ID %d busy with every operation ended", i)
		}
	}
	// A retired entry's eviction must not drop a newer holder of its ID.
	live := mk(7)
	for range maxRetained {
		op := mk(500)
		op.ended = time.Now()
		m.retire(op)
	}
	m.mu.Lock()
	busy := m.opIDBusy(gk, 7)
	m.mu.Unlock()
	if !busy || m.ops[live.id.Key()] != live {
		t.Fatal("a live operation lost its ID or its listing to evictions of older ones")
	}
}

// BenchmarkAllocateRetained: allocating an Operation ID while ten minutes'
// worth of ended operations (60 000: a hundred small collectives a second)
// are still listed for GET /v1/ops. Scanning them, as opIDBusy did, took
// 1.3-1.7 ms per allocation under the Manager's lock; the byID index 215 ns.
func BenchmarkAllocateRetained(b *testing.B) {
	m := &Manager{ops: map[string]*operation{}, byID: map[genKey]*operation{}, nextOpID: map[opIDKey]uint16{},
		lastGen: map[genKey]uint32{}, groupGen: map[opIDKey]groupInfo{}}
	for i := range 60000 {
		op := &operation{id: OpIdentity{Job: 3, Group: 1, GroupGen: 1, OpID: uint16(i), OpGen: uint32(1 + i>>16)}, ended: time.Now()}
		m.track(op)
	}
	inv := &invocation{key: invKey{3, 1, 0}, p: params{Size: 4}}
	b.ResetTimer()
	for range b.N {
		m.allocate(inv, nil)
	}
}

// TestBeginRequiredFields: a begin request without a field 9.1 requires
// (job, rank, root_rank of a REDUCE, ...) is refused with 400 naming it,
// never granted with the zero value in its place.
func TestBeginRequiredFields(t *testing.T) {
	r := newRig(t, "single", Config{BarrierTimeout: 300 * time.Millisecond})
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	full := map[string]any{"job": 5, "rank": 0, "size": 1, "collective": "reduce", "root_rank": 0,
		"input_format": "fp32", "acc_policy": "kulisch", "vector_len": 10, "node": "h1"}
	for _, drop := range []string{"job", "rank", "size", "collective", "input_format", "acc_policy", "vector_len", "node", "root_rank"} {
		body := map[string]any{}
		for k, v := range full {
			if k != drop {
				body[k] = v
			}
		}
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+APIVersion+"/begin", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), drop) {
			t.Errorf("without %s: %d %s, want 400 naming it", drop, resp.StatusCode, msg)
		}
	}
	// An ALLREDUCE needs no root_rank.
	delete(full, "root_rank")
	full["collective"] = "allreduce"
	b, _ := json.Marshal(full)
	resp, err := http.Post(srv.URL+APIVersion+"/begin", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a complete ALLREDUCE without root_rank: %d, want 200", resp.StatusCode)
	}
	// A host the topology does not have, or an interface its host does
	// not have: 422 at once (not after the barrier timeout), naming what
	// the topology has, and no arrival.
	full["size"] = 2
	for _, c := range []struct{ node, iface, want string }{
		{"h7", "", "hosts: h1, h2"},
		{"sw1", "", "not a host"},
		{"h1", "eth3", "has eth0"},
	} {
		full["node"], full["iface"] = c.node, c.iface
		b, _ := json.Marshal(full)
		t0 := time.Now()
		resp, err := http.Post(srv.URL+APIVersion+"/begin", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(msg), c.want) || time.Since(t0) > 200*time.Millisecond {
			t.Errorf("node %q iface %q: %d %s after %v, want 422 naming %q at once", c.node, c.iface, resp.StatusCode, msg, time.Since(t0), c.want)
		}
	}
	// A rank whose interface MAC is another host's in the topology named
	// the wrong host: 422 at once, naming the host it is on.
	h2 := r.topo.MAC("h2", "eth0")
	full["node"], full["iface"], full["mac"], full["seq"] = "h1", "", net.HardwareAddr(h2[:]).String(), 7
	b, _ = json.Marshal(full)
	resp, err = http.Post(srv.URL+APIVersion+"/begin", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(msg), "is h2 eth0's") || !strings.Contains(string(msg), "pass --node h2") {
		t.Errorf("rank on h2 saying h1: %d %s, want 422 naming h2", resp.StatusCode, msg)
	}
	if bs := r.m.Ops().Barriers; len(bs) != 0 {
		t.Errorf("refused requests left barriers %+v", bs)
	}
}

// withSessions gives request i session base+i.
func withSessions(q []BeginRequest, base uint64) []BeginRequest {
	for i := range q {
		q[i].Session = base + uint64(i)
	}
	return q
}

// A job run again numbers its collectives from seq 0 again: its ranks'
// new sessions must get a new operation, not the previous run's grant
// (whose contexts the nodes have released), while a repeat from the same
// process still gets its own grant back.
func TestRerunOfJobGetsNewOperation(t *testing.T) {
	r := newRig(t, "single", Config{})
	var prev OpIdentity
	for run := uint64(0); run < 3; run++ {
		q := withSessions(reqsFor(1, 0, "allreduce", "h1", "h2"), 10*run+1)
		res := r.beginAll(append(q, q[0])) // rank 0 also repeats itself
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("run %d arrival %d: %v", run, i, x.err)
			}
		}
		if *res[0].g != *res[2].g {
			t.Errorf("run %d: a repeat from the same session got a different grant", run)
		}
		g := res[0].g
		if run > 0 && (g.Op == prev || g.Op.OpGen <= prev.OpGen && g.Op.OpID == prev.OpID) {
			t.Errorf("run %d got op %+v, want a new one after %+v", run, g.Op, prev)
		}
		prev = g.Op
		if n := r.nodes["sw1"].count(parser.CmdStage); n != int(run)+1 {
			t.Errorf("%d STAGEs applied after %d runs", n, run+1)
		}
		r.doneAll([]*Grant{res[0].g, res[1].g})
	}
}

// A rank that gave up at the barrier (killed: its connection closed) no
// longer counts there: the next run of the job, with other parameters,
// is set up instead of refused as a mismatch against the dead request.
func TestWithdrawnArrivalLeavesNoStaleBarrier(t *testing.T) {
	r := newRig(t, "single", Config{})
	stale := req(2, 0, 1, 2, "h2", "allreduce")
	stale.AccPolicy, stale.Session = "fp32", 99
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.m.Begin(ctx, stale); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lone rank: %v, want its context's deadline", err)
	}
	// The new run's rank 0 first: against the stale rank 1 it would be a
	// mismatch.
	q0 := withSessions(reqsFor(2, 0, "allreduce", "h1", "h2"), 1)
	got := r.beginAsync(q0[0])
	waitFor(t, func() bool { return r.waiting(q0[0]) == 1 })
	if _, err := r.m.Begin(context.Background(), q0[1]); err != nil {
		t.Fatalf("new run's rank 1: %v", err)
	}
	if x := <-got; x.err != nil || x.g.AccPolicy != "kulisch" {
		t.Fatalf("new run's rank 0: %v, %+v", x.err, x.g)
	}
	// Two requests of one rank wait; one giving up leaves the rank arrived.
	q := withSessions(reqsFor(2, 1, "allreduce", "h1", "h2"), 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := r.m.Begin(ctx2, q[0]); errc <- err }()
	waitFor(t, func() bool { return r.waiting(q[0]) == 1 })
	got = r.beginAsync(q[0])
	waitFor(t, func() bool { return r.waiting(q[0]) == 2 })
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	if _, err := r.m.Begin(context.Background(), q[1]); err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	if x := <-got; x.err != nil {
		t.Fatalf("rank 0's remaining request: %v", x.err)
	}
}

// A rank asking from a new process while its old one waits at the barrier
// is claimed by two live processes (a dead process's request is withdrawn
// when its connection closes): two processes started as one rank, or a
// job run again while a process of its earlier run hangs on. Both, and
// the ranks that come after, get an error naming the rank, its two nodes
// and both causes at once; once the old process has gone, the job runs.
func TestRestartedRankSupersedesBarrier(t *testing.T) {
	r := newRig(t, "single", Config{BarrierTimeout: time.Minute})
	old := withSessions(reqsFor(3, 0, "allreduce", "h1", "h2"), 1)
	errc := make(chan error, 1)
	go func() { _, err := r.m.Begin(context.Background(), old[0]); errc <- err }()
	waitFor(t, func() bool { return r.waiting(old[0]) == 1 })
	// GET /v1/ops shows who waits at the barrier for whom.
	if bs := r.m.Ops().Barriers; len(bs) != 1 || bs[0].Job != 3 || bs[0].Seq != 0 || bs[0].Size != 2 ||
		!slices.Equal(bs[0].Arrived, []int{0}) || !slices.Equal(bs[0].Missing, []int{1}) {
		t.Errorf("barriers %+v, want job 3 seq 0 with rank 0 arrived and rank 1 missing", bs)
	}
	q := withSessions(reqsFor(3, 0, "allreduce", "h1", "h2"), 11)
	t0 := time.Now()
	_, errNew := r.m.Begin(context.Background(), q[0])
	errOld := <-errc
	_, err1 := r.m.Begin(context.Background(), q[1])
	for i, err := range []error{errOld, errNew, err1} {
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != CodeMismatch || ae.Rank == nil || *ae.Rank != 0 ||
			!strings.Contains(ae.Message, "rank 0 of job 3 group 1 seq 0 was claimed by two processes, on h1 and h1") ||
			!strings.Contains(ae.Message, "fix the job's rank assignment") || !strings.Contains(ae.Message, "earlier run of the job still waits") {
			t.Errorf("request %d: %v, want a mismatch naming rank 0, its nodes and both causes", i, err)
		}
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("errors took %v", d)
	}
	// The old process has gone; the job runs again.
	q = withSessions(reqsFor(3, 0, "allreduce", "h1", "h2"), 21)
	grants := r.grantAll(t, q)
	if len(grants) != 2 || grants[0].Op != grants[1].Op {
		t.Errorf("new run's grants %+v", grants)
	}
}

// beginAsync runs Begin for q in a goroutine; its result comes on the
// channel.
func (r *rig) beginAsync(q BeginRequest) <-chan result {
	got := make(chan result, 1)
	go func() {
		g, err := r.m.Begin(context.Background(), q)
		got <- result{g, err}
	}()
	return got
}

// waiting is how many Begin calls of q's rank block on q's invocation.
func (r *rig) waiting(q BeginRequest) int {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	inv := r.m.invs[invKey{q.Job, q.Group, q.Seq}]
	if inv == nil {
		return 0
	}
	return inv.waiting[q.Rank]
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
	}
}

// TestStreamsNamePeers: GET /v1/ops names the peer of every binding each
// node was staged with, so a switch's own view can say which rank or
// switch a stream is. The names are derived again here from the staged
// bindings (stream and MAC) and the grants.
func TestStreamsNamePeers(t *testing.T) {
	r := newRig(t, "fat-tree", Config{})
	hosts := []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}
	grants := r.grantAll(t, reqsFor(9, 0, "allreduce", hosts...))
	st, _ := r.m.Op(grants[0].ID)
	macOf := func(node, iface string) string { m := r.topo.MAC(node, iface); return net.HardwareAddr(m[:]).String() }
	nodeOfMAC := map[string]string{}
	for n := range r.nodes {
		for _, ifc := range deploy.Ports(r.topo, n) {
			nodeOfMAC[macOf(n, ifc)] = n
		}
	}
	named := 0
	for _, ns := range st.Nodes {
		got := map[string]string{}
		for _, s := range ns.Streams {
			got[fmt.Sprintf("%s %d", s.Kind, s.Stream)] = s.Peer
		}
		c := r.nodes[ns.Name].staged(grants[0].Op)
		if c == nil || len(c.bindings) != len(ns.Streams) {
			t.Fatalf("%s: %d streams named, staged %v", ns.Name, len(ns.Streams), c)
		}
		for _, b := range c.bindings {
			var want string
			switch {
			case b.Flags&parser.BindingFlagRank != 0:
				for rank, g := range grants {
					if b.Kind == parser.KindContributor && g.Data.StreamID == b.Stream ||
						b.Kind == parser.KindResultOut && g.Result != nil && g.Result.StreamID == b.Stream {
						want = fmt.Sprintf("rank %d (%s)", rank, hosts[rank])
					}
				}
			case b.Kind == parser.KindParent:
				want = "the parent " + nodeOfMAC[b.PeerMAC.String()]
			case b.Kind == parser.KindResultIn:
				want = "the RESULT from " + nodeOfMAC[b.PeerMAC.String()]
			default:
				want = "subtree " + nodeOfMAC[b.PeerMAC.String()]
			}
			k := fmt.Sprintf("%s %d", b.Kind, b.Stream)
			if got[k] != want || strings.HasSuffix(want, " ") {
				t.Errorf("%s %s: named %q, want %q", ns.Name, k, got[k], want)
			}
			named++
		}
	}
	if named == 0 {
		t.Fatal("no streams named")
	}
}

// TestCompletedElementsSurviveRelease: 'prismctl show am' of a finished
// operation showed 0 completed elements on every node, the value of the
// last acknowledgement (RELEASE's, after the context is gone); it keeps
// the most a node reported.
func TestCompletedElementsSurviveRelease(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for _, fn := range r.nodes {
		fn.mu.Lock()
		fn.progressing = true // every COMPLETE acknowledgement counts one more element
		fn.mu.Unlock()
	}
	var st OpStatus
	for i := range grants {
		var err error
		st, err = r.m.Done(context.Background(), grants[i].ID, DoneRequest{Rank: i, OK: true, Wait: i == len(grants)-1})
		if err != nil {
			t.Fatal(err)
		}
	}
	if st.State != "released" || len(st.Nodes) != 3 {
		t.Fatalf("status %+v", st)
	}
	for _, ns := range st.Nodes {
		if ns.State != "RELEASED" || ns.CompletedElements == 0 {
			t.Errorf("node %s: state %s, completed_elements %d; want RELEASED with what its COMPLETE acknowledgements said", ns.Name, ns.State, ns.CompletedElements)
		}
	}
}

// rootStreamFrom is the Stream ID of s1's CONTRIBUTOR binding from leaf
// (over the leaf's p1) in operation op.
func (r *rig) rootStreamFrom(t *testing.T, op OpIdentity, leaf string) uint16 {
	t.Helper()
	to, ok := r.topo.Peer(deploy.Endpoint{Node: leaf, Iface: "p1"})
	if !ok || to.Node != "s1" {
		t.Fatalf("%s:p1 peer %+v", leaf, to)
	}
	port := deploy.PortIndex(r.topo, "s1", to.Iface)
	s1 := r.nodes["s1"]
	s1.mu.Lock()
	defer s1.mu.Unlock()
	for _, b := range s1.ctx[op].bindings {
		if b.Kind == parser.KindContributor && int(b.Port) == port {
			return b.Stream
		}
	}
	t.Fatalf("no s1 binding from %s", leaf)
	return 0
}

// activeOn makes node n answer COMPLETE as ACTIVE, waiting for stream
// from element from.
func (r *rig) activeOn(n string, stream uint16, from uint32) {
	fn := r.nodes[n]
	fn.mu.Lock()
	fn.final, fn.missing, fn.missFrom = parser.StateActive, stream, from
	fn.mu.Unlock()
}

// TestSameReportsListedOnce: ranks that report the same failure (every
// rank of an ACCUMULATION_INEXACT operation does) are listed once, not
// once per rank.
func TestSameReportsListedOnce(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	const inexact = "host: ACCUMULATION_INEXACT: the exact sum cannot be represented in the requested output"
	op, aerr := r.m.lookup(grants[0].ID)
	if aerr != nil {
		t.Fatal(aerr)
	}
	op.mu.Lock()
	for _, rk := range []int{1, 3} {
		op.done[rk] = DoneRequest{Rank: rk, OK: false, Error: inexact}
	}
	op.done[2] = DoneRequest{Rank: 2, OK: false, Error: "no RESULT for 5s"}
	op.mu.Unlock()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: inexact, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Error == nil || strings.Count(st.Error.Message, "ACCUMULATION_INEXACT") != 1 ||
		!strings.Contains(st.Error.Message, "reported by ranks 0 1 3: "+inexact+"; rank 2: no RESULT for 5s") {
		t.Fatalf("diagnosis %+v, want the three identical reports listed once", st.Error)
	}
}

// TestRefreshShowsActiveProgress: GET /v1/ops?live=1 (Refresh) asks the
// nodes of an active operation for their state, so the list shows what
// each completed and what it waits for; before, an active operation
// showed its setup's view until it ended (0 completed, waiting for
// nothing), and a stalled one looked healthy in 'prismctl show am'.
func TestRefreshShowsActiveProgress(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants, op := r.grantOp(t, 6, "h1", "h2", "h3", "h4")
	fromRank3 := streamWhere(t, "l2", op.plan.nodes["l2"].ownerRank, 3)
	l2 := r.nodes["l2"]
	l2.mu.Lock()
	l2.final, l2.missing, l2.missFrom, l2.progressing = parser.StateActive, fromRank3, 4096, true
	l2.mu.Unlock()
	node := func(l OpList) NodeStatus {
		for _, o := range l.Ops {
			if o.ID == grants[0].ID {
				return nodeOf(o, "l2")
			}
		}
		t.Fatalf("operation %s not listed", grants[0].ID)
		return NodeStatus{}
	}
	if ns := node(r.m.Ops()); ns.MissingFromWhom != "" || ns.CompletedElements != 0 {
		t.Fatalf("before a refresh: %+v", ns)
	}
	r.m.Refresh()
	ns := node(r.m.Ops())
	if ns.State != "ACTIVE" || ns.MissingFromWhom != "rank 3 (h4)" || ns.MissingFrom != 4096 || ns.CompletedElements == 0 {
		t.Fatalf("after a refresh: %+v; want ACTIVE, waiting for rank 3 (h4) from 4096, elements completed", ns)
	}
}

// A run that failed on a typo (rank 1 on a host the topology does not
// have) and is started again corrected, with new sessions, gets a new
// invocation, not the failed one's error: the failing request was no
// arrival, so the new process was not seen as a new run and every rank of
// the corrected job got the old error for a minute (walkthrough).
func TestCorrectedRerunAfterFailedRequest(t *testing.T) {
	r := newRig(t, "single", Config{})
	bad := withSessions(reqsFor(11, 0, "allreduce", "h1", "h9"), 1)
	res := r.beginAll(bad)
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeTopology || !strings.Contains(ae.Message, "h9") {
			t.Fatalf("rank %d of the run with the typo: %v, want the topology error naming h9", i, x.err)
		}
	}
	// The same job again, fixed, from new processes.
	r.grantAll(t, withSessions(reqsFor(11, 0, "allreduce", "h1", "h2"), 10))
	// A repeat of the failing request from its own process still gets
	// the failure it had: it is the same run.
	if _, err := r.m.Begin(context.Background(), bad[1]); err == nil {
		t.Errorf("the failing request repeated was granted")
	}
}

// TestPersistentMismatchSaysInvocationLength: a persistent request's
// vector is every invocation's; a mismatch names its invocation length
// (invocation_len), not the 814743552 of 777 x 2^20 a user never asked for,
// and invocation_len alone never makes a mismatch.
func TestPersistentMismatchSaysInvocationLength(t *testing.T) {
	pers := params{Collective: parser.CollAllReduce, VectorLen: 777 << 20, InvocationLen: 777, Persistent: true, Size: 2}
	ord := params{Collective: parser.CollAllReduce, VectorLen: 8, Size: 2}
	if d := pers.differences(ord); d != "vector_len 777 per invocation vs 8, persistent true vs false" {
		t.Fatalf("differences %q", d)
	}
	// The same length per invocation, one side persistent: the
	// persistent flag is the difference, not "777 per invocation vs 777".
	same := params{Collective: parser.CollAllReduce, VectorLen: 777, Size: 2}
	if d := pers.differences(same); d != "persistent true vs false" {
		t.Fatalf("same length per invocation, one persistent: differences %q, want only the persistent flag", d)
	}
	other := pers
	other.InvocationLen = 0 // a client that does not send it
	if !pers.same(other) || pers.differences(other) != "" {
		t.Fatalf("invocation_len alone: same %v, differences %q; want the same collective", pers.same(other), pers.differences(other))
	}
	r, err := normalizeRequest(BeginRequest{Job: 1, Rank: 0, Size: 2, Collective: "allreduce", InputFormat: "fp32", AccPolicy: "kulisch",
		VectorLen: 777 << 20, Persistent: true, InvocationLen: 777, Node: "h1"}, 5000)
	if err != nil || r.InvocationLen != 777 {
		t.Fatalf("normalized %+v, %v; want invocation_len kept", r, err)
	}
}

// TestGraceOnlyForTimedOutReports: a failure a rank reports while every
// node is still ACTIVE is diagnosed at once, unless the rank says its own
// timer ended it (timed_out): then the AM asks the nodes again for up to
// min(timeout/2 + 200 ms, 4 s), and a node that fails meanwhile heads the
// diagnosis: here LINK_DOWN toward that rank 2 s later, about when a
// leaf's owed-RESULT clock (1.5 x Timeout) fires after a rank's RESULT
// deadline (Timeout + 1 s) at the default 5 s. Every INEXACT call
// waited the whole grace (a second per call) when it applied to every
// report.
func TestGraceOnlyForTimedOutReports(t *testing.T) {
	for _, timedOut := range []bool{false, true} {
		r := newRig(t, "spine-leaf", Config{})
		grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
		for _, n := range []string{"l1", "l2", "s1"} {
			r.activeOn(n, grants[2].Data.StreamID, 40) // still running, as when a rank's timer fires
		}
		if timedOut {
			time.AfterFunc(2*time.Second, func() { r.failNode("l2", parser.FailLinkDown, grants[2].Data.StreamID, 40) })
		}
		start := time.Now()
		st, err := r.m.Done(context.Background(), grants[2].ID, DoneRequest{Rank: 2, OK: false, TimedOut: timedOut, Wait: true,
			Error: "host: timeout: leaf l2 did not acknowledge DATA"})
		took := time.Since(start)
		if err != nil || st.Error == nil {
			t.Fatalf("timed_out %v: %+v, %v", timedOut, st, err)
		}
		switch {
		case !timedOut && took > 250*time.Millisecond:
			t.Errorf("not timed_out: diagnosed after %v, want at once", took)
		case timedOut && (took < 2*time.Second || !strings.Contains(st.Error.Message, "failed: node l2 lost its link to rank 2 (h3)")):
			t.Errorf("timed_out: after %v: %s; want the leaf's LINK_DOWN verdict, which came at 2 s, at the head", took, st.Error.Message)
		}
	}
}

// TestOpsFilter: GET /v1/ops's selection (job, group, seq, ops=0) lists
// exactly what a naive filter of the whole list keeps, and a bad query is
// a 400 naming the parameter.
func TestOpsFilter(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	c := NewClient(srv.URL)
	ctx := context.Background()
	for _, js := range []struct{ job, seq uint64 }{{20, 0}, {20, 1}, {21, 0}} {
		var wg sync.WaitGroup
		for _, q := range reqsFor(js.job, js.seq, "allreduce", "h1", "h2") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Begin(ctx, q); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	// Two barriers still gathering: job 20 seq 2 and job 22 seq 0.
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, q := range []BeginRequest{req(20, 2, 0, 2, "h1", "allreduce"), req(22, 0, 1, 2, "h2", "allreduce")} {
		go c.Begin(bctx, q)
	}
	all := func() *OpList {
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			l, err := c.Ops(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Barriers) == 2 || time.Now().After(end) {
				return l
			}
		}
	}()
	if len(all.Ops) != 3 || len(all.Barriers) != 2 {
		t.Fatalf("whole list: %d operations, %d barriers; want 3 and 2", len(all.Ops), len(all.Barriers))
	}
	u := func(x uint64) *uint64 { return &x }
	g1, g2 := uint16(1), uint16(2)
	for _, f := range []OpsFilter{{}, {Job: u(20)}, {Job: u(20), Seq: u(1)}, {Job: u(20), Group: &g1, NoOps: true},
		{Job: u(22)}, {Group: &g2}, {Seq: u(0)}, {Job: u(99)}, {NoOps: true}} {
		got, err := c.OpsWhere(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var wantOps, gotOps, wantB, gotB []string
		for _, o := range all.Ops {
			if !f.NoOps && f.match(o.Op.Job, o.Op.Group, o.Seq) {
				wantOps = append(wantOps, o.ID)
			}
		}
		for _, o := range got.Ops {
			gotOps = append(gotOps, o.ID)
		}
		for _, b := range all.Barriers {
			if f.match(b.Job, b.Group, b.Seq) {
				wantB = append(wantB, fmt.Sprint(b.Job, "/", b.Seq))
			}
		}
		for _, b := range got.Barriers {
			gotB = append(gotB, fmt.Sprint(b.Job, "/", b.Seq))
		}
		if fmt.Sprint(gotOps) != fmt.Sprint(wantOps) || fmt.Sprint(gotB) != fmt.Sprint(wantB) {
			t.Errorf("filter %+v: ops %v barriers %v, want %v %v", f, gotOps, gotB, wantOps, wantB)
		}
	}
	for _, q := range []string{"job=x", "group=70000", "seq=-1", "ops=2", "job=", "job=1&job=2", "ops=0&ops=1"} {
		resp, err := http.Get(srv.URL + APIVersion + "/ops?" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		key, _, _ := strings.Cut(q, "=")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), key) {
			t.Errorf("?%s: HTTP %d %s, want 400 naming %s", q, resp.StatusCode, b, key)
		}
	}
}

// TestRankRanges against a naive rendering: every rank in runs, ascending,
// and after 16 runs how many are left out.
func TestRankRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 300; trial++ {
		set := map[int]bool{}
		for k := rng.IntN(60); k > 0; k-- {
			set[rng.IntN(80)] = true
		}
		var v []int
		for x := range set {
			v = append(v, x)
		}
		// Naive: walk 0..79, open a run at a member after a non-member.
		var runs []string
		left := 0
		for x := 0; x < 80; x++ {
			if !set[x] || set[x-1] && x > 0 {
				continue
			}
			y := x
			for set[y+1] {
				y++
			}
			if len(runs) == 16 {
				left += y - x + 1
				continue
			}
			if y > x {
				runs = append(runs, fmt.Sprintf("%d-%d", x, y))
			} else {
				runs = append(runs, fmt.Sprint(x))
			}
		}
		want := strings.Join(runs, " ")
		if left > 0 {
			want += fmt.Sprintf(" ... and %d more", left)
		}
		if len(v) == 0 {
			want = "none"
		}
		if got := RankRanges(v); got != want {
			t.Fatalf("%v: %q, want %q", v, got, want)
		}
	}
	big := make([]int, 100000)
	for i := range big {
		big[i] = 2 * i // no runs: the line stays short
	}
	if s := RankRanges(big); len(s) > 200 || !strings.HasSuffix(s, "and 99984 more") {
		t.Fatalf("100000 ranks: %d bytes %q", len(s), s[:min(len(s), 200)])
	}
	r := newRig(t, "spine-leaf", Config{})
	b := req(30, 0, 0, MaxRanks+1, "h1", "allreduce")
	var ae *APIError
	if _, err := r.m.Begin(context.Background(), b); !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "at most 16000 ranks") {
		t.Fatalf("size %d: %v, want bad_request naming the limit", b.Size, err)
	}
}

// TestDiagnosisWordsTheStream: a leaf that timed out on a rank's RESULT
// stream blames the rank for not acknowledging RESULT (it had sent all
// its data: "stopped contributing from element 0" misled); in a persistent
// operation the element is named within its invocation.
func TestDiagnosisWordsTheStream(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	st := r.failedOn(t, grants[0], "l2", grants[3].Result.StreamID, 363)
	if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 3 ||
		!strings.Contains(st.Error.Message, "rank 3 (h4) stopped acknowledging RESULT") ||
		!strings.Contains(st.Error.Message, "node l2 is FAILED, timed out on rank 3 (h4) acknowledging RESULT from element 363") {
		t.Fatalf("err %+v, want rank 3 blamed for not acknowledging RESULT", st.Error)
	}

	r = newRig(t, "spine-leaf", Config{})
	q := reqsFor(7, 0, "allreduce", "h1", "h2", "h3", "h4")
	for i := range q {
		q[i].Persistent, q[i].VectorLen, q[i].InvocationLen = true, 1000<<10, 1000
	}
	grants = r.grantAll(t, q)
	st = r.failedOn(t, grants[0], "l2", grants[3].Data.StreamID, 153*1000+804)
	if st.Error == nil || !strings.Contains(st.Error.Message, "rank 3 (h4) stopped contributing") ||
		!strings.Contains(st.Error.Message, "timed out on rank 3 (h4) from element 804 of invocation 154 (153804 in the operation)") {
		t.Fatalf("err %+v, want the element within its invocation", st.Error)
	}
	if st.InvocationLen != 1000 {
		t.Fatalf("status invocation_len %d, want 1000 (show am names elements by it)", st.InvocationLen)
	}
}

// TestHoldingNamesTheChainsEnd: while an operation runs, its status names
// the rank the nodes' waits lead to from the root (l2's rank 2), not l1's
// least advanced rank, which only waits behind it.
func TestHoldingNamesTheChainsEnd(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(6, 0, "allreduce", "h1", "h2", "h3", "h4"))
	fromL2 := r.rootStreamFrom(t, grants[0].Op, "l2")
	r.activeOn("l1", grants[1].Data.StreamID, 5768070)
	r.activeOn("l2", grants[2].Data.StreamID, 5753187)
	r.activeOn("s1", fromL2, 5750370)
	r.m.Refresh()
	st, err := r.m.Op(grants[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "active" || st.Holding != "rank 2 (h3) at l2" {
		t.Fatalf("state %s holding %q, want active, held by rank 2 (h3) at l2", st.State, st.Holding)
	}
	// The chain broken (the root waits for nothing): no guess.
	r.activeOn("s1", 0, 0)
	r.nodes["s1"].mu.Lock()
	r.nodes["s1"].final = parser.StateComplete
	r.nodes["s1"].mu.Unlock()
	r.m.Refresh()
	if st, _ = r.m.Op(grants[0].ID); st.Holding != "" {
		t.Fatalf("root not waiting: holding %q, want none", st.Holding)
	}
}

// failedOn makes node FAILED on stream from element from (it timed out on
// that stream's peer) and has rank 0 report a failure of g, waiting for
// the AM's diagnosis.
func (r *rig) failedOn(t *testing.T, g *Grant, node string, stream uint16, from uint32) OpStatus {
	t.Helper()
	r.nodes[node].final = parser.StateFailed
	r.nodes[node].missing = stream
	r.nodes[node].missFrom = from
	st, err := r.m.Done(context.Background(), g.ID, DoneRequest{Rank: 0, OK: false, Error: "no RESULT for 5s", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestNoResourcesWhileOwnReleaseEnds: on a switch with room for one
// context, a job's next call that comes while its previous call's RELEASE
// is still on its way is refused NO_RESOURCES; the AM waits for its own
// ending operation and sets up again, and the call is granted. (At a full
// switch a job's back-to-back calls failed every other time.) A refusal
// with nothing of this AM ending there fails as before.
func TestNoResourcesWhileOwnReleaseEnds(t *testing.T) {
	r := newRig(t, "single", Config{})
	sw := r.nodes["sw1"]
	sw.mu.Lock()
	sw.maxCtx = 1
	sw.silent[parser.CmdRelease] = true // the RELEASE of seq 0 is late
	sw.mu.Unlock()
	g0 := r.grantsOf(r.beginAll(reqsFor(7, 0, "allreduce", "h1", "h2")))
	for i := range g0 {
		if _, err := r.m.Done(context.Background(), g0[i].ID, DoneRequest{Rank: i, OK: true}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		sw.mu.Lock()
		delete(sw.silent, parser.CmdRelease) // the retransmitted RELEASE gets through
		sw.mu.Unlock()
	}()
	res := r.beginAll(reqsFor(7, 1, "allreduce", "h1", "h2"))
	for i, x := range res {
		if x.err != nil {
			t.Fatalf("seq 1 rank %d: %v, want a grant once seq 0's RELEASE ended", i, x.err)
		}
	}
	if v := testutil.ToFloat64(r.m.metrics.setupRetries.WithLabelValues("no_resources_while_ending")); v != 1 {
		t.Errorf("setup_retries_total{cause=no_resources_while_ending} = %v, want 1", v)
	}
	// Another job, while seq 1 holds the only room: refused, no retry.
	res = r.beginAll(reqsFor(8, 0, "allreduce", "h1", "h2"))
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || !strings.Contains(ae.Message, "node sw1 has no room for another operation (STAGE refused NO_RESOURCES)") {
			t.Fatalf("job 8 rank %d: %v, want sw1 named as having no room (NO_RESOURCES)", i, x.err)
		}
	}
}

package am

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/parser"
)

// persistentReqs are the requests of a persistent invocation.
func persistentReqs(job, seq uint64, timeoutMS uint32, hosts ...string) []BeginRequest {
	q := reqsFor(job, seq, "allreduce", hosts...)
	for i := range q {
		q[i].Persistent, q[i].TimeoutMS = true, timeoutMS
	}
	return q
}

// keepAlive sends rank's keepalives for id every period until the returned
// stop is called; stop returns the time the last keepalive was sent (the
// AM recorded it no earlier).
func (r *rig) keepAlive(id string, rank int, every time.Duration) (stop func() time.Time) {
	quit, done := make(chan struct{}), make(chan struct{})
	var last time.Time
	go func() {
		defer close(done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			at := time.Now()
			if _, err := r.m.Alive(context.Background(), id, AliveRequest{Rank: rank}); err != nil {
				r.t.Errorf("rank %d keepalive: %v", rank, err)
				return
			}
			last = at
			select {
			case <-quit:
				return
			case <-tk.C:
			}
		}
	}()
	var once sync.Once
	return func() time.Time {
		once.Do(func() { close(quit) })
		<-done
		return last
	}
}

// treeNodes are the fake nodes of the operation's tree.
func (r *rig) treeNodes(id string) []*fakeNode {
	r.t.Helper()
	st, err := r.m.Op(id)
	if err != nil {
		r.t.Fatal(err)
	}
	var ns []*fakeNode
	for _, n := range st.Nodes {
		ns = append(ns, r.nodes[n.Name])
	}
	return ns
}

// TestPersistentGrantNoPreparation: a persistent invocation is granted as
// such, with KeepaliveMS = max(timeout/2, 100), and even with preparation
// on no operation is installed for its next Seq: every node of the tree
// saw one STAGE per persistent operation and nothing more.
func TestPersistentGrantNoPreparation(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true})
	var all [][]*Grant
	for _, tc := range []struct {
		job             uint64
		timeout, wantKA uint32
	}{{20, 300, 150}, {21, 150, 100}} {
		gs := r.grantsOf(r.beginAll(persistentReqs(tc.job, 0, tc.timeout, "h1", "h3")))
		for _, g := range gs {
			if !g.Persistent || g.KeepaliveMS != tc.wantKA || g.TimeoutMS != tc.timeout {
				t.Fatalf("timeout %d: grant persistent=%v keepalive_ms=%d timeout_ms=%d, want true, %d, %d",
					tc.timeout, g.Persistent, g.KeepaliveMS, g.TimeoutMS, tc.wantKA, tc.timeout)
			}
		}
		all = append(all, gs)
	}
	// A preparation starts right after the grant and takes a few
	// milliseconds with these nodes (TestPreparedInvocationNeedsNoControl).
	time.Sleep(200 * time.Millisecond)
	for _, n := range r.treeNodes(all[0][0].ID) {
		if k := n.count(parser.CmdStage); k != 2 {
			t.Errorf("%s: %d STAGEs applied, want 2 (one per persistent operation, no preparation)", n.name, k)
		}
	}
	if l := r.m.Ops().Ops; len(l) != 2 {
		t.Fatalf("the AM knows %d operations, want the 2 persistent ones: %+v", len(l), l)
	}
	for _, o := range prepOutcomes {
		if x := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(o)); x != 0 {
			t.Errorf("prepared %s = %v, want 0", o, x)
		}
	}
	for _, gs := range all {
		if st := r.doneAll(gs); st.State != "released" || st.Error != nil || !st.Persistent {
			t.Fatalf("%s: final status %+v", gs[0].ID, st)
		}
	}
}

// TestPersistentNotGivenPreparedOp: the operation prepared for Seq+1 of a
// job (not persistent) is not granted to a persistent Seq+1: it is ABORTed
// as a mismatch and the persistent invocation is set up on its own.
func TestPersistentNotGivenPreparedOp(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true})
	g0 := r.grantsOf(r.beginAll(reqsFor(40, 0, "allreduce", "h1", "h3")))
	p := r.waitPrepared(1)
	g1 := r.grantsOf(r.beginAll(persistentReqs(40, 1, 0, "h1", "h3")))
	if g1[0].Op == p.Op || !g1[0].Persistent {
		t.Fatalf("persistent seq 1 granted %s persistent=%v (prepared %s)", g1[0].ID, g1[0].Persistent, p.ID)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, _ := r.m.Op(p.ID); st.State == "unused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the prepared operation was not dropped")
		}
	}
	for _, n := range r.treeNodes(g1[0].ID) {
		if s := n.opState(p.Op); s != parser.StateAborted {
			t.Errorf("%s: prepared operation %v, want ABORTED", n.name, s)
		}
	}
	if x := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(prepMismatch)); x != 1 {
		t.Errorf("prepared mismatch = %v, want 1", x)
	}
	if x := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(prepUsed)); x != 0 {
		t.Errorf("prepared used = %v, want 0", x)
	}
	r.doneAll(g0)
	if st := r.doneAll(g1); st.State != "released" || st.Error != nil {
		t.Fatalf("final status %+v", st)
	}
}

// TestPersistentDoneAborts: when every rank freed a persistent operation
// the AM ABORTs every node (they are ACTIVE, not COMPLETE) without polling
// COMPLETE or sending RELEASE, and calls it released. Keepalives after a
// rank's done, or after the end, are answered and change nothing.
func TestPersistentDoneAborts(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	for _, n := range r.nodes {
		n.final = parser.StateActive // a COMPLETE would find them ACTIVE
	}
	gs := r.grantsOf(r.beginAll(persistentReqs(22, 0, 1000, "h1", "h3")))
	id := gs[0].ID
	if _, err := r.m.Done(context.Background(), id, DoneRequest{Rank: 0, OK: true}); err != nil {
		t.Fatal(err)
	}
	st, err := r.m.Alive(context.Background(), id, AliveRequest{Rank: 0})
	if err != nil || st.State != "active" || len(st.RanksDone) != 1 {
		t.Fatalf("keepalive after done: %+v %v", st, err)
	}
	st, err = r.m.Done(context.Background(), id, DoneRequest{Rank: 1, OK: true, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "released" || st.Error != nil || !st.Persistent {
		t.Fatalf("final status %+v (error %+v)", st, st.Error)
	}
	nodes := r.treeNodes(id)
	if len(nodes) != 3 {
		t.Fatalf("%d tree nodes, want 3 (l1, l2, s1)", len(nodes))
	}
	for _, n := range nodes {
		if s := n.opState(gs[0].Op); s != parser.StateAborted {
			t.Errorf("%s: state %v, want ABORTED", n.name, s)
		}
		if a, c, rel := n.count(parser.CmdAbort), n.count(parser.CmdComplete), n.count(parser.CmdRelease); a != 1 || c != 0 || rel != 0 {
			t.Errorf("%s: %d ABORT %d COMPLETE %d RELEASE, want 1, 0, 0", n.name, a, c, rel)
		}
	}
	if x := testutil.ToFloat64(r.m.metrics.completed); x != 1 {
		t.Errorf("completed = %v, want 1", x)
	}
	for _, reason := range failReasons {
		if x := testutil.ToFloat64(r.m.metrics.failed.WithLabelValues(reason)); x != 0 {
			t.Errorf("failed{%s} = %v, want 0", reason, x)
		}
	}
	if st, err := r.m.Alive(context.Background(), id, AliveRequest{Rank: 1}); err != nil || st.State != "released" || st.Error != nil {
		t.Fatalf("keepalive after the end: %+v %v", st, err)
	}
	if a := r.m.activeOps(); a != 0 {
		t.Errorf("%d active operations after the end", a)
	}
}

// TestPersistentKeepaliveKeepsIdleOpAlive: an idle persistent operation
// (no node makes progress) whose ranks send keepalives lives well past
// the progress watchdog's period, which is not used for it (no COMPLETE
// reaches the nodes), and past 3 x KeepaliveMS + the CONTROL timeout; a
// rank that reported done needs no keepalive any more.
func TestPersistentKeepaliveKeepsIdleOpAlive(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Watchdog: 50 * time.Millisecond, CtlTimeout: 100 * time.Millisecond})
	for _, n := range r.nodes {
		n.final = parser.StateActive
	}
	gs := r.grantsOf(r.beginAll(persistentReqs(23, 0, 100, "h1", "h3")))
	id, every := gs[0].ID, time.Duration(gs[0].KeepaliveMS)*time.Millisecond
	limit := r.m.keepaliveDeadline(params{TimeoutMS: 100})
	if every != 100*time.Millisecond || limit != 400*time.Millisecond {
		t.Fatalf("keepalive every %v deadline %v, want 100ms and 400ms", every, limit)
	}
	stop0, stop1 := r.keepAlive(id, 0, every), r.keepAlive(id, 1, every)
	defer stop0()
	defer stop1()
	time.Sleep(limit + 250*time.Millisecond) // 13 watchdog periods
	if st, _ := r.m.Op(id); st.State != "active" {
		t.Fatalf("an idle persistent operation with live ranks ended: %+v (error %+v)", st, st.Error)
	}
	// Rank 0 frees the operation and falls silent: only rank 1 is watched.
	if _, err := r.m.Done(context.Background(), id, DoneRequest{Rank: 0, OK: true}); err != nil {
		t.Fatal(err)
	}
	stop0()
	time.Sleep(limit + 150*time.Millisecond)
	if st, _ := r.m.Op(id); st.State != "active" {
		t.Fatalf("a rank silent after its done report ended the operation: %+v (error %+v)", st, st.Error)
	}
	for _, n := range r.treeNodes(id) {
		if c := n.count(parser.CmdComplete); c != 0 {
			t.Errorf("%s: %d COMPLETE sent to an idle persistent operation (the progress watchdog ran)", n.name, c)
		}
	}
	stop1()
	if st, err := r.m.Done(context.Background(), id, DoneRequest{Rank: 1, OK: true, Wait: true}); err != nil || st.State != "released" || st.Error != nil {
		t.Fatalf("final status %+v %v", st, err)
	}
}

// TestPersistentNodesRefreshed: while a persistent operation is alive (its
// ranks send keepalives) the AM sends COMPLETE to each of its nodes every
// PersistentRefresh, which a node takes as its AM's word that the resting
// context is still wanted (engine.Expire retires one that hears nothing);
// once the operation ended, no more.
func TestPersistentNodesRefreshed(t *testing.T) {
	const refresh = 300 * time.Millisecond // three keepalive checks
	r := newRig(t, "spine-leaf", Config{PersistentRefresh: refresh, CtlTimeout: 100 * time.Millisecond})
	for _, n := range r.nodes {
		n.final = parser.StateActive
	}
	gs := r.grantsOf(r.beginAll(persistentReqs(24, 0, 100, "h1", "h3")))
	id, every := gs[0].ID, time.Duration(gs[0].KeepaliveMS)*time.Millisecond
	stop0, stop1 := r.keepAlive(id, 0, every), r.keepAlive(id, 1, every)
	defer stop0()
	defer stop1()
	const wait = 3*refresh + refresh/2
	time.Sleep(wait)
	for _, n := range r.treeNodes(id) {
		// Checked every keepalive period (100ms), due every third check:
		// three refreshes, two on a loaded machine, a few more counted if
		// a slow answer made the AM retransmit; ten if every check sent.
		if c := n.count(parser.CmdComplete); c < 2 || c > 6 {
			t.Errorf("%s: %d COMPLETE in %v, want one per %v", n.name, c, wait, refresh)
		}
	}
	if st, _ := r.m.Op(id); st.State != "active" {
		t.Fatalf("the refreshed operation ended: %+v (error %+v)", st, st.Error)
	}
	stop0()
	stop1()
	for rank := range 2 {
		if st, err := r.m.Done(context.Background(), id, DoneRequest{Rank: rank, OK: true, Wait: rank == 1}); err != nil || rank == 1 && st.State != "released" {
			t.Fatalf("done %d: %+v %v", rank, st, err)
		}
	}
	before := map[string]int{}
	for _, n := range r.treeNodes(id) {
		before[n.name] = n.count(parser.CmdComplete)
	}
	time.Sleep(3 * refresh)
	for _, n := range r.treeNodes(id) {
		if c := n.count(parser.CmdComplete); c != before[n.name] {
			t.Errorf("%s: %d COMPLETE after the operation ended", n.name, c-before[n.name])
		}
	}
}

// TestPersistentKeepaliveMissingFailsOp: a rank that stops its keepalives
// fails the persistent operation once it has been silent for 3 x
// KeepaliveMS + the CONTROL timeout (not before, and within one check
// period after): the error names it, every node is ABORTed, and the
// failure is counted under reason keepalive.
func TestPersistentKeepaliveMissingFailsOp(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{CtlTimeout: 100 * time.Millisecond})
	for _, n := range r.nodes {
		n.final = parser.StateActive
	}
	gs := r.grantsOf(r.beginAll(persistentReqs(24, 0, 100, "h1", "h3")))
	id, every := gs[0].ID, time.Duration(gs[0].KeepaliveMS)*time.Millisecond
	limit := 3*every + 100*time.Millisecond
	stop0, stop1 := r.keepAlive(id, 0, every), r.keepAlive(id, 1, every)
	defer stop0()
	defer stop1()
	time.Sleep(250 * time.Millisecond)
	last := stop1() // rank 1's process died
	var st OpStatus
	var failedAt time.Time
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, _ = r.m.Op(id)
		if st.State == "failed" {
			failedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operation of a silent rank was not failed: %+v", st)
		}
	}
	// Detected at the first check past the deadline; the slack is for
	// the failure's own CONTROL round trips and a loaded test host.
	if d := failedAt.Sub(last); d < limit || d > limit+every+700*time.Millisecond {
		t.Errorf("failed %v after rank 1's last keepalive, want within %v..%v", d, limit, limit+every)
	}
	e := st.Error
	if e == nil || e.Code != CodeOperationFailed || e.Rank == nil || *e.Rank != 1 ||
		!strings.Contains(e.Message, "rank 1 (h3) sent no keepalive for ") || !strings.Contains(e.Message, "(every 100ms expected); its process may have died") {
		t.Fatalf("error %+v", e)
	}
	for _, n := range r.treeNodes(id) {
		if s := n.opState(gs[0].Op); s != parser.StateAborted {
			t.Errorf("%s: state %v, want ABORTED", n.name, s)
		}
		if a, rel := n.count(parser.CmdAbort), n.count(parser.CmdRelease); a != 1 || rel != 0 {
			t.Errorf("%s: %d ABORT %d RELEASE, want 1 and 0", n.name, a, rel)
		}
	}
	if x := testutil.ToFloat64(r.m.metrics.failed.WithLabelValues(reasonKeepalive)); x != 1 {
		t.Errorf("failed{keepalive} = %v, want 1", x)
	}
	if x := testutil.ToFloat64(r.m.metrics.failed.WithLabelValues(reasonWatchdog)); x != 0 {
		t.Errorf("failed{watchdog} = %v, want 0", x)
	}
	stop0()
	// The surviving rank learns why when it frees the operation.
	if st, err := r.m.Done(context.Background(), id, DoneRequest{Rank: 0, OK: true, Wait: true}); err != nil || st.State != "failed" || st.Error == nil || *st.Error.Rank != 1 {
		t.Fatalf("rank 0's done: %+v %v", st, err)
	}
}

// TestPersistentNoKeepaliveSinceGrant: a rank that never sends a keepalive
// is silent since the grant and fails the operation by the same deadline.
func TestPersistentNoKeepaliveSinceGrant(t *testing.T) {
	r := newRig(t, "single", Config{CtlTimeout: 100 * time.Millisecond})
	for _, n := range r.nodes {
		n.final = parser.StateActive
	}
	limit := r.m.keepaliveDeadline(params{TimeoutMS: 100})
	before := time.Now()
	gs := r.grantsOf(r.beginAll(persistentReqs(28, 0, 100, "h1", "h2")))
	granted := time.Now()
	id := gs[0].ID
	stop0 := r.keepAlive(id, 0, time.Duration(gs[0].KeepaliveMS)*time.Millisecond)
	defer stop0()
	var st OpStatus
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, _ = r.m.Op(id); st.State == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operation of a rank that never sent a keepalive was not failed: %+v", st)
		}
	}
	if d := time.Since(before); d < limit {
		t.Errorf("failed %v after the grant, before the %v deadline", d, limit)
	}
	if d := time.Since(granted); d > limit+100*time.Millisecond+700*time.Millisecond {
		t.Errorf("failed %v after the grant, want about %v", d, limit)
	}
	if e := st.Error; e == nil || e.Rank == nil || *e.Rank != 1 || !strings.Contains(e.Message, "rank 1 (h2) sent no keepalive") {
		t.Fatalf("error %+v", e)
	}
	if s := r.nodes["sw1"].opState(gs[0].Op); s != parser.StateAborted {
		t.Errorf("sw1: state %v, want ABORTED", s)
	}
}

// TestPersistentMismatch: persistent is a parameter of the invocation:
// ranks that disagree on it get mismatch, whichever arrives first.
func TestPersistentMismatch(t *testing.T) {
	r := newRig(t, "single", Config{})
	for seq, firstPersistent := range []bool{true, false} {
		q := reqsFor(25, uint64(seq), "allreduce", "h1", "h2")
		q[0].Persistent, q[1].Persistent = firstPersistent, !firstPersistent
		first := make(chan error, 1)
		go func() { _, err := r.m.Begin(context.Background(), q[0]); first <- err }()
		waitFor(t, func() bool { return r.waiting(q[0]) == 1 })
		_, err := r.m.Begin(context.Background(), q[1])
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != CodeMismatch || ae.Rank == nil || *ae.Rank != 1 || !strings.Contains(ae.Message, fmt.Sprintf("persistent %v vs %v", !firstPersistent, firstPersistent)) {
			t.Fatalf("seq %d (rank 0 persistent=%v): err %v, want mismatch blaming rank 1", seq, firstPersistent, err)
		}
		if err0 := <-first; !errors.As(err0, &ae) || ae.Code != CodeMismatch {
			t.Fatalf("seq %d: rank 0, waiting: %v, want the same mismatch", seq, err0)
		}
	}
}

// TestPersistentAliveHTTP: POST /v1/ops/{id}/alive over the real handler
// and Client.Alive: the status of a persistent operation, bad_request (400)
// for an operation that is not persistent or a rank out of range,
// not_found for an unknown one; the new JSON fields by name.
func TestPersistentAliveHTTP(t *testing.T) {
	r := newRig(t, "single", Config{})
	srv := httptest.NewServer(r.m.Handler())
	defer srv.Close()
	c := NewClient(srv.URL)
	ctx := context.Background()
	begin := func(q []BeginRequest) []*Grant {
		gs := make([]*Grant, len(q))
		errs := make([]error, len(q))
		var wg sync.WaitGroup
		for i := range q {
			wg.Add(1)
			go func() {
				defer wg.Done()
				gs[i], errs[i] = c.Begin(ctx, q[i])
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		return gs
	}
	gp := begin(persistentReqs(26, 0, 1000, "h1", "h2"))
	gn := begin(reqsFor(27, 0, "allreduce", "h1", "h2"))
	if gp[1].KeepaliveMS != 500 || !gp[1].Persistent || gn[1].KeepaliveMS != 0 || gn[1].Persistent {
		t.Fatalf("grants %+v / %+v", gp[1], gn[1])
	}
	for _, x := range []struct {
		v    any
		want []string
		not  []string
	}{
		{*gp[0], []string{`"persistent":true`, `"keepalive_ms":500`}, nil},
		{*gn[0], nil, []string{`"persistent"`, `"keepalive_ms"`}},
		{BeginRequest{Persistent: true}, []string{`"persistent":true`}, nil},
		{BeginRequest{}, nil, []string{`"persistent"`}},
		{AliveRequest{Rank: 3}, []string{`{"rank":3}`}, nil},
	} {
		b, _ := json.Marshal(x.v)
		for _, w := range x.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%T JSON %s lacks %s", x.v, b, w)
			}
		}
		for _, w := range x.not {
			if strings.Contains(string(b), w) {
				t.Errorf("%T JSON %s has %s", x.v, b, w)
			}
		}
	}

	st, err := c.Alive(ctx, gp[0].ID, AliveRequest{Rank: 1})
	if err != nil || st.ID != gp[0].ID || st.State != "active" || !st.Persistent {
		t.Fatalf("alive: %+v %v", st, err)
	}
	var ae *APIError
	for _, rank := range []int{2, -1} {
		if _, err := c.Alive(ctx, gp[0].ID, AliveRequest{Rank: rank}); !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "outside 0..1") {
			t.Errorf("alive rank %d: %v, want bad_request naming the range", rank, err)
		}
	}
	if _, err := c.Alive(ctx, gn[0].ID, AliveRequest{}); !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "not persistent") {
		t.Errorf("alive for a non-persistent operation: %v, want bad_request", err)
	}
	if _, err := c.Alive(ctx, "1-2-3-4-5", AliveRequest{}); !errors.As(err, &ae) || ae.Code != CodeNotFound {
		t.Errorf("alive for an unknown operation: %v, want not_found", err)
	}
	// The HTTP statuses and bodies themselves.
	for _, x := range []struct {
		id, body string
		code     int
		has      string
	}{
		{gp[0].ID, `{"rank":0}`, 200, `"persistent":true`},
		{gn[0].ID, `{"rank":0}`, 400, `"code":"bad_request"`},
		{gp[0].ID, `{"rank":5}`, 400, `"code":"bad_request"`},
		{gp[0].ID, `{"rank":0,"ok":true}`, 400, `unknown field`},
		{gp[0].ID, `{"rank":0,"invocations":3}`, 200, `"persistent":true`},
		// Decoded as Go values, an absent rank was rank 0: a keepalive
		// without one ended a drain as rank 0's report.
		{gp[0].ID, `{"invocations":3}`, 400, `missing required field(s) rank`},
		{gp[0].ID, `{}`, 400, `missing required field(s) rank`},
		{gp[0].ID, `{"rank":0,"invocations":-1}`, 400, `"code":"bad_request"`},
	} {
		resp, err := http.Post(srv.URL+APIVersion+"/ops/"+x.id+"/alive", "application/json", strings.NewReader(x.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != x.code || !strings.Contains(string(b), x.has) {
			t.Errorf("POST alive %s %s: HTTP %d %s, want %d with %s", x.id, x.body, resp.StatusCode, b, x.code, x.has)
		}
	}
	// A done report without rank or ok is refused, not read as rank 0's
	// or as a failure; nothing changes.
	for _, body := range []string{`{"ok":true}`, `{"rank":1}`, `{"rank":1,"error":"x","local":true,"invocations":2}`} {
		resp, err := http.Post(srv.URL+APIVersion+"/ops/"+gp[0].ID+"/done", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "missing required field(s)") {
			t.Errorf("done %s: HTTP %d %s, want 400 naming the missing field", body, resp.StatusCode, b)
		}
	}
	if st, err := c.Op(ctx, gp[0].ID); err != nil || st.State != "active" || len(st.RanksDone) != 0 {
		t.Fatalf("after refused done reports: %+v %v, want active with no rank done", st, err)
	}
	l, err := c.Ops(ctx)
	if err != nil || len(l.Ops) != 2 {
		t.Fatalf("ops %+v %v", l, err)
	}
	for _, o := range l.Ops {
		if o.Persistent != (o.ID == gp[0].ID) {
			t.Errorf("op %s listed persistent=%v", o.ID, o.Persistent)
		}
	}
	for _, gs := range [][]*Grant{gp, gn} {
		for i := range gs {
			st, err := c.Done(ctx, gs[i].ID, DoneRequest{Rank: i, OK: true, Wait: i == len(gs)-1})
			if err != nil || (i == len(gs)-1 && (st.State != "released" || st.Error != nil)) {
				t.Fatalf("%s done: %+v %v", gs[i].ID, st, err)
			}
		}
	}
}

// TestPersistentLocalFailureDrains: rank 0 completed 2 invocations of a
// persistent operation and fails the next locally (its call was cancelled
// before it ran). Rank 1 has reported only 1: it may still be receiving
// invocation 2's RESULT, which an ABORT now would cut. The AM waits
// ("draining", saying for whom) and ABORTs as soon as rank 1's keepalive
// reports 2, well before the drain's bound; the failure names rank 0.
// A local failure after 0 invocations, or once every other rank reported
// as many, ABORTs at once; with rank 1 silent, the drain ends at its bound.
func TestPersistentLocalFailureDrains(t *testing.T) {
	ctx := context.Background()
	type step struct {
		aliveBefore uint32 // rank 1's count before rank 0's failure (0: no keepalive)
		after       uint32 // rank 0's completed invocations
		aliveLater  uint32 // rank 1's keepalive during the drain (0: none)
		wantDrain   bool
	}
	for i, tc := range []step{
		{aliveBefore: 1, after: 2, aliveLater: 2, wantDrain: true}, // rank 1 catches up: ABORT then
		{aliveBefore: 2, after: 2},                                 // already caught up: ABORT at once
		{after: 0},                                                 // nothing completed: nothing to wait for
		{aliveBefore: 1, after: 2, wantDrain: true},                // rank 1 silent: the bound ends it
	} {
		t.Run(fmt.Sprintf("case%d", i), func(t *testing.T) {
			var logMu sync.Mutex
			var logs []string
			r := newRig(t, "spine-leaf", Config{CtlTimeout: 200 * time.Millisecond, Logf: func(format string, args ...any) {
				logMu.Lock()
				logs = append(logs, fmt.Sprintf(format, args...))
				logMu.Unlock()
			}})
			for _, n := range r.nodes {
				n.final = parser.StateActive
			}
			const timeoutMS = 1000 // keepalive every 500 ms, drain bound 750 ms
			gs := r.grantsOf(r.beginAll(persistentReqs(uint64(40+i), 0, timeoutMS, "h1", "h3")))
			id := gs[0].ID
			aborts := func() (n int) {
				for _, nd := range r.treeNodes(id) {
					n += nd.count(parser.CmdAbort)
				}
				return n
			}
			if tc.aliveBefore > 0 {
				if _, err := r.m.Alive(ctx, id, AliveRequest{Rank: 1, Invocations: tc.aliveBefore}); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			st, err := r.m.Done(ctx, id, DoneRequest{Rank: 0, OK: false, Local: true, Invocations: tc.after,
				Error: fmt.Sprintf("invocation %d was cancelled before it ran on this rank", tc.after+1)})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantDrain {
				// The answer says what happens next: the failure.
				if st.State != "failing" || st.Draining != nil {
					t.Fatalf("state %q draining %+v with nothing to wait for, want failing", st.State, st.Draining)
				}
			} else {
				// The same report again (a retry after a lost answer)
				// is ignored, as every repeated report is.
				if again, err := r.m.Done(ctx, id, DoneRequest{Rank: 0, OK: false, Local: true, Invocations: tc.after,
					Error: fmt.Sprintf("invocation %d was cancelled before it ran on this rank", tc.after+1)}); err != nil || again.State != "draining" {
					t.Fatalf("the failing rank's repeated report: %+v %v, want still draining", again, err)
				}
				if st.State != "draining" || st.Draining == nil || st.Draining.Rank != 0 || st.Draining.Invocations != tc.after ||
					len(st.Draining.Waiting) != 1 || st.Draining.Waiting[0] != 1 || st.Draining.LeftMS <= 0 || st.Draining.LeftMS > 750 {
					t.Fatalf("status after the local failure: state %q draining %+v, want draining for rank 1 after 2 invocations", st.State, st.Draining)
				}
				time.Sleep(100 * time.Millisecond)
				if n := aborts(); n != 0 {
					t.Fatalf("%d ABORTs while rank 1 may still be in invocation %d", n, tc.after)
				}
				var caught time.Time
				if tc.aliveLater > 0 {
					// A count below the failing rank's does not end it.
					if st, err := r.m.Alive(ctx, id, AliveRequest{Rank: 1, Invocations: tc.after - 1}); err != nil || st.State != "draining" {
						t.Fatalf("keepalive with fewer invocations: %+v %v", st, err)
					}
					caught = time.Now()
					if st, err := r.m.Alive(ctx, id, AliveRequest{Rank: 1, Invocations: tc.aliveLater}); err != nil || st.State != "failing" {
						t.Fatalf("the keepalive that ends the drain: %+v %v, want the answer failing", st, err)
					}
				}
				// The drain ends by itself (no done report from rank 1).
				for {
					st, err := r.m.Op(id)
					if err != nil {
						t.Fatal(err)
					}
					if st.State == "failed" {
						break
					}
					if time.Since(t0) > 3*time.Second {
						t.Fatalf("still %q 3 s after the local failure (drain bound 750 ms)", st.State)
					}
					time.Sleep(5 * time.Millisecond)
				}
				took := time.Since(t0)
				switch {
				case tc.aliveLater > 0 && time.Since(caught) > 400*time.Millisecond:
					t.Errorf("failed %v after rank 1 caught up, want at once", time.Since(caught))
				case tc.aliveLater == 0 && (took < 700*time.Millisecond || took > 1500*time.Millisecond):
					t.Errorf("silent rank 1: failed after %v, want at the drain's bound (750 ms)", took)
				}
			}
			fin, err := r.m.Done(ctx, id, DoneRequest{Rank: 1, OK: false, Wait: true, Error: "invocation failed"})
			if err != nil {
				t.Fatal(err)
			}
			if fin.State != "failed" || fin.Error == nil || fin.Error.Rank == nil || *fin.Error.Rank != 0 || fin.Draining != nil || fin.Error.Reason != CodeAbandoned {
				// Rank 0 cancelled its own call: reason abandoned.
				t.Fatalf("final status %q error %+v draining %+v, want failed naming rank 0, reason abandoned", fin.State, fin.Error, fin.Draining)
			}
			if n := aborts(); n != 3 {
				t.Errorf("%d ABORTs, want one per node (3)", n)
			}
			if x := testutil.ToFloat64(r.m.metrics.failed.WithLabelValues(CodeAbandoned)); x != 1 {
				t.Errorf("failed{abandoned} = %v, want 1", x)
			}
			// The log tells the drain's story: its start (whom it waits
			// for) and why it ended.
			logMu.Lock()
			all := strings.Join(logs, "\n")
			logMu.Unlock()
			wantLogs := []string{}
			if tc.wantDrain {
				wantLogs = append(wantLogs, "rank 0 failed locally after 2 invocations; waiting up to 750ms for ranks [1]")
				if tc.aliveLater > 0 {
					wantLogs = append(wantLogs, "drain ended: rank 1 reported 2 invocations")
				} else {
					wantLogs = append(wantLogs, "drain ended: 750ms passed without a report of as many invocations from ranks [1]")
				}
			}
			for _, w := range wantLogs {
				if !strings.Contains(all, w) {
					t.Errorf("AM log lacks %q:\n%s", w, all)
				}
			}
			if !tc.wantDrain && strings.Contains(all, "drain") {
				t.Errorf("AM log mentions a drain that did not happen:\n%s", all)
			}
		})
	}
}

// TestPersistentWindowBoundedByInvocation: a persistent operation's nodes
// get an element window of at most two calls (never below one frame of
// the densest stream, which STAGE requires), not the ordinary window: a
// 1-element persistent call reserved 8 MB of accumulator per switch, and a
// switch full of them refused the 130th. A call longer than half the
// ordinary window keeps that window.
func TestPersistentWindowBoundedByInvocation(t *testing.T) {
	budget := 1500 - parser.CWLen - parser.DataHdrLen
	fp32 := uint32((budget - parser.GroupDescLen) / 4)
	int8s := uint32(parser.MaxPacketElements(1500))
	const vec = 1 << 22
	for _, tc := range []struct {
		inv         uint32
		leaf, spine uint32
	}{
		{1, int8s, int8s},                // one frame's worth, not 2
		{8192, 16384, 16384},             // two calls
		{1 << 16, 64 * fp32, 64 * int8s}, // the ordinary window
	} {
		r := newRig(t, "spine-leaf", Config{})
		q := persistentReqs(9, 0, 0, "h1", "h2", "h3", "h4")
		for i := range q {
			q[i].VectorLen, q[i].InvocationLen = vec, tc.inv
		}
		res := r.beginAll(q)
		for i, x := range res {
			if x.err != nil {
				t.Fatalf("invocation %d: rank %d: %v", tc.inv, i, x.err)
			}
		}
		op := res[0].g.Op
		for n, want := range map[string]uint32{"l1": tc.leaf, "l2": tc.leaf, "s1": tc.spine} {
			if got := r.nodes[n].staged(op).rec.WindowElems; got != want {
				t.Errorf("invocation %d: %s staged %d window elements, want %d", tc.inv, n, got, want)
			}
		}
	}
}

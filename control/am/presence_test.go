package am

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/parser"
)

// presenceGrace is the rigs' Config.PresenceGrace.
const presenceGrace = 300 * time.Millisecond

// presenceRig is a rig whose Manager also serves the runtime channel over
// real HTTP, so that presence streams are real TCP connections that close
// as a dead process's do.
type presenceRig struct {
	*rig
	srv *httptest.Server
	cl  *Client
}

func newPresenceRig(t *testing.T, topo string, cfg Config) *presenceRig {
	t.Helper()
	cfg.PresenceGrace = presenceGrace
	r := newRig(t, topo, cfg)
	srv := httptest.NewUnstartedServer(r.m.Handler())
	srv.Config.ConnContext = ConnContext
	srv.Config.RegisterOnShutdown(r.m.StopStreams)
	srv.Start()
	t.Cleanup(func() {
		r.m.StopStreams() // httptest's Close waits for open requests
		srv.Close()
	})
	return &presenceRig{rig: r, srv: srv, cl: NewClient(srv.URL)}
}

// present opens q's rank's presence stream as its process would, until
// the returned cancel (the process dies: its connection closes).
func (p *presenceRig) present(t *testing.T, q BeginRequest) (cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	opened := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		ended <- p.cl.Presence(ctx, PresenceRequest{Job: q.Job, Group: q.Group, Rank: q.Rank, Size: q.Size, Node: q.Node, Session: q.Session}, func() { close(opened) }, nil)
	}()
	select {
	case <-opened:
	case err := <-ended:
		t.Fatalf("rank %d's presence: %v", q.Rank, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("rank %d's presence was not taken within 5 s", q.Rank)
	}
	// The AM registers the stream before it answers: nothing to wait for.
	return func() { stop(); <-ended }
}

// presentAll opens the presence of every process of q, the others' until
// the test ends; it returns the last one's kill.
func (p *presenceRig) presentAll(t *testing.T, q []BeginRequest) (kill func()) {
	t.Helper()
	for _, x := range q[:len(q)-1] {
		t.Cleanup(p.present(t, x))
	}
	return p.present(t, q[len(q)-1])
}

// waitGone waits until the AM holds q's process for gone.
func (p *presenceRig) waitGone(t *testing.T, q BeginRequest) {
	t.Helper()
	waitFor(t, func() bool {
		p.m.mu.Lock()
		defer p.m.mu.Unlock()
		x := p.m.pres.procs[presKey{q.Job, q.Group, q.Rank, q.Session}]
		return x != nil && x.gone
	})
}

// waitSeries scrapes series until it reads want, for up to 5 s, and
// returns what it read last: the AM counts a gone process after it has
// marked it gone and failed what waited for it, so a test that saw either
// may scrape a moment before the count.
func waitSeries(t *testing.T, m *Manager, series string, want float64) float64 {
	t.Helper()
	v := scrape(t, m)[series]
	for deadline := time.Now().Add(5 * time.Second); v != want && time.Now().Before(deadline); v = scrape(t, m)[series] {
		time.Sleep(5 * time.Millisecond)
	}
	return v
}

// leave sends q's process's goodbye (POST /v1/presence/leave).
func (p *presenceRig) leave(t *testing.T, q BeginRequest) {
	t.Helper()
	if err := p.cl.PresenceLeave(context.Background(), PresenceRequest{Job: q.Job, Group: q.Group, Rank: q.Rank, Size: q.Size, Node: q.Node, Session: q.Session}); err != nil {
		t.Fatal(err)
	}
}

// atSeq is q at seq.
func atSeq(q []BeginRequest, seq uint64) []BeginRequest {
	out := append([]BeginRequest(nil), q...)
	for i := range out {
		out[i].Seq = seq
	}
	return out
}

// waitGoneErr waits (5 s at most) for a Begin's result on got and checks
// it with goneErr.
func waitGoneErr(t *testing.T, who string, got <-chan result, rank int, frags ...string) {
	t.Helper()
	select {
	case x := <-got:
		goneErr(t, who, x.err, rank, frags...)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still waits 5 s after rank %d's process went", who, rank)
	}
}

// goneErr checks that err is rank_gone naming rank and every fragment.
func goneErr(t *testing.T, who string, err error, rank int, frags ...string) {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeRankGone || ae.Rank == nil || *ae.Rank != rank {
		t.Fatalf("%s: %v, want %s naming rank %d", who, err, CodeRankGone, rank)
	}
	for _, f := range frags {
		if !strings.Contains(ae.Message, f) {
			t.Fatalf("%s: %q does not say %q", who, ae.Message, f)
		}
	}
}

// TestRankGoneFailsBarrier: three ranks hold presence; ranks 0 and 1
// wait at seq 0 when rank 2's process dies (its stream's connection
// closes). Both calls fail within the grace and a second, naming rank 2
// and its node, instead of at the barrier timeout (30 s here). A new
// process of rank 2 (another session: the job run again) is not answered
// with the old failure.
func TestRankGoneFailsBarrier(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(21, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	p.grantAll(t, q) // seq 0 together: one run
	q = atSeq(q, 1)
	got0, got1 := p.beginAsync(q[0]), p.beginAsync(q[1])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 && p.waiting(q[1]) == 1 })
	start := time.Now()
	kill()
	for i, ch := range []<-chan result{got0, got1} {
		waitGoneErr(t, []string{"rank 0", "rank 1"}[i], ch, 2, "job 21 group 1 seq 1: rank 2 (h3) is gone: its process's connection to the AM closed at", "ranks [0 1] had arrived at this call")
	}
	if el := time.Since(start); el < presenceGrace || el > presenceGrace+time.Second {
		t.Errorf("the barrier failed %v after rank 2's connection closed, want after the grace (%v) and within a second of it", el, presenceGrace)
	}
	if v := waitSeries(t, p.m, `prismd_am_ranks_gone_total{effect="waited_for"}`, 1); v != 1 {
		t.Errorf(`prismd_am_ranks_gone_total{effect="waited_for"} = %v, want 1`, v)
	}
	// The job run again: rank 2's new process starts seq 0 afresh.
	again := q[2]
	again.Session = 33
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.m.Begin(ctx, again); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("rank 2's new process: %v, want it to wait for the new run's ranks", err)
	}
}

// TestRankGoneBeforeCall: rank 2's process is gone before the others make
// their next call: the first of them fails at arrival.
func TestRankGoneBeforeCall(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(22, 4, "reduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	p.grantAll(t, q)
	kill()
	p.waitGone(t, q[2])
	q = atSeq(q, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.m.Begin(ctx, q[1])
	goneErr(t, "rank 1", err, 2, "rank 2 (h3) is gone", "ranks [1] had arrived at this call")
	_, err = p.m.Begin(ctx, q[0])
	goneErr(t, "rank 0, arriving later", err, 2, "rank 2 (h3) is gone")
}

// TestPresenceAfterFirstCall: rank 2's stream opens only after its first
// call started (a library opens it in the background): the AM still
// counts it in that call's run, and its death fails the next call.
func TestPresenceAfterFirstCall(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(33, 0, "allreduce", "h1", "h2", "h3"), 1)
	for _, x := range q[:2] {
		t.Cleanup(p.present(t, x))
	}
	p.grantAll(t, q)
	kill := p.present(t, q[2])
	q = atSeq(q, 1)
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	kill()
	waitGoneErr(t, "rank 0", got0, 2, "seq 1: rank 2 (h3) is gone")
}

// TestRankGoneAtFirstCall: before any invocation of the job started (no
// run is known yet), a process that dies while the others wait at their
// first call (seq 0), having been present together with them, fails it.
func TestRankGoneAtFirstCall(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(27, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	kill()
	waitGoneErr(t, "rank 0", got0, 2, "seq 0: rank 2 (h3) is gone")
}

// TestPresenceBackWithinGrace: a stream that breaks and is opened again
// by the same process within the grace is not a dead rank: the barrier
// waits, and completes when rank 2 arrives.
func TestPresenceBackWithinGrace(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(23, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	p.grantAll(t, q)
	kill()
	defer p.present(t, q[2])()
	time.Sleep(2 * presenceGrace)
	for i, x := range p.beginAll(atSeq(q, 1)) {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
	}
}

// TestPresenceEarlierRunIgnored: processes of an earlier run of the job
// that die or close while a new run waits do not fail it. Run A's rank 1
// closes late and its rank 2 is killed while run B (new processes, new
// sessions) waits at its seq 0 and, after a call together, at seq 1.
func TestPresenceEarlierRunIgnored(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	a := withSessions(reqsFor(24, 0, "allreduce", "h1", "h2", "h3"), 1)
	var killA []func()
	for _, x := range a {
		killA = append(killA, p.present(t, x))
	}
	p.grantAll(t, a) // run A
	b := withSessions(reqsFor(24, 0, "allreduce", "h1", "h2", "h3"), 100)
	for _, x := range b {
		defer p.present(t, x)()
	}
	waitNot := func(what string, got <-chan result) {
		t.Helper()
		select {
		case x := <-got:
			t.Fatalf("%s: %v, %v; want it to wait for run B's own ranks", what, x.g, x.err)
		case <-time.After(3 * presenceGrace):
		}
	}
	got0 := p.beginAsync(b[0])
	p.leave(t, a[1])
	killA[1]() // a closed communicator ends its stream after the goodbye
	killA[2]()
	waitNot("run B's rank 0 at seq 0", got0)
	for i, x := range p.beginAll(b[1:]) {
		if x.err != nil {
			t.Fatalf("run B's rank %d: %v", i+1, x.err)
		}
	}
	if x := <-got0; x.err != nil {
		t.Fatalf("run B's rank 0: %v", x.err)
	}
	b = atSeq(b, 1)
	got0 = p.beginAsync(b[0])
	killA[0]()
	waitNot("run B's rank 0 at seq 1", got0)
	for i, x := range p.beginAll(b[1:]) {
		if x.err != nil {
			t.Fatalf("run B's rank %d at seq 1: %v", i+1, x.err)
		}
	}
	if x := <-got0; x.err != nil {
		t.Fatalf("run B's rank 0 at seq 1: %v", x.err)
	}
}

// TestRestartedRankDoesNotHideDeath: rank 2 is killed while the others
// wait at seq 1, and a new process of rank 2 (a restarted pod) opens its
// stream within the grace: the old process is still gone for its run.
func TestRestartedRankDoesNotHideDeath(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(28, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	p.grantAll(t, q)
	q = atSeq(q, 1)
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	kill()
	fresh := q[2]
	fresh.Session, fresh.Seq = 77, 0
	defer p.present(t, fresh)()
	waitGoneErr(t, "rank 0", got0, 2, "rank 2 (h3) is gone")
}

// TestPresenceLeave: rank 2 closes its communicator (POST
// /v1/presence/leave) while the others wait for it: they fail at once,
// told it left on purpose.
func TestPresenceLeave(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(25, 3, "allreduce", "h1", "h2", "h3"), 1)
	for _, x := range q {
		defer p.present(t, x)()
	}
	p.grantAll(t, q)
	q = atSeq(q, 4)
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	start := time.Now()
	p.leave(t, q[2])
	waitGoneErr(t, "rank 0", got0, 2, "rank 2 (h3) closed its communicator at", "every rank must make the same collective calls in the same order", "ranks [0] had arrived at this call")
	if el := time.Since(start); el > presenceGrace {
		t.Errorf("the barrier failed %v after the goodbye, want at once", el)
	}
}

// TestSelfDeclaredGone: rank 2's stream is lost while it lives (its
// connection dropped) and the others' call fails; when rank 2 then makes
// that call it is told that it was itself declared gone, not that some
// rank 2 died.
func TestSelfDeclaredGone(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(29, 0, "allreduce", "h1", "h2", "h3"), 1)
	lost := p.presentAll(t, q)
	p.grantAll(t, q)
	q = atSeq(q, 1)
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	lost()
	goneErr(t, "rank 0", (<-got0).err, 2, "rank 2 (h3) is gone")
	_, err := p.m.Begin(context.Background(), q[2])
	goneErr(t, "rank 2 itself", err, 2, "this rank (2, h3) was declared gone")
}

// TestGoneRankInDiagnosis: a granted operation fails after one of its
// ranks' process died, no node waiting for it: the AM's diagnosis says
// that process is gone.
func TestGoneRankInDiagnosis(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(26, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	grants := p.grantAll(t, q)
	kill()
	p.waitGone(t, q[2])
	p.m.mu.Lock()
	op := p.m.ops[grants[0].ID]
	p.m.mu.Unlock()
	p.m.failOp(op, "timeout", "")
	st, err := p.m.Op(grants[0].ID)
	if err != nil || st.Error == nil {
		t.Fatalf("status %+v, %v", st, err)
	}
	if !strings.Contains(st.Error.Message, "rank 2 (h3): its process's connection to the AM closed at") {
		t.Fatalf("diagnosis %q does not say rank 2's process is gone", st.Error.Message)
	}
	if strings.Contains(st.Error.Message, "rank 0 (h1): its process") || strings.Contains(st.Error.Message, "rank 1 (h2): its process") {
		t.Fatalf("diagnosis %q names a live rank's process", st.Error.Message)
	}
}

// TestGoneRankFailsWaitingOperation: rank 2's process dies while its
// leaf waits for its contribution: the operation fails within the grace,
// blaming rank 2, not at the contributors' timeout. An operation whose
// nodes wait for nobody (rank 2's part was in) is left to complete.
func TestGoneRankFailsWaitingOperation(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(30, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	grants := p.grantAll(t, q)
	p.m.mu.Lock()
	op := p.m.ops[grants[0].ID]
	p.m.mu.Unlock()
	l2 := p.nodes["l2"]
	l2.mu.Lock()
	l2.final, l2.missing, l2.missFrom = parser.StateActive, streamWhere(t, "l2", op.plan.nodes["l2"].owner, "rank 2 (h3)"), 0
	l2.mu.Unlock()
	// l1's least advanced stream is the live rank 0's.
	l1 := p.nodes["l1"]
	l1.mu.Lock()
	l1.final, l1.missing, l1.missFrom = parser.StateActive, streamWhere(t, "l1", op.plan.nodes["l1"].owner, "rank 0 (h1)"), 77
	l1.mu.Unlock()
	start := time.Now()
	kill()
	waitFor(t, func() bool {
		st, _ := p.m.Op(grants[0].ID)
		return st.State == "failed"
	})
	if el := time.Since(start); el > presenceGrace+2*time.Second {
		t.Errorf("the operation failed %v after rank 2's process died, want within the grace and a second", el)
	}
	st, _ := p.m.Op(grants[0].ID)
	if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 2 || !strings.Contains(st.Error.Message, "rank 2 (h3) is gone") {
		t.Fatalf("error %+v, want one blaming rank 2 (h3), gone", st.Error)
	}
	// The live rank 0 is not said to be waited for beside the dead one.
	if strings.Contains(st.Error.Message, "waiting for rank 0") ||
		!strings.Contains(st.Error.Message, "node l1 is ACTIVE (rank 0 (h1) was furthest behind there when asked, at element 77)") {
		t.Errorf("the diagnosis %q names live rank 0 as waited for, or does not say it was only furthest behind", st.Error.Message)
	}
	if strings.Count(st.Error.Message, "rank 2 (h3): its process's connection") != 0 {
		t.Errorf("the diagnosis says rank 2's process is gone twice: %q", st.Error.Message)
	}
	if v := scrape(t, p.m)[`prismd_am_operations_failed_total{reason="rank_gone"}`]; v != 1 {
		t.Errorf(`prismd_am_operations_failed_total{reason="rank_gone"} = %v, want 1`, v)
	}

	// Nobody waits for rank 2 in the next one: it is not failed.
	q2 := withSessions(reqsFor(31, 0, "allreduce", "h1", "h2", "h3"), 11)
	kill2 := p.presentAll(t, q2)
	g2 := p.grantAll(t, q2)
	l2.mu.Lock()
	l2.final = parser.StateComplete // rank 2's part is in
	l2.mu.Unlock()
	kill2()
	p.waitGone(t, q2[2])
	time.Sleep(500 * time.Millisecond)
	if st, _ := p.m.Op(g2[0].ID); st.State != "active" {
		t.Fatalf("an operation nobody waits in for rank 2: state %s (%+v), want active", st.State, st.Error)
	}
}

// TestBarrierTimeoutSaysPresence: a barrier timeout says, per missing
// rank, whether a process of it is connected (alive, not calling) or
// none ever connected.
func TestBarrierTimeoutSaysPresence(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 300 * time.Millisecond})
	q := withSessions(reqsFor(32, 0, "allreduce", "h1", "h2", "h3", "h4"), 1)
	defer p.presentAll(t, q[:3])()
	_, err := p.m.Begin(context.Background(), q[0])
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeBarrierTimeout {
		t.Fatalf("rank 0: %v, want barrier_timeout", err)
	}
	for _, want := range []string{"ranks [1 2 3] did not arrive", "; rank 1: a process on h2 is connected to the AM (since ",
		"; rank 2: a process on h3 is connected", "; rank 3: no process of it ever connected to this AM"} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("%q does not say %q", ae.Message, want)
		}
	}
}

// TestPresenceRefusals: a presence request that names no process is
// refused with the AM's error; something that is not an AM (no presence
// header) gives ErrNoPresence, so the library stops asking.
func TestPresenceRefusals(t *testing.T) {
	p := newPresenceRig(t, "single", Config{})
	for _, body := range []string{`{"job":1,"rank":0,"size":2,"session":5}`, `{"rank":0,"size":2,"node":"h1","session":5}`,
		`{"job":1,"rank":0,"size":2,"node":"h1","session":5} trailing`} {
		resp, err := http.Post(p.srv.URL+"/v1/presence", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: HTTP %d, want 400 (node and job are required; one JSON value only)", body, resp.StatusCode)
		}
	}
	err := p.cl.Presence(context.Background(), PresenceRequest{Job: 1, Rank: 0, Size: 2, Node: "h1"}, nil, nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "session 0") {
		t.Fatalf("session 0: %v, want bad_request naming the session", err)
	}
	err = p.cl.Presence(context.Background(), PresenceRequest{Job: 1, Rank: 2, Size: 2, Node: "h1", Session: 5}, nil, nil)
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "rank 2 is outside 0..1") {
		t.Fatalf("rank 2 of 2: %v, want bad_request naming the rank", err)
	}
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	if err := NewClient(busy.URL).Presence(context.Background(), PresenceRequest{Job: 1, Size: 1, Node: "h1", Session: 5}, nil, nil); errors.Is(err, ErrNoPresence) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a 503 in front of a restarting AM: %v, want ErrUnreachable (asked again), not ErrNoPresence", err)
	}
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	if err := NewClient(other.URL).Presence(context.Background(), PresenceRequest{Job: 1, Size: 1, Node: "h1", Session: 5}, nil, nil); !errors.Is(err, ErrNoPresence) {
		t.Fatalf("not an AM: %v, want ErrNoPresence", err)
	}
}

// TestPresenceAliveLines: the client hands the word and Operation ID of
// each "alive <id>" and "failed <id>" line of the stream to its callback,
// once per line, and nothing for beats, an empty ID, other words, or a
// line longer than its buffer (even one that starts like a request).
func TestPresenceAliveLines(t *testing.T) {
	long := PresenceAlive + strings.Repeat("9", 400)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(PresenceHeader, "1")
		w.WriteHeader(http.StatusOK)
		for _, l := range []string{"", PresenceAlive + "7-0-1-3-100", "", PresenceAlive, "hello 1-2-3-4-5", long, PresenceFailed + "7-0-1-5-100", PresenceAlive + "7-0-1-4-100", PresenceFailed} {
			w.Write([]byte(l + "\n"))
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	var got []string
	err := NewClient(srv.URL).Presence(context.Background(), PresenceRequest{Job: 1, Size: 1, Node: "h1", Session: 5}, nil,
		func(word, id string) { got = append(got, word+" "+id) })
	if err != nil {
		t.Fatalf("stream the AM closed: %v, want nil", err)
	}
	if want := []string{"alive 7-0-1-3-100", "failed 7-0-1-5-100", "alive 7-0-1-4-100"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("alive requests %q, want %q", got, want)
	}
}

// TestDrainAsksAndEndsByPresence: when a persistent operation starts to
// drain, every open presence stream of the waited-for rank's process (it
// may hold two while it replaces one it takes for dead) gets the line
// "alive <id>", and no other process's does. When that process is then
// gone, the drain ends at once (its report will not come), not at the
// drain's bound. After the operation ended, another process of the job
// going away counts as waited for by nobody.
func TestDrainAsksAndEndsByPresence(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{})
	for _, n := range p.nodes {
		n.final = parser.StateActive
	}
	q := withSessions(persistentReqs(60, 0, 20000, "h1", "h2", "h3"), 21) // drain bound 15 s
	// Rank 1's process holds two streams that collect request lines;
	// rank 2's one.
	type stream struct {
		lines chan string
		stop  func()
	}
	open := func(x BeginRequest) stream {
		ctx, cancel := context.WithCancel(context.Background())
		s := stream{lines: make(chan string, 8)}
		opened, ended := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(ended)
			p.cl.Presence(ctx, PresenceRequest{Job: x.Job, Group: x.Group, Rank: x.Rank, Size: x.Size, Node: x.Node, Session: x.Session},
				func() { close(opened) }, func(word, id string) { s.lines <- word + " " + id })
		}()
		<-opened
		s.stop = func() { cancel(); <-ended }
		return s
	}
	s1a, s1b, s2 := open(q[1]), open(q[1]), open(q[2])
	defer s2.stop()
	grants := p.grantAll(t, q)
	id := grants[0].ID
	if _, err := p.m.Alive(context.Background(), id, AliveRequest{Rank: 2, Invocations: 5}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	st, err := p.m.Done(context.Background(), id, DoneRequest{Rank: 0, OK: false, Local: true, Invocations: 5, Error: "invocation 6 was cancelled"})
	if err != nil || st.State != "draining" || st.Draining == nil || len(st.Draining.Waiting) != 1 || st.Draining.Waiting[0] != 1 {
		t.Fatalf("after rank 0's local failure: %+v %v, want draining for rank 1 only", st, err)
	}
	for i, s := range []stream{s1a, s1b} {
		select {
		case got := <-s.lines:
			if got != "alive "+id {
				t.Errorf("rank 1's stream %d asked for %q, want %q", i, got, "alive "+id)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("rank 1's stream %d got no alive request", i)
		}
	}
	select {
	case got := <-s2.lines:
		t.Errorf("rank 2, which reported its 5 invocations, was asked for %q", got)
	case <-time.After(200 * time.Millisecond):
	}
	// Rank 2's process hears of the failure on its stream (it may be
	// waiting for RESULT from a leaf the ABORT left silent).
	defer func() {
		select {
		case got := <-s2.lines:
			if got != "failed "+id {
				t.Errorf("rank 2's stream said %q after the failure, want %q", got, "failed "+id)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("rank 2's stream was not told of the failure")
		}
	}()
	// Rank 1's process dies: the drain ends within the presence grace.
	s1a.stop()
	s1b.stop()
	waitFor(t, func() bool {
		st, _ := p.m.Op(id)
		return st.State == "failed"
	})
	if el := time.Since(t0); el > presenceGrace+2*time.Second {
		t.Errorf("failed %v after the drain began with its waited-for rank gone, want within the grace (%v) and a bit, not the bound (15 s)", el, presenceGrace)
	}
	if st, _ := p.m.Op(id); st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 0 {
		t.Errorf("error %+v, want the failure to name rank 0, whose cancellation began it", st.Error)
	}
	before := scrape(t, p.m)[`prismd_am_ranks_gone_total{effect="none"}`]
	s2.stop() // rank 2 of the ended operation
	p.waitGone(t, q[2])
	if v := waitSeries(t, p.m, `prismd_am_ranks_gone_total{effect="none"}`, before+1); v != before+1 {
		t.Errorf(`ranks_gone_total{effect="none"} went %v -> %v when a rank of an ended operation went, want +1`, before, v)
	}
}

// TestGoneRankFailsRestingPersistent: a persistent operation whose ranks
// rest between invocations (no node waits for anyone) loses a rank's
// process: it can run no further invocation, so it fails at once,
// rank_gone naming that rank, and the other ranks' processes are told on
// their streams; a rank that freed it first (done ok) going away fails
// nothing.
func TestGoneRankFailsRestingPersistent(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{})
	for _, n := range p.nodes {
		n.final = parser.StateActive
	}
	q := withSessions(persistentReqs(61, 0, 20000, "h1", "h2", "h3"), 31)
	lines := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan struct{})
	go p.cl.Presence(ctx, PresenceRequest{Job: q[0].Job, Group: q[0].Group, Rank: 0, Size: 3, Node: q[0].Node, Session: q[0].Session},
		func() { close(opened) }, func(word, id string) { lines <- word + " " + id })
	<-opened
	t.Cleanup(p.present(t, q[1]))
	kill := p.present(t, q[2])
	grants := p.grantAll(t, q)
	id := grants[0].ID
	kill()
	t0 := time.Now()
	waitFor(t, func() bool {
		st, _ := p.m.Op(id)
		return st.State == "failed"
	})
	if el := time.Since(t0); el > presenceGrace+2*time.Second {
		t.Errorf("failed %v after rank 2's process died, want within the grace and a bit", el)
	}
	st, _ := p.m.Op(id)
	if st.Error == nil || st.Error.Rank == nil || *st.Error.Rank != 2 || !strings.Contains(st.Error.Message, "rank 2 (h3) is gone") || st.Error.Reason != CodeRankGone {
		t.Fatalf("error %+v, want one naming rank 2 (h3), gone, reason rank_gone", st.Error)
	}
	select {
	case got := <-lines:
		if got != "failed "+id {
			t.Errorf("rank 0's stream said %q, want %q", got, "failed "+id)
		}
	case <-time.After(3 * time.Second):
		t.Error("rank 0's process was not told of the failure")
	}
	// A rank that freed its persistent operation first is not waited for.
	q2 := withSessions(persistentReqs(62, 0, 20000, "h1", "h2", "h3"), 41)
	kill2 := p.presentAll(t, q2)
	g2 := p.grantAll(t, q2)
	if _, err := p.m.Done(context.Background(), g2[0].ID, DoneRequest{Rank: 2, OK: true}); err != nil {
		t.Fatal(err)
	}
	kill2()
	p.waitGone(t, q2[2])
	time.Sleep(300 * time.Millisecond)
	if st, _ := p.m.Op(g2[0].ID); st.State != "active" {
		t.Fatalf("a persistent operation whose gone rank had freed it: state %s (%+v), want active", st.State, st.Error)
	}
}

// TestGoneTwiceCountedOnce: a process said to be gone whose connection
// comes back and closes again (a healed link delivering the dead process's
// last queued request) is counted in ranks_gone_total once, and its second
// end is logged as such, not as a second death.
func TestGoneTwiceCountedOnce(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	cfg := Config{Logf: func(f string, a ...any) { mu.Lock(); logs = append(logs, fmt.Sprintf(f, a...)); mu.Unlock() }}
	p := newPresenceRig(t, "spine-leaf", cfg)
	q := withSessions(reqsFor(24, 0, "allreduce", "h1", "h2", "h3"), 1)
	kill := p.presentAll(t, q)
	kill()
	p.waitGone(t, q[2])
	p.present(t, q[2])() // back, and closed again at once
	time.Sleep(2 * presenceGrace)
	p.waitGone(t, q[2])
	total := testutil.ToFloat64(p.m.metrics.ranksGone.WithLabelValues("none")) + testutil.ToFloat64(p.m.metrics.ranksGone.WithLabelValues("waited_for"))
	if total != 1 {
		t.Errorf("ranks_gone_total %v, want 1: one process went", total)
	}
	mu.Lock()
	defer mu.Unlock()
	gone, again := 0, 0
	for _, l := range logs {
		if strings.Contains(l, "rank 2 (h3) is gone") {
			gone++
		}
		if strings.Contains(l, "rank 2 (h3): a connection of the process already said to be gone came back and closed again") {
			again++
		}
	}
	if gone != 1 || again != 1 {
		t.Errorf("log said 'is gone' %d times and 'came back' %d times, want 1 and 1:\n%s", gone, again, strings.Join(logs, "\n"))
	}
}

package am

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
	t.Cleanup(srv.Close)
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
		ended <- p.cl.Presence(ctx, PresenceRequest{Job: q.Job, Group: q.Group, Rank: q.Rank, Size: q.Size, Node: q.Node, Session: q.Session}, func() { close(opened) })
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

// waitGone waits until the AM holds k's rank for gone.
func (p *presenceRig) waitGone(t *testing.T, k presKey) {
	t.Helper()
	waitFor(t, func() bool {
		p.m.mu.Lock()
		defer p.m.mu.Unlock()
		x := p.m.presence[k]
		return x != nil && x.gone
	})
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
	for _, x := range q[:2] {
		defer p.present(t, x)()
	}
	kill := p.present(t, q[2])
	got0, got1 := p.beginAsync(q[0]), p.beginAsync(q[1])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 && p.waiting(q[1]) == 1 })
	start := time.Now()
	kill()
	for i, ch := range []<-chan result{got0, got1} {
		select {
		case x := <-ch:
			goneErr(t, []string{"rank 0", "rank 1"}[i], x.err, 2,
				"job 21 group 1 seq 0: rank 2 (h3) is gone: its process's connection to the AM closed at", "ranks [0 1] wait for it")
		case <-time.After(5 * time.Second):
			t.Fatalf("rank %d still waits 5 s after rank 2's process died", i)
		}
	}
	if el := time.Since(start); el < presenceGrace || el > presenceGrace+time.Second {
		t.Errorf("the barrier failed %v after rank 2's connection closed, want after the grace (%v) and within a second of it", el, presenceGrace)
	}
	if v := scrape(t, p.m)["prismd_am_ranks_gone_total"]; v != 1 {
		t.Errorf("prismd_am_ranks_gone_total = %v, want 1", v)
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
// their call: the first of them fails at arrival.
func TestRankGoneBeforeCall(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(22, 4, "reduce", "h1", "h2", "h3"), 1)
	for _, x := range q[:2] {
		defer p.present(t, x)()
	}
	p.present(t, q[2])()
	p.waitGone(t, presKey{22, 1, 2})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := p.m.Begin(ctx, q[1])
	goneErr(t, "rank 1", err, 2, "rank 2 (h3) is gone", "ranks [1] wait for it")
	_, err = p.m.Begin(ctx, q[0])
	goneErr(t, "rank 0, arriving later", err, 2, "rank 2 (h3) is gone")
}

// TestPresenceBackWithinGrace: a stream that breaks and is opened again
// by the same process within the grace is not a dead rank: the barrier
// waits, and completes when rank 2 arrives.
func TestPresenceBackWithinGrace(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(23, 0, "allreduce", "h1", "h2", "h3"), 1)
	for _, x := range q[:2] {
		defer p.present(t, x)()
	}
	p.present(t, q[2])()
	defer p.present(t, q[2])()
	time.Sleep(2 * presenceGrace)
	for i, x := range p.beginAll(q) {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i, x.err)
		}
	}
}

// TestPresenceEarlierRunIgnored: rank 2 of a first run of the job died;
// the job is run again (new processes, new sessions) and its ranks 0 and
// 1 arrive before the new rank 2 opened its stream: the old process's
// death says nothing about the new run, which waits for its rank 2.
func TestPresenceEarlierRunIgnored(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	old := withSessions(reqsFor(24, 0, "allreduce", "h1", "h2", "h3"), 1)
	p.present(t, old[2])()
	p.waitGone(t, presKey{24, 1, 2})
	q := withSessions(reqsFor(24, 0, "allreduce", "h1", "h2", "h3"), 100)
	for _, x := range q[:2] {
		defer p.present(t, x)()
	}
	got0 := p.beginAsync(q[0])
	select {
	case x := <-got0:
		t.Fatalf("rank 0 of the new run: %v, %v; want it to wait for the new rank 2", x.g, x.err)
	case <-time.After(3 * presenceGrace):
	}
	defer p.present(t, q[2])()
	res := p.beginAll(q[1:])
	for i, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", i+1, x.err)
		}
	}
	if x := <-got0; x.err != nil {
		t.Fatalf("rank 0: %v", x.err)
	}
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
	got0 := p.beginAsync(q[0])
	waitFor(t, func() bool { return p.waiting(q[0]) == 1 })
	start := time.Now()
	x := q[2]
	if err := p.cl.PresenceLeave(context.Background(), PresenceRequest{Job: x.Job, Group: x.Group, Rank: x.Rank, Size: x.Size, Node: x.Node, Session: x.Session}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got0:
		goneErr(t, "rank 0", r.err, 2, "rank 2 (h3) closed its communicator at", "every rank must make the same collective calls in the same order", "ranks [0] wait for it")
	case <-time.After(5 * time.Second):
		t.Fatal("rank 0 still waits 5 s after rank 2 closed its communicator")
	}
	if el := time.Since(start); el > presenceGrace {
		t.Errorf("the barrier failed %v after the goodbye, want at once", el)
	}
}

// TestGoneRankInDiagnosis: a granted operation fails after one of its
// ranks' process died: the AM's diagnosis says that process is gone.
func TestGoneRankInDiagnosis(t *testing.T) {
	p := newPresenceRig(t, "spine-leaf", Config{BarrierTimeout: 30 * time.Second})
	q := withSessions(reqsFor(26, 0, "allreduce", "h1", "h2", "h3"), 1)
	for _, x := range q[:2] {
		defer p.present(t, x)()
	}
	kill := p.present(t, q[2])
	grants := p.grantAll(t, q)
	kill()
	time.Sleep(presenceGrace + 100*time.Millisecond)
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
	if strings.Contains(st.Error.Message, "rank 0 (") || strings.Contains(st.Error.Message, "rank 1 (h2): its process") {
		t.Fatalf("diagnosis %q names a live rank's process", st.Error.Message)
	}
}

// TestPresenceRefusals: a presence request that names no process is
// refused with the AM's error; something that is not an AM (no presence
// header) gives ErrNoPresence, so the library stops asking.
func TestPresenceRefusals(t *testing.T) {
	p := newPresenceRig(t, "single", Config{})
	err := p.cl.Presence(context.Background(), PresenceRequest{Job: 1, Rank: 0, Size: 2, Node: "h1"}, nil)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "session 0") {
		t.Fatalf("session 0: %v, want bad_request naming the session", err)
	}
	err = p.cl.Presence(context.Background(), PresenceRequest{Job: 1, Rank: 2, Size: 2, Node: "h1", Session: 5}, nil)
	if !errors.As(err, &ae) || ae.Code != CodeBadRequest || !strings.Contains(ae.Message, "rank 2 is outside 0..1") {
		t.Fatalf("rank 2 of 2: %v, want bad_request naming the rank", err)
	}
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	if err := NewClient(other.URL).Presence(context.Background(), PresenceRequest{Job: 1, Size: 1, Node: "h1", Session: 5}, nil); !errors.Is(err, ErrNoPresence) {
		t.Fatalf("not an AM: %v, want ErrNoPresence", err)
	}
}

package host

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
)

// An AM that dies during a collective leaves that operation and the one it
// prepared for the job's next invocation installed on every switch (real
// control.Workers here). The job's ranks go on against a restarted AM at
// the same URL, which allocates the same Operation IDs under newer
// generations: every later collective must still be set up and exact,
// not refused with BAD_STATE until the switches expire the old contexts
// minutes later.
func TestAMRestartReusesHeldOperationIDs(t *testing.T) {
	f := newMemFabric(t, "spine-leaf")
	var cur atomic.Pointer[http.Handler]
	down := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "AM down", http.StatusServiceUnavailable)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*cur.Load()).ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	newAM := func() *am.Manager {
		m, err := am.New(am.Config{Topology: f.topo, Conn: f.attach("h1"), RTO: 10 * time.Millisecond,
			CtlTimeout: 3 * time.Second, Logf: t.Logf, DefaultTimeoutMS: 15000, Prepare: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		h := m.Handler()
		cur.Store(&h)
		return m
	}
	m1 := newAM()
	started := time.Now()

	const n = 300_000 // long enough to stop the AM while it runs
	hosts := []string{"h1", "h2", "h3", "h4"}
	rs := make([]*rankRun, len(hosts))
	for r, h := range hosts {
		rr := &rankRun{conn: f.attach(h), send: vecFor(40, r, n), recv: make([]float32, n)}
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(hosts), Iface: "mem0", Job: 40, Coordinator: srv.URL, Node: h}, rr.conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rr.comm = c
		rs[r] = rr
	}
	run := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, rr := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				clear(rr.recv)
				rr.err = rr.comm.AllReduce(ctx, rr.send, rr.recv, nil)
			}()
		}
		wg.Wait()
		checkExact(t, rs, "allreduce", 0)
	}

	// The first collective: stop AM 1 once it granted, with its operation
	// running and the next one prepared on the switches.
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !(hasState(m1, "active") && hasState(m1, "prepared")) {
		if time.Now().After(deadline) {
			t.Fatalf("AM 1 never had an active and a prepared operation: %+v", m1.Ops())
		}
		time.Sleep(time.Millisecond)
	}
	cur.Store(&down)
	m1.Close()
	<-done
	if hasState(m1, "released") {
		t.Log("AM 1 released its operation before it stopped: only the prepared one is left behind")
	}

	// AM 2 starts in a later second (its generations are newer) and serves
	// the job's next collectives.
	time.Sleep(time.Until(started.Truncate(time.Second).Add(1100 * time.Millisecond)))
	m2 := newAM()
	for i := 0; i < 3; i++ {
		run()
	}
	if x := counter(t, m2, "prismd_am_setup_retries_total", "older_generation_held"); x < 1 {
		t.Errorf("AM 2 retried no setup over an older generation (%v): the test did not meet a held operation", x)
	}
}

func hasState(m *am.Manager, state string) bool {
	for _, op := range m.Ops().Ops {
		if op.State == state {
			return true
		}
	}
	return false
}

// counter reads m's counter name{cause=label} from its Prometheus registry.
func counter(t *testing.T, m *am.Manager, name, label string) float64 {
	t.Helper()
	mfs, err := m.MetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetValue() == label {
					return x.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s} in the AM's registry", name, label)
	return 0
}

package host

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/internal/testlog"
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
	ra := newRestartableAM(t, f, true)
	srv := ra.srv
	newAM := ra.start
	m1 := newAM()
	started := time.Now()

	const n = 300_000 // long enough to stop the AM while it runs
	hosts := []string{"h1", "h2", "h3", "h4"}
	// Ranks that keep no shape persistent: every call asks the AM, which
	// prepares the next. (The library's default runs a shape's repeats as
	// a persistent collective and tells the AM so: nothing is prepared.)
	rs := openRanksShapes(t, f, srv.URL, 40, n, hosts, -1)
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
	ra.stop(m1)
	<-done
	if hasState(m1, "released") {
		t.Log("AM 1 released its operation before it stopped: only the prepared one is left behind")
	}

	// AM 2 starts in a later second (its generations are newer) and serves
	// the job's next collectives.
	nextSecond(started)
	m2 := newAM()
	for range 3 {
		run()
	}
	if x := counter(t, m2, "prismd_am_setup_retries_total", "older_generation_held"); x < 1 {
		t.Errorf("AM 2 retried no setup over an older generation (%v): the test did not meet a held operation", x)
	}
	// The first collective's done reports reached AM 2, which never heard
	// of its operation: the results are whole, so Close has nothing to
	// report.
	for r, rr := range rs {
		if err := rr.comm.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", r, err)
		}
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

// restartableAM serves an AM at one URL across restarts, as a lab host's
// address stays while 'prismctl am' is restarted on it.
type restartableAM struct {
	t       *testing.T
	f       *memFabric
	prepare bool
	cur     atomic.Pointer[http.Handler]
	srv     *httptest.Server
}

func newRestartableAM(t *testing.T, f *memFabric, prepare bool) *restartableAM {
	ra := &restartableAM{t: t, f: f, prepare: prepare}
	ra.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// While no AM runs a request waits, as a client retrying a
		// refused connection does, and goes to the next AM.
		for ra.cur.Load() == nil {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
		(*ra.cur.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(ra.srv.Close)
	return ra
}

// start runs a new AM on h1 behind the URL.
func (ra *restartableAM) start() *am.Manager {
	m, err := am.New(am.Config{Topology: ra.f.topo, Conn: ra.f.attach("h1"), RTO: 10 * time.Millisecond,
		CtlTimeout: 3 * time.Second, Logf: testlog.Until(ra.t), DefaultTimeoutMS: 15000, Prepare: ra.prepare})
	if err != nil {
		ra.t.Fatal(err)
	}
	ra.t.Cleanup(func() { m.Close() })
	h := m.Handler()
	ra.cur.Store(&h)
	return m
}

// stop takes m off the URL and stops it as a killed AM stops: whatever it
// installed on the switches stays there.
func (ra *restartableAM) stop(m *am.Manager) {
	ra.cur.Store(nil)
	m.Close()
}

// nextSecond sleeps until the Unix second after since's, so that an AM
// started then allocates newer generations than one started at since.
func nextSecond(since time.Time) {
	time.Sleep(time.Until(since.Truncate(time.Second).Add(1100 * time.Millisecond)))
}

// A persistent collective runs on through an AM restart (its invocations
// need no AM), and its ranks' keepalives reach the new AM, which has never
// heard of it. The new AM must keep that Operation ID out of the job's new
// ordinary collectives: reusing it, its setup would meet the installed
// persistent context and its rollback would ABORT it under the ranks.
func TestAMRestartSparesLivePersistent(t *testing.T) {
	f := newMemFabric(t, "spine-leaf")
	ra := newRestartableAM(t, f, false)
	m1 := ra.start()
	started := time.Now()
	const n = 3000
	hosts := []string{"h1", "h2", "h3", "h4"}
	rs := openRanks(t, f, ra.srv.URL, 60, n, hosts)
	ps := make([]*Persistent, len(hosts))
	each := func(what string, f func(r int, rr *rankRun) error) {
		t.Helper()
		var wg sync.WaitGroup
		for r, rr := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				clear(rr.recv)
				rr.err = f(r, rr)
			}()
		}
		wg.Wait()
		for r, rr := range rs {
			if rr.err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, rr.err)
			}
		}
		checkExact(t, rs, "allreduce", 0)
	}
	ctx := context.Background()
	// A 1 s timeout: keepalives every 500 ms.
	each("persistent init and run", func(r int, rr *rankRun) error {
		p, err := rr.comm.AllReduceInit(rr.send, rr.recv, &Options{Timeout: time.Second})
		if err != nil {
			return err
		}
		ps[r] = p
		t.Cleanup(func() { p.Close() })
		return p.Run(ctx)
	})
	ra.stop(m1)
	nextSecond(started)
	m2 := ra.start()
	time.Sleep(1200 * time.Millisecond) // keepalives reach the new AM
	for i := range 3 {
		each(fmt.Sprintf("ordinary collective %d on the new AM", i), func(r int, rr *rankRun) error {
			return rr.comm.AllReduce(ctx, rr.send, rr.recv, nil)
		})
		each(fmt.Sprintf("persistent invocation after ordinary collective %d", i), func(r int, rr *rankRun) error {
			return ps[r].Run(ctx)
		})
	}
	if x := counter(t, m2, "prismd_am_setup_retries_total", "older_generation_held"); x != 0 {
		t.Errorf("the new AM set up over an older generation %v times: it reused the persistent operation's ID", x)
	}
}

// openRanks opens one communicator of job per host, rank r on hosts[r],
// coordinated at url, each with its vecFor(job, r, n) to send.
func openRanks(t *testing.T, f *memFabric, url string, job uint64, n int, hosts []string) []*rankRun {
	t.Helper()
	return openRanksShapes(t, f, url, job, n, hosts, 0)
}

// openRanksShapes is openRanks with Config.PersistentShapes set to shapes.
func openRanksShapes(t *testing.T, f *memFabric, url string, job uint64, n int, hosts []string, shapes int) []*rankRun {
	t.Helper()
	rs := make([]*rankRun, len(hosts))
	for r, h := range hosts {
		rr := &rankRun{conn: f.attach(h), send: vecFor(job, r, n), recv: make([]float32, n)}
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(hosts), Iface: "mem0", Job: job, Coordinator: url, Node: h,
			PersistentShapes: shapes}, rr.conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rr.comm, rs[r] = c, rr
	}
	return rs
}

package host

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// persistentRanks creates one persistent collective per rank on a Comm
// each; fill(r, inv) returns rank r's input for invocation inv.
type persistentRanks struct {
	comms []*Comm
	ps    []*Persistent
	send  [][]float32
	recv  [][]float32
	conns []*memConn
}

func newPersistentRanks(t *testing.T, f *memFabric, url string, job uint64, hosts []string, coll string, root, n int, opts *Options) *persistentRanks {
	t.Helper()
	pr := &persistentRanks{}
	for r, h := range hosts {
		conn := f.attach(h)
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(hosts), Iface: "mem0", Job: job, Coordinator: url, Node: h}, conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		send, recv := make([]float32, n), make([]float32, n)
		var p *Persistent
		if coll == "allreduce" {
			p, err = c.AllReduceInit(send, recv, opts)
		} else {
			p, err = c.ReduceInit(send, recv, root, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		pr.comms, pr.ps, pr.send, pr.recv, pr.conns = append(pr.comms, c), append(pr.ps, p), append(pr.send, send), append(pr.recv, recv), append(pr.conns, conn)
	}
	return pr
}

// invoke fills every rank's send with its input for invocation inv and
// runs one invocation on every rank at once; it returns each rank's error
// and stats.
func (pr *persistentRanks) invoke(inv int, opts *Options, skip map[int]bool) ([]error, []Stats) {
	errs, sts := make([]error, len(pr.ps)), make([]Stats, len(pr.ps))
	var wg sync.WaitGroup
	for r, p := range pr.ps {
		if skip[r] {
			continue
		}
		copy(pr.send[r], vecFor(uint64(1000+inv), r, len(pr.send[r])))
		if opts != nil && opts.Acc == "fp32" {
			for i := range pr.send[r] {
				pr.send[r][i] = float32(int(pr.send[r][i]) % 4096)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			q := p.Start(ctx)
			errs[r] = q.Wait()
			sts[r] = q.Stats()
		}()
	}
	wg.Wait()
	return errs, sts
}

// check compares every receiving rank's recv with the exact sum.
func (pr *persistentRanks) check(t *testing.T, inv int, coll string, root int, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("invocation %d rank %d: %v", inv, r, err)
		}
	}
	for r := range pr.recv {
		if coll == "reduce" && r != root {
			continue
		}
		for i := range pr.recv[r] {
			if want := exactF32(pr.send, i); math.Float32bits(want) != math.Float32bits(pr.recv[r][i]) {
				t.Fatalf("invocation %d rank %d element %d: got %g, want %g", inv, r, i, pr.recv[r][i], want)
			}
		}
	}
}

// renewEvery makes persistent collectives renew their operation after k
// invocations for the rest of the test.
func renewEvery(t *testing.T, k uint32) {
	old := maxInvocations
	maxInvocations = k
	t.Cleanup(func() { maxInvocations = old })
}

// waitReleased waits up to 5 s for job's one operation to be released
// without error on the AM, and returns the job's operations.
func waitReleased(t *testing.T, url string, job uint64) []am.OpStatus {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ops := opsOfJob(t, url, job)
		if len(ops) == 1 && ops[0].State == "released" && ops[0].Error == nil {
			return ops
		}
		if time.Now().After(end) {
			t.Fatalf("job %d on the AM: %+v, want its one persistent operation released", job, ops)
		}
	}
}

// opsOfJob returns the AM's operations of job.
func opsOfJob(t *testing.T, url string, job uint64) []am.OpStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := am.NewClient(url).Ops(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []am.OpStatus
	for _, o := range l.Ops {
		if o.Op.Job == job {
			out = append(out, o)
		}
	}
	return out
}

// TestPersistentCollectivesExact: many invocations with new inputs each time
// through a tree, every result exact, one operation granted for all of them
// (no setup after the first), and Close releases it on the AM.
func TestPersistentCollectivesExact(t *testing.T) {
	cases := []struct {
		topo  string
		hosts []string
		coll  string
		root  int
		acc   string
		n     int
	}{
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, "kulisch", 100},
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "reduce", 2, "kulisch", 700},
		{"fat-tree", []string{"h1", "h3", "h6", "h8"}, "allreduce", 0, "fp32", 2},
	}
	for ci, tc := range cases {
		t.Run(tc.topo+"-"+tc.coll+"-"+tc.acc, func(t *testing.T) {
			f := newMemFabric(t, tc.topo)
			url := f.startAM(tc.hosts[0])
			job := uint64(60 + ci)
			opts := &Options{Acc: tc.acc}
			pr := newPersistentRanks(t, f, url, job, tc.hosts, tc.coll, tc.root, tc.n, opts)
			const invocations = 25
			for inv := range invocations {
				errs, sts := pr.invoke(inv, opts, nil)
				pr.check(t, inv, tc.coll, tc.root, errs)
				wantFrames := uint64((tc.n + 362) / 363) // FP32 values per MTU-1500 frame
				for r, st := range sts {
					if (st.Setup > 0) != (inv == 0) {
						t.Fatalf("invocation %d rank %d: setup %v (only the first invocation asks the AM)", inv, r, st.Setup)
					}
					if st.Frames != wantFrames {
						t.Fatalf("invocation %d rank %d: %d DATA frames counted, want this invocation's %d", inv, r, st.Frames, wantFrames)
					}
					// The wire bytes, against the frames this invocation's
					// vector makes: its DATA out, the RESULT in (the same
					// frames here: FP32 out, repacketized alike) where this
					// rank gets one, PROGRESS on top (a few dozen bytes
					// each: never a second vector's worth).
					data := uint64(0)
					for left := tc.n; left > 0; left -= 363 {
						data += uint64(parser.DataBodyOff + parser.GroupDescLen + 4*min(left, 363))
					}
					gets := tc.coll == "allreduce" || r == tc.root
					if st.WireSent < data || st.WireSent >= 2*data {
						t.Fatalf("invocation %d rank %d: %d bytes sent, want its %d bytes of DATA plus PROGRESS", inv, r, st.WireSent, data)
					}
					if gets && (st.WireReceived < data || st.WireReceived >= 2*data) || !gets && st.WireReceived >= data {
						t.Fatalf("invocation %d rank %d (%s, root %d): %d bytes received, RESULT would be %d", inv, r, tc.coll, tc.root, st.WireReceived, data)
					}
				}
			}
			ops := opsOfJob(t, url, job)
			if len(ops) != 1 || !ops[0].Persistent || ops[0].State != "active" {
				t.Fatalf("AM operations of the job: %+v, want one active persistent operation", ops)
			}
			for _, p := range pr.ps {
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range pr.comms {
				if err := c.Close(); err != nil {
					t.Fatalf("Comm.Close: %v", err)
				}
			}
			// Every rank's done report went out with Comm.Close; the AM
			// then ABORTs every switch's context.
			ops = waitReleased(t, url, job)
			for _, n := range ops[0].Nodes {
				if n.State != "ABORTED" {
					t.Fatalf("after Close: node %s is %s, want ABORTED (context removed)", n.Name, n.State)
				}
			}
			if err := pr.ps[0].Run(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Run after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestPersistentRenewsAndRests: with K = 3 invocations per operation every
// rank sets up a new one at the same invocation, and a pause of several
// operation timeouts between invocations neither fails the switches'
// contexts (the ranks rest at PUSH) nor the AM's (keepalives).
func TestPersistentRenewsAndRests(t *testing.T) {
	renewEvery(t, 3)
	f := newMemFabric(t, "spine-leaf")
	url := f.startAM("h1")
	opts := &Options{Timeout: 300 * time.Millisecond}
	pr := newPersistentRanks(t, f, url, 70, []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, 50, opts)
	for inv := range 8 {
		if inv == 5 || inv == 7 {
			// 5 timeouts of rest, after an invocation in which ranks
			// arrived at different times (so some waited for others).
			time.Sleep(1500 * time.Millisecond)
		}
		errs, _ := pr.invoke(inv, opts, nil)
		pr.check(t, inv, "allreduce", 0, errs)
	}
	ops := opsOfJob(t, url, 70)
	if len(ops) != 3 {
		t.Fatalf("%d operations for 8 invocations of 3 per operation, want 3: %+v", len(ops), ops)
	}
	for _, o := range ops {
		if o.Error != nil {
			t.Fatalf("operation %s: %v", o.ID, o.Error)
		}
	}
}

// TestPersistentDeadRankNamed: a rank that dies while the others start the
// next invocation fails it within about the timeout, and the error names
// the silent rank.
func TestPersistentDeadRankNamed(t *testing.T) {
	f := newMemFabric(t, "spine-leaf")
	url := f.startAM("h1")
	opts := &Options{Timeout: 500 * time.Millisecond}
	pr := newPersistentRanks(t, f, url, 71, []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, 300, opts)
	for inv := range 2 {
		errs, _ := pr.invoke(inv, opts, nil)
		pr.check(t, inv, "allreduce", 0, errs)
	}
	pr.conns[3].mu.Lock()
	pr.conns[3].dead = true // its frames vanish from now on
	pr.conns[3].mu.Unlock()
	start := time.Now()
	errs, _ := pr.invoke(2, opts, map[int]bool{3: true})
	el := time.Since(start)
	for r := range 3 {
		var oe *OpError
		if errs[r] == nil || !errors.As(errs[r], &oe) || oe.Invocation != 3 ||
			!strings.Contains(oe.Diagnosis, "rank 3 (h4) stopped contributing") || !strings.Contains(oe.Diagnosis, "timed out on rank 3 (h4) from element 0 of invocation 3 (600 in the operation)") {
			t.Errorf("rank %d: %v; want invocation 3 failed, the AM naming rank 3 (h4) missing from its first element (600 in the operation)", r, errs[r])
		}
		if errs[r] != nil && strings.Contains(oe.Diagnosis, "waiting for stream") {
			t.Errorf("rank %d: the diagnosis names a stream by number only: %v", r, errs[r])
		}
		for _, other := range []string{"rank 0 (h1)", "rank 1 (h2)", "rank 2 (h3)"} {
			if errs[r] != nil && strings.Contains(oe.Diagnosis, "timed out on "+other) {
				t.Errorf("rank %d: the diagnosis blames %s, which ran every invocation: %v", r, other, errs[r])
			}
		}
		t.Logf("rank %d: %v", r, errs[r])
	}
	if el > 10*time.Second {
		t.Errorf("the failure took %v", el)
	}
	if err := pr.ps[0].Run(context.Background()); err == nil || !strings.Contains(err.Error(), "rank 3 (h4)") {
		t.Fatalf("Run after the failure: %v, want the same error", err)
	}
}

// TestPersistentCancelled: a Start whose context is already cancelled, or
// is cancelled while the invocation waits for the other rank, returns the
// cancellation at once, and the persistent collective stays failed.
func TestPersistentCancelled(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	for i, delay := range []time.Duration{0, 50 * time.Millisecond} {
		pr := newPersistentRanks(t, f, url, uint64(72+i), []string{"h1", "h2"}, "allreduce", 0, 10, nil)
		errs, _ := pr.invoke(0, nil, nil)
		pr.check(t, 0, "allreduce", 0, errs)
		p := pr.ps[0]
		ctx, cancel := context.WithCancel(context.Background())
		if delay == 0 {
			cancel()
		} else {
			time.AfterFunc(delay, cancel) // rank 1 never starts: the invocation waits
		}
		start := time.Now()
		err := p.Run(ctx)
		if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
			t.Fatalf("cancelled after %v: %v after %v, want context.Canceled at once", delay, err, time.Since(start))
		}
		// Later Runs fail, but their own context was not cancelled:
		// ErrEarlierCancelled, not context.Canceled.
		if err2 := p.Run(context.Background()); err2 == nil || errors.Is(err2, context.Canceled) || !errors.Is(err2, ErrEarlierCancelled) {
			t.Fatalf("Run after a cancelled invocation: %v, want ErrEarlierCancelled and not context.Canceled", err2)
		}
		cancel()
	}
}

// TestPersistentBusy: while rank 0's invocation waits (rank 1 has not
// started its own), a second Start and a Close on rank 0 fail at once
// with ErrBusy and change nothing: once rank 1 starts, the invocation
// completes exact, and Close then frees the collective.
func TestPersistentBusy(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	pr := newPersistentRanks(t, f, url, 74, []string{"h1", "h2"}, "allreduce", 0, 10, nil)
	errs, _ := pr.invoke(0, nil, nil)
	pr.check(t, 0, "allreduce", 0, errs)
	p := pr.ps[0]
	q := p.Start(context.Background())
	time.Sleep(50 * time.Millisecond)
	if err := p.Start(context.Background()).Wait(); !errors.Is(err, ErrBusy) {
		t.Errorf("a second Start while an invocation runs: %v, want ErrBusy", err)
	}
	if err := p.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close while an invocation runs: %v, want ErrBusy", err)
	}
	if err := pr.ps[1].Run(context.Background()); err != nil {
		t.Fatalf("rank 1's invocation: %v", err)
	}
	if err := q.Wait(); err != nil {
		t.Fatalf("rank 0's waiting invocation after the refused calls: %v", err)
	}
	pr.check(t, 1, "allreduce", 0, []error{nil, nil}) // the same inputs again: exact
	for r, x := range pr.ps {
		if err := x.Close(); err != nil {
			t.Errorf("rank %d Close after the invocation: %v", r, err)
		}
	}
}

// TestPersistentFreedByCommClose: a persistent collective the application
// leaves open is freed when its Comm closes: every rank's done report
// reaches the AM, which releases the switches' contexts (and no keepalive
// would keep them alive).
func TestPersistentFreedByCommClose(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	pr := newPersistentRanks(t, f, url, 74, []string{"h1", "h2"}, "allreduce", 0, 10, nil)
	for inv := range 3 {
		errs, _ := pr.invoke(inv, nil, nil)
		pr.check(t, inv, "allreduce", 0, errs)
	}
	for _, c := range pr.comms {
		if err := c.Close(); err != nil {
			t.Fatalf("Comm.Close: %v", err)
		}
	}
	waitReleased(t, url, 74)
	if err := pr.ps[0].Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Comm.Close: %v, want ErrClosed", err)
	}
}

// TestPersistentInvocationNumbered: an error names the invocation counted
// over the whole persistent collective, across its renewals.
func TestPersistentInvocationNumbered(t *testing.T) {
	renewEvery(t, 3)
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	pr := newPersistentRanks(t, f, url, 75, []string{"h1", "h2"}, "allreduce", 0, 10, nil)
	for inv := range 4 {
		errs, _ := pr.invoke(inv, nil, nil)
		pr.check(t, inv, "allreduce", 0, errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var oe *OpError
	if err := pr.ps[0].Run(ctx); !errors.As(err, &oe) || oe.Invocation != 5 || !strings.Contains(err.Error(), "invocation 5 ") {
		t.Fatalf("the 5th invocation (2nd of the 2nd operation), cancelled: %v; want it named invocation 5", err)
	}
}

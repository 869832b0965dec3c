package bitmap

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

func mcastPlan(t *testing.T, topo *deploy.Topology, src string, size int64, noAgg bool) *bitmapam.Plan {
	t.Helper()
	var recv []bitmapam.Endpoint
	for i, h := range topo.Hosts() {
		if h != src {
			recv = append(recv, bitmapam.Endpoint{ID: i, Host: h})
		}
	}
	p, err := bitmapam.Compute(topo, bitmapam.JobSpec{Kind: bitmapam.Multicast, Op: parser.OpKey{Job: 12, Group: 1, GroupGen: 1, Op: 1, OpGen: 1},
		Tenant: 9, Endpoints: recv, Root: src, VectorLen: McastVectorLen(size), TimeoutMS: 100, NoAggregation: noAgg})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type mcastRun struct {
	took  time.Duration // SendFile's
	st    McastStats
	err   error
	rerrs map[string]error
	rst   map[string]RecvStats
}

func runMcast(t *testing.T, topo *deploy.Topology, p *bitmapam.Plan, f *fabric, data []byte, skip string) *mcastRun {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &mcastRun{rerrs: map[string]error{}, rst: map[string]RecvStats{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	opts := &McastOptions{Linger: 500 * time.Millisecond}
	for _, e := range p.Spec.Endpoints {
		if e.Host == skip {
			continue
		}
		port := f.newPort(e.Host)
		t.Cleanup(func() { port.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := filepath.Join(dir, e.Host+".bin")
			m, st, err := ReceiveFile(ctx, port, ReceiverConfig{Job: p.Spec.Op.Job, Endpoint: e.ID, Tenant: p.Spec.Tenant}, out, opts)
			if err == nil {
				got, rerr := os.ReadFile(out)
				if rerr != nil || !bytes.Equal(got, data) || m.Size != int64(len(data)) {
					t.Errorf("%s: file differs from the source (%d bytes, manifest %+v)", e.Host, len(got), m)
				}
			}
			mu.Lock()
			r.rerrs[e.Host], r.rst[e.Host] = err, st
			mu.Unlock()
		}()
	}
	port := f.newPort(p.Ops[0].Root)
	t.Cleanup(func() { port.Close() })
	// Receivers subscribe when their goroutine runs: a manifest sent
	// before that is a loss (repaired, but it would count a second ACK).
	time.Sleep(100 * time.Millisecond)
	fh, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	start := time.Now()
	r.st, r.err = SendFile(ctx, port, p, fh, int64(len(data)), "src.bin", opts)
	r.took = time.Since(start)
	if r.err != nil {
		cancel()
	}
	wg.Wait()
	return r
}

func randomFile(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 5))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestMulticastAckAggregation(t *testing.T) {
	for _, tc := range []struct {
		topo, src string
		noAgg     bool
	}{
		{"spine-leaf", "h1", false},
		{"spine-leaf", "h1", true},
		{"fat-tree", "h3", false},
		{"fat-tree", "h3", true},
	} {
		name := tc.topo + "-aggregated"
		if tc.noAgg {
			name = tc.topo + "-no-aggregation"
		}
		t.Run(name, func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			data := randomFile(150000, 1)
			p := mcastPlan(t, topo, tc.src, int64(len(data)), tc.noAgg)
			f := newFabric(t, topo, p, 0, 0, 1)
			r := runMcast(t, topo, p, f, data, "")
			if r.err != nil {
				t.Fatal(r.err)
			}
			for h, err := range r.rerrs {
				if err != nil {
					t.Errorf("%s: %v", h, err)
				}
			}
			n := len(p.Spec.Endpoints)
			want := 1
			if tc.noAgg {
				want = n
			}
			for w, a := range r.st.AcksPerWindow {
				if a != want {
					t.Errorf("window %d: %d ACKs at the source, want %d (%d receivers)", w, a, want, n)
				}
			}
			t.Logf("%d receivers, %d windows, ACK frames at the source: %d (%.2f per window), repairs %d",
				n, r.st.Windows+1, r.st.AckFrames, float64(r.st.AckFrames)/float64(r.st.Windows+1), r.st.Repairs)
		})
	}
}

func TestMulticastLossDup(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	data := randomFile(300000, 2)
	p := mcastPlan(t, topo, "h1", int64(len(data)), false)
	f := newFabric(t, topo, p, 0.01, 0.01, 9)
	r := runMcast(t, topo, p, f, data, "")
	if r.err != nil {
		t.Fatal(r.err)
	}
	for h, err := range r.rerrs {
		if err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	f.close() // the counters belong to the fabric goroutine
	installs := 0
	for _, s := range f.sw {
		installs += s.installs
	}
	t.Logf("1%% loss + dup: %d dropped, %d repairs (%d frames), %d PARTIAL ACKs, %d C-BM installs by repairs, receivers %+v",
		f.dropped, r.st.Repairs, r.st.RepairFrames, r.st.Partials, installs, r.rst)
	if f.dropped == 0 {
		t.Error("nothing dropped: the test did not exercise loss")
	}
}

// TestMulticastDeadReceiver: h4 never runs; the source repairs to exactly
// {h4} and fails naming it, the others still verify their copy.
func TestMulticastDeadReceiver(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	data := randomFile(20000, 3)
	p := mcastPlan(t, topo, "h1", int64(len(data)), false)
	f := newFabric(t, topo, p, 0, 0, 1)
	r := runMcast(t, topo, p, f, data, "h4")
	var me *MissingError
	if r.err == nil || !asMissing(r.err, &me) || len(me.Hosts) != 1 || me.Hosts[0] != "h4" {
		t.Fatalf("source: got %v, want a MissingError naming h4", r.err)
	}
	t.Logf("source: %v", r.err)
}

func asMissing(err error, me **MissingError) bool {
	for e := err; e != nil; {
		if m, ok := e.(*MissingError); ok {
			*me = m
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// TestMulticastOrderedRepair: one data frame of window 3 to h4 is lost.
// Window 4, sent after it, completes first, which on FIFO paths proves the
// loss: the source repairs window 3 at once instead of waiting for the
// switches' PARTIAL ACK or its own timeout. Fake and engine switches.
func TestMulticastOrderedRepair(t *testing.T) {
	for _, engine := range []bool{false, true} {
		t.Run(fmt.Sprint("engine=", engine), func(t *testing.T) {
			topo := loadTopo(t, "spine-leaf")
			data := randomFile(150000, 4)
			p := mcastPlan(t, topo, "h1", int64(len(data)), false)
			f := newFabricWith(t, topo, p, 0, 0, 1, engine)
			lost := false
			f.mu.Lock()
			f.drop = func(node string, fr []byte) bool {
				var d parser.Data
				if lost || node != "l2" || d.Decode(fr, parser.Limits{}) != nil || d.Class != parser.ClassResult ||
					d.Ext.Token != 3 || [6]byte(fr[0:6]) != topo.MAC("h4", "eth0") {
					return false
				}
				lost = true
				return true
			}
			f.mu.Unlock()
			r := runMcast(t, topo, p, f, data, "")
			took := r.took
			if r.err != nil {
				t.Fatal(r.err)
			}
			for h, err := range r.rerrs {
				if err != nil {
					t.Errorf("%s: %v", h, err)
				}
			}
			f.mu.Lock()
			dropped := lost
			f.mu.Unlock()
			if !dropped {
				t.Fatal("the frame was never dropped: the case did not run")
			}
			// Every repair came from the send order: none waited for the
			// switches' PARTIAL ACK or the source's timeout (timing bounds
			// would flake on a loaded machine; the counts do not).
			if r.st.Inferred == 0 || r.st.Repairs != r.st.Inferred {
				t.Errorf("%d repairs, %d inferred from send order: the loss waited for a PARTIAL or a timeout (stats %+v)", r.st.Repairs, r.st.Inferred, r.st)
			}
			t.Logf("%v; %d repairs (%d inferred), %d PARTIAL ACKs", took, r.st.Repairs, r.st.Inferred, r.st.Partials)
		})
	}
}

// TestMulticastWindowGrows: without loss the window of outstanding windows
// grows from Outstanding toward MaxOutstanding and never past it.
func TestMulticastWindowGrows(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	data := randomFile(600000, 5)
	p := mcastPlan(t, topo, "h1", int64(len(data)), false)
	f := newFabric(t, topo, p, 0, 0, 1)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range p.Spec.Endpoints {
		port := NewPort(f.conn(e.Host))
		t.Cleanup(func() { port.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := ReceiveFile(ctx, port, ReceiverConfig{Job: p.Spec.Op.Job, Endpoint: e.ID}, filepath.Join(dir, e.Host), &McastOptions{Linger: 300 * time.Millisecond}); err != nil {
				t.Errorf("%s: %v", e.Host, err)
			}
		}()
	}
	port := NewPort(f.conn("h1"))
	t.Cleanup(func() { port.Close() })
	time.Sleep(100 * time.Millisecond)
	st, err := SendFile(ctx, port, p, bytes.NewReader(data), int64(len(data)), "f", &McastOptions{Outstanding: 2, MaxOutstanding: 6})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if st.Repairs == 0 && (st.MaxInFlight <= 2 || st.MaxInFlight > 6) {
		t.Errorf("at most %d windows in flight, want 3..6 (Outstanding 2, MaxOutstanding 6)", st.MaxInFlight)
	}
	if st.MaxInFlight > 6 {
		t.Errorf("%d windows in flight, above MaxOutstanding 6", st.MaxInFlight)
	}
	t.Logf("%d windows, at most %d in flight, %d repairs", st.Windows, st.MaxInFlight, st.Repairs)
}

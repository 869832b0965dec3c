package bitmap

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

func loadTopo(t testing.TB, name string) *deploy.Topology {
	t.Helper()
	b, err := deploy.Embedded(name)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := deploy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// vecFor is endpoint e's input: mixed magnitudes, subnormals and
// cancellation, so any float32 summation order differs from the exact sum.
func vecFor(seed uint64, e, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(e)))
	v := make([]float32, n)
	for i := range v {
		switch rng.IntN(6) {
		case 0:
			v[i] = float32(rng.NormFloat64() * 1e-40)
		case 1:
			v[i] = float32(rng.NormFloat64() * 1e30)
		default:
			v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
		}
	}
	return v
}

// exactF32 is the oracle: the math/big sum rounded once to binary32.
func exactF32(vecs [][]float32, i int) float32 {
	s := new(big.Float).SetPrec(4096)
	for _, v := range vecs {
		s.Add(s, new(big.Float).SetPrec(4096).SetFloat64(float64(v[i])))
	}
	f, _ := s.Float32()
	return f
}

type arRun struct {
	outs  map[string][]float32
	errs  map[string]error
	stats map[string]Stats
	ports map[string]*Port
	all   [][]float32
}

func runAllReduce(t *testing.T, f *fabric, plan *bitmapam.Plan, seed uint64, skip string, opts *Options) *arRun {
	t.Helper()
	n := int(plan.Spec.VectorLen)
	r := &arRun{outs: map[string][]float32{}, errs: map[string]error{}, stats: map[string]Stats{}, ports: map[string]*Port{}}
	byHost := map[string]map[int][]float32{}
	for _, e := range plan.Spec.Endpoints {
		v := vecFor(seed, e.ID, n)
		r.all = append(r.all, v)
		if byHost[e.Host] == nil {
			byHost[e.Host] = map[int][]float32{}
		}
		byHost[e.Host][e.ID] = v
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h, in := range byHost {
		if h == skip {
			continue
		}
		port := f.newPort(h)
		t.Cleanup(func() { port.Close() })
		r.ports[h] = port
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out := make([]float32, n)
			st, err := AllReduce(ctx, port, plan, h, in, out, opts)
			mu.Lock()
			r.outs[h], r.errs[h], r.stats[h] = out, err, st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return r
}

func (r *arRun) checkExact(t *testing.T) {
	t.Helper()
	for h, err := range r.errs {
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
	}
	for h, out := range r.outs {
		bad := 0
		for i := range out {
			want := exactF32(r.all, i)
			if math.Float32bits(want) != math.Float32bits(out[i]) {
				if bad < 3 {
					t.Errorf("%s element %d: got %g, want %g", h, i, out[i], want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d elements differ from the exact sum", h, bad, len(out))
		}
	}
}

func arPlan(t *testing.T, topo *deploy.Topology, root string, perHost, n int, aggregators []string) *bitmapam.Plan {
	t.Helper()
	p, err := bitmapam.Compute(topo, bitmapam.JobSpec{Kind: bitmapam.AllReduce, Op: parser.OpKey{Job: 5, Group: 1, GroupGen: 1, Op: 1, OpGen: 1},
		Tenant: 3, Endpoints: bitmapam.HostEndpoints(topo.Hosts(), perHost), Root: root, VectorLen: uint32(n), TimeoutMS: 100, Aggregators: aggregators})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAllReduceExact(t *testing.T) {
	for _, tc := range []struct {
		topo, root string
		perHost    int
		agg        []string
	}{
		{"spine-leaf", "h1", 1, nil},
		{"spine-leaf", "h3", 2, nil},
		{"fat-tree", "h1", 1, nil},
		{"fat-tree", "h5", 1, []string{"c2"}}, // VAT on c1, c2 only: differs from the dissemination tree
	} {
		t.Run(tc.topo+"-"+tc.root, func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			p := arPlan(t, topo, tc.root, tc.perHost, 3000, tc.agg)
			f := newFabric(t, topo, p, 0, 0, 1)
			r := runAllReduce(t, f, p, 11, "", nil)
			r.checkExact(t)
			st := r.stats[tc.root]
			f.close() // the counters belong to the fabric goroutine
			merges := 0
			for _, s := range f.sw {
				merges += s.merges
			}
			if merges == 0 {
				t.Error("no switch merged anything")
			}
			t.Logf("%d chunks, %d switch merges, root stats %+v", st.Chunks, merges, st)
		})
	}
}

func TestAllReduceLossDup(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	p := arPlan(t, topo, "h1", 1, 8000, nil)
	f := newFabric(t, topo, p, 0.01, 0.01, 7)
	r := runAllReduce(t, f, p, 12, "", nil)
	r.checkExact(t)
	f.close()
	var rt uint64
	for _, s := range r.stats {
		rt += s.Retransmits
	}
	t.Logf("1%% loss + 1%% dup: %d frames dropped, %d retransmissions, root %+v", f.dropped, rt, r.stats["h1"])
	if f.dropped == 0 {
		t.Error("no frame was dropped: the test did not exercise loss")
	}
}

// TestAllReduceMissingWorker: h4 never runs. The root sees PARTIALs, asks
// exactly endpoint 3 to retransmit, and fails naming it; the workers fail
// with the root's notice.
func TestAllReduceMissingWorker(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	p := arPlan(t, topo, "h1", 1, 500, nil)
	f := newFabric(t, topo, p, 0, 0, 1)
	start := time.Now()
	r := runAllReduce(t, f, p, 13, "h4", &Options{Timeout: 150 * time.Millisecond, Rounds: 2})
	for _, h := range []string{"h1", "h2", "h3"} {
		var me *MissingError
		if !errors.As(r.errs[h], &me) {
			t.Fatalf("%s: got %v, want a MissingError", h, r.errs[h])
		}
		if len(me.Endpoints) != 1 || me.Endpoints[0] != 3 || len(me.Hosts) != 1 || me.Hosts[0] != "h4" {
			t.Errorf("%s: %v: want endpoint 3 on h4", h, me)
		}
		if !errors.Is(r.errs[h], ErrFailed) {
			t.Errorf("%s: error does not wrap ErrFailed", h)
		}
	}
	if st := r.stats["h1"]; st.Partials == 0 || st.RepairRequests == 0 {
		t.Errorf("root stats %+v: want PARTIALs and repair requests", st)
	}
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), r.errs["h2"])
}

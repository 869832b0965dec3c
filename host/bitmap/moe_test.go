package bitmap

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

// expertFn is expert e's function: deterministic, element-wise, FP32.
func expertFn(e int, x []float32) []float32 {
	y := make([]float32, len(x))
	a := float32(e%5) + 0.75
	b := float32(e) * 0.125
	for i, v := range x {
		y[i] = a*v - b*float32(i%7) + v*v*1e-3
	}
	return y
}

type moeBatch struct {
	tokens  [][]float32
	topk    [][]int
	weights [][]float32
}

func randomBatch(seed uint64, n, hidden, k, experts int) moeBatch {
	rng := rand.New(rand.NewPCG(seed, 99))
	var b moeBatch
	for t := 0; t < n; t++ {
		x := make([]float32, hidden)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(30)-15))
		}
		perm := rng.Perm(experts)[:k]
		w := make([]float32, k)
		for i := range w {
			w[i] = rng.Float32()
		}
		b.tokens, b.topk, b.weights = append(b.tokens, x), append(b.topk, perm), append(b.weights, w)
	}
	return b
}

func moePlan(t *testing.T, topo *deploy.Topology, perHost, hidden, k int) *bitmapam.Plan {
	t.Helper()
	tm := uint32(100)
	if hidden > 400 {
		// Experts answer after the whole token arrived: give the
		// single-goroutine fake fabric time for multi-chunk tokens.
		tm = 200
	}
	p, err := bitmapam.Compute(topo, bitmapam.JobSpec{Kind: bitmapam.MoE, Op: parser.OpKey{Job: 8, Group: 1, GroupGen: 1, Op: 20, OpGen: 1},
		Tenant: 4, Endpoints: bitmapam.HostEndpoints(topo.Hosts(), perHost), ActiveK: k, VectorLen: MoEVectorLen(hidden, k), TimeoutMS: tm})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type moeResult struct {
	mu    sync.Mutex
	seen  map[string]int // "source/token/expert" -> deliveries to Receive
	stats map[string]MoEStats
}

// runMoE runs every host as a token source and an expert host at once.
func runMoE(t *testing.T, f *fabric, plan *bitmapam.Plan, hosts []string, batches map[string]moeBatch, opts *MoEOptions) (map[string][][]float32, *moeResult) {
	t.Helper()
	res := &moeResult{seen: map[string]int{}, stats: map[string]MoEStats{}}
	moes := map[string]*MoE{}
	for _, h := range hosts {
		port := f.newPort(h)
		t.Cleanup(func() { port.Close() })
		m, err := NewMoE(port, plan, h, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		moes[h] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Experts: receive, compute, return.
	for _, h := range hosts {
		m := moes[h]
		go func() {
			for {
				toks, err := m.Receive(ctx)
				if err != nil {
					return
				}
				for _, tk := range toks {
					res.mu.Lock()
					res.seen[fmt.Sprintf("%s/%d/%d", tk.Source, tk.Token&0xFFFFFFFF, tk.Expert)]++
					res.mu.Unlock()
					if err := m.Return(ctx, tk, Weighted(tk.Weight, expertFn(tk.Expert, tk.Hidden))); err != nil {
						t.Errorf("%s: return: %v", h, err)
					}
				}
			}
		}()
	}
	outs := map[string][][]float32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := batches[h]
			hd, err := moes[h].Dispatch(ctx, b.tokens, b.topk, b.weights)
			if err != nil {
				t.Errorf("%s: dispatch: %v", h, err)
				return
			}
			out, err := hd.Combine(ctx)
			if err != nil {
				t.Errorf("%s: combine: %v", h, err)
				return
			}
			mu.Lock()
			outs[h] = out
			res.stats[h] = hd.Stats()
			mu.Unlock()
		}()
	}
	wg.Wait()
	return outs, res
}

func checkMoE(t *testing.T, hosts []string, batches map[string]moeBatch, outs map[string][][]float32, res *moeResult, opts *MoEOptions) {
	t.Helper()
	for _, h := range hosts {
		b := batches[h]
		want, err := ReferenceMoE(b.tokens, b.topk, b.weights, expertFn, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := outs[h]
		if len(got) != len(want) {
			t.Fatalf("%s: %d outputs, want %d", h, len(got), len(want))
		}
		bad := 0
		for tk := range want {
			for i := range want[tk] {
				if math.Float32bits(got[tk][i]) != math.Float32bits(want[tk][i]) {
					if bad < 3 {
						t.Errorf("%s token %d element %d: got %g, reference %g", h, tk, i, got[tk][i], want[tk][i])
					}
					bad++
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d values differ from the unicast reference", h, bad)
		}
		// Every routed (token, expert) delivered to an expert exactly once.
		var o MoEOptions
		if opts != nil {
			o = *opts
		}
		rk, _ := route(b.topk, b.weights, o.Capacity, o.Normalize)
		for tk, es := range rk {
			for _, e := range es {
				if n := res.seen[fmt.Sprintf("%s/%d/%d", h, tk, e)]; n != 1 {
					t.Errorf("%s token %d expert %d delivered %d times", h, tk, e, n)
				}
			}
		}
	}
	total := 0
	for _, n := range res.seen {
		total += n
	}
	routed := 0
	for _, h := range hosts {
		var o MoEOptions
		if opts != nil {
			o = *opts
		}
		rk, _ := route(batches[h].topk, batches[h].weights, o.Capacity, o.Normalize)
		for _, es := range rk {
			routed += len(es)
		}
	}
	if total != routed {
		t.Errorf("%d deliveries for %d routed selections: tokens lost or duplicated", total, routed)
	}
}

func TestMoEMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name    string
		topo    string
		perHost int
		hidden  int
		k       int
		opts    *MoEOptions
		loss    float64
	}{
		{"spine-leaf", "spine-leaf", 2, 64, 2, nil, 0},
		{"fat-tree-top4", "fat-tree", 2, 100, 4, nil, 0},
		{"fat-tree-multichunk", "fat-tree", 1, 300, 3, nil, 0},
		{"spine-leaf-multichunk", "spine-leaf", 1, 500, 2, nil, 0},
		{"capacity-normalize", "fat-tree", 2, 50, 4, &MoEOptions{Capacity: 6, Normalize: true}, 0},
		{"unicast-reference", "fat-tree", 2, 50, 4, &MoEOptions{Unicast: true}, 0},
		{"unicast-spine-leaf", "spine-leaf", 2, 50, 2, &MoEOptions{Unicast: true}, 0},
		{"loss-dup", "spine-leaf", 2, 64, 3, nil, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			p := moePlan(t, topo, tc.perHost, tc.hidden, tc.k)
			f := newFabric(t, topo, p, tc.loss, tc.loss, 3)
			hosts := topo.Hosts()
			batches := map[string]moeBatch{}
			for i, h := range hosts {
				n := 48
				if tc.topo == "fat-tree" || tc.hidden > 400 {
					n = 20 // eight sources: the in-memory fabric is one goroutine
				}
				batches[h] = randomBatch(uint64(i+1), n, tc.hidden, tc.k, len(p.Spec.Endpoints))
			}
			outs, res := runMoE(t, f, p, hosts, batches, tc.opts)
			if t.Failed() {
				return
			}
			checkMoE(t, hosts, batches, outs, res, tc.opts)
			f.close() // the counters belong to the fabric goroutine
			installs, merges := 0, 0
			for _, s := range f.sw {
				installs += s.installs
				merges += s.merges
			}
			st := res.stats[hosts[0]]
			t.Logf("%d C-BM installs, %d merges; %s: %+v", installs, merges, hosts[0], st)
			if tc.opts != nil && tc.opts.Unicast {
				if installs != 0 || merges != 0 {
					t.Errorf("unicast reference: %d installs, %d merges, want none", installs, merges)
				}
			} else if installs == 0 || (merges == 0 && !raceEnabled) {
				t.Errorf("bitmap dispatch: %d installs, %d merges: nothing was combined in the network", installs, merges)
			}
		})
	}
}

// TestMoEWindow: a Dispatch keeps at most Window tokens in flight, and
// without a bound sends them without waiting for returns; the result is
// the reference either way. Unbounded, the peak is at most 24 and above
// the bounded case's 3, not exactly 24: a token may return before the
// last is sent (the fabric delivers concurrently), which made the exact
// count fail now and then under load.
func TestMoEWindow(t *testing.T) {
	for _, tc := range []struct{ window, min, max int }{{3, 3, 3}, {-1, 4, 24}} {
		t.Run(fmt.Sprint("window=", tc.window), func(t *testing.T) {
			topo := loadTopo(t, "spine-leaf")
			p := moePlan(t, topo, 1, 40, 2)
			f := newFabric(t, topo, p, 0, 0, 5)
			hosts := topo.Hosts()
			batches := map[string]moeBatch{}
			for i, h := range hosts {
				b := randomBatch(uint64(i+1), 24, 40, 2, len(p.Spec.Endpoints))
				for tk := range b.topk {
					// Remote experts only, so every token enters the window.
					for j, e := range b.topk[tk] {
						if e == i {
							b.topk[tk][j] = (i + 1 + j) % len(hosts)
						}
					}
					if b.topk[tk][0] == b.topk[tk][1] {
						b.topk[tk] = b.topk[tk][:1]
						b.weights[tk] = b.weights[tk][:1]
					}
				}
				batches[h] = b
			}
			opts := &MoEOptions{Window: tc.window}
			outs, res := runMoE(t, f, p, hosts, batches, opts)
			if t.Failed() {
				return
			}
			checkMoE(t, hosts, batches, outs, res, opts)
			for _, h := range hosts {
				if got := res.stats[h].MaxInFlight; got < tc.min || got > tc.max {
					t.Errorf("%s: at most %d tokens in flight, want %d..%d", h, got, tc.min, tc.max)
				}
			}
		})
	}
}

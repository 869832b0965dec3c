package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// exactF32 is the oracle: the exact sum of column i (math/big) rounded once
// to binary32, ties to even; an exact zero is -0 only if every term was -0.
func exactF32(vecs [][]float32, i int) float32 {
	s := new(big.Float).SetPrec(4096)
	neg := true
	for _, v := range vecs {
		if !(v[i] == 0 && math.Signbit(float64(v[i]))) {
			neg = false
		}
		s.Add(s, new(big.Float).SetPrec(4096).SetFloat64(float64(v[i])))
	}
	f, _ := s.Float32()
	if f == 0 && neg {
		return float32(math.Copysign(0, -1))
	}
	return f
}

// vecFor is rank r's deterministic input: mixed magnitudes so that a naive
// float32 sum in any order is wrong in many positions.
func vecFor(seed uint64, r, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	v := make([]float32, n)
	for i := range v {
		switch rng.IntN(8) {
		case 0:
			v[i] = float32(rng.IntN(2000) - 1000)
		case 1:
			v[i] = float32(rng.NormFloat64() * 1e-40) // subnormals
		case 2:
			v[i] = float32(rng.NormFloat64() * 1e30)
		default:
			v[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
		}
	}
	return v
}

type rankRun struct {
	comm  *Comm
	conn  *memConn
	send  []float32
	recv  []float32
	err   error
	stats Stats
	ended time.Time // when the collective returned
}

// runRanks runs one collective on every rank concurrently.
func runRanks(t *testing.T, f *memFabric, url string, job uint64, hosts []string, coll string, root int, n int, opts *Options, prep func(r int, rr *rankRun)) []*rankRun {
	t.Helper()
	rs := make([]*rankRun, len(hosts))
	var wg sync.WaitGroup
	for r, h := range hosts {
		rr := &rankRun{conn: f.attach(h), send: vecFor(job, r, n), recv: make([]float32, n)}
		if opts != nil && opts.Acc == "fp32" {
			// Integers: exact in any order, so FP32_ARRIVAL is checkable bit for bit.
			for i := range rr.send {
				rr.send[i] = float32(int(rr.send[i]) % 4096)
			}
		}
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(hosts), Iface: "mem0", Job: job, Coordinator: url, Node: h}, rr.conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		rr.comm = c
		if prep != nil {
			prep(r, rr)
		}
		rs[r] = rr
	}
	for r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := rs[r]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var q *Request
			if coll == "allreduce" {
				q = rr.comm.AllReduceAsync(ctx, rr.send, rr.recv, opts)
			} else {
				q = rr.comm.ReduceAsync(ctx, rr.send, rr.recv, root, opts)
			}
			rr.err = q.Wait()
			rr.ended = time.Now()
			rr.stats = q.Stats()
		}()
	}
	wg.Wait()
	return rs
}

func checkExact(t *testing.T, rs []*rankRun, coll string, root int) {
	t.Helper()
	vecs := make([][]float32, len(rs))
	for r := range rs {
		vecs[r] = rs[r].send
	}
	for r, rr := range rs {
		if rr.err != nil {
			t.Fatalf("rank %d: %v", r, rr.err)
		}
		if coll == "reduce" && r != root {
			continue
		}
		bad := 0
		for i := range rr.recv {
			if want := exactF32(vecs, i); math.Float32bits(want) != math.Float32bits(rr.recv[i]) {
				if bad < 5 {
					t.Errorf("rank %d element %d: got %g (%#x), want %g (%#x)", r, i, rr.recv[i], math.Float32bits(rr.recv[i]), want, math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Fatalf("rank %d: %d of %d elements wrong", r, bad, len(rr.recv))
		}
	}
}

func TestAllReduceSingle(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	rs := runRanks(t, f, url, 1, []string{"h1", "h2"}, "allreduce", 0, 5000, nil, nil)
	checkExact(t, rs, "allreduce", 0)
	t.Logf("setup %v transfer %v frames %d", rs[0].stats.Setup, rs[0].stats.Transfer, rs[0].stats.Frames)
}

func TestCollectivesTrees(t *testing.T) {
	cases := []struct {
		topo  string
		hosts []string
		coll  string
		root  int
		acc   string
	}{
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, "kulisch"},
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "reduce", 2, "kulisch"},
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, "fp32"},
		{"fat-tree", []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}, "allreduce", 0, "kulisch"},
		{"fat-tree", []string{"h5", "h2", "h8"}, "reduce", 0, "kulisch"},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s-%s-%s-%d", tc.topo, tc.coll, tc.acc, len(tc.hosts)), func(t *testing.T) {
			f := newMemFabric(t, tc.topo)
			url := f.startAM(tc.hosts[0])
			// 2000 elements: one send window, so the test measures
			// correctness, not the switches' pipelining on a loaded host.
			rs := runRanks(t, f, url, uint64(10+i), tc.hosts, tc.coll, tc.root, 2000, &Options{Acc: tc.acc}, nil)
			checkExact(t, rs, tc.coll, tc.root)
		})
	}
}

func TestLossAndDuplicationStillExact(t *testing.T) {
	f := newMemFabric(t, "spine-leaf")
	f.loss, f.dup, f.ctlLoss = 0.02, 0.02, 0.05
	url := f.startAM("h1")
	for k := 0; k < 2; k++ {
		rs := runRanks(t, f, url, uint64(20+k), []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, 4000, nil, nil)
		checkExact(t, rs, "allreduce", 0)
		var rt uint64
		for _, r := range rs {
			rt += r.stats.Retransmits
		}
		t.Logf("run %d: %d DATA retransmissions over 4 ranks, transfer %v", k, rt, rs[0].stats.Transfer)
	}
}

// singlePair opens the two ranks of job on h1 and h2 of an in-memory
// single-switch fabric, with an AM on h1; they close at cleanup.
func singlePair(t *testing.T, job uint64) []*Comm {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	comms := make([]*Comm, 2)
	for r, h := range []string{"h1", "h2"} {
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: job, Coordinator: url, Node: h}, f.attach(h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		comms[r] = c
	}
	return comms
}

// TestReplayBuffersReused: ordinary collectives one after another on the
// same communicators reuse the DATA replay buffers of the previous one (dirty
// with its frames) and still deliver exact sums.
func TestReplayBuffersReused(t *testing.T) {
	comms := singlePair(t, 6)
	for _, c := range comms {
		c.cfg.PersistentShapes = -1 // ordinary collectives: each has its own window
	}
	const k = 3
	for j := 0; j < k; j++ {
		sends, recvs := make([][]float32, 2), make([][]float32, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range comms {
			sends[r] = vecFor(uint64(200+j), r, 5000)
			recvs[r] = make([]float32, len(sends[r]))
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = comms[r].AllReduce(context.Background(), sends[r], recvs[r], nil)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("collective %d rank %d: %v", j, r, err)
			}
		}
		for i := range sends[0] {
			want := math.Float32bits(exactF32(sends, i))
			if math.Float32bits(recvs[0][i]) != want || math.Float32bits(recvs[1][i]) != want {
				t.Fatalf("collective %d element %d wrong", j, i)
			}
		}
	}
	for r, c := range comms {
		if c.slabs.Hits() != k-1 {
			t.Errorf("rank %d: %d of %d collectives reused replay buffers, want %d", r, c.slabs.Hits(), k, k-1)
		}
	}
}

func TestSequentialAndConcurrentOnOneComm(t *testing.T) {
	comms := singlePair(t, 5)
	const k = 4
	sends := make([][][]float32, 2)
	recvs := make([][][]float32, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reqs []*Request
			for j := 0; j < k; j++ {
				s := vecFor(uint64(100+j), r, 1000+j)
				d := make([]float32, len(s))
				sends[r] = append(sends[r], s)
				recvs[r] = append(recvs[r], d)
				reqs = append(reqs, comms[r].AllReduceAsync(context.Background(), s, d, nil))
			}
			for _, q := range reqs {
				if err := q.Wait(); err != nil {
					errs <- fmt.Errorf("rank %d: %w", r, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for j := 0; j < k; j++ {
		vecs := [][]float32{sends[0][j], sends[1][j]}
		for i := range vecs[0] {
			want := math.Float32bits(exactF32(vecs, i))
			if math.Float32bits(recvs[0][j][i]) != want || math.Float32bits(recvs[1][j][i]) != want {
				t.Fatalf("collective %d element %d wrong", j, i)
			}
		}
	}
}

// TestKilledRankNamedWhileOtherJobCompletes: rank 3 of job A dies after two
// frames. Every survivor fails within the timeout of the death, also those
// under the other leaf, whose own switch saw nothing wrong: the FAILED
// context of the dead rank's leaf tells its peers, and they theirs
// (engine announceFailure). The error names the dead rank, not a switch
// that was told, and job B completes exactly meanwhile.
func TestKilledRankNamedWhileOtherJobCompletes(t *testing.T) {
	f := newMemFabric(t, "fat-tree")
	url := f.startAM("h1")
	// Job A on h1..h4 with a 2s timeout; rank 3 (h4) dies after 2 frames.
	// Job B on h5..h8 runs at the same time and must complete.
	const timeout = 2 * time.Second
	var wg sync.WaitGroup
	var ra, rb []*rankRun
	start := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		ra = runRanks(t, f, url, 30, []string{"h1", "h2", "h3", "h4"}, "allreduce", 0, 2000, &Options{Timeout: timeout},
			func(r int, rr *rankRun) {
				if r == 3 {
					rr.conn.killAfter = 2
				}
			})
	}()
	go func() {
		defer wg.Done()
		rb = runRanks(t, f, url, 31, []string{"h5", "h6", "h7", "h8"}, "allreduce", 0, 2000, nil, nil)
	}()
	wg.Wait()
	checkExact(t, rb, "allreduce", 0)
	el := time.Since(start)
	for r, rr := range ra[:3] {
		var oe *OpError
		if rr.err == nil || !errors.As(rr.err, &oe) || !strings.Contains(rr.err.Error(), "rank 3 (h4) stopped contributing") {
			t.Errorf("rank %d: error %v does not name rank 3 (h4)", r, rr.err)
		}
		t.Logf("rank %d: %v", r, rr.err)
		// The leaf times the dead rank out a timeout after its last
		// frame; the rest is frames and the AM's diagnosis. Without the
		// announcement the other leaf's ranks waited for their RESULT
		// deadline: two timeouts and a second.
		if took := rr.ended.Sub(ra[3].conn.diedAt); took > timeout+time.Second {
			t.Errorf("rank %d failed %v after rank 3 died; want within the timeout (%v) and 1s", r, took, timeout)
		} else {
			t.Logf("rank %d failed %v after rank 3 died", r, took.Round(time.Millisecond))
		}
	}
	if el > 30*time.Second {
		t.Errorf("failure took %v", el)
	}
}

func TestUnsupportedTupleNoGrant(t *testing.T) {
	f := newMemFabric(t, "spine-leaf")
	url := f.startAM("h1")
	// FP32_ARRIVAL accepts only FP32 input: FP16 has no capability record.
	hosts := []string{"h1", "h3"}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, h := range hosts {
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: 40, Coordinator: url, Node: h}, f.attach(h))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := make([]Float16, 100)
			errs[r] = c.AllReduce(context.Background(), s, s, &Options{Acc: "fp32"})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var oe *OpError
		if err == nil || !errors.As(err, &oe) || oe.Stage != "begin" || !strings.Contains(err.Error(), "unsupported") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestBadArguments(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 2, Iface: "mem0", Job: 1, Coordinator: url, Node: "h1"}, f.attach("h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.AllReduce(ctx, []float64{1}, []float64{1}, nil); !errors.Is(err, ErrType) {
		t.Errorf("float64: %v", err)
	}
	if err := c.AllReduce(ctx, []float32{1, 2}, []float32{1}, nil); !errors.Is(err, ErrType) {
		t.Errorf("length mismatch: %v", err)
	}
	if err := c.AllReduce(ctx, []int8{1}, []int8{1}, &Options{Output: "fp32"}); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "RESULT format is FP32") {
		t.Errorf("recv not of Options.Output's type: %v", err)
	}
	if err := c.AllReduce(ctx, []int8{1}, []float32{1}, nil); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "set Options.Output") {
		t.Errorf("recv of another type without Options.Output: %v", err)
	}
	if err := c.AllReduce(ctx, []float32{1}, []float32{1}, &Options{Output: "kulisch"}); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "use int8, fp16, bf16 or fp32") {
		t.Errorf("Options.Output kulisch: %v", err)
	}
	if err := c.Reduce(ctx, []float32{1}, nil, 7, nil); err == nil || !strings.Contains(err.Error(), "root 7") {
		t.Errorf("root: %v", err)
	}
	if _, err := NewCommConn(ctx, Config{Size: 2, Rank: 0, Iface: "x", Coordinator: "127.0.0.1:1", ConnectTimeout: 100 * time.Millisecond}, f.attach("h1")); !errors.Is(err, ErrUnreachable) {
		t.Errorf("unreachable: %v", err)
	}
	if err := (&Config{Rank: 3, Size: 2}).Validate(); err == nil || !strings.Contains(err.Error(), "PRISM_IFACE") {
		t.Errorf("validate: %v", err)
	}
}

// TestSoakLargeVectors runs vectors far larger than the element window
// (92928 at MTU 1500) through SINGLE and spine-leaf (PRISMD_SOAK=1 only).
func TestSoakLargeVectors(t *testing.T) {
	if os.Getenv("PRISMD_SOAK") != "1" {
		t.Skip("soak test: set PRISMD_SOAK=1")
	}
	for _, tc := range []struct {
		topo  string
		hosts []string
	}{{"single", []string{"h1", "h2"}}, {"spine-leaf", []string{"h1", "h2", "h3", "h4"}}} {
		t.Run(tc.topo, func(t *testing.T) {
			f := newMemFabric(t, tc.topo)
			url := f.startAM(tc.hosts[0])
			for k := 0; k < 3; k++ {
				rs := runRanks(t, f, url, uint64(60+k), tc.hosts, "allreduce", 0, 1000000, &Options{Timeout: 10 * time.Second}, nil)
				checkExact(t, rs, "allreduce", 0)
				t.Logf("1M elements: transfer %v, %d retransmissions at rank 0", rs[0].stats.Transfer, rs[0].stats.Retransmits)
			}
			// Gradient-like values: the leaves' partials travel as
			// KULISCH_F64 (spine-leaf), exact all the same.
			gradient := func(r int, rr *rankRun) {
				rng := rand.New(rand.NewPCG(70, uint64(r)))
				for i := range rr.send {
					rr.send[i] = float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9)))
				}
			}
			rs := runRanks(t, f, url, 70, tc.hosts, "allreduce", 0, 1000000, &Options{Timeout: 10 * time.Second}, gradient)
			checkExact(t, rs, "allreduce", 0)
			t.Logf("1M gradient-like elements: transfer %v", rs[0].stats.Transfer)
		})
	}
}

// An INT8 sum out of range cannot be delivered as INT8: the switch reports
// ACCUMULATION_INEXACT and every rank gets ErrInexact, never a clamped value.
func TestInexactInt8(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, h := range []string{"h1", "h2"} {
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: 90, Coordinator: url, Node: h}, f.attach(h))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := make([]int8, 1000)
			for i := range s {
				s[i] = int8(i % 50)
			}
			s[700] = 100 // 100 + 100 = 200: not an INT8
			d := make([]int8, len(s))
			errs[r] = c.AllReduce(context.Background(), s, d, nil)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		// The AM's word, when it is part of the error, blames no one
		// (it had read "node sw1 is ACTIVE; ranks that had not reported
		// when it failed: 0 (h1)"), and a rank it told before its own
		// terminal frame arrived still matches ErrInexact.
		if !errors.Is(err, ErrInexact) || strings.Contains(err.Error(), "had not reported") {
			t.Errorf("rank %d: %v, want ErrInexact blaming no node or rank", r, err)
		}
	}
}

// TestOutputFormat: Options.Output sets the RESULT format and recv's type.
// INT8 summed into FP32 keeps the sums INT8 cannot hold (the case
// TestInexactInt8 fails), on a SINGLE switch and through a spine-leaf
// REDUCE; the oracle is the sum in float64, exact for these integers.
func TestOutputFormat(t *testing.T) {
	for _, tc := range []struct {
		topo  string
		hosts []string
		coll  string
		root  int
	}{
		{"single", []string{"h1", "h2"}, "allreduce", 0},
		{"spine-leaf", []string{"h1", "h2", "h3", "h4"}, "reduce", 3},
	} {
		t.Run(tc.topo+"-"+tc.coll, func(t *testing.T) {
			f := newMemFabric(t, tc.topo)
			url := f.startAM(tc.hosts[0])
			const n = 3000
			sends := make([][]int8, len(tc.hosts))
			recvs := make([][]float32, len(tc.hosts))
			errs := make([]error, len(tc.hosts))
			var wg sync.WaitGroup
			for r, h := range tc.hosts {
				c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(tc.hosts), Iface: "mem0", Job: 91, Coordinator: url, Node: h}, f.attach(h))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				sends[r] = make([]int8, n)
				for i := range sends[r] {
					sends[r][i] = int8((i*7+r*31)%255 - 127)
				}
				var recv any
				if tc.coll == "allreduce" || r == tc.root {
					recvs[r] = make([]float32, n)
					recv = recvs[r]
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := &Options{Output: "fp32"}
					if tc.coll == "allreduce" {
						errs[r] = c.AllReduce(context.Background(), sends[r], recv, o)
					} else {
						errs[r] = c.Reduce(context.Background(), sends[r], recv, tc.root, o)
					}
				}()
			}
			wg.Wait()
			wide := 0
			for r := range tc.hosts {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if recvs[r] == nil {
					continue
				}
				for i := 0; i < n; i++ {
					var want float64
					for k := range sends {
						want += float64(sends[k][i])
					}
					if want > 127 || want < -128 {
						wide++
					}
					if float64(recvs[r][i]) != want {
						t.Fatalf("rank %d element %d: %v, want %v", r, i, recvs[r][i], want)
					}
				}
			}
			if wide == 0 {
				t.Fatal("no sum outside INT8: the test proves nothing")
			}
		})
	}
}

// TestCancelMidTransfer: cancelling the context of a running collective
// (its peer went silent) ends it promptly with the context's error, and the
// Comm's event loop keeps serving the next collective.
func TestCancelMidTransfer(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	hosts := []string{"h1", "h2"}
	comms := make([]*Comm, 2)
	conns := make([]*memConn, 2)
	for r, h := range hosts {
		conns[r] = f.attach(h)
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: 70, Coordinator: url, Node: h}, conns[r])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		comms[r] = c
	}
	// Rank 1 sends a few frames and dies: rank 0's RESULT never completes.
	conns[1].killAfter = 3
	ctx, cancel := context.WithCancel(context.Background())
	opts := &Options{Timeout: 20 * time.Second}
	q0 := comms[0].AllReduceAsync(ctx, make([]float32, 200000), make([]float32, 200000), opts)
	q1 := comms[1].AllReduceAsync(context.Background(), make([]float32, 200000), make([]float32, 200000), opts)
	// Wait for the grant: the collective is registered with the loop.
	for deadline := time.Now().Add(10 * time.Second); len(*comms[0].ops.Load()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if len(*comms[0].ops.Load()) == 0 {
		t.Fatal("rank 0's collective never started")
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case <-q0.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("Wait did not return after cancel")
	}
	if err := q0.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0: %v, want context.Canceled", err)
	}
	t.Logf("cancelled collective returned after %v", time.Since(start).Round(time.Millisecond))
	// The cancel reached the AM as this rank's own doing (local): its
	// diagnosis opens with it rather than blaming a rank the switch
	// happened to be least advanced on.
	var diag string
	for deadline := time.Now().Add(10 * time.Second); diag == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		l, err := am.NewClient(url).Ops(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Ops {
			if o.Op.Job == 70 && o.Error != nil {
				diag = o.Error.Message
			}
		}
	}
	if !strings.Contains(diag, "rank 0 (h1) reported failure first: cancelled: context canceled") {
		t.Errorf("AM's diagnosis %q does not open with rank 0's cancel", diag)
	}
	if n := len(*comms[0].ops.Load()); n != 0 {
		t.Fatalf("%d operations still registered after cancel", n)
	}
	_ = q1 // rank 1 fails on its own (its frames vanish); Close ends it
	// The same Comm (same event loop) runs the next collective with a
	// healthy rank 1 (a new Comm, numbered to match: this is invocation 1).
	c1, err := NewCommConn(context.Background(), Config{Rank: 1, Size: 2, Iface: "mem0", Job: 70, Coordinator: url, Node: "h2"}, f.attach("h2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c1.seq.Store(1)
	s0, s1 := vecFor(72, 0, 3000), vecFor(72, 1, 3000)
	d0, d1 := make([]float32, 3000), make([]float32, 3000)
	qa := comms[0].AllReduceAsync(context.Background(), s0, d0, nil)
	qb := c1.AllReduceAsync(context.Background(), s1, d1, nil)
	if err := qa.Wait(); err != nil {
		t.Fatalf("rank 0 after the cancel: %v", err)
	}
	if err := qb.Wait(); err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	for i := range d0 {
		want := math.Float32bits(exactF32([][]float32{s0, s1}, i))
		if math.Float32bits(d0[i]) != want || math.Float32bits(d1[i]) != want {
			t.Fatalf("element %d wrong after the cancel", i)
		}
	}
}

// TestSwitchLostOperationFailsFast: a switch that loses its operations
// mid-transfer (a prismd restart) answers the ranks' next DATA with
// PROGRESS UNKNOWN_OPERATION, and every rank fails at once with an error
// that says so, long before its 30 s timeout.
func TestSwitchLostOperationFailsFast(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	start := time.Now()
	go func() {
		// Restart the switch once DATA flows.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if f.sws["sw1"].m.Frames[parser.ClassData].Load() > 20 {
				done := make(chan struct{})
				f.sws["sw1"].restart <- done
				<-done
				return
			}
		}
	}()
	rs := runRanks(t, f, url, 40, []string{"h1", "h2"}, "allreduce", 0, 4<<20, &Options{Timeout: 30 * time.Second}, nil)
	el := time.Since(start)
	for r, rr := range rs {
		if rr.err == nil || !strings.Contains(rr.err.Error(), "does not know the operation") {
			t.Errorf("rank %d: error %v, want the leaf not knowing the operation", r, rr.err)
		}
	}
	if el > 10*time.Second {
		t.Errorf("the ranks failed after %v: a lost operation must end them at once, not at their timeout", el)
	}
}

// TestDoneReportedAfterReturn: a successful collective returns before its
// done report reached the AM (the report goes out in the background), yet
// every report arrives, in order, and Close returns only once they have:
// after Close the AM has every rank's report for every operation and has
// released each. A report the AM refuses comes back from Close; one for an
// operation it no longer knows does not.
func TestDoneReportedAfterReturn(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	var ids []string
	var comms []*Comm
	for i := 0; i < 4; i++ {
		rs := runRanks(t, f, url, uint64(3+i), []string{"h1", "h2"}, "allreduce", 0, 500, nil, nil)
		checkExact(t, rs, "allreduce", 0)
		ids = append(ids, rs[0].stats.Grant.ID)
		for _, rr := range rs {
			comms = append(comms, rr.comm)
		}
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	cl := am.NewClient(url)
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cl.Op(ctx, id)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.RanksDone) != 2 {
			t.Fatalf("op %s: ranks done %v after Close, want both", id, st.RanksDone)
		}
	}
	// A report the AM refuses comes back from Close. One for an operation
	// the AM does not know (it restarted since the grant) is not an error:
	// the result was whole; Notify hears it.
	var notes []string
	var notesMu sync.Mutex
	rr := &rankRun{conn: f.attach("h1")}
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 2, Iface: "mem0", Job: 9, Coordinator: url, Node: "h1",
		Notify: func(m string) { notesMu.Lock(); notes = append(notes, m); notesMu.Unlock() }}, rr.conn)
	if err != nil {
		t.Fatal(err)
	}
	c.report(doneReport{id: "3-0-1-999-1", coll: "allreduce", req: am.DoneRequest{Rank: 0, OK: true}})
	c.report(doneReport{id: ids[0], coll: "allreduce", req: am.DoneRequest{Rank: 7, OK: true}})
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), ids[0]) || strings.Contains(err.Error(), "3-0-1-999-1") {
		t.Fatalf("Close after a refused report and an unknown one: %v, want an error naming %s only", err, ids[0])
	}
	notesMu.Lock()
	defer notesMu.Unlock()
	if len(notes) != 1 || !strings.Contains(notes[0], "no longer knows operation 3-0-1-999-1") {
		t.Fatalf("Notify heard %q, want the unknown operation named", notes)
	}
}

// TestBarrierWaitReported: a rank whose job's other rank never starts is
// told, while it waits at the AM's barrier, which rank is missing
// (Config.Notify), and its error names that rank when it gives up.
func TestBarrierWaitReported(t *testing.T) {
	defer func(a, b time.Duration) { barrierNotice, barrierNoticeEvery = a, b }(barrierNotice, barrierNoticeEvery)
	barrierNotice, barrierNoticeEvery = 100*time.Millisecond, 100*time.Millisecond
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	var mu sync.Mutex
	var notes []string
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 2, Iface: "mem0", Job: 71, Coordinator: url, Node: "h1",
		Notify: func(m string) { mu.Lock(); notes = append(notes, m); mu.Unlock() }}, f.attach("h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	err = c.AllReduce(ctx, make([]float32, 10), make([]float32, 10), nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "for ranks 1 (arrived: 0)") {
		t.Fatalf("AllReduce: %v, want the deadline naming rank 1 as missing", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) < 2 || !strings.Contains(notes[0], "rank 0: the AM's barrier for job 71 group 0 seq 0 has waited") ||
		!strings.Contains(notes[0], "for ranks 1 (arrived: 0)") {
		t.Fatalf("notices %q, want repeated ones naming rank 1 as missing", notes)
	}
}

// TestStalledResultNotified: a collective whose RESULT stops (rank 1 dies
// after a few frames) under a long Timeout tells Config.Notify, after
// stallNotice and then every stallNoticeEvery, what it waits for, long
// before it fails: a minute's Timeout kept it silent for the whole minute.
func TestStalledResultNotified(t *testing.T) {
	defer func(a, b int64) { stallNotice, stallNoticeEvery = a, b }(stallNotice, stallNoticeEvery)
	stallNotice, stallNoticeEvery = int64(200*time.Millisecond), int64(400*time.Millisecond)
	var mu sync.Mutex
	var notes []string
	comms, conns, _ := memPair(t, 73, func(m string) { mu.Lock(); notes = append(notes, m); mu.Unlock() })
	conns[1].killAfter = 3
	opts := &Options{Timeout: 1500 * time.Millisecond}
	q0 := comms[0].AllReduceAsync(context.Background(), make([]float32, 200000), make([]float32, 200000), opts)
	comms[1].AllReduceAsync(context.Background(), make([]float32, 200000), make([]float32, 200000), opts)
	if err := q0.Wait(); err == nil {
		t.Fatal("rank 0 completed without rank 1")
	}
	mu.Lock()
	defer mu.Unlock()
	var stalls []string
	for _, n := range notes {
		if strings.Contains(n, "no RESULT from leaf sw1 for") {
			stalls = append(stalls, n)
		}
	}
	if len(stalls) < 2 || !strings.Contains(stalls[0], "rank 0: operation 73-") || !strings.Contains(stalls[0], "of 200000 elements); it fails after 1.5s (its timeout)") {
		t.Fatalf("notices %q\nwant at least two naming the stalled RESULT of rank 0's operation and when it fails", notes)
	}
}

// TestFrozenRankSaysSo: a rank whose process did not run for longer than
// half its RESULT deadline (SIGSTOP and SIGCONT; here its clock jumps)
// and then finds the deadline passed says that it did not run, instead of
// blaming its leaf alone ("no RESULT from leaf for 9s" after a 9 s stop).
func TestFrozenRankSaysSo(t *testing.T) {
	comms, conns, _ := memPair(t, 74, nil)
	conns[1].killAfter = 1 // rank 1's RESULT never completes rank 0's
	opts := &Options{Timeout: 2 * time.Second}
	q0 := comms[0].AllReduceAsync(context.Background(), make([]float32, 1000), make([]float32, 1000), opts)
	comms[1].AllReduceAsync(context.Background(), make([]float32, 1000), make([]float32, 1000), opts)
	for deadline := time.Now().Add(10 * time.Second); len(*comms[0].ops.Load()) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	defer monoSkew.Store(0)
	monoSkew.Store(int64(5 * time.Second)) // the rank "wakes" 5 s later
	err := q0.Wait()
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "but this process itself did not run for 5") {
		t.Fatalf("rank 0: %v\nwant the RESULT timeout saying this process did not run", err)
	}
}

// memPair is two ranks of job on h1 and h2 of a SINGLE fabric with its AM
// (whose URL it returns), closed at the test's end; notify0, if set, is
// rank 0's Config.Notify.
func memPair(t *testing.T, job uint64, notify0 func(string)) ([]*Comm, []*memConn, string) {
	t.Helper()
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	comms, conns := make([]*Comm, 2), make([]*memConn, 2)
	for r, h := range []string{"h1", "h2"} {
		conns[r] = f.attach(h)
		cfg := Config{Rank: r, Size: 2, Iface: "mem0", Job: job, Coordinator: url, Node: h}
		if r == 0 {
			cfg.Notify = notify0
		}
		c, err := NewCommConn(context.Background(), cfg, conns[r])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		comms[r] = c
	}
	return comms, conns, url
}

// TestOwnCancelAlwaysMatches: a call whose own context had ended when it
// failed matches context.Canceled whatever the failure was put down to
// (every rank cancelling at once: all but the first are told that the
// first cancelled), keeps matching its other causes, and the error a
// persistent collective keeps for its later calls is not marked.
func TestOwnCancelAlwaysMatches(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	kept := &OpError{Collective: "allreduce", Stage: "data", Err: fmt.Errorf("%w: rank 2 (h3) reported failure first: cancelled", ErrFailed)}
	err := ownEnd(ctx, kept)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "this call's own context ended too") {
		t.Fatalf("%v: want it to match context.Canceled and ErrFailed, and say so", err)
	}
	if errors.Is(kept, context.Canceled) {
		t.Fatal("ownEnd marked the error it was given, which a persistent collective hands its later calls")
	}
	if err := ownEnd(context.Background(), kept); err != kept {
		t.Fatalf("a live context changed the error: %v", err)
	}

	// End to end: both ranks cancel at once, mid-transfer.
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	comms := make([]*Comm, 2)
	for r, h := range []string{"h1", "h2"} {
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: 71, Coordinator: url, Node: h}, f.attach(h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		comms[r] = c
	}
	f.mu.Lock()
	f.loss = 1 // nothing gets through: the collective waits until cancelled
	f.mu.Unlock()
	ctx, cancel = context.WithCancel(context.Background())
	qs := make([]*Request, 2)
	for r, c := range comms {
		qs[r] = c.AllReduceAsync(ctx, make([]float32, 200000), make([]float32, 200000), &Options{Timeout: 20 * time.Second})
	}
	for deadline := time.Now().Add(10 * time.Second); (len(*comms[0].ops.Load()) == 0 || len(*comms[1].ops.Load()) == 0) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	for r, q := range qs {
		if err := q.Wait(); !errors.Is(err, context.Canceled) {
			t.Errorf("rank %d: %v, want context.Canceled (its own context was cancelled)", r, err)
		}
	}
}

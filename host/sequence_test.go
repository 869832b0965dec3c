package host

// Tests of what a call does to the call sequence (doc.go, "The call
// sequence"): calls refused on the rank, empty calls, calls on a closed
// Comm, failed and cancelled calls, and that every rank's next call still
// meets the others' with exact sums.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/parser"
)

// countingAM puts a proxy before the AM at target that counts the
// runtime-channel requests ranks send.
func countingAM(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // a rank's cancelled begin is expected here
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, am.APIVersion+"/presence") {
			n.Add(1) // a Comm's presence stream opens when it likes: not a call's request
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// seqPair is two ranks of job on the single fabric, their runtime channel
// counted.
type seqPair struct {
	f     *memFabric
	comms []*Comm
	conns []*memConn
	url   string // the AM itself
	reqs  *atomic.Int64
}

func newSeqPair(t *testing.T, job uint64) *seqPair {
	t.Helper()
	f := newMemFabric(t, "single")
	sp := &seqPair{f: f, url: f.startAM("h1")}
	var proxy string
	proxy, sp.reqs = countingAM(t, sp.url)
	for r, h := range []string{"h1", "h2"} {
		conn := f.attach(h)
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: job, Coordinator: proxy, Node: h}, conn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sp.comms, sp.conns = append(sp.comms, c), append(sp.conns, conn)
	}
	return sp
}

// queue queues calls AllReduce calls of n elements on rank 0, then on
// rank 1 (call k's inputs from seed+k), each with a live context but rank
// 0's second, which is cancelled before it is made. It returns the
// requests by rank and call, and the calls' buffers by call and rank.
func (sp *seqPair) queue(t *testing.T, calls int, seed uint64, n int, o *Options) (qs [2][]*Request, sends, recvs [][][]float32) {
	live, stop := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(stop)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	sends, recvs = make([][][]float32, calls), make([][][]float32, calls)
	for k := range calls {
		sends[k], recvs[k] = make([][]float32, 2), make([][]float32, 2)
		for r := range sp.comms {
			sends[k][r], recvs[k][r] = vecFor(seed+uint64(k), r, n), make([]float32, n)
		}
	}
	for r, c := range sp.comms {
		qs[r] = make([]*Request, calls)
		for k := range calls {
			ctx := live
			if r == 0 && k == 1 {
				ctx = cancelled
			}
			qs[r][k] = c.AllReduceAsync(ctx, sends[k][r], recvs[k][r], o)
		}
	}
	return qs, sends, recvs
}

// both runs one AllReduce of n elements on both ranks (inputs from seed)
// and checks every element against the exact sum.
func (sp *seqPair) both(t *testing.T, what string, seed uint64, n int, o *Options) []Stats {
	t.Helper()
	sends, recvs := make([][]float32, 2), make([][]float32, 2)
	errs, sts := make([]error, 2), make([]Stats, 2)
	var wg sync.WaitGroup
	for r, c := range sp.comms {
		sends[r], recvs[r] = vecFor(seed, r, n), make([]float32, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			q := c.AllReduceAsync(ctx, sends[r], recvs[r], o)
			errs[r], sts[r] = q.Wait(), q.Stats()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
	checkSums(t, what, sends, recvs)
	return sts
}

// each runs one AllReduce on each rank at once, rank r's of lens[r]
// elements (inputs from seed), and returns their errors and how long
// each took; results are not checked.
func (sp *seqPair) each(seed uint64, lens [2]int, o *Options) ([]error, []time.Duration) {
	errs, took := make([]error, 2), make([]time.Duration, 2)
	var wg sync.WaitGroup
	for r, c := range sp.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Now()
			errs[r] = c.AllReduce(ctx, vecFor(seed, r, lens[r]), make([]float32, lens[r]), o)
			took[r] = time.Since(t0)
		}()
	}
	wg.Wait()
	return errs, took
}

func checkSums(t *testing.T, what string, sends, recvs [][]float32) {
	t.Helper()
	for i := range sends[0] {
		want := math.Float32bits(exactF32(sends, i))
		for r := range recvs {
			if got := math.Float32bits(recvs[r][i]); got != want {
				t.Fatalf("%s: rank %d element %d: %#x, want %#x", what, r, i, got, want)
			}
		}
	}
}

// Item: calls on a closed Comm fail at once with ErrClosed and send
// nothing, not even to the AM (a lone rank sat at the AM's barrier).
func TestClosedCommRefusesCalls(t *testing.T) {
	sp := newSeqPair(t, 201)
	c := sp.comms[0]
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before, sends := sp.reqs.Load(), sp.conns[0].sends
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	x := vecFor(1, 0, 100)
	start := time.Now()
	if err := c.AllReduce(ctx, x, make([]float32, 100), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("AllReduce after Close: %v, want ErrClosed", err)
	}
	if err := c.Reduce(ctx, x, nil, 1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Reduce after Close: %v, want ErrClosed", err)
	}
	if p, err := c.AllReduceInit(x, x, nil); !errors.Is(err, ErrClosed) || p != nil {
		t.Errorf("AllReduceInit after Close: collective returned %v, error %v; want ErrClosed", p != nil, err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("calls on a closed Comm took %v, want an immediate error", el)
	}
	if n := sp.reqs.Load() - before; n != 0 {
		t.Errorf("%d runtime-channel requests after Close, want none", n)
	}
	if sp.conns[0].sends != sends {
		t.Errorf("frames sent after Close")
	}
}

// Item: a Persistent created on a live Comm refuses Start once the Comm
// is closed, without a request.
func TestClosedCommRefusesPersistentStart(t *testing.T) {
	sp := newSeqPair(t, 202)
	x := vecFor(2, 0, 50)
	p, err := sp.comms[0].AllReduceInit(x, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	sp.comms[0].Close()
	before := sp.reqs.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := p.Run(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Run on a closed Comm: %v, want ErrClosed", err)
	}
	if n := sp.reqs.Load() - before; n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// Item: a call refused on the rank (a []float64) consumes no sequence
// number: both ranks' next calls still meet, with exact sums.
func TestRefusedCallKeepsSequence(t *testing.T) {
	sp := newSeqPair(t, 203)
	before := sp.reqs.Load()
	if err := sp.comms[0].AllReduce(context.Background(), []float64{1, 2}, []float64{0, 0}, nil); !errors.Is(err, ErrType) {
		t.Fatalf("[]float64: %v, want ErrType", err)
	}
	if err := sp.comms[0].AllReduce(context.Background(), []float32{1, 2}, []float32{0}, nil); !errors.Is(err, ErrType) {
		t.Fatalf("short recv: %v, want ErrType", err)
	}
	if err := sp.comms[0].Reduce(context.Background(), []float32{1, 2}, []float32{0, 0}, 2, nil); !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "root 2 is outside 0..1") {
		t.Fatalf("root 2 of 2 ranks: %v, want ErrType naming the root", err)
	}
	// Options the AM would refuse fail here, before any request: a typo
	// failed only at the AM, after every rank arrived.
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Acc: "fp23"}, "acc_policy"},
		{Options{MTU: 1400}, "mtu 1400: want 576, 1500 or 9000"},
		{Options{Partial: "fp33"}, "partial_policy"},
		{Options{KulischWidth: 12}, "kulisch_width 12"},
	} {
		err := sp.comms[0].AllReduce(context.Background(), []float32{1, 2}, []float32{0, 0}, &c.o)
		var ae *am.APIError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ae) || ae.Code != am.CodeBadRequest || !errors.Is(err, ErrSetup) || !errors.Is(err, ErrType) {
			t.Errorf("Options %+v: %v, want a bad_request naming %q, an ErrType", c.o, err, c.want)
		}
	}
	if n := sp.reqs.Load() - before; n != 0 {
		t.Errorf("refused calls sent %d requests", n)
	}
	// Without the fix rank 0 asked for seq 2 here and rank 1 for seq 0:
	// each waited at its own barrier.
	sp.both(t, "first call after the refused ones", 31, 300, nil)
	sp.both(t, "second call", 32, 300, nil)
}

// Item: a first call of a shape that the AM refused (rank 1 passed 101
// elements, rank 0 100: a mismatch on both) leaves no rank counting the
// shape as seen: the next matched call is a first call on both (ordinary,
// exact) and the one after runs persistent on both. Before, rank 0 had
// marked 100 as seen and ran its next call persistent, rank 1 ordinary:
// "persistent false vs true".
func TestRefusedFirstCallLeavesShapeUnseen(t *testing.T) {
	sp := newSeqPair(t, 204)
	errs, _ := sp.each(40, [2]int{100, 101}, nil)
	for r, err := range errs {
		var ae *am.APIError
		if !errors.As(err, &ae) || ae.Code != am.CodeMismatch {
			t.Fatalf("rank %d: %v, want the AM's mismatch", r, err)
		}
		// The AM's refusals are classified for errors.Is too (OpError.Is).
		if !errors.Is(err, ErrMismatch) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrSetup) {
			t.Errorf("rank %d: errors.Is(ErrMismatch) %v, (ErrTimeout) %v, (ErrSetup) %v; want true, false, false",
				r, errors.Is(err, ErrMismatch), errors.Is(err, ErrTimeout), errors.Is(err, ErrSetup))
		}
	}
	sts := sp.both(t, "matched call after the mismatch", 41, 100, nil)
	if sts[0].AutoPersistent || sts[1].AutoPersistent {
		t.Errorf("matched call after the mismatch: auto %v %v, want an ordinary first call on both", sts[0].AutoPersistent, sts[1].AutoPersistent)
	}
	sts = sp.both(t, "the shape's second call", 42, 100, nil)
	if !sts[0].AutoPersistent || !sts[1].AutoPersistent {
		t.Errorf("second call: auto %v %v, want persistent on both", sts[0].AutoPersistent, sts[1].AutoPersistent)
	}
}

// Item: after a first call of shape A on both ranks, rank 0 calls another
// shape (300 elements) where rank 1 calls A again (its second call: a
// persistent setup). The AM refuses both. The next matched call of A must
// run on both: the ranks' views of which shapes they have seen must agree
// again. Rank 0 still had A seen while rank 1, whose refused setup made it
// forget A, did not: that call met as persistent against ordinary and
// failed as well (it healed only on the call after).
func TestMismatchLeavesRanksAgreeing(t *testing.T) {
	sp := newSeqPair(t, 216)
	sp.both(t, "first call of A", 51, 100, nil)
	errs, _ := sp.each(52, [2]int{300, 100}, nil)
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: %v, want the AM's mismatch", r, err)
		}
	}
	sts := sp.both(t, "A on both after the mismatch", 53, 100, nil)
	if sts[0].AutoPersistent != sts[1].AutoPersistent {
		t.Errorf("auto %v %v: the ranks disagree", sts[0].AutoPersistent, sts[1].AutoPersistent)
	}
	sp.both(t, "and A again", 54, 100, nil)
}

// Item: of three queued calls of a kept shape on rank 0, the second is
// cancelled before its turn. It fails with context.Canceled; the third,
// whose context was never cancelled, fails with ErrEarlierCancelled naming
// the invocation, not with context.Canceled. It cannot run: rank 1 runs
// that invocation (its second call) without rank 0, which fails it and
// its third call, so rank 0 running its third call in the second's place
// would leave the ranks out of step. Then both ranks' next call sets the
// shape up again and is exact.
func TestCancelledQueuedCallFailsLaterOnesDistinctly(t *testing.T) {
	sp := newSeqPair(t, 205)
	o := &Options{Timeout: 2 * time.Second}
	const n = 3000
	sp.both(t, "first call", 51, n, o)
	sp.both(t, "second call (persistent set up)", 52, n, o)
	// Rank 0 queues its three calls before rank 1 makes any, so its first
	// cannot finish (it needs rank 1's) before its third is queued: on a
	// loaded machine it did, the cancelled call's skip dropped the slot,
	// and the third call set up a new collective instead of queueing.
	qs, sends, recvs := sp.queue(t, 3, 60, n, o)
	for r := range 2 {
		if err := qs[r][0].Wait(); err != nil {
			t.Fatalf("rank %d first queued call: %v", r, err)
		}
	}
	checkSums(t, "first queued call", sends[0], recvs[0])
	if err := qs[0][1].Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("rank 0's cancelled call: %v, want context.Canceled", err)
	}
	err := qs[0][2].Wait()
	if err == nil || errors.Is(err, context.Canceled) || !errors.Is(err, ErrEarlierCancelled) || !strings.Contains(err.Error(), "invocation 3 of this shape") {
		t.Errorf("rank 0's call after the cancelled one: %v, want ErrEarlierCancelled naming invocation 3 (the setup was 1, the first queued call 2), not context.Canceled", err)
	}
	for k := 1; k < 3; k++ {
		if err := qs[1][k].Wait(); err == nil {
			t.Errorf("rank 1's queued call %d succeeded without rank 0", k)
		} else {
			t.Logf("rank 1 queued call %d: %v", k, err)
		}
	}
	sp.both(t, "next call after the cancellation", 70, n, o)
	sp.both(t, "and the one after", 71, n, o)
}

// Item: rank 0 cancels a queued call of a kept shape after its earlier
// call completed; rank 1's copy of that earlier call is still receiving
// its RESULT (held 300 ms on the way to rank 1). The cancellation fails
// the cancelled invocation and the ones after it on both ranks, but not
// the earlier one on rank 1: the AM waits for rank 1 to finish it before
// it ABORTs the collective (protocol 9.7, draining). Before, the AM
// ABORTed at once and rank 1's earlier call failed with the cancellation
// of a call it had nothing to do with.
func TestCancelDoesNotCutAnotherRanksEarlierCall(t *testing.T) {
	sp := newSeqPair(t, 208)
	o := &Options{Timeout: 2 * time.Second}
	const n = 3000
	sp.both(t, "first call", 91, n, o)
	sp.both(t, "second call (persistent set up)", 92, n, o)
	sp.f.delayResults("h2", 300*time.Millisecond)
	qs, sends, recvs := sp.queue(t, 2, 93, n, o)
	for r := range 2 {
		if err := qs[r][0].Wait(); err != nil {
			t.Fatalf("rank %d's call before the cancelled one: %v", r, err)
		}
	}
	checkSums(t, "the call before the cancelled one", sends[0], recvs[0])
	if err := qs[0][1].Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("rank 0's cancelled call: %v, want context.Canceled", err)
	}
	if err := qs[1][1].Wait(); err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Errorf("rank 1's copy of the cancelled call: %v, want a failure naming rank 0's cancellation", err)
	}
	sp.f.delayResults("h2", 0)
	sp.both(t, "next call after the cancellation", 95, n, o)
}

// Item: send and recv overlapping without being the same slice are
// refused before anything is sent; exactly in place is a valid call.
func TestPartialOverlapRefused(t *testing.T) {
	sp := newSeqPair(t, 206)
	const n = 500
	x := vecFor(80, 0, n+1)
	before := sp.reqs.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name       string
		send, recv []float32
	}{{"recv one element on", x[:n], x[1:]}, {"send one element on", x[1:], x[:n]}, {"recv inside send", x[:n], x[100:100]}} {
		err := sp.comms[0].AllReduce(ctx, tc.send, tc.recv, nil)
		if tc.name == "recv inside send" {
			continue // an empty recv of a non-empty send is a length error
		}
		if !errors.Is(err, ErrType) || !strings.Contains(err.Error(), "overlap") {
			t.Errorf("%s: %v, want ErrType naming the overlap", tc.name, err)
		}
	}
	if n := sp.reqs.Load() - before; n != 0 {
		t.Errorf("refused calls sent %d requests", n)
	}
	// In place on both ranks: exact.
	ins := [][]float32{vecFor(81, 0, n), vecFor(81, 1, n)}
	orig := [][]float32{append([]float32(nil), ins[0]...), append([]float32(nil), ins[1]...)}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range sp.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.AllReduce(context.Background(), ins[r], ins[r], nil)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("in place, rank %d: %v", r, err)
		}
	}
	checkSums(t, "in place", orig, ins)
}

// Item: a count of 0 is a no-op: nil at once, no request, no sequence
// number (the ranks' next call meets).
func TestEmptyCallIsNoOp(t *testing.T) {
	sp := newSeqPair(t, 207)
	before := sp.reqs.Load()
	for r, c := range sp.comms {
		if err := c.AllReduce(context.Background(), []float32{}, []float32{}, nil); err != nil {
			t.Errorf("rank %d empty AllReduce: %v", r, err)
		}
		if err := c.AllReduce(context.Background(), []int8(nil), nil, nil); err != nil {
			t.Errorf("rank %d nil AllReduce: %v", r, err)
		}
		if err := c.Reduce(context.Background(), []float32{}, nil, 1, nil); err != nil {
			t.Errorf("rank %d empty Reduce: %v", r, err)
		}
		p, err := c.AllReduceInit([]float32{}, []float32{}, nil)
		if err != nil {
			t.Fatalf("rank %d empty AllReduceInit: %v", r, err)
		}
		if err := p.Run(context.Background()); err != nil {
			t.Errorf("rank %d empty Run: %v", r, err)
		}
		p.Close()
	}
	if err := sp.comms[0].AllReduce(context.Background(), []float32{}, []float32{1}, nil); !errors.Is(err, ErrType) {
		t.Errorf("empty send, non-empty recv: %v, want ErrType", err)
	}
	if n := sp.reqs.Load() - before; n != 0 {
		t.Errorf("empty calls sent %d requests", n)
	}
	sp.both(t, "call after the empty ones", 90, 200, nil)
}

// Item: a call on a persistent collective closed on a live Comm says the
// persistent collective is closed, not the communicator.
func TestPersistentClosedError(t *testing.T) {
	sp := newSeqPair(t, 208)
	x := vecFor(3, 0, 50)
	p, err := sp.comms[0].AllReduceInit(x, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	err = p.Run(context.Background())
	if !errors.Is(err, ErrPersistentClosed) || errors.Is(err, ErrClosed) || strings.Contains(err.Error(), "communicator closed") ||
		!strings.Contains(err.Error(), "persistent collective closed") {
		t.Errorf("Run after p.Close: %v, want ErrPersistentClosed without 'communicator closed'", err)
	}
}

// Item: a rank whose call is cancelled at the AM's barrier tells the AM:
// the other rank's call fails at once, naming it, instead of waiting the
// barrier timeout (2 minutes); then both ranks' next call meets.
func TestCancelAtBarrierFailsOthersPromptly(t *testing.T) {
	sp := newSeqPair(t, 209)
	cl := am.NewClient(sp.url)
	ctx, cancel := context.WithCancel(context.Background())
	q0 := sp.comms[0].AllReduceAsync(ctx, vecFor(1, 0, 100), make([]float32, 100), nil)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		l, err := cl.Ops(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Barriers) == 1 && len(l.Barriers[0].Arrived) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 0 never reached the barrier")
		}
	}
	cancel()
	if err := q0.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0: %v, want context.Canceled", err)
	}
	start := time.Now()
	ctx1, cancel1 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel1()
	err := sp.comms[1].AllReduce(ctx1, vecFor(1, 1, 100), make([]float32, 100), nil)
	if !strings.Contains(err.Error(), "rank 0 (h1) cancelled its call at the barrier") {
		t.Fatalf("rank 1: %v, want the abandon naming rank 0", err)
	}
	if !errors.Is(err, ErrAbandoned) || errors.Is(err, context.Canceled) {
		t.Errorf("rank 1: errors.Is(ErrAbandoned) %v, (context.Canceled) %v; want true, false", errors.Is(err, ErrAbandoned), errors.Is(err, context.Canceled))
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("rank 1 failed after %v, want at once", el)
	}
	sp.both(t, "next call", 2, 100, nil)
	sp.both(t, "and the one after", 3, 100, nil)
}

// Item: connect_timeout in a config file as a duration string (integer
// nanoseconds still work), PRISM_CONNECT_TIMEOUT, and the keys listed in
// a config error.
func TestConfigConnectTimeout(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadConfig(write("a.json", `{"rank": 1, "size": 2, "connect_timeout": "5s"}`))
	if err != nil || c.ConnectTimeout != 5*time.Second || c.Rank != 1 {
		t.Errorf("\"5s\": %+v, %v", c, err)
	}
	c, err = LoadConfig(write("b.json", `{"connect_timeout": 2000000000}`))
	if err != nil || c.ConnectTimeout != 2*time.Second {
		t.Errorf("integer nanoseconds: %v, %v", c.ConnectTimeout, err)
	}
	if _, err = LoadConfig(write("c.json", `{"connect_timeout": "soon"}`)); err == nil || !strings.Contains(err.Error(), "connect_timeout") {
		t.Errorf("bad duration: %v", err)
	}
	if _, err = LoadConfig(write("d.json", `{"conect_timeout": "5s"}`)); err == nil || !strings.Contains(err.Error(), "connect_timeout, persistent_shapes") {
		t.Errorf("unknown key: %v, want the keys listed with connect_timeout", err)
	}
	t.Setenv("PRISM_CONFIG", "")
	t.Setenv("PRISM_CONNECT_TIMEOUT", "750ms")
	if c, err = ConfigFromEnv(); err != nil || c.ConnectTimeout != 750*time.Millisecond {
		t.Errorf("PRISM_CONNECT_TIMEOUT=750ms: %v, %v", c.ConnectTimeout, err)
	}
	t.Setenv("PRISM_CONNECT_TIMEOUT", "5")
	if _, err = ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "Config.ConnectTimeout") {
		t.Errorf("PRISM_CONNECT_TIMEOUT=5: %v, want an error naming Config.ConnectTimeout", err)
	}
	if err := (&Config{Rank: 0, Size: 0}).Validate(); err == nil || !strings.Contains(err.Error(), "Config.Size (prismctl --size, PRISM_SIZE)") {
		t.Errorf("validate: %v", err)
	}
}

// Item: the AM's hint for a rank on the wrong host speaks prismctl's
// flags; the library adds the Config fields.
func TestWrongNodeHintNamesConfig(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	// Rank on h1's interface saying it is h2.
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 1, Iface: "mem0", Job: 210, Coordinator: url, Node: "h2"}, f.attach("h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.AllReduce(context.Background(), []float32{1}, []float32{0}, nil)
	if err == nil || !strings.Contains(err.Error(), "pass --node h1") || !strings.Contains(err.Error(), "Config.Node (prismctl --node, PRISM_NODE)") {
		t.Fatalf("%v, want the hint naming Config.Node", err)
	}
}

// Item: rank 1 calls another length while rank 0's call of the shape both
// repeated runs on its persistent collective (no AM round trip). Both
// fail; rank 1, waiting at the AM's barrier, hears at once when rank 0's
// invocation fails (not after the barrier timeout), with how the calls
// differ; and every later call meets the other rank's same call. Before,
// the invocation took no sequence number: rank 1 stayed one call ahead for
// good, and once both called one shape again, rank 0's call was summed
// with rank 1's previous one, without an error.
func TestDivergentCallOnPersistentShapeKeepsSequence(t *testing.T) {
	sp := newSeqPair(t, 210)
	o := &Options{Timeout: 500 * time.Millisecond} // the invocation without rank 1 fails soon
	sp.both(t, "first call of the shape", 1, 200, o)
	if st := sp.both(t, "second call (persistent)", 2, 200, o); !st[0].AutoPersistent || !st[1].AutoPersistent {
		t.Fatalf("second call of the shape not persistent: %+v", st)
	}
	errs, took := sp.each(3, [2]int{200, 201}, o)
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("divergent call: rank 0 %v, rank 1 %v; want both to fail", errs[0], errs[1])
	}
	if s := errs[1].Error(); !strings.Contains(s, "rank 0 (h1) will not come to the barrier") || !strings.Contains(s, "invocation 2") ||
		!strings.Contains(s, "vector_len 200 vs 201") {
		t.Errorf("rank 1: %v\nwant rank 0's abandon of its persistent invocation 3 and the length it had", errs[1])
	}
	// Rank 0 gave it up, and the calls differ: both.
	if !errors.Is(errs[1], ErrAbandoned) || !errors.Is(errs[1], ErrMismatch) {
		t.Errorf("rank 1: %v: not ErrAbandoned and ErrMismatch", errs[1])
	}
	if took[1] > 10*time.Second {
		t.Errorf("rank 1 failed after %v, want soon after rank 0's invocation (%v), not the barrier timeout", took[1], took[0])
	}
	// Every later call pairs with the other rank's same call: an ordinary
	// shape three times, then the repeated shape again.
	for k := range 3 {
		sp.both(t, fmt.Sprintf("ordinary call %d after", k+1), uint64(10+k), 200, &Options{Ordinary: true})
	}
	// The repeated shape: rank 0 saw its collective fail and sets up a
	// new one; rank 1 did not (its call was the other length) and runs
	// the next invocation on the old one, which the switch failed. Both
	// calls fail, with errors (doc.go: a failure some ranks saw), and from
	// the next one on both ranks agree again.
	if errs, _ = sp.each(20, [2]int{200, 200}, o); errs[0] == nil || errs[1] == nil {
		t.Fatalf("first call of the repeated shape after: rank 0 %v, rank 1 %v; want both to fail (rank 1's collective of it failed without it)", errs[0], errs[1])
	}
	for k := range 3 {
		sp.both(t, fmt.Sprintf("call %d of the repeated shape after", k+2), uint64(21+k), 200, o)
	}
}

// TestBarrierAMStopped: the AM stops answering (as under SIGSTOP: its
// socket still takes requests, and nothing answers them) while a rank
// waits at its barrier with no deadline of its own. The rank's call fails
// with ErrUnreachable, saying the AM stopped answering, once its checks
// went unanswered barrierLost times; before, it waited for ever.
func TestBarrierAMStopped(t *testing.T) {
	defer func(a, b, c, d time.Duration) {
		barrierNotice, barrierNoticeEvery, barrierRecheck, barrierAsk = a, b, c, d
	}(
		barrierNotice, barrierNoticeEvery, barrierRecheck, barrierAsk)
	barrierNotice, barrierNoticeEvery, barrierRecheck, barrierAsk = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond
	f := newMemFabric(t, "single")
	target, err := url.Parse(f.startAM("h1"))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var stopped atomic.Bool
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopped.Load() {
			<-release // taken, never answered
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	c, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 2, Iface: "mem0", Job: 72, Coordinator: srv.URL, Node: "h1"}, f.attach("h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := c.AllReduceAsync(context.Background(), make([]float32, 10), make([]float32, 10), nil)
	time.Sleep(50 * time.Millisecond) // at the barrier
	stopped.Store(true)
	start := time.Now()
	select {
	case <-q.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits 10 s after the AM stopped answering")
	}
	err = q.Wait()
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "stopped answering while rank 0 waited at the barrier of job 72") {
		t.Fatalf("AllReduce: %v, want ErrUnreachable saying the AM stopped answering", err)
	}
	t.Logf("failed %v after the AM stopped: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestBarrierShortDeadlineNamesMissing: a call whose deadline ends at the
// barrier before the first notice still names the ranks the barrier waits
// for (it asks the AM once before abandoning); before, a 5 s deadline got
// "context deadline exceeded" alone.
func TestBarrierShortDeadlineNamesMissing(t *testing.T) {
	sp := newSeqPair(t, 211)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := sp.comms[0].AllReduce(ctx, vecFor(1, 0, 10), make([]float32, 10), nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "for ranks 1 (arrived: 0)") {
		t.Fatalf("AllReduce: %v, want the deadline naming rank 1 as missing", err)
	}
	// Rank 1's call of that number hears rank 0 gave it up, and the next
	// call meets.
	if err := sp.comms[1].AllReduce(context.Background(), vecFor(1, 1, 10), make([]float32, 10), nil); !errors.Is(err, ErrAbandoned) {
		t.Fatalf("rank 1: %v, want ErrAbandoned", err)
	}
	sp.both(t, "next call", 2, 10, nil)
}

// Item: ranks whose marks of a shape differ (rank 0 forgot it: its first
// call's deadline ended after the AM's barrier completed, so it got no
// grant and took its mark back, while rank 1 was granted) agree again
// within a few calls. Before, rank 0 made an ordinary first call and rank
// 1 a persistent setup at every call of the shape, and the AM refused
// both as a mismatch for as long as the Comm lived (QA walkthrough).
func TestDivergentMarksConverge(t *testing.T) {
	sp := newSeqPair(t, 212)
	sp.both(t, "first call of the shape", 1, 100, nil)
	sp.comms[0].forgetShape(shapeOf("allreduce", 0, elems{format: parser.FormatFP32, n: 100}, Options{}))
	ok := 0
	for k := range 4 {
		errs, _ := sp.each(uint64(10+k), [2]int{100, 100}, nil)
		if errs[0] == nil && errs[1] == nil {
			ok++
		} else if ok > 0 {
			t.Fatalf("call %d failed after the ranks agreed: %v / %v", k+1, errs[0], errs[1])
		}
	}
	if ok < 2 {
		t.Fatalf("%d of 4 calls after the marks diverged succeeded, want the ranks to agree again within 2", ok)
	}
	sp.both(t, "and exact", 20, 100, nil)
}

// Item: a rank whose Comm could not start (here: it never makes one)
// gives up its first call with GiveUpFirstCall, and the other rank's
// first call fails at once quoting why, instead of waiting out the AM's
// barrier timeout (2 minutes) for it; the job run again meets.
func TestGiveUpFirstCall(t *testing.T) {
	err := giveUpAgainstRank0(t, 213, Config{Rank: 1, Size: 2, Iface: "eth9", Node: "h2"}, "it could not start: no interface eth9")
	if !errors.Is(err, ErrAbandoned) || !strings.Contains(err.Error(), "rank 1 (h2) will not come to the barrier: it could not start: no interface eth9") {
		t.Fatalf("rank 0: %v, want the abandon quoting rank 1's reason", err)
	}
}

// giveUpAgainstRank0 has rank 0 of job make its first call, rank 1 give
// its first call up with GiveUpFirstCall (cfg, its Job and Coordinator
// filled in) quoting reason, and returns rank 0's error, which must come
// at once, not after the AM's barrier timeout.
func giveUpAgainstRank0(t *testing.T, job uint64, cfg Config, reason string) error {
	t.Helper()
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	c0, err := NewCommConn(context.Background(), Config{Rank: 0, Size: 2, Iface: "mem0", Job: job, Coordinator: url, Node: "h1"}, f.attach("h1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	q := c0.AllReduceAsync(context.Background(), vecFor(1, 0, 50), make([]float32, 50), nil)
	time.Sleep(50 * time.Millisecond) // at the barrier
	start := time.Now()
	cfg.Job, cfg.Coordinator = job, url
	if err := GiveUpFirstCall(context.Background(), cfg, "allreduce", make([]float32, 50), 0, nil, reason); err != nil {
		t.Fatal(err)
	}
	err = q.Wait()
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("rank 0 failed %v after the give-up, want at once", el)
	}
	return err
}

// TestGiveUpRankOutsideSize: a rank whose own settings are wrong (rank 1
// of a size it says is 1, where the other says 2) cannot make a request
// the AM takes, and its give-up is taken all the same: the other rank's
// first call fails at once naming it and what was wrong, instead of
// waiting the barrier timeout (prismctl with a mistyped --size).
func TestGiveUpRankOutsideSize(t *testing.T) {
	err := giveUpAgainstRank0(t, 214, Config{Rank: 1, Size: 1, Iface: "eth0", Node: "h2"}, "it could not start: --rank 1 is outside 0..0 (--size 1)")
	if !errors.Is(err, ErrAbandoned) || !strings.Contains(err.Error(), "rank 1 (h2) will not come to the barrier: it could not start: --rank 1 is outside 0..0 (--size 1); its own request is invalid") {
		t.Fatalf("rank 0: %v, want the abandon quoting rank 1's flags", err)
	}
	// A rank whose settings are wrong some other way still is refused.
	if err := GiveUpFirstCall(context.Background(), Config{Rank: 0, Size: 2, Iface: "eth0", Job: 214, Node: "h2"},
		"allreduce", make([]float32, 50), 0, nil, "x"); err == nil {
		t.Error("a config without a coordinator was taken")
	}
}

// TestCancelledBeforeCallFailsOthersPromptly: a call made with a context
// that is already cancelled fails at once on its rank, and the rank that
// made the call with a live context, which sent everything and waits for
// its RESULT, fails within a second, naming the cancelled rank (the leaf
// announces the AM's ABORT: PROGRESS FAILED), not after its 6 s timeout.
// The next calls pair up and are exact.
func TestCancelledBeforeCallFailsOthersPromptly(t *testing.T) {
	sp := newSeqPair(t, 211)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o := &Options{Timeout: 6 * time.Second}
	start := time.Now()
	q1 := sp.comms[1].AllReduceAsync(context.Background(), vecFor(1, 1, 100), make([]float32, 100), o)
	err0 := sp.comms[0].AllReduce(ctx, vecFor(1, 0, 100), make([]float32, 100), o)
	if !errors.Is(err0, context.Canceled) {
		t.Fatalf("rank 0: %v, want context.Canceled", err0)
	}
	err1 := q1.Wait()
	if err1 == nil || !strings.Contains(err1.Error(), "rank 0 (h1)") {
		t.Fatalf("rank 1: %v, want an error naming rank 0", err1)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("rank 1 failed after %v, want within a second (its timeout is 6 s): %v", el, err1)
	}
	sp.both(t, "next call", 2, 100, o)
	sp.both(t, "and the one after", 3, 100, o)
}

// TestCloseLeavesNoGoroutines: a closed communicator leaves no goroutine
// behind, its connections to the AM included (the HTTP transport kept
// them, and two goroutines each, for its 90 s idle timeout: six
// open/close rounds went from 1 to 25 goroutines in a user's program).
func TestCloseLeavesNoGoroutines(t *testing.T) {
	f := newMemFabric(t, "single")
	url := f.startAM("h1")
	settle := func(want int) int {
		n := runtime.NumGoroutine()
		for end := time.Now().Add(2 * time.Second); n > want && time.Now().Before(end); n = runtime.NumGoroutine() {
			time.Sleep(20 * time.Millisecond)
		}
		return n
	}
	base := settle(0)
	for round := range 4 {
		comms := make([]*Comm, 2)
		for r, h := range []string{"h1", "h2"} {
			c, err := NewCommConn(context.Background(), Config{Rank: r, Size: 2, Iface: "mem0", Job: uint64(300 + round), Coordinator: url, Node: h}, f.attach(h))
			if err != nil {
				t.Fatal(err)
			}
			comms[r] = c
		}
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.AllReduce(context.Background(), vecFor(1, r, 100), make([]float32, 100), nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, c := range comms {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := settle(base); n > base {
		t.Fatalf("%d goroutines after 4 rounds of two Comms opened, used and closed, %d before", n, base)
	}
}

// TestCancelledInvocationFailsOthersPromptly: a rank whose call of a kept
// shape (an invocation of its persistent collective) is made with a
// context already cancelled fails it at once, and the other rank, which
// runs that invocation, fails within a second naming the cancellation
// (the AM ABORTs the operation and the switch announces it), not at its
// 5 s timeout blaming a rank that "stopped contributing". The next calls
// pair up and are exact.
func TestCancelledInvocationFailsOthersPromptly(t *testing.T) {
	sp := newSeqPair(t, 213)
	o := &Options{Timeout: 5 * time.Second}
	sp.both(t, "first call", 1, 100, o)
	sp.both(t, "second call (persistent setup)", 2, 100, o)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	q1 := sp.comms[1].AllReduceAsync(context.Background(), vecFor(3, 1, 100), make([]float32, 100), o)
	if err := sp.comms[0].AllReduce(ctx, vecFor(3, 0, 100), make([]float32, 100), o); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0: %v, want context.Canceled", err)
	}
	err1 := q1.Wait()
	if err1 == nil || !strings.Contains(err1.Error(), "cancelled before it ran on this rank") || strings.Contains(err1.Error(), "stopped contributing") {
		t.Fatalf("rank 1: %v, want the AM's word that rank 0 cancelled it", err1)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("rank 1 failed after %v, want within a second (its timeout is 5 s)", el)
	}
	sp.both(t, "next call", 4, 100, o)
	sp.both(t, "and the one after", 5, 100, o)
}

// TestCallRightAfterCancelledOneRuns: rank 0's call of a kept shape is
// cancelled before it runs, and rank 0 makes its next call of the shape
// at once, before the cancelled one's clean-up could run. That next call
// must set up afresh, as the shape's next call does on rank 1 (made after
// its copy of the cancelled call failed), and be exact on both. It found
// the cancelled call's collective still kept, queued behind it, failed
// with ErrEarlierCancelled and abandoned its seq, which failed rank 1's
// call too: the outcome of a call depended on a few microseconds.
func TestCallRightAfterCancelledOneRuns(t *testing.T) {
	sp := newSeqPair(t, 214)
	o := &Options{Timeout: 3 * time.Second}
	const n = 500
	sp.both(t, "first call", 1, n, o)
	sp.both(t, "second call (persistent set up)", 2, n, o)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	q1 := sp.comms[1].AllReduceAsync(context.Background(), vecFor(3, 1, n), make([]float32, n), o)
	if err := sp.comms[0].AllReduce(cancelled, vecFor(3, 0, n), make([]float32, n), o); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 0's cancelled call: %v, want context.Canceled", err)
	}
	sends := [][]float32{vecFor(4, 0, n), vecFor(4, 1, n)}
	recvs := [][]float32{make([]float32, n), make([]float32, n)}
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	q0 := sp.comms[0].AllReduceAsync(ctx, sends[0], recvs[0], o) // at once
	if err := q1.Wait(); err == nil {
		t.Fatal("rank 1's copy of the cancelled call succeeded without rank 0")
	}
	q1b := sp.comms[1].AllReduceAsync(ctx, sends[1], recvs[1], o)
	for r, q := range []*Request{q0, q1b} {
		if err := q.Wait(); err != nil {
			t.Fatalf("rank %d's call after the cancelled one: %v", r, err)
		}
	}
	checkSums(t, "the call after the cancelled one", sends, recvs)
}

// TestRankGoneFailsNextCall: after a collective both ranks finished, rank
// 1's process dies (its presence stream closes without a goodbye: as a
// killed process's does). Rank 0's next call fails within about the AM's
// grace, naming rank 1 and its node, not at the barrier timeout (two
// minutes by default). Then a rank that closes its communicator on
// purpose is named as such.
func TestRankGoneFailsNextCall(t *testing.T) { rankGoneFailsNext(t, 212, 1) }

// rankGoneFailsNext runs calls matched calls of one shape on both ranks
// of a new pair (job), then rank 1's process dies (its presence stream
// closes without a goodbye, as a killed process's does), and checks that
// rank 0's next call of the shape fails as ErrRankGone naming rank 1
// within about the AM's 1 s grace.
func rankGoneFailsNext(t *testing.T, job uint64, calls int) {
	sp := newSeqPair(t, job)
	o := &Options{Timeout: 6 * time.Second}
	for k := range calls {
		sp.both(t, fmt.Sprintf("call %d", k+1), uint64(1+k), 100, o)
	}
	c1 := sp.comms[1]
	c1.presenceStop() // the stream's connection closes; no POST /v1/presence/leave
	<-c1.presenceDone
	start := time.Now()
	err := sp.comms[0].AllReduce(context.Background(), vecFor(uint64(1+calls), 0, 100), make([]float32, 100), o)
	if !errors.Is(err, ErrRankGone) || !strings.Contains(err.Error(), "rank 1 (h2) is gone") {
		t.Fatalf("rank 0: %v, want ErrRankGone naming rank 1 (h2)", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("rank 0 failed after %v, want within about the AM's 1 s grace", el)
	}
}

// TestRankGoneFailsPersistentCall: the ranks rest between calls of a kept
// shape (a persistent collective) when rank 1's process dies. Rank 0's
// next call of the shape fails within about the AM's grace, not its 6 s
// timeout, and errors.Is classifies it as ErrRankGone: the AM fails a
// persistent collective a gone rank had not freed, tells rank 0 on its
// presence stream, and its diagnosis says why (reason rank_gone). It was
// left to run rank 0's next invocation to its timeout, as ErrTimeout.
func TestRankGoneFailsPersistentCall(t *testing.T) { rankGoneFailsNext(t, 215, 2) }

// TestRankClosedFailsOthers: rank 1 closes its communicator while rank 0
// waits at a call rank 1 will never make: rank 0 fails at once, told so.
func TestRankClosedFailsOthers(t *testing.T) {
	sp := newSeqPair(t, 213)
	o := &Options{Timeout: 6 * time.Second}
	sp.both(t, "first call", 1, 100, o)
	q := sp.comms[0].AllReduceAsync(context.Background(), vecFor(2, 0, 100), make([]float32, 100), o)
	time.Sleep(200 * time.Millisecond) // rank 0 waits at the barrier
	start := time.Now()
	if err := sp.comms[1].Close(); err != nil {
		t.Fatal(err)
	}
	err := q.Wait()
	if !errors.Is(err, ErrRankGone) || !strings.Contains(err.Error(), "rank 1 (h2) closed its communicator") {
		t.Fatalf("rank 0: %v, want ErrRankGone saying rank 1 (h2) closed its communicator", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("rank 0 failed %v after rank 1's Close, want at once", el)
	}
}

// TestAMFailureSaysOwnLinkDown: the AM's word that it failed an operation
// (presence "failed <id>") can reach a rank before its own timer fires.
// When that rank's interface went down, its error still says so, as its
// own timeout's would: that is what the person on that host must fix
// (e2e TestLinkFlap caught the message without it, when the AM won).
func TestAMFailureSaysOwnLinkDown(t *testing.T) {
	now := time.Now().UnixNano()
	c := &Comm{cfg: Config{Iface: "eth7"}, downSince: now - int64(1500*time.Millisecond)}
	am := fmt.Errorf("%w: %w 1-2-3-4-5 (its presence stream said so)", ErrFailed, errAMFailed)
	got := c.withLink(now, am).Error()
	if !strings.Contains(got, "interface eth7 went down 1.5s ago") || !errors.Is(c.withLink(now, am), ErrFailed) {
		t.Errorf("the AM's failure with the link down: %q, want it to say interface eth7 went down 1.5s ago, and stay ErrFailed", got)
	}
	other := fmt.Errorf("%w: leaf l1 reports the operation FAILED", ErrFailed)
	if got := c.withLink(now, other); got != other {
		t.Errorf("a leaf's FAILED announcement: %v, want it unchanged (the leaf said what failed)", got)
	}
}

package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// autoRanks are one Comm per host of an in-memory fabric, for the
// automatic persistence tests.
type autoRanks struct {
	comms []*Comm
	url   string
	job   uint64
}

func newAutoRanks(t *testing.T, topo string, hosts []string, job uint64, shapes int) *autoRanks {
	t.Helper()
	f := newMemFabric(t, topo)
	ar := &autoRanks{url: f.startAM(hosts[0]), job: job}
	for r, h := range hosts {
		c, err := NewCommConn(context.Background(), Config{Rank: r, Size: len(hosts), Iface: "mem0", Job: job,
			Coordinator: ar.url, Node: h, PersistentShapes: shapes}, f.attach(h))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ar.comms = append(ar.comms, c)
	}
	return ar
}

// call is one collective every rank issues, in the order of a test's list.
type call struct {
	coll string
	root int
	n    int
	acc  string
}

func (c call) String() string { return fmt.Sprintf("%s root %d n %d %s", c.coll, c.root, c.n, c.acc) }

// issue starts call k on every rank with fresh buffers (a new input each
// time, so a result written into an earlier call's buffers shows) and
// returns each rank's request and buffers. Calls are issued in the same
// order on every rank.
func (ar *autoRanks) issue(k int, cl call) ([]*Request, [][]float32, [][]float32) {
	qs, sends, recvs := make([]*Request, len(ar.comms)), make([][]float32, len(ar.comms)), make([][]float32, len(ar.comms))
	for r, c := range ar.comms {
		sends[r] = vecFor(uint64(5000+k), r, cl.n)
		if cl.acc == "fp32" {
			for i := range sends[r] {
				sends[r][i] = float32(int(sends[r][i]) % 4096)
			}
		}
		recvs[r] = make([]float32, cl.n)
		for i := range recvs[r] {
			recvs[r][i] = float32(math.NaN())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		opts := &Options{Acc: cl.acc}
		if cl.coll == "allreduce" {
			qs[r] = c.AllReduceAsync(ctx, sends[r], recvs[r], opts)
		} else {
			qs[r] = c.ReduceAsync(ctx, sends[r], recvs[r], cl.root, opts)
		}
		go func() { <-qs[r].Done(); cancel() }()
	}
	return qs, sends, recvs
}

// check waits for call k and compares its results with the exact sums.
func checkCall(t *testing.T, k int, cl call, qs []*Request, sends, recvs [][]float32) []Stats {
	t.Helper()
	sts := make([]Stats, len(qs))
	for r, q := range qs {
		if err := q.Wait(); err != nil {
			t.Fatalf("call %d (%v) rank %d: %v", k, cl, r, err)
		}
		sts[r] = q.Stats()
	}
	for r := range recvs {
		if cl.coll == "reduce" && r != cl.root {
			continue
		}
		for i := range recvs[r] {
			if want := exactF32(sends, i); math.Float32bits(want) != math.Float32bits(recvs[r][i]) {
				t.Fatalf("call %d (%v) rank %d element %d: got %g, want %g", k, cl, r, i, recvs[r][i], want)
			}
		}
	}
	return sts
}

// run issues the calls one after another and checks each; it returns every
// call's stats.
func (ar *autoRanks) run(t *testing.T, calls []call) [][]Stats {
	t.Helper()
	var out [][]Stats
	for k, cl := range calls {
		qs, sends, recvs := ar.issue(k, cl)
		out = append(out, checkCall(t, k, cl, qs, sends, recvs))
	}
	return out
}

// persistentOps counts the job's operations on the AM: persistent and
// ordinary.
func (ar *autoRanks) persistentOps(t *testing.T) (persistent, ordinary int) {
	for _, o := range opsOfJob(t, ar.url, ar.job) {
		if o.Persistent {
			persistent++
		} else {
			ordinary++
		}
	}
	return persistent, ordinary
}

// TestAutoPersistentShapes: two shapes called alternately through a tree.
// The first call of an AllReduce shape is ordinary, the second sets up its
// persistent collective, and every later one runs on it with no AM round
// trip, over that call's own buffers; a Reduce shape's calls all go
// through the AM (only its root learns how a call ended); every result is
// exact, and Close frees the switches' contexts.
func TestAutoPersistentShapes(t *testing.T) {
	hosts := []string{"h1", "h2", "h3", "h4"}
	ar := newAutoRanks(t, "spine-leaf", hosts, 81, 0)
	a := call{"allreduce", 0, 700, "kulisch"}
	b := call{"reduce", 2, 50, "fp32"}
	calls := []call{a, b, a, b, a, a, b, a, b, b}
	sts := ar.run(t, calls)
	seen := map[call]int{}
	for k, cl := range calls {
		seen[cl]++
		for r, st := range sts[k] {
			auto, setup := st.AutoPersistent, st.Setup > 0
			if cl.coll == "reduce" {
				if auto || !setup {
					t.Fatalf("call %d (%v) rank %d: auto %v setup %v, want every Reduce call an ordinary collective", k, cl, r, auto, st.Setup)
				}
				continue
			}
			switch nth := seen[cl]; {
			case nth == 1 && (auto || !setup):
				t.Fatalf("call %d (%v, first of its shape) rank %d: auto %v setup %v, want an ordinary collective", k, cl, r, auto, st.Setup)
			case nth == 2 && (!auto || !setup):
				t.Fatalf("call %d (%v, second of its shape) rank %d: auto %v setup %v, want the persistent collective set up", k, cl, r, auto, st.Setup)
			case nth > 2 && (!auto || setup):
				t.Fatalf("call %d (%v, call %d of its shape) rank %d: auto %v setup %v, want an invocation with no AM round trip", k, cl, nth, r, auto, st.Setup)
			}
		}
	}
	if p, o := ar.persistentOps(t); p != 1 || o != 6 {
		t.Fatalf("the AM set up %d persistent and %d ordinary operations for the job, want 1 and 6 (the AllReduce's first call, and every Reduce call)", p, o)
	}
	for _, c := range ar.comms {
		if err := c.Close(); err != nil {
			t.Fatalf("Comm.Close: %v", err)
		}
	}
	waitAllReleased(t, ar.url, ar.job, 7)
}

// waitAllReleased waits up to 5 s for every one of job's want operations
// to be released on the AM without error.
func waitAllReleased(t *testing.T, url string, job uint64, want int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ops := opsOfJob(t, url, job)
		released := 0
		for _, o := range ops {
			if o.State == "released" && o.Error == nil {
				released++
			}
		}
		if released == want && len(ops) == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("job %d on the AM: %+v, want its %d operations released", job, ops, want)
		}
	}
}

// TestAutoPersistentQueued: calls of one shape issued at once, before the
// earlier ones finished, run one after another in call order on every
// rank (whichever goroutine happens to run first), each over its own
// buffers.
func TestAutoPersistentQueued(t *testing.T) {
	ar := newAutoRanks(t, "spine-leaf", []string{"h1", "h2", "h3", "h4"}, 82, 0)
	a := call{"allreduce", 0, 2000, "kulisch"}
	type issued struct {
		qs           []*Request
		sends, recvs [][]float32
	}
	var all []issued
	for k := range 6 {
		qs, sends, recvs := ar.issue(k, a)
		all = append(all, issued{qs, sends, recvs})
	}
	for k, is := range all {
		sts := checkCall(t, k, a, is.qs, is.sends, is.recvs)
		if k >= 2 && (!sts[0].AutoPersistent || sts[0].Setup > 0) {
			t.Fatalf("call %d: auto %v setup %v, want an invocation of the shape's persistent collective", k, sts[0].AutoPersistent, sts[0].Setup)
		}
	}
}

// TestAutoPersistentEvicts: with room for one shape, a newer shape takes
// the older one's place (its operation released on the AM), and the older
// shape starts over; results stay exact throughout.
func TestAutoPersistentEvicts(t *testing.T) {
	ar := newAutoRanks(t, "single", []string{"h1", "h2"}, 83, 1)
	a := call{"allreduce", 0, 300, "kulisch"}
	b := call{"allreduce", 0, 301, "kulisch"}
	ar.run(t, []call{a, a, a, b, b, b, a, a})
	// a: ordinary, persistent (evicted by b), then persistent again: a
	// shape seen before is set up at once; b: ordinary, persistent
	// (evicted by a's second).
	p, o := ar.persistentOps(t)
	if p != 3 || o != 2 {
		t.Fatalf("the AM set up %d persistent and %d ordinary operations, want 3 and 2", p, o)
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var active []string
		for _, op := range opsOfJob(t, ar.url, ar.job) {
			if op.State != "released" {
				active = append(active, fmt.Sprintf("%s (%s, persistent %v)", op.ID, op.State, op.Persistent))
			}
		}
		if len(active) == 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("operations not released: %v, want only the kept shape's", active)
		}
	}
}

// TestAutoPersistentOff: PersistentShapes < 0 runs every call as an
// ordinary collective through the AM.
func TestAutoPersistentOff(t *testing.T) {
	ar := newAutoRanks(t, "single", []string{"h1", "h2"}, 84, -1)
	a := call{"allreduce", 0, 100, "kulisch"}
	for k, sts := range ar.run(t, []call{a, a, a}) {
		if sts[0].AutoPersistent || sts[0].Setup == 0 {
			t.Fatalf("call %d: auto %v setup %v, want an ordinary collective", k, sts[0].AutoPersistent, sts[0].Setup)
		}
	}
	if p, o := ar.persistentOps(t); p != 0 || o != 3 {
		t.Fatalf("the AM set up %d persistent and %d ordinary operations, want 0 and 3", p, o)
	}
}

// TestAutoPersistentClosedWhileQueued: closing the Comms while calls of a
// kept shape wait in its queue ends every call, with its result,
// ErrClosed or an error naming the closed communicator, never a hang.
func TestAutoPersistentClosedWhileQueued(t *testing.T) {
	ar := newAutoRanks(t, "single", []string{"h1", "h2"}, 86, 0)
	a := call{"allreduce", 0, 5000, "kulisch"}
	ar.run(t, []call{a, a})
	var qs []*Request
	for k := range 5 {
		q, _, _ := ar.issue(10+k, a)
		qs = append(qs, q...)
	}
	// Closed together, as a job's processes end; a rank whose invocation
	// the other's Close cut short fails it, saying so (the AM names the
	// communicator that closed).
	var wg sync.WaitGroup
	for _, c := range ar.comms {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
	for i, q := range qs {
		select {
		case <-q.Done():
			if err := q.Wait(); err != nil && !errors.Is(err, ErrClosed) && !strings.Contains(err.Error(), "communicator closed") {
				t.Errorf("call %d: %v, want success, ErrClosed or an error saying a communicator closed", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d still running 10 s after Close", i)
		}
	}
}

// TestReduceRootOnlyFailureKeepsPairing: a Reduce whose sum the root's
// INT8 output cannot hold fails at the root alone (ErrInexact), and the
// other ranks' call returns nil, as documented. The ranks' later calls of
// the shape still pair up and are exact at once. Kept persistent, the
// other ranks ran ahead on invocations while the root set the shape up
// again, and every rank then waited out a barrier (2 minutes).
func TestReduceRootOnlyFailureKeepsPairing(t *testing.T) {
	hosts := []string{"h1", "h2", "h3", "h4"}
	ar := newAutoRanks(t, "spine-leaf", hosts, 83, 0)
	const root, n = 3, 50
	for k := range 5 {
		sends := make([][]int8, len(hosts))
		qs := make([]*Request, len(hosts))
		recv := make([]int8, n)
		start := time.Now()
		for r, c := range ar.comms {
			sends[r] = make([]int8, n)
			for i := range sends[r] {
				sends[r][i] = int8((i+r+k)%7 - 3)
				if k == 1 && i == 7 {
					sends[r][i] = 100 // 400 at the root: no INT8
				}
			}
			var rv []int8
			if r == root {
				rv = recv
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			qs[r] = c.ReduceAsync(ctx, sends[r], rv, root, nil)
		}
		for r, q := range qs {
			err := q.Wait()
			switch {
			case k == 1 && r == root:
				if !errors.Is(err, ErrInexact) {
					t.Fatalf("call %d: root: %v, want ErrInexact", k, err)
				}
			case err != nil:
				t.Fatalf("call %d: rank %d: %v", k, r, err)
			}
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("call %d took %v: the ranks' calls no longer paired up", k, took)
		}
		if k == 1 {
			continue
		}
		for i := range recv {
			want := 0
			for r := range sends {
				want += int(sends[r][i])
			}
			if int(recv[i]) != want {
				t.Fatalf("call %d element %d: %d, want %d", k, i, recv[i], want)
			}
		}
	}
}

// TestCancelTellsRanksOnOtherLeaf: on spine-leaf, rank 1 (leaf l1)
// cancels its call of a kept shape before it runs. Ranks 2 and 3 (leaf
// l2) had sent all their data and waited only for RESULT: the AM's ABORT
// left their leaf silent, and they failed at their RESULT timeout
// (Timeout + 1 s) with ErrTimeout. The AM now tells their processes on
// their presence streams: they fail at once, with the AM's diagnosis
// naming rank 1's cancellation, and the next call is exact on every rank.
func TestCancelTellsRanksOnOtherLeaf(t *testing.T) {
	hosts := []string{"h1", "h2", "h3", "h4"}
	ar := newAutoRanks(t, "spine-leaf", hosts, 84, 0)
	const n = 300
	o := &Options{Timeout: 4 * time.Second}
	run := func(what string, seed uint64, cancelRank int) []error {
		errs := make([]error, len(hosts))
		sends, recvs := make([][]float32, len(hosts)), make([][]float32, len(hosts))
		var wg sync.WaitGroup
		for r, c := range ar.comms {
			sends[r], recvs[r] = vecFor(seed, r, n), make([]float32, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if r == cancelRank {
				cancel()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				errs[r] = c.AllReduce(ctx, sends[r], recvs[r], o)
			}()
		}
		wg.Wait()
		if cancelRank < 0 {
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s: rank %d: %v", what, r, err)
				}
			}
			checkSums(t, what, sends, recvs)
		}
		return errs
	}
	run("first call", 1, -1)
	run("second call (persistent set up)", 2, -1)
	t0 := time.Now()
	errs := run("the cancelled call", 3, 1)
	el := time.Since(t0)
	if !errors.Is(errs[1], context.Canceled) {
		t.Errorf("rank 1: %v, want context.Canceled", errs[1])
	}
	for _, r := range []int{0, 2, 3} {
		if errs[r] == nil || errors.Is(errs[r], ErrTimeout) || !strings.Contains(errs[r].Error(), "cancelled before it ran") {
			t.Errorf("rank %d: %v, want a failure naming rank 1's cancellation, not a timeout", r, errs[r])
		}
	}
	if el > 2500*time.Millisecond {
		t.Errorf("the ranks' copies of the cancelled call failed after %v, want well within their 4 s timeout", el)
	}
	run("the next call", 4, -1)
}

package conformance

// A rank that never sends (5.1 Timeout, 7 failure announcement, 9.2
// diagnosis), and persistent operations (6.1 PUSH, 9.7 keepalives).

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Findings of this file (see the report).
const (
	rkFErrorNode      = 4 // (ii) 9.4: an operation_failed error does not name the switch that failed
	rkFKeepaliveMsg   = 5 // (ii) 9.7: the keepalive failure's message does not begin as documented
	rkFRestingMissing = 6 // (i) 5.2: Missing Stream of a resting persistent collective at a LEAF
)

// rkCheckAnnouncements checks the failure announcement a rank received:
// three PROGRESS FAILED with Packet ID 0, at least 10 ms apart, with the
// window's Committed Element (7). It returns the first one's time.
// Each carries Failure Cause TIMEOUT (7: where the failure began; rank 3
// timed out at l2), with Failure Hops 0 when the rank's own leaf began it
// (origin) and any count otherwise (the failure's path depends on which
// timer fires first).
func rkCheckAnnouncements(t *testing.T, k *rkRank, committed uint32, origin bool) time.Time {
	t.Helper()
	all := k.failedAnnouncements()
	if len(all) == 0 {
		t.Errorf("rank %d: no PROGRESS FAILED with Packet ID 0 (7: a context that becomes FAILED announces it to the peer of every stream it receives)", k.r)
		return time.Time{}
	}
	if len(all) != 3 {
		t.Errorf("rank %d: %d failure announcements, want 3 (7: three times, 10 ms apart, then never again)", k.r, len(all))
	}
	for i, p := range all {
		if p.P.Committed != committed {
			t.Errorf("rank %d announcement %d: Committed %d, want the window's %d", k.r, i, p.P.Committed, committed)
		}
		if p.P.FailCause != 1 || origin && p.P.FailHops != 0 {
			t.Errorf("rank %d announcement %d: Failure Cause %d, Failure Hops %d; want TIMEOUT (1)%s", k.r, i, p.P.FailCause, p.P.FailHops,
				map[bool]string{true: " with 0 hops: its leaf l2 timed out on rank 3", false: ""}[origin])
		}
		if i == 0 {
			continue
		}
		// Kernel receive times where the socket gave them (see rxFrame).
		prev, at := all[i-1].Kernel, p.Kernel
		if prev.IsZero() || at.IsZero() {
			prev, at = all[i-1].At, p.At
		}
		if at.Sub(prev) < 5*time.Millisecond { // 7: 10 ms by the node's timer; queues shorten it
			t.Errorf("rank %d: announcements %d and %d %v apart (7: 10 ms apart)", k.r, i-1, i, at.Sub(prev))
		}
	}
	return all[0].At
}

// rkSilentRank: rank 3 begins and then sends nothing. Its leaf l2 fails
// after Timeout with cause TIMEOUT, the failure reaches every node and
// every rank as PROGRESS FAILED, the ranks report done with an error, and
// the AM's status names rank 3 (5.1, 7, 9.2).
func (e *rkEnv) rkSilentRank(t *testing.T) {
	const timeout = 1000
	const n = 2000
	job := e.job()
	reqs := make([]map[string]any, 4)
	for r := range reqs {
		reqs[r] = rkBeginReq(job, r, 4, e.hosts[r], "allreduce", "kulisch", n)
		reqs[r]["timeout_ms"] = uint32(timeout)
	}
	grants, sent, ok := e.rkBeginFour(t, reqs, -1)
	if !ok {
		t.FailNow()
	}
	id := grants[0].ID
	ranks := make([]*rkRank, 4)
	for r := range ranks {
		ranks[r] = e.newRank(t, r, grants[r], r == 3)
	}
	grantAt := ranks[0].grantAt
	in := rkInputs(11, 4, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = ranks[r].sendRange(ctx, in[r], 0, n, false)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: DATA: %v (its whole vector should be committed before the failure)", r, err)
		}
	}
	// Every rank hears PROGRESS FAILED.
	deadline := grantAt.Add(timeout*time.Millisecond + 3*time.Second)
	for _, k := range ranks {
		for {
			k.mu.Lock()
			at := k.failedAt
			k.mu.Unlock()
			if !at.IsZero() || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(150 * time.Millisecond) // the rest of the three sets, 10 ms apart
	var first [4]time.Time
	for r, k := range ranks {
		committed := uint32(n)
		if r == 3 {
			committed = 0
		}
		first[r] = rkCheckAnnouncements(t, k, committed, r >= 2)
	}
	lo, hi := sent.Add(timeout*time.Millisecond), grantAt.Add(timeout*time.Millisecond+600*time.Millisecond)
	for r, at := range first {
		if at.IsZero() {
			continue
		}
		t.Logf("rank %d: first PROGRESS FAILED %v after the grant", r, at.Sub(grantAt).Round(time.Millisecond))
		if at.Before(lo.Add(-5*time.Millisecond)) || at.After(hi) {
			t.Errorf("rank %d heard the failure %v after the grant; 5.1 and 7 put it at Timeout (%d ms) after COMMIT, within milliseconds everywhere",
				r, at.Sub(grantAt).Round(time.Millisecond), timeout)
		}
	}
	// The silent, incomplete stream got timer-driven PROGRESS from l2 at
	// least once per Timeout/4 before the failure (7).
	if !first[3].IsZero() {
		tp := ranks[3].timerProgress(grantAt.Add(-100*time.Millisecond), first[3])
		gaps := []time.Duration{}
		prev := grantAt
		for _, p := range tp {
			gaps = append(gaps, p.At.Sub(prev).Round(time.Millisecond))
			prev = p.At
		}
		if len(tp) < 3 {
			t.Errorf("rank 3 (silent, stream incomplete) got %d timer-driven PROGRESS in the %v before l2 failed; 7 says at least one per Timeout/4 = %d ms (gaps %v)",
				len(tp), first[3].Sub(grantAt).Round(time.Millisecond), timeout/4, gaps)
		}
	}
	for _, k := range ranks {
		k.report(t)
	}
	// The runtime channel: ranks 0-2 report the failure, rank 3 never does.
	for r := 1; r < 3; r++ {
		a := e.done(r, id, false, fmt.Sprintf("PROGRESS FAILED from %s", grants[r].Leaf), false, 10*time.Second)
		a.status(t, fmt.Sprintf("rank %d done ok=false", r))
	}
	a := e.done(0, id, false, "PROGRESS FAILED from "+grants[0].Leaf, true, 15*time.Second)
	st, ok := a.status(t, "rank 0 done ok=false wait=true")
	if !ok {
		return
	}
	t.Logf("final status: %s", st)
	if st.State != "failed" {
		t.Errorf("state %q after ranks reported failure, want failed (9.2)", st.State)
	}
	if st.Error == nil {
		t.Errorf("failed operation without error (9.3)")
	} else {
		if st.Error.Code != "operation_failed" {
			t.Errorf("error code %q, want operation_failed (9.4: the operation failed after the grant)", st.Error.Code)
		}
		if st.Error.Rank == nil || *st.Error.Rank != 3 {
			t.Errorf("error rank %v, want 3: the rank behind the Missing Stream of the TIMEOUT node (9.2)", st.Error.Rank)
		}
		msg := st.Error.Message
		// 9.2: the diagnosis lists nodes FAILED with cause TIMEOUT first,
		// then PEER_FAILED ones, deepest first within each, and names the
		// ranks that never reported.
		il2, il1, is1 := strings.Index(msg, "node "+grants[3].Leaf), strings.Index(msg, "node "+grants[0].Leaf), strings.Index(msg, "node "+st.Root)
		if il2 < 0 || il1 < 0 || is1 < 0 || !(il2 < il1 && il1 < is1) {
			t.Errorf("diagnosis %q: want node %s (TIMEOUT) first, then %s and %s (PEER_FAILED, deepest first) (9.2)", msg, grants[3].Leaf, grants[0].Leaf, st.Root)
		}
		if !strings.Contains(msg, "3 (h4)") {
			t.Errorf("diagnosis %q does not name rank 3 (h4), which never reported (9.2)", msg)
		}
		t.Run("error_node", func(t *testing.T) {
			_, has := st.errRaw["node"]
			rkFinding(t, rkFErrorNode, st.Error.Node != grants[3].Leaf,
				"the failed operation's error object is %s: its node field is %q (present: %v), not %s, the switch that failed (9.4: node names the switch that failed)",
				st.errRaw, st.Error.Node, has, grants[3].Leaf)
		})
		if len(st.Error.RollbackIncomplete) != 0 {
			t.Errorf("rollback_incomplete %v: a node did not acknowledge ABORT", st.Error.RollbackIncomplete)
		}
	}
	if got := rkSortedInts(st.RanksDone); fmt.Sprint(got) != "[0 1 2]" {
		t.Errorf("ranks_done %v, want [0 1 2] (rank 3 never reported)", st.RanksDone)
	}
	wantCause := map[string]string{grants[3].Leaf: "TIMEOUT", grants[0].Leaf: "PEER_FAILED", st.Root: "PEER_FAILED"}
	for _, nd := range st.Nodes {
		if nd.State != "ABORTED" {
			t.Errorf("node %s state %q, want ABORTED (9.2: the AM ABORTs every node; 9.3: the last ACK's state)", nd.Name, nd.State)
		}
		if w := wantCause[nd.Name]; nd.FailCause != w {
			t.Errorf("node %s fail_cause %q, want %s (5.2, 9.3)", nd.Name, nd.FailCause, w)
		}
		if nd.Name == grants[3].Leaf && (!strings.Contains(nd.MissingFromWhom, "rank 3") || nd.MissingFrom != 0 ||
			nd.MissingStream != int(grants[3].Data.StreamID)) {
			t.Errorf("node %s: missing_stream %d missing_from %d missing_from_whom %q, want rank 3's stream %d from 0 (5.2, 9.3)",
				nd.Name, nd.MissingStream, nd.MissingFrom, nd.MissingFromWhom, grants[3].Data.StreamID)
		}
	}
	// The switches freed the operation: a DATA frame of it is answered
	// PROGRESS UNKNOWN_OPERATION (7), Committed 0, no credits, no holes.
	k := ranks[2]
	last := k.sent[len(k.sent)-1]
	k.mu.Lock()
	k.failedAt = time.Time{}
	k.mu.Unlock()
	k.xmit(last, true)
	var got *progress
	for end := time.Now().Add(time.Second); time.Now().Before(end) && got == nil; time.Sleep(10 * time.Millisecond) {
		k.mu.Lock()
		for i := range k.progs {
			if p := k.progs[i].P; p.Status == psUnknownOp && p.PacketID == last.pkt {
				got = &p
			}
		}
		k.mu.Unlock()
	}
	if got == nil {
		t.Errorf("DATA of the aborted operation: no PROGRESS UNKNOWN_OPERATION for packet %d within 1 s (3, 7)", last.pkt)
	} else if got.Committed != 0 || got.IntervalCredits != 0 || got.ByteCredits != 0 || len(got.Holes) != 0 || got.Flags != 0 {
		t.Errorf("PROGRESS UNKNOWN_OPERATION %+v, want Committed 0, no credits, no holes, flags 0 (7)", *got)
	}
	k.report(t)
}

// rkPersistentGrants begins a persistent ALLREDUCE of K x n elements and
// checks the persistent fields of the grants (9.1, 9.7).
func (e *rkEnv) rkPersistentGrants(t *testing.T, job uint64, n, k int, timeout uint32) []*rkGrant {
	reqs := make([]map[string]any, 4)
	for r := range reqs {
		reqs[r] = rkBeginReq(job, r, 4, e.hosts[r], "allreduce", "kulisch", uint32(n*k))
		reqs[r]["timeout_ms"] = timeout
		reqs[r]["persistent"] = true
	}
	grants, _, ok := e.rkBeginFour(t, reqs, -1)
	if !ok {
		t.FailNow()
	}
	wantKA := max(timeout/2, 100)
	for r, g := range grants {
		if g.Persistent == nil || !*g.Persistent || g.KeepaliveMS == nil || *g.KeepaliveMS != wantKA {
			t.Errorf("rank %d persistent grant: persistent %v keepalive_ms %v, want true and max(timeout_ms/2, 100) = %d (9.1)",
				r, g.Persistent, g.KeepaliveMS, wantKA)
		}
	}
	return grants
}

// rkKeepalives sends POST /v1/ops/{id}/alive for rank r every keepalive_ms
// until stop closes; answers are checked (9.7: 200 with the status).
type rkKeepalives struct {
	mu   sync.Mutex
	errs []string
	n    int
	stop chan struct{}
	wg   sync.WaitGroup
}

func (e *rkEnv) startKeepalives(g []*rkGrant, ranks []int) *rkKeepalives {
	ka := &rkKeepalives{stop: make(chan struct{})}
	for _, r := range ranks {
		ka.wg.Add(1)
		go func(r int) {
			defer ka.wg.Done()
			every := time.Duration(*g[r].KeepaliveMS) * time.Millisecond
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-ka.stop:
					return
				case <-tick.C:
				}
				a := e.call(e.hosts[r], http.MethodPost, "/v1/ops/"+g[r].ID+"/alive", map[string]any{"rank": r}, 3*time.Second)
				ka.mu.Lock()
				ka.n++
				if a.Err != nil || a.Code != http.StatusOK {
					ka.errs = append(ka.errs, fmt.Sprintf("rank %d alive: %s", r, a))
				} else if !strings.Contains(string(a.Body), `"persistent":true`) {
					ka.errs = append(ka.errs, fmt.Sprintf("rank %d alive: answer is not the persistent operation's status: %s", r, a.Body))
				}
				ka.mu.Unlock()
			}
		}(r)
	}
	return ka
}

func (ka *rkKeepalives) end(t *testing.T) {
	t.Helper()
	select {
	case <-ka.stop:
	default:
		close(ka.stop)
	}
	ka.wg.Wait()
	ka.mu.Lock()
	defer ka.mu.Unlock()
	for _, s := range ka.errs {
		t.Error(s)
	}
	ka.errs = nil
}

// rkInvocation runs invocation i (elements [i n, (i+1) n)) on every rank:
// DATA with PUSH on the frame that ends it (6.1 P1), the RESULT of that
// range checked bit for bit, and PUSH on the RESULT frame that ends it
// (6.1 P3).
func (e *rkEnv) rkInvocation(t *testing.T, ranks []*rkRank, in [][]float32, i, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(ranks))
	for r, k := range ranks {
		wg.Add(1)
		go func(r int, k *rkRank) {
			defer wg.Done()
			errs[r] = k.sendRange(ctx, in[r], i*n, (i+1)*n, true)
		}(r, k)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("invocation %d rank %d DATA: %v", i, r, err)
		}
	}
	end := uint32((i + 1) * n)
	for r, k := range ranks {
		v, ok := k.waitResult(t, end, 5*time.Second)
		if !ok {
			continue
		}
		bad := 0
		for j := i * n; j < (i+1)*n; j++ {
			w := exactSum(in[0][j], in[1][j], in[2][j], in[3][j])
			if math.Float32bits(v[j]) != math.Float32bits(w) {
				if bad < 3 {
					t.Errorf("invocation %d rank %d element %d: %g, want %g (exact sum rounded once)", i, r, j, v[j], w)
				}
				bad++
			}
		}
		flags := k.resultFlagsEnding(end)
		if len(flags) == 0 || flags[0]&dfPush == 0 {
			t.Errorf("invocation %d rank %d: RESULT frames ending at %d have flags %v, want PUSH (6.1 P3: the frame ending at the frontier carries PUSH; relayed RESULT keeps its flags)", i, r, end, flags)
		}
	}
}

// rkPersistent: a persistent ALLREDUCE (9.7) run for two invocations with
// a rest longer than twice the Timeout between them (6.1 P4), keepalives
// from every rank, then done from every rank: the AM ABORTs the nodes and
// the operation is released.
func (e *rkEnv) rkPersistent(t *testing.T) {
	const n, K, timeout = 700, 2, 1000
	job := e.job()
	grants := e.rkPersistentGrants(t, job, n, K, timeout)
	id := grants[0].ID
	ka := e.startKeepalives(grants, []int{0, 1, 2, 3})
	defer ka.end(t)
	ranks := make([]*rkRank, 4)
	for r := range ranks {
		ranks[r] = e.newRank(t, r, grants[r], false)
	}
	in := rkInputs(21, 4, n*K)
	st, _ := e.opStatus(t, id)
	if st.State != "active" || st.Persistent == nil || !*st.Persistent {
		t.Errorf("persistent operation after the grant: state %q persistent %v, want active and true (9.3)", st.State, st.Persistent)
	}
	e.rkInvocation(t, ranks, in, 0, n)
	// Rest: every contributor rests at the PUSH boundary, so no switch
	// times anyone out (6.1 P4) and the DATA streams get no timer-driven
	// PROGRESS (7: a stream resting at a PUSH boundary is not incomplete).
	restFrom := time.Now()
	time.Sleep(2*timeout*time.Millisecond + 500*time.Millisecond)
	restTo := time.Now()
	for r, k := range ranks {
		if a := k.failedAnnouncements(); len(a) > 0 {
			t.Errorf("rank %d got PROGRESS FAILED while every rank rested at a PUSH boundary (6.1 P4)", r)
		}
		if tp := k.timerProgress(restFrom.Add(100*time.Millisecond), restTo); len(tp) > 0 {
			t.Errorf("rank %d got %d timer-driven PROGRESS on its resting DATA stream (7: it gets none until its sender moves)", r, len(tp))
		}
	}
	st, _ = e.opStatus(t, id)
	if st.State != "active" || st.Error != nil {
		t.Errorf("after a %v rest: state %q error %+v, want active (9.7)", restTo.Sub(restFrom).Round(time.Millisecond), st.State, st.Error)
	}
	for _, nd := range st.Nodes {
		if nd.State != "ACTIVE" {
			t.Errorf("node %s state %q during the rest, want ACTIVE", nd.Name, nd.State)
		}
	}
	e.rkInvocation(t, ranks, in, 1, n)
	for _, k := range ranks {
		k.checkResultIDs(t)
		k.report(t)
	}
	ka.end(t)
	// done from every rank: the AM ABORTs every node; released (9.7).
	var wg sync.WaitGroup
	ans := make([]rkAnswer, 4)
	for r := range ranks {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ans[r] = e.done(r, id, true, "", true, 10*time.Second)
		}(r)
	}
	wg.Wait()
	for r, a := range ans {
		a.status(t, fmt.Sprintf("rank %d done", r))
	}
	st, _ = e.opStatus(t, id)
	t.Logf("final status: %s", st)
	if ops := e.opsOfJob(t, job); len(ops) != 1 {
		t.Errorf("job %d has %d operations, want only the persistent one (9.5, 9.7: no preparation for a persistent invocation): %v", job, len(ops), ops)
	}
	if st.State != "released" || st.Error != nil || st.Persistent == nil || !*st.Persistent {
		t.Errorf("persistent operation after every rank's done: state %q error %+v persistent %v, want released, no error, true (9.7)", st.State, st.Error, st.Persistent)
	}
	for _, nd := range st.Nodes {
		if nd.State != "ABORTED" {
			t.Errorf("node %s state %q, want ABORTED (9.7: the AM ABORTs every node instead of RELEASE)", nd.Name, nd.State)
		}
	}
}

// rkKeepaliveLost: rank 1 of a persistent operation sends no keepalive;
// 3 x keepalive_ms + the CONTROL transaction timeout (2 s by default)
// after the grant the AM fails the operation naming rank 1 (9.7), and the
// switches no longer know it (7: UNKNOWN_OPERATION).
func (e *rkEnv) rkKeepaliveLost(t *testing.T) {
	const n, K, timeout = 100, 4, 1000
	const controlTimeout = 2 * time.Second
	job := e.job()
	grants := e.rkPersistentGrants(t, job, n, K, timeout)
	id := grants[0].ID
	ka := e.startKeepalives(grants, []int{0, 2, 3})
	defer ka.end(t)
	ranks := make([]*rkRank, 4)
	for r := range ranks {
		ranks[r] = e.newRank(t, r, grants[r], false)
	}
	grantAt := ranks[0].grantAt
	in := rkInputs(31, 4, n*K)
	e.rkInvocation(t, ranks, in, 0, n)
	every := time.Duration(*grants[0].KeepaliveMS) * time.Millisecond
	bound := 3*every + controlTimeout
	var st rkStatus
	var failedAt time.Time
	for end := grantAt.Add(bound + every + 3*time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
		s, ok := e.opStatus(t, id)
		if ok && s.State == "failed" {
			st, failedAt = s, time.Now()
			break
		}
	}
	if failedAt.IsZero() {
		t.Fatalf("persistent operation not failed %v after the grant although rank 1 sent no keepalive (9.7: dead after 3 x %v + %v)",
			bound+every+3*time.Second, every, controlTimeout)
	}
	after := failedAt.Sub(grantAt)
	t.Logf("failed %v after the grant: %s", after.Round(time.Millisecond), st)
	if after < bound-50*time.Millisecond || after > bound+every+time.Second {
		t.Errorf("the AM failed the operation %v after the grant; 9.7: once the last keepalive is older than %v, checked every %v", after.Round(time.Millisecond), bound, every)
	}
	if st.Error == nil || st.Error.Code != "operation_failed" || st.Error.Rank == nil || *st.Error.Rank != 1 {
		t.Errorf("error %s, want operation_failed naming rank 1 (9.7)", st.errRaw)
	} else {
		t.Run("message", func(t *testing.T) {
			// 9.4/9.7: "operation <id> failed: " then "rank R (host) sent no
			// keepalive for D (every K expected); its process may have died".
			want := "operation " + st.ID + " failed: rank 1 (h2) sent no keepalive for"
			rkFinding(t, rkFKeepaliveMsg, !strings.HasPrefix(st.Error.Message, want) || !strings.Contains(st.Error.Message, "(every 500ms expected); its process may have died"),
				"the message is %q; 9.7: it begins %q", st.Error.Message, want+" D (every 500ms expected); its process may have died")
		})
	}
	// Every rank rested at the PUSH boundary of invocation 0 when the AM
	// asked the nodes: 5.2 says "a persistent collective between
	// invocations reports 0xFFFF / 0", i.e. nothing missing (finding R6).
	t.Run("resting_missing_stream", func(t *testing.T) {
		var named []string
		for _, nd := range st.Nodes {
			if nd.MissingFromWhom != "" {
				named = append(named, fmt.Sprintf("%s: missing_stream %d from %d (%s)", nd.Name, nd.MissingStream, nd.MissingFrom, nd.MissingFromWhom))
			}
		}
		rkFinding(t, rkFRestingMissing, len(named) > 0,
			"with every rank resting after invocation 0, COMPLETE's ACKs name a missing stream: %v; 5.2 says a persistent collective between invocations reports 0xFFFF / 0, while its rule before names the RESULT_IN stream when it lacks coverage", named)
	})
	for _, nd := range st.Nodes {
		if nd.State != "ABORTED" {
			t.Errorf("node %s state %q, want ABORTED (9.7: the AM ABORTs every node)", nd.Name, nd.State)
		}
	}
	ka.end(t)
	// Rank 0 starts invocation 1: its leaf lost the operation and answers
	// PROGRESS UNKNOWN_OPERATION, so the rank stops at once (7).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := ranks[0].sendRange(ctx, in[0], n, 2*n, true)
	if f, ok := err.(*rkFailure); !ok || f.status != psUnknownOp {
		t.Errorf("DATA of invocation 1 after the AM failed the operation: %v, want PROGRESS UNKNOWN_OPERATION (7)", err)
	}
	for _, k := range ranks {
		k.report(t)
	}
}

package am

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/parser"
)

// stopSpine makes the spine-leaf rig's s1 stop as a SIGSTOPped prismd
// looks from an AM on h1: s1 answers nothing, l2 (whose CONTROL from h1
// crosses l1 and s1) answers nothing, and l1 times out on its parent s1.
// It returns the failed operation's status.
func stopSpine(t *testing.T, r *rig) OpStatus {
	t.Helper()
	grants, op := r.grantOp(t, 6, "h1", "h2", "h3", "h4")
	fromS1 := streamWhere(t, "l1", op.plan.nodes["l1"].owner, "the RESULT from s1")
	for _, n := range []string{"s1", "l2"} {
		fn := r.nodes[n]
		fn.mu.Lock()
		fn.silent[parser.CmdComplete], fn.silent[parser.CmdAbort] = true, true
		fn.mu.Unlock()
	}
	l1 := r.nodes["l1"]
	l1.mu.Lock()
	l1.final, l1.cause, l1.missing, l1.missFrom = parser.StateFailed, parser.FailTimeout, fromS1, 512
	l1.mu.Unlock()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "failed" || st.Error == nil {
		t.Fatalf("status %+v", st)
	}
	return st
}

// grantOp grants job's seq-0 ALLREDUCE on hosts and returns the grants and
// the AM's operation.
func (r *rig) grantOp(t *testing.T, job uint64, hosts ...string) ([]*Grant, *operation) {
	t.Helper()
	grants := r.grantAll(t, reqsFor(job, 0, "allreduce", hosts...))
	r.m.mu.Lock()
	op := r.m.ops[grants[0].ID]
	r.m.mu.Unlock()
	return grants, op
}

// streamWhere is the stream whose owner in m is want (a node plan's owner,
// ownerRank or ownerSwitch map).
func streamWhere[V comparable](t *testing.T, what string, m map[uint16]V, want V) uint16 {
	t.Helper()
	for s, who := range m {
		if who == want {
			return s
		}
	}
	t.Fatalf("%s: no stream from %v in %v", what, want, m)
	return 0
}

func nodeOf(st OpStatus, name string) NodeStatus {
	for _, ns := range st.Nodes {
		if ns.Name == name {
			return ns
		}
	}
	return NodeStatus{}
}

// A spine that stops mid-operation silences the leaf behind it too (the
// AM on h1 reaches l2 only through l1 and s1): the diagnosis leads with
// the spine, with what points at it, and does not blame the healthy leaf
// as a node whose prismd may have stopped; 'show am' gives neither silent
// node the hints for a node never reached (node_mac, am_sources).
func TestStoppedSpineBlamedNotLeafBehindIt(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	h1 := topo.MAC("h1", "eth0")
	r := newRigAt(t, "spine-leaf", Config{CtlTimeout: 300 * time.Millisecond}, net.HardwareAddr(h1[:]))
	st := stopSpine(t, r)
	msg := st.Error.Message
	_, diag, _ := strings.Cut(msg, " failed: ")
	want := "node s1 stopped (it stopped answering CONTROL after it acknowledged this operation's setup; " +
		"l1 timed out on its parent s1; l2, reached through s1, does not answer either)"
	if !strings.HasPrefix(diag, want) {
		t.Errorf("diagnosis %q\nwant it to start with %q", diag, want)
	}
	if st.Error.Node != "s1" {
		t.Errorf("error node %q, want s1", st.Error.Node)
	}
	if strings.Contains(msg, "node l2 stopped answering") || strings.Contains(msg, "am_sources") {
		t.Errorf("diagnosis blames l2 or hints at configuration: %q", msg)
	}
	if want := "node l2 does not answer CONTROL, but the AM reaches it only through s1, which stopped answering too: probably not at fault itself"; !strings.Contains(msg, want) {
		t.Errorf("diagnosis %q\nwant %q", msg, want)
	}
	for _, n := range []string{"s1", "l2"} {
		ns := nodeOf(st, n)
		if ns.State != "UNREACHABLE" || strings.Contains(ns.LastError, "am_sources") || strings.Contains(ns.LastError, "node_mac") ||
			!strings.Contains(ns.LastError, "it answered CONTROL earlier in this operation") {
			t.Errorf("node %s: state %s, last error %q", n, ns.State, ns.LastError)
		}
	}
	if le := nodeOf(st, "l2").LastError; !strings.Contains(le, "the AM reaches it only through s1, which stopped answering too") {
		t.Errorf("l2's last error %q does not say the AM reaches it through s1", le)
	}
	if le := nodeOf(st, "s1").LastError; !strings.Contains(le, "so it or a switch on the way from the AM stopped") {
		t.Errorf("s1's last error %q", le)
	}
}

// Where the AM's place is unknown (its interface MAC is not in the
// topology), the leaf's timeout on the spine still leads to the spine.
func TestStoppedSpineBlamedAMUnplaced(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{CtlTimeout: 300 * time.Millisecond})
	if r.m.amHost != "" {
		t.Fatalf("AM placed at %s", r.m.amHost)
	}
	st := stopSpine(t, r)
	_, diag, _ := strings.Cut(st.Error.Message, " failed: ")
	if want := "node s1 stopped (it stopped answering CONTROL after it acknowledged this operation's setup; l1 timed out on its parent s1)"; !strings.HasPrefix(diag, want) || st.Error.Node != "s1" {
		t.Errorf("diagnosis %q (node %s)\nwant it to start with %q, node s1", diag, st.Error.Node, want)
	}
}

// The AM's CONTROL path is the topology's, from the host interface whose
// MAC the AM's is.
func TestControlPath(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	h3 := topo.MAC("h3", "eth0")
	r := newRigAt(t, "spine-leaf", Config{}, net.HardwareAddr(h3[:]))
	for node, want := range map[string]string{"l2": "", "s1": "l2", "l1": "l2 s1"} {
		via, ok := r.m.controlPath(node)
		if !ok || strings.Join(via, " ") != want {
			t.Errorf("path to %s: %v %v, want %q", node, via, ok, want)
		}
	}
}

// logLines collects what the AM logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// with returns the lines containing every one of subs.
func (l *logLines) with(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var r []string
next:
	for _, s := range l.lines {
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				continue next
			}
		}
		r = append(r, s)
	}
	return r
}

// A barrier timeout and a mismatch fail every rank of the invocation; the
// AM's log says so once each, at WARN, in the words the ranks get.
func TestBarrierFailuresLogged(t *testing.T) {
	var logs logLines
	r := newRig(t, "spine-leaf", Config{BarrierTimeout: 300 * time.Millisecond, Logf: logs.logf})

	// Three of four ranks wait; rank 3 never comes.
	q := reqsFor(16, 0, "allreduce", "h1", "h2", "h3", "h4")
	res := r.beginAll(q[:3])
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeBarrierTimeout {
			t.Fatalf("rank %d: %v, want barrier_timeout", i, x.err)
		}
	}
	want := "am: WARN barrier_timeout: job 16 group 1 seq 0: ranks [3] did not arrive within 300ms; rank 3: no process of it ever connected to this AM " +
		"(not started, started with another --job, --group or --coordinator, or a library without presence)"
	if got := logs.with("barrier_timeout"); len(got) != 1 || got[0] != want {
		t.Errorf("log lines about the barrier timeout: %q, want exactly %q", got, want)
	}

	// Rank 3 asks for another length while the others wait: one line.
	q = reqsFor(17, 0, "allreduce", "h1", "h2", "h3", "h4")
	q[3].VectorLen = 999
	done := make(chan []result, 1)
	go func() { done <- r.beginAll(q[:3]) }()
	waitArrived(t, r, invKey{17, 1, 0}, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.m.Begin(ctx, q[3]); err == nil {
		t.Fatal("rank 3's mismatch granted")
	}
	for i, x := range <-done {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeMismatch {
			t.Fatalf("rank %d: %v, want mismatch", i, x.err)
		}
	}
	got := logs.with("WARN mismatch", "job 17")
	if len(got) != 1 || !strings.Contains(got[0], "rank 3's request for job 17 group 1 seq 0 differs from rank ") ||
		!strings.Contains(got[0], "vector_len 999 vs 1000") {
		t.Errorf("log lines about the mismatch: %q, want one naming rank 3 and vector_len 999 vs 1000", got)
	}

	// The odd rank first: every later rank is refused, one line all the same.
	q = reqsFor(18, 0, "allreduce", "h1", "h2", "h3", "h4")
	q[3].VectorLen = 999
	go func() { _, _ = r.m.Begin(ctx, q[3]) }()
	waitArrived(t, r, invKey{18, 1, 0}, 1)
	for _, x := range r.beginAll(q[:3]) {
		if x.err == nil {
			t.Fatal("a mismatched rank granted")
		}
	}
	if got := logs.with("WARN mismatch", "job 18"); len(got) != 1 {
		t.Errorf("log lines about the mismatch: %q, want one", got)
	}
	if n := len(logs.with("barrier_timeout")); n != 1 {
		t.Errorf("%d barrier timeouts logged, want 1", n)
	}
}

// waitArrived waits until n ranks arrived at invocation k.
func waitArrived(t *testing.T, r *rig, k invKey, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.m.mu.Lock()
		inv := r.m.invs[k]
		ok := inv != nil && len(inv.arrived) == n
		r.m.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ranks never arrived at %+v", n, k)
		}
	}
}

// Two processes started as rank 1 with the other ranks of the job: every
// rank gets, at once, the same error naming rank 1 and both its nodes
// (none waits the barrier timeout for a rank that was evicted), and the
// AM logs it once.
func TestRankClaimedTwiceFailsEveryRank(t *testing.T) {
	var logs logLines
	r := newRig(t, "spine-leaf", Config{BarrierTimeout: time.Minute, Logf: logs.logf})
	q := withSessions(reqsFor(20, 0, "allreduce", "h1", "h2", "h3", "h4"), 100)
	q[2].Rank = 1 // h3 started as rank 1 too; rank 2 never comes
	t0 := time.Now()
	res := r.beginAll(q)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the ranks got their errors after %v", d)
	}
	var first string
	for i, x := range res {
		var ae *APIError
		if !errors.As(x.err, &ae) || ae.Code != CodeMismatch || ae.Rank == nil || *ae.Rank != 1 {
			t.Fatalf("process %d: %v, want a mismatch naming rank 1", i, x.err)
		}
		if !strings.Contains(ae.Message, "rank 1 of job 20 group 1 seq 0 was claimed by two processes, on h") ||
			!strings.Contains(ae.Message, "h2") || !strings.Contains(ae.Message, "h3") || !strings.Contains(ae.Message, "fix the job's rank assignment") {
			t.Errorf("process %d: %q", i, ae.Message)
		}
		if first == "" {
			first = ae.Message
		} else if ae.Message != first {
			t.Errorf("process %d got %q, process 0 %q: want one message", i, ae.Message, first)
		}
	}
	if got := logs.with("WARN mismatch", "claimed by two processes"); len(got) != 1 {
		t.Errorf("logged %q, want one line", got)
	}

	// In order: ranks 0 and 1 wait, the second rank 1 comes, then rank 3.
	q = withSessions(reqsFor(21, 0, "allreduce", "h1", "h2", "h3", "h4"), 200)
	q[2].Rank = 1
	waiting := make(chan []result, 1)
	go func() { waiting <- r.beginAll(q[:2]) }()
	waitArrived(t, r, invKey{21, 1, 0}, 2)
	t0 = time.Now()
	late := r.beginAll(q[2:])
	all := append(<-waiting, late...)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the ranks got their errors after %v", d)
	}
	for i, x := range all {
		var ae *APIError
		if !errors.As(x.err, &ae) || !strings.Contains(ae.Message, "rank 1 of job 21 group 1 seq 0 was claimed by two processes, on h2 and h3") {
			t.Errorf("process %d: %v", i, x.err)
		}
	}
}

// The failure's text is written when the first rank reports; the others'
// reports come after it, and 'show am' lists them as done: the text says
// which ranks had not reported then, not that they never did.
func TestFailureTextNamesRanksNotReportedYet(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(22, 0, "allreduce", "h1", "h2", "h3", "h4"))
	l1 := r.nodes["l1"]
	l1.mu.Lock()
	l1.final, l1.cause, l1.missing = parser.StateFailed, parser.FailTimeout, grants[1].Data.StreamID
	l1.mu.Unlock()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, rk := range []int{1, 2, 3} {
		st, err = r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: rk, OK: false, Error: "leaf reports the operation FAILED"})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(st.RanksDone, []int{0, 1, 2, 3}) || st.Error == nil {
		t.Fatalf("status %+v", st)
	}
	msg := st.Error.Message
	if !strings.Contains(msg, "ranks that had not reported when it failed: 1 (h2), 2 (h3), 3 (h4)") || strings.Contains(msg, "never reported") {
		t.Errorf("failure text %q: want the ranks that had not reported when it failed, and no claim that they never did", msg)
	}
}

// A forwarder that stops (m1, which only forwards between l2 and s1 in
// the midhop topology) silences l2 behind it as l2's own stop would, and
// s1 times out on l2: the diagnosis names m1 with l2, not the healthy l2
// alone. (Walkthrough: a SIGSTOPped forwarder of the fat-tree had the AM
// and every rank blame the leaf behind it.)
func TestStoppedForwarderNamed(t *testing.T) {
	topo := loadTopo(t, "midhop")
	h1 := topo.MAC("h1", "eth0")
	r := newRigAt(t, "midhop", Config{CtlTimeout: 300 * time.Millisecond}, net.HardwareAddr(h1[:]))
	grants, op := r.grantOp(t, 6, "h1", "h2", "h3", "h4")
	if op.tree.Node("m1") != nil {
		t.Fatal("m1 is a tree node; this test wants it a forwarder")
	}
	fromL2 := streamWhere(t, "s1", op.plan.nodes["s1"].ownerSwitch, "l2")
	fn := r.nodes["l2"]
	fn.mu.Lock()
	fn.silent[parser.CmdComplete], fn.silent[parser.CmdAbort] = true, true
	fn.mu.Unlock()
	s1 := r.nodes["s1"]
	s1.mu.Lock()
	s1.final, s1.cause, s1.missing, s1.missFrom = parser.StateFailed, parser.FailTimeout, fromL2, 512
	s1.mu.Unlock()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	_, diag, _ := strings.Cut(st.Error.Message, " failed: ")
	if want := "node l2 stopped, or switch m1 on the way to it did, or a link on that way went down (it stopped answering CONTROL after it acknowledged this operation's setup; " +
		"s1 timed out on its child l2): the AM cannot tell which"; !strings.HasPrefix(diag, want) {
		t.Errorf("diagnosis %q\nwant it to start with %q", diag, want)
	}
}

// TestNoNodeAnswersVerdictIsQuick: when no node of the operation answers
// (the AM's own leaf died: it reaches none of them), a rank whose own
// timer fired hears the verdict after one CONTROL timeout and the short
// ABORT, not after the grace for the switches' verdicts, whose rounds each
// waited a whole CONTROL timeout for nodes that had just not answered
// one (6.5 s after the rank's report at the default 2 s, in a
// walkthrough that killed the AM's leaf).
func TestNoNodeAnswersVerdictIsQuick(t *testing.T) {
	cfg := Config{CtlTimeout: time.Second}
	r := newRig(t, "spine-leaf", cfg)
	grants := r.grantAll(t, reqsFor(8, 0, "allreduce", "h1", "h2", "h3", "h4"))
	for _, n := range []string{"s1", "l1", "l2"} {
		fn := r.nodes[n]
		fn.mu.Lock()
		fn.silent[parser.CmdComplete], fn.silent[parser.CmdAbort] = true, true
		fn.mu.Unlock()
	}
	t0 := time.Now()
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, TimedOut: true,
		Error: "host: timeout: no RESULT from leaf l1 for 6s", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, most := time.Since(t0), cfg.CtlTimeout+quickAbort+500*time.Millisecond; d > most {
		t.Errorf("verdict after %v, want at most %v (one CONTROL timeout and a short ABORT)", d, most)
	}
	if st.State != "failed" || st.Error == nil || !strings.Contains(st.Error.Message, "rollback incomplete: no ABORT acknowledgement from [") {
		t.Fatalf("status %+v, want failed with an incomplete rollback reported", st)
	}
}

// TestInexactIsNoFault: a rank that reports its ACCUMULATION_INEXACT
// RESULT ends the operation with reason inexact at once, with a message
// that names the output format and blames no node or rank (it read "node
// l1 is ACTIVE; ranks that had not reported when it failed: 2 (h3)"), and
// the failure counts under reason inexact.
func TestInexactIsNoFault(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(9, 0, "allreduce", "h1", "h2", "h3", "h4"))
	t0 := time.Now()
	st, err := r.m.Done(context.Background(), grants[1].ID, DoneRequest{Rank: 1, OK: false, Inexact: true,
		Error: "host: ACCUMULATION_INEXACT: the exact sum cannot be represented in the requested output", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("verdict after %v, want it at once", d)
	}
	e := st.Error
	if st.State != "failed" || e == nil || e.Reason != ReasonInexact || e.Rank != nil || e.Node != "" ||
		!strings.Contains(e.Message, "cannot be represented in the output format fp32 (ACCUMULATION_INEXACT, received by rank 1 (h2)): no node or rank failed") ||
		strings.Contains(e.Message, "is ACTIVE") || strings.Contains(e.Message, "had not reported") {
		t.Fatalf("status %+v error %+v, want reason inexact naming no culprit", st, e)
	}
	if got := testutil.ToFloat64(r.m.metrics.failed.WithLabelValues(ReasonInexact)); got != 1 {
		t.Errorf("operations_failed_total{reason=inexact} = %v, want 1", got)
	}
}

// TestMadeAnotherCallIsMismatch: the rank a failed operation timed out on
// waits at the AM's barrier of another call of the job (it called another
// length while the others ran their persistent collective's invocation,
// which asks the AM nothing): the verdict says so, with the difference,
// and its reason is mismatch (host.ErrMismatch), not a rank that stopped.
func TestMadeAnotherCallIsMismatch(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{})
	grants := r.grantAll(t, reqsFor(10, 0, "allreduce", "h1", "h2", "h3", "h4"))
	other := req(10, 1, 3, 4, "h4", "allreduce")
	other.VectorLen = 1001
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = r.m.Begin(ctx, other) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.m.mu.Lock()
		in := false
		if inv := r.m.invs[invKey{10, 1, 1}]; inv != nil {
			_, in = inv.arrived[3]
		}
		r.m.mu.Unlock()
		if in {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 3's other call never reached the barrier")
		}
	}
	r.failNode("l2", parser.FailTimeout, grants[3].Data.StreamID, 0)
	for _, n := range []string{"l1", "s1"} {
		r.failNode(n, parser.FailPeer, 0xFFFF, 0)
	}
	st, err := r.m.Done(context.Background(), grants[0].ID, DoneRequest{Rank: 0, OK: false, Error: "leaf l1 reports the operation FAILED", Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	e := st.Error
	if e == nil || e.Reason != CodeMismatch || e.Rank == nil || *e.Rank != 3 ||
		!strings.Contains(e.Message, "rank 3 (h4) made another call instead (seq 1, waiting at the AM's barrier): vector_len 1001 vs 1000 (its value first)") {
		t.Fatalf("error %+v, want reason mismatch naming rank 3's other call", e)
	}
}

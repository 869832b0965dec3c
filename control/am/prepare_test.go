package am

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/parser"
)

// waitPrepared returns the operation prepared ahead of job's invocation seq.
func (r *rig) waitPrepared(seq uint64) OpStatus {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, s := range r.m.Ops().Ops {
			if s.Seq == seq && s.State == "prepared" {
				return s
			}
		}
	}
	r.t.Fatalf("no operation prepared for seq %d: %+v", seq, r.m.Ops())
	return OpStatus{}
}

func (r *rig) grantsOf(res []result) []*Grant {
	r.t.Helper()
	var g []*Grant
	for i, x := range res {
		if x.err != nil {
			r.t.Fatalf("rank %d: %v", i, x.err)
		}
		g = append(g, x.g)
	}
	return g
}

func (r *rig) doneAll(grants []*Grant) OpStatus {
	r.t.Helper()
	var st OpStatus
	for i := range grants {
		var err error
		if st, err = r.m.Done(context.Background(), grants[i].ID, DoneRequest{Rank: i, OK: true, Wait: i == len(grants)-1}); err != nil {
			r.t.Fatal(err)
		}
	}
	return st
}

// TestPreparedInvocationNeedsNoControl: once seq 0 is granted the AM
// installs seq 1 on every node (ACTIVE before any rank asks for it), and
// the ranks of seq 1 are granted that operation even though every node now
// ignores STAGE and COMMIT: the grant needed no CONTROL exchange. Both
// operations complete and are released.
func TestPreparedInvocationNeedsNoControl(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true})
	hosts := []string{"h1", "h2", "h3", "h4"}
	g0 := r.grantsOf(r.beginAll(reqsFor(7, 0, "allreduce", hosts...)))
	p := r.waitPrepared(1)
	if p.Op == g0[0].Op {
		t.Fatal("the prepared operation is the running one")
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if s := r.nodes[n].opState(p.Op); s != parser.StateActive {
			t.Fatalf("%s: prepared operation in state %v, want ACTIVE", n, s)
		}
		r.nodes[n].mu.Lock()
		r.nodes[n].silent[parser.CmdStage], r.nodes[n].silent[parser.CmdCommit] = true, true
		r.nodes[n].mu.Unlock()
	}
	g1 := r.grantsOf(r.beginAll(reqsFor(7, 1, "allreduce", hosts...)))
	for _, g := range g1 {
		if g.Op != p.Op || g.ID != p.ID {
			t.Fatalf("seq 1 granted %s, want the prepared %s", g.ID, p.ID)
		}
	}
	r.checkPlan(p.Op, hosts, g1, parser.CollAllReduce, 0)
	for _, n := range []string{"s1", "l1", "l2"} {
		r.nodes[n].mu.Lock()
		r.nodes[n].silent[parser.CmdStage], r.nodes[n].silent[parser.CmdCommit] = false, false
		r.nodes[n].mu.Unlock()
	}
	for _, g := range [][]*Grant{g0, g1} {
		if st := r.doneAll(g); st.State != "released" || st.Error != nil {
			t.Fatalf("%s: final status %+v", g[0].ID, st)
		}
	}
	if u := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(prepUsed)); u != 1 {
		t.Fatalf("prepared used = %v, want 1", u)
	}
}

// TestPreparedInvocationMismatch: when the next invocation comes with other
// parameters, the prepared operation is ABORTed on every node and the
// invocation is set up as usual.
func TestPreparedInvocationMismatch(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true})
	hosts := []string{"h1", "h2", "h3", "h4"}
	g0 := r.grantsOf(r.beginAll(reqsFor(7, 0, "allreduce", hosts...)))
	p := r.waitPrepared(1)
	q := reqsFor(7, 1, "allreduce", hosts...)
	for i := range q {
		q[i].VectorLen = 2000
	}
	g1 := r.grantsOf(r.beginAll(q))
	if g1[0].Op == p.Op || g1[0].VectorLen != 2000 {
		t.Fatalf("seq 1 with another vector length got %+v (prepared %s)", g1[0], p.ID)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		aborted := 0
		for _, n := range []string{"s1", "l1", "l2"} {
			if r.nodes[n].opState(p.Op) == parser.StateAborted {
				aborted++
			}
		}
		if aborted == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unused prepared operation was not ABORTed on every node (%d of 3)", aborted)
		}
	}
	if st, _ := r.m.Op(p.ID); st.State != "unused" {
		t.Fatalf("prepared operation state %q, want unused", st.State)
	}
	r.doneAll(g0)
	r.doneAll(g1)
	if x := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(prepMismatch)); x != 1 {
		t.Fatalf("prepared mismatch = %v, want 1", x)
	}
}

// TestPreparedInvocationExpires: a prepared operation nobody asks for within
// PrepareTTL is ABORTed on every node, long before the nodes' own
// inactivity timeout would fail it.
func TestPreparedInvocationExpires(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true, PrepareTTL: 100 * time.Millisecond})
	hosts := []string{"h1", "h2", "h3", "h4"}
	g0 := r.grantsOf(r.beginAll(reqsFor(7, 0, "allreduce", hosts...)))
	p := r.waitPrepared(1)
	r.doneAll(g0)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, _ := r.m.Op(p.ID)
		if st.State == "unused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prepared operation still %q after its TTL", st.State)
		}
	}
	for _, n := range []string{"s1", "l1", "l2"} {
		if s := r.nodes[n].opState(p.Op); s != parser.StateAborted {
			t.Fatalf("%s: expired prepared operation in state %v, want ABORTED", n, s)
		}
	}
	if x := testutil.ToFloat64(r.m.metrics.prepared.WithLabelValues(prepUnused)); x != 1 {
		t.Fatalf("prepared unused = %v, want 1", x)
	}
	if a := r.m.activeOps(); a != 0 {
		t.Fatalf("%d active operations after everything ended", a)
	}
}

// TestNoPreparationForRepeatsPersistent: when every rank says it runs a
// repeat of the call as a persistent operation (package host, a shape's
// first call), the AM prepares nothing for Seq+1: that operation would only
// be ABORTed as a mismatch. One rank without the flag and the preparation
// happens as before.
func TestNoPreparationForRepeatsPersistent(t *testing.T) {
	r := newRig(t, "spine-leaf", Config{Prepare: true})
	hosts := []string{"h1", "h2", "h3", "h4"}
	q := reqsFor(8, 0, "allreduce", hosts...)
	for i := range q {
		q[i].RepeatsPersistent = true
	}
	g0 := r.grantsOf(r.beginAll(q))
	time.Sleep(200 * time.Millisecond) // a preparation starts right after the grant
	for _, n := range r.treeNodes(g0[0].ID) {
		if k := n.count(parser.CmdStage); k != 1 {
			t.Errorf("%s: %d STAGEs applied, want 1 (no preparation)", n.name, k)
		}
	}
	if l := r.m.Ops().Ops; len(l) != 1 {
		t.Fatalf("the AM knows %d operations, want the granted one: %+v", len(l), l)
	}
	r.doneAll(g0)
	q = reqsFor(8, 1, "allreduce", hosts...)
	for i := range q[1:] {
		q[i+1].RepeatsPersistent = true
	}
	g1 := r.grantsOf(r.beginAll(q))
	if p := r.waitPrepared(2); p.Op == g1[0].Op {
		t.Fatal("the prepared operation is the running one")
	}
	r.doneAll(g1)
}

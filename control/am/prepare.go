// This file owns preparation: while invocation Seq of a job runs, the AM
// installs the operation for Seq+1 (same parameters, same rank hosts, a new
// Operation ID), so that when the ranks ask for it their grant needs no
// CONTROL exchange. A job calls the same collective again and again; for a
// small vector the STAGE and COMMIT round trips with every node were a
// fifth to a half of the collective's time.
//
// The grant still follows STAGE and COMMIT on every node (they happened
// earlier), and a preparation the ranks do not take is ABORTed: when they
// ask for Seq+1 with other parameters or from other hosts (then the
// invocation is set up as usual), or when PrepareTTL passes first, well
// before the nodes' own inactivity timeout (counted from COMMIT) would fail
// the context.

package am

import (
	"time"
)

// Outcomes of prismd_am_prepared_operations_total.
const (
	prepUsed     = "used"     // granted to the ranks of Seq+1
	prepUnused   = "unused"   // PrepareTTL passed: ABORTed
	prepMismatch = "mismatch" // Seq+1 came with other parameters or hosts: ABORTed
	prepFailed   = "failed"   // its setup failed (rolled back); Seq+1 is set up as usual
)

var prepOutcomes = []string{prepUsed, prepUnused, prepMismatch, prepFailed}

// prepared is an operation installed ahead of its invocation.
type prepared struct {
	inv   *invocation // the invocation it was prepared for (ranks not arrived)
	hosts []RankHost
	ready chan struct{} // closed when the setup ended; op is nil if it failed
	op    *operation
	timer *time.Timer // PrepareTTL; Stop() true = the caller owns op
}

// prepareTTL is how long a prepared operation waits for its ranks.
func (m *Manager) prepareTTL(p params) time.Duration {
	if m.cfg.PrepareTTL > 0 {
		return m.cfg.PrepareTTL
	}
	return min(2*time.Second, time.Duration(p.TimeoutMS)*time.Millisecond/2)
}

// prepareNext installs the operation for inv's next Seq, unless preparation
// is off, inv pinned its Operation ID, inv is persistent, every rank said
// it runs a repeat as a persistent operation (RepeatsPersistent), or the
// next invocation is already gathering or prepared. The ranks of a
// persistent operation run its invocations without asking the AM, for as
// long as the application likes: an operation prepared for their next Seq
// would only hold node resources until its TTL ABORTed it.
func (m *Manager) prepareNext(inv *invocation, hosts []RankHost, op *operation) {
	if !m.cfg.Prepare || inv.first.OpID != nil || inv.p.Persistent {
		return
	}
	next := &invocation{key: invKey{inv.key.job, inv.key.group, inv.key.seq + 1}, first: inv.first, p: inv.p,
		arrived: map[int]BeginRequest{}, ready: make(chan struct{}), created: time.Now(), waiting: map[int]int{}}
	next.first.Seq++
	pr := &prepared{inv: next, hosts: hosts, ready: make(chan struct{})}
	m.mu.Lock()
	if m.closed || m.invs[next.key] != nil || m.prep[next.key] != nil || allRepeatPersistent(inv.arrived) {
		m.mu.Unlock()
		return
	}
	m.prep[next.key] = pr
	m.mu.Unlock()
	go m.runPrepare(pr, op.tree)
}

// allRepeatPersistent reports whether every request says its rank runs a
// repeat of the call as a persistent operation. Under m.mu (a late retry of
// a rank's request writes to the map).
func allRepeatPersistent(reqs map[int]BeginRequest) bool {
	for _, r := range reqs {
		if !r.RepeatsPersistent {
			return false
		}
	}
	return len(reqs) > 0
}

func (m *Manager) runPrepare(pr *prepared, tree *Tree) {
	defer close(pr.ready)
	inv := pr.inv
	op, aerr := m.setupOp(inv, tree)
	if aerr != nil {
		m.logf("am: preparing job %d group %d seq %d failed (it will be set up when its ranks ask): %v", inv.key.job, inv.key.group, inv.key.seq, aerr)
		m.metrics.prepared.WithLabelValues(prepFailed).Inc()
		return
	}
	op.mu.Lock()
	op.state = "prepared"
	op.mu.Unlock()
	pr.op = op
	pr.timer = time.AfterFunc(m.prepareTTL(inv.p), func() {
		m.mu.Lock()
		if m.prep[inv.key] == pr {
			delete(m.prep, inv.key)
		}
		m.mu.Unlock()
		m.dropPrepared(op, prepUnused)
	})
}

// takePrepared returns the operation prepared for inv if it was set up for
// inv's parameters and rank hosts (waiting for a setup still in flight),
// or nil; a preparation it does not use is ABORTed.
func (m *Manager) takePrepared(inv *invocation, hosts []RankHost) *operation {
	m.mu.Lock()
	pr := m.prep[inv.key]
	delete(m.prep, inv.key)
	m.mu.Unlock()
	if pr == nil {
		return nil
	}
	<-pr.ready
	if pr.op == nil || !pr.timer.Stop() {
		return nil // failed, or its TTL fired and it is being ABORTed
	}
	// Persistent is part of params and no persistent invocation is
	// prepared, so a persistent invocation never takes a prepared operation.
	if !inv.p.same(pr.inv.p) || inv.first.OpID != nil || !sameHosts(hosts, pr.hosts) {
		go m.dropPrepared(pr.op, prepMismatch)
		return nil
	}
	op := pr.op
	op.mu.Lock()
	op.inv, op.state = inv, "setup"
	op.mu.Unlock()
	m.metrics.prepared.WithLabelValues(prepUsed).Inc()
	return op
}

// dropPrepared ABORTs a prepared operation nobody took.
func (m *Manager) dropPrepared(op *operation, outcome string) {
	incomplete := m.abortAll(op)
	op.mu.Lock()
	op.state, op.ended = "unused", time.Now()
	if len(incomplete) > 0 {
		op.err = &APIError{Code: CodeRollbackIncomplete, Message: "ABORT of an unused prepared operation not acknowledged; contexts may remain installed until their timeout",
			RollbackIncomplete: incomplete}
	}
	op.mu.Unlock()
	close(op.final)
	m.retire(op)
	m.metrics.prepared.WithLabelValues(outcome).Inc()
}

func sameHosts(a, b []RankHost) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Node != b[i].Node || a[i].Iface != b[i].Iface || a[i].MAC.String() != b[i].MAC.String() {
			return false
		}
	}
	return true
}

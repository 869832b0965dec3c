// This file owns persistent operations (MPI_Allreduce_init): one granted
// operation whose vector holds K consecutive invocations, which the ranks
// run one after another without asking the AM, and free at the end.
//
// Between invocations such an operation is idle on the switches for as long
// as the application likes, so the progress watchdog would take a healthy
// one for a stuck one. Instead every rank that has not reported done sends
// a keepalive every KeepaliveMS, and a rank silent for three of those plus
// a CONTROL timeout is taken for dead: the operation fails and every node
// is ABORTed. When every rank freed it (done, ok), the nodes are ACTIVE,
// not COMPLETE (the vector need not have been used to its end), so the AM
// ends it with ABORT instead of the COMPLETE polling and RELEASE.

package am

import (
	"context"
	"fmt"
	"time"
)

// keepaliveMS is Grant.KeepaliveMS: half the operation's timeout, so a
// rank's keepalives come at least twice within the inactivity bound it
// asked for, and never more often than every 100ms.
func keepaliveMS(p params) uint32 { return max(p.TimeoutMS/2, 100) }

// keepalivePeriod is keepaliveMS as a duration: also the period of the
// AM's check.
func keepalivePeriod(p params) time.Duration {
	return time.Duration(keepaliveMS(p)) * time.Millisecond
}

// keepaliveDeadline is how long a rank may stay silent: three missed
// keepalives, plus the CONTROL timeout so that a loaded rank host or
// network does not fail an operation that a CONTROL exchange would still
// have waited for.
func (m *Manager) keepaliveDeadline(p params) time.Duration {
	return 3*keepalivePeriod(p) + m.cfg.CtlTimeout
}

// checkAlive runs every KeepaliveMS while a persistent operation is
// active: a rank that has not reported done and whose last keepalive (the
// grant, before its first) is older than the deadline fails the operation.
func (m *Manager) checkAlive(op *operation) {
	p := op.inv.p
	period, limit := keepalivePeriod(p), m.keepaliveDeadline(p)
	now := time.Now()
	op.mu.Lock()
	if op.state != "active" || op.finishing || !op.ended.IsZero() {
		op.mu.Unlock()
		return
	}
	worst, silent := -1, time.Duration(0)
	for r := 0; r < op.size; r++ {
		if _, done := op.done[r]; done {
			continue
		}
		last, ok := op.alive[r]
		if !ok {
			last = op.granted
		}
		if d := now.Sub(last); d > limit && d > silent {
			worst, silent = r, d
		}
	}
	if worst < 0 {
		op.watchdog = time.AfterFunc(period, func() { m.checkAlive(op) })
		refresh := now.Sub(op.refreshed) >= m.cfg.PersistentRefresh
		if refresh {
			op.refreshed = now
		}
		op.mu.Unlock()
		if refresh {
			go m.refreshNodes(op)
		}
		return
	}
	// Claimed as Done claims it, so that a last done report arriving now
	// cannot start endPersistent while failOp runs.
	op.finishing = true
	op.mu.Unlock()
	why := fmt.Sprintf("rank %d (%s) sent no keepalive for %v (every %v expected); its process may have died",
		worst, op.tree.Ranks[worst].Host, silent.Round(10*time.Millisecond), period)
	m.failOpBlaming(op, reasonKeepalive, why, &worst)
}

// Alive is POST /v1/ops/{id}/alive: rank r.Rank of a persistent operation
// is still there. It answers the operation's status; after the rank's done
// report, or once the operation ended, it records nothing.
func (m *Manager) Alive(_ context.Context, id string, r AliveRequest) (OpStatus, error) {
	op, aerr := m.lookup(id)
	if aerr != nil {
		if k, err := ParseOpKey(id); err == nil && aerr.Code == CodeNotFound && k.OpGen < m.genBase {
			m.holdForeign(k, r.Rank)
			aerr.Message += " (an earlier AM granted it; this AM keeps its Operation ID out of its own operations while its ranks send keepalives)"
		}
		return OpStatus{}, aerr
	}
	if !op.persistent {
		return OpStatus{}, badReq("operation %s is not persistent: keepalives are only for operations begun with \"persistent\": true (the others end with the ranks' done reports)", id)
	}
	if r.Rank < 0 || r.Rank >= op.size {
		return OpStatus{}, badReq("rank %d is outside 0..%d", r.Rank, op.size-1)
	}
	op.mu.Lock()
	drained := false
	if _, done := op.done[r.Rank]; !done && op.ended.IsZero() {
		op.alive[r.Rank] = time.Now()
		op.aliveInv[r.Rank] = max(op.aliveInv[r.Rank], r.Invocations)
		drained = op.drain != nil && op.drained(false)
	}
	op.mu.Unlock()
	if drained {
		go m.endDrain(op, fmt.Sprintf("rank %d reported %d invocations, the last one waited for", r.Rank, r.Invocations))
	}
	return op.status(), nil
}

// foreignHold is how long after an earlier AM's persistent operation's
// last keepalive its Operation ID stays out of this AM's allocations: the
// AM does not know that operation's timeout, and keepalives come every
// half of it; the nodes expire a resting one 3 x timeout + 60 s after its
// last DATA.
const foreignHold = 5 * time.Minute

// holdForeign notes a keepalive of rank for k, an operation of an earlier
// AM (a generation older than this AM's first): a persistent collective that
// runs on through the AM's restart.
func (m *Manager) holdForeign(k OpIdentity, rank int) {
	gk := genKey{k.Job, k.Group, k.OpID}
	now := time.Now()
	m.mu.Lock()
	_, known := m.foreign[gk]
	if !known {
		// A new hold is rare (once per earlier AM's persistent operation):
		// drop the expired ones here, which opIDBusy only does for IDs it
		// is asked about.
		for x, t := range m.foreign {
			if now.Sub(t) >= foreignHold {
				delete(m.foreign, x)
			}
		}
	}
	m.foreign[gk] = now
	m.mu.Unlock()
	if !known {
		m.logf("am: rank %d keeps alive persistent operation %s, granted by an earlier AM: its Operation ID %d stays out of job %d group %d's new operations while keepalives come",
			rank, k.Key(), k.OpID, k.Job, k.Group)
	}
}

// endPersistent ends a persistent operation every rank freed: its nodes
// are ACTIVE (a persistent vector is not necessarily used to its end, so
// they never reach COMPLETE), and ABORT is what removes an ACTIVE context.
// It is a success all the same: released, counted as completed.
func (m *Manager) endPersistent(op *operation) {
	op.mu.Lock()
	if op.watchdog != nil {
		op.watchdog.Stop()
	}
	op.mu.Unlock()
	m.released(op, m.abortAll(op), "ABORT of the freed persistent operation not acknowledged; contexts may remain installed until their timeout")
}

// refreshNodes asks every node of a persistent operation for its state
// (COMPLETE, which changes nothing). A node takes any CONTROL for a context
// as its AM's word that the context is still wanted: a persistent
// collective resting between invocations never times out by itself, so a
// node retires one that hears neither its AM nor its ranks for three
// timeouts plus a minute (engine.Expire), and this keeps a healthy idle
// one. It also keeps the node states GET /v1/ops shows fresh.
func (m *Manager) refreshNodes(op *operation) { m.askAll(op) }

// drain is a persistent operation's wait between a rank's local failure
// and the ABORT. The failing rank completed after invocations; another
// rank may still be receiving the RESULT of the last of them (RESULT goes
// to each rank on its own path, and a retransmission can hold one back).
// An ABORT at once cut that invocation, which the failing rank had
// completed, and failed a call on another rank that had nothing to do
// with the cancellation. So the AM waits until every rank that has not
// reported done reports, in a keepalive, that many invocations completed,
// and at most drainWait.
type drain struct {
	rank  int
	after uint32
	until time.Time
	timer *time.Timer
}

// drainWait bounds a drain: one keepalive period brings every living
// rank's count, and half of one more is slack for a loaded host. For a
// timeout above 150 ms it is shorter than the operation's timeout
// (0.75 x timeout, or 150 ms with the 100 ms keepalive floor), so the
// AM's diagnosis comes before the switches time out on the failed rank.
// It is also shorter than the keepalive deadline (3 periods + the
// CONTROL timeout), which a draining operation does not check.
func drainWait(p params) time.Duration {
	return time.Duration(keepaliveMS(p)*3/2) * time.Millisecond
}

// startDrain starts op's drain for d, a local failure after d.Invocations
// invocations, with op.mu held. It reports false when no other rank can
// still be in one of them (every other rank reported done, or as many
// invocations): the failure then proceeds at once.
func (m *Manager) startDrain(op *operation, d DoneRequest) bool {
	op.drain = &drain{rank: d.Rank, after: d.Invocations}
	if len(op.drainWaiting()) == 0 {
		op.drain = nil
		return false
	}
	op.state = "draining"
	wait := drainWait(op.inv.p)
	op.drain.until = time.Now().Add(wait)
	op.drain.timer = time.AfterFunc(wait, func() {
		op.mu.Lock()
		var late []int
		if op.drain != nil {
			late = op.drainWaiting()
		}
		end := op.drain != nil && op.drained(true)
		op.mu.Unlock()
		if end {
			m.endDrain(op, fmt.Sprintf("%v passed without a report of as many invocations from ranks %v", wait, late))
		}
	})
	m.logf("am: operation %s: rank %d failed locally after %d invocations; waiting up to %v for ranks %v to finish them before the ABORT",
		op.id.Key(), d.Rank, d.Invocations, wait, op.drainWaiting())
	return true
}

// endDrain logs why op's drain ended, which drained granted the caller,
// and fails the operation.
func (m *Manager) endDrain(op *operation, why string) {
	m.logf("am: operation %s: drain ended: %s", op.id.Key(), why)
	m.failOp(op, reasonRankFailed, "")
}

// drainWaiting lists the ranks op's drain waits for, with op.mu held.
func (op *operation) drainWaiting() []int {
	var w []int
	for r := 0; r < op.size; r++ {
		if _, done := op.done[r]; done {
			continue
		}
		if op.aliveInv[r] < op.drain.after {
			w = append(w, r)
		}
	}
	return w
}

// drained ends op's drain, with op.mu held, when no rank is left to wait
// for or force (the bound passed, or another failure came): it reports
// whether the caller must now fail the operation. Only one caller gets
// true.
func (op *operation) drained(force bool) bool {
	if op.drain == nil || !force && len(op.drainWaiting()) > 0 {
		return false
	}
	op.drain.timer.Stop()
	op.drain = nil
	op.state = "failing" // the caller fails it now
	return true
}

// drainStatus is OpStatus.Draining, with op.mu held.
func (op *operation) drainStatus() *Draining {
	if op.drain == nil {
		return nil
	}
	return &Draining{Rank: op.drain.rank, Invocations: op.drain.after, Waiting: op.drainWaiting(),
		LeftMS: max(time.Until(op.drain.until).Milliseconds(), 0)}
}

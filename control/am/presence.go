// This file owns rank presence (9.9): a rank's communicator holds one
// streaming request open to the AM for as long as it lives, so the AM
// learns within about a second that a rank's process is gone (killed,
// crashed, its host down) instead of letting the other ranks wait the
// whole barrier timeout (2 minutes by default) at the next call it will
// never make, or an operation's timeout for its contribution.
//
// A process is known by its session. Processes are grouped into runs of
// their job: every invocation that starts (all its ranks arrived) joins
// the sessions of its ranks into one run. A gone process only fails what
// waits for it in its own run: a process left over from an earlier run
// of the job (still closing, or killed late) never fails a new run, and
// a new process of the same rank (a restarted rank) does not hide the
// old one's death from the old one's peers.

package am

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PresenceRequest is the body of POST /v1/presence and POST
// /v1/presence/leave: the communicator (Job, Group, Rank of Size) of the
// process Session on Node.
type PresenceRequest struct {
	Job     uint64 `json:"job"`
	Group   uint16 `json:"group"`
	Rank    int    `json:"rank"`
	Size    int    `json:"size"`
	Node    string `json:"node"`
	Session uint64 `json:"session"`
}

// presenceRequired are the fields a presence request must carry.
var presenceRequired = []string{"job", "rank", "size", "node", "session"}

// checkPresence refuses a presence request that names no process or no
// rank of a communicator.
func checkPresence(r PresenceRequest) *APIError {
	switch {
	case r.Size < 1:
		return badReq("size %d: a communicator has at least one rank", r.Size)
	case r.Rank < 0 || r.Rank >= r.Size:
		return badReq("rank %d is outside 0..%d (size %d)", r.Rank, r.Size-1, r.Size)
	case r.Session == 0:
		return badReq("session 0: name the process with a random, non-zero session")
	case r.Node == "":
		return badReq("node \"\": name the rank's host, as in its begin requests")
	}
	return nil
}

// PresenceHeader is set (to "1") on the answer of POST /v1/presence: a
// client that does not see it talks to something else than an AM that
// keeps presence.
const PresenceHeader = "Prism-Presence"

// Presence timing (variables for tests).
var (
	// PresenceBeat is how often the AM writes a newline on an open
	// presence stream: the client's sign that the AM lives, and unacked
	// data that lets TCP_USER_TIMEOUT end the connection of a host that
	// vanished without closing it.
	PresenceBeat = time.Second
	// presenceUserTimeout is the TCP_USER_TIMEOUT of a presence stream's
	// connection: a peer that acknowledges nothing the AM wrote for this
	// long (its host is down or cut off) is gone.
	presenceUserTimeout = 5 * time.Second
	// presenceKeep is how long the record of a gone process is kept.
	presenceKeep = 10 * time.Minute
)

// presKey names one process of one rank of one communicator.
type presKey struct {
	job     uint64
	group   uint16
	rank    int
	session uint64
}

// grpKey names a communicator.
type grpKey struct {
	job   uint64
	group uint16
}

// presence is what the AM knows of one process.
type presence struct {
	node    string
	since   time.Time // its first stream
	streams int       // streams open now
	// leftAt is when the last stream closed (zero while one is open);
	// gone is set once the grace passed without a new stream, or at once
	// when the process said it leaves (clean).
	leftAt time.Time
	gone   bool
	clean  bool
	// wasGone: it was gone once already, and a stream came back (a
	// process alive after all, or the kernel of a dead one delivering
	// its last queued request once a partition healed). Gone again, it is
	// said once more but not counted twice.
	wasGone bool
	timer   *time.Timer // the grace; once gone, the record's expiry
	// nudges holds a channel per open stream: a request line sent on it
	// (tell) is written on the stream. Every stream gets it: of a
	// client's streams, the oldest may be the dead one it is replacing.
	nudges map[chan string]struct{}
}

// presenceState is the AM's presence bookkeeping, under Manager.mu.
type presenceState struct {
	procs map[presKey]*presence
	// gone indexes the gone processes by communicator, so that an
	// arrival checks only those (most communicators have none).
	gone map[grpKey]map[presKey]*presence
	// run maps a session to its run (a session of the run); members
	// lists a run's sessions. Only sessions with a presence record are
	// kept, and they leave with it.
	run     map[uint64]uint64
	members map[uint64][]uint64
}

func newPresenceState() presenceState {
	return presenceState{procs: map[presKey]*presence{}, gone: map[grpKey]map[presKey]*presence{},
		run: map[uint64]uint64{}, members: map[uint64][]uint64{}}
}

// sameRun reports whether sessions a and b were ranks of one started
// invocation, directly or through others.
func (ps *presenceState) sameRun(a, b uint64) bool {
	ra, ok := ps.run[a]
	rb, ok2 := ps.run[b]
	return ok && ok2 && ra == rb
}

// known reports whether process k holds presence.
func (ps *presenceState) known(k presKey) bool { return ps.procs[k] != nil }

// joinRun (under m.mu) joins the sessions of inv's ranks, every one that
// holds presence, into one run.
func (m *Manager) joinRun(inv *invocation) {
	ps := &m.pres
	var root uint64
	for r, a := range inv.arrived {
		if a.Session == 0 || !ps.known(presKey{inv.key.job, inv.key.group, r, a.Session}) {
			continue
		}
		if _, ok := ps.run[a.Session]; !ok {
			ps.run[a.Session] = a.Session
			ps.members[a.Session] = []uint64{a.Session}
		}
		x := ps.run[a.Session]
		if root == 0 {
			root = x
			continue
		}
		if x == root {
			continue
		}
		// Merge the smaller run into the larger.
		if len(ps.members[x]) > len(ps.members[root]) {
			root, x = x, root
		}
		for _, s := range ps.members[x] {
			ps.run[s] = root
		}
		ps.members[root] = append(ps.members[root], ps.members[x]...)
		delete(ps.members, x)
	}
}

// leaveRun (under m.mu) forgets session s's run membership.
func (ps *presenceState) leaveRun(s uint64) {
	root, ok := ps.run[s]
	if !ok {
		return
	}
	delete(ps.run, s)
	ms := ps.members[root]
	for i, x := range ms {
		if x == s {
			ms = append(ms[:i], ms[i+1:]...)
			break
		}
	}
	delete(ps.members, root)
	if len(ms) == 0 {
		return
	}
	if root == s { // the run is named by a session that left: rename it
		root = ms[0]
		for _, x := range ms {
			ps.run[x] = root
		}
	}
	ps.members[root] = ms
}

// presenceStream serves POST /v1/presence: it registers the process,
// then holds the answer open, writing a newline every PresenceBeat, until
// the client goes away or the AM closes.
func (m *Manager) presenceStream(w http.ResponseWriter, r *http.Request, req PresenceRequest) {
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		setUserTimeout(c, presenceUserTimeout)
	}
	k := presKey{req.Job, req.Group, req.Rank, req.Session}
	nudge := make(chan string, 4)
	p := m.presenceOpen(k, req, nudge)
	defer m.presenceClose(k, p, nudge)
	w.Header().Set(PresenceHeader, "1")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	t := time.NewTicker(PresenceBeat)
	defer t.Stop()
	for {
		if _, err := w.Write([]byte{'\n'}); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-m.done:
			return
		case <-t.C:
		case line := <-nudge:
			if _, err := w.Write([]byte(line)); err != nil {
				return
			}
		}
	}
}

// Presence stream request lines (9.9): a word, a space, an Operation ID.
const (
	// PresenceAlive asks the process to send that persistent operation's
	// keepalive at once (a draining operation waits for it, 9.7).
	PresenceAlive = "alive "
	// PresenceFailed says the operation failed (the AM's diagnosis is
	// its status): the process fails its part of it at once.
	PresenceFailed = "failed "
)

// tell writes word and op's ID as a line on every presence stream of the
// processes behind ranks of op. A process without an open stream is not
// told: for "alive" the drain's bound covers it, for "failed" its own
// timers.
func (m *Manager) tell(op *operation, ranks []int, word string) {
	line := word + op.id.Key() + "\n"
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range ranks {
		a, ok := op.inv.arrived[r]
		if !ok {
			continue
		}
		p := m.pres.procs[presKey{op.id.Job, op.id.Group, r, a.Session}]
		if p == nil {
			continue
		}
		for ch := range p.nudges {
			select {
			case ch <- line:
			default: // a stream with 4 lines not yet written: a stuck one
			}
		}
	}
}

// presenceOpen records an open stream of process k.
func (m *Manager) presenceOpen(k presKey, req PresenceRequest, nudge chan string) *presence {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pres.procs[k]
	if p == nil {
		p = &presence{node: req.Node, since: time.Now(), nudges: map[chan string]struct{}{}}
		m.pres.procs[k] = p
		// Its stream may open after its first calls started (the
		// library opens it in the background): the invocations it
		// took part in, still kept, join it to their run now.
		for key, inv := range m.invs {
			if key.job == k.job && key.group == k.group && inv.started {
				if a, ok := inv.arrived[k.rank]; ok && a.Session == k.session {
					m.joinRun(inv)
				}
			}
		}
	}
	if p.timer != nil {
		p.timer.Stop() // back within the grace, or after it was given up
		p.timer = nil
	}
	if p.gone {
		// Given up (its connection was lost) but alive: it counts again.
		delete(m.pres.gone[grpKey{k.job, k.group}], k)
		p.wasGone = true
	}
	p.streams++
	p.nudges[nudge] = struct{}{}
	p.leftAt, p.gone, p.clean = time.Time{}, false, false
	return p
}

// presenceClose notes that one of p's streams ended: with none left, the
// process is gone unless it comes back within the grace.
func (m *Manager) presenceClose(k presKey, p *presence, nudge chan string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(p.nudges, nudge)
	if m.pres.procs[k] != p {
		return
	}
	if p.streams--; p.streams > 0 || p.gone {
		return
	}
	p.leftAt = time.Now()
	p.timer = time.AfterFunc(m.cfg.PresenceGrace, func() { m.presenceExpired(k, p) })
}

// presenceExpired ends p's grace: it is gone.
func (m *Manager) presenceExpired(k presKey, p *presence) {
	m.mu.Lock()
	if m.pres.procs[k] != p || p.streams > 0 || p.gone {
		m.mu.Unlock()
		return
	}
	m.markGone(k, p)
}

// PresenceLeave is POST /v1/presence/leave: the rank's communicator
// closes (Comm.Close). It fails at once what waits for the process, as a
// gone one does, without the grace.
func (m *Manager) PresenceLeave(req PresenceRequest) {
	k := presKey{req.Job, req.Group, req.Rank, req.Session}
	m.mu.Lock()
	p := m.pres.procs[k]
	if p == nil || p.gone {
		m.mu.Unlock()
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.leftAt, p.clean = time.Now(), true
	m.markGone(k, p)
}

// markGone (called under m.mu, which it releases) records p as gone,
// fails every invocation of its run that waits for it and every
// operation of its run it is a rank of, and arms the record's expiry.
func (m *Manager) markGone(k presKey, p *presence) {
	ps := &m.pres
	p.gone = true
	g := grpKey{k.job, k.group}
	if ps.gone[g] == nil {
		ps.gone[g] = map[presKey]*presence{}
	}
	ps.gone[g][k] = p
	p.timer = time.AfterFunc(presenceKeep, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ps.procs[k] == p && p.gone {
			delete(ps.procs, k)
			delete(ps.gone[g], k)
			if len(ps.gone[g]) == 0 {
				delete(ps.gone, g)
			}
			ps.leaveRun(k.session)
		}
	})
	var failed []*invocation
	for key, inv := range m.invs {
		if key.job == k.job && key.group == k.group && m.goneFrom(inv, k, p) != nil {
			failed = append(failed, inv)
		}
	}
	// A running operation that still waits for this process's
	// contribution cannot complete: it fails now instead of at its
	// contributors' timeout (failIfWaiting). A process that left on
	// purpose freed its operations first.
	var ops []*operation
	if !p.clean {
		for _, op := range m.ops {
			if op.id.Job != k.job || op.id.Group != k.group || op.inv == nil {
				continue
			}
			if a, ok := op.inv.arrived[k.rank]; ok && a.Session == k.session {
				ops = append(ops, op)
			}
		}
	}
	msg := m.goneMessage(k, p)
	m.mu.Unlock()
	m.closeFailed(failed)
	running := 0
	for _, op := range ops {
		// m.ops keeps ended operations for introspection: only one that
		// still runs had this process as a rank.
		op.mu.Lock()
		live := op.ended.IsZero() && !op.failStarted
		op.mu.Unlock()
		if live {
			running++
			go m.failIfWaiting(op, k.rank, msg)
		}
	}
	effect := "none"
	if len(failed)+running > 0 {
		effect = "waited_for"
	}
	if p.wasGone && effect == "none" {
		// The same process, gone a second time, waited for by nobody: a
		// walkthrough saw its notice repeated 10 s after the first, when
		// a healed link delivered the dead process's last request.
		m.logf("am: job %d group %d: rank %d (%s): a connection of the process already said to be gone came back and closed again at %s",
			k.job, k.group, k.rank, p.node, p.leftAt.Format("15:04:05.000"))
		return
	}
	m.metrics.ranksGone.WithLabelValues(effect).Inc()
	switch {
	case p.clean && effect == "none":
		// The usual end of a job: the advice in msg is for ranks that
		// waited for it.
		m.logf("am: job %d group %d: rank %d (%s) closed its communicator", k.job, k.group, k.rank, p.node)
	case p.clean:
		m.logf("am: job %d group %d: %s", k.job, k.group, msg)
	case effect == "none":
		// A process that exits without closing its communicator, waited
		// for by nobody: the usual end of a job, not an alarm.
		m.logf("am: job %d group %d: %s; no call waited for it", k.job, k.group, msg)
	default:
		m.logf("am: WARN rank_gone: job %d group %d: %s", k.job, k.group, msg)
	}
}

// failIfWaiting fails op, still active, if a node says it waits for
// rank's contribution, or if op is persistent and the rank had not freed
// it. A rank that died after its part was in (a REDUCE
// rank whose data was delivered, a rank that had its whole RESULT) is
// waited for by nobody, and its operation may still complete for the
// others: failing it would abort their results in flight. A rank whose
// stream is not the one furthest behind at its leaf is left to the
// operation's timeout.
func (m *Manager) failIfWaiting(op *operation, rank int, msg string) {
	op.mu.Lock()
	active := op.state == "active"
	_, reported := op.done[rank]
	// A persistent operation can run no further invocation without the
	// rank: its other ranks' next one would wait for it until their
	// timeout, resting ones included. It fails now.
	doomed := active && op.persistent && !reported
	drained := false
	if op.drain != nil && slices.Contains(op.drainWaiting(), rank) {
		// A draining operation waits for this rank's report, which will
		// not come.
		drained = op.drained(true)
	}
	op.mu.Unlock()
	if drained {
		m.endDrain(op, msg)
		return
	}
	if !active {
		return
	}
	if doomed {
		m.failOpBlaming(op, CodeRankGone, msg, &rank)
		return
	}
	m.askAll(op)
	who := fmt.Sprintf("rank %d (", rank)
	waits := false
	op.mu.Lock()
	for _, n := range op.nodes {
		waits = waits || n.State == "ACTIVE" && strings.HasPrefix(n.MissingFromWhom, who)
	}
	op.mu.Unlock()
	if waits {
		m.failOpBlaming(op, CodeRankGone, msg, &rank)
	}
}

// goneMessage says why process k, record p, cannot come: in the words a
// waiting rank gets. The grace (Config.PresenceGrace) is how long a
// stream that closed may take to come back before its process counts as
// gone: a client that reconnects after a transient error is not a dead
// rank.
func (m *Manager) goneMessage(k presKey, p *presence) string {
	at := p.leftAt.Format("15:04:05.000")
	if p.clean {
		return fmt.Sprintf("rank %d (%s) closed its communicator at %s: every rank must make the same collective calls in the same order", k.rank, p.node, at)
	}
	return fmt.Sprintf("rank %d (%s) is gone: its process's connection to the AM closed at %s and did not come back within %v "+
		"(the process exited or crashed, its host went down, or the network between it and the AM failed)", k.rank, p.node, at, m.cfg.PresenceGrace)
}

// closeFailed wakes the ranks of invocations goneFrom failed.
func (m *Manager) closeFailed(failed []*invocation) {
	for _, inv := range failed {
		inv.timer.Stop()
		m.metrics.failed.WithLabelValues(CodeRankGone).Inc()
		m.warn(inv.err)
		close(inv.ready)
		m.forget(inv, time.Minute)
	}
}

// goneFrom (under m.mu) fails inv, if it still gathers its ranks, k's
// rank has not arrived, and a rank that did arrive is of k's run. It
// returns the error it set, or nil.
func (m *Manager) goneFrom(inv *invocation, k presKey, p *presence) *APIError {
	if inv.started || inv.err != nil || inv.grants != nil || !p.gone || k.rank >= inv.p.Size {
		return nil
	}
	if _, ok := inv.arrived[k.rank]; ok {
		return nil
	}
	together := false
	var arrived []int
	_, goneRun := m.pres.run[k.session]
	for r, a := range inv.arrived {
		arrived = append(arrived, r)
		together = together || m.pres.sameRun(a.Session, k.session)
		if q := m.pres.procs[presKey{k.job, k.group, r, a.Session}]; inv.key.seq == 0 && !goneRun && q != nil && q.since.Before(p.leftAt) {
			// The first call: no invocation started yet, so no run is
			// known. A process that was present with the waiting ones
			// and never took part in a run is of theirs; one of an
			// earlier run took part in it (or never reached its first
			// call, and is not told apart: a job run again at once).
			if _, ok := m.pres.run[a.Session]; !ok {
				together = true
			}
		}
	}
	if !together {
		return nil
	}
	sort.Ints(arrived)
	rank := k.rank
	inv.err = &APIError{Code: CodeRankGone, Rank: &rank,
		Message: fmt.Sprintf("job %d group %d seq %d: %s; ranks %v had arrived at this call", k.job, k.group, inv.key.seq, m.goneMessage(k, p), arrived)}
	by := BeginRequest{Job: k.job, Group: k.group, Seq: inv.key.seq, Rank: k.rank, Node: p.node, Session: k.session}
	inv.failedBy = &by // a new process of the rank is a new run, not a repeat
	return inv.err
}

// goneMissing (under m.mu) fails inv, still gathering, if a process of
// its run that it waits for is already gone; see goneFrom.
func (m *Manager) goneMissing(inv *invocation) bool {
	for k, p := range m.pres.gone[grpKey{inv.key.job, inv.key.group}] {
		if m.goneFrom(inv, k, p) != nil {
			return true
		}
	}
	return false
}

// selfGone is the error for rank r arriving at inv, failed because r's
// own process was declared gone (its connection to the AM was lost, but
// it lives): said as such, not as another rank's death.
func selfGone(inv *invocation, r BeginRequest) *APIError {
	e := inv.err
	by := inv.failedBy
	if e == nil || e.Code != CodeRankGone || by == nil || by.Rank != r.Rank || by.Session != r.Session || r.Session == 0 {
		return e
	}
	x := *e
	x.Message = fmt.Sprintf("job %d group %d seq %d: this rank (%d, %s) was declared gone: its presence connection to the AM closed "+
		"and did not come back in time (its host or network, or the AM, lost the connection), so the ranks waiting for it failed this call; "+
		"what they were told: %s", r.Job, r.Group, r.Seq, r.Rank, r.Node, e.Message)
	return &x
}

// goneNote (under m.mu) says, for the failure of op, which of its ranks'
// processes have lost their stream ("" if none), but rank skip (the
// rank a rank_gone failure already names; -1 for none).
func (m *Manager) goneNote(op *operation, skip int) string {
	if op.inv == nil {
		return ""
	}
	var ranks []int
	for r := range op.inv.arrived {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var s string
	for _, r := range ranks {
		p := m.pres.procs[presKey{op.id.Job, op.id.Group, r, op.inv.arrived[r].Session}]
		if r == skip || p == nil || p.streams > 0 || p.leftAt.IsZero() || p.clean {
			continue
		}
		s += fmt.Sprintf("; rank %d (%s): its process's connection to the AM closed at %s (the process exited or crashed, its host went down, or the network between it and the AM failed)",
			r, p.node, p.leftAt.Format("15:04:05.000"))
	}
	return s
}

// presenceHints (under m.mu) says, for a barrier timeout, what the AM
// knows of each missing rank's processes: whether one is connected (alive,
// but it did not make this call), one is gone, or none ever connected to
// this AM (it never started, or it runs a library without presence).
func (m *Manager) presenceHints(job uint64, group uint16, missing []int) string {
	var s string
	for _, r := range missing {
		var live, gone *presence
		for k, p := range m.pres.procs {
			if k.job != job || k.group != group || k.rank != r {
				continue
			}
			if p.gone {
				if gone == nil || p.leftAt.After(gone.leftAt) {
					gone = p
				}
			} else if live == nil || p.since.After(live.since) {
				live = p
			}
		}
		switch {
		case live != nil:
			s += fmt.Sprintf("; rank %d: a process on %s is connected to the AM (since %s) but did not make this call (blocked elsewhere, or its calls are out of step with the others')",
				r, live.node, live.since.Format("15:04:05"))
		case gone != nil:
			s += fmt.Sprintf("; rank %d: its last process, on %s, went at %s", r, gone.node, gone.leftAt.Format("15:04:05.000"))
		default:
			s += fmt.Sprintf("; rank %d: no process of it ever connected to this AM (not started, started with another --job, --group or --coordinator, or a library without presence)", r)
		}
	}
	return s
}

// StopStreams ends every presence stream (Close does too): for
// http.Server.RegisterOnShutdown, since Shutdown waits for open requests
// and a presence stream never ends on its own.
func (m *Manager) StopStreams() { m.stopOnce.Do(func() { close(m.done) }) }

// connKey is the context key under which ConnContext keeps a request's
// connection.
type connKey struct{}

// ConnContext is for http.Server.ConnContext: it lets a presence stream
// set TCP_USER_TIMEOUT on its connection, so that a rank whose host
// vanishes is gone within seconds instead of TCP's retransmission
// timeout (about 15 minutes).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// setUserTimeout sets TCP_USER_TIMEOUT on c (a TCP connection; others
// are left alone).
func setUserTimeout(c net.Conn, d time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}

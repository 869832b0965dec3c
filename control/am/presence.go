// This file owns rank presence (9.9): a rank's communicator holds one
// streaming request open to the AM for as long as it lives, so the AM
// learns within about a second that a rank's process is gone (killed,
// crashed, its host down) instead of letting the other ranks wait the
// whole barrier timeout (2 minutes by default) at the next call it will
// never make. A rank that is gone fails every invocation of its job
// whose barrier still waits for it, with an error naming it; once a
// granted operation it took part in fails, the diagnosis says so too.

package am

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
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
	}
	return nil
}

// PresenceHeader is set (to "1") on the answer of POST /v1/presence: a
// client that does not see it talks to something else than an AM that
// keeps presence and stops asking.
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
	// presenceKeep is how long the record of a rank that left is kept.
	presenceKeep = 10 * time.Minute
)

type presKey struct {
	job   uint64
	group uint16
	rank  int
}

// presence is what the AM knows of one rank of one communicator: the
// newest process (session) that registered for it.
type presence struct {
	session uint64
	node    string
	since   time.Time // first stream of this session
	streams int       // open streams of this session
	// leftAt is when the last stream closed (zero while one is open);
	// gone is set once the grace passed without a new stream, or at once
	// when the rank said it leaves (clean).
	leftAt time.Time
	gone   bool
	clean  bool
	timer  *time.Timer // the grace; then the record's expiry
}

// goneMessage says why rank k, whose record is p, cannot come: in the
// words a waiting rank gets. The grace (Config.PresenceGrace) is how long
// a stream that closed may take to come back (the same session) before
// its rank counts as gone: a client that reconnects after a transient
// error is not a dead rank.
func (m *Manager) goneMessage(k presKey, p *presence) string {
	at := p.leftAt.Format("15:04:05.000")
	if p.clean {
		return fmt.Sprintf("rank %d (%s) closed its communicator at %s: every rank must make the same collective calls in the same order", k.rank, p.node, at)
	}
	return fmt.Sprintf("rank %d (%s) is gone: its process's connection to the AM closed at %s and did not come back within %v "+
		"(the process exited or crashed, or its host or network went down)", k.rank, p.node, at, m.cfg.PresenceGrace)
}

// presenceStream serves POST /v1/presence: it registers the rank, then
// holds the answer open, writing a newline every PresenceBeat, until the
// client goes away or the AM closes.
func (m *Manager) presenceStream(w http.ResponseWriter, r *http.Request, req PresenceRequest) {
	// The server notices a client that went away (its context ends) only
	// once the request body was read to its end.
	_, _ = io.Copy(io.Discard, r.Body)
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
		setUserTimeout(c, presenceUserTimeout)
	}
	k := presKey{req.Job, req.Group, req.Rank}
	p := m.presenceOpen(k, req)
	defer m.presenceClose(k, p)
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
		}
	}
}

// presenceOpen records an open stream of k's process req.Session.
func (m *Manager) presenceOpen(k presKey, req PresenceRequest) *presence {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.presence[k]
	if p == nil || p.session != req.Session {
		// A new process for the rank: a new run of the job (or the
		// first): what an earlier process did no longer counts.
		if p != nil && p.timer != nil {
			p.timer.Stop()
		}
		p = &presence{session: req.Session, node: req.Node, since: time.Now()}
		m.presence[k] = p
	}
	if p.timer != nil {
		p.timer.Stop() // back within the grace
		p.timer = nil
	}
	p.streams++
	p.leftAt, p.gone, p.clean = time.Time{}, false, false
	return p
}

// presenceClose notes that one of p's streams ended: with none left, the
// rank is gone unless it comes back within the grace.
func (m *Manager) presenceClose(k presKey, p *presence) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.presence[k] != p {
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
	if m.presence[k] != p || p.streams > 0 || p.gone {
		m.mu.Unlock()
		return
	}
	p.gone = true
	msg := m.goneMessage(k, p)
	m.goneLocked(k, p)
	m.metrics.ranksGone.Inc()
	m.logf("am: WARN rank_gone: job %d group %d: %s", k.job, k.group, msg)
}

// PresenceLeave is POST /v1/presence/leave: the rank's communicator
// closes (Comm.Close). It fails at once what waits for the rank, as a
// gone rank does, without the grace.
func (m *Manager) PresenceLeave(req PresenceRequest) {
	k := presKey{req.Job, req.Group, req.Rank}
	m.mu.Lock()
	p := m.presence[k]
	if p == nil || p.session != req.Session || p.gone {
		m.mu.Unlock()
		return
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.leftAt, p.gone, p.clean = time.Now(), true, true
	m.goneLocked(k, p)
	m.logf("am: job %d group %d: rank %d (%s) closed its communicator", k.job, k.group, k.rank, p.node)
}

// goneLocked (called under m.mu, which it releases) fails every
// invocation of k's communicator whose barrier waits for k.rank and
// whose arrived ranks were present together with p (they belong to the
// run p belonged to), and arms the record's expiry.
func (m *Manager) goneLocked(k presKey, p *presence) {
	p.timer = time.AfterFunc(presenceKeep, func() {
		m.mu.Lock()
		if m.presence[k] == p && p.gone {
			delete(m.presence, k)
		}
		m.mu.Unlock()
	})
	var failed []*invocation
	for key, inv := range m.invs {
		if key.job != k.job || key.group != k.group {
			continue
		}
		if e := m.goneFrom(inv, k, p); e != nil {
			failed = append(failed, inv)
		}
	}
	m.mu.Unlock()
	m.closeFailed(failed)
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

// goneFrom (under m.mu) fails inv, if it still gathers its ranks, k.rank
// has not arrived and is gone (record p), and a rank that did arrive was
// present while p's process was: a process that left before the waiting
// ones started belongs to an earlier run of the job and says nothing
// about this one. It returns the error it set, or nil.
func (m *Manager) goneFrom(inv *invocation, k presKey, p *presence) *APIError {
	if inv.started || inv.err != nil || inv.grants != nil || !p.gone || k.rank >= inv.p.Size {
		return nil
	}
	if _, ok := inv.arrived[k.rank]; ok {
		return nil
	}
	together := false
	var arrived []int
	for r, a := range inv.arrived {
		arrived = append(arrived, r)
		if q := m.presence[presKey{k.job, k.group, r}]; q != nil && q.session == a.Session && a.Session != 0 && q.since.Before(p.leftAt) {
			together = true
		}
	}
	if !together {
		return nil
	}
	sort.Ints(arrived)
	rank := k.rank
	inv.err = &APIError{Code: CodeRankGone, Rank: &rank,
		Message: fmt.Sprintf("job %d group %d seq %d: %s; ranks %v wait for it at this call", k.job, k.group, inv.key.seq, m.goneMessage(k, p), arrived)}
	by := BeginRequest{Job: k.job, Group: k.group, Seq: inv.key.seq, Rank: k.rank, Node: p.node, Session: p.session}
	inv.failedBy = &by // a new process of the rank is a new run, not a repeat
	return inv.err
}

// goneMissing (under m.mu) fails inv, still gathering, if a rank it
// waits for is already gone; see goneFrom.
func (m *Manager) goneMissing(inv *invocation) bool {
	for r := 0; r < inv.p.Size; r++ {
		if p := m.presence[presKey{inv.key.job, inv.key.group, r}]; p != nil && p.gone {
			if m.goneFrom(inv, presKey{inv.key.job, inv.key.group, r}, p) != nil {
				return true
			}
		}
	}
	return false
}

// goneNote (under m.mu) says, for a failure's diagnosis, which of the
// operation's ranks are gone ("" if none).
func (m *Manager) goneNote(job uint64, group uint16, size int) string {
	var s string
	for r := 0; r < size; r++ {
		if p := m.presence[presKey{job, group, r}]; p != nil && p.streams == 0 && !p.leftAt.IsZero() && !p.clean {
			s += fmt.Sprintf("; rank %d (%s): its process's connection to the AM closed at %s (the process exited or crashed, or its host went down)",
				r, p.node, p.leftAt.Format("15:04:05.000"))
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

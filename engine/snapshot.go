// This file owns introspection: the per-worker snapshot of every operation,
// rebuilt in Tick (every SnapshotInterval while read, and whenever a
// context comes, goes or changes state) and published through an
// atomic pointer so that readers (the control HTTP server) never touch live
// engine state.

package engine

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// Snapshot is one worker's view of its operations.
type Snapshot struct {
	Worker int          `json:"worker"`
	AtNs   int64        `json:"at_ns"`
	Ops    []OpSnapshot `json:"ops"`
	// What the worker's contexts hold against its limits (Config.MaxOps,
	// Config.MaxRingBytes): a STAGE past either is NO_RESOURCES.
	AccumulatorBytes      int `json:"accumulator_bytes"`
	AccumulatorLimitBytes int `json:"accumulator_limit_bytes"`
	MaxContexts           int `json:"max_contexts"`
}

// OpSnapshot describes one operation context.
type OpSnapshot struct {
	Job        uint64 `json:"job"`
	Group      uint16 `json:"group"`
	GroupGen   uint16 `json:"group_gen"`
	Op         uint16 `json:"op"`
	OpGen      uint32 `json:"op_gen"`
	Role       string `json:"role"`
	Collective string `json:"collective"`
	State      string `json:"state"`
	Tuple      string `json:"tuple"`
	VectorLen  uint32 `json:"vector_len"`
	// Frontier: every contributor committed below it. Emitted: elements
	// encoded into every outgoing stream (completed and handed on).
	Frontier uint32 `json:"frontier"`
	Emitted  uint32 `json:"emitted"`
	Window   uint32 `json:"window_elements"`
	Inexact  bool   `json:"inexact,omitempty"`
	Error    string `json:"error,omitempty"`
	// FailCause is a FAILED context's cause (what COMPLETE's ACK reports):
	// TIMEOUT (a peer went silent here), PEER_FAILED (a peer reported its
	// failure) or INTERNAL.
	FailCause string `json:"fail_cause,omitempty"`
	// WaitingFor says exactly what the operation needs next.
	WaitingFor []string         `json:"waiting_for,omitempty"`
	Inbound    []InboundStream  `json:"inbound"`
	Outbound   []OutboundStream `json:"outbound"`
	ActiveMs   int64            `json:"active_ms"`
	// StateMs is how long the context has been in its state by the
	// expiry's clock, and ExpiresInMs how long it has left before the
	// node retires it as abandoned by its AM (Expire): set for a STAGED,
	// COMPLETE or FAILED context and a resting persistent one. An AM that
	// died mid-setup left STAGED contexts that showed 'active 0ms'.
	StateMs     int64 `json:"state_ms,omitempty"`
	ExpiresInMs int64 `json:"expires_in_ms,omitempty"`
}

// InboundStream is one receiving binding's coverage.
type InboundStream struct {
	Kind            string        `json:"kind"`
	Stream          uint16        `json:"stream"`
	PeerEP          uint16        `json:"peer_endpoint"`
	Port            int           `json:"port"`
	PeerMAC         string        `json:"peer_mac"`
	Committed       uint32        `json:"committed"`
	Released        uint32        `json:"released"`
	Holes           []stream.Hole `json:"holes,omitempty"`
	Pending         int           `json:"pending_intervals"`
	IntervalCredits int           `json:"interval_credits"`
	ByteCredits     uint32        `json:"byte_credits"`
	Done            bool          `json:"done"`
	IdleMs          int64         `json:"idle_ms"`
	// Resting: the sender rests at a PUSH boundary (a persistent
	// collective between invocations). HeldMs: how long another
	// contributor has been waiting for it past that boundary (0: none).
	Resting bool  `json:"resting,omitempty"`
	HeldMs  int64 `json:"held_ms,omitempty"`
}

// OutboundStream is one sending binding's replay state.
type OutboundStream struct {
	Kind            string `json:"kind"`
	Stream          uint16 `json:"stream"`
	PeerEP          uint16 `json:"peer_endpoint"`
	Port            int    `json:"port"`
	PeerMAC         string `json:"peer_mac"`
	PeerCommitted   uint32 `json:"peer_committed"`
	UnackedFrames   int    `json:"unacked_frames"`
	UnackedBytes    int    `json:"unacked_bytes"`
	UnackedFrom     uint32 `json:"unacked_from"`
	UnackedTo       uint32 `json:"unacked_to"`
	IntervalCredits int    `json:"interval_credits"`
	ByteCredits     int    `json:"byte_credits"`
	Retransmits     uint64 `json:"retransmits"`
	NextPacketID    uint32 `json:"next_packet_id"`
}

// Snapshot returns the newest published snapshot; safe from any goroutine.
// Reading it keeps the next ones at most SnapshotInterval old for
// UnwatchedAfter (see SnapshotInterval).
func (e *Engine) Snapshot() *Snapshot {
	e.reads.Add(1)
	return e.snap.Load()
}

// Publish rebuilds and publishes the snapshot now (Tick does this at most
// every SnapshotInterval; tests call it directly).
func (e *Engine) Publish(now int64) { e.publish(now) }

func (e *Engine) publish(now int64) {
	s := &Snapshot{Worker: e.cfg.Worker, AtNs: now, Ops: make([]OpSnapshot, 0, len(e.ops)),
		AccumulatorBytes: e.ringBytes, AccumulatorLimitBytes: e.cfg.MaxRingBytes, MaxContexts: e.cfg.MaxOps}
	for _, o := range e.ops {
		s.Ops = append(s.Ops, o.snapshot(now))
	}
	sort.Slice(s.Ops, func(i, j int) bool {
		a, b := &s.Ops[i], &s.Ops[j]
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Op < b.Op
	})
	e.snap.Store(s)
	e.lastSnap = now
}

// snapStrings caches a stream's introspection strings: the snapshot is
// rebuilt every SnapshotInterval for every context, and formatting the
// same MAC and the same waiting-for line again was most of its cost (a
// switch resting 1024 persistent collectives spent a quarter of a core on
// it). A string is formatted again only when what it says changed.
type snapStrings struct {
	mac     string
	waitKey waitKey
	wait    string
}

// waitKey is what a stream's waiting-for line says: which form, and the
// element it names.
type waitKey struct {
	form      uint8 // 0 none, 1 resting, 2 elements from
	committed uint32
}

// peerMAC is the stream's peer MAC, formatted once.
func (c *snapStrings) peerMAC(m [6]byte) string {
	if c.mac == "" {
		c.mac = mac(m)
	}
	return c.mac
}

// waiting returns the line for k, formatted by f only when k changed.
func (c *snapStrings) waiting(k waitKey, f func() string) string {
	if c.waitKey != k || c.wait == "" {
		c.waitKey, c.wait = k, f()
	}
	return c.wait
}

func mac(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

func (o *op) snapshot(now int64) OpSnapshot {
	k := o.spec.Op
	s := OpSnapshot{Job: k.Job, Group: k.Group, GroupGen: k.GroupGen, Op: k.Op, OpGen: k.OpGen,
		Role: o.spec.Role.String(), Collective: o.spec.Collective.String(), State: o.state.String(),
		Tuple:     o.tupleString(),
		VectorLen: o.spec.VectorLen, Frontier: o.frontier, Emitted: o.emitted, Window: o.ring, Inexact: o.inexact}
	if o.err != nil {
		s.Error = o.err.Error()
	}
	if o.state == parser.StateFailed {
		s.FailCause = o.failCause.String()
	}
	if o.activeAt != 0 {
		end := now
		if o.doneAt != 0 {
			end = o.doneAt
		}
		s.ActiveMs = (end - o.activeAt) / 1e6
	}
	if since, _, ok := o.expiryClock(); ok {
		s.StateMs = (now - since) / 1e6
		s.ExpiresInMs = max((since+o.expiryAfter()-now)/1e6, 1)
	}
	var hs [stream.MaxHoles]stream.Hole
	addIn := func(ib *inbound) {
		ci, cb := ib.rw.Credits()
		n := ib.rw.Holes(hs[:])
		is := InboundStream{Kind: ib.b.Kind.String(), Stream: ib.b.Stream, PeerEP: ib.b.PeerEP, Port: ib.b.Port,
			PeerMAC: ib.snap.peerMAC(ib.b.PeerMAC), Committed: ib.rw.Committed(), Released: ib.rw.Released(),
			Holes: append([]stream.Hole(nil), hs[:n]...), Pending: ib.rw.Pending(),
			IntervalCredits: ci, ByteCredits: cb, Done: ib.rw.Done()}
		if ib.lastActive != 0 {
			is.IdleMs = (now - ib.lastActive) / 1e6
		}
		is.Resting = ib != o.result && ib.paused()
		if is.Resting && ib.heldSince != 0 {
			is.HeldMs = (now - ib.heldSince) / 1e6
		}
		s.Inbound = append(s.Inbound, is)
		switch {
		case o.state != parser.StateActive || is.Done || ib == o.result && !ib.armed:
		case is.Resting && is.HeldMs == 0:
			s.WaitingFor = append(s.WaitingFor, ib.snap.waiting(waitKey{1, is.Committed}, func() string {
				return fmt.Sprintf("%s stream %d (endpoint %d, %s, port %d): its next invocation (it rests at element %d after PUSH: a persistent collective between invocations, not timed out while no other contributor has gone past it)",
					is.Kind, is.Stream, is.PeerEP, is.PeerMAC, is.Port, is.Committed)
			}))
		case is.Resting:
			s.WaitingFor = append(s.WaitingFor, fmt.Sprintf("%s stream %d (endpoint %d, %s, port %d): elements from %d (it rested there after PUSH; other contributors went past it %d ms ago, timeout %d ms)",
				is.Kind, is.Stream, is.PeerEP, is.PeerMAC, is.Port, is.Committed, is.HeldMs, o.spec.Timeout.Milliseconds()))
		default:
			s.WaitingFor = append(s.WaitingFor, ib.snap.waiting(waitKey{2, is.Committed}, func() string {
				return fmt.Sprintf("%s stream %d (endpoint %d, %s, port %d): elements from %d",
					is.Kind, is.Stream, is.PeerEP, is.PeerMAC, is.Port, is.Committed)
			}))
		}
	}
	for i := range o.in {
		addIn(&o.in[i])
	}
	if o.result != nil {
		addIn(o.result)
	}
	addOut := func(ob *outbound) {
		f, b := ob.sw.Unacked()
		from, to := ob.sw.Outstanding()
		ci, cb := ob.sw.Credits()
		rt, _ := ob.sw.Stats()
		os := OutboundStream{Kind: ob.b.Kind.String(), Stream: ob.b.Stream, PeerEP: ob.b.PeerEP, Port: ob.b.Port,
			PeerMAC: ob.snap.peerMAC(ob.b.PeerMAC), PeerCommitted: ob.sw.Committed(), UnackedFrames: f, UnackedBytes: b,
			UnackedFrom: from, UnackedTo: to, IntervalCredits: ci, ByteCredits: cb, Retransmits: rt,
			NextPacketID: ob.sw.NextPacketID()}
		s.Outbound = append(s.Outbound, os)
		if o.state == parser.StateActive && f > 0 {
			s.WaitingFor = append(s.WaitingFor, fmt.Sprintf("ACK from %s stream %d (endpoint %d, %s, port %d) for elements [%d, %d)",
				os.Kind, os.Stream, os.PeerEP, os.PeerMAC, os.Port, from, to))
		}
	}
	if o.parent != nil {
		addOut(o.parent)
	}
	for i := range o.outs {
		addOut(&o.outs[i])
	}
	if o.state == parser.StateActive && o.emitted < o.frontier {
		s.WaitingFor = append(s.WaitingFor, fmt.Sprintf("send credit to hand on elements [%d, %d)", o.emitted, o.frontier))
	}
	if o.state == parser.StateStaged {
		s.WaitingFor = append(s.WaitingFor, "COMMIT")
	}
	return s
}

// opName is an operation as the AM, the ranks and 'prismctl show ops' name
// it (Job-Group-GroupGen-Op-OpGen, am.OpID's form), so that a switch's log
// line can be found from a rank's error and back.
func opName(k parser.OpKey) string { return k.String() }

func itoa(i int) string { return strconv.Itoa(i) }

// tupleString is the context's arithmetic tuple as the snapshot shows it,
// formatted once.
func (o *op) tupleString() string {
	if o.tuple == "" {
		t := o.spec.Tuple
		o.tuple = fmt.Sprintf("%v/%v/%v/%v W=%d", t.Input, t.Acc, t.Partial, t.Output, o.w)
	}
	return o.tuple
}

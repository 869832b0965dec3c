// This file owns the Shard (one per dataplane worker): its BITMAP context
// table, the lifecycle calls package control makes, and the frame and timer
// entry points.

package bitmap

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/parser"
)

// SnapshotInterval bounds how often Tick rebuilds the introspection snapshot
// (as engine.SnapshotInterval).
const SnapshotInterval = 100 * time.Millisecond

// Config configures one worker's Shard. Zero values take defaults.
type Config struct {
	// Worker is the worker index (introspection only).
	Worker int
	// Counters are shared by every Shard of the node (default: private).
	Counters *Counters
	// Keys holds the per-job authentication keys (default: none, so no job
	// requires AUTH). Share one Keyring between all Shards of a node.
	Keys *Keyring
	// Logger receives PARTIAL reports naming the missing endpoints
	// (default slog.Default()).
	Logger *slog.Logger
	// MaxContexts bounds installed BITMAP contexts per worker (default 64).
	MaxContexts int
	// MaxBits bounds a context's bit space (default 1<<20 endpoints: each
	// scratch set is then 128 KiB; the FLAT/HIER wire limits are far
	// larger, but a node's masks and A-BM only ever name the endpoints the
	// AM placed below it).
	MaxBits int
	// MaxBankBytes bounds accumulator memory per worker (default 256 MiB).
	MaxBankBytes int
}

// Shard is one worker's set of BITMAP contexts. Not safe for concurrent use
// except Snapshot, which any goroutine may call.
type Shard struct {
	cfg       Config
	m         *Counters
	log       *slog.Logger
	ops       map[parser.OpKey]*ctx
	bankBytes int

	d, d2 parser.Data
	b     parser.DataBuilder
	out   [parser.EthLen + parser.MTUJumbo]byte
	tmpl  [parser.EthLen + parser.MTUJumbo]byte

	snap     atomic.Pointer[Snapshot]
	lastSnap int64
	dirty    bool
}

// NewShard returns an empty shard.
func NewShard(cfg Config) *Shard {
	if cfg.Counters == nil {
		cfg.Counters = NewCounters()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxContexts <= 0 {
		cfg.MaxContexts = 64
	}
	if cfg.MaxBits <= 0 {
		cfg.MaxBits = 1 << 20
	}
	if cfg.MaxBankBytes <= 0 {
		cfg.MaxBankBytes = 256 << 20
	}
	s := &Shard{cfg: cfg, m: cfg.Counters, log: cfg.Logger, ops: map[parser.OpKey]*ctx{}}
	s.snap.Store(&Snapshot{Worker: cfg.Worker})
	return s
}

// Counters returns the shard's counters (a prometheus.Collector).
func (s *Shard) Counters() *Counters { return s.m }

// Keys returns the keyring the shard reads (Config.Keys; nil: none).
func (s *Shard) Keys() *Keyring { return s.cfg.Keys }

// Owns reports whether op is an installed BITMAP context of this shard.
func (s *Shard) Owns(op parser.OpKey) bool { return s.ops[op] != nil }

// Stage installs a BITMAP context (Collective 3) from a STAGE body the parser
// validated; ports is the node's port count (0 = unchecked). It returns the
// ACK status and, for INVALID / INVALID_BINDING, the Detail (body offset);
// parser.NoDetail otherwise. Generations and transactions are control's.
func (s *Shard) Stage(now int64, op parser.OpKey, st *parser.Stage, ports int) (parser.Status, uint16) {
	if s.ops[op] != nil {
		return parser.StatusBadState, parser.NoDetail
	}
	if len(s.ops) >= s.cfg.MaxContexts {
		return parser.StatusNoResources, parser.NoDetail
	}
	c, stt, det := s.stageCtx(now, op, st, ports)
	if stt != parser.StatusOK {
		return stt, det
	}
	s.ops[op] = c
	s.dirty = true
	return parser.StatusOK, parser.NoDetail
}

// Commit moves a STAGED context to ACTIVE (idempotent on ACTIVE).
func (s *Shard) Commit(now int64, op parser.OpKey) parser.Status {
	c := s.ops[op]
	switch {
	case c == nil:
		return parser.StatusBadState
	case c.state == parser.StateActive:
		return parser.StatusOK
	case c.state != parser.StateStaged:
		return parser.StatusBadState
	}
	c.state, c.activeAt = parser.StateActive, now
	s.dirty = true
	return parser.StatusOK
}

// State returns a context's state. A BITMAP context has no end of vector, so
// it never becomes COMPLETE by itself: it serves tokens until the AM releases
// it.
func (s *Shard) State(op parser.OpKey) (parser.OpState, bool) {
	c := s.ops[op]
	if c == nil {
		return parser.StateNone, false
	}
	return c.state, true
}

// Status is what COMPLETE reports: Completed counts aggregations completed
// or emitted as PARTIAL (mod 2^32); Open is the number of open aggregation
// and soft-state slots.
func (s *Shard) Status(op parser.OpKey) (st parser.OpState, completed uint32, open int, ok bool) {
	c := s.ops[op]
	if c == nil {
		return parser.StateNone, 0, 0, false
	}
	return c.state, uint32(c.stats.Completed + c.stats.Partials), c.live(), true
}

// Release frees a context that has nothing open (no aggregation, no soft
// state): RELEASE of an ACTIVE BITMAP context is the AM's normal end of a
// job (as of a STAGED one, like package control does for the engine). With
// state still open it answers BAD_STATE (ABORT discards it).
func (s *Shard) Release(op parser.OpKey) parser.Status {
	c := s.ops[op]
	if c == nil || c.live() != 0 {
		return parser.StatusBadState
	}
	s.remove(op, c)
	return parser.StatusOK
}

// Abort frees a context in any state, discarding open aggregations.
func (s *Shard) Abort(op parser.OpKey) parser.Status {
	c := s.ops[op]
	if c == nil {
		return parser.StatusBadState
	}
	s.remove(op, c)
	return parser.StatusOK
}

func (s *Shard) remove(op parser.OpKey, c *ctx) {
	s.bankBytes -= c.bankBytes
	delete(s.ops, op)
	s.dirty = true
}

// HandleData takes one DATA or RESULT frame that arrived on port in. It
// reports false, touching nothing, when the frame's operation identity is
// not a BITMAP context of this shard (the engine's then).
func (s *Shard) HandleData(now int64, in int, frame []byte, tx dataplane.Sender) bool {
	if len(s.ops) == 0 || len(frame) < parser.DataBodyOff {
		return false
	}
	c := s.ops[parser.OpIdentity(frame[parser.HdrOff:]).Key()]
	if c == nil {
		return false
	}
	c.handle(now, in, frame, tx)
	return true
}

// Handle is HandleData for a caller that already knows the frame is ours
// (control routed it by Owns). Frames of unknown contexts are ignored.
func (s *Shard) Handle(now int64, in int, frame []byte, tx dataplane.Sender) {
	s.HandleData(now, in, frame, tx)
}

// ExpiryGrace is added to three context Timeouts before a STAGED context
// is taken for abandoned (Expire); engine.ExpiryGrace for the PRISM
// collectives, with which it must stay equal (docs/protocol.md section 5,
// Expiry).
const ExpiryGrace = time.Minute

// Expire hands retire every context its registrar evidently abandoned:
// STAGED for longer than three times its Timeout plus ExpiryGrace without
// the COMMIT or ABORT that a living registrar sends within its CONTROL
// timeout. retire removes it (package control keeps its generation, as for
// ABORT). An ACTIVE BITMAP context never expires: it is forwarding state
// (BIFT masks, A-BM) that serves its job's tokens, idle or not, until its
// registrar RELEASEs or ABORTs it, like a route an operator installed.
func (s *Shard) Expire(now int64, retire func(key parser.OpKey, as parser.OpState)) {
	for k, c := range s.ops {
		if c.state != parser.StateStaged || now-c.stagedAt <= 3*c.timeout+int64(ExpiryGrace) {
			continue
		}
		s.m.Expired.Add(1)
		s.log.Warn("bitmap context expired: STAGED without COMMIT or ABORT from its registrar", "job", k.Job,
			"group", k.Group, "group_gen", k.GroupGen, "op", k.Op, "op_gen", k.OpGen, "for", time.Duration(now-c.stagedAt).Round(time.Second).String())
		retire(k, parser.StateAborted)
	}
}

// Tick runs the completion timeouts (PARTIAL emission, soft-state expiry)
// and publishes the snapshot.
func (s *Shard) Tick(now int64, tx dataplane.Sender) {
	for _, c := range s.ops {
		if c.state == parser.StateActive {
			c.tick(now, tx)
		}
	}
	if s.dirty || now-s.lastSnap >= int64(SnapshotInterval) {
		s.publish(now)
	}
}

// Quiet reports whether no timer Tick serves is armed: no ACTIVE context
// holds an open aggregation or C-BM soft state, the only things that time
// out (their deadline is the context Timeout, 200 ms by default for MoE
// registrations). An ACTIVE context with nothing open is forwarding state
// that waits for its job's next token, indefinitely (it never expires), and
// a STAGED one waits for COMMIT (Expire checks it each second); neither
// needs a tick every millisecond. The worker may then tick slowly
// (control.Worker.TickEvery) until the next frame, which is what opens an
// aggregation or soft state and brings the fast tick back before its
// deadline can pass.
func (s *Shard) Quiet() bool {
	for _, c := range s.ops {
		if c.state == parser.StateActive && c.live() > 0 {
			return false
		}
	}
	return true
}

// send hands a frame to the dataplane and counts a full queue.
func (s *Shard) send(tx dataplane.Sender, port int, frame []byte) {
	if !tx.Send(port, frame) {
		s.m.TxFull.Add(1)
	}
}

// Len is the number of installed BITMAP contexts (any state).
func (s *Shard) Len() int { return len(s.ops) }

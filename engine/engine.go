// This file owns the Engine (one per dataplane worker): its operation table,
// the lifecycle calls package control makes (Stage, Commit, Status, Release,
// Abort) and the frame entry points (HandleData, HandleProgress, Tick).

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// Errors returned by the lifecycle calls; control maps them to ACK statuses.
var (
	ErrNoResources = errors.New("engine: no resources")     // NO_RESOURCES
	ErrBadState    = errors.New("engine: bad state")        // BAD_STATE
	ErrExists      = errors.New("engine: operation exists") // a context with this identity is installed
)

// Decode errors for frames too short to carry an operation identity:
// package-level so that dropping them allocates nothing.
var (
	errShortData     error = &parser.FieldError{Class: parser.ClassData, Field: "header", Offset: parser.HdrOff, Err: parser.ErrTruncated}
	errShortProgress error = &parser.FieldError{Class: parser.ClassProgress, Field: "header", Offset: parser.HdrOff, Err: parser.ErrTruncated}
)

// SnapshotInterval bounds how often Tick rebuilds the introspection snapshot
// while someone reads it (Snapshot within UnwatchedAfter): often enough for
// an operator, rare enough that its allocation is noise. Unread, it is
// rebuilt every UnwatchedSnapshotInterval, and at once when a context is
// added, removed or changes state, so that its contexts and their states
// are never older than a Tick: a switch resting 1024 persistent
// collectives spent a quarter of a core rebuilding a snapshot nobody read.
const (
	SnapshotInterval          = 100 * time.Millisecond
	UnwatchedSnapshotInterval = time.Second
	UnwatchedAfter            = 10 * time.Second
)

// Config configures one worker's Engine. Zero values take defaults.
type Config struct {
	// Worker is the worker index (introspection only).
	Worker int
	// Metrics is shared by all workers (default: a private set).
	Metrics *Metrics
	// Logger receives operation failures (default slog.Default()).
	Logger *slog.Logger
	// MaxOps bounds installed contexts per worker (default 256).
	MaxOps int
	// MaxRingBytes bounds accumulator memory per worker (default 1 GiB).
	MaxRingBytes int
	// CoalesceProgress defers the OK PROGRESS of accepted frames to Flush,
	// which the caller promises to call at the end of every batch (the
	// dataplane does: dataplane.Flusher): one PROGRESS per stream per batch
	// instead of one per frame, as docs/protocol.md 7 allows. Refusals
	// (DUPLICATE, INVALID, NO_CREDIT) are still answered at once.
	CoalesceProgress bool
	// PlainKulischPartials never sends KULISCH_SCALED or KULISCH_F64 groups
	// (docs/protocol.md section 6): KULISCH partials go out as plain
	// KULISCH groups, AUTO partials as AUTO alone plans them. Receiving
	// scaled groups is unaffected: every receiver of KULISCH partials must
	// take them. For comparisons and measurements; the default (false)
	// sends the compact scaled groups wherever they are smaller.
	PlainKulischPartials bool
	// CompactKulischPartials never sends KULISCH_F64 groups: every exact
	// partial frame is planned as KULISCH_SCALED (or AUTO), the fewest
	// bytes on the link. By default (false) a frame whose values binary64
	// holds goes as one KULISCH_F64 group, which costs a leaf and its
	// parent far less CPU for 1.3 to 1.5 x the bytes.
	CompactKulischPartials bool
	// FrozenAfter, when positive, is the gap between two Ticks taken for
	// this process not having run (SIGSTOP, a hung VM, CPU starvation):
	// the silence its clocks measured across it is its own, not its
	// peers'. Tick then excuses the gap (every inactivity clock set
	// before it moves on by the gap) and logs it once. A switch that
	// woke from a 10 s stop timed out on its healthy neighbours and the
	// AM blamed them. Off by default: tests step time in jumps; the
	// daemon sets it (workers tick every millisecond, 100 ms when quiet).
	FrozenAfter time.Duration
}

// maxOwed bounds the streams with a deferred PROGRESS per batch; beyond it
// a PROGRESS goes out at once, so the bound costs frames, never an ACK.
const maxOwed = 64

type owedProgress struct {
	o  *op
	ib *inbound
}

// Engine is one worker's collective engine. Not safe for concurrent use
// except Snapshot, which any goroutine may call.
type Engine struct {
	cfg       Config
	m         *Metrics
	log       *slog.Logger
	ops       map[parser.OpKey]*op
	ringBytes int
	// last is the context the previous DATA or PROGRESS frame went to
	// (nil: none): consecutive frames almost always belong to one
	// operation, and hashing the 24-byte key for the map was 8% of
	// BenchmarkAbsorbFP32ArrivalByRef. Remove clears it.
	last *op

	// t counts what every frame moves until it is added to m (tally).
	t tally

	// Scratch reused by every frame: decoding and encoding never allocate.
	d     parser.Data
	p     parser.Progress
	pout  parser.Progress
	pbuf  [parser.EthLen + parser.CWLen + parser.ProgressHdrLen + parser.MaxHoles*parser.HoleLen]byte
	holes [stream.MaxHoles]stream.Hole
	// refFor is the Sender ref was looked up for: the worker passes the same
	// one every time, so the type assertion runs once (sendReplay).
	refFor dataplane.Sender
	ref    dataplane.RefSender
	b      parser.DataBuilder
	tbuf   [parser.DataBodyOff]byte
	// groups holds the groups of the DATA frame being handled, decoded
	// once by the validation pass for the pass that applies them.
	groups [parser.MaxGroups]parser.Group

	snap     atomic.Pointer[Snapshot]
	lastSnap int64
	// reads counts Snapshot calls (any goroutine); Tick notes when it saw
	// the count move (readAt) to pick the snapshot's interval. snapSig is
	// the contexts and states the published snapshot shows: the
	// signature Tick computes of every context's serial and state.
	reads     atomic.Uint64
	seenReads uint64
	readAt    int64
	snapSig   uint64
	serial    uint64 // numbers contexts for snapSig
	// lastTick is the previous Tick's time (Config.FrozenAfter).
	lastTick int64

	// owed lists the inbound streams whose OK PROGRESS waits for Flush.
	owed  [maxOwed]owedProgress
	nOwed int

	// banks holds the accumulator banks of removed operations for the
	// next operation of the same shape (takeBank), bankBytes their size.
	banks     map[bankShape][]pooledBank
	bankBytes int
	// lastStage is when Stage last ran: pools idle for PoolIdle are dropped.
	lastStage int64
	// slabs holds the replay buffers of removed operations' outgoing
	// windows (Stage takes them, Remove puts them back).
	slabs stream.BufferPool

	// unknownTokens and unknownAt are the token bucket of UNKNOWN_OPERATION
	// answers (answerUnknown).
	unknownTokens int64
	unknownAt     int64
}

// Answers to DATA and RESULT for an identity with no context: at most
// unknownBurst at once and one per unknownEvery after that, per engine.
// Such a frame has no binding to check its source against, so the answer
// could be aimed at a victim by a forged source MAC: the bucket bounds
// what the switch sends (a PROGRESS is smaller than any DATA it answers),
// and a real sender that lost its context needs one answer, not one per
// frame.
const (
	unknownBurst = 16
	unknownEvery = 10 * time.Millisecond
)

// New returns an empty engine.
func New(cfg Config) *Engine {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxOps <= 0 {
		cfg.MaxOps = 256
	}
	if cfg.MaxRingBytes <= 0 {
		cfg.MaxRingBytes = 1 << 30
	}
	e := &Engine{cfg: cfg, m: cfg.Metrics, log: cfg.Logger, ops: map[parser.OpKey]*op{},
		slabs: stream.BufferPool{MaxPerSize: maxPooledSlabs, MaxBytes: maxPooledSlabBytes}}
	e.snap.Store(&Snapshot{Worker: cfg.Worker, AccumulatorLimitBytes: cfg.MaxRingBytes, MaxContexts: cfg.MaxOps})
	return e
}

// Metrics returns the engine's counters.
func (e *Engine) Metrics() *Metrics { return e.m }

// Stage validates spec (ports = node port count, 0 = unchecked) and reserves
// a complete local context in state STAGED. It returns a *SpecError for a
// spec that cannot work, ErrExists when the identity is installed, and
// ErrNoResources when the worker's limits are exhausted.
func (e *Engine) Stage(now int64, spec *Spec, ports int) error {
	e.lastStage = now
	if err := spec.Validate(ports); err != nil {
		return err
	}
	if _, ok := e.ops[spec.Op]; ok {
		return ErrExists
	}
	rb := spec.RingBytes()
	if len(e.ops) >= e.cfg.MaxOps || e.ringBytes+rb > e.cfg.MaxRingBytes {
		return ErrNoResources
	}
	o, err := newOp(e, spec)
	if err != nil {
		return err
	}
	o.ringBytes = rb
	e.ringBytes += rb
	o.stagedAt, o.ctlAt = now, now
	e.ops[spec.Op] = o
	e.serial++
	o.serial = e.serial
	e.m.OpsStaged.Add(1)
	return nil
}

// ExpiryGrace is added to three operation timeouts to make a context's
// expiry time (Expire).
const ExpiryGrace = time.Minute

// Expire hands retire every context an AM has evidently abandoned: STAGED,
// COMPLETE or FAILED for longer than three times its timeout plus
// ExpiryGrace (a living AM COMMITs, RELEASEs or ABORTs within its CONTROL
// timeout, and its watchdog looks every three timeouts plus 10 s). retire
// removes it (the node keeps its generation, as for RELEASE or ABORT), as
// RELEASED if it had completed, else ABORTED. Without it a dead AM's
// contexts held their storage until prismd restarted. An ACTIVE context is
// never expired: its own inactivity timeout FAILs it first, unless every
// contributor rests at a PUSH boundary (a persistent collective between
// invocations), which only its AM can end.
func (e *Engine) Expire(now int64, retire func(key parser.OpKey, as parser.OpState)) {
	for k, o := range e.ops {
		since, as, ok := o.expiryClock()
		if !ok || now-since <= o.expiryAfter() {
			continue
		}
		e.m.OpsExpired.Add(1)
		o.expired = true // counted here, not as aborted by Remove
		why := "no RELEASE or ABORT from its AM"
		if o.state == parser.StateActive {
			why = "a resting persistent collective without CONTROL from its AM or DATA from its ranks"
		}
		e.log.Warn("prism operation expired: "+why, "op", opName(k), "state", o.state.String(),
			"for", time.Duration(now-since).Round(time.Second).String(), "as", as.String())
		retire(k, as)
	}
}

// expiryClock says since when o has been abandoned by its AM's measure
// (Expire) and what it is retired as then; ok is false for a context that
// does not expire now (an ACTIVE one that is not resting).
func (o *op) expiryClock() (since int64, as parser.OpState, ok bool) {
	as = parser.StateAborted
	switch o.state {
	case parser.StateStaged:
		return o.stagedAt, as, true
	case parser.StateComplete:
		return o.doneAt, parser.StateReleased, true
	case parser.StateFailed:
		return o.failedAt, as, true
	case parser.StateActive:
		// A persistent collective between invocations never times out
		// by itself (its ranks rest at a PUSH boundary, section 6.1).
		// Its AM refreshes it with CONTROL (9.7) and its ranks with
		// DATA: silence from both means both are gone.
		if !o.resting() {
			return 0, as, false
		}
		since = o.ctlAt
		for i := range o.in {
			since = max(since, o.in[i].lastActive)
		}
		return since, as, true
	}
	return 0, as, false
}

// expiryAfter is how long o may stay abandoned before Expire retires it.
func (o *op) expiryAfter() int64 { return 3*int64(o.spec.Timeout) + int64(ExpiryGrace) }

// Touch notes that the AM sent CONTROL for context key (any command): it
// still wants it (see Expire). Unknown keys are ignored.
func (e *Engine) Touch(now int64, key parser.OpKey) {
	if o := e.ops[key]; o != nil {
		o.ctlAt = now
	}
}

// Commit activates a STAGED context's receive windows.
func (e *Engine) Commit(now int64, key parser.OpKey) error {
	o := e.ops[key]
	if o == nil {
		return ErrBadState
	}
	switch o.state {
	case parser.StateActive, parser.StateComplete:
		return nil // idempotent: a repeated COMMIT changes nothing
	case parser.StateStaged:
	default:
		return ErrBadState
	}
	o.state = parser.StateActive
	o.activeAt, o.ctlAt = now, now
	for i := range o.in {
		o.in[i].lastActive = now
		o.in[i].progressAt = now // the first keepalive a quarter timeout on
	}
	if o.result != nil {
		o.result.progressAt = now
	}
	return nil
}

// Status is what COMPLETE reports about one context.
type Status struct {
	State         parser.OpState
	Completed     uint32 // elements completed and handed on
	MissingStream uint16 // first inbound stream still incomplete (0xFFFF none)
	MissingFrom   uint32 // first element not yet covered on MissingStream
	// FailCause is why a FAILED context failed; MissingStream and
	// MissingFrom are then the stream it failed on.
	FailCause parser.FailCause
	Inexact   bool
	Err       error // why the operation failed
}

// Status returns the state of the context key.
func (e *Engine) Status(key parser.OpKey) (Status, bool) {
	o := e.ops[key]
	if o == nil {
		return Status{}, false
	}
	s := Status{State: o.state, Completed: o.emitted, MissingStream: 0xFFFF, Inexact: o.inexact, Err: o.err}
	if o.result != nil {
		// A relay has handed on only what both its partial stream and its
		// result path have.
		s.Completed = min(s.Completed, o.result.rw.Committed())
	}
	// Handed on means acknowledged (protocol 5.2): produced but still in
	// a send window is not completed. It said 726 with no RESULT
	// acknowledged yet.
	for _, ob := range o.emitOut {
		s.Completed = min(s.Completed, ob.sw.Committed())
	}
	for _, ob := range o.relayOut {
		s.Completed = min(s.Completed, ob.sw.Committed())
	}
	if o.state == parser.StateFailed {
		// What it failed on, not what it lacks now: after a failure came
		// from a peer, the stream furthest behind may be a healthy rank's.
		s.FailCause, s.MissingStream, s.MissingFrom = o.failCause, o.failStream, o.failFrom
		if s.MissingStream == 0xFFFF {
			s.MissingFrom = 0
		}
		return s, true
	}
	// Report the inbound stream furthest behind: it is what the operation
	// waits for.
	for i := range o.in {
		in := &o.in[i]
		if in.resting() {
			continue // a persistent collective between invocations
		}
		if !in.rw.Done() && (s.MissingStream == 0xFFFF || in.rw.Committed() < s.MissingFrom) {
			s.MissingStream, s.MissingFrom = in.b.Stream, in.rw.Committed()
		}
	}
	// The result path in lacks only what this node has handed on: the
	// rest cannot come before its partial does, and a persistent
	// collective between invocations has its RESULT up to the boundary.
	if r := o.result; s.MissingStream == 0xFFFF && r != nil && !r.rw.Done() && !o.resultInexact && r.rw.Committed() < o.emitted {
		s.MissingStream, s.MissingFrom = r.b.Stream, r.rw.Committed()
	}
	return s, true
}

// AnnounceAbort tells the peers of an ACTIVE context that is about to be
// ABORTed that it is gone: PROGRESS FAILED, once, to the peer of every
// stream it receives (protocol 5.1). A rank that had sent everything and
// waited for its RESULT heard nothing else once its AM gave the operation
// up (another rank's call was cancelled, say) and waited out its own
// timeout. A context at rest (a persistent collective between
// invocations) has no one waiting and is left silent, and so is one that
// never accepted a frame (the operation an AM prepared ahead and ABORTs
// unused): its peers sent it nothing to wait for, and its FAILED reached
// neighbours the AM's ABORT had not reached yet, which failed and logged
// an error for a job that had succeeded.
func (e *Engine) AnnounceAbort(now int64, key parser.OpKey, tx dataplane.Sender) {
	o := e.ops[key]
	if o == nil || o.state != parser.StateActive || o.resting() || o.untouched() {
		return
	}
	o.tellFailed(now, tx)
}

// Remove tears down the context key (RELEASE or ABORT) and frees its
// storage. It reports whether a context existed.
func (e *Engine) Remove(key parser.OpKey) bool {
	o := e.ops[key]
	if o == nil {
		return false
	}
	o.logFailure() // a failure Tick had no time to log yet
	if e.log.Enabled(context.Background(), slog.LevelDebug) {
		// One line per context at its end: what an operator following a
		// job on this switch wants next to the CONTROL lines.
		took := "-"
		if o.doneAt != 0 && o.activeAt != 0 {
			took = time.Duration(o.doneAt - o.activeAt).String()
		}
		e.log.Debug("prism operation removed", "op", opName(key), "role", o.spec.Role.String(), "state", o.state.String(),
			"elements", o.spec.VectorLen, "completed_in", took)
	}
	if (o.state == parser.StateStaged || o.state == parser.StateActive) && !o.expired {
		// Neither completed nor failed here: ABORTed (by its AM, or a
		// newer generation's ABORT), or a STAGED one RELEASEd.
		e.m.OpsAborted.Add(1)
	}
	e.ringBytes -= o.ringBytes
	delete(e.ops, key)
	if e.last == o {
		e.last = nil
	}
	// A PROGRESS owed since earlier in this batch is not sent for a
	// context that is gone (its windows are about to serve another).
	for i := 0; i < e.nOwed; i++ {
		if e.owed[i].o == o {
			e.owed[i].ib.owed = false
		}
	}
	e.putBank(o)
	e.putSlabs(o)
	return true
}

// At most maxPooledSlabs replay slabs of one size and maxPooledSlabBytes in
// all wait for reuse: enough for the outgoing windows of a SINGLE switch
// with 16 ranks, or of several leaves' worth of back-to-back operations.
const (
	maxPooledSlabs     = 16
	maxPooledSlabBytes = 32 << 20
)

// putSlabs keeps a removed operation's replay buffers for reuse, within
// the limits. Sender.Send copies frames, so nothing queued refers to them.
// A new window's buffers were most of what STAGE allocated (64 frames of
// 9014 bytes per outgoing stream: 1.7 MB at a leaf), fresh memory to fault
// in and zero and garbage to collect, operation after operation; the
// switches' STAGE answers, which the AM waits for before any rank may
// start, took 1-9 ms on a busy 2-core host.
func (e *Engine) putSlabs(o *op) {
	put := func(ob *outbound) {
		if ob != nil && ob.sw != nil && e.slabs.Put(ob.sw.Buffer()) {
			ob.sw = nil // the operation is gone: nothing of it may write the buffers now
		}
	}
	put(o.parent)
	for i := range o.outs {
		put(&o.outs[i])
	}
}

// bankShape is what makes two operations' accumulator banks
// interchangeable.
type bankShape struct {
	acc  kulisch.Policy
	n, w int
}

// At most maxPooledBanks banks of one shape wait for reuse, and at most
// the larger of minPooledBankBytes and a quarter of MaxRingBytes in all: a
// job runs the same collective over and over, and with the AM preparing the
// next operation while one runs and the last is released, two spares per
// shape are what back-to-back operations need. The byte bound follows the
// node's accumulator limit rather than a constant: a fixed 64 MiB held one
// spare of a spine's 47.5 MB KULISCH_FIXED ring (1M elements at MTU 9000,
// window 4x a leaf's), so that root faulted in and zeroed a fresh ring
// every few operations: 12% of its CPU in a profile of back-to-back
// ordinary collectives.
//
// Banks and replay slabs unused for PoolIdle are dropped (Tick), so a node
// whose jobs ended gives the memory back.
const (
	maxPooledBanks     = 2
	minPooledBankBytes = 64 << 20
)

// PoolIdle is how long after the last Stage an engine keeps removed
// operations' banks and replay slabs (Tick drops them).
const PoolIdle = 30 * time.Second

// pooledBank is a removed operation's bank. A clean one needs no reset:
// its operation emitted every element, and emit resets each range it
// encodes (resetRing), so every row it ever used is empty again. Resetting
// it anyway cleared the lanes, flags and bounds of the whole ring, 11 bytes
// an element (6.3 MB for a spine's 1M jumbo KULISCH_FIXED ring): 4.5% of
// that node's CPU on back-to-back operations.
type pooledBank struct {
	kulisch.Bank
	clean bool
}

// bankBudget is how many bytes of removed operations' banks may wait.
func (e *Engine) bankBudget() int { return max(minPooledBankBytes, e.cfg.MaxRingBytes/4) }

// takeBank returns an empty accumulator bank for an operation: a removed
// operation's of the same shape when there is one, else a new one.
// Allocating it was most of STAGE: a KULISCH_FIXED ring of 64 jumbo
// frames is 13 MB of fresh memory the kernel must fault in and zero (9.4
// ms per STAGE in BenchmarkStageJumbo, and the AM's setup waits for the
// slowest node), where resetting a used one touches only its rows that
// still hold digits.
func (e *Engine) takeBank(acc kulisch.Policy, n, w int) (kulisch.Bank, error) {
	k := bankShape{acc, n, w}
	if l := e.banks[k]; len(l) > 0 {
		b := l[len(l)-1]
		l[len(l)-1] = pooledBank{}
		e.banks[k] = l[:len(l)-1]
		e.bankBytes -= bankBytes(k)
		if b.clean {
			return b.Bank, nil
		}
		if err := b.ResetRange(0, b.Len()); err == nil {
			return b.Bank, nil
		}
	}
	return kulisch.NewBank(acc, n, w)
}

// putBank keeps a removed operation's bank for reuse, within the limits.
func (e *Engine) putBank(o *op) {
	if o.bank == nil {
		return
	}
	k := bankShape{o.spec.Tuple.Acc, o.bank.Len(), o.spec.KulischWidth}
	if k.acc != kulisch.KulischFixed {
		k.w = 0 // an ArrivalVector's width is not part of its shape
	}
	if len(e.banks[k]) >= maxPooledBanks || e.bankBytes+bankBytes(k) > e.bankBudget() {
		return
	}
	if e.banks == nil {
		e.banks = map[bankShape][]pooledBank{}
	}
	e.banks[k] = append(e.banks[k], pooledBank{o.bank, o.emitted >= o.spec.VectorLen})
	e.bankBytes += bankBytes(k)
	o.bank, o.kv = nil, nil // the operation is gone: nothing of it may touch the bank now
}

func bankBytes(k bankShape) int {
	if k.acc == kulisch.KulischFixed {
		return k.n * (8*(k.w/32+1) + 11) // digits, lane, flags and bounds
	}
	return k.n * 5
}

// Ops returns the installed identities (for control's bookkeeping and tests).
func (e *Engine) Ops() []parser.OpKey {
	ks := make([]parser.OpKey, 0, len(e.ops))
	for k := range e.ops {
		ks = append(ks, k)
	}
	return ks
}

// lookup returns the context of key, or nil: the last one found when the
// key is its, else the map's.
func (e *Engine) lookup(key parser.OpKey) *op {
	if o := e.last; o != nil && o.spec.Op == key {
		return o
	}
	o := e.ops[key]
	if o != nil {
		e.last = o
	}
	return o
}

// HandleData admits one DATA or RESULT frame that arrived on port in.
func (e *Engine) HandleData(now int64, in int, frame []byte, tx dataplane.Sender) {
	e.admitData(now, in, frame, tx)
	if !e.cfg.CoalesceProgress {
		e.t.publish(e.m) // no batch: no Flush to publish it
	}
}

func (e *Engine) admitData(now int64, in int, frame []byte, tx dataplane.Sender) {
	if len(frame) < parser.DataBodyOff {
		e.m.decodeDrop(errShortData)
		return
	}
	// The frame rules (protocol section 6, D1-D15) come before the state
	// rules: a malformed frame is counted under its parser reason and
	// answered with nothing, whether or not its identity names a
	// context. For an unknown operation the rules that need the context
	// (its MTU, W, Vector Length) are applied with no context (zero
	// Limits): looked up first, a malformed frame with a garbage identity
	// was counted as unknown_operation and answered with PROGRESS.
	d := &e.d
	o := e.lookup(parser.OpIdentity(frame[parser.HdrOff:]).Key())
	if o == nil {
		if err := d.Decode(frame, parser.Limits{}); err != nil {
			e.m.decodeDrop(err)
			return
		}
		e.m.drop(DropUnknownOperation)
		e.answerUnknown(now, in, frame, tx)
		return
	}
	if err := d.Decode(frame, parser.Limits{VectorLen: o.spec.VectorLen, KulischBytes: o.kbytes, MTU: o.spec.MTU}); err != nil {
		e.m.decodeDrop(err)
		return
	}
	if o.state != parser.StateActive && o.state != parser.StateComplete && o.state != parser.StateFailed {
		e.m.drop(DropNotActive)
		return
	}
	if o.state == parser.StateFailed {
		o.answerFailed(now, in, frame, d, tx)
		return
	}
	o.handleData(now, in, frame, d, tx)
}

// HandleProgress admits one PROGRESS frame that arrived on port in.
func (e *Engine) HandleProgress(now int64, in int, frame []byte, tx dataplane.Sender) {
	e.admitProgress(now, in, frame, tx)
	if !e.cfg.CoalesceProgress {
		e.t.publish(e.m)
	}
}

func (e *Engine) admitProgress(now int64, in int, frame []byte, tx dataplane.Sender) {
	if len(frame) < parser.HdrOff+parser.ProgressHdrLen {
		e.m.decodeDrop(errShortProgress)
		return
	}
	// Frame rules (P1-P11) first, as for DATA (admitData).
	p := &e.p
	o := e.lookup(parser.OpIdentity(frame[parser.HdrOff:]).Key())
	lim := parser.Limits{}
	if o != nil {
		lim = parser.Limits{VectorLen: o.spec.VectorLen, MTU: o.spec.MTU}
	}
	if err := p.Decode(frame, lim); err != nil {
		e.m.decodeDrop(err)
		return
	}
	if o == nil {
		e.m.drop(DropUnknownOperation)
		return
	}
	if o.state != parser.StateActive && o.state != parser.StateComplete {
		e.m.drop(DropNotActive)
		return
	}
	o.handleProgress(now, in, frame, p, tx)
}

// Tick runs timers: retransmissions, inactivity and silence deadlines,
// pending terminal frames, and the introspection snapshot.
func (e *Engine) Tick(now int64, tx dataplane.Sender) {
	if f := int64(e.cfg.FrozenAfter); f > 0 && e.lastTick != 0 && now-e.lastTick > f {
		e.excuse(now)
	}
	e.lastTick = now
	e.Flush(now, tx)
	var sig uint64
	for _, o := range e.ops {
		switch o.state {
		case parser.StateActive, parser.StateComplete:
			o.tick(now, tx)
		case parser.StateFailed:
			o.announceFailure(now, tx)
			o.logFailure()
		}
		sig ^= o.serial*0x9E3779B97F4A7C15 + uint64(o.state) // after tick: what the snapshot would show
	}
	e.t.publish(e.m)
	if r := e.reads.Load(); r != e.seenReads {
		e.seenReads, e.readAt = r, now
	}
	every := int64(SnapshotInterval)
	if e.readAt == 0 || now-e.readAt > int64(UnwatchedAfter) {
		every = int64(UnwatchedSnapshotInterval)
	}
	if now-e.lastSnap >= every || sig != e.snapSig {
		e.publish(now)
		e.snapSig = sig
	}
	if now-e.lastStage > int64(PoolIdle) && e.Pooled() {
		e.dropPools()
	}
}

// excuse moves every active context's inactivity clocks on by the gap
// since the last Tick (Config.FrozenAfter), never past now: this process did
// not run then, so its peers' silence over it says nothing about them. A
// peer that was really gone is timed out a gap later; the peers' own
// timers have named this node if it was gone long enough.
func (e *Engine) excuse(now int64) {
	gap := now - e.lastTick
	n := 0
	for _, o := range e.ops {
		if o.state == parser.StateActive {
			o.excuse(gap, now)
			n++
		}
	}
	if n > 0 {
		e.log.Warn("this prismd did not run for a while (stopped, or starved of CPU): its operations do not count that silence against their peers",
			"gap", time.Duration(gap).Round(time.Millisecond), "active_operations", n)
	}
}

// Quiet reports whether every installed context only waits: for its ranks'
// next invocation (a persistent collective resting at its PUSH boundaries
// with everything it sent acknowledged), for its COMMIT, or for its AM's
// RELEASE; and no PROGRESS is owed. No retransmission, inactivity deadline
// or keepalive is then due, and the worker may tick slowly
// (control.Worker.TickEvery) until the next frame: a timer would only be
// late by that pace, never missed.
func (e *Engine) Quiet() bool {
	if e.nOwed > 0 {
		return false
	}
	for _, o := range e.ops {
		if !o.quiet() {
			return false
		}
	}
	return true
}

// Pooled reports whether removed operations' banks or replay slabs wait
// for reuse. The worker keeps ticking while they do (control.Worker.Idle),
// so that Tick drops them PoolIdle after the last Stage.
func (e *Engine) Pooled() bool { return e.bankBytes > 0 || e.slabs.Bytes() > 0 }

// dropPools lets the garbage collector have the pooled banks and slabs.
func (e *Engine) dropPools() {
	e.banks, e.bankBytes = nil, 0
	e.slabs.Drop()
}

// Flush sends the PROGRESS deferred during the batch (CoalesceProgress):
// one per stream, carrying the newest state and the last Packet ID
// accepted, and publishes the batch's counts to Metrics. It implements
// dataplane.Flusher through package control.
func (e *Engine) Flush(now int64, tx dataplane.Sender) {
	for i := 0; i < e.nOwed; i++ {
		w := e.owed[i]
		e.owed[i] = owedProgress{}
		if w.ib.owed {
			w.ib.owed = false
			w.o.sendProgress(now, w.ib, w.ib.owedPID, parser.ProgressStatusOK, tx)
		}
	}
	e.nOwed = 0
	e.t.publish(e.m)
}

// send hands a frame to the dataplane and counts a full queue.
// answerUnknown tells the sender of a DATA or RESULT frame whose identity
// (generations included) has no context that the switch does not know the
// operation: PROGRESS status UNKNOWN_OPERATION, back out of the ingress
// port to the frame's source, so a rank or child whose switch lost the
// operation (restarted, aborted, or a stale generation) stops at once
// instead of retransmitting until its timeout. Only a well-formed fixed
// header from a unicast source is answered, within the token bucket.
func (e *Engine) answerUnknown(now int64, in int, frame []byte, tx dataplane.Sender) {
	h := parser.DataHeader(frame[parser.HdrOff:parser.DataBodyOff])
	if frame[6]&1 != 0 || h.Reserved() != 0 || h.Flags()&^(parser.FlagLast|parser.FlagInexact|parser.FlagExt|parser.FlagRetransmit|parser.FlagPush) != 0 {
		return
	}
	if e.unknownTokens = min(unknownBurst, e.unknownTokens+(now-e.unknownAt)/int64(unknownEvery)); e.unknownTokens == 0 {
		return
	}
	e.unknownAt = now - (now-e.unknownAt)%int64(unknownEvery)
	e.unknownTokens--
	var flags uint8
	if parser.Class(frame[parser.CWOff+1]) == parser.ClassResult {
		flags = parser.ProgressFlagResult
	}
	e.pout = parser.Progress{Op: h.Op(), SrcEP: h.DstEP(), DstEP: h.SrcEP(), Stream: h.Stream(),
		PacketID: h.PacketID(), Status: parser.ProgressStatusUnknownOperation, Flags: flags}
	var src [6]byte
	copy(src[:], frame[6:12])
	n, err := e.pout.Encode(e.pbuf[:], parser.Eth{Dst: src, Src: tx.PortMAC(in)})
	if err != nil {
		return
	}
	e.send(tx, in, e.pbuf[:n])
	e.m.ProgressSent.Add(1)
	e.m.UnknownAnswered.Add(1)
}

func (e *Engine) send(tx dataplane.Sender, port int, frame []byte) {
	if !tx.Send(port, frame) {
		e.m.TxFull.Add(1)
	}
}

// sendReplay sends a frame that lives in a stream.SendWindow's replay
// buffer without copying it when tx can (dataplane.RefSender): the buffer
// is not reused before the frame is acknowledged, so it outlives the
// sender's flush. (A peer that acknowledged a frame it cannot have seen
// gets the frame that reused the buffer twice, and the operation's
// timeout for the one it skipped: no frame carries wrong bytes.)
func (e *Engine) sendReplay(tx dataplane.Sender, port int, frame []byte) {
	if tx != e.refFor {
		e.refFor = tx
		e.ref, _ = tx.(dataplane.RefSender)
	}
	if e.ref == nil {
		e.send(tx, port, frame)
		return
	}
	if !e.ref.SendRef(port, frame) {
		e.m.TxFull.Add(1)
	}
}

// ContributorTimeoutError reports an inbound stream (contributor or result
// path) that sent nothing for longer than the operation's timeout.
type ContributorTimeoutError struct {
	Op       parser.OpKey
	Kind     parser.BindingKind
	Stream   uint16
	PeerEP   uint16
	PeerMAC  [6]byte
	Port     int
	From, To uint32 // missing element range
	Idle     time.Duration
}

func (e *ContributorTimeoutError) Error() string {
	m := e.PeerMAC
	return fmt.Sprintf("operation %s: %s stream %d (peer endpoint %d, MAC %02x:%02x:%02x:%02x:%02x:%02x, port %d) silent for %v; missing elements [%d, %d)",
		opName(e.Op), e.Kind, e.Stream, e.PeerEP, m[0], m[1], m[2], m[3], m[4], m[5], e.Port,
		e.Idle.Round(time.Millisecond), e.From, e.To)
}

// kulischFormat converts a parser format code to kulisch's (same numbers).
func kulischFormat(f parser.Format) kulisch.Format { return kulisch.Format(f) }

// Len is the number of installed operation contexts (any state).
func (e *Engine) Len() int { return len(e.ops) }

// This file owns the node: its configuration, the per-worker Handler that
// dispatches PRISM classes, and the CONTROL transaction state machine.

package control

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/parser"
)

// NodeConfig configures a node. Zero values take defaults.
type NodeConfig struct {
	// AMMACs are the source MACs CONTROL is accepted from. CONTROL from any
	// other source is a counted drop with no state change and no reply; an
	// empty list trusts no one.
	AMMACs [][6]byte
	// Ports is the port count bindings are checked against (0: ask the
	// Sender, NumPorts).
	Ports int
	// Limits are the advertised per-operation limits.
	Limits Limits
	// Engine configures each worker's engine (Worker and Metrics are set
	// by the node).
	Engine engine.Config
	// Metrics are the engine counters shared by all workers (default: new).
	Metrics *engine.Metrics
	// Bitmap configures each worker's BITMAP shard (package engine/bitmap;
	// Worker, Counters and Logger are set by the node). Keys (per-job AUTH
	// keys) is shared by every worker; nil: the node makes an empty one,
	// which Keys returns for the runtime channel to fill.
	Bitmap bitmap.Config
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// MaxTxnRecords bounds the recorded transactions per worker (default
	// 4096); the oldest are forgotten first.
	MaxTxnRecords int
}

// Node is one PRISM node: the per-worker handlers plus what introspection and
// metrics read from them.
type Node struct {
	cfg     NodeConfig
	records atomic.Pointer[[]parser.CapRecord] // advertised and checked (caps.go); SetPortMTU rebuilds it
	m       *engine.Metrics
	cm      *Metrics
	am      atomic.Pointer[[][6]byte] // trusted AM source MACs
	// untrustedAt is when an untrusted CONTROL source was last logged:
	// the drop was only counted, and an operator whose am_sources lacked
	// the AM's MAC saw setups time out with nothing in the log.
	untrustedAt atomic.Int64

	mu      sync.Mutex
	workers []*Worker
}

// NewNode returns a node; call Factory for the dataplane.
func NewNode(cfg NodeConfig) *Node {
	if cfg.Metrics == nil {
		cfg.Metrics = engine.NewMetrics()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxTxnRecords <= 0 {
		cfg.MaxTxnRecords = 4096
	}
	if cfg.Bitmap.Counters == nil {
		cfg.Bitmap.Counters = bitmap.NewCounters()
	}
	if cfg.Bitmap.Keys == nil {
		cfg.Bitmap.Keys = bitmap.NewKeyring()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	n := &Node{cfg: cfg, m: cfg.Metrics, cm: &Metrics{}}
	rs := Records(cfg.Limits)
	n.records.Store(&rs)
	n.SetAMMACs(cfg.AMMACs)
	return n
}

// SetPortMTU bounds the MTU the node advertises and accepts by its ports':
// mtu is the smallest MTU among them (after every port change), and the
// capability records then carry the largest defined MTU (576, 1500, 9000)
// not above it, or Limits.MaxMTU if that is lower (docs/protocol.md 5.3: the
// largest MTU all ports support). A node advertising 9000 on 1500-byte ports
// let the AM STAGE jumbo operations whose frames the links dropped. Safe
// while workers run.
func (n *Node) SetPortMTU(mtu int) {
	l := n.cfg.Limits
	l.MaxMTU = min(l.MaxMTU, definedMTUFloor(mtu))
	rs := Records(l)
	n.records.Store(&rs)
}

// definedMTUFloor is the largest defined PRISM MTU not above mtu (0 below
// the smallest).
func definedMTUFloor(mtu int) uint16 {
	for _, m := range []int{parser.MTUJumbo, parser.MTUDefault, parser.MTUSmall} {
		if mtu >= m {
			return uint16(m)
		}
	}
	return 0
}

// SetAMMACs replaces the trusted AM source MACs (configuration reload); safe
// while workers run.
func (n *Node) SetAMMACs(macs [][6]byte) {
	m := append([][6]byte(nil), macs...)
	n.am.Store(&m)
}

// untrustedLogEvery bounds the untrusted-source warning to one per period
// (a flood of forged CONTROL must not become a flood of log lines).
const untrustedLogEvery = int64(10 * time.Second)

// logUntrusted warns, at most once per untrustedLogEvery, that CONTROL
// from src was dropped because src is not a configured AM.
func (n *Node) logUntrusted(now int64, in int, src [6]byte, tx dataplane.Sender) {
	last := n.untrustedAt.Load()
	if last != 0 && now-last < untrustedLogEvery || !n.untrustedAt.CompareAndSwap(last, max(now, 1)) {
		return
	}
	var trusted []string
	if p := n.am.Load(); p != nil {
		for _, m := range *p {
			trusted = append(trusted, net.HardwareAddr(m[:]).String())
		}
	}
	n.cfg.Logger.Warn("CONTROL dropped: its source is not a configured AM (am_sources); if it is your AM, add its MAC "+
		"(prismd_control_drops_total{reason=\"untrusted_source\"} counts every one; this warning repeats at most every 10s)",
		"src", net.HardwareAddr(src[:]).String(), "port", portName(tx, in), "am_sources", trusted)
}

// portName is port in's interface name where the dataplane can say it
// (an operator reads names in logs; indexes only in the config's order),
// else its index.
func portName(tx dataplane.Sender, in int) any {
	if lr, ok := tx.(dataplane.LinkReporter); ok {
		if name, _, _ := lr.PortLink(in); name != "" {
			return name
		}
	}
	return in
}

// NewHandlerFactory is NewNode(cfg).Factory().
func NewHandlerFactory(cfg NodeConfig) dataplane.HandlerFactory { return NewNode(cfg).Factory() }

// Factory returns the dataplane.HandlerFactory building one Worker per
// dataplane worker.
func (n *Node) Factory() dataplane.HandlerFactory {
	return func(worker, workers int) dataplane.Handler { return n.NewWorker(worker, workers) }
}

// NewWorker builds worker's Handler and registers it for introspection.
func (n *Node) NewWorker(worker, workers int) *Worker {
	ec := n.cfg.Engine
	ec.Worker, ec.Metrics, ec.Logger = worker, n.m, n.cfg.Logger
	if ec.MaxOps == 0 {
		ec.MaxOps = max(1, int(n.cfg.Limits.MaxOps)/max(1, workers))
	}
	bc := n.cfg.Bitmap
	bc.Worker, bc.Logger = worker, n.cfg.Logger
	w := &Worker{n: n, id: worker, eng: engine.New(ec), bm: bitmap.NewShard(bc), ids: map[opIdent]*identState{}, txns: map[txnKey]*txnRecord{}}
	n.mu.Lock()
	for len(n.workers) <= worker {
		n.workers = append(n.workers, nil)
	}
	n.workers[worker] = w
	n.mu.Unlock()
	return w
}

// EngineMetrics returns the engine counters (a prometheus.Collector).
func (n *Node) EngineMetrics() *engine.Metrics { return n.m }

// BitmapMetrics returns the BITMAP shards' counters (a prometheus.Collector).
func (n *Node) BitmapMetrics() *bitmap.Counters { return n.cfg.Bitmap.Counters }

// Keys returns the node's per-job authentication keys (protocol 8.6),
// shared by every worker's BITMAP shard: what a key installed here covers
// takes effect on the next frame of the job on any worker.
func (n *Node) Keys() *bitmap.Keyring { return n.cfg.Bitmap.Keys }

// BitmapSnapshots returns every worker's newest BITMAP snapshot.
func (n *Node) BitmapSnapshots() []*bitmap.Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s []*bitmap.Snapshot
	for _, w := range n.workers {
		if w != nil {
			s = append(s, w.bm.Snapshot())
		}
	}
	return s
}

// ControlMetrics returns the CONTROL counters (a prometheus.Collector).
func (n *Node) ControlMetrics() *Metrics { return n.cm }

// Snapshots returns every worker's newest engine snapshot.
func (n *Node) Snapshots() []*engine.Snapshot {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s []*engine.Snapshot
	for _, w := range n.workers {
		if w != nil {
			s = append(s, w.eng.Snapshot())
		}
	}
	return s
}

// opIdent is an Operation ID without its generations: the unit generations
// are compared on.
type opIdent struct {
	job   uint64
	group uint16
	op    uint16
}

func identOf(k parser.OpKey) opIdent { return opIdent{k.Job, k.Group, k.Op} }

// gen orders generations: group generation first, then operation generation.
type gen struct {
	group uint16
	op    uint32
}

func genOf(k parser.OpKey) gen { return gen{k.GroupGen, k.OpGen} }

func (a gen) newer(b gen) bool { return a.group > b.group || a.group == b.group && a.op > b.op }

// identState is what a worker remembers about one Operation ID.
type identState struct {
	installed  bool
	cur        parser.OpKey // the installed context's full identity
	retired    bool
	retiredGen gen
	retiredAs  parser.OpState // RELEASED or ABORTED
}

type txnKey struct {
	id  opIdent
	txn uint32
}

// txnRecord is a completed transaction: the request bytes it answered and
// the ACK frame it sent.
type txnRecord struct {
	req []byte
	ack []byte
	seq uint64
}

// Worker is one dataplane worker's Handler: CONTROL here, everything else to
// its engine shard.
type Worker struct {
	n   *Node
	id  int
	eng *engine.Engine
	bm  *bitmap.Shard // BITMAP contexts (Collective 3)

	idleTicks int // consecutive ticks with no context (see Idle)
	restTicks int // consecutive ticks with every context quiet (see TickEvery)
	// expireAt is when Tick next looks for abandoned contexts (expire).
	expireAt int64

	ids   map[opIdent]*identState
	txns  map[txnKey]*txnRecord
	order []txnKey // FIFO of txns for bounded memory
	seq   uint64

	ctl parser.Control
	buf [parser.EthLen + parser.MTUJumbo]byte
}

// Engine returns the worker's engine (tests and tools).
func (w *Worker) Engine() *engine.Engine { return w.eng }

// Handle implements dataplane.Handler.
func (w *Worker) Handle(now int64, in int, frame []byte, tx dataplane.Sender) {
	w.idleTicks, w.restTicks = 0, 0
	if len(frame) < parser.EthLen+parser.CWLen {
		w.n.cm.drop(reasonMalformed)
		return
	}
	switch parser.Class(frame[parser.CWOff+1]) {
	case parser.ClassControl:
		w.control(now, in, frame, tx)
	case parser.ClassData, parser.ClassResult:
		// BITMAP contexts first: HandleData declines at once (one map
		// lookup, none when the shard is empty) for every other operation.
		if !w.bm.HandleData(now, in, frame, tx) {
			w.eng.HandleData(now, in, frame, tx)
		}
	case parser.ClassProgress:
		w.eng.HandleProgress(now, in, frame, tx)
	default:
		w.n.cm.drop(reasonMalformed)
	}
}

// Flush implements dataplane.Flusher: the engine's PROGRESS deferred during
// the batch goes out with it.
func (w *Worker) Flush(now int64, tx dataplane.Sender) { w.eng.Flush(now, tx) }

// Tick implements dataplane.Handler.
func (w *Worker) Tick(now int64, tx dataplane.Sender) {
	w.eng.Tick(now, tx)
	w.bm.Tick(now, tx)
	if now >= w.expireAt {
		w.expireAt = now + int64(time.Second)
		w.eng.Expire(now, w.expire)
		w.bm.Expire(now, w.expire)
	}
	w.noteTick()
}

// expire retires a context its AM abandoned (engine.Expire), exactly as its
// RELEASE or ABORT would have: the generation is remembered, so a late
// retry of the old identity is stale and a COMPLETE query is answered with
// the state it was retired as.
func (w *Worker) expire(k parser.OpKey, as parser.OpState) {
	if st, cur, _ := w.ident(k); cur {
		w.retire(st, k, as)
		return
	}
	w.eng.Remove(k) // not tracked by identity (cannot happen): still free it
}

func (w *Worker) trusted(src [6]byte) bool {
	for _, m := range *w.n.am.Load() {
		if m == src {
			return true
		}
	}
	return false
}

func (w *Worker) ports(tx dataplane.Sender) int {
	if w.n.cfg.Ports > 0 {
		return w.n.cfg.Ports
	}
	return tx.NumPorts()
}

// reply is the ACK to send: status, body and whether to record it.
type reply struct {
	st     parser.Status
	ack    parser.Ack
	record bool
}

func (w *Worker) control(now int64, in int, frame []byte, tx dataplane.Sender) {
	cm := w.n.cm
	src := [6]byte(frame[6:12])
	if !w.trusted(src) {
		cm.drop(reasonUntrusted)
		w.n.logUntrusted(now, in, src, tx)
		return
	}
	if len(frame) < parser.ControlBodyOff {
		cm.malformedAs("truncated") // rule C2
		return
	}
	h := parser.ControlHeader(frame[parser.HdrOff:parser.ControlBodyOff])
	c := &w.ctl
	// Rule C1 bounds a frame by its link's MTU: checked against 9000, a
	// 1502-byte STAGE on a 1500-byte link (its sender's MTU raised) was
	// accepted and installed a context.
	mtu := parser.MTUJumbo
	if mr, ok := tx.(dataplane.MTUReporter); ok {
		if m := mr.PortMTU(in); m > 0 {
			mtu = min(mtu, m)
		}
	}
	err := c.Decode(frame, parser.Limits{MTU: mtu})
	if err != nil {
		// A STAGE whose header is sound but whose body is not gets INVALID
		// with the offending body offset; anything else is malformed
		// framing: dropped, no reply.
		if fe, ok := errors.AsType[*parser.FieldError](err); ok && h.Command() == parser.CmdStage && h.Status() == parser.StatusOK && fe.Offset >= parser.ControlBodyOff {
			cm.cmd(parser.CmdStage)
			key := h.Op()
			a := noOp(parser.StateNone) // Missing Stream 0xFFFF like every ACK that reports none (5.2)
			a.AckedCmd, a.Detail = parser.CmdStage, uint16(fe.Offset-parser.ControlBodyOff)
			r := reply{st: parser.StatusInvalid, ack: a}
			if st := w.ids[identOf(key)]; st != nil && st.installed && st.cur == key {
				r.ack.State = w.state(key)
			}
			w.respond(now, in, frame, h, r, tx)
			return
		}
		cm.malformed(err)
		return
	}
	switch c.Cmd {
	case parser.CmdCapsQuery:
		cm.cmd(c.Cmd)
		w.caps(now, in, frame, c, tx)
		return
	case parser.CmdAck, parser.CmdCapsResponse:
		// Not a request: counted as a drop only (prismd_control_requests_total
		// counted it too).
		cm.drop(reasonUnexpected)
		return
	}
	cm.cmd(c.Cmd)
	// Any command for an installed context, a retransmission included,
	// says its AM is there and wants it (a resting persistent collective
	// expires without it, engine.Expire).
	w.eng.Touch(now, c.Op)
	req := frame[parser.CWOff : parser.ControlBodyOff+int(c.BodyLen)]
	tk := txnKey{identOf(c.Op), c.Txn}
	if rec := w.txns[tk]; rec != nil {
		if bytes.Equal(rec.req, req) {
			cm.replays.Add(1)
			w.resend(in, frame, rec.ack, tx)
			ah := parser.ControlHeader(rec.ack[parser.HdrOff:parser.ControlBodyOff])
			w.debugAnswer("CONTROL retransmission answered with its recorded ACK", in, frame, h, ah.Status(), parser.OpState(rec.ack[parser.ControlBodyOff+1]), tx)
			return
		}
		// The identity's state as it is (5.2: every field filled): a
		// CONFLICT said NONE of a context it had installed.
		a := noOp(w.state(c.Op))
		a.AckedCmd = c.Cmd
		w.respond(now, in, frame, h, reply{st: parser.StatusConflict, ack: a}, tx)
		return
	}
	var r reply
	switch c.Cmd {
	case parser.CmdStage:
		r = w.stage(now, c, tx)
	case parser.CmdCommit:
		r = w.commit(now, c)
	case parser.CmdComplete:
		r = w.complete(c)
	case parser.CmdRelease:
		r = w.release(c)
	case parser.CmdAbort:
		r = w.abort(now, c, tx)
	}
	r.ack.AckedCmd = c.Cmd
	ack := w.respond(now, in, frame, h, r, tx)
	if r.record && ack != nil {
		w.remember(tk, req, ack)
	}
}

func (w *Worker) state(key parser.OpKey) parser.OpState {
	if s, ok := w.eng.Status(key); ok {
		return s.State
	}
	if s, ok := w.bm.State(key); ok {
		return s
	}
	return parser.StateNone
}

// noOp is the ACK body fields for "nothing to report".
func noOp(st parser.OpState) parser.Ack {
	return parser.Ack{State: st, Detail: parser.NoDetail, MissingStream: 0xFFFF}
}

// ident returns the state of c's Operation ID and classifies c's generation
// against it: cur (the installed context), stale (not newer than a retired
// or installed generation), or fresh.
func (w *Worker) ident(k parser.OpKey) (st *identState, cur, stale bool) {
	st = w.ids[identOf(k)]
	if st == nil {
		return nil, false, false
	}
	g := genOf(k)
	if st.installed {
		if st.cur == k {
			return st, true, false
		}
		if !g.newer(genOf(st.cur)) {
			return st, false, true
		}
	}
	if st.retired && !g.newer(st.retiredGen) {
		return st, false, true
	}
	return st, false, false
}

func (w *Worker) stage(now int64, c *parser.Control, tx dataplane.Sender) reply {
	st, cur, stale := w.ident(c.Op)
	switch {
	case cur:
		return reply{st: parser.StatusBadState, ack: noOp(w.state(c.Op)), record: true}
	case stale:
		return reply{st: parser.StatusStaleGeneration, ack: noOp(parser.StateNone), record: true}
	case st != nil && st.installed:
		// A newer generation while the old context is still installed:
		// the AM must RELEASE or ABORT it first.
		return reply{st: parser.StatusBadState, ack: noOp(w.state(st.cur)), record: true}
	}
	stg := c.Stage()
	if ok, _ := covers(*w.n.records.Load(), &stg.Context); !ok {
		return reply{st: parser.StatusUnsupported, ack: noOp(parser.StateNone), record: true}
	}
	if stg.Context.Collective == parser.CollBitmap {
		st2, detail := w.bm.Stage(now, c.Op, &stg, w.ports(tx))
		a := noOp(parser.StateNone)
		if st2 != parser.StatusOK {
			a.Detail = detail
			return reply{st: st2, ack: a, record: true}
		}
		w.install(st, c.Op)
		return reply{st: parser.StatusOK, ack: noOp(parser.StateStaged), record: true}
	}
	spec := engine.SpecFromStage(c.Op, &stg)
	err := w.eng.Stage(now, &spec, w.ports(tx))
	var se *engine.SpecError
	switch {
	case err == nil:
	case errors.Is(err, engine.ErrNoResources):
		return reply{st: parser.StatusNoResources, ack: noOp(parser.StateNone), record: true}
	case errors.As(err, &se):
		a := noOp(parser.StateNone)
		if se.Binding >= 0 {
			a.Detail = uint16(parser.ContextRecordLen + se.Binding*parser.BindingLen + bindingFieldOffset(se.Field))
			return reply{st: parser.StatusInvalidBinding, ack: a, record: true}
		}
		switch se.Field {
		case "bindings":
			a.Detail = 14 // Binding Count: the set of bindings does not fit the role
			return reply{st: parser.StatusInvalidBinding, ack: a, record: true}
		case "tuple", "collective":
			return reply{st: parser.StatusUnsupported, ack: a, record: true}
		case "role":
			a.Detail = 0
		}
		return reply{st: parser.StatusInvalid, ack: a, record: true}
	default:
		return reply{st: parser.StatusBadState, ack: noOp(parser.StateNone), record: true}
	}
	w.install(st, c.Op)
	return reply{st: parser.StatusOK, ack: noOp(parser.StateStaged), record: true}
}

func (w *Worker) install(st *identState, k parser.OpKey) {
	if st == nil {
		st = &identState{}
		w.ids[identOf(k)] = st
	}
	st.installed, st.cur = true, k
}

// bindingFieldOffset maps engine.SpecError fields to offsets in a binding.
func bindingFieldOffset(field string) int {
	switch field {
	case "kind":
		return 0
	case "flags":
		return 1
	case "stream":
		return 2
	case "local_endpoint":
		return 4
	case "peer_endpoint":
		return 6
	case "port":
		return 8
	case "peer_mac":
		return 10
	}
	return 0
}

func (w *Worker) commit(now int64, c *parser.Control) reply {
	_, cur, stale := w.ident(c.Op)
	switch {
	case stale:
		return reply{st: parser.StatusStaleGeneration, ack: noOp(parser.StateNone), record: true}
	case !cur:
		return reply{st: parser.StatusBadState, ack: noOp(parser.StateNone), record: true}
	}
	if w.bm.Owns(c.Op) {
		if st := w.bm.Commit(now, c.Op); st != parser.StatusOK {
			return reply{st: st, ack: noOp(w.state(c.Op)), record: true}
		}
		return reply{st: parser.StatusOK, ack: noOp(w.state(c.Op)), record: true}
	}
	if err := w.eng.Commit(now, c.Op); err != nil {
		return reply{st: parser.StatusBadState, ack: noOp(w.state(c.Op)), record: true}
	}
	return reply{st: parser.StatusOK, ack: noOp(w.state(c.Op)), record: true}
}

func (w *Worker) complete(c *parser.Control) reply {
	st, cur, stale := w.ident(c.Op)
	if !cur {
		// COMPLETE is a query: never recorded, always answered afresh.
		if st != nil && st.retired && st.retiredGen == genOf(c.Op) {
			return reply{st: parser.StatusOK, ack: noOp(st.retiredAs)}
		}
		if stale {
			return reply{st: parser.StatusStaleGeneration, ack: noOp(parser.StateNone)}
		}
		return reply{st: parser.StatusBadState, ack: noOp(parser.StateNone)}
	}
	if bs, done, _, ok := w.bm.Status(c.Op); ok {
		// A BITMAP context serves tokens until released: Completed counts
		// the aggregations it completed or emitted as PARTIAL.
		return reply{st: parser.StatusOK, ack: parser.Ack{State: bs, Detail: parser.NoDetail, Completed: done, MissingStream: 0xFFFF}}
	}
	s, _ := w.eng.Status(c.Op)
	return reply{st: parser.StatusOK, ack: parser.Ack{State: s.State, Detail: parser.NoDetail, Completed: s.Completed,
		MissingStream: s.MissingStream, FailCause: s.FailCause, MissingFrom: s.MissingFrom}}
}

func (w *Worker) retire(st *identState, k parser.OpKey, as parser.OpState) {
	w.eng.Remove(k)
	if w.bm.Owns(k) {
		w.bm.Abort(k)
	}
	st.installed = false
	if !st.retired || genOf(k).newer(st.retiredGen) {
		st.retired, st.retiredGen = true, genOf(k)
	}
	st.retiredAs = as
}

func (w *Worker) release(c *parser.Control) reply {
	st, cur, stale := w.ident(c.Op)
	switch {
	case stale:
		return reply{st: parser.StatusStaleGeneration, ack: noOp(parser.StateNone), record: true}
	case !cur:
		return reply{st: parser.StatusBadState, ack: noOp(parser.StateNone), record: true}
	}
	if w.bm.Owns(c.Op) {
		// RELEASE of an active BITMAP context is the normal end of its job,
		// but not while aggregations or soft state are open.
		if st2 := w.bm.Release(c.Op); st2 != parser.StatusOK {
			return reply{st: st2, ack: noOp(w.state(c.Op)), record: true}
		}
		w.retire(st, c.Op, parser.StateReleased)
		return reply{st: parser.StatusOK, ack: noOp(parser.StateReleased), record: true}
	}
	if s := w.state(c.Op); s == parser.StateActive {
		// An active context still owes transfers; the AM aborts it instead.
		return reply{st: parser.StatusBadState, ack: noOp(s), record: true}
	}
	w.retire(st, c.Op, parser.StateReleased)
	return reply{st: parser.StatusOK, ack: noOp(parser.StateReleased), record: true}
}

func (w *Worker) abort(now int64, c *parser.Control, tx dataplane.Sender) reply {
	st, cur, stale := w.ident(c.Op)
	switch {
	case cur:
		w.eng.AnnounceAbort(now, c.Op, tx)
		w.retire(st, c.Op, parser.StateAborted)
	case stale:
		return reply{st: parser.StatusStaleGeneration, ack: noOp(parser.StateNone), record: true}
	case st != nil && st.installed:
		// Aborting a newer generation than the installed one: the old
		// context cannot be wanted any more.
		w.eng.AnnounceAbort(now, st.cur, tx)
		w.retire(st, st.cur, parser.StateAborted)
		w.retire(st, c.Op, parser.StateAborted)
	default:
		// Nothing installed: retire the generation anyway so that a delayed
		// STAGE of it cannot install state after the AM rolled back.
		if st == nil {
			st = &identState{}
			w.ids[identOf(c.Op)] = st
		}
		w.retire(st, c.Op, parser.StateAborted)
	}
	return reply{st: parser.StatusOK, ack: noOp(parser.StateAborted), record: true}
}

// respond encodes and sends the ACK for the request in frame and returns the
// encoded ACK (aliasing the worker's buffer).
func (w *Worker) respond(now int64, in int, frame []byte, h parser.ControlHeader, r reply, tx dataplane.Sender) []byte {
	var body [parser.AckBodyLen]byte
	if r.ack.AckedCmd == 0 {
		r.ack.AckedCmd = h.Command()
	}
	if r.st != parser.StatusInvalid && r.st != parser.StatusInvalidBinding {
		r.ack.Detail = parser.NoDetail
	}
	if _, err := r.ack.Encode(body[:]); err != nil {
		return nil
	}
	c := parser.Control{Op: h.Op(), Txn: h.Txn(), SrcEP: h.DstEP(), DstEP: h.SrcEP(), Cmd: parser.CmdAck, Status: r.st,
		FragIndex: 0, FragCount: 1, Body: body[:]}
	n, err := c.Encode(w.buf[:], parser.Eth{Dst: [6]byte(frame[6:12]), Src: replySrc(frame)})
	if err != nil {
		return nil
	}
	w.n.cm.status(r.st)
	if !tx.Send(in, w.buf[:n]) {
		w.n.cm.txFull.Add(1)
	}
	w.debugAnswer("CONTROL answered", in, frame, h, r.st, r.ack.State, tx)
	return w.buf[:n]
}

// debugAnswer logs, at debug level, a CONTROL request and the answer it
// got: with --log-level debug an operator sees every setup step the AM
// took on this switch (CONTROL is a few frames per operation, never the
// per-frame path).
func (w *Worker) debugAnswer(msg string, in int, frame []byte, h parser.ControlHeader, st parser.Status, state parser.OpState, tx dataplane.Sender) {
	l := w.n.cfg.Logger
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.Debug(msg, "cmd", h.Command().String(), "op", h.Op().String(), "txn", h.Txn(), "status", st.String(), "state", state.String(),
		"from", net.HardwareAddr(frame[6:12]).String(), "port", portName(tx, in))
}

// replySrc is the source MAC of a reply to request frame: the MAC the
// request was addressed to (the node MAC the AM uses, or a port MAC). From
// the egress port's MAC instead, nothing on the path ever sent from the node
// MAC, so no learning bridge between the AM and the node learned where it
// is, and every later request to the node was flooded out of every port of
// every switch on the way, to every host.
func replySrc(frame []byte) [6]byte { return [6]byte(frame[0:6]) }

// resend sends a recorded ACK again, addressed to the current requester.
func (w *Worker) resend(in int, frame []byte, ack []byte, tx dataplane.Sender) {
	n := copy(w.buf[:], ack)
	eh := parser.EthHeader(w.buf[:n])
	eh.SetDst([6]byte(frame[6:12]))
	eh.SetSrc(replySrc(frame))
	if !tx.Send(in, w.buf[:n]) {
		w.n.cm.txFull.Add(1)
	}
}

func (w *Worker) remember(k txnKey, req, ack []byte) {
	w.seq++
	w.txns[k] = &txnRecord{req: append([]byte(nil), req...), ack: append([]byte(nil), ack...), seq: w.seq}
	w.order = append(w.order, k)
	for len(w.order) > w.n.cfg.MaxTxnRecords {
		delete(w.txns, w.order[0])
		w.order = w.order[1:]
	}
}

// caps answers CAPS_QUERY with the requested page of capability records.
func (w *Worker) caps(now int64, in int, frame []byte, c *parser.Control, tx dataplane.Sender) {
	rs := *w.n.records.Load()
	np := pages(len(rs))
	page := int(c.CapsQueryPage())
	if page >= np {
		// Past the last page: INVALID, Detail 0 (the Page byte).
		w.respond(now, in, frame, parser.ControlHeader(frame[parser.HdrOff:parser.ControlBodyOff]),
			reply{st: parser.StatusInvalid, ack: parser.Ack{AckedCmd: parser.CmdCapsQuery, Detail: 0, MissingStream: 0xFFFF}}, tx)
		return
	}
	var p parser.CapsPage
	p.PortCount = uint16(w.ports(tx))
	p.MaxMTU = w.n.cfg.Limits.MaxMTU
	if len(rs) > 0 {
		p.MaxMTU = rs[0].MaxMTU // every record carries the node's bound (SetPortMTU)
	}
	p.MaxOps = w.n.cfg.Limits.MaxOps
	for i := page * parser.MaxCapRecords; i < len(rs) && p.NRecords < parser.MaxCapRecords; i++ {
		p.Records[p.NRecords] = rs[i]
		p.NRecords++
	}
	var body [parser.CapsPageHdrLen + parser.MaxCapRecords*parser.CapRecordLen]byte
	bn, err := p.Encode(body[:])
	if err != nil {
		return
	}
	resp := parser.Control{Op: c.Op, Txn: c.Txn, SrcEP: c.DstEP, DstEP: c.SrcEP, Cmd: parser.CmdCapsResponse,
		FragIndex: uint8(page), FragCount: uint8(np), Body: body[:bn]}
	n, err := resp.Encode(w.buf[:], parser.Eth{Dst: [6]byte(frame[6:12]), Src: replySrc(frame)})
	if err != nil {
		return
	}
	if !tx.Send(in, w.buf[:n]) {
		w.n.cm.txFull.Add(1)
	}
}

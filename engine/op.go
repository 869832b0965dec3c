// This file owns one operation context: admission of its DATA/RESULT and
// PROGRESS frames, accumulation into the ring, the completion frontier,
// partial and result emission, relaying, terminal frames and timers.

package engine

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// inbound is a receiving binding: a contributor (DATA in) or the result path
// in (RESULT_IN).
type inbound struct {
	b          Binding
	rw         *stream.RecvWindow
	lastActive int64
	heard      bool // a DATA or RESULT frame of its peer passed the binding's checks (untouched)
	advZero    bool // the last PROGRESS advertised no interval credit
	advCI      int  // interval credit the last PROGRESS advertised
	armed      bool // RESULT_IN: inactivity clock running
	owed       bool // an OK PROGRESS waits for Engine.Flush
	owedPID    uint32
	progressAt int64 // when the last PROGRESS went to this stream's sender (keepAlive)
	// pushAt is the end of the furthest admitted frame that carried PUSH:
	// the sender (a persistent collective between invocations) sends
	// nothing beyond it until it hears back, so emission must not wait for
	// more input there and the inactivity clock rests (paused).
	pushAt uint32
	// heldSince is when another contributor first passed this paused one
	// (0: nobody waits for it); its inactivity counts from then.
	heldSince int64
	// snap caches this stream's introspection strings (snapshot.go).
	snap snapStrings
}

// paused reports whether the sender rests at a PUSH boundary with
// everything before it received.
func (ib *inbound) paused() bool {
	return ib.pushAt != 0 && ib.rw.Committed() == ib.pushAt && ib.rw.Pending() == 0
}

// resting: paused, and no other contributor waits for it; the operation
// lacks nothing from it.
func (ib *inbound) resting() bool { return ib.paused() && ib.heldSince == 0 }

// resting reports whether the whole context rests: every contributor
// rests at its PUSH boundary with nobody waiting for it, and everything
// sent out is acknowledged (a persistent collective between invocations).
func (o *op) resting() bool {
	if len(o.in) == 0 {
		return false
	}
	for i := range o.in {
		if !o.in[i].resting() {
			return false
		}
	}
	for _, ob := range o.emitOut {
		if !ob.sw.Idle() {
			return false
		}
	}
	return true
}

// quiet reports whether the context has no timer the worker's 1 ms tick
// serves armed (Engine.Quiet): STAGED (its expiry is checked each second),
// COMPLETE with everything it sent acknowledged, or ACTIVE and resting
// between invocations with nothing outstanding, no terminal frame pending
// and no result stream's inactivity clock running. A FAILED context
// announces itself on the tick.
func (o *op) quiet() bool {
	switch o.state {
	case parser.StateStaged:
		return true
	case parser.StateComplete:
		return o.sendersIdle()
	case parser.StateActive:
		if o.terminalPending || o.relayPending || !o.resting() || !o.sendersIdle() {
			return false
		}
		r := o.result
		return r == nil || !r.armed || r.rw.Done() || o.resultInexact
	}
	return false
}

// sendersIdle reports whether every frame the context sent is acknowledged.
func (o *op) sendersIdle() bool {
	if o.parent != nil && !o.parent.sw.Idle() {
		return false
	}
	for i := range o.outs {
		if !o.outs[i].sw.Idle() {
			return false
		}
	}
	return true
}

// outbound is a sending binding: the parent (DATA out) or a result path out
// (RESULT_OUT).
type outbound struct {
	b    Binding
	sw   *stream.SendWindow
	snap snapStrings
}

type op struct {
	e        *Engine
	spec     Spec
	state    parser.OpState
	err      error
	inexact  bool
	activeAt int64
	doneAt   int64
	stagedAt int64 // for Expire
	failedAt int64
	// ctlAt is when the AM last sent any CONTROL for this context (Stage,
	// Commit, Touch): a resting persistent collective expires only when
	// both its AM and its ranks have gone quiet (Expire).
	ctlAt int64
	// What the context failed on, for COMPLETE's ACK: the cause and the
	// stream (0xFFFF none) with its first missing element.
	failCause  parser.FailCause
	failStream uint16
	failFrom   uint32
	// Where the failure began, for the PROGRESS FAILED this context
	// sends (section 7): the cause there and how many FAILED hops it
	// crossed to get here. A rank cut off from the AM has nothing else.
	originCause parser.FailCause
	originHops  uint8
	// announceLeft counts the FAILED announcements still to send (see
	// announceFailure); announcedAt is when the last one went.
	announceLeft int
	expired      bool // Expire retired it (counted as expired, not aborted)
	announcedAt  int64
	// failLogPending: fail recorded a failure Tick has not logged yet.
	failLogPending bool
	tuple          string // tupleString's cache
	serial         uint64 // Engine.serial at Stage (Engine.snapSig)

	bank kulisch.Bank
	kv   *kulisch.Vector // KULISCH_FIXED bank, for wire checks before applying
	ring uint32          // accumulator slots = WindowElements
	w    int             // Kulisch width in bits
	// kbytes is W/8 when a KULISCH group may appear on the wire, else 0.
	kbytes    int
	ringBytes int

	in     []inbound // contributors
	result *inbound  // RESULT_IN (relay), nil otherwise
	parent *outbound
	outs   []outbound // RESULT_OUT

	frontier uint32 // every contributor committed below it
	// pushed: a contributor rests at the frontier (PUSH), so no more input
	// comes for it until the result goes out: emission holds nothing back
	// and the frame that reaches the frontier carries PUSH onward.
	pushed  bool
	emitted uint32 // elements encoded into every outgoing window
	// maxIn is the most elements one inbound DATA frame can carry (the
	// largest contributor MinRoom): emission may only hold back a short
	// frame while a contributor's next frame still fits the element window.
	maxIn uint32

	emitOut   []*outbound // where completed ranges go (parent, or every RESULT_OUT)
	emitClass parser.Class
	emitFmt   kulisch.Format // concrete format or AUTO

	terminalPending bool // ACCUMULATION_INEXACT frames still to be queued on emitOut
	// resultInexact: RESULT_IN delivered ACCUMULATION_INEXACT; the relay owes
	// its RESULT_OUTs the same terminal frame (relayPending until queued).
	resultInexact bool
	relayPending  bool
	// owedSince: since when this node has handed on partials whose
	// RESULT has not come back (0: none owed); tick's RESULT_IN clock.
	owedSince int64
	relayOut  []*outbound

	// sets caches the AUTO sets of completed elements [setAt, setAt+setN).
	sets  []kulisch.FormatSet
	setAt uint32
	setN  int
	// autoCnt mirrors sets[:setN] to answer AutoMaxCount without a pass.
	autoCnt kulisch.AutoCounter
	groups  []kulisch.Group

	// scaled: KULISCH and AUTO partials under KULISCH_FIXED go out as
	// KULISCH_SCALED groups where that is smaller. spans caches the extents of completed elements
	// [spanAt, spanAt+spanN): they are final below the frontier, so each
	// element's extent is computed once however many plans look at it.
	scaled  bool
	spans   []kulisch.Span
	spanAt  uint32
	spanN   int
	sgroups []kulisch.ScaledGroup
	planner kulisch.ScaledPlanner
	planAt  uint32 // o.emitted when the planner last planned (Extend resumes it)
	// autoStreak counts the frames in a row where AUTO carried more values
	// than the scaled plan; emitSeq numbers emitted frames (scaledProbe).
	autoStreak int
	emitSeq    uint32
	// scaledStreak counts the frames in a row where the scaled plan
	// carried more values than any AUTO plan could (autoSkip).
	scaledStreak int
	// probeAt is the emitSeq of the next comparison while one encoding
	// keeps winning, probeGap the distance to it (backoff).
	probeAt, probeGap uint32
	// fp32Streak counts the AUTO plans in a row that came out as one FP32
	// group; past fp32WinsToSkip, frames go out as FP32 without planning
	// until emitSeq reaches fp32At (fp32Fast), fp32Gap frames apart.
	fp32Streak      int
	fp32At, fp32Gap uint32
	fp32Frames      int // frames sent so (tests)
	// f64 sends a frame as one KULISCH_F64 group when binary64 holds all
	// its values (docs/protocol.md section 6): a copy of the lanes instead
	// of a scaled plan and encoding, for 8 bytes a value. f64Group is that
	// frame's plan (Metrics.FormatFrames counts such frames).
	f64      bool
	f64Group [1]kulisch.Group
	// scaledPlans and autoPlans count the scaled and AUTO plans made,
	// autoSetFrames the frames for which AUTO sets were computed (tests).
	scaledPlans, autoPlans, autoSetFrames int
}

// Once AUTO has beaten the scaled plan autoWinsToSkip frames in a row, the
// scaled plan is made for one frame in scaledProbeEvery only, unless AUTO
// needs KULISCH groups (where scaled usually wins). On data that AUTO
// carries in FP32 (sums of integers, of FP32 values that stay exact),
// making the scaled plan for every frame, only to discard it, was 26% of a
// leaf's CPU. Both encodings are exact: skipping only risks a larger frame
// for the few frames until the next probe when the data changes character.
const (
	autoWinsToSkip   = 4
	scaledProbeEvery = 16
	maxProbeGap      = 128
)

// scaledProbe reports whether this frame's plan should try scaled groups
// before AUTO.
func (o *op) scaledProbe() bool {
	return o.autoStreak < autoWinsToSkip || o.emitSeq >= o.probeAt
}

// fp32WinsToSkip: after this many AUTO plans in a row that were one FP32
// group, a leaf stops computing AUTO sets and planning for the frames
// between two plans (fp32Fast), and only checks that FP32 holds every
// value it sends (kulisch.Vector.FP32Exact). On sums of integers below
// 2^24 (what AUTO carries in FP32) the sets and the plan were a fifth of a
// leaf's CPU (1M KULISCH_FIXED, MTU 9000) for a plan known in advance. The
// plans in between keep their backoff (16, 32, ... maxProbeGap frames): a
// narrower format that starts to pay shows up within maxProbeGap frames,
// and a value FP32 does not hold ends it at once.
const fp32WinsToSkip = 4

// fp32Fast reports whether this frame goes out as one FP32 group without
// an AUTO plan.
func (o *op) fp32Fast() bool {
	return o.kv != nil && o.fp32Streak >= fp32WinsToSkip && o.emitSeq < o.fp32At
}

// fp32Exact is kulisch.Vector.FP32Exact over ring positions [first,
// first+n), which may wrap around the ring's end.
func (o *op) fp32Exact(first, n uint32) uint32 { return o.ringRun(first, n, o.kv.FP32Exact) }

// f64Run is kulisch.Vector.F64Run over ring positions [first, first+n),
// which may wrap around the ring's end.
func (o *op) f64Run(first, n uint32) uint32 { return o.ringRun(first, n, o.kv.F64Run) }

// ringRun is run, a count of leading elements with some property, over
// ring positions [first, first+n), which may wrap around the ring's end.
func (o *op) ringRun(first, n uint32, run func(first, n int) int) uint32 {
	idx := first % o.ring
	if idx+n > o.ring {
		k := o.ring - idx
		if got := uint32(run(int(idx), int(k))); got < k {
			return got
		}
		return k + uint32(run(0, int(n-k)))
	}
	return uint32(run(int(idx), int(n)))
}

// backoff schedules the next comparison after the losing encoding lost
// again: scaledProbeEvery frames on, then twice as far each time it keeps
// losing, up to maxProbeGap. On sums of integers a leaf's scaled probes,
// one frame in 16, were still 12% of its CPU (KULISCH_FIXED, 1M elements
// at MTU 9000: a scaled plan costs about 17 AUTO plans); when the data
// changes character the other encoding takes over within maxProbeGap
// frames. Both encodings are exact: a late switch costs bytes, never a
// value.
func (o *op) backoff() {
	o.probeGap = nextGap(o.probeGap)
	o.probeAt = o.emitSeq + o.probeGap
}

// nextGap is the distance to the next comparison after one at gap g (0:
// the first): scaledProbeEvery, then doubling up to maxProbeGap.
func nextGap(g uint32) uint32 { return min(max(2*g, scaledProbeEvery), maxProbeGap) }

// The converse: once the scaled plan has carried more values than any
// AUTO plan could scaledWinsToSkip frames in a row, the AUTO sets are
// computed (to check that bound, and to plan AUTO if it fails) for one
// frame in scaledProbeEvery only. On gradient-like sums, where about half
// the values need KULISCH in AUTO, the sets were 8% of a leaf's CPU for a
// comparison AUTO always lost.
const scaledWinsToSkip = 4

// autoSkip reports whether this frame goes straight to the scaled plan.
func (o *op) autoSkip() bool {
	return o.scaledStreak >= scaledWinsToSkip && o.emitSeq < o.probeAt
}

func newOp(e *Engine, s *Spec) (*op, error) {
	o := &op{e: e, spec: *s, state: parser.StateStaged, ring: s.ringElements(), w: s.KulischWidth}
	o.spec.Bindings = append([]Binding(nil), s.Bindings...)
	w := s.KulischWidth
	if s.Tuple.Acc != kulisch.KulischFixed {
		w = 0 // an ArrivalVector ignores it; the pool must not split on it
	}
	bank, err := e.takeBank(s.Tuple.Acc, int(o.ring), w)
	if err != nil {
		return nil, &SpecError{-1, "tuple", err.Error()}
	}
	o.bank = bank
	o.kv, _ = bank.(*kulisch.Vector)
	if s.Tuple.Acc == kulisch.KulischFixed {
		o.kbytes = s.KulischWidth / 8
	}
	frame := parser.EthLen + s.MTU
	timeout := int64(s.Timeout)
	name := func(kind string, st uint16) string {
		return opName(s.Op) + " " + kind + " stream " + itoa(int(st))
	}
	for _, b := range s.Bindings {
		switch b.Kind {
		case parser.KindContributor, parser.KindResultIn:
			minRoom := frameElements(s, &b)
			ib := inbound{b: b, rw: stream.NewRecvWindow(stream.RecvConfig{
				Name: name(b.Kind.String(), b.Stream), VectorLen: s.VectorLen, Intervals: s.WindowIntervals,
				Bytes: s.WindowBytes, Elements: s.WindowElements, MaxFrame: frame, MinRoom: minRoom,
			})}
			if b.Kind == parser.KindContributor {
				o.in = append(o.in, ib)
				o.maxIn = max(o.maxIn, minRoom)
			} else {
				o.result = &ib
			}
		case parser.KindParent, parser.KindResultOut:
			ob := outbound{b: b, sw: stream.NewSendWindow(stream.SendConfig{
				Name: name(b.Kind.String(), b.Stream), ReplayDepth: s.ReplayDepth, FrameSize: frame,
				Intervals: s.WindowIntervals, Bytes: s.WindowBytes, Elements: s.WindowElements, Deadline: timeout,
				Buffer: e.slabs.Take(s.ReplayDepth * frame),
			})}
			if b.Kind == parser.KindParent {
				o.parent = &ob
			} else {
				o.outs = append(o.outs, ob)
			}
		}
	}
	switch s.Role {
	case parser.RoleLeaf, parser.RoleInternal:
		o.emitOut = []*outbound{o.parent}
		o.emitClass = parser.ClassData
		o.emitFmt = s.Tuple.Partial
	default:
		for i := range o.outs {
			o.emitOut = append(o.emitOut, &o.outs[i])
		}
		o.emitClass = parser.ClassResult
		o.emitFmt = s.Tuple.Output
	}
	if o.emitFmt == kulisch.KULISCH || o.emitFmt == kulisch.AUTO {
		o.kbytes = s.KulischWidth / 8
	}
	for i := range o.outs {
		o.relayOut = append(o.relayOut, &o.outs[i])
	}
	if o.emitFmt == kulisch.AUTO {
		o.sets = make([]kulisch.FormatSet, parser.MaxPacketElements(s.MTU))
		o.groups = make([]kulisch.Group, 0, parser.MaxGroups)
		w := 0 // as emit passes AutoMaxCount: KULISCH is a choice only when it is the base
		if s.Tuple.Acc.Base() == kulisch.KULISCH {
			w = o.w
		}
		o.autoCnt.Reset(w, len(o.sets))
	}
	if o.emitClass == parser.ClassData && (o.emitFmt == kulisch.KULISCH || o.emitFmt == kulisch.AUTO) && o.kv != nil &&
		!e.cfg.PlainKulischPartials {
		o.scaled = true
		// A plan consumes at most one frame's worth; the slack lets it see
		// that a frame is full, and past it (the planner's lookahead).
		o.spans = make([]kulisch.Span, kulisch.MaxScaledCount(kulisch.BodyBudget(s.MTU, 0))+16)
		o.sgroups = make([]kulisch.ScaledGroup, 0, parser.MaxGroups)
		o.planner.Reserve(len(o.spans))
		o.f64 = !e.cfg.CompactKulischPartials
	}
	return o, nil
}

// frameElements is the most elements one inbound frame on binding b can
// carry: the input format for ranks, the partial (or, for RESULT_IN, the
// output) format for switches, and the INT8 packet bound under AUTO.
func frameElements(s *Spec, b *Binding) uint32 {
	f := s.Tuple.Partial
	switch {
	case b.Kind == parser.KindContributor && b.Rank:
		f = s.Tuple.Input
	case b.Kind == parser.KindResultIn:
		f = s.Tuple.Output
	}
	// A child switch may send its KULISCH partials as KULISCH_SCALED
	// groups (docs/protocol.md section 6).
	scaled := b.Kind == parser.KindContributor && !b.Rank
	return uint32(kulisch.FrameElements(f, s.KulischWidth, s.MTU, scaled))
}

// allowed reports whether an inbound group format is legal on binding b:
// ranks send the input format; child switches send the partial policy's
// formats (any concrete format the policy can produce under AUTO), and
// KULISCH_SCALED wherever KULISCH partials are legal (a rule of this
// protocol version: docs/protocol.md section 6).
func (o *op) allowed(b *Binding, f parser.Format) bool {
	kf := kulischFormat(f)
	if b.Kind == parser.KindContributor && b.Rank {
		return kf == o.spec.Tuple.Input
	}
	if kf == kulisch.KULISCH_SCALED || kf == kulisch.KULISCH_F64 {
		p := o.spec.Tuple.Partial
		return b.Kind == parser.KindContributor && o.spec.Tuple.Acc == kulisch.KulischFixed &&
			(p == kulisch.KULISCH || p == kulisch.AUTO)
	}
	p := o.spec.Tuple.Partial
	if b.Kind == parser.KindResultIn {
		p = o.spec.Tuple.Output // results arrive in the output format
	}
	switch {
	case p == kulisch.AUTO && o.spec.Tuple.Acc == kulisch.KulischFixed:
		return kf.Concrete()
	case p == kulisch.AUTO:
		return kf.Concrete() && kf != kulisch.KULISCH
	}
	return kf == p
}

func (o *op) findIn(stream uint16) *inbound {
	for i := range o.in {
		if o.in[i].b.Stream == stream {
			return &o.in[i]
		}
	}
	return nil
}

// checkPeer verifies that a frame came from the binding's peer: ingress
// port, source MAC and both endpoints.
func (o *op) checkPeer(b *Binding, in int, frame []byte, src, dst uint16) bool {
	m := o.e.m
	if b.Port != in {
		m.drop(DropWrongPort)
		return false
	}
	if [6]byte(frame[6:12]) != b.PeerMAC {
		m.drop(DropWrongMAC)
		return false
	}
	if src != b.PeerEP || dst != b.LocalEP {
		m.drop(DropWrongEndpoint)
		return false
	}
	return true
}

// answerFailed tells the peer of a bound stream that this context FAILED
// (PROGRESS status FAILED, docs/protocol.md section 7), so a rank or child
// switch still sending stops at once with that reason instead of
// retransmitting into silence until its own timer fires. Frames from anyone
// but the binding's peer get no answer: the context never reflects to an
// unverified source. A frame from the peer counts as a not_active drop,
// any other as what checkPeer finds wrong with it.
func (o *op) answerFailed(now int64, in int, frame []byte, d *parser.Data, tx dataplane.Sender) {
	ib := o.inboundFor(d)
	if ib == nil {
		o.e.m.drop(DropNotActive)
		return
	}
	if !o.checkPeer(&ib.b, in, frame, d.SrcEP, d.DstEP) {
		return
	}
	o.e.m.drop(DropNotActive)
	o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusFailed, tx)
}

// inboundFor is the binding a DATA or RESULT frame arrives on: a
// CONTRIBUTOR stream for DATA, RESULT_IN for RESULT (a RESULT is never
// reduced), nil for any other stream.
func (o *op) inboundFor(d *parser.Data) *inbound {
	if d.Class == parser.ClassData {
		return o.findIn(d.Stream)
	}
	if o.result != nil && o.result.b.Stream == d.Stream {
		return o.result
	}
	return nil
}

func (o *op) handleData(now int64, in int, frame []byte, d *parser.Data, tx dataplane.Sender) {
	m := o.e.m
	ib := o.inboundFor(d)
	if ib == nil {
		m.drop(DropUnknownStream)
		return
	}
	if !o.checkPeer(&ib.b, in, frame, d.SrcEP, d.DstEP) {
		return
	}
	if d.Flags&parser.FlagInexact != 0 && ib != o.result && ib.b.Rank {
		// A rank sends input values; an exact sum can lose exactness
		// only in a switch. Taken, one forged frame ended every rank's
		// collective with an inexact-accumulation error.
		m.drop(DropBadFormat)
		o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusInvalid, tx)
		return
	}
	ib.lastActive, ib.heard = now, true
	if d.Flags&parser.FlagInexact != 0 {
		o.e.t.frame(d.Class)
		o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusOK, tx)
		if o.state != parser.StateActive {
			return
		}
		if ib == o.result {
			if !o.resultInexact {
				o.resultInexact, o.relayPending = true, true
				o.relayPending = !o.sendTerminal(now, o.relayOut, parser.ClassResult, tx)
			}
		} else {
			o.goInexact(now, tx)
		}
		o.checkDone(now)
		return
	}
	if d.Flags&parser.FlagExt != 0 {
		m.drop(DropBadFormat) // endpoint sets belong to bitmap jobs
		return
	}
	// Validate every group before any value touches the accumulators,
	// keeping them for apply: a KULISCH partial of many small groups was
	// walked once more there (NextGroup was 9% of a root's CPU).
	var it parser.GroupIter
	gs := o.e.groups[:0]
	for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
		gs = append(gs, g)
		if !o.allowed(&ib.b, g.Format) {
			m.drop(DropBadFormat)
			o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusInvalid, tx)
			return
		}
		// The parser checked Kulisch values against this operation's W
		// (Limits.KulischBytes): widths, Shift + 8B <= W, states, zero
		// integers. Checking them again here was 5% of a root's CPU.
		if (g.Format == parser.FormatKulisch || g.Format == parser.FormatKulischScaled || g.Format == parser.FormatKulischF64) && o.kv == nil {
			m.drop(DropArithmetic)
			o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusInvalid, tx)
			return
		}
	}
	first, count := d.First, uint32(d.Count)
	n := parser.DataBodyOff + int(d.BodyLen)
	relay := ib == o.result
	if relay && o.state == parser.StateActive && first+count > ib.rw.Committed() {
		// (A frame wholly below the watermark is a duplicate whose ACK was
		// lost: it is acknowledged below without needing any room.)
		// An out-of-order result must leave one replay slot on every
		// output for the frame that closes the first hole: the outputs
		// release only cumulatively, so without it they could fill with
		// later frames and never drain.
		need := 1
		if first != ib.rw.Committed() {
			need = 2
		}
		for i := range o.outs {
			if o.outs[i].sw.Free() < need || !o.outs[i].sw.CanSend(now, first, first+count, n) {
				m.drop(DropNoCredit)
				o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusNoCredit, tx)
				return
			}
		}
	}
	v := ib.rw.Admit(d.PacketID, first, count, n, stream.Hash(d.Body))
	switch v {
	case stream.Accepted:
		o.e.t.frame(d.Class)
		if d.Flags&parser.FlagPush != 0 {
			ib.pushAt = max(ib.pushAt, first+count)
		}
		ib.heldSince = 0 // it moved: nobody waits for it now
		if relay {
			o.relay(now, frame[:n], first, count, tx)
			// The onward copies live in the RESULT_OUT replay buffers, so
			// the incoming interval holds no storage here.
			ib.rw.Release(ib.rw.Committed())
		} else {
			o.apply(gs)
		}
		o.oweProgress(now, ib, d.PacketID, tx)
		if !relay {
			o.advance(now, tx)
		}
		o.checkDone(now)
	case stream.Duplicate:
		m.Duplicates.Add(1)
		o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusDuplicate, tx)
	case stream.Invalid:
		m.drop(DropOverlap)
		o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusInvalid, tx)
	case stream.NoCredit:
		m.drop(DropNoCredit)
		o.sendProgress(now, ib, d.PacketID, parser.ProgressStatusNoCredit, tx)
	}
}

// apply accumulates every group of a validated frame into the ring by
// global position.
func (o *op) apply(gs []parser.Group) {
	for i := range gs {
		g := &gs[i]
		switch g.Format {
		case parser.FormatKulischScaled:
			o.applyScaled(g)
			continue
		case parser.FormatKulischF64:
			o.applyF64(g)
			continue
		}
		f := kulischFormat(g.Format)
		w := f.Width(o.w)
		idx := g.First % o.ring
		cnt := uint32(g.Count)
		vals := g.Values
		if idx+cnt > o.ring { // wraps around the ring
			k := o.ring - idx
			if o.bank.Add(int(idx), f, vals[:int(k)*w]) != nil {
				o.e.m.drop(DropArithmetic)
			}
			vals, idx, cnt = vals[int(k)*w:], 0, cnt-k
		}
		if o.bank.Add(int(idx), f, vals) != nil {
			o.e.m.drop(DropArithmetic)
		}
	}
}

// applyScaled merges one KULISCH_SCALED group (handleData checked it).
func (o *op) applyScaled(g *parser.Group) {
	w := 1 + int(g.KBytes)
	sh, b := int(g.Shift), int(g.KBytes)
	idx := g.First % o.ring
	cnt := uint32(g.Count)
	vals := g.Values
	if idx+cnt > o.ring { // wraps around the ring
		k := o.ring - idx
		if o.kv.MergeScaledChecked(int(idx), sh, b, vals[:int(k)*w]) != nil {
			o.e.m.drop(DropArithmetic)
		}
		vals, idx = vals[int(k)*w:], 0
	}
	if o.kv.MergeScaledChecked(int(idx), sh, b, vals) != nil {
		o.e.m.drop(DropArithmetic)
	}
}

// applyF64 merges one KULISCH_F64 group (the parser checked its values
// against this operation's W).
func (o *op) applyF64(g *parser.Group) {
	idx := g.First % o.ring
	cnt := uint32(g.Count)
	vals := g.Values
	if idx+cnt > o.ring { // wraps around the ring
		k := o.ring - idx
		if o.kv.MergeF64Checked(int(idx), vals[:int(k)*kulisch.F64Size]) != nil {
			o.e.m.drop(DropArithmetic)
		}
		vals, idx = vals[int(k)*kulisch.F64Size:], 0
	}
	if o.kv.MergeF64Checked(int(idx), vals) != nil {
		o.e.m.drop(DropArithmetic)
	}
}

// relay replicates an accepted RESULT frame on every RESULT_OUT with this
// node's own Packet IDs, stream IDs, endpoints and MACs.
func (o *op) relay(now int64, frame []byte, first, count uint32, tx dataplane.Sender) {
	for i := range o.outs {
		o.sendCopy(now, &o.outs[i], frame, first, count, tx)
	}
}

// sendCopy queues a copy of an encoded DATA/RESULT frame on ob, rewriting
// the fields that belong to that direct stream.
func (o *op) sendCopy(now int64, ob *outbound, frame []byte, first, count uint32, tx dataplane.Sender) {
	buf, pid, ok := ob.sw.Reserve(now, first, count, len(frame))
	if !ok {
		return // cannot happen: CanSend was checked for every output
	}
	copy(buf, frame)
	eh := parser.EthHeader(buf)
	eh.SetDst(ob.b.PeerMAC)
	eh.SetSrc(tx.PortMAC(ob.b.Port))
	h := parser.DataHeader(buf[parser.HdrOff:parser.DataBodyOff])
	h.SetPacketID(pid)
	h.SetStream(ob.b.Stream)
	h.SetSrcEP(ob.b.LocalEP)
	h.SetDstEP(ob.b.PeerEP)
	h.SetFlags(h.Flags() &^ parser.FlagRetransmit)
	o.e.sendReplay(tx, ob.b.Port, ob.sw.Commit(now, len(frame)))
	o.e.t.sentFrame(parser.Class(buf[parser.CWOff+1]))
}

// advance recomputes the frontier and emits what completed.
func (o *op) advance(now int64, tx dataplane.Sender) {
	f, most, pending := o.spec.VectorLen, uint32(0), false
	for i := range o.in {
		c := o.in[i].rw.Committed()
		f, most = min(f, c), max(most, c)
		pending = pending || o.in[i].rw.Pending() > 0
	}
	o.frontier = f
	o.pushed = false
	for i := range o.in {
		ib := &o.in[i]
		if !ib.paused() {
			continue
		}
		c := ib.rw.Committed()
		o.pushed = o.pushed || c == f
		// Passed: another contributor has data beyond it (a paused one
		// has nothing pending, so any pending interval is another's).
		if ib.heldSince == 0 && (most > c || pending) {
			ib.heldSince = now // its inactivity clock starts now
		}
	}
	o.emit(now, tx)
}

// emit encodes completed elements [emitted, frontier) into every outgoing
// window, as far as credits allow, then frees their ring slots and returns
// credit to the contributors.
func (o *op) emit(now int64, tx dataplane.Sender) {
	if o.inexact {
		o.discard(now, tx)
		return
	}
	if o.state != parser.StateActive {
		return
	}
	start := o.emitted
	budget := kulisch.BodyBudget(o.spec.MTU, 0)
	for o.emitted < o.frontier {
		// A frame of one value and one byte is the least any plan sends
		// (CanSend is monotone in both): if even that cannot go out, a plan
		// made now would be thrown away below. A leaf whose parent is out
		// of credit planned again at every arrival (TestAutoPlansNotWasted).
		for _, ob := range o.emitOut {
			if !ob.sw.CanSend(now, o.emitted, o.emitted+1, 1) {
				goto done
			}
		}
		avail := o.frontier - o.emitted
		// Holding back a short frame is only safe while more input can
		// arrive: the contributor at the frontier must fit its next frame
		// into the element window, which is measured from o.emitted.
		canWait := o.frontier < o.spec.VectorLen && !o.pushed &&
			uint64(o.frontier)+uint64(o.maxIn) <= uint64(o.emitted)+uint64(o.spec.WindowElements)
		var count uint32
		var groups []kulisch.Group
		scaled := false                    // o.sgroups is the plan
		probed, scaledLost := false, false // a scaled plan was made, and carried fewer values than AUTO
		base := o.spec.Tuple.Acc.Base()
		// AUTO under KULISCH_FIXED that scaled partials keep beating is
		// planned like plain scaled partials (autoSkip).
		skipAuto := o.emitFmt == kulisch.AUTO && o.scaled && base == kulisch.KULISCH && o.autoSkip()
		autoLost := skipAuto // the scaled plan beat any AUTO plan without one being made
		fast := false        // one FP32 group without a plan (fp32Fast)
		f64 := false         // one KULISCH_F64 group without a plan
		if o.emitFmt == kulisch.AUTO && !skipAuto && o.fp32Fast() {
			fcap := uint32(kulisch.MaxCount(kulisch.FP32, o.w, budget))
			c := min(avail, fcap)
			if c < fcap && canWait {
				break // wait for a full frame while more is coming
			}
			if o.fp32Exact(o.emitted, c) == c {
				count, fast = c, true
				groups = append(o.groups[:0], kulisch.Group{Format: kulisch.FP32, Count: int(c)})
				o.fp32Frames++
				goto planned
			}
			o.fp32Streak, o.fp32Gap = 0, 0 // a value FP32 does not hold: plan this frame
		}
		if o.f64 {
			fcap := uint32(kulisch.MaxCount(kulisch.KULISCH_F64, o.w, budget))
			c := min(avail, fcap)
			// Under AUTO, values FP32 holds go as FP32 (half the bytes):
			// the AUTO path below plans them.
			if o.f64Run(o.emitted, c) == c && (o.emitFmt != kulisch.AUTO || o.fp32Exact(o.emitted, c) < c) {
				if c < fcap && canWait {
					break // wait for a full frame while more is coming
				}
				count, fast, f64 = c, true, true
				o.f64Group[0] = kulisch.Group{Format: kulisch.KULISCH_F64, Count: int(c)}
				groups = o.f64Group[:]
				goto planned
			}
		}
		if o.emitFmt == kulisch.AUTO && !skipAuto {
			n := min(avail, uint32(len(o.sets)))
			o.autoSetFrames++
			if err := o.autoSets(o.emitted, n); err != nil {
				o.encodeFailed(now, err, tx)
				return
			}
			w := 0
			if base == kulisch.KULISCH {
				w = o.w
			}
			if canWait && n == avail && avail < uint32(len(o.sets)) && o.autoCnt.MaxCount(int(n), budget) >= int(n) {
				// Even at their narrowest widths every value fits: a plan
				// could only use them all, and such a plan is held back
				// below. Wait for more without planning: on small integer
				// sums of mixed widths, where every value goes through
				// the planner's lookahead, the plans thrown away here were
				// about half of a leaf's planning (TestAutoPlansNotWasted).
				break
			}
			var sc uint32
			if o.scaled && base == kulisch.KULISCH && o.scaledProbe() {
				// Scaled groups first, when they already carry more values
				// than any AUTO plan could: on gradient-like sums, where
				// about half the elements need KULISCH in AUTO, planning
				// AUTO was a fifth of a leaf's CPU for a plan that lost.
				var err error
				if sc, err = o.planScaled(avail, budget); err != nil {
					o.encodeFailed(now, err, tx)
					return
				}
				if int(sc) > o.autoCnt.MaxCount(int(n), budget) {
					count, scaled, autoLost = sc, true, true
					goto planned
				}
				probed = true
			}
			o.autoPlans++
			gs, used, err := kulisch.PlanAuto(o.groups[:0], o.sets[:n], base, w, budget)
			if err != nil || used == 0 {
				o.encodeFailed(now, err, tx)
				return
			}
			groups, count = gs, uint32(used)
			// Where AUTO needs KULISCH groups (exact sums no narrower
			// format holds), scaled groups usually carry far more: send
			// whichever plan carries more values, or as many in fewer bytes.
			if o.scaled && autoHasKulisch(gs) {
				if !probed {
					if sc, err = o.planScaled(avail, budget); err != nil {
						o.encodeFailed(now, err, tx)
						return
					}
					probed = true
				}
				if sc > count || sc == count && scaledBytes(o.sgroups, o.w) < autoBytes(gs, o.w) {
					groups, count, scaled = nil, sc, true
				}
			}
			scaledLost = probed && !scaled && sc < count
		} else if o.scaled {
			sc, err := o.planScaled(avail, budget)
			if err != nil {
				o.encodeFailed(now, err, tx)
				return
			}
			count, scaled = sc, true
			if count == avail && canWait && avail < uint32(len(o.spans)) {
				break // the plan used everything: a later plan may pack more
			}
		} else {
			cap := uint32(kulisch.MaxCount(o.emitFmt, o.w, budget))
			count = min(avail, cap)
			if count < cap && canWait {
				break // wait for a full frame while more is coming
			}
		}
	planned:
		if o.emitFmt == kulisch.AUTO && !fast && count == avail && canWait && avail < uint32(len(o.sets)) {
			break // the plan used everything: a later plan may pack more
		}
		end := o.emitted + count
		for _, ob := range o.emitOut {
			if !ob.sw.CanSend(now, o.emitted, end, ob.sw.FrameSize()) {
				goto done
			}
		}
		// Encode (and round) once; every further output gets a copy with
		// its own header fields.
		fr, err := o.encode(now, o.emitOut[0], o.emitted, count, groups, scaled, tx)
		if err != nil {
			o.encodeFailed(now, err, tx)
			return
		}
		for _, ob := range o.emitOut[1:] {
			o.sendCopy(now, ob, fr, o.emitted, count, tx)
		}
		o.resetRing(o.emitted, count)
		o.emitted = end
		o.e.t.completed(count)
		if f64 {
			// Nothing was compared: the scaled and AUTO streaks stand.
			o.emitSeq++
			continue
		}
		switch {
		case scaled:
			o.autoStreak = 0
		case scaledLost:
			if o.autoStreak++; o.autoStreak >= autoWinsToSkip {
				o.backoff() // a probe (or one of the first plans) lost again
			}
		}
		switch {
		case !autoLost:
			o.scaledStreak = 0
		case skipAuto:
			o.scaledStreak++ // not compared: no news
		default:
			if o.scaledStreak++; o.scaledStreak >= scaledWinsToSkip {
				o.backoff()
			}
		}
		if o.autoStreak == 0 && o.scaledStreak == 0 {
			o.probeGap = 0 // the encodings trade places: compare every frame again
		}
		switch {
		case fast:
		case o.kv != nil && len(groups) == 1 && groups[0].Format == kulisch.FP32:
			if o.fp32Streak++; o.fp32Streak >= fp32WinsToSkip {
				o.fp32Gap = nextGap(o.fp32Gap)
				o.fp32At = o.emitSeq + 1 + o.fp32Gap
			}
		default:
			o.fp32Streak, o.fp32Gap = 0, 0
		}
		o.emitSeq++
	}
done:
	if o.emitted != start {
		o.release(now, tx)
	}
}

// discard consumes completed ranges of an operation whose sum is already
// known to be inexact: nothing more is sent, but contributors must still be
// acknowledged and given credit so that their own transfers finish.
func (o *op) discard(now int64, tx dataplane.Sender) {
	if o.frontier <= o.emitted {
		return
	}
	o.resetRing(o.emitted, o.frontier-o.emitted)
	o.emitted = o.frontier
	o.release(now, tx)
}

// release returns element-window credit up to emitted to every contributor
// and sends a window update to those that were told they had none.
func (o *op) release(now int64, tx dataplane.Sender) {
	for i := range o.in {
		ib := &o.in[i]
		ib.rw.Release(o.emitted)
		if ib.advZero {
			if ci, _ := ib.rw.Credits(); ci > 0 {
				o.sendProgress(now, ib, 0, parser.ProgressStatusOK, tx) // window update
			}
		}
	}
}

// autoSets makes o.sets[:n] the AUTO sets of positions [first, first+n),
// keeping those already computed: like extents, a completed element's set
// is final, and a plan that consumes a fraction of them must not pay for
// recomputing the rest on the next frame.
func (o *op) autoSets(first, n uint32) error {
	if k := first - o.setAt; first >= o.setAt && int(k) <= o.setN {
		// k == 0: nothing went out since the last call (a leaf waiting
		// for a fuller frame), so the cache and its sums stay as they are.
		if k > 0 {
			o.setN = copy(o.sets, o.sets[k:o.setN])
			o.autoCnt.Drop(int(k))
		}
	} else {
		o.setN = 0
		o.autoCnt.Drop(o.autoCnt.Len())
	}
	o.setAt = first
	for uint32(o.setN) < n {
		idx := (first + uint32(o.setN)) % o.ring
		c := min(n-uint32(o.setN), o.ring-idx) // up to the ring's end
		if err := kulisch.AutoSets(o.bank, int(idx), o.sets[o.setN:o.setN+int(c)]); err != nil {
			o.setN = 0 // the cache and its counter are rebuilt on the next call
			o.autoCnt.Drop(o.autoCnt.Len())
			return err
		}
		o.autoCnt.Append(o.sets[o.setN : o.setN+int(c)])
		o.setN += int(c)
	}
	return nil
}

func (o *op) resetRing(first, n uint32) {
	idx := first % o.ring
	if idx+n > o.ring {
		k := o.ring - idx
		_ = o.bank.ResetRange(int(idx), int(k))
		idx, n = 0, n-k
	}
	_ = o.bank.ResetRange(int(idx), int(n))
}

// putValues writes ring values for positions [first, first+n) in format f.
func (o *op) putValues(dst []byte, first, n uint32, f kulisch.Format) error {
	idx := first % o.ring
	if idx+n > o.ring {
		k := o.ring - idx
		w, err := o.bank.PutValues(dst, int(idx), int(k), f)
		if err != nil {
			return err
		}
		dst, idx, n = dst[w:], 0, n-k
	}
	_, err := o.bank.PutValues(dst, int(idx), int(n), f)
	return err
}

// encode builds one frame of [first, first+count) into ob's replay buffer,
// sends it and returns it: the groups of o.sgroups (scaled), of an AUTO
// plan (groups), or one group of o.emitFmt.
func (o *op) encode(now int64, ob *outbound, first, count uint32, groups []kulisch.Group, scaled bool, tx dataplane.Sender) ([]byte, error) {
	buf, pid, ok := ob.sw.Reserve(now, first, count, ob.sw.FrameSize())
	if !ok {
		return nil, errNoCredit
	}
	var flags uint8
	if first+count == o.spec.VectorLen {
		flags = parser.FlagLast
	}
	if o.pushed && first+count == o.frontier {
		flags |= parser.FlagPush
	}
	h := parser.DataFields{
		Eth:   parser.Eth{Dst: ob.b.PeerMAC, Src: tx.PortMAC(ob.b.Port)},
		Class: o.emitClass, Op: o.spec.Op, SrcEP: ob.b.LocalEP, DstEP: ob.b.PeerEP,
		PacketID: pid, First: first, Flags: flags, Stream: ob.b.Stream,
	}
	b := &o.e.b
	if err := b.Reset(buf, &h, nil, o.spec.MTU); err != nil {
		return nil, err
	}
	var formats uint16 // bit f: the frame carries a group of format f
	if scaled {
		at := first
		for _, g := range o.sgroups {
			if err := o.addScaledGroup(b, g, at); err != nil {
				return nil, err
			}
			at += uint32(g.Count)
			if g.Bytes == 0 {
				formats |= 1 << kulisch.KULISCH
			} else {
				formats |= 1 << kulisch.KULISCH_SCALED
			}
		}
	} else if groups == nil {
		if err := o.addGroup(b, o.emitFmt, first, count); err != nil {
			return nil, err
		}
		formats = 1 << o.emitFmt
	} else {
		at := first
		for _, g := range groups {
			if err := o.addGroup(b, g.Format, at, uint32(g.Count)); err != nil {
				return nil, err
			}
			at += uint32(g.Count)
			formats |= 1 << g.Format
		}
	}
	fr := ob.sw.Commit(now, len(b.Finish()))
	o.e.sendReplay(tx, ob.b.Port, fr)
	o.e.t.sentFrame(o.emitClass)
	o.e.t.countFormats(formats)
	return fr, nil
}

func (o *op) addGroup(b *parser.DataBuilder, f kulisch.Format, first, count uint32) error {
	kb := 0
	if f == kulisch.KULISCH {
		kb = o.w / 8
	}
	slot, err := b.AddGroup(parser.Format(f), kb, int(count))
	if err != nil {
		return err
	}
	return o.putValues(slot, first, count, f)
}

// addScaledGroup encodes one planned group: KULISCH_SCALED, or plain
// KULISCH where the planner found that no larger (Bytes 0).
func (o *op) addScaledGroup(b *parser.DataBuilder, g kulisch.ScaledGroup, first uint32) error {
	if g.Bytes == 0 {
		return o.addGroup(b, kulisch.KULISCH, first, uint32(g.Count))
	}
	slot, err := b.AddScaledGroup(g.Bytes, g.Shift, g.Count)
	if err != nil {
		return err
	}
	idx, n := first%o.ring, uint32(g.Count)
	if idx+n > o.ring {
		k := o.ring - idx
		if err := o.kv.PutScaled(slot, int(idx), int(k), g.Shift, g.Bytes); err != nil {
			return err
		}
		slot, idx, n = slot[int(k)*(1+g.Bytes):], 0, n-k
	}
	return o.kv.PutScaled(slot, int(idx), int(n), g.Shift, g.Bytes)
}

// planScaled plans the next frame of scaled groups into o.sgroups and
// returns how many of the avail completed elements it carries.
func (o *op) planScaled(avail uint32, budget int) (uint32, error) {
	n := min(avail, uint32(len(o.spans)))
	if err := o.fillSpans(o.emitted, n); err != nil {
		return 0, err
	}
	// A short frame held back waits for more values: the same run, grown.
	plan := o.planner.Plan
	if o.planAt == o.emitted {
		plan = o.planner.Extend
	}
	o.planAt = o.emitted
	o.scaledPlans++
	gs, used, err := plan(o.sgroups[:0], o.spans[:n], o.w, budget)
	if err == nil && used == 0 {
		err = errNoProgress
	}
	o.sgroups = gs
	return uint32(used), err
}

func autoHasKulisch(gs []kulisch.Group) bool {
	for _, g := range gs {
		if g.Format == kulisch.KULISCH {
			return true
		}
	}
	return false
}

func autoBytes(gs []kulisch.Group, w int) int {
	n := 0
	for _, g := range gs {
		n += kulisch.GroupBytes(g.Format, g.Count, w)
	}
	return n
}

func scaledBytes(gs []kulisch.ScaledGroup, w int) int {
	n := 0
	for _, g := range gs {
		if g.Bytes == 0 {
			n += kulisch.GroupBytes(kulisch.KULISCH, g.Count, w)
		} else {
			n += kulisch.ScaledGroupBytes(g.Count, g.Bytes)
		}
	}
	return n
}

// fillSpans makes o.spans[:n] the extents of positions [first, first+n),
// keeping those already computed (first never moves backwards: it is the
// emission point).
func (o *op) fillSpans(first, n uint32) error {
	if k := first - o.spanAt; first >= o.spanAt && int(k) <= o.spanN {
		o.spanN = copy(o.spans, o.spans[k:o.spanN])
	} else {
		o.spanN = 0
	}
	o.spanAt = first
	for uint32(o.spanN) < n {
		at := first + uint32(o.spanN)
		idx := at % o.ring
		c := min(n-uint32(o.spanN), o.ring-idx) // up to the ring's end
		if err := o.kv.Spans(int(idx), o.spans[o.spanN:o.spanN+int(c)]); err != nil {
			return err
		}
		o.spanN += int(c)
	}
	return nil
}

// encodeFailed handles an error from rounding or encoding a completed
// range: a value that has no exact representation (Kulisch overflow, INT8
// output not integral or out of range) ends the operation with
// ACCUMULATION_INEXACT; anything else is an internal failure.
func (o *op) encodeFailed(now int64, err error, tx dataplane.Sender) {
	if err == nil || errors.Is(err, kulisch.ErrOverflow) || errors.Is(err, kulisch.ErrNotInt8) || errors.Is(err, kulisch.ErrNotLossless) {
		o.goInexact(now, tx)
		return
	}
	o.fail(now, parser.FailInternal, 0xFFFF, o.emitted, fmt.Errorf("encoding elements from %d: %w", o.emitted, err), tx)
}

// goInexact ends the arithmetic: the exact value cannot be represented in
// the configured width or output format. The terminal frame replaces every
// further value.
func (o *op) goInexact(now int64, tx dataplane.Sender) {
	if o.inexact {
		return
	}
	o.inexact = true
	o.err = errInexact
	o.e.m.OpsInexact.Add(1)
	o.e.log.Warn("prism operation accumulation inexact", "op", opName(o.spec.Op), "role", o.spec.Role.String(),
		"emitted", o.emitted)
	o.terminalPending = !o.sendTerminal(now, o.emitOut, o.emitClass, tx)
}

// sendTerminal queues the ACCUMULATION_INEXACT frame (LAST, no groups) on
// every binding of outs; false when credits do not allow it yet (Tick
// retries).
func (o *op) sendTerminal(now int64, outs []*outbound, class parser.Class, tx dataplane.Sender) bool {
	for _, ob := range outs {
		if !ob.sw.CanSend(now, 0, 0, parser.DataBodyOff) {
			return false
		}
	}
	for _, ob := range outs {
		buf, pid, _ := ob.sw.Reserve(now, 0, 0, parser.DataBodyOff)
		h := parser.DataFields{
			Eth:   parser.Eth{Dst: ob.b.PeerMAC, Src: tx.PortMAC(ob.b.Port)},
			Class: class, Op: o.spec.Op, SrcEP: ob.b.LocalEP, DstEP: ob.b.PeerEP,
			PacketID: pid, Flags: parser.FlagLast | parser.FlagInexact, Stream: ob.b.Stream,
		}
		b := &o.e.b
		if b.Reset(buf, &h, nil, o.spec.MTU) != nil {
			continue
		}
		fr := b.Finish()
		o.e.sendReplay(tx, ob.b.Port, ob.sw.Commit(now, len(fr)))
		o.e.t.sentFrame(class)
	}
	return true
}

func (o *op) handleProgress(now int64, in int, frame []byte, p *parser.Progress, tx dataplane.Sender) {
	m := o.e.m
	var ob *outbound
	if p.Flags&parser.ProgressFlagResult != 0 {
		for i := range o.outs {
			if o.outs[i].b.Stream == p.Stream {
				ob = &o.outs[i]
				break
			}
		}
	} else if o.parent != nil && o.parent.b.Stream == p.Stream {
		ob = o.parent
	}
	if ob == nil {
		m.drop(DropUnknownStream)
		return
	}
	if !o.checkPeer(&ob.b, in, frame, p.SrcEP, p.DstEP) {
		return
	}
	if p.Status == parser.ProgressStatusFailed || p.Status == parser.ProgressStatusUnknownOperation || p.Status == parser.ProgressStatusInvalid {
		o.e.t.frame(parser.ClassProgress)
		// The receiver of this transfer has given up on the operation
		// (its context FAILED), no longer has it, or refused one of our
		// frames as invalid (it can never take that range from us):
		// nothing sent on it can complete, so fail now, naming it,
		// rather than when the stream's own timer gives up.
		// The peer that refused or lost the operation is where the
		// failure began; a FAILED peer passes on where it began there.
		what, oc, oh := "FAILED", parser.FailPeer, uint8(0)
		switch p.Status {
		case parser.ProgressStatusFailed:
			oc, oh = p.FailCause, 0
			if oc != parser.FailNone {
				oh = p.FailHops
				if oh < 255 {
					oh++
				}
				what = "FAILED (the failure began " + hopsText(p.FailHops) + ": " + oc.String() + ")"
			}
		case parser.ProgressStatusUnknownOperation:
			what = "UNKNOWN_OPERATION"
		case parser.ProgressStatusInvalid:
			what = "INVALID for packet " + itoa(int(p.PacketID))
		}
		o.failAt(now, parser.FailPeer, oc, oh, ob.b.Stream, ob.sw.Committed(), fmt.Errorf("%s stream %d: peer %s answered %s", ob.b.Kind, ob.b.Stream,
			mac(ob.b.PeerMAC), what), tx)
		return
	}
	switch ob.sw.ApplyProgress(now, p, &o.e.holes) {
	case stream.Stale:
		m.drop(DropStaleProgress)
		return
	case stream.Ahead:
		m.drop(DropProgressAhead)
		return
	}
	o.e.t.frame(parser.ClassProgress)
	o.retransmit(now, ob, tx)
	if o.state != parser.StateActive {
		return
	}
	if ob == o.parent || o.result == nil {
		o.emit(now, tx)
	}
	if o.result != nil && ob != o.parent && o.relayRoomGrew() {
		o.sendProgress(now, o.result, 0, parser.ProgressStatusOK, tx) // relay room again
	}
	o.checkDone(now)
}

// relayRoomGrew reports whether the result path in is owed a window update
// now that an output acknowledged frames: it was told there was no room, or
// the room grew by a quarter of the replay window since the last PROGRESS.
// Without the second case a parent that was granted a few intervals while
// the outputs were busy would use them and then wait for each ACK, one small
// grant at a time.
func (o *op) relayRoomGrew() bool {
	ib := o.result
	if ib.advZero {
		return true
	}
	room, _ := o.relayCredits(ib.rw.Credits())
	return room-ib.advCI >= max(4, ib.rw.Intervals()/4)
}

// relayCredits bounds the result path's own credits (ci, cb) by the room of
// every RESULT_OUT. A relay copies each accepted RESULT onto every output,
// so it promises upstream no more than its fullest output can take:
// advertising its own receive window instead let the parent send frames
// the relay then refused (NO_CREDIT) and resent on timeout (measured: 5177
// refusals and 5526 resends in a 1M spine-leaf ALLREDUCE, 2.9x the vector
// on one spine link).
func (o *op) relayCredits(ci int, cb uint32) (int, uint32) {
	for i := range o.outs {
		fr, by := o.outs[i].sw.Room()
		ci = min(ci, fr)
		if by >= 0 {
			cb = min(cb, uint32(by))
		}
	}
	return ci, cb
}

func (o *op) retransmit(now int64, ob *outbound, tx dataplane.Sender) {
	for {
		f, ok := ob.sw.NextRetransmit(now)
		if !ok {
			return
		}
		h := parser.DataHeader(f[parser.HdrOff:parser.DataBodyOff])
		h.SetFlags(h.Flags() | parser.FlagRetransmit)
		o.e.sendReplay(tx, ob.b.Port, f)
		o.e.m.Retransmits.Add(1)
	}
}

// oweProgress acknowledges an accepted frame: at once, or at the end of the
// batch when the engine coalesces (the newest state then covers every frame
// of the batch).
func (o *op) oweProgress(now int64, ib *inbound, pid uint32, tx dataplane.Sender) {
	e := o.e
	if !e.cfg.CoalesceProgress {
		o.sendProgress(now, ib, pid, parser.ProgressStatusOK, tx)
		return
	}
	ib.owedPID = pid
	if ib.owed {
		return
	}
	if e.nOwed == len(e.owed) {
		o.sendProgress(now, ib, pid, parser.ProgressStatusOK, tx)
		return
	}
	ib.owed = true
	e.owed[e.nOwed] = owedProgress{o: o, ib: ib}
	e.nOwed++
}

// sendProgress reports ib's receive state to its peer, out of its port.
func (o *op) sendProgress(now int64, ib *inbound, pid uint32, st parser.ProgressStatus, tx dataplane.Sender) {
	e := o.e
	p := &e.pout
	if pid == 0 && ib.owed && st == parser.ProgressStatusOK {
		// A window update or keepalive that replaces the PROGRESS owed to
		// an accepted frame still names that frame: the sender times its
		// round trip and what the peer holds by it (7).
		pid = ib.owedPID
	}
	ci, cb := ib.rw.Credits()
	var flags uint8
	if ib == o.result {
		flags |= parser.ProgressFlagResult
		ci, cb = o.relayCredits(ci, cb)
	}
	if ib.rw.Done() {
		flags |= parser.ProgressFlagComplete
	}
	nh := ib.rw.Holes(e.holes[:])
	// Field by field: a composite literal zeroed the 32 holes and the
	// error field too, a sixth of this function's samples; Encode reads the
	// first NHoles holes only.
	p.Op, p.SrcEP, p.DstEP, p.Stream, p.PacketID = o.spec.Op, ib.b.LocalEP, ib.b.PeerEP, ib.b.Stream, pid
	p.Committed, p.IntervalCredits, p.ByteCredits = ib.rw.Committed(), uint16(min(ci, 0xFFFF)), cb
	p.Status, p.Flags, p.NHoles = st, flags, nh
	p.FailCause, p.FailHops = parser.FailNone, 0
	if st == parser.ProgressStatusFailed {
		p.FailCause, p.FailHops = o.originCause, o.originHops
	}
	for i := 0; i < nh; i++ {
		p.Holes[i] = parser.Hole(e.holes[i])
	}
	n, err := p.Encode(e.pbuf[:], parser.Eth{Dst: ib.b.PeerMAC, Src: tx.PortMAC(ib.b.Port)})
	if err != nil {
		return
	}
	// A refused frame is owed a window update even when the window itself
	// has credit (a relay refuses for its outputs' sake): without it the
	// sender would wait for its retransmission timer.
	ib.advZero = ci == 0 || st == parser.ProgressStatusNoCredit
	ib.advCI = ci
	ib.owed = false // this one carries the newest state too
	ib.progressAt = now
	e.send(tx, ib.b.Port, e.pbuf[:n])
	e.m.ProgressSent.Add(1)
}

// checkDone moves an active context to COMPLETE once every input is
// covered, every output handed on and acknowledged.
func (o *op) checkDone(now int64) {
	if o.state != parser.StateActive {
		return
	}
	for i := range o.emitOut {
		if !o.emitOut[i].sw.Idle() {
			return
		}
	}
	if !o.inexact {
		for i := range o.in {
			if !o.in[i].rw.Done() {
				return
			}
		}
		if o.emitted != o.spec.VectorLen {
			return
		}
	} else if o.terminalPending {
		return
	}
	if o.result != nil {
		if !o.result.armed {
			o.result.armed, o.result.lastActive = true, now
		}
		if (!o.result.rw.Done() && !o.resultInexact) || o.relayPending {
			return
		}
		for i := range o.outs {
			if !o.outs[i].sw.Idle() {
				return
			}
		}
	}
	o.state = parser.StateComplete
	o.doneAt = now
	o.e.m.OpsCompleted.Add(1)
}

// fail moves an active context to FAILED: cause, and the stream it failed
// on with that stream's first missing element, are what COMPLETE reports;
// then it tells every peer (announceFailure).
func (o *op) fail(now int64, cause parser.FailCause, stream uint16, from uint32, err error, tx dataplane.Sender) {
	o.failAt(now, cause, cause, 0, stream, from, err, tx)
}

// failAt is fail for a failure that began elsewhere: origin is the cause
// where it began, hops how many FAILED announcements it crossed to get
// here (section 7, Failure Cause and Failure Hops).
func (o *op) failAt(now int64, cause, origin parser.FailCause, hops uint8, stream uint16, from uint32, err error, tx dataplane.Sender) {
	if o.state != parser.StateActive {
		return
	}
	o.state = parser.StateFailed
	o.err = err
	o.failedAt = now
	o.failCause, o.failStream, o.failFrom = cause, stream, from
	o.originCause, o.originHops = origin, hops
	o.e.m.OpsFailed.Add(1)
	if int(cause) < len(o.e.m.FailedBy) {
		o.e.m.FailedBy[cause].Add(1)
	}
	o.announceLeft = failAnnouncements
	o.announceFailure(now, tx)
	// The log line waits for the next Tick (logFailure): written here, on
	// a busy host, it held the first announcement back in the batch for
	// milliseconds while the second kept its time, and the two reached the
	// wire 6 ms apart instead of failAnnounceGap.
	o.failLogPending = true
}

// failTimeout fails the context on stream b's timeout, from element from.
// When b's port is down (set down, or without carrier) the cause is
// LINK_DOWN and err says so: the peer may well be alive, its frames
// cannot get here, and the AM then blames the link instead of the peer.
// Asked only now, never per frame.
func (o *op) failTimeout(now int64, b *Binding, from uint32, err error, tx dataplane.Sender) {
	cause := parser.FailTimeout
	if b.Kind == parser.KindParent || b.Kind == parser.KindResultOut {
		// The receiver that stopped acknowledging, as an inbound
		// timeout names its sender: by endpoint, MAC and port, the
		// only names a switch has for the host to look at.
		err = fmt.Errorf("%w (peer endpoint %d, MAC %s, port %d)", err, b.PeerEP, net.HardwareAddr(b.PeerMAC[:]), b.Port)
	}
	if lr, ok := tx.(dataplane.LinkReporter); ok {
		if name, s, since := lr.PortLink(int(b.Port)); s != dataplane.LinkUp {
			cause = parser.FailLinkDown
			d := ""
			if !since.IsZero() {
				d = fmt.Sprintf(" for %s", time.Since(since).Round(time.Millisecond))
			}
			err = fmt.Errorf("%w; port %s toward it has been %s%s", err, name, s, d)
		}
	}
	o.fail(now, cause, b.Stream, from, err, tx)
}

// cutOff reports whether the port of stream b is down (set down, or
// without carrier). A switch peer's longer bound (tick) is there to let
// the node next to a silent rank fail first and name it; a peer behind a
// dead link can tell this node nothing, so it gets the plain Timeout, and
// the nodes on this side hear of the failure (and their ranks with them)
// before a rank's own RESULT bound, Timeout + 1 s, fires without a cause.
// Asked only once a stream has been silent for a whole Timeout.
func (o *op) cutOff(b *Binding, tx dataplane.Sender) bool {
	lr, ok := tx.(dataplane.LinkReporter)
	if !ok {
		return false
	}
	_, s, _ := lr.PortLink(int(b.Port))
	return s != dataplane.LinkUp
}

// excuse moves o's inactivity clocks on by gap (never past now):
// Engine.excuse. Every clock, not only those set before the last Tick:
// frames handled after it and before the process stopped set theirs too.
func (o *op) excuse(gap, now int64) {
	move := func(c *int64) {
		if *c != 0 {
			*c = min(*c+gap, now)
		}
	}
	for i := range o.in {
		move(&o.in[i].lastActive)
		move(&o.in[i].heldSince)
	}
	if o.result != nil {
		move(&o.result.lastActive)
	}
	move(&o.owedSince)
	if o.parent != nil {
		o.parent.sw.Excuse(gap, now)
	}
	for i := range o.outs {
		o.outs[i].sw.Excuse(gap, now)
	}
}

// logFailure logs a failure fail recorded, once.
func (o *op) logFailure() {
	if !o.failLogPending {
		return
	}
	o.failLogPending = false
	o.e.log.Error("prism operation failed", "op", opName(o.spec.Op), "role", o.spec.Role.String(),
		"cause", o.failCause.String(), "err", o.err.Error())
}

// failAnnouncements and failAnnounceGap: a FAILED context tells its peers
// three times, failAnnounceGap apart, so that one lost frame does not
// leave a peer waiting for its own timeout (at 1% loss all three are lost
// once in a million failures).
const (
	failAnnouncements = 3
	failAnnounceGap   = int64(10 * time.Millisecond)
)

// announceFailure sends PROGRESS status FAILED to the peer of every stream
// this context receives: each contributor (on its DATA stream, as any
// PROGRESS) and the sender of the result path in (flag RESULT). A rank
// that has sent everything and waits for its RESULT, or a switch whose
// subtree is complete, hears nothing else from a failed context; without
// this it would wait for its own timeout, so a failure took a timeout per
// level of the tree to reach every rank. A receiver treats it as any
// FAILED answer (section 7): a switch fails its own context at once, and
// so announces in turn; a rank ends the operation with an error. Only
// bound peers are sent to, at their bound MACs and ports.
func (o *op) announceFailure(now int64, tx dataplane.Sender) {
	if o.announceLeft <= 0 || (o.announcedAt != 0 && now-o.announcedAt < failAnnounceGap) {
		return
	}
	o.announceLeft--
	o.announcedAt = now
	o.tellFailed(now, tx)
}

// untouched reports that o never accepted a DATA or RESULT frame on any
// stream.
func (o *op) untouched() bool {
	for i := range o.in {
		if o.in[i].heard {
			return false
		}
	}
	return o.result == nil || !o.result.heard
}

// tellFailed sends PROGRESS FAILED to the peer of every stream o receives:
// each contributor and the sender of the result path in (flag RESULT).
func (o *op) tellFailed(now int64, tx dataplane.Sender) {
	for i := range o.in {
		o.sendProgress(now, &o.in[i], 0, parser.ProgressStatusFailed, tx)
	}
	if o.result != nil {
		o.sendProgress(now, o.result, 0, parser.ProgressStatusFailed, tx)
	}
}

func (o *op) tick(now int64, tx dataplane.Sender) {
	if o.parent != nil {
		o.retransmit(now, o.parent, tx)
	}
	for i := range o.outs {
		o.retransmit(now, &o.outs[i], tx)
	}
	if o.state != parser.StateActive {
		return
	}
	if o.terminalPending {
		o.terminalPending = !o.sendTerminal(now, o.emitOut, o.emitClass, tx)
	}
	if o.relayPending {
		o.relayPending = !o.sendTerminal(now, o.relayOut, parser.ClassResult, tx)
	}
	timeout := int64(o.spec.Timeout)
	// A switch peer (a subtree's contributor stream, the result path in)
	// is given a quarter more: when a rank goes silent, its leaf and every
	// switch above it see silence from about the same moment, and the leaf
	// must fail first, since its TIMEOUT names the rank (and its
	// announcement then fails the others as PEER_FAILED before their own
	// timers fire). Otherwise whichever timer fired first decided what the
	// AM could name.
	switchTimeout := timeout + timeout/4
	for i := range o.in {
		ib := &o.in[i]
		if ib.rw.Done() || o.inexact {
			continue
		}
		limit := timeout
		if !ib.b.Rank {
			limit = switchTimeout
		}
		idle := now - ib.lastActive
		if ib.paused() {
			// A persistent collective between invocations: resting at its
			// PUSH boundary is the application's pace, not a failure,
			// until another contributor has gone past it and waits
			// (advance starts that clock).
			if ib.heldSince == 0 {
				continue
			}
			idle = now - max(ib.lastActive, ib.heldSince)
		}
		if idle > limit || limit > timeout && idle > timeout && o.cutOff(&ib.b, tx) {
			o.failTimeout(now, &ib.b, ib.rw.Committed(), o.timeoutErr(now, ib), tx)
			return
		}
	}
	if r := o.result; r != nil && r.armed && !r.rw.Done() && !o.resultInexact &&
		(now-r.lastActive > switchTimeout || now-r.lastActive > timeout && o.cutOff(&r.b, tx)) {
		o.failTimeout(now, &r.b, r.rw.Committed(), o.timeoutErr(now, r), tx)
		return
	}
	if r := o.result; r != nil && !r.armed && !o.resultInexact {
		// Before every input is in (the clock above), a RESULT is owed
		// for what this node already handed on. A persistent
		// collective's node never got there (its vector is every
		// invocation's), so a leaf that had sent an invocation's
		// partials to a parent that then died waited for ever, resting,
		// and its ranks were never told. Half a Timeout more than a
		// switch peer's: a slow or silent peer elsewhere is timed out,
		// and named, by the node next to it first, whose announcement
		// then reaches this one.
		if o.emitted > r.rw.Committed() {
			if o.owedSince == 0 {
				o.owedSince = now
			}
			if idle := now - max(o.owedSince, r.lastActive); idle > switchTimeout+timeout/4 || idle > timeout && o.cutOff(&r.b, tx) {
				// Missing what it handed on: the rest is not owed yet.
				err := o.silentErr(r, o.emitted, now-max(o.owedSince, r.lastActive))
				o.failTimeout(now, &r.b, r.rw.Committed(), err, tx)
				return
			}
		} else {
			o.owedSince = 0
		}
	}
	if o.parent != nil {
		if err := o.parent.sw.Check(now); err != nil {
			o.failTimeout(now, &o.parent.b, o.parent.sw.Committed(), err, tx)
			return
		}
	}
	for i := range o.outs {
		if err := o.outs[i].sw.Check(now); err != nil {
			o.failTimeout(now, &o.outs[i].b, o.outs[i].sw.Committed(), err, tx)
			return
		}
	}
	o.keepAlive(now, timeout/4, tx)
	o.emit(now, tx)
	o.checkDone(now)
}

// keepAlive sends a timer-driven PROGRESS (Packet ID 0) on every incomplete
// stream this context receives that heard none for every: the receiver's
// side of docs/protocol.md section 7, at least one per Timeout/4 while a
// stream is incomplete. It tells a sender whose window is shut (waiting for
// another contributor, say) that the receiver lives and what room it has,
// should the window update that opened it have been lost. A stream resting
// at a PUSH boundary (a persistent collective between invocations) is not
// incomplete: it gets nothing until its sender moves.
func (o *op) keepAlive(now, every int64, tx dataplane.Sender) {
	for i := range o.in {
		ib := &o.in[i]
		if !ib.rw.Done() && !ib.paused() && now-ib.progressAt >= every {
			o.sendProgress(now, ib, 0, parser.ProgressStatusOK, tx)
		}
	}
	if r := o.result; r != nil && r.armed && !r.rw.Done() && !r.paused() && now-r.progressAt >= every {
		o.sendProgress(now, r, 0, parser.ProgressStatusOK, tx)
	}
}

func (o *op) timeoutErr(now int64, ib *inbound) error {
	return o.silentErr(ib, o.spec.VectorLen, now-max(ib.lastActive, ib.heldSince))
}

// silentErr is ib's timeout error: silent for idle, missing from its
// watermark to element to.
func (o *op) silentErr(ib *inbound, to uint32, idle int64) error {
	return &ContributorTimeoutError{Op: o.spec.Op, Kind: ib.b.Kind, Stream: ib.b.Stream, PeerEP: ib.b.PeerEP,
		PeerMAC: ib.b.PeerMAC, Port: ib.b.Port, From: ib.rw.Committed(), To: to, Idle: time.Duration(idle)}
}

// errInexact is the Status.Err of an operation whose sum was not
// representable.
var errInexact = errors.New("engine: accumulation inexact")

// errNoProgress: a plan carried no value although values were complete
// (cannot happen: every value fits an empty frame).
var errNoProgress = errors.New("engine: encoding plan carries no value")

// errNoCredit cannot escape emit: it checks credits before encoding.
var errNoCredit = errors.New("engine: no send credit")

// hopsText says where a failure that crossed hops FAILED announcements
// before reaching the sender began, seen from that sender.
func hopsText(hops uint8) string {
	switch hops {
	case 0:
		return "at that peer"
	case 1:
		return "1 hop beyond it"
	}
	return itoa(int(hops)) + " hops beyond it"
}

// This file owns one collective on the rank: the barrier request, the DATA
// sender (stream.SendWindow), the RESULT receiver (stream.RecvWindow) with
// its PROGRESS answers, and the completion report.

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// tick is how often the event loop looks at retransmission timers and
// deadlines while collectives run and no frame arrives: a quarter of
// stream.DefaultRTO.
const tick = 5 * time.Millisecond

// rankRTO is the least DATA retransmission timeout of a rank, twice the
// stream default: a leaf shares its cores with other switches and ranks
// and often answers a window's first frame only after tens of
// milliseconds. A timeout resends one frame (a probe), so a spurious one
// costs a duplicate, not a window.
const rankRTO = int64(40 * time.Millisecond)

// opRun is one collective on the rank. Everything but the fields marked
// otherwise belongs to the Comm's event loop.
type opRun struct {
	c     *Comm
	g     *am.Grant
	key   parser.OpKey
	send  elems
	recv  elems
	width int
	mtu   int

	leafMAC [6]byte
	sw      *stream.SendWindow
	rw      *stream.RecvWindow

	state opState
	next  uint32 // next element to send
	// base and limit bound the invocation running: [0, VectorLen) for an
	// ordinary collective; [i*n, (i+1)*n) for invocation i of a persistent
	// one, whose last DATA frame carries PUSH (protocol section 6.1).
	base, limit uint32
	persistent  bool
	n           uint32 // persistent: elements per invocation
	// startReq is set (to the invocation's index + 1) by the goroutine
	// of Persistent.Start and taken by the loop, which then runs it.
	startReq atomic.Uint32
	// completed is how many invocations of a persistent operation ended
	// exact on this rank: what its keepalives and its done report tell
	// the AM (am.AliveRequest.Invocations), so that another rank's local
	// failure does not ABORT an invocation this rank is still in.
	completed atomic.Uint32
	// amFailed is set when the AM says, on the presence stream, that it
	// failed the operation (Comm.told): the loop ends a running invocation
	// with it, and a resting persistent operation's next one at its
	// start. A rank waiting for RESULT from a leaf the AM's ABORT left
	// silent learned of the failure only at its RESULT timeout.
	amFailed atomic.Pointer[error]
	// draining: the AM's last answer to a keepalive said the operation
	// drains (another rank failed locally), so each completed invocation
	// is reported at once (aliveNow) instead of at the next keepalive.
	draining atomic.Bool
	aliveNow chan struct{}
	// bufs, stored before startReq, are that invocation's buffers: the
	// loop rebinds send and recv when it starts it (automatic persistence
	// runs each call of a shape over that call's buffers).
	bufs           atomic.Pointer[opBufs]
	lastResult     int64
	resultDeadline int64 // RESULT inactivity bound (ns)
	progressAt     int64 // when the last PROGRESS for RESULT went out
	stallSaid      int64 // when Notify last heard that no RESULT came (stallNotice)
	lastStep       int64 // when step last ran: a gap says this process did not run
	keepEvery      int64 // a quarter of the operation's Timeout: step's keepalive
	lingerFor      int64 // how long to answer late RESULT after success
	lingerUntil    int64
	frames         uint64
	dups           uint64
	wireTx, wireRx uint64 // bytes of this operation's frames sent and received (Stats.WireSent, WireReceived)
	ackPID         uint32 // newest in-order RESULT not yet answered (0: none)
	holes          [parser.MaxHoles]stream.Hole
	// Encoding and decoding scratch, reused by every frame: as locals
	// they would escape to the heap (one allocation per frame).
	b      parser.DataBuilder
	fields parser.DataFields
	maxPer uint32
	pin    parser.Progress
	pout   parser.Progress
	din    parser.Data

	// cancel is set by the collective's goroutine (context cancelled);
	// result carries the outcome to it, once.
	cancel atomic.Pointer[error]
	result chan opResult
}

type opState uint8

const (
	opRunning   opState = iota + 1
	opLingering         // finished; answers late RESULT duplicates until lingerUntil
	opGone              // finished and unregistered
	opPaused            // persistent, between invocations: answers late RESULT duplicates
)

// opResult is the outcome the loop hands to the collective's goroutine,
// with the counters as they were at that moment (the loop keeps running
// the operation while it lingers).
type opResult struct {
	err                       error
	frames, retransmits, dups uint64
	wireTx, wireRx            uint64
}

// finish reports the outcome once.
func (op *opRun) finish(err error) {
	if op.state != opRunning {
		return
	}
	rt, _ := op.sw.Stats()
	op.result <- opResult{err: err, frames: op.frames, retransmits: rt, dups: op.dups, wireTx: op.wireTx, wireRx: op.wireRx}
	op.state = opGone
}

// opBufs are one invocation's buffers.
type opBufs struct{ send, recv elems }

// startInvocation begins the invocation the Persistent asked for.
func (op *opRun) startInvocation(now int64, inv uint32) {
	if b := op.bufs.Swap(nil); b != nil {
		op.send, op.recv = b.send, b.recv
	}
	op.base, op.limit = inv*op.n, (inv+1)*op.n
	op.state = opRunning
	op.lastResult, op.progressAt, op.lastStep = now, now, 0
}

// service runs the operation's sending side once: cancellation, new DATA,
// retransmissions, completion, deadlines; it ends a lingering operation
// whose time is up.
func (op *opRun) service(now int64, tx *txQueue) {
	switch op.state {
	case opLingering:
		if now >= op.lingerUntil {
			op.state = opGone
			op.c.unregister(op)
		}
		return
	case opGone:
		return
	case opPaused:
		inv := op.startReq.Swap(0)
		if p := op.cancel.Load(); p != nil {
			if inv != 0 {
				// Cancelled before the loop took the Start: the Start
				// waits for this invocation's outcome.
				op.state = opRunning
				op.end(*p)
				return
			}
			// Retired by its Persistent while resting: every DATA frame
			// is acknowledged.
			op.c.putSlab(op.sw.Buffer())
			op.state = opGone
			op.c.unregister(op)
			return
		}
		if inv == 0 {
			return
		}
		op.startInvocation(now, inv-1)
	}
	if p := op.cancel.Load(); p != nil {
		op.end(*p)
		return
	}
	done, err := op.step(now, tx)
	if p := op.amFailed.Load(); p != nil && err == nil && !done {
		// (A result complete here stands: the failure is elsewhere.)
		err = *p
	}
	switch {
	case err != nil:
		op.end(op.c.withLink(now, err))
	case done && op.persistent:
		// This invocation is complete; the operation rests (PUSH) until
		// the next one, answering late RESULT duplicates meanwhile.
		op.finish(nil)
		op.state = opPaused
	case done:
		// Every DATA frame is acknowledged and none is sent again (a
		// lingering operation only answers RESULT): the replay buffers
		// can serve the next collective.
		op.c.putSlab(op.sw.Buffer())
		op.finish(nil)
		// Keep answering late RESULT duplicates (our last PROGRESS may
		// have been lost) while the AM completes the operation.
		op.state, op.lingerUntil = opLingering, now+op.lingerFor
		if op.rw == nil {
			op.state = opGone
			op.c.unregister(op)
		}
	}
}

// end fails the operation and forgets it.
func (op *opRun) end(err error) {
	op.finish(err)
	op.state = opGone
	op.c.unregister(op)
}

// input applies one received frame.
func (op *opRun) input(now int64, f []byte, tx *txQueue) {
	switch op.state {
	case opRunning:
		if err := op.handle(now, f, tx); err != nil {
			op.end(err)
		}
	case opLingering, opPaused:
		_ = op.handle(now, f, tx)
	}
}

// await waits for op's outcome; a cancelled ctx ends op (the loop reports
// the cancellation as its outcome).
func (c *Comm) await(ctx context.Context, op *opRun) opResult {
	select {
	case res := <-op.result:
		return res
	case <-ctx.Done():
		err := fmt.Errorf("cancelled: %w", ctx.Err())
		op.cancel.Store(&err)
		c.kick()
		select {
		case res := <-op.result:
			return res
		case <-c.done:
			return c.loopGone(op)
		}
	case <-c.done:
		return c.loopGone(op)
	}
}

// loopGone is op's outcome once the event loop ended: the one it reported
// on the way out, or, for a persistent collective's invocation the loop
// never took (it was resting when the Comm closed), the loop's error.
func (c *Comm) loopGone(op *opRun) opResult {
	select {
	case res := <-op.result:
		return res
	default:
	}
	c.mu.Lock()
	err := c.rxErr
	c.mu.Unlock()
	if err == nil {
		err = ErrClosed
	}
	return opResult{err: err}
}

// checkBuffers checks a collective's buffers and options and views the
// buffers as elements. Every way into a collective (ordinary, automatic
// or explicit persistent) passes here before it talks to the AM.
func (c *Comm) checkBuffers(coll string, send, recv any, root int, o *Options) (sv, rv elems, err error) {
	if o != nil {
		if err = CheckTimeout("Options.Timeout", o.Timeout); err != nil {
			return sv, rv, fmt.Errorf("%w: %w", ErrType, err)
		}
	}
	if sv, err = view(send); err != nil {
		return sv, rv, fmt.Errorf("send: %w", err)
	}
	// An empty send is a valid call (MPI and NCCL: count 0 is a no-op);
	// the caller does nothing with it (Comm.start).
	wantRecv := coll == "allreduce" || c.cfg.Rank == root
	if rv, err = view(recv); err != nil {
		return sv, rv, fmt.Errorf("recv: %w", err)
	}
	out := sv.format
	if o != nil && o.Output != "" {
		f, perr := am.ParseFormat(o.Output)
		if elem := f == parser.FormatINT8 || f == parser.FormatFP16 || f == parser.FormatBF16 || f == parser.FormatFP32; perr != nil || !elem {
			return sv, rv, fmt.Errorf("%w: Options.Output %q: use int8, fp16, bf16 or fp32 (the element type of recv)", ErrType, o.Output)
		}
		out = f
	}
	if wantRecv && rv.n != sv.n {
		return sv, rv, fmt.Errorf("%w: recv must be as long as send (%d elements), got %d", ErrType, sv.n, rv.n)
	}
	if wantRecv && rv.format != out && !(sv.n == 0 && recv == nil) {
		hint := "pass recv of send's type, or set Options.Output on every rank"
		if o != nil && o.Output != "" {
			hint = "pass recv of the Options.Output type"
		}
		return sv, rv, fmt.Errorf("%w: recv holds %v but the RESULT format is %v: %s", ErrType, rv.format, out, hint)
	}
	if wantRecv && partialOverlap(sv.bytes, rv.bytes) {
		return sv, rv, fmt.Errorf("%w: send and recv overlap without being the same slice (send is bytes [%#x, %#x), recv [%#x, %#x)): "+
			"pass recv == send (the same start and length) to reduce in place, or separate buffers",
			ErrType, addr(sv.bytes), addr(sv.bytes)+uintptr(len(sv.bytes)), addr(rv.bytes), addr(rv.bytes)+uintptr(len(rv.bytes)))
	}
	if coll == "reduce" && (root < 0 || root >= c.cfg.Size) {
		return sv, rv, fmt.Errorf("%w: root %d is outside 0..%d", ErrType, root, c.cfg.Size-1)
	}
	// The options as the AM will read them (Acc, Partial, MTU,
	// KulischWidth...): a typo failed only at the AM, after every rank
	// arrived. Which tuples exist is the switches' to say (CAPS): a tuple
	// none supports (FP32_ARRIVAL of FP16) is the AM's 'unsupported'.
	var oo Options
	if o != nil {
		oo = *o
	}
	if sv.n > 0 {
		if err := am.CheckBegin(c.beginRequest(0, coll, sv, root, oo)); err != nil {
			// Checked here, not at an AM: said as this rank's refusal
			// ("am: bad_request" read as the coordinator's). The
			// *am.APIError stays reachable (errors.As; ErrSetup).
			return sv, rv, &optionsError{err: err}
		}
	}
	return sv, rv, nil
}

// CheckTimeout refuses a collective's timeout the begin request cannot
// carry; name is how the caller's user wrote it (Options.Timeout,
// --timeout). Converted to milliseconds unchecked, a negative one wrapped
// around to 4294966296 ms, one under a millisecond became 0 (the AM's
// default) and one over MaxTimeout came back from the AM as a bad_request.
func CheckTimeout(name string, d time.Duration) error {
	const use = "use 1ms..10m (0 = the AM's default, 'prismctl am --timeout-ms')"
	switch {
	case d == 0:
		return nil
	case d < 0:
		return fmt.Errorf("%s %v is negative: %s", name, d, use)
	case d < MinTimeout:
		return fmt.Errorf("%s %v is under a millisecond, the unit the AM counts in: %s", name, d, use)
	case d > MaxTimeout:
		return fmt.Errorf("%s %v is above the AM's limit of %v: %s", name, d, MaxTimeout, use)
	}
	return nil
}

// beginRequest is the rank's request for invocation seq of a collective
// over sv.
func (c *Comm) beginRequest(seq uint64, coll string, sv elems, root int, o Options) am.BeginRequest {
	acc := o.Acc
	if acc == "" {
		acc = "kulisch"
	}
	return am.BeginRequest{Job: c.cfg.Job, Group: c.cfg.Group, Seq: seq, OpID: o.OpID, Rank: c.cfg.Rank, Size: c.cfg.Size,
		Collective: coll, RootRank: root, InputFormat: am.FormatName(sv.format), AccPolicy: acc,
		PartialPolicy: o.Partial, OutputFormat: o.Output, KulischWidth: o.KulischWidth, VectorLen: uint32(sv.n),
		MTU: o.MTU, TimeoutMS: uint32(o.Timeout / time.Millisecond), Node: c.cfg.Node, Iface: c.cfg.NodeIface,
		MAC: net.HardwareAddr(c.mac[:]).String(), Session: c.session, RepeatsPersistent: o.repeatsPersistent}
}

// run runs an ordinary collective over checked buffers as invocation seq.
// mark is set when the call is its shape's first (auto.go): a call that
// gets no grant un-marks it.
func (c *Comm) run(ctx context.Context, seq uint64, coll string, sv, rv elems, root int, o Options, mark *seenMark) (Stats, error) {
	var st Stats
	oe := func(stage string, err error) *OpError {
		return &OpError{Collective: coll, Rank: c.cfg.Rank, Stage: stage, Err: err}
	}
	req := c.beginRequest(seq, coll, sv, root, o)
	t0 := time.Now()
	g, err := c.begin(ctx, req)
	if err != nil {
		c.unsee(mark)
		c.forgetSeenOnMismatch(err)
		return st, oe("begin", err)
	}
	st.Grant = g
	st.Setup = time.Since(t0)
	op, err := newOp(c, g, sv, rv)
	if err != nil {
		return st, oe("begin", err)
	}
	drops0 := c.kernelDrops()
	t1 := time.Now()
	op.lastResult = mono()
	op.progressAt = op.lastResult
	if err := c.register(op); err != nil {
		return st, oe("data", err)
	}
	res := c.await(ctx, op)
	runErr := res.err
	st.Transfer = time.Since(t1)
	st.Frames = res.frames
	st.Retransmits = res.retransmits
	st.ResultDups = res.dups
	st.WireSent, st.WireReceived = res.wireTx, res.wireRx
	st.KernelDrops = c.kernelDrops() - drops0
	if runErr == nil {
		// The result is complete and exact here: the report that lets the
		// AM check every node and RELEASE goes out in the background
		// (report.go), so the rank's next collective does not wait for
		// that HTTP round trip.
		c.report(doneReport{id: g.ID, coll: coll, req: am.DoneRequest{Rank: c.cfg.Rank, OK: true}})
		return st, nil
	}
	e := c.opError(coll, g, runErr)
	c.diagnose(g, e, 0)
	return st, e
}

// opError is the error of a collective that failed after its grant, with
// the element range its cause names.
func (c *Comm) opError(coll string, g *am.Grant, runErr error) *OpError {
	e := &OpError{Collective: coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "data", Err: runErr}
	var se *stream.SilentError
	var re *resultError
	switch {
	case errors.As(runErr, &se):
		e.From, e.To = se.From, se.To
	case errors.As(runErr, &re):
		e.Stage, e.From, e.To = "result", re.from, re.to
	}
	return e
}

// diagnose tells the AM that the operation failed here and waits for its
// diagnosis (which node, which rank), adding it to e. completed is how
// many invocations of a persistent operation completed here before it
// failed (am.DoneRequest.Invocations).
func (c *Comm) diagnose(g *am.Grant, e *OpError, completed uint32) {
	// A cancelled context is this rank's own doing (Ctrl-C, the caller's
	// deadline): said so, the AM names this rank rather than whichever
	// healthy stream the waiting switches were least advanced on.
	local := errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded)
	report := am.DoneRequest{Rank: c.cfg.Rank, OK: false, Error: e.Err.Error(), Local: local, TimedOut: errors.Is(e.Err, ErrTimeout),
		Inexact: errors.Is(e.Err, ErrInexact), Invocations: completed}
	// Report first without waiting, on a short deadline: a rank whose
	// runtime channel crosses the switch that failed (a dead leaf) cannot
	// reach the AM at all, and waited out the whole diagnosis bound below
	// (20 s for a 5 s timeout) in silence before saying so.
	pctx, pcancel := context.WithTimeout(context.Background(), diagnoseReach)
	_, perr := c.client.Done(pctx, g.ID, report)
	pcancel()
	if perr != nil && (errors.Is(perr, context.DeadlineExceeded) || errors.Is(perr, am.ErrUnreachable)) {
		e.Diagnosis = fmt.Sprintf("the AM did not answer within %v: it may be unreachable from this host (the failure may be on the way to it); "+
			"'prismctl show am' from another host shows the operation", diagnoseReach)
		return
	}
	// The AM heard the report (a repeated one is ignored); now wait for its
	// verdict, which a rollback through a dead switch stretches.
	timeout := time.Duration(g.TimeoutMS) * time.Millisecond
	dctx, cancel := context.WithTimeout(context.Background(), timeout+15*time.Second)
	report.Wait = true
	s, derr := c.client.Done(dctx, g.ID, report)
	cancel()
	if derr == nil && s.Error != nil {
		e.Diagnosis, e.amFailure = s.Error.Message, s.Error
	} else if errors.Is(derr, context.DeadlineExceeded) {
		// Either the AM cannot be reached from here (a rank's HTTP crosses
		// the switches: under a dead leaf it is cut off too) or its
		// verdict still waits for a rollback a dead switch stretches.
		e.Diagnosis = fmt.Sprintf("no answer from the AM within %v: it may be unreachable from this host (the failure may be on the way to it) "+
			"or still rolling back; 'prismctl show am' from another host shows the operation", timeout+15*time.Second)
	} else if derr != nil {
		e.Diagnosis = "could not report the failure: " + derr.Error()
	}
}

// diagnoseReach bounds how long a failed rank tries to reach the AM before
// it gives up on a diagnosis.
const diagnoseReach = 3 * time.Second

// newOp builds a granted collective's state: its windows, timers and DATA
// header. The operation starts when it is registered with the Comm.
func newOp(c *Comm, g *am.Grant, sv, rv elems) (*opRun, error) {
	op := &opRun{c: c, g: g, state: opRunning, result: make(chan opResult, 1), send: sv, recv: rv,
		width: sv.format.Width(0), mtu: g.MTU,
		key: parser.OpKey{Job: g.Op.Job, Group: g.Op.Group, GroupGen: g.Op.GroupGen, Op: g.Op.OpID, OpGen: g.Op.OpGen}}
	mac, err := net.ParseMAC(g.LeafMAC)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("grant has a bad leaf MAC %q", g.LeafMAC)
	}
	copy(op.leafMAC[:], mac)
	timeout := time.Duration(g.TimeoutMS) * time.Millisecond
	op.sw = stream.NewSendWindow(stream.SendConfig{
		Name:        fmt.Sprintf("op %s rank %d DATA stream %d to %s", g.ID, g.Rank, g.Data.StreamID, g.Leaf),
		ReplayDepth: int(g.Window.ReplayDepth), FrameSize: parser.EthLen + g.MTU,
		Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
		Deadline: int64(timeout),
		RTO:      rankRTO, MaxRTO: 10 * rankRTO,
		Buffer: c.takeSlab(int(g.Window.ReplayDepth) * (parser.EthLen + g.MTU)),
	})
	if g.Result != nil {
		op.rw = stream.NewRecvWindow(stream.RecvConfig{
			Name: fmt.Sprintf("op %s rank %d RESULT path %d", g.ID, g.Rank, g.Result.StreamID), VectorLen: g.VectorLen,
			Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
			MaxFrame: parser.EthLen + g.MTU,
		})
	}
	// The RESULT inactivity bound: the switches' own contributor timeout
	// plus a margin, so the AM's diagnosis already sees the failed node.
	op.resultDeadline = int64(timeout) + int64(time.Second)
	op.keepEvery = int64(timeout) / 4
	op.lingerFor = int64(timeout)
	op.limit = g.VectorLen
	if g.Persistent {
		op.persistent, op.state, op.limit = true, opPaused, 0
	}
	op.initData()
	return op, nil
}

// resultError is a RESULT-side failure with the missing range.
type resultError struct {
	from, to uint32
	err      error
}

func (e *resultError) Error() string { return e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

// initData prepares the DATA header every frame of the operation shares.
func (op *opRun) initData() {
	g := op.g
	op.maxPer = uint32(parser.MaxPacketElements(op.mtu) / op.width)
	if op.maxPer > 0xFFFF {
		op.maxPer = 0xFFFF
	}
	op.fields = parser.DataFields{Eth: parser.Eth{Dst: op.leafMAC, Src: op.c.mac}, Class: parser.ClassData, Op: op.key,
		SrcEP: g.Data.SrcEndpoint, DstEP: g.Data.DstEndpoint, Stream: g.Data.StreamID}
}

// A call whose RESULT stalls tells Config.Notify after stallNotice, then
// every stallNoticeEvery, when its Timeout leaves room for that (at least
// twice stallNotice). Variables for tests.
var (
	stallNotice      = int64(5 * time.Second)
	stallNoticeEvery = int64(15 * time.Second)
)

// step sends what the window admits (new DATA, then retransmissions),
// then checks completion and the deadlines. It allocates nothing.
func (op *opRun) step(now int64, tx *txQueue) (done bool, err error) {
	g := op.g
	if err := op.sendData(now, tx); err != nil {
		return false, err
	}
	for {
		f, ok := op.sw.NextRetransmit(now)
		if !ok {
			break
		}
		f[parser.HdrOff+33] |= parser.FlagRetransmit
		op.wireTx += uint64(len(f))
		if err := tx.add(f); err != nil {
			return false, err
		}
	}
	dataDone := op.next == op.limit && op.sw.Idle()
	resDone := op.rw == nil || op.rw.Committed() >= op.limit
	if dataDone && resDone {
		return true, nil
	}
	// The loop runs step at least every keepEvery (a quarter of the
	// Timeout); a gap of half the RESULT deadline means this process did
	// not run (SIGSTOP, a starved VM), and a timeout found right after it
	// is its own doing: the leaf timed this rank out, not the other way
	// round.
	gap := now - op.lastStep
	if op.lastStep == 0 {
		gap = 0
	}
	op.lastStep = now
	frozen := ""
	if gap > op.resultDeadline/2 {
		frozen = fmt.Sprintf("; but this process itself did not run for %v before it noticed (stopped, or starved of CPU): the switches likely timed this rank out",
			time.Duration(gap).Round(time.Millisecond))
	}
	if err := op.sw.Check(now); err != nil {
		return false, fmt.Errorf("%w: leaf %s did not acknowledge DATA: %v%s", ErrTimeout, g.Leaf, err, frozen)
	}
	if op.rw != nil && !resDone && op.keepEvery > 0 && now-op.progressAt >= op.keepEvery {
		// The keepalive of docs/protocol.md section 7: an incomplete
		// RESULT stream hears from its receiver at least once per
		// Timeout/4 (Packet ID 0), so its sender learns the rank lives
		// and what room it has even when nothing arrived.
		if err := op.progress(now, 0, parser.ProgressStatusOK, tx); err != nil {
			return false, err
		}
	}
	if op.rw != nil && !resDone && op.resultDeadline >= 2*stallNotice && now-op.lastResult >= stallNotice &&
		now-max(op.stallSaid, op.lastResult) >= stallNotice && op.c.cfg.Notify != nil {
		// A long Timeout (a minute) kept a stalled data phase silent
		// for all of it: say so, every stallNoticeEvery after the first.
		op.stallSaid = now + stallNoticeEvery - stallNotice
		got := op.rw.Committed() - op.base
		// The switches fail it at the operation's Timeout; this rank's
		// own bound is a second later (resultDeadline), and "fails after
		// 31s" for a 30 s timeout read as an off-by-one.
		msg := fmt.Sprintf("rank %d: operation %s: no RESULT from leaf %s for %v (received [0, %d) of %d elements); it fails after %v (its timeout) without one. "+
			"'prismctl show ops' on the switches says what each waits for", op.c.cfg.Rank, g.ID, g.Leaf,
			time.Duration(now-op.lastResult).Round(time.Second), got, op.limit-op.base, time.Duration(op.resultDeadline)-time.Second)
		go op.c.cfg.Notify(msg) // never block the loop on the caller's callback
	}
	if op.rw != nil && !resDone && now-op.lastResult > op.resultDeadline {
		got := op.rw.Committed() - op.base
		return false, &resultError{from: got, to: op.limit - op.base,
			err: fmt.Errorf("%w: no RESULT from leaf %s for %v (received [0, %d) of %d elements)%s",
				ErrTimeout, g.Leaf, time.Duration(now-op.lastResult).Round(time.Millisecond), got, op.limit-op.base, frozen)}
	}
	return false, nil
}

// sendData encodes and queues new DATA while the window admits it, values
// copied from the caller's slice straight into the replay buffer.
func (op *opRun) sendData(now int64, tx *txQueue) error {
	n := op.limit
	for op.next < n {
		cnt := min(op.maxPer, n-op.next)
		size := parser.DataBodyOff + parser.GroupDescLen + pad4(int(cnt)*op.width)
		buf, pid, ok := op.sw.Reserve(now, op.next, cnt, size)
		if !ok {
			return nil
		}
		op.fields.PacketID, op.fields.First, op.fields.Flags = pid, op.next, 0
		if op.next+cnt == op.g.VectorLen {
			op.fields.Flags = parser.FlagLast
		}
		if op.persistent && op.next+cnt == n {
			op.fields.Flags |= parser.FlagPush // this invocation ends here
		}
		if err := op.b.Reset(buf, &op.fields, nil, op.mtu); err != nil {
			return err
		}
		slot, err := op.b.AddGroup(op.send.format, 0, int(cnt))
		if err != nil {
			return err
		}
		w, at := op.width, int(op.next-op.base)
		copy(slot, op.send.bytes[at*w:(at+int(cnt))*w])
		fr := op.sw.Commit(now, len(op.b.Finish()))
		if err := tx.add(fr); err != nil {
			return err
		}
		op.frames++
		op.wireTx += uint64(len(fr))
		op.next += cnt
	}
	return nil
}

func pad4(n int) int { return (n + 3) &^ 3 }

// handle applies one received frame.
func (op *opRun) handle(now int64, f []byte, tx *txQueue) error {
	if len(f) < parser.HdrOff || parser.Class(f[parser.CWOff+1]) == parser.ClassControl {
		return nil
	}
	g := op.g
	switch parser.Class(f[parser.CWOff+1]) {
	case parser.ClassProgress:
		p := &op.pin
		if err := p.Decode(f, parser.Limits{VectorLen: g.VectorLen}); err != nil {
			return nil // counted as noise: a broken PROGRESS is like a lost one
		}
		if p.Flags&parser.ProgressFlagResult != 0 || p.Stream != g.Data.StreamID || p.DstEP != g.Data.SrcEndpoint {
			return nil
		}
		op.wireRx += uint64(len(f))
		switch p.Status {
		case parser.ProgressStatusFailed:
			return fmt.Errorf("%w: leaf %s reports the operation FAILED%s", ErrFailed, g.Leaf, failedWhere(g.Leaf, p.FailCause, p.FailHops))
		case parser.ProgressStatusUnknownOperation:
			return fmt.Errorf("%w: leaf %s does not know the operation (aborted?)", ErrFailed, g.Leaf)
		case parser.ProgressStatusInvalid:
			return fmt.Errorf("%w: leaf %s rejected DATA packet %d as invalid", ErrFailed, g.Leaf, p.PacketID)
		}
		op.sw.ApplyProgress(now, p, &op.holes)
	case parser.ClassResult:
		if op.rw == nil {
			return nil
		}
		d := &op.din
		kb := g.KulischWidth / 8
		if err := d.Decode(f, parser.Limits{VectorLen: g.VectorLen, KulischBytes: kb, MTU: g.MTU}); err != nil {
			return nil
		}
		if d.Stream != g.Result.StreamID || d.DstEP != g.Result.DstEndpoint {
			return nil
		}
		op.wireRx += uint64(len(f))
		if d.Flags&parser.FlagInexact != 0 {
			return &resultError{from: op.rw.Committed() - op.base, to: op.limit - op.base, err: ErrInexact}
		}
		v := op.rw.Admit(d.PacketID, d.First, uint32(d.Count), len(f), stream.Hash(d.Body))
		status := parser.ProgressStatusOK
		switch v {
		case stream.Accepted:
			if err := op.store(d); err != nil {
				return &resultError{from: d.First - op.base, to: d.First + uint32(d.Count) - op.base, err: err}
			}
			op.rw.Release(op.rw.Committed())
			op.lastResult = now
			if op.rw.Pending() == 0 && !op.rw.Done() {
				// In order: the watermark acknowledges it, so one
				// PROGRESS per received batch, naming the newest frame,
				// answers them all (protocol section 7 allows coalescing
				// within 1 ms; a batch is applied in microseconds). An
				// out-of-order frame is answered at once: its sender
				// learns from that PROGRESS that it is held.
				op.ackPID = d.PacketID
				return nil
			}
		case stream.Duplicate:
			status = parser.ProgressStatusDuplicate
			op.dups++
		case stream.Invalid:
			status = parser.ProgressStatusInvalid
		case stream.NoCredit:
			status = parser.ProgressStatusNoCredit
		}
		return op.progress(now, d.PacketID, status, tx)
	}
	return nil
}

// store copies (or converts) a RESULT's groups into recv.
func (op *opRun) store(d *parser.Data) error {
	var it parser.GroupIter
	w := op.recv.format.Width(0) // the RESULT format (Options.Output)
	if d.First < op.base || d.First+uint32(d.Count) > op.limit {
		// Only a switch that sums an invocation before every rank
		// contributed to it could send this.
		return fmt.Errorf("%w: RESULT for elements [%d, %d) outside the running invocation [%d, %d)",
			ErrFailed, d.First, d.First+uint32(d.Count), op.base, op.limit)
	}
	for {
		grp, ok := d.NextGroup(&it)
		if !ok {
			return nil
		}
		at := int(grp.First - op.base)
		dst := op.recv.bytes[at*w : (at+int(grp.Count))*w]
		if grp.Format == op.recv.format {
			copy(dst, grp.Values)
			continue
		}
		if err := ConvertGroup(dst, op.recv.format, grp, op.g.KulischWidth); err != nil {
			return err
		}
	}
}

// ConvertGroup turns a RESULT group that is not in the rank's format (AUTO
// or Kulisch output) into format to, exactly or by rounding once (package
// kulisch does the arithmetic), writing grp.Count values into dst. kw is
// the operation's Kulisch width (0: 280). Tools that check RESULT frames
// themselves (prismd-blast) use it too, so both read results alike.
func ConvertGroup(dst []byte, to parser.Format, grp parser.Group, kw int) error {
	if kw == 0 {
		kw = 280
	}
	if grp.Format == parser.FormatKulisch {
		kw = int(grp.KBytes) * 8
	}
	v, err := kulisch.NewVector(int(grp.Count), kw)
	if err != nil {
		return err
	}
	if err := v.Add(0, kulisch.Format(grp.Format), grp.Values); err != nil {
		return fmt.Errorf("RESULT group of %v: %w", grp.Format, err)
	}
	w := to.Width(0)
	for i := 0; i < int(grp.Count); i++ {
		x, err := v.Round(i, kulisch.Format(to))
		if err != nil {
			return fmt.Errorf("%w: element %d: %v", ErrInexact, int(grp.First)+i, err)
		}
		for k := 0; k < w; k++ {
			dst[i*w+k] = byte(x >> (8 * k))
		}
	}
	return nil
}

// flushAck sends the PROGRESS owed to the in-order RESULT frames of the
// batch just applied.
func (op *opRun) flushAck(now int64, tx *txQueue) {
	if op.ackPID == 0 {
		return
	}
	if err := op.progress(now, op.ackPID, parser.ProgressStatusOK, tx); err != nil && op.state == opRunning {
		op.end(err)
	}
}

// progress answers a RESULT frame (and every in-order frame before it).
func (op *opRun) progress(now int64, pid uint32, status parser.ProgressStatus, tx *txQueue) error {
	op.ackPID = 0
	op.progressAt = now
	g := op.g
	ic, bc := op.rw.Credits()
	p := &op.pout
	*p = parser.Progress{Op: op.key, SrcEP: g.Result.DstEndpoint, DstEP: g.Result.SrcEndpoint, Stream: g.Result.StreamID,
		PacketID: pid, Committed: op.rw.Committed(), IntervalCredits: uint16(min(ic, 0xFFFF)), ByteCredits: bc,
		Status: status, Flags: parser.ProgressFlagResult}
	if op.rw.Done() {
		p.Flags |= parser.ProgressFlagComplete
	}
	hs := &op.holes
	p.NHoles = op.rw.Holes(hs[:])
	for i := 0; i < p.NHoles; i++ {
		p.Holes[i] = parser.Hole{Start: hs[i].Start, End: hs[i].End}
	}
	buf, err := tx.progressBuf()
	if err != nil {
		return err
	}
	n, err := p.Encode(buf, parser.Eth{Dst: op.leafMAC, Src: op.c.mac})
	if err != nil {
		return err
	}
	op.wireTx += uint64(n)
	return tx.add(buf[:n])
}

// optionsError is a call's Options that no AM would take, refused on the
// rank before any request (am.CheckBegin).
type optionsError struct{ err error }

func (e *optionsError) Error() string {
	msg := e.err.Error()
	if ae := (*am.APIError)(nil); errors.As(e.err, &ae) {
		msg = ae.Message
	}
	return "Options: " + msg + " (refused on this rank before any request)"
}

func (e *optionsError) Unwrap() error { return e.err }

// Is makes a refused Options an argument error (ErrType), as every refusal
// on the rank is; Unwrap keeps the *am.APIError and ErrSetup for code
// that reads the AM's code.
func (e *optionsError) Is(target error) bool { return target == ErrType }

// failedWhere says where a failure a leaf announced began, from the
// PROGRESS FAILED's Failure Cause and Failure Hops (protocol section 7):
// a rank the failure cut off from the AM has no other clue.
func failedWhere(leaf string, cause parser.FailCause, hops uint8) string {
	var what string
	switch cause {
	case parser.FailTimeout:
		what = "a peer went silent past the timeout (TIMEOUT)"
	case parser.FailLinkDown:
		what = "a switch's port toward a peer went down (LINK_DOWN)"
	case parser.FailPeer:
		what = "a peer no longer had the operation, or refused a frame as invalid (PEER_FAILED)"
	case parser.FailInternal:
		what = "a switch could not encode a result (INTERNAL)"
	default:
		return ""
	}
	switch hops {
	case 0:
		return fmt.Sprintf("; it began at %s: %s", leaf, what)
	case 1:
		return fmt.Sprintf("; it began 1 hop beyond %s: %s", leaf, what)
	}
	return fmt.Sprintf("; it began %d hops beyond %s: %s", hops, leaf, what)
}

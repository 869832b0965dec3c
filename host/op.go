// This file owns one collective on the rank: the barrier request, the DATA
// sender (stream.SendWindow), the RESULT receiver (stream.RecvWindow) with
// its PROGRESS answers, and the completion report.

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// tick is how often the sender loop looks at retransmission timers when no
// frame arrives: a quarter of stream.DefaultRTO.
const tick = 5 * time.Millisecond

// rankRTO is the first DATA retransmission timeout of a rank.
const rankRTO = int64(40 * time.Millisecond)

// opRun is the state of one running collective; its loop goroutine owns the
// windows.
type opRun struct {
	c     *Comm
	g     *am.Grant
	key   parser.OpKey
	in    chan *[]byte
	abrt  chan error
	send  elems
	recv  elems
	width int
	mtu   int

	leafMAC [6]byte
	sw      *stream.SendWindow
	rw      *stream.RecvWindow

	next        uint32 // next element to send
	lastResult  int64
	frames      uint64
	dups        uint64
	progressBuf []byte
	holes       [parser.MaxHoles]stream.Hole
	// Decoding scratch, reused by every frame: as locals they would
	// escape to the heap (one allocation per frame).
	pin  parser.Progress
	pout parser.Progress
	din  parser.Data
}

func (op *opRun) abort(err error) {
	select {
	case op.abrt <- err:
	default:
	}
}

func (c *Comm) run(ctx context.Context, seq uint64, coll string, send, recv any, root int, o Options) (Stats, error) {
	var st Stats
	oe := func(stage string, err error) *OpError {
		return &OpError{Collective: coll, Rank: c.cfg.Rank, Stage: stage, Err: err}
	}
	sv, err := view(send)
	if err != nil {
		return st, oe("begin", fmt.Errorf("send: %w", err))
	}
	if sv.n == 0 {
		return st, oe("begin", fmt.Errorf("%w: send is empty", ErrType))
	}
	wantRecv := coll == "allreduce" || c.cfg.Rank == root
	rv, err := view(recv)
	if err != nil {
		return st, oe("begin", fmt.Errorf("recv: %w", err))
	}
	if wantRecv && (rv.n != sv.n || rv.format != sv.format) {
		return st, oe("begin", fmt.Errorf("%w: recv must be the same type and length as send (%v x %d), got %v x %d",
			ErrType, sv.format, sv.n, rv.format, rv.n))
	}
	if coll == "reduce" && (root < 0 || root >= c.cfg.Size) {
		return st, oe("begin", fmt.Errorf("root %d is outside 0..%d", root, c.cfg.Size-1))
	}
	acc := o.Acc
	if acc == "" {
		acc = "kulisch"
	}
	req := am.BeginRequest{Job: c.cfg.Job, Group: c.cfg.Group, Seq: seq, OpID: o.OpID, Rank: c.cfg.Rank, Size: c.cfg.Size,
		Collective: coll, RootRank: root, InputFormat: am.FormatName(sv.format), AccPolicy: acc,
		PartialPolicy: o.Partial, OutputFormat: o.Output, KulischWidth: o.KulischWidth, VectorLen: uint32(sv.n),
		MTU: o.MTU, TimeoutMS: uint32(o.Timeout / time.Millisecond), Node: c.cfg.Node, Iface: c.cfg.NodeIface,
		MAC: net.HardwareAddr(c.mac[:]).String()}
	t0 := time.Now()
	g, err := c.client.Begin(ctx, req)
	if err != nil {
		return st, oe("begin", err)
	}
	st.Grant = g
	st.Setup = time.Since(t0)
	op := &opRun{c: c, g: g, in: make(chan *[]byte, 8192), abrt: make(chan error, 1), send: sv, recv: rv,
		width: sv.format.Width(0), mtu: g.MTU,
		key: parser.OpKey{Job: g.Op.Job, Group: g.Op.Group, GroupGen: g.Op.GroupGen, Op: g.Op.OpID, OpGen: g.Op.OpGen}}
	mac, err := net.ParseMAC(g.LeafMAC)
	if err != nil || len(mac) != 6 {
		return st, oe("begin", fmt.Errorf("grant has a bad leaf MAC %q", g.LeafMAC))
	}
	copy(op.leafMAC[:], mac)
	timeout := time.Duration(g.TimeoutMS) * time.Millisecond
	op.sw = stream.NewSendWindow(stream.SendConfig{
		Name:        fmt.Sprintf("op %s rank %d DATA stream %d to %s", g.ID, g.Rank, g.Data.StreamID, g.Leaf),
		ReplayDepth: int(g.Window.ReplayDepth), FrameSize: parser.EthLen + g.MTU,
		Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
		Deadline: int64(timeout),
		// Twice the stream default: a rank shares its cores with the
		// application, and a spurious timeout resends a whole window.
		RTO: rankRTO, MaxRTO: 10 * rankRTO,
	})
	if g.Result != nil {
		op.rw = stream.NewRecvWindow(stream.RecvConfig{
			Name: fmt.Sprintf("op %s rank %d RESULT path %d", g.ID, g.Rank, g.Result.StreamID), VectorLen: g.VectorLen,
			Intervals: int(g.Window.Intervals), Bytes: int(g.Window.Bytes), Elements: g.Window.Elements,
			MaxFrame: parser.EthLen + g.MTU,
		})
	}
	op.progressBuf = make([]byte, parser.EthLen+parser.CWLen+parser.ProgressHdrLen+parser.MaxHoles*parser.HoleLen)
	if err := c.register(op); err != nil {
		return st, oe("data", err)
	}
	t1 := time.Now()
	runErr := op.loop(ctx, timeout)
	st.Transfer = time.Since(t1)
	st.Frames = op.frames
	st.Retransmits, _ = op.sw.Stats()
	st.ResultDups = op.dups
	if runErr == nil {
		// Report without waiting: the AM checks every node and RELEASEs
		// in the background. Keep answering late RESULT duplicates (our
		// last PROGRESS may have been lost) until the AM is done with it.
		go op.linger(timeout)
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.client.Done(dctx, g.ID, am.DoneRequest{Rank: c.cfg.Rank, OK: true})
		cancel()
		if err != nil {
			return st, &OpError{Collective: coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "done", Err: err}
		}
		return st, nil
	}
	c.unregister(op)
	e := &OpError{Collective: coll, Rank: c.cfg.Rank, Op: g.ID, Stage: "data", Err: runErr}
	var se *stream.SilentError
	var re *resultError
	switch {
	case errors.As(runErr, &se):
		e.From, e.To = se.From, se.To
	case errors.As(runErr, &re):
		e.Stage, e.From, e.To = "result", re.from, re.to
	}
	// Tell the AM and wait for its diagnosis (which node, which rank).
	dctx, cancel := context.WithTimeout(context.Background(), timeout+15*time.Second)
	s, derr := c.client.Done(dctx, g.ID, am.DoneRequest{Rank: c.cfg.Rank, OK: false, Error: runErr.Error(), Wait: true})
	cancel()
	if derr == nil && s.Error != nil {
		e.Diagnosis = s.Error.Message
	} else if derr != nil {
		e.Diagnosis = "could not report the failure: " + derr.Error()
	}
	return st, e
}

// resultError is a RESULT-side failure with the missing range.
type resultError struct {
	from, to uint32
	err      error
}

func (e *resultError) Error() string { return e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

// loop sends DATA and receives RESULT until this rank's part is complete.
func (op *opRun) loop(ctx context.Context, timeout time.Duration) error {
	g := op.g
	n := g.VectorLen
	op.lastResult = mono()
	t := time.NewTicker(tick)
	defer t.Stop()
	var b parser.DataBuilder
	maxPer := uint32(parser.MaxPacketElements(op.mtu) / op.width)
	if maxPer > 0xFFFF {
		maxPer = 0xFFFF
	}
	fields := parser.DataFields{Eth: parser.Eth{Dst: op.leafMAC, Src: op.c.mac}, Class: parser.ClassData, Op: op.key,
		SrcEP: g.Data.SrcEndpoint, DstEP: g.Data.DstEndpoint, Stream: g.Data.StreamID}
	// The RESULT inactivity bound: the switches' own contributor timeout
	// plus a margin, so the AM's diagnosis already sees the failed node.
	resultDeadline := int64(timeout) + int64(time.Second)
	for {
		now := mono()
		// New DATA while the window admits it.
		for op.next < n {
			cnt := min(maxPer, n-op.next)
			size := parser.DataBodyOff + parser.GroupDescLen + pad4(int(cnt)*op.width)
			buf, pid, ok := op.sw.Reserve(now, op.next, cnt, size)
			if !ok {
				break
			}
			fields.PacketID, fields.First, fields.Flags = pid, op.next, 0
			if op.next+cnt == n {
				fields.Flags = parser.FlagLast
			}
			if err := b.Reset(buf, &fields, nil, op.mtu); err != nil {
				return err
			}
			slot, err := b.AddGroup(op.send.format, 0, int(cnt))
			if err != nil {
				return err
			}
			w := op.width
			copy(slot, op.send.bytes[int(op.next)*w:int(op.next+cnt)*w])
			fr := op.sw.Commit(now, len(b.Finish()))
			if err := op.write(fr); err != nil {
				return err
			}
			op.frames++
			op.next += cnt
		}
		for {
			f, ok := op.sw.NextRetransmit(now)
			if !ok {
				break
			}
			f[parser.HdrOff+33] |= parser.FlagRetransmit
			if err := op.write(f); err != nil {
				return err
			}
		}
		dataDone := op.next == n && op.sw.Idle()
		resDone := op.rw == nil || op.rw.Done()
		if dataDone && resDone {
			return nil
		}
		if err := op.sw.Check(now); err != nil {
			return fmt.Errorf("%w: leaf %s did not acknowledge DATA: %v", ErrTimeout, g.Leaf, err)
		}
		if op.rw != nil && !resDone && now-op.lastResult > resultDeadline {
			return &resultError{from: op.rw.Committed(), to: n,
				err: fmt.Errorf("%w: no RESULT from leaf %s for %v (received [0, %d) of %d elements)",
					ErrTimeout, g.Leaf, time.Duration(now-op.lastResult).Round(time.Millisecond), op.rw.Committed(), n)}
		}
		select {
		case bp := <-op.in:
			err := op.handle(*bp)
			framePool.Put(bp)
			// Drain what else arrived before sending more.
			for err == nil {
				select {
				case bp := <-op.in:
					err = op.handle(*bp)
					framePool.Put(bp)
					continue
				default:
				}
				break
			}
			if err != nil {
				return err
			}
		case <-t.C:
		case err := <-op.abrt:
			return err
		case <-ctx.Done():
			return fmt.Errorf("cancelled: %w", ctx.Err())
		}
	}
}

func pad4(n int) int { return (n + 3) &^ 3 }

func (op *opRun) write(f []byte) error {
	if err := op.c.conn.WriteFrame(f); err != nil {
		if errors.Is(err, net.ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("%w: send on %s: %v", ErrInterfaceDown, op.c.cfg.Iface, err)
	}
	return nil
}

// handle applies one received frame.
func (op *opRun) handle(f []byte) error {
	if len(f) < parser.HdrOff || parser.Class(f[parser.CWOff+1]) == parser.ClassControl {
		return nil
	}
	now := mono()
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
		switch p.Status {
		case parser.ProgressStatusFailed:
			return fmt.Errorf("%w: leaf %s reports the operation FAILED", ErrFailed, g.Leaf)
		case parser.ProgressStatusUnknownOperation:
			return fmt.Errorf("%w: leaf %s does not know the operation (aborted?)", ErrFailed, g.Leaf)
		case parser.ProgressStatusInvalid:
			return fmt.Errorf("%w: leaf %s rejected DATA packet %d as invalid", ErrFailed, g.Leaf, p.PacketID)
		}
		for i := 0; i < p.NHoles; i++ {
			op.holes[i] = stream.Hole{Start: p.Holes[i].Start, End: p.Holes[i].End}
		}
		op.sw.OnProgress(now, p.PacketID, p.Committed, op.holes[:p.NHoles], int(p.IntervalCredits), int(p.ByteCredits))
		if p.Status == parser.ProgressStatusNoCredit {
			op.sw.OnRejected(p.PacketID)
		}
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
		if d.Flags&parser.FlagInexact != 0 {
			return &resultError{from: op.rw.Committed(), to: g.VectorLen, err: ErrInexact}
		}
		v := op.rw.Admit(d.PacketID, d.First, uint32(d.Count), len(f), stream.Hash(d.Body))
		status := parser.ProgressStatusOK
		switch v {
		case stream.Accepted:
			if err := op.store(d); err != nil {
				return &resultError{from: d.First, to: d.First + uint32(d.Count), err: err}
			}
			op.rw.Release(op.rw.Committed())
			op.lastResult = now
		case stream.Duplicate:
			status = parser.ProgressStatusDuplicate
			op.dups++
		case stream.Invalid:
			status = parser.ProgressStatusInvalid
		case stream.NoCredit:
			status = parser.ProgressStatusNoCredit
		}
		return op.progress(d.PacketID, status)
	}
	return nil
}

// store copies (or converts) a RESULT's groups into recv.
func (op *opRun) store(d *parser.Data) error {
	var it parser.GroupIter
	w := op.width
	for {
		grp, ok := d.NextGroup(&it)
		if !ok {
			return nil
		}
		dst := op.recv.bytes[int(grp.First)*w : (int(grp.First)+int(grp.Count))*w]
		if grp.Format == op.recv.format {
			copy(dst, grp.Values)
			continue
		}
		if err := convert(dst, op.recv.format, grp, op.g.KulischWidth); err != nil {
			return err
		}
	}
}

// convert turns an AUTO-encoded RESULT group into the rank's format, exactly
// or by rounding once (package kulisch does the arithmetic).
func convert(dst []byte, to parser.Format, grp parser.Group, kw int) error {
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

// progress answers a RESULT frame.
func (op *opRun) progress(pid uint32, status parser.ProgressStatus) error {
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
	n, err := p.Encode(op.progressBuf, parser.Eth{Dst: op.leafMAC, Src: op.c.mac})
	if err != nil {
		return err
	}
	return op.write(op.progressBuf[:n])
}

// linger answers late RESULT duplicates after success, then forgets the op.
func (op *opRun) linger(d time.Duration) {
	defer op.c.unregister(op)
	if op.rw == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case bp := <-op.in:
			_ = op.handle(*bp)
			framePool.Put(bp)
		case <-t.C:
			return
		case <-op.abrt:
			return
		}
	}
}

package host

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

// nullConn swallows frames (the PROGRESS a RESULT triggers).
type nullConn struct{}

func (nullConn) ReadFrame(b []byte) (int, error) { select {} }
func (nullConn) WriteFrame(b []byte) error       { return nil }
func (nullConn) MAC() net.HardwareAddr           { return net.HardwareAddr{2, 0, 0, 0, 0, 1} }
func (nullConn) Close() error                    { return nil }

// TestHandleAllocs: decoding PROGRESS and RESULT on the rank allocates
// nothing per frame (the decoders are fields of the op, not locals that
// escape).
func TestHandleAllocs(t *testing.T) {
	const n = 1 << 20
	g := &am.Grant{VectorLen: n, MTU: 1500,
		Data:   am.StreamBinding{StreamID: 3, SrcEndpoint: 10, DstEndpoint: 20},
		Result: &am.StreamBinding{StreamID: 4, SrcEndpoint: 21, DstEndpoint: 11}}
	key := parser.OpKey{Job: 1, Group: 1, Op: 1}
	recv := make([]float32, n)
	rv, _ := view(recv)
	op := &opRun{c: &Comm{conn: nullConn{}}, g: g, key: key, recv: rv, width: 4, mtu: 1500,
		sw:    stream.NewSendWindow(stream.SendConfig{ReplayDepth: 64, FrameSize: 1514}),
		rw:    stream.NewRecvWindow(stream.RecvConfig{VectorLen: n, Intervals: 64, MaxFrame: 1514}),
		state: opRunning, limit: n}
	tx := newTxQueue(asBatch(nullConn{}), "null0")
	// A PROGRESS for the DATA stream.
	p := parser.Progress{Op: key, SrcEP: 20, DstEP: 10, Stream: 3, PacketID: 1, Committed: 0, IntervalCredits: 64, ByteCredits: 1 << 20}
	pf := make([]byte, 128)
	pn, err := p.Encode(pf, parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	// RESULT frames, one per run, in order: enough for every measurement
	// PerRun may make (each is 100 runs and a warm-up call).
	var b parser.DataBuilder
	frames := make([][]byte, 101*alloctest.Attempts)
	for i := range frames {
		buf := make([]byte, 1514)
		h := parser.DataFields{Eth: parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}}, Class: parser.ClassResult,
			Op: key, SrcEP: 21, DstEP: 11, PacketID: uint32(i + 1), First: uint32(i * 100), Stream: 4}
		if err := b.Reset(buf, &h, nil, 1500); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddGroup(parser.FormatFP32, 0, 100); err != nil {
			t.Fatal(err)
		}
		frames[i] = b.Finish()
	}
	k := 0
	a := alloctest.PerRun(100, func() {
		if err := op.handle(mono(), pf[:pn], &tx); err != nil {
			t.Fatal(err)
		}
		if err := op.handle(mono(), frames[k], &tx); err != nil {
			t.Fatal(err)
		}
		op.flushAck(mono(), &tx)
		if err := tx.flush(); err != nil {
			t.Fatal(err)
		}
		k++
	})
	if a != 0 && !raceEnabled {
		t.Fatalf("%v allocations per PROGRESS+RESULT", a)
	}
	if op.rw.Committed() == 0 {
		t.Fatal("RESULT frames were not accepted")
	}
}

// fakeLeaf is an in-memory BatchConn that plays a rank's leaf switch:
// every DATA frame is answered, in order, with a PROGRESS acknowledging it
// and a RESULT carrying the same values back (a one-rank sum). Frames are
// built in preallocated slots, so the fake allocates nothing and an
// allocation count measures the Comm alone.
type fakeLeaf struct {
	t        testing.TB
	g        *am.Grant
	key      parser.OpKey
	rankMAC  [6]byte
	leafMAC  [6]byte
	slots    [][frameBufSize]byte
	lens     []int
	head     int
	tail     int
	b        parser.DataBuilder
	d        parser.Data
	fields   parser.DataFields
	prog     parser.Progress
	pid      uint32 // next RESULT Packet ID
	dataIn   int    // DATA frames received from the rank
	progIn   int    // PROGRESS frames received from the rank
	resOut   int    // RESULT frames delivered
	batches  int    // WriteBatch calls
	dropNext bool   // drop the next RESULT (to exercise out-of-order answers)
}

func newFakeLeaf(t testing.TB, g *am.Grant, rankMAC, leafMAC [6]byte, slots int) *fakeLeaf {
	return &fakeLeaf{t: t, g: g, rankMAC: rankMAC, leafMAC: leafMAC, slots: make([][frameBufSize]byte, slots),
		lens: make([]int, slots), pid: 1,
		key: parser.OpKey{Job: g.Op.Job, Group: g.Op.Group, GroupGen: g.Op.GroupGen, Op: g.Op.OpID, OpGen: g.Op.OpGen}}
}

// push returns the next free slot; when the queue is full it reports an
// error (the test fails) and reuses the newest slot.
func (f *fakeLeaf) push() []byte {
	if f.tail-f.head == len(f.slots) {
		f.t.Error("fakeLeaf: queue full; make it larger")
		f.tail--
	}
	return f.slots[f.tail%len(f.slots)][:]
}

// drain appends every queued frame to out and empties the queue.
func (f *fakeLeaf) drain(out [][]byte) [][]byte {
	for ; f.head < f.tail; f.head++ {
		i := f.head % len(f.slots)
		out = append(out, f.slots[i][:f.lens[i]])
	}
	return out
}

func (f *fakeLeaf) commit(n int) {
	f.lens[f.tail%len(f.slots)] = n
	f.tail++
}

func (f *fakeLeaf) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n := 0
	for ; n < len(bufs) && f.head < f.tail; n++ {
		i := f.head % len(f.slots)
		sizes[n] = copy(bufs[n], f.slots[i][:f.lens[i]])
		f.head++
	}
	if n == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	return n, nil
}

func (f *fakeLeaf) WriteBatch(frames [][]byte) (int, error) {
	f.batches++
	g := f.g
	for _, fr := range frames {
		switch parser.Class(fr[parser.CWOff+1]) {
		case parser.ClassProgress:
			f.progIn++
		case parser.ClassData:
			if err := f.d.Decode(fr, parser.Limits{VectorLen: g.VectorLen, MTU: g.MTU}); err != nil {
				f.t.Errorf("fakeLeaf: bad DATA: %v", err)
				continue
			}
			f.dataIn++
			end := f.d.First + uint32(f.d.Count)
			f.prog = parser.Progress{Op: f.key, SrcEP: g.Data.DstEndpoint, DstEP: g.Data.SrcEndpoint, Stream: g.Data.StreamID,
				PacketID: f.d.PacketID, Committed: end, IntervalCredits: g.Window.Intervals, ByteCredits: g.Window.Bytes}
			n, err := f.prog.Encode(f.push(), parser.Eth{Dst: f.rankMAC, Src: f.leafMAC})
			if err != nil {
				f.t.Error(err)
				continue
			}
			f.commit(n)
			if f.dropNext {
				f.dropNext = false
				f.pid++
				continue
			}
			f.fields = parser.DataFields{Eth: parser.Eth{Dst: f.rankMAC, Src: f.leafMAC}, Class: parser.ClassResult, Op: f.key,
				SrcEP: g.Result.SrcEndpoint, DstEP: g.Result.DstEndpoint, Stream: g.Result.StreamID, PacketID: f.pid,
				First: f.d.First, Flags: f.d.Flags & parser.FlagLast}
			f.pid++
			if err := f.b.Reset(f.push(), &f.fields, nil, g.MTU); err != nil {
				f.t.Error(err)
				continue
			}
			var it parser.GroupIter
			grp, _ := f.d.NextGroup(&it)
			slot, err := f.b.AddGroup(grp.Format, 0, int(grp.Count))
			if err != nil {
				f.t.Error(err)
				continue
			}
			copy(slot, grp.Values)
			f.commit(len(f.b.Finish()))
			f.resOut++
		}
	}
	return len(frames), nil
}

func (f *fakeLeaf) SetReadDeadline(time.Time) error { return nil }
func (f *fakeLeaf) ReadFrame([]byte) (int, error)   { return 0, net.ErrClosed }
func (f *fakeLeaf) WriteFrame(b []byte) error       { _, err := f.WriteBatch([][]byte{b}); return err }
func (f *fakeLeaf) MAC() net.HardwareAddr           { return net.HardwareAddr(f.rankMAC[:]) }
func (f *fakeLeaf) Close() error                    { return nil }

// loopFixture is one rank's Comm and collective over a fakeLeaf, driven
// turn by turn through the event loop's iterate.
func loopFixture(t *testing.T, n int, mtu int) (*fakeLeaf, *evLoop, *opRun, []int8, []int8) {
	rankMAC, leafMAC := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	var fl *fakeLeaf
	l, op, send, recv := commFixture(t, n, mtu, rankMAC, leafMAC, func(g *am.Grant) Conn {
		fl = newFakeLeaf(t, g, rankMAC, leafMAC, 1024)
		return fl
	})
	return fl, l, op, send, recv
}

// commFixture registers one INT8 collective of n elements on a Comm over
// the Conn conn returns, as granted by a leaf at leafMAC, and returns the
// Comm's event loop (not running: the test turns it).
func commFixture(t *testing.T, n, mtu int, rankMAC, leafMAC [6]byte, conn func(*am.Grant) Conn) (*evLoop, *opRun, []int8, []int8) {
	per := uint32(parser.MaxPacketElements(mtu))
	g := &am.Grant{ID: "1-0-1-7-9", Op: am.OpIdentity{Job: 1, GroupGen: 1, OpID: 7, OpGen: 9}, VectorLen: uint32(n), MTU: mtu,
		TimeoutMS: 5000, LeafMAC: net.HardwareAddr(leafMAC[:]).String(), Leaf: "l1",
		Data:   am.StreamBinding{StreamID: 3, SrcEndpoint: 10, DstEndpoint: 20},
		Result: &am.StreamBinding{StreamID: 4, SrcEndpoint: 21, DstEndpoint: 11},
		Window: am.Window{Intervals: 64, ReplayDepth: 64, Bytes: uint32(64 * mtu), Elements: 64 * per}}
	c := newComm(Config{Rank: 0, Size: 1, Iface: "fake0", Coordinator: "http://unused"}, conn(g), nil)
	send := make([]int8, n)
	for i := range send {
		send[i] = int8(i*7 + i>>9)
	}
	recv := make([]int8, n)
	sv, _ := view(send)
	rv, _ := view(recv)
	op, err := newOp(c, g, sv, rv)
	if err != nil {
		t.Fatal(err)
	}
	op.lastResult = mono()
	if err := c.register(op); err != nil {
		t.Fatal(err)
	}
	return newLoop(c), op, send, recv
}

// TestLoopAllocs: the whole per-batch path of a rank — service (new DATA
// encoded straight into the replay buffers, retransmissions), one flush,
// one batch read, PROGRESS applied, RESULT decoded into the caller's slice,
// coalesced PROGRESS answers — allocates nothing in steady state, and
// delivers every value exactly.
func TestLoopAllocs(t *testing.T) {
	const n = 1 << 24 // INT8 at MTU 1500: ~11600 frames, more than the runs below use
	fl, l, op, send, recv := loopFixture(t, n, 1500)
	for i := 0; i < 20; i++ { // warm up: windows full, queues at size
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	}
	in0 := fl.dataIn
	a := alloctest.PerRun(300, func() {
		// A measurement repeated (alloctest.PerRun) may run past the
		// operation's end: with nothing registered the loop's read has
		// no deadline and would wait for ever.
		if op.state != opRunning {
			return
		}
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	})
	if a != 0 && !raceEnabled {
		t.Errorf("%v allocations per loop turn (want 0)", a)
	}
	if fl.dataIn-in0 < 300 {
		t.Fatalf("only %d DATA frames in 300 turns: the fixture is not exercising the path", fl.dataIn-in0)
	}
	for op.state == opRunning {
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	}
	if r := <-op.result; r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.Equal(asBytes(send), asBytes(recv)) {
		t.Fatal("RESULT values differ from what was sent")
	}
	// Finished, it lingers (answering late RESULT) without ticking: the
	// loop's next wakeup is the end of the linger, seconds away.
	if op.state != opLingering {
		t.Fatalf("state %d after completion, want lingering", op.state)
	}
	if d := time.Until(wakeAt(*l.c.ops.Load())); d < time.Second {
		t.Errorf("a lingering collective wakes the loop in %v; want the linger's end (~5s)", d)
	}
	// Coalescing: far fewer PROGRESS answers than RESULT frames, far fewer
	// system calls than frames.
	t.Logf("%d DATA, %d RESULT, %d PROGRESS answers, %d WriteBatch calls", fl.dataIn, fl.resOut, fl.progIn, fl.batches)
	if fl.progIn*4 > fl.resOut || fl.batches*8 > fl.dataIn+fl.progIn {
		t.Errorf("PROGRESS answers %d for %d RESULT, %d batches for %d frames: not coalesced/batched", fl.progIn, fl.resOut,
			fl.batches, fl.dataIn+fl.progIn)
	}
}

// TestLoopOutOfOrderAnswered: a lost RESULT makes the next ones arrive
// above a hole; each of those is answered at once (not coalesced), and the
// collective still completes once the lost frame is resent.
func TestLoopOutOfOrderAnswered(t *testing.T) {
	const n = 200000
	fl, l, op, send, recv := loopFixture(t, n, 1500)
	for i := 0; i < 3; i++ {
		if err := l.iterate(); err != nil {
			t.Fatal(err)
		}
	}
	fl.dropNext = true
	before := fl.progIn
	if err := l.iterate(); err != nil { // sends more DATA: its first RESULT is lost
		t.Fatal(err)
	}
	if err := l.iterate(); err != nil { // applies the batch with a hole
		t.Fatal(err)
	}
	if err := l.iterate(); err != nil { // flushes the answers
		t.Fatal(err)
	}
	if got := fl.progIn - before; got < 5 {
		t.Fatalf("%d PROGRESS answers to a batch above a hole; want one per frame", got)
	}
	if op.rw.Pending() == 0 {
		t.Fatal("no hole: the RESULT was not dropped")
	}
	// The fake never resends the lost RESULT: the rank reports the hole
	// and the missing range, it does not complete.
	if op.rw.Committed() >= uint32(n) || bytes.Equal(asBytes(send), asBytes(recv)) {
		t.Fatal("completed despite a lost RESULT")
	}
}

// captureConn records the frames written to it.
type captureConn struct {
	nullConn
	frames [][]byte
}

func (c *captureConn) WriteFrame(b []byte) error {
	c.frames = append(c.frames, append([]byte(nil), b...))
	return nil
}

// TestResultKeepAlive: a rank whose RESULT stream is incomplete sends a
// timer-driven PROGRESS (Packet ID 0, flag RESULT, its window's state) once
// per Timeout/4 without RESULT traffic, and no more often (docs/protocol.md
// section 7).
func TestResultKeepAlive(t *testing.T) {
	const n = 1000
	g := &am.Grant{VectorLen: n, MTU: 1500, TimeoutMS: 400,
		Data:   am.StreamBinding{StreamID: 3, SrcEndpoint: 10, DstEndpoint: 20},
		Result: &am.StreamBinding{StreamID: 4, SrcEndpoint: 21, DstEndpoint: 11}}
	key := parser.OpKey{Job: 1, Group: 1, Op: 1}
	recv := make([]float32, n)
	rv, _ := view(recv)
	cc := &captureConn{}
	op := &opRun{c: &Comm{conn: cc}, g: g, key: key, recv: rv, width: 4, mtu: 1500,
		sw:    stream.NewSendWindow(stream.SendConfig{ReplayDepth: 64, FrameSize: 1514}),
		rw:    stream.NewRecvWindow(stream.RecvConfig{VectorLen: n, Intervals: 64, MaxFrame: 1514}),
		state: opRunning, limit: n, next: n, resultDeadline: int64(time.Hour), keepEvery: int64(100 * time.Millisecond)}
	tx := newTxQueue(asBatch(cc), "cap0")
	t0 := mono()
	op.lastResult, op.progressAt = t0, t0
	sent := func(at time.Duration) []parser.Progress {
		t.Helper()
		cc.frames = nil
		if _, err := op.step(t0+int64(at), &tx); err != nil {
			t.Fatal(err)
		}
		if err := tx.flush(); err != nil {
			t.Fatal(err)
		}
		var ps []parser.Progress
		for _, f := range cc.frames {
			var p parser.Progress
			if err := p.Decode(f, parser.Limits{VectorLen: n}); err != nil {
				t.Fatalf("rank sent a frame that is not PROGRESS: %v", err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	if ps := sent(99 * time.Millisecond); len(ps) != 0 {
		t.Fatalf("%d PROGRESS before Timeout/4", len(ps))
	}
	ps := sent(100 * time.Millisecond)
	if len(ps) != 1 || ps[0].PacketID != 0 || ps[0].Stream != 4 || ps[0].Flags != parser.ProgressFlagResult ||
		ps[0].Status != parser.ProgressStatusOK || ps[0].IntervalCredits == 0 {
		t.Fatalf("at Timeout/4: %+v, want one PROGRESS, Packet ID 0, stream 4, flag RESULT, OK, with credits", ps)
	}
	if ps := sent(150 * time.Millisecond); len(ps) != 0 {
		t.Fatalf("%d PROGRESS half a quarter after the keepalive", len(ps))
	}
	if ps := sent(200 * time.Millisecond); len(ps) != 1 {
		t.Fatalf("%d PROGRESS a quarter after the keepalive, want 1", len(ps))
	}
}

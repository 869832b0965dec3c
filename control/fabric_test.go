package control

// An in-memory fabric for end-to-end tests without root: switches are
// control.Workers, ranks are fake endpoints built on package stream and the
// parser's encoder, links are queues with injected loss, duplication and
// reordering. The AM is the test itself, attached to each switch's last port.

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/prismd/prismd/engine"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
	"github.com/prismd/prismd/stream"
)

var amMAC = [6]byte{0x02, 0xAA, 0, 0, 0, 1}

func swMAC(s, p int) [6]byte    { return [6]byte{0x02, 0x5e, 0, byte(s), byte(p), 1} }
func rankMAC(r int) [6]byte     { return [6]byte{0x02, 0x4b, 0, 0, byte(r), 2} }
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type endpoint struct {
	rank int // >= 0: a rank; -1: a switch port
	sw   int
	port int
}

type inflight struct {
	at    int64
	seq   int
	to    endpoint
	frame []byte
}

type fabric struct {
	t     testing.TB
	rng   *rand.Rand
	now   int64
	seq   int
	q     []inflight
	links map[endpoint]endpoint
	sws   []*swNode
	ranks []*rank
	// Impairments for DATA/RESULT/PROGRESS (CONTROL is not impaired).
	loss, dup float64
	jitter    int64 // max extra delay (ns): reordering
	delivered int
	dropped   int
}

type swNode struct {
	f      *fabric
	id     int
	nports int // including the AM port (the last one)
	node   *Node
	w      *Worker
	amIn   [][]byte
}

func (s *swNode) amPort() int { return s.nports - 1 }

// Send implements dataplane.Sender.
func (s *swNode) Send(port int, frame []byte) bool {
	b := append([]byte(nil), frame...)
	if port == s.amPort() {
		s.amIn = append(s.amIn, b)
		return true
	}
	s.f.transmit(endpoint{-1, s.id, port}, b)
	return true
}
func (s *swNode) PortMAC(port int) [6]byte { return swMAC(s.id, port) }
func (s *swNode) NumPorts() int            { return s.nports }

func newFabric(t testing.TB, seed uint64) *fabric {
	return &fabric{t: t, rng: rand.New(rand.NewPCG(seed, 1)), links: map[endpoint]endpoint{}, now: 1e9}
}

func (f *fabric) addSwitch(nports int) *swNode {
	s := &swNode{f: f, id: len(f.sws), nports: nports + 1}
	s.node = NewNode(NodeConfig{AMMACs: [][6]byte{amMAC}, Logger: quietLogger(),
		Engine: engine.Config{CoalesceProgress: true}})
	s.w = s.node.NewWorker(0, 1)
	f.sws = append(f.sws, s)
	return s
}

func (f *fabric) link(a, b endpoint) { f.links[a], f.links[b] = b, a }

func (f *fabric) transmit(from endpoint, frame []byte) {
	to, ok := f.links[from]
	if !ok {
		f.t.Fatalf("no link from %+v", from)
	}
	impaired := len(frame) > parser.CWOff+1 && parser.Class(frame[parser.CWOff+1]) != parser.ClassControl
	copies := 1
	if impaired {
		if f.rng.Float64() < f.loss {
			f.dropped++
			return
		}
		if f.rng.Float64() < f.dup {
			copies = 2
		}
	}
	for range copies {
		d := int64(20e3)
		if impaired && f.jitter > 0 {
			d += f.rng.Int64N(f.jitter)
		}
		f.seq++
		f.q = append(f.q, inflight{at: f.now + d, seq: f.seq, to: to, frame: frame})
	}
}

// step advances time by dt, delivering due frames in time order and ticking
// every switch and rank once per millisecond boundary crossed.
func (f *fabric) step(dt int64) {
	end := f.now + dt
	for {
		sort.Slice(f.q, func(i, j int) bool {
			if f.q[i].at != f.q[j].at {
				return f.q[i].at < f.q[j].at
			}
			return f.q[i].seq < f.q[j].seq
		})
		if len(f.q) == 0 || f.q[0].at > end {
			break
		}
		m := f.q[0]
		f.q = f.q[1:]
		f.now = max(f.now, m.at)
		f.deliver(m)
	}
	prev := f.now / 1e6
	f.now = end
	if f.now/1e6 != prev {
		for _, s := range f.sws {
			s.w.Tick(f.now, s)
		}
		for _, r := range f.ranks {
			r.tick(f.now)
		}
	}
}

func (f *fabric) deliver(m inflight) {
	f.delivered++
	dst := [6]byte(m.frame[0:6])
	if m.to.rank >= 0 {
		r := f.ranks[m.to.rank]
		if dst != r.mac {
			f.t.Fatalf("frame for %x delivered to rank %d", dst, r.id)
		}
		r.handle(f.now, m.frame)
		return
	}
	s := f.sws[m.to.sw]
	if dst != swMAC(s.id, m.to.port) {
		f.t.Fatalf("frame for %x delivered to switch %d port %d", dst, s.id, m.to.port)
	}
	s.w.Handle(f.now, m.to.port, m.frame, s)
	// One-frame batches: the coalesced PROGRESS goes out as the dataplane
	// would send it, after the batch.
	s.w.Flush(f.now, s)
}

// runUntil steps until cond holds or the simulated limit passes.
func (f *fabric) runUntil(limit time.Duration, cond func() bool) bool {
	deadline := f.now + int64(limit)
	for f.now < deadline {
		if cond() {
			return true
		}
		f.step(100e3)
	}
	return cond()
}

// ---- AM side ----

var txnSeq uint32

func controlFrame(t testing.TB, key parser.OpKey, cmd parser.Command, body []byte, txn uint32) []byte {
	c := parser.Control{Op: key, Txn: txn, SrcEP: 1, DstEP: 2, Cmd: cmd, FragCount: 1, Body: body}
	buf := make([]byte, parser.EthLen+c.Len())
	n, err := c.Encode(buf, parser.Eth{Dst: swMAC(0, 0), Src: amMAC})
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// request sends one CONTROL frame into switch s and returns the decoded
// replies.
func (s *swNode) request(frame []byte) []parser.Control {
	s.amIn = nil
	copy(frame[0:6], []byte{0x02, 0x5e, 0, byte(s.id), byte(s.amPort()), 1})
	s.w.Handle(s.f.now, s.amPort(), frame, s)
	var out []parser.Control
	for _, b := range s.amIn {
		var c parser.Control
		if err := c.Decode(b, parser.Limits{}); err != nil {
			s.f.t.Fatalf("switch %d reply does not decode: %v", s.id, err)
		}
		if [6]byte(b[0:6]) != amMAC {
			s.f.t.Fatalf("reply to %x, want the AM", b[0:6])
		}
		c.Body = append([]byte(nil), c.Body...)
		out = append(out, c)
	}
	return out
}

func (s *swNode) ack(t testing.TB, key parser.OpKey, cmd parser.Command, body []byte) (parser.Status, parser.Ack) {
	t.Helper()
	txnSeq++
	rs := s.request(controlFrame(t, key, cmd, body, txnSeq))
	if len(rs) != 1 || rs[0].Cmd != parser.CmdAck {
		t.Fatalf("switch %d %v: %d replies", s.id, cmd, len(rs))
	}
	a := rs[0].Ack()
	if a.AckedCmd != cmd {
		t.Fatalf("ACK for %v, want %v", a.AckedCmd, cmd)
	}
	return rs[0].Status, a
}

func stageBody(t testing.TB, ctx parser.ContextRecord, bs []parser.Binding) []byte {
	s := parser.StageSpec{Context: ctx, Bindings: bs}
	b := make([]byte, s.Len())
	if _, err := s.Encode(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func (s *swNode) install(t testing.TB, key parser.OpKey, ctx parser.ContextRecord, bs []parser.Binding) {
	t.Helper()
	if st, a := s.ack(t, key, parser.CmdStage, stageBody(t, ctx, bs)); st != parser.StatusOK {
		t.Fatalf("switch %d STAGE: %v detail %d", s.id, st, a.Detail)
	}
	if st, _ := s.ack(t, key, parser.CmdCommit, nil); st != parser.StatusOK {
		t.Fatalf("switch %d COMMIT: %v", s.id, st)
	}
}

// ---- ranks ----

type rank struct {
	f    *fabric
	id   int
	mac  [6]byte
	ep   uint16
	at   endpoint // the switch port it is attached to
	key  parser.OpKey
	mtu  int
	vlen uint32

	vals    []float32
	contrib uint16 // contributor stream
	swEP    uint16 // the switch's local endpoint of our contributor binding
	sw      *stream.SendWindow
	next    uint32
	stopAt  uint32 // stop sending new data at this element (vlen = never)
	started bool

	resStream uint16
	resSwEP   uint16
	rw        *stream.RecvWindow
	result    []uint32
	inexact   bool
	bld       parser.DataBuilder
	kwidth    int // Kulisch width for AUTO/KULISCH results (bits)
	formats   map[parser.Format]int
}

func (f *fabric) addRank(sw *swNode, port int, key parser.OpKey, vals []float32, ctx *parser.ContextRecord) *rank {
	r := &rank{f: f, id: len(f.ranks), key: key, mtu: int(ctx.MTU), vlen: ctx.VectorLen, vals: vals, started: true}
	r.mac = rankMAC(r.id)
	r.ep = uint16(500 + r.id)
	r.at = endpoint{-1, sw.id, port}
	r.stopAt = r.vlen
	r.sw = stream.NewSendWindow(stream.SendConfig{Name: fmt.Sprintf("rank %d", r.id), ReplayDepth: int(ctx.ReplayDepth),
		FrameSize: parser.EthLen + r.mtu, Intervals: int(ctx.WindowIntervals), Bytes: int(ctx.WindowBytes),
		Elements: ctx.WindowElements, Deadline: -1})
	f.ranks = append(f.ranks, r)
	f.link(endpoint{r.id, -1, -1}, r.at)
	return r
}

// expectResult makes the rank a RESULT recipient on result path stream.
func (r *rank) expectResult(stream_ uint16, swEP uint16, ctx *parser.ContextRecord) {
	r.resStream, r.resSwEP = stream_, swEP
	r.rw = stream.NewRecvWindow(stream.RecvConfig{VectorLen: r.vlen, Intervals: int(ctx.WindowIntervals),
		Bytes: int(ctx.WindowBytes), Elements: ctx.WindowElements, MaxFrame: parser.EthLen + r.mtu})
	r.result = make([]uint32, r.vlen)
	r.kwidth = int(ctx.KulischWidth)
	r.formats = map[parser.Format]int{}
}

func (r *rank) send(frame []byte) {
	r.f.transmit(endpoint{r.id, -1, -1}, append([]byte(nil), frame...))
}

func (r *rank) tick(now int64) {
	if r.vals == nil || !r.started {
		return
	}
	for r.next < min(r.vlen, r.stopAt) {
		room := min(uint32(parser.MaxPacketElements(r.mtu)/4)&^0, r.vlen-r.next, r.stopAt-r.next)
		buf, pid, ok := r.sw.Reserve(now, r.next, room, parser.EthLen+r.mtu)
		if !ok {
			break
		}
		var flags uint8
		if r.next+room == r.vlen {
			flags = parser.FlagLast
		}
		h := parser.DataFields{Eth: parser.Eth{Dst: swMAC(r.at.sw, r.at.port), Src: r.mac}, Class: parser.ClassData,
			Op: r.key, SrcEP: r.ep, DstEP: r.swEP, PacketID: pid, First: r.next, Flags: flags, Stream: r.contrib}
		if err := r.bld.Reset(buf, &h, nil, r.mtu); err != nil {
			r.f.t.Fatal(err)
		}
		n := min(room, uint32(r.bld.Room(parser.FormatFP32, 0)))
		slot, err := r.bld.AddGroup(parser.FormatFP32, 0, int(n))
		if err != nil {
			r.f.t.Fatal(err)
		}
		for k := uint32(0); k < n; k++ {
			binary.LittleEndian.PutUint32(slot[4*k:], math.Float32bits(r.vals[r.next+k]))
		}
		if n != room {
			r.f.t.Fatalf("rank frame holds %d, planned %d", n, room)
		}
		fr := r.bld.Finish()
		r.send(r.sw.Commit(now, len(fr)))
		r.next += n
	}
	for {
		fr, ok := r.sw.NextRetransmit(now)
		if !ok {
			break
		}
		r.send(fr)
	}
}

func (r *rank) done() bool { return r.rw == nil || r.rw.Done() || r.inexact }

func (r *rank) handle(now int64, frame []byte) {
	switch parser.Class(frame[parser.CWOff+1]) {
	case parser.ClassProgress:
		var p parser.Progress
		if err := p.Decode(frame, parser.Limits{VectorLen: r.vlen}); err != nil {
			r.f.t.Fatalf("rank %d: bad PROGRESS: %v", r.id, err)
		}
		if p.Stream != r.contrib || p.Flags&parser.ProgressFlagResult != 0 || p.DstEP != r.ep || p.SrcEP != r.swEP {
			r.f.t.Fatalf("rank %d: PROGRESS for stream %d flags %x eps %d->%d", r.id, p.Stream, p.Flags, p.SrcEP, p.DstEP)
		}
		hs := make([]stream.Hole, p.NHoles)
		for i := range hs {
			hs[i] = stream.Hole(p.Holes[i])
		}
		r.sw.OnProgress(now, p.PacketID, p.Committed, hs, int(p.IntervalCredits), int(p.ByteCredits))
		if p.Status == parser.ProgressStatusNoCredit {
			r.sw.OnRejected(p.PacketID)
		}
		r.tick(now)
	case parser.ClassResult:
		var d parser.Data
		if err := d.Decode(frame, parser.Limits{VectorLen: r.vlen, MTU: r.mtu, KulischBytes: r.kwidth / 8}); err != nil {
			r.f.t.Fatalf("rank %d: bad RESULT: %v", r.id, err)
		}
		if r.rw == nil || d.Stream != r.resStream || d.DstEP != r.ep || d.SrcEP != r.resSwEP {
			r.f.t.Fatalf("rank %d: unexpected RESULT stream %d", r.id, d.Stream)
		}
		st := parser.ProgressStatusOK
		if d.Flags&parser.FlagInexact != 0 {
			r.inexact = true
		} else {
			switch r.rw.Admit(d.PacketID, d.First, uint32(d.Count), len(frame), stream.Hash(d.Body)) {
			case stream.Accepted:
				var it parser.GroupIter
				for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
					r.formats[g.Format] += int(g.Count)
					for k := 0; k < int(g.Count); k++ {
						r.result[g.First+uint32(k)] = r.toFP32(g.Format, g.Values, k)
					}
				}
				r.rw.Release(r.rw.Committed())
			case stream.Duplicate:
				st = parser.ProgressStatusDuplicate
			default:
				r.f.t.Fatalf("rank %d: RESULT not admissible", r.id)
			}
		}
		var hs [stream.MaxHoles]stream.Hole
		nh := r.rw.Holes(hs[:])
		ci, cb := r.rw.Credits()
		p := parser.Progress{Op: r.key, SrcEP: r.ep, DstEP: r.resSwEP, Stream: r.resStream, PacketID: d.PacketID,
			Committed: r.rw.Committed(), IntervalCredits: uint16(ci), ByteCredits: cb, Status: st,
			Flags: parser.ProgressFlagResult, NHoles: nh}
		for i := 0; i < nh; i++ {
			p.Holes[i] = parser.Hole(hs[i])
		}
		buf := make([]byte, parser.EthLen+p.Len())
		n, err := p.Encode(buf, parser.Eth{Dst: swMAC(r.at.sw, r.at.port), Src: r.mac})
		if err != nil {
			r.f.t.Fatal(err)
		}
		r.send(buf[:n])
	default:
		r.f.t.Fatalf("rank %d: unexpected class %d", r.id, frame[parser.CWOff+1])
	}
}

// toFP32 converts result value k of a group to FP32 bits the way a rank's
// runtime would: exactly for the narrow formats, and by one rounding of a
// Kulisch value (what AUTO sends when no float format is exact).
func (r *rank) toFP32(f parser.Format, v []byte, k int) uint32 {
	switch f {
	case parser.FormatFP32:
		return binary.LittleEndian.Uint32(v[4*k:])
	case parser.FormatFP16:
		return kulisch.FP16ToFP32(binary.LittleEndian.Uint16(v[2*k:]))
	case parser.FormatBF16:
		return kulisch.BF16ToFP32(binary.LittleEndian.Uint16(v[2*k:]))
	case parser.FormatINT8:
		return kulisch.INT8ToFP32(int8(v[k]))
	case parser.FormatKulisch:
		ws := kulisch.WireSize(r.kwidth)
		a, err := kulisch.NewAccumulator(r.kwidth)
		if err != nil {
			r.f.t.Fatal(err)
		}
		if err := a.MergeWire(v[k*ws : (k+1)*ws]); err != nil {
			r.f.t.Fatalf("rank %d: bad Kulisch result: %v", r.id, err)
		}
		b, err := a.RoundFP32()
		if err != nil {
			r.f.t.Fatal(err)
		}
		return b
	}
	r.f.t.Fatalf("rank %d: result format %v", r.id, f)
	return 0
}

// snapshotErr returns the failure text of op key on switch s.
func (s *swNode) snapshotOp(key parser.OpKey) *engine.OpSnapshot {
	s.w.eng.Publish(s.f.now)
	for _, o := range s.w.eng.Snapshot().Ops {
		if o.Job == key.Job && o.Op == key.Op && o.OpGen == key.OpGen {
			return &o
		}
	}
	return nil
}

package engine

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// relaySink records what a relaying leaf sends: RESULT frames per rank port
// and the PROGRESS it returns to its parent (port 2).
type relaySink struct {
	results  [2]int
	resEnd   [2]uint32 // contiguous RESULT elements each rank holds
	got      [2]map[uint32]uint32
	progress []parser.Progress
}

func (s *relaySink) Send(port int, frame []byte) bool {
	switch parser.Class(frame[parser.CWOff+1]) {
	case parser.ClassResult:
		h := parser.DataHeader(frame[parser.HdrOff:parser.DataBodyOff])
		s.results[port]++
		s.got[port][h.First()] = uint32(h.Count())
		for {
			n, ok := s.got[port][s.resEnd[port]]
			if !ok {
				break
			}
			s.resEnd[port] += n
		}
	case parser.ClassProgress:
		if port == 2 {
			var p parser.Progress
			if err := p.Decode(frame, parser.Limits{}); err == nil {
				s.progress = append(s.progress, p)
			}
		}
	}
	return true
}
func (s *relaySink) PortMAC(port int) [6]byte { return [6]byte{2, 0, 0, 0, byte(port), 1} }
func (s *relaySink) NumPorts() int            { return 4 }

// relayParentMAC is the parent switch of relayLeaf's leaf.
var relayParentMAC = [6]byte{2, 0x5e, 0, 9, 0, 1}

// relayLeaf stages and commits a leaf of an FP32 ALLREDUCE of vlen
// elements (per a frame) between two ranks (ports 0, 1) and a parent (port
// 2), with replay buffers of depth frames and a 64-interval window.
func relayLeaf(t *testing.T, key parser.OpKey, vlen, per uint32, depth int) (*Engine, *relaySink, int64) {
	t.Helper()
	parentMAC := relayParentMAC
	spec := Spec{Op: key, Role: parser.RoleLeaf, Collective: parser.CollAllReduce, VectorLen: vlen, MTU: 1500,
		Tuple:           kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.FP32Arrival, Partial: kulisch.FP32, Output: kulisch.FP32},
		WindowIntervals: 64, ReplayDepth: depth, WindowBytes: 64 * 1514, WindowElements: 64 * per, MaxTerms: 4,
		Timeout: time.Hour,
		Bindings: []Binding{
			{Kind: parser.KindContributor, Rank: true, Stream: 10, LocalEP: 100, PeerEP: 1, Port: 0, PeerMAC: rank0},
			{Kind: parser.KindContributor, Rank: true, Stream: 11, LocalEP: 101, PeerEP: 2, Port: 1, PeerMAC: rank1},
			{Kind: parser.KindParent, Stream: 30, LocalEP: 102, PeerEP: 900, Port: 2, PeerMAC: parentMAC},
			{Kind: parser.KindResultIn, Stream: 31, LocalEP: 103, PeerEP: 901, Port: 2, PeerMAC: parentMAC},
			{Kind: parser.KindResultOut, Rank: true, Stream: 20, LocalEP: 200, PeerEP: 1, Port: 0, PeerMAC: rank0},
			{Kind: parser.KindResultOut, Rank: true, Stream: 21, LocalEP: 201, PeerEP: 2, Port: 1, PeerMAC: rank1},
		}}
	e := New(Config{Logger: quiet()})
	tx := &relaySink{got: [2]map[uint32]uint32{{}, {}}}
	now := int64(1e9)
	if err := e.Stage(now, &spec, 4); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(now, key); err != nil {
		t.Fatal(err)
	}
	return e, tx, now
}

// TestRelayCreditsFollowOutputs: a leaf relays the parent's RESULT to two
// ranks through 8-frame replay buffers while its own receive window takes
// 64 intervals. A parent that sends exactly what the leaf's PROGRESS grants
// must never be refused (the leaf promised room its outputs did not have:
// thousands of NO_CREDIT refusals and resends per 1M ALLREDUCE), and when
// the slow ranks catch up the leaf must say so without waiting for a
// retransmission timer, so the whole vector arrives.
func TestRelayCreditsFollowOutputs(t *testing.T) {
	const (
		per   = 363
		vlen  = per * 200
		depth = 8
	)
	key := parser.OpKey{Job: 3, Group: 1, Op: 1, OpGen: 1}
	e, tx, now := relayLeaf(t, key, vlen, per, depth)
	vals := make([]byte, 4*per)
	for k := range per {
		binary.LittleEndian.PutUint32(vals[4*k:], uint32(k))
	}
	result := func(pid, first uint32) []byte {
		var flags uint8
		if first+per == vlen {
			flags = parser.FlagLast
		}
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: tx.PortMAC(2), Src: relayParentMAC},
			Class: parser.ClassResult, Op: key, SrcEP: 901, DstEP: 103, PacketID: pid, First: first, Flags: flags, Stream: 31}, nil,
			parser.Group{Format: parser.FormatFP32, Count: per, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rankAck := func(r int) []byte {
		p := parser.Progress{Op: key, SrcEP: uint16(1 + r), DstEP: uint16(200 + r), Stream: uint16(20 + r),
			Committed: tx.resEnd[r], IntervalCredits: 64, ByteCredits: 64 * 1514, Flags: parser.ProgressFlagResult}
		b := make([]byte, parser.EthLen+p.Len())
		if _, err := p.Encode(b, parser.Eth{Dst: tx.PortMAC(r), Src: [][6]byte{rank0, rank1}[r]}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The parent: sends while the newest PROGRESS grants room, counting
	// the frames sent after the one it acknowledged (the credit's base).
	var next, pid uint32 = 0, 0
	credit, base, seen := 1, uint32(0), 0
	for step := 0; next < vlen || tx.resEnd[0] < vlen || tx.resEnd[1] < vlen; step++ {
		if step > 20000 {
			t.Fatalf("stalled: parent sent up to %d, ranks hold %v of %d; leaf PROGRESS %d", next, tx.resEnd, vlen, len(tx.progress))
		}
		now += 1000
		for ; seen < len(tx.progress); seen++ {
			p := tx.progress[seen]
			if p.Status == parser.ProgressStatusNoCredit {
				t.Fatalf("leaf refused RESULT packet %d for credit after granting it (PROGRESS %d)", p.PacketID, seen)
			}
			// A window update (Packet ID 0) grants credit from the newest
			// frame already reflected, as stream.SendWindow reads it.
			if p.PacketID == 0 || p.PacketID >= base {
				credit = int(p.IntervalCredits)
				base = max(base, p.PacketID)
			}
		}
		if next < vlen && int(pid-base) < credit {
			pid++
			e.HandleData(now, 2, result(pid, next), tx)
			next += per
			continue
		}
		// Nothing granted: the slow ranks acknowledge what they hold.
		for r := range 2 {
			e.HandleProgress(now, r, rankAck(r), tx)
		}
	}
	if d := e.Metrics().Drops[DropNoCredit].Load(); d != 0 {
		t.Fatalf("%d RESULT frames refused for credit", d)
	}
	if tx.results[0] != vlen/per || tx.results[1] != vlen/per {
		t.Fatalf("RESULT frames per rank %v, want %d each (no resends)", tx.results, vlen/per)
	}
}

// TestRelayForwardsHoleWithoutCredit: the parent's first RESULT frame is
// lost and the next ones fill the ranks' receive windows above the hole,
// so the ranks grant no credit but the room they keep for the frame that
// closes it. When the parent resends that frame, the leaf must take it and
// forward it, new to its outputs, into that room: it used to wait for
// credit, refuse the frame from its parent (NO_CREDIT), and the whole
// ALLREDUCE hung (fat-tree, 5% loss).
func TestRelayForwardsHoleWithoutCredit(t *testing.T) {
	const (
		per   = 363
		above = 20 // frames sent above the hole
		vlen  = per * 64
	)
	key := parser.OpKey{Job: 4, Group: 1, Op: 1, OpGen: 1}
	e, tx, now := relayLeaf(t, key, vlen, per, 64)
	vals := make([]byte, 4*per)
	result := func(pid, first uint32) []byte {
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: tx.PortMAC(2), Src: relayParentMAC},
			Class: parser.ClassResult, Op: key, SrcEP: 901, DstEP: 103, PacketID: pid, First: first, Stream: 31}, nil,
			parser.Group{Format: parser.FormatFP32, Count: per, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// What a rank's window says when it is full above the hole at 0: no
	// interval, less than a frame of bytes (stream.RecvWindow.Credits).
	rankFull := func(r int) []byte {
		p := parser.Progress{Op: key, SrcEP: uint16(1 + r), DstEP: uint16(200 + r), Stream: uint16(20 + r),
			Committed: 0, IntervalCredits: 0, ByteCredits: 742, Flags: parser.ProgressFlagResult, NHoles: 1}
		p.Holes[0] = parser.Hole{Start: 0, End: per}
		b := make([]byte, parser.EthLen+p.Len())
		if _, err := p.Encode(b, parser.Eth{Dst: tx.PortMAC(r), Src: [][6]byte{rank0, rank1}[r]}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := uint32(1); i <= above; i++ {
		now += 1000
		e.HandleData(now, 2, result(i+1, i*per), tx)
	}
	if tx.results != [2]int{above, above} {
		t.Fatalf("RESULT frames forwarded above the hole %v, want %d each", tx.results, above)
	}
	now += 1000
	for r := range 2 {
		e.HandleProgress(now, r, rankFull(r), tx)
	}
	refused := e.Metrics().Drops[DropNoCredit].Load()
	now += 1000
	e.HandleData(now, 2, result(1, 0), tx) // the lost frame, resent
	if d := e.Metrics().Drops[DropNoCredit].Load() - refused; d != 0 {
		t.Fatalf("the leaf refused the frame that closes its outputs' hole for credit (%d)", d)
	}
	if want := uint32((above + 1) * per); tx.resEnd != [2]uint32{want, want} {
		t.Fatalf("ranks hold %v contiguous elements, want %d each: the hole's frame was not forwarded", tx.resEnd, want)
	}
}

// TestResultOwedTimesOut: a leaf whose parent acknowledged its partials and
// then died (no RESULT ever comes back) fails on its RESULT_IN stream
// after 1.5 x Timeout of silence, naming what it handed on, though its
// ranks have more to send: a persistent collective's leaf, whose vector is
// every invocation's, otherwise waited for ever, resting, and its ranks
// were never told.
func TestResultOwedTimesOut(t *testing.T) {
	const per = 363
	key := parser.OpKey{Job: 3, Group: 1, Op: 8, OpGen: 1}
	e, tx, now := relayLeaf(t, key, 4*per, per, 8)
	vals := make([]byte, 4*per)
	for i := range 2 {
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: tx.PortMAC(i), Src: [][6]byte{rank0, rank1}[i]},
			Class: parser.ClassData, Op: key, SrcEP: uint16(1 + i), DstEP: uint16(100 + i), PacketID: 1, First: 0, Stream: uint16(10 + i),
			Flags: parser.FlagPush}, nil, // an invocation's end: the ranks rest (6.1)
			parser.Group{Format: parser.FormatFP32, Count: per, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		e.HandleData(now, i, f, tx)
	}
	e.Flush(now, tx)
	// The parent acknowledges the leaf's partial [0, 363): nothing is
	// left to resend, so only the RESULT_IN clock can notice it died.
	p := parser.Progress{Op: key, SrcEP: 900, DstEP: 102, Stream: 30, PacketID: 1, Committed: per, IntervalCredits: 64, ByteCredits: 64 * 1514}
	b := make([]byte, parser.EthLen+p.Len())
	if _, err := p.Encode(b, parser.Eth{Dst: tx.PortMAC(2), Src: relayParentMAC}); err != nil {
		t.Fatal(err)
	}
	e.HandleProgress(now, 2, b, tx)
	e.Tick(now, tx) // a worker ticks every millisecond: the clock starts now
	tick := func(to int64) {
		for ; now < to; now += int64(time.Millisecond) {
			if now < to-int64(5*time.Millisecond) {
				now = to - int64(5*time.Millisecond)
			}
			e.Tick(now, tx)
		}
	}
	start := now
	tick(start + int64(90*time.Minute) - int64(time.Second))
	if s, _ := e.Status(key); s.State != parser.StateActive {
		t.Fatalf("before 1.5 x Timeout: %+v, want ACTIVE", s)
	}
	tick(start + int64(90*time.Minute) + int64(time.Second))
	s, _ := e.Status(key)
	var te *ContributorTimeoutError
	if s.State != parser.StateFailed || s.FailCause != parser.FailTimeout || s.MissingStream != 31 || s.MissingFrom != 0 ||
		!errors.As(s.Err, &te) || te.To != per {
		t.Fatalf("after 1.5 x Timeout: %+v (err %v), want FAILED, TIMEOUT on RESULT_IN stream 31 from 0, missing [0, %d)", s, s.Err, per)
	}
}

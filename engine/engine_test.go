package engine

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// sink is a dataplane.Sender that copies every frame into one reusable
// buffer, as the dataplane's TX batch does, and remembers the last one per
// port.
type sink struct {
	buf    [parser.EthLen + parser.MTUJumbo]byte
	last   map[int][]byte
	sent   int
	keep   bool
	frames [][]byte
	ports  []int // the port of each kept frame
	// SendRef: how often it was called; byRef keeps references until
	// flushRefs.
	refSends int
	byRef    bool
	refs     [][]byte
	refPorts []int
	// down makes sink a dataplane.LinkReporter: these ports' links are
	// without carrier, since downSince.
	down      map[int]bool
	downSince time.Time
}

// PortLink implements dataplane.LinkReporter.
func (s *sink) PortLink(port int) (string, dataplane.LinkState, time.Time) {
	if s.down[port] {
		return fmt.Sprintf("p%d", port+1), dataplane.LinkNoCarrier, s.downSince
	}
	return fmt.Sprintf("p%d", port+1), dataplane.LinkUp, time.Time{}
}

func (s *sink) Send(port int, frame []byte) bool {
	copy(s.buf[:], frame)
	s.sent++
	if s.keep {
		s.frames = append(s.frames, append([]byte(nil), frame...))
		s.ports = append(s.ports, port)
	}
	return true
}

// SendRef makes sink a dataplane.RefSender: like Send, unless byRef, when
// it keeps the frame itself (as the dataplane's TX batch does) until
// flushRefs copies what the frames hold then.
func (s *sink) SendRef(port int, frame []byte) bool {
	s.refSends++
	if !s.byRef {
		return s.Send(port, frame)
	}
	s.refs = append(s.refs, frame)
	s.refPorts = append(s.refPorts, port)
	return true
}

// flushRefs is the dataplane's flush for byRef: the frames are read now.
func (s *sink) flushRefs() {
	for i, f := range s.refs {
		s.Send(s.refPorts[i], f)
	}
	s.refs, s.refPorts = s.refs[:0], s.refPorts[:0]
}

func (s *sink) PortMAC(port int) [6]byte { return [6]byte{2, 0, 0, 0, byte(port), 1} }
func (s *sink) NumPorts() int            { return 4 }

var (
	rank0 = [6]byte{2, 0x4b, 0, 0, 0, 2}
	rank1 = [6]byte{2, 0x4b, 0, 0, 1, 2}
)

// rig is a SINGLE operation with two rank contributors (ports 0, 1) and an
// ALLREDUCE result to both, driven directly through the engine.
type rig struct {
	e     *Engine
	tx    *sink
	key   parser.OpKey
	data  [2][]byte // DATA frames, rewritten in place per position
	prog  [2][]byte // PROGRESS for the RESULT_OUT streams
	next  uint32
	pid   uint32
	now   int64
	count uint32
	vlen  uint32
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// singleSpec is the rig's operation: a SINGLE ALLREDUCE of two ranks on
// ports 0 and 1, a 64-frame window of elems elements at MTU mtu.
func singleSpec(key parser.OpKey, acc kulisch.Policy, vlen uint32, mtu int, elems uint32) Spec {
	spec := Spec{Op: key, Role: parser.RoleSingle, Collective: parser.CollAllReduce, VectorLen: vlen, MTU: mtu,
		WindowIntervals: 64, ReplayDepth: 64, WindowBytes: 64 * (parser.EthLen + mtu), WindowElements: elems, MaxTerms: 2,
		Timeout: time.Hour,
		Bindings: []Binding{
			{Kind: parser.KindContributor, Rank: true, Stream: 10, LocalEP: 100, PeerEP: 1, Port: 0, PeerMAC: rank0},
			{Kind: parser.KindContributor, Rank: true, Stream: 11, LocalEP: 101, PeerEP: 2, Port: 1, PeerMAC: rank1},
			{Kind: parser.KindResultOut, Rank: true, Stream: 20, LocalEP: 200, PeerEP: 1, Port: 0, PeerMAC: rank0},
			{Kind: parser.KindResultOut, Rank: true, Stream: 21, LocalEP: 201, PeerEP: 2, Port: 1, PeerMAC: rank1},
		}}
	if acc == kulisch.KulischFixed {
		spec.Tuple = kulisch.Tuple{Input: kulisch.FP32, Acc: acc, Partial: kulisch.KULISCH, Output: kulisch.FP32}
		spec.KulischWidth = 280
	} else {
		spec.Tuple = kulisch.Tuple{Input: kulisch.FP32, Acc: acc, Partial: kulisch.FP32, Output: kulisch.FP32}
	}
	return spec
}

func newRig(tb testing.TB, acc kulisch.Policy, vlen uint32) *rig {
	return newRigOn(tb, New(Config{Logger: quiet()}), parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 1}, acc, vlen)
}

// newRigOn stages and commits the rig's operation under key on engine e.
func newRigOn(tb testing.TB, e *Engine, key parser.OpKey, acc kulisch.Policy, vlen uint32) *rig {
	spec := singleSpec(key, acc, vlen, 1500, 8192)
	r := &rig{e: e, tx: &sink{}, key: key, now: 1e9, count: 363, vlen: vlen}
	if err := r.e.Stage(r.now, &spec, 4); err != nil {
		tb.Fatal(err)
	}
	if err := r.e.Commit(r.now, key); err != nil {
		tb.Fatal(err)
	}
	vals := make([]parser.Group, 1)
	for i := range 2 {
		v := make([]byte, 4*r.count)
		for k := range int(r.count) {
			binary.LittleEndian.PutUint32(v[4*k:], math.Float32bits(float32(k)*0.5+float32(i)))
		}
		vals[0] = parser.Group{Format: parser.FormatFP32, Count: uint16(r.count), Values: v}
		mac := [][6]byte{rank0, rank1}[i]
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: r.tx.PortMAC(i), Src: mac}, Class: parser.ClassData,
			Op: key, SrcEP: uint16(1 + i), DstEP: uint16(100 + i), PacketID: 1, First: 0, Stream: uint16(10 + i)}, nil, vals...)
		if err != nil {
			tb.Fatal(err)
		}
		r.data[i] = f
		p := parser.Progress{Op: key, SrcEP: uint16(1 + i), DstEP: uint16(200 + i), Stream: uint16(20 + i),
			IntervalCredits: 64, ByteCredits: 64 * 1514, Flags: parser.ProgressFlagResult}
		pb := make([]byte, parser.EthLen+p.Len())
		if _, err := p.Encode(pb, parser.Eth{Dst: r.tx.PortMAC(i), Src: mac}); err != nil {
			tb.Fatal(err)
		}
		r.prog[i] = pb
	}
	return r
}

// step feeds one DATA frame from each rank at the next position and the
// ranks' PROGRESS for the RESULT frames that completed.
func (r *rig) step() {
	r.pid++
	r.now += 1000
	for i := range 2 {
		h := parser.DataHeader(r.data[i][parser.HdrOff:parser.DataBodyOff])
		h.SetPacketID(r.pid)
		h.SetFirst(r.next)
		if r.next+r.count == r.vlen {
			h.SetFlags(parser.FlagLast)
		}
		r.e.HandleData(r.now, i, r.data[i], r.tx)
	}
	r.next += r.count
	for i := range 2 {
		p := parser.ProgressHeader(r.prog[i][parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
		p.SetCommitted(r.next)
		r.e.HandleProgress(r.now, i, r.prog[i], r.tx)
	}
}

func TestDataPathAllocs(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		r := newRig(t, acc, 1<<30)
		for range 100 { // warm up: fill the ring and replay once
			r.step()
		}
		m := r.e.Metrics()
		before := m.FramesSent[parser.ClassResult].Load()
		if a := alloctest.PerRun(2000, r.step); a != 0 {
			t.Fatalf("%v: %v allocations per DATA+DATA+PROGRESS+PROGRESS", acc, a)
		}
		if m.FramesSent[parser.ClassResult].Load() == before || m.Drops[DropNoCredit].Load() != 0 {
			t.Fatalf("%v: the loop did not exercise emission: sent %d no_credit %d", acc, m.FramesSent[parser.ClassResult].Load()-before, m.Drops[DropNoCredit].Load())
		}
		// Each step's two PROGRESS ACK exactly what it emitted.
		s, _ := r.e.Status(r.key)
		if s.Completed != r.next {
			t.Fatalf("%v: completed %d, fed %d", acc, s.Completed, r.next)
		}
	}
}

// TestSingleResultValues checks the numbers a two-rank SINGLE produces
// against a float64 oracle (exact for these small values).
// TestReplayFramesSentByReference: RESULT frames leave from the send
// windows' replay buffers without a copy (SendRef), and what those buffers
// hold when the batch is flushed is still the exact result.
func TestReplayFramesSentByReference(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		r := newRig(t, acc, 726)
		r.tx.keep, r.tx.byRef = true, true
		r.step()
		r.tx.flushRefs()
		r.step()
		r.tx.flushRefs()
		if r.tx.refSends < 4 { // 2 RESULT frames to each of 2 ranks
			t.Fatalf("%v: %d frames sent by reference, want every RESULT frame (4)", acc, r.tx.refSends)
		}
		checkSingleResult(t, acc, r)
	}
}

func TestSingleResultValues(t *testing.T) {
	for _, acc := range []kulisch.Policy{kulisch.FP32Arrival, kulisch.KulischFixed} {
		r := newRig(t, acc, 726)
		r.tx.keep = true
		r.step()
		r.step()
		checkSingleResult(t, acc, r)
	}
}

// checkSingleResult checks the RESULT frames r sent rank 1 against a
// float64 oracle (exact for these small values) after r fed a whole 726
// element vector, and that the operation completed.
func checkSingleResult(t *testing.T, acc kulisch.Policy, r *rig) {
	t.Helper()
	got := map[uint32]float32{}
	for _, f := range r.tx.frames {
		if parser.Class(f[parser.CWOff+1]) != parser.ClassResult || [6]byte(f[0:6]) != rank1 {
			continue
		}
		var d parser.Data
		if err := d.Decode(f, parser.Limits{VectorLen: 726}); err != nil {
			t.Fatal(err)
		}
		if d.Op != r.key {
			t.Fatalf("%v: RESULT of operation %v, want %v", acc, d.Op, r.key)
		}
		var it parser.GroupIter
		for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
			for k := 0; k < int(g.Count); k++ {
				got[g.First+uint32(k)] = math.Float32frombits(binary.LittleEndian.Uint32(g.Values[4*k:]))
			}
		}
	}
	if len(got) != 726 {
		t.Fatalf("%v: %d result elements", acc, len(got))
	}
	for i := uint32(0); i < 726; i++ {
		k := float64(i % 363)
		want := float32(k*0.5 + k*0.5 + 1)
		if got[i] != want {
			t.Fatalf("%v: element %d = %v, want %v", acc, i, got[i], want)
		}
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateComplete {
		t.Fatalf("%v: state %v", acc, s.State)
	}
}

// TestAdmission checks the binding checks and counted drops.
func TestAdmission(t *testing.T) {
	r := newRig(t, kulisch.KulischFixed, 1<<20)
	m := r.e.Metrics()
	f := append([]byte(nil), r.data[0]...)
	r.e.HandleData(r.now, 1, f, r.tx) // wrong port
	if m.Drops[DropWrongPort].Load() != 1 {
		t.Fatal("wrong port not dropped")
	}
	copy(f[6:12], rank1[:])
	r.e.HandleData(r.now, 0, f, r.tx) // wrong MAC
	if m.Drops[DropWrongMAC].Load() != 1 {
		t.Fatal("wrong MAC not dropped")
	}
	g := append([]byte(nil), r.data[0]...)
	parser.DataHeader(g[parser.HdrOff:]).SetOp(parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 2})
	r.e.HandleData(r.now, 0, g, r.tx) // other generation
	if m.Drops[DropUnknownOperation].Load() != 1 {
		t.Fatal("stale generation not dropped")
	}
	h := append([]byte(nil), r.data[0]...)
	parser.DataHeader(h[parser.HdrOff:]).SetStream(99)
	r.e.HandleData(r.now, 0, h, r.tx)
	if m.Drops[DropUnknownStream].Load() != 1 {
		t.Fatal("unknown stream not dropped")
	}
	res := append([]byte(nil), r.data[0]...)
	res[parser.CWOff+1] = byte(parser.ClassResult) // a RESULT is never an input
	r.e.HandleData(r.now, 0, res, r.tx)
	if m.Drops[DropUnknownStream].Load() != 2 {
		t.Fatal("RESULT taken as input")
	}
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	if m.Duplicates.Load() != 1 || m.Frames[parser.ClassData].Load() != 1 {
		t.Fatalf("duplicate: dups %d frames %d", m.Duplicates.Load(), m.Frames[parser.ClassData].Load())
	}
	ch := append([]byte(nil), r.data[0]...)
	ch[len(ch)-1] ^= 0x40 // same Packet ID, other bytes
	r.e.HandleData(r.now, 0, ch, r.tx)
	if m.Drops[DropOverlap].Load() != 1 {
		t.Fatal("changed bytes under an old Packet ID accepted")
	}
	ov := append([]byte(nil), r.data[0]...)
	parser.DataHeader(ov[parser.HdrOff:]).SetPacketID(77) // overlap under a new Packet ID
	r.e.HandleData(r.now, 0, ov, r.tx)
	if m.Drops[DropOverlap].Load() != 2 {
		t.Fatal("overlap under a new Packet ID accepted")
	}
}

func benchData(b *testing.B, acc kulisch.Policy) { benchDataTx(b, acc, false) }

// benchBatch is the steps (4 frames each: 2 DATA, 2 PROGRESS) per batch in
// the benchmarks: about the batches prismd sees in part 3 of make bench.
const benchBatch = 16

// benchDataTx: with byRef the sink takes RESULT frames by reference, as
// the dataplane's worker does (dataplane.RefSender), and drops them at the
// end of the step instead of copying each into its TX batch. The engine
// runs as in prismd: coalescing, flushed every benchBatch steps.
func benchDataTx(b *testing.B, acc kulisch.Policy, byRef bool) {
	r := newRig(b, acc, 1<<31)
	r.e.cfg.CoalesceProgress = true
	r.tx.byRef = byRef
	b.ReportAllocs()
	b.SetBytes(int64(2 * len(r.data[0])))
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r.step()
		if i++; i%benchBatch == 0 {
			r.e.Flush(r.now, r.tx)
		}
		r.tx.refs, r.tx.refPorts = r.tx.refs[:0], r.tx.refPorts[:0]
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "dataframes/s")
}

// BenchmarkAbsorbFP32ArrivalByRef: BenchmarkAbsorbFP32Arrival with RESULT
// frames sent by reference (what a prismd worker does): the copy per
// RESULT frame it saves.
func BenchmarkAbsorbFP32ArrivalByRef(b *testing.B) { benchDataTx(b, kulisch.FP32Arrival, true) }

// BenchmarkAbsorbFP32Arrival: one step = two DATA frames of 363 FP32 each
// accumulated, one RESULT frame encoded per rank, two PROGRESS handled.
func BenchmarkAbsorbFP32Arrival(b *testing.B) { benchData(b, kulisch.FP32Arrival) }

// BenchmarkAbsorbKulischFixed: as above with exact Kulisch-280 accumulators
// and a single final rounding to FP32.
func BenchmarkAbsorbKulischFixed(b *testing.B) { benchData(b, kulisch.KulischFixed) }

// BenchmarkCopyFrame is the floor: copying the two DATA frames.
func BenchmarkCopyFrame(b *testing.B) {
	r := newRig(b, kulisch.FP32Arrival, 1<<20)
	var dst [2][1514]byte
	b.ReportAllocs()
	b.SetBytes(int64(2 * len(r.data[0])))
	for b.Loop() {
		copy(dst[0][:], r.data[0])
		copy(dst[1][:], r.data[1])
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "dataframes/s")
}

func TestMetricsExposition(t *testing.T) {
	r := newRig(t, kulisch.KulischFixed, 1<<20)
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	r.e.HandleData(r.now, 0, r.data[0], r.tx) // duplicate
	r.e.HandleData(r.now, 1, r.data[0], r.tx) // wrong port
	want := `
# HELP prismd_engine_duplicates_total Identical duplicate DATA/RESULT frames acknowledged and not applied.
# TYPE prismd_engine_duplicates_total counter
prismd_engine_duplicates_total 1
# HELP prismd_engine_progress_sent_total PROGRESS frames sent.
# TYPE prismd_engine_progress_sent_total counter
prismd_engine_progress_sent_total 2
`
	if err := testutil.CollectAndCompare(r.e.Metrics(), strings.NewReader(want), "prismd_engine_duplicates_total", "prismd_engine_progress_sent_total"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(r.e.Metrics()); err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %+v", err, problems)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(r.e.Metrics()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "prismd_engine_drops_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "wrong_port" && m.GetCounter().GetValue() != 1 {
					t.Fatalf("wrong_port = %v", m.GetCounter().GetValue())
				}
			}
		}
	}
}

// TestFailedContextAnswersPeers: once a context has FAILED (a contributor
// went silent), a rank still sending DATA gets PROGRESS status FAILED at
// once, naming its stream, instead of silence until its own timer fires. A
// frame that does not come from the binding's peer gets no answer (the
// context never reflects to an unverified source) and is counted as what
// is wrong with it.
func TestFailedContextAnswersPeers(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.tx.keep = true
	r.e.HandleData(r.now, 0, r.data[0], r.tx) // rank 0 contributes, rank 1 never does
	r.now += int64(2 * time.Hour)
	r.e.Tick(r.now, r.tx)
	if s, _ := r.e.Status(r.key); s.State != parser.StateFailed {
		t.Fatalf("state %v after the contributor timeout, want FAILED", s.State)
	}
	r.tx.frames = nil
	h := parser.DataHeader(r.data[0][parser.HdrOff:parser.DataBodyOff])
	h.SetPacketID(2)
	h.SetFirst(363)
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	if len(r.tx.frames) != 1 {
		t.Fatalf("%d frames answered a DATA frame to a FAILED context, want one PROGRESS", len(r.tx.frames))
	}
	var p parser.Progress
	if err := p.Decode(r.tx.frames[0], parser.Limits{VectorLen: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if p.Status != parser.ProgressStatusFailed || p.Stream != 10 || p.PacketID != 2 || [6]byte(r.tx.frames[0][0:6]) != rank0 {
		t.Fatalf("answer %+v to %x, want status FAILED for stream 10 packet 2 to rank 0", p, r.tx.frames[0][0:6])
	}
	m := r.e.Metrics()
	notActive, wrongMAC := m.Drops[DropNotActive].Load(), m.Drops[DropWrongMAC].Load()
	spoof := append([]byte(nil), r.data[0]...)
	copy(spoof[6:12], rank1[:])
	r.tx.frames = nil
	r.e.HandleData(r.now, 0, spoof, r.tx)
	if len(r.tx.frames) != 0 || m.Drops[DropWrongMAC].Load() != wrongMAC+1 || m.Drops[DropNotActive].Load() != notActive {
		t.Fatalf("spoofed frame: %d answers, wrong_mac +%d, not_active +%d; want no answer, wrong_mac +1",
			len(r.tx.frames), m.Drops[DropWrongMAC].Load()-wrongMAC, m.Drops[DropNotActive].Load()-notActive)
	}
}

// TestFailureAnnouncedToEveryPeer: a context that FAILS tells the peer of
// every stream it receives (both contributors here, also rank 0, which has
// sent everything and would otherwise wait for a RESULT that never comes)
// with PROGRESS status FAILED, three times, failAnnounceGap apart, and
// nothing more; COMPLETE then reports the cause and the stream it failed
// on, not the stream furthest behind.
func TestFailureAnnouncedToEveryPeer(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.tx.keep = true
	r.e.HandleData(r.now, 0, r.data[0], r.tx) // rank 0 contributes, rank 1 never does
	r.tx.frames = nil
	// Timeouts are checked on ticks; 1 ms ticks as a worker runs them.
	announced := map[int64]int{}
	start := r.now
	for r.now < start+int64(2*time.Hour)+int64(200*time.Millisecond) {
		r.now += int64(time.Millisecond)
		if r.now < start+int64(2*time.Hour)-int64(time.Millisecond) {
			r.now = start + int64(2*time.Hour) - int64(time.Millisecond) // skip the quiet part
		}
		r.e.Tick(r.now, r.tx)
		for _, f := range r.tx.frames {
			var p parser.Progress
			if err := p.Decode(f, parser.Limits{VectorLen: 1 << 20}); err != nil {
				t.Fatalf("announcement does not decode: %v", err)
			}
			want := map[uint16][6]byte{10: rank0, 11: rank1}
			if p.Status != parser.ProgressStatusFailed || p.Flags&parser.ProgressFlagResult != 0 || want[p.Stream] != [6]byte(f[0:6]) {
				t.Fatalf("frame %+v to %x: want PROGRESS FAILED on stream 10 to rank 0 or 11 to rank 1", p, f[0:6])
			}
			announced[r.now]++
		}
		r.tx.frames = nil
	}
	var at []int64
	for now, n := range announced {
		if n != 2 {
			t.Fatalf("%d frames at one announcement, want one per contributor (2)", n)
		}
		at = append(at, now)
	}
	slices.Sort(at)
	if len(at) != failAnnouncements {
		t.Fatalf("announced at %v, want %d announcements", at, failAnnouncements)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap < failAnnounceGap || gap > failAnnounceGap+int64(time.Millisecond) {
			t.Fatalf("announcements %v apart, want %v", time.Duration(gap), time.Duration(failAnnounceGap))
		}
	}
	s, _ := r.e.Status(r.key)
	// Both ranks are silent past the timeout (rank 0 sent only its first
	// frame): either is the stream, with its own first missing element.
	if from := map[uint16]uint32{10: 363, 11: 0}; s.State != parser.StateFailed || s.FailCause != parser.FailTimeout ||
		(s.MissingStream != 10 && s.MissingStream != 11) || s.MissingFrom != from[s.MissingStream] {
		t.Fatalf("status %+v, want FAILED, cause TIMEOUT, on stream 10 from 363 or 11 from 0", s)
	}
	r.e.Tick(r.now+int64(SnapshotInterval), r.tx) // publishes the introspection snapshot
	if ops := r.e.Snapshot().Ops; len(ops) != 1 || ops[0].FailCause != "TIMEOUT" || ops[0].Error == "" {
		t.Fatalf("snapshot %+v, want the FAILED context with cause TIMEOUT and its error", ops)
	}
}

// TestTimeoutOnDownLink: a contributor silent past the timeout fails the
// context with cause TIMEOUT while its port is up, and LINK_DOWN, naming
// the port and how long it has been down, while the port has no carrier:
// the AM then blames the link, not a rank that may be alive.
func TestTimeoutOnDownLink(t *testing.T) {
	for _, down := range []bool{false, true} {
		r := newRig(t, kulisch.FP32Arrival, 363) // one frame per rank
		if down {
			r.tx.down = map[int]bool{1: true}
			r.tx.downSince = time.Now().Add(-3 * time.Second)
		}
		h := parser.DataHeader(r.data[0][parser.HdrOff:parser.DataBodyOff])
		h.SetFlags(parser.FlagLast)
		r.e.HandleData(r.now, 0, r.data[0], r.tx) // rank 0 contributes all; rank 1 never does
		for end := r.now + int64(time.Hour) + int64(10*time.Millisecond); r.now < end; r.now += int64(time.Millisecond) {
			if r.now < end-int64(20*time.Millisecond) {
				r.now = end - int64(20*time.Millisecond)
			}
			r.e.Tick(r.now, r.tx)
		}
		s, _ := r.e.Status(r.key)
		want, text := parser.FailTimeout, "silent for"
		if down {
			want, text = parser.FailLinkDown, "port p2 toward it has been without carrier for 3"
		}
		if s.State != parser.StateFailed || s.FailCause != want || s.MissingStream != 11 || s.MissingFrom != 0 ||
			s.Err == nil || !strings.Contains(s.Err.Error(), text) {
			t.Fatalf("port down %v: status %+v (err %v), want FAILED, %v on stream 11 from 0, error with %q", down, s, s.Err, want, text)
		}
		if down && strings.Contains(s.Err.Error(), "p1") {
			t.Fatalf("error %q names rank 0's port, whose link is up", s.Err)
		}
		// prismd_engine_failures_total{cause} tells them apart.
		if err := testutil.CollectAndCompare(r.e.Metrics(), strings.NewReader(fmt.Sprintf(`
# HELP prismd_engine_failures_total Operations that FAILED here, by Failure Cause (TIMEOUT: a peer was silent; LINK_DOWN: the port toward it was down; PEER_FAILED: a peer reported the failure; INTERNAL).
# TYPE prismd_engine_failures_total counter
prismd_engine_failures_total{cause="INTERNAL"} 0
prismd_engine_failures_total{cause="LINK_DOWN"} %d
prismd_engine_failures_total{cause="PEER_FAILED"} 0
prismd_engine_failures_total{cause="TIMEOUT"} %d
`, map[bool]int{true: 1}[down], map[bool]int{false: 1}[down])), "prismd_engine_failures_total"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSwitchPeerOnDownLinkGetsPlainTimeout: a switch peer (a contributor
// without the RANK flag) gets Timeout + Timeout/4 while its port is up, so
// that the node next to a silent rank fails first and names it; behind a
// port that is down it gets the plain Timeout, since nothing beyond the
// link can fail first and tell this node. With the longer bound a root
// whose subtree's link went down failed after a rank's own RESULT bound
// (Timeout + 1 s at 5 s) had fired, and the ranks on this side heard no
// cause from their leaf.
func TestSwitchPeerOnDownLinkGetsPlainTimeout(t *testing.T) {
	key := parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 1}
	for _, down := range []bool{false, true} {
		spec := singleSpec(key, kulisch.FP32Arrival, 363, 1500, 8192)
		spec.Role = parser.RoleRoot
		spec.Bindings[1].Rank, spec.Bindings[3].Rank = false, false // stream 11 and its RESULT: a switch on port 1
		r := &rig{e: New(Config{Logger: quiet()}), tx: &sink{}, key: key, now: 1e9}
		if err := r.e.Stage(r.now, &spec, 4); err != nil {
			t.Fatal(err)
		}
		if err := r.e.Commit(r.now, key); err != nil {
			t.Fatal(err)
		}
		// Rank 0 contributes the whole vector; the switch on port 1 sends nothing.
		v := make([]byte, 4*363)
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: r.tx.PortMAC(0), Src: rank0}, Class: parser.ClassData,
			Op: key, SrcEP: 1, DstEP: 100, PacketID: 1, First: 0, Stream: 10, Flags: parser.FlagLast},
			nil, parser.Group{Format: parser.FormatFP32, Count: 363, Values: v})
		if err != nil {
			t.Fatal(err)
		}
		r.e.HandleData(r.now, 0, f, r.tx)
		if down {
			r.tx.down = map[int]bool{1: true}
			r.tx.downSince = time.Now().Add(-3 * time.Second)
		}
		t0 := r.now
		state := func(at time.Duration) (parser.OpState, parser.FailCause) {
			r.e.Tick(t0+int64(at), r.tx)
			s, _ := r.e.Status(key)
			return s.State, s.FailCause
		}
		timeout := spec.Timeout
		if st, _ := state(timeout - time.Second); st != parser.StateActive {
			t.Fatalf("port down %v: %v a second before the timeout, want ACTIVE", down, st)
		}
		st, cause := state(timeout + time.Second)
		if down {
			if st != parser.StateFailed || cause != parser.FailLinkDown {
				t.Fatalf("port down: %v %v a second after the timeout, want FAILED LINK_DOWN", st, cause)
			}
			continue
		}
		if st != parser.StateActive {
			t.Fatalf("port up: %v a second after the timeout, want ACTIVE until Timeout + Timeout/4", st)
		}
		if st, _ := state(timeout + timeout/4 - time.Second); st != parser.StateActive {
			t.Fatalf("port up: %v a second before Timeout + Timeout/4, want ACTIVE", st)
		}
		if st, cause := state(timeout + timeout/4 + time.Second); st != parser.StateFailed || cause != parser.FailTimeout {
			t.Fatalf("port up: %v %v after Timeout + Timeout/4, want FAILED TIMEOUT", st, cause)
		}
	}
}

// TestProgressAheadIgnored: a PROGRESS on a RESULT stream that
// acknowledges elements never sent (here the whole vector, COMPLETE) is
// counted progress_ahead and changes nothing: the genuine PROGRESS that
// follow still acknowledge what was sent, and the operation runs on.
// Accepted, it moved the watermark to the end and every genuine PROGRESS
// after it was stale, so the stream timed out blaming a healthy rank.
func TestProgressAheadIgnored(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 363*8)
	for range 3 {
		r.step()
	}
	m := r.e.Metrics()
	forged := append([]byte(nil), r.prog[1]...)
	h := parser.ProgressHeader(forged[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
	h.SetCommitted(r.vlen)
	r.e.HandleProgress(r.now, 1, forged, r.tx)
	if got := m.Drops[DropProgressAhead].Load(); got != 1 {
		t.Fatalf("progress_ahead drops %d, want 1", got)
	}
	for range 5 {
		r.step()
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateComplete || m.Drops[DropStaleProgress].Load() != 0 {
		t.Fatalf("after the forged PROGRESS: state %v, stale_progress %d; want COMPLETE, 0", s.State, m.Drops[DropStaleProgress].Load())
	}
}

// TestCompletedMeansAcknowledged: Completed Elements (protocol 5.2) counts
// what was produced and acknowledged: a RESULT range sent but not yet
// acknowledged by both ranks is not completed.
func TestCompletedMeansAcknowledged(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 363*4)
	for i := range 2 {
		r.e.HandleData(r.now, i, r.data[i], r.tx) // both ranks' first frame: [0, 363) produced
	}
	if s, _ := r.e.Status(r.key); s.Completed != 0 {
		t.Fatalf("completed %d with no RESULT acknowledged, want 0", s.Completed)
	}
	ack := func(i int, to uint32) {
		p := parser.ProgressHeader(r.prog[i][parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
		p.SetCommitted(to)
		r.e.HandleProgress(r.now, i, r.prog[i], r.tx)
	}
	ack(0, 363)
	if s, _ := r.e.Status(r.key); s.Completed != 0 {
		t.Fatalf("completed %d with rank 1's RESULT unacknowledged, want 0", s.Completed)
	}
	ack(1, 363)
	if s, _ := r.e.Status(r.key); s.Completed != 363 {
		t.Fatalf("completed %d once both ranks acknowledged [0, 363), want 363", s.Completed)
	}
}

// TestRankInexactRejected: an ACCUMULATION_INEXACT terminal frame on a
// rank's CONTRIBUTOR binding is bad_format, answered INVALID, and changes
// nothing: the operation completes with both ranks' values. Taken, one
// forged frame ended every rank's collective as inexact.
func TestRankInexactRejected(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 363*4)
	r.tx.keep = true
	m := r.e.Metrics()
	f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: r.tx.PortMAC(0), Src: rank0}, Class: parser.ClassData,
		Op: r.key, SrcEP: 1, DstEP: 100, PacketID: 77, Stream: 10, Flags: parser.FlagLast | parser.FlagInexact}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.e.HandleData(r.now, 0, f, r.tx)
	var p parser.Progress
	if len(r.tx.frames) != 1 || p.Decode(r.tx.frames[0], parser.Limits{VectorLen: r.vlen}) != nil ||
		p.Status != parser.ProgressStatusInvalid || p.PacketID != 77 || m.Drops[DropBadFormat].Load() != 1 {
		t.Fatalf("answer %+v (%d frames), bad_format %d; want one PROGRESS INVALID for packet 77, bad_format 1", p, len(r.tx.frames), m.Drops[DropBadFormat].Load())
	}
	r.tx.keep = false
	for range 4 {
		r.step()
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateComplete || s.Inexact {
		t.Fatalf("state %v inexact %v, want COMPLETE and exact", s.State, s.Inexact)
	}
}

// TestPeerFailedFailsOp: a RESULT receiver (here a rank) that answers
// FAILED, UNKNOWN_OPERATION or INVALID ends the operation at once, and the
// error names the stream and the peer; a PROGRESS from anyone else changes
// nothing.
func TestPeerFailedFailsOp(t *testing.T) {
	for _, st := range []parser.ProgressStatus{parser.ProgressStatusFailed, parser.ProgressStatusUnknownOperation, parser.ProgressStatusInvalid} {
		r := newRig(t, kulisch.FP32Arrival, 1<<20)
		spoof := append([]byte(nil), r.prog[0]...)
		parser.ProgressHeader(spoof[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen]).SetStatus(st)
		copy(spoof[6:12], rank1[:]) // not rank 0's MAC
		r.e.HandleProgress(r.now, 0, spoof, r.tx)
		if s, _ := r.e.Status(r.key); s.State != parser.StateActive {
			t.Fatalf("%v from a stranger: state %v, want ACTIVE", st, s.State)
		}
		p := append([]byte(nil), r.prog[0]...)
		parser.ProgressHeader(p[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen]).SetStatus(st)
		r.e.HandleProgress(r.now, 0, p, r.tx)
		s, _ := r.e.Status(r.key)
		if s.State != parser.StateFailed || s.Err == nil || !strings.Contains(s.Err.Error(), "stream 20") ||
			!strings.Contains(s.Err.Error(), mac(rank0)) {
			t.Fatalf("%v from rank 0: state %v, err %v; want FAILED naming stream 20 and rank 0", st, s.State, s.Err)
		}
		if s.FailCause != parser.FailPeer || s.MissingStream != 20 {
			t.Fatalf("%v from rank 0: cause %v on stream %d, want PEER_FAILED on stream 20", st, s.FailCause, s.MissingStream)
		}
	}
}

// TestFailureOriginCarried: the PROGRESS FAILED a context announces says
// where its failure began (section 7, Failure Cause and Failure Hops): its
// own cause with 0 hops when it failed on its own, the cause a FAILED peer
// announced with one hop more (saturating at 255) when it failed on that,
// nothing when that peer said nothing; COMPLETE's cause stays PEER_FAILED.
func TestFailureOriginCarried(t *testing.T) {
	type tc struct {
		name      string
		st        parser.ProgressStatus
		cause     parser.FailCause
		hops      uint8
		wantCause parser.FailCause
		wantHops  uint8
	}
	for _, c := range []tc{
		{"FAILED LINK_DOWN 1 hop", parser.ProgressStatusFailed, parser.FailLinkDown, 1, parser.FailLinkDown, 2},
		{"FAILED TIMEOUT at the peer", parser.ProgressStatusFailed, parser.FailTimeout, 0, parser.FailTimeout, 1},
		{"FAILED saturates", parser.ProgressStatusFailed, parser.FailTimeout, 255, parser.FailTimeout, 255},
		{"FAILED without a cause", parser.ProgressStatusFailed, parser.FailNone, 0, parser.FailNone, 0},
		{"UNKNOWN_OPERATION", parser.ProgressStatusUnknownOperation, 0, 0, parser.FailPeer, 0},
		{"INVALID", parser.ProgressStatusInvalid, 0, 0, parser.FailPeer, 0},
	} {
		r := newRig(t, kulisch.FP32Arrival, 1<<20)
		r.tx.keep = true
		p := append([]byte(nil), r.prog[0]...)
		h := parser.ProgressHeader(p[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
		h.SetStatus(c.st)
		h.SetFailCause(c.cause)
		h.SetFailHops(c.hops)
		r.e.HandleProgress(r.now, 0, p, r.tx)
		s, _ := r.e.Status(r.key)
		if s.State != parser.StateFailed || s.FailCause != parser.FailPeer {
			t.Fatalf("%s: state %v cause %v, want FAILED with PEER_FAILED", c.name, s.State, s.FailCause)
		}
		n := 0
		for _, f := range r.tx.frames {
			var g parser.Progress
			if g.Decode(f, parser.Limits{VectorLen: 1 << 20}) != nil || g.Status != parser.ProgressStatusFailed {
				continue
			}
			n++
			if g.FailCause != c.wantCause || g.FailHops != c.wantHops {
				t.Fatalf("%s: announced cause %v hops %d, want %v hops %d", c.name, g.FailCause, g.FailHops, c.wantCause, c.wantHops)
			}
		}
		if n == 0 {
			t.Fatalf("%s: no PROGRESS FAILED announced", c.name)
		}
		if c.cause != parser.FailNone && !strings.Contains(s.Err.Error(), c.cause.String()) {
			t.Fatalf("%s: error %q does not name the cause where the failure began", c.name, s.Err)
		}
	}
	// A context that fails on its own timeout announces TIMEOUT, 0 hops.
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.tx.keep = true
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	r.tx.frames = nil
	r.now += int64(2 * time.Hour)
	r.e.Tick(r.now, r.tx)
	var g parser.Progress
	if len(r.tx.frames) == 0 || g.Decode(r.tx.frames[0], parser.Limits{VectorLen: 1 << 20}) != nil ||
		g.Status != parser.ProgressStatusFailed || g.FailCause != parser.FailTimeout || g.FailHops != 0 {
		t.Fatalf("own timeout: %d frames, first %+v; want PROGRESS FAILED with TIMEOUT, 0 hops", len(r.tx.frames), g)
	}
}

// TestUnknownOperationAnswered: DATA for an identity the engine does not
// know (here a newer generation of a staged operation) is answered with
// PROGRESS UNKNOWN_OPERATION to its source, out of its ingress port, with
// the stream, packet and endpoints of the frame, at most unknownBurst at
// once and one per unknownEvery after that; a frame from a multicast
// source gets no answer. Every one is counted as an unknown_operation drop
// and nothing else changes; a malformed one (reserved bits set) is counted
// under its parser reason.
func TestUnknownOperationAnswered(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.tx.keep = true
	stale := append([]byte(nil), r.data[0]...)
	id := parser.OpIdentity(stale[parser.HdrOff:])
	k := id.Key()
	k.OpGen++
	id.SetKey(k)
	h := parser.DataHeader(stale[parser.HdrOff:parser.DataBodyOff])
	m := r.e.Metrics()
	drops := m.Drops[DropUnknownOperation].Load()
	r.e.HandleData(r.now, 1, stale, r.tx)
	if len(r.tx.frames) != 1 {
		t.Fatalf("%d frames answered DATA of an unknown operation, want one PROGRESS", len(r.tx.frames))
	}
	var p parser.Progress
	if err := p.Decode(r.tx.frames[0], parser.Limits{VectorLen: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if p.Status != parser.ProgressStatusUnknownOperation || p.Op != k || p.Stream != h.Stream() || p.PacketID != h.PacketID() ||
		p.SrcEP != h.DstEP() || p.DstEP != h.SrcEP() || p.Flags&parser.ProgressFlagResult != 0 ||
		[6]byte(r.tx.frames[0][0:6]) != rank0 || r.tx.ports[0] != 1 {
		t.Fatalf("answer %+v to %x on port %d, want UNKNOWN_OPERATION for the frame's identity, stream %d, packet %d to rank 0 on port 1",
			p, r.tx.frames[0][0:6], r.tx.ports[0], h.Stream(), h.PacketID())
	}
	// The bucket: unknownBurst in all at one instant, then one more per unknownEvery.
	for range 100 {
		r.e.HandleData(r.now, 1, stale, r.tx)
	}
	if len(r.tx.frames) != unknownBurst {
		t.Fatalf("%d answers to 101 frames at one instant, want %d", len(r.tx.frames), unknownBurst)
	}
	r.now += int64(3*unknownEvery + unknownEvery/2)
	for range 10 {
		r.e.HandleData(r.now, 1, stale, r.tx)
	}
	if len(r.tx.frames) != unknownBurst+3 {
		t.Fatalf("%d answers after 3.5 refill periods, want %d", len(r.tx.frames), unknownBurst+3)
	}
	r.now += int64(time.Second)
	n := len(r.tx.frames)
	mcast := append([]byte(nil), stale...)
	mcast[6] |= 1
	reserved := append([]byte(nil), stale...)
	parser.DataHeader(reserved[parser.HdrOff:parser.DataBodyOff]).SetFlags(0x80)
	r.e.HandleData(r.now, 1, mcast, r.tx)
	r.e.HandleData(r.now, 1, reserved, r.tx)
	if len(r.tx.frames) != n {
		t.Fatalf("a multicast source or reserved flags got %d answers, want none", len(r.tx.frames)-n)
	}
	// The multicast source is a well-formed frame of an unknown
	// operation (not answered); the reserved flags break D6 before any
	// state rule (protocol section 6): reserved_nonzero, not
	// unknown_operation.
	if got := m.Drops[DropUnknownOperation].Load() - drops; got != 1+100+10+1 {
		t.Fatalf("unknown_operation drops +%d, want %d", got, 1+100+10+1)
	}
	if got := m.DecodeDrops[reasonIndex(t, "reserved_nonzero")].Load(); got != 1 {
		t.Fatalf("reserved_nonzero drops %d, want 1 (the reserved flags)", got)
	}
	if s, _ := r.e.Status(r.key); s.State != parser.StateActive {
		t.Fatalf("the staged operation is %v, want ACTIVE", s.State)
	}
}

// TestKeepAliveProgress: a receiver sends a timer-driven PROGRESS (Packet ID
// 0, status OK, its window's state) on every incomplete stream that heard
// none for Timeout/4 (docs/protocol.md section 7), and no more often: the
// clock of a stream restarts with each PROGRESS it gets.
func TestKeepAliveProgress(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20) // Timeout 1 h: keepalive every 15 min
	r.tx.keep = true
	t0 := r.now
	quarter := int64(15 * time.Minute)
	keepalives := func(at int64) map[uint16]parser.Progress {
		t.Helper()
		r.tx.frames = nil
		r.now = at
		r.e.Tick(r.now, r.tx)
		got := map[uint16]parser.Progress{}
		for _, f := range r.tx.frames {
			var p parser.Progress
			if err := p.Decode(f, parser.Limits{VectorLen: 1 << 20}); err != nil {
				t.Fatalf("tick sent a frame that is not PROGRESS: %v", err)
			}
			want := map[uint16][6]byte{10: rank0, 11: rank1}[p.Stream]
			if p.PacketID != 0 || p.Status != parser.ProgressStatusOK || p.Flags != 0 || [6]byte(f[0:6]) != want || p.IntervalCredits == 0 {
				t.Fatalf("keepalive %+v to %x: want Packet ID 0, OK, DATA, credits, to the stream's rank", p, f[0:6])
			}
			got[p.Stream] = p
		}
		return got
	}
	if got := keepalives(t0 + quarter - int64(time.Second)); len(got) != 0 {
		t.Fatalf("keepalives %v before a quarter timeout", got)
	}
	if got := keepalives(t0 + quarter); len(got) != 2 || got[10].Committed != 0 {
		t.Fatalf("keepalives %v at a quarter timeout, want one to each silent rank, committed 0", got)
	}
	if got := keepalives(t0 + quarter + int64(time.Second)); len(got) != 0 {
		t.Fatalf("keepalives %v a second after the last", got)
	}
	r.now = t0 + 20*int64(time.Minute)
	r.e.HandleData(r.now, 0, r.data[0], r.tx) // rank 0 sends (and is answered)
	r.e.Flush(r.now, r.tx)
	if got := keepalives(t0 + 2*quarter); len(got) != 1 || got[11].Stream != 11 {
		t.Fatalf("keepalives %v at half the timeout, want rank 1's only (rank 0 was answered 10 min ago)", got)
	}
	if got := keepalives(t0 + 20*int64(time.Minute) + quarter); len(got) != 1 || got[10].Committed != r.count {
		t.Fatalf("keepalives %v, want rank 0's, committed %d", got, r.count)
	}
}

// TestStaleProgressIgnored: a PROGRESS whose Committed Element is below one
// already heard on the stream is counted as stale_progress and changes
// nothing: not the credits, not the frames held (docs/protocol.md 7).
func TestStaleProgressIgnored(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	for range 4 {
		r.step() // RESULT frames out, rank 0's PROGRESS for them in
	}
	m := r.e.Metrics()
	newer := append([]byte(nil), r.prog[0]...)
	ph := parser.ProgressHeader(newer[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
	if ph.Committed() == 0 {
		t.Fatal("the rig's PROGRESS acknowledged nothing")
	}
	old := append([]byte(nil), newer...)
	oh := parser.ProgressHeader(old[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
	oh.SetCommitted(ph.Committed() - 1)
	oh.SetIntervalCredits(0) // were it applied, the RESULT stream would stop
	oh.SetByteCredits(0)
	admitted := m.Frames[parser.ClassProgress].Load()
	sw := r.e.ops[r.key].outs[0].sw
	ci, cb := sw.Credits()
	r.e.HandleProgress(r.now, 0, old, r.tx)
	if ci2, cb2 := sw.Credits(); ci2 != ci || cb2 != cb {
		t.Fatalf("credits %d/%d after a stale PROGRESS of none, were %d/%d: it was applied", ci2, cb2, ci, cb)
	}
	if got := m.Drops[DropStaleProgress].Load(); got != 1 {
		t.Fatalf("stale_progress drops %d, want 1", got)
	}
	if m.Frames[parser.ClassProgress].Load() != admitted {
		t.Fatal("a stale PROGRESS was counted as admitted")
	}
}

// reasonIndex is the index of a parser reason in Metrics.DecodeDrops.
func reasonIndex(t *testing.T, reason string) int {
	t.Helper()
	for i, n := range parser.Reasons {
		if n == reason {
			return i
		}
	}
	t.Fatalf("no parser reason %q", reason)
	return 0
}

// TestMalformedUnknownOperation: the frame rules come before the state
// rules (protocol section 6 and 7): DATA and PROGRESS frames that break a
// frame rule are counted under the parser's reason and answered with
// nothing, also when their identity names no context. Before, DATA of
// Group Count 0 (without INEXACT or EXT) for an unknown identity was
// counted as unknown_operation and answered with PROGRESS.
func TestMalformedUnknownOperation(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.tx.keep = true
	m := r.e.Metrics()
	unknown := func(f []byte) []byte {
		f = append([]byte(nil), f...)
		id := parser.OpIdentity(f[parser.HdrOff:])
		k := id.Key()
		k.Op += 7
		id.SetKey(k)
		return f
	}
	empty := unknown(r.data[0])
	h := parser.DataHeader(empty[parser.HdrOff:parser.DataBodyOff])
	h.SetGroups(0)
	h.SetCount(0)
	h.SetBodyLen(0)
	r.e.HandleData(r.now, 0, empty[:parser.DataBodyOff], r.tx)
	prog := unknown(r.prog[0])
	parser.ProgressHeader(prog[parser.HdrOff:]).SetStatus(9)
	r.e.HandleProgress(r.now, 0, prog, r.tx)
	if len(r.tx.frames) != 0 {
		t.Fatalf("%d answers to malformed frames, want none", len(r.tx.frames))
	}
	if n := m.Drops[DropUnknownOperation].Load(); n != 0 {
		t.Fatalf("unknown_operation drops %d, want 0: malformed frames are counted by their rule", n)
	}
	if a, b := m.DecodeDrops[reasonIndex(t, "bad_count")].Load(), m.DecodeDrops[reasonIndex(t, "out_of_range")].Load(); a != 1 || b != 1 {
		t.Fatalf("bad_count %d (DATA with no group, no INEXACT or EXT), out_of_range %d (PROGRESS status 9); want 1 and 1", a, b)
	}
	// The same frames well formed are unknown_operation, and the DATA is
	// answered.
	r.e.HandleData(r.now, 0, unknown(r.data[0]), r.tx)
	r.e.HandleProgress(r.now, 0, unknown(r.prog[0]), r.tx)
	if n := m.Drops[DropUnknownOperation].Load(); n != 2 || len(r.tx.frames) != 1 {
		t.Fatalf("well formed: unknown_operation %d, answers %d; want 2 and 1", n, len(r.tx.frames))
	}
}

// TestSnapshotExpiry: a STAGED context (its AM died mid-setup) shows how
// long it has been staged and when the node retires it, not 'active 0ms'
// alone; an ACTIVE one that is not resting shows neither.
func TestSnapshotExpiry(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	key := parser.OpKey{Job: 1, Group: 1, Op: 2, OpGen: 1}
	spec := singleSpec(key, kulisch.FP32Arrival, 1<<20, 1500, 8192)
	spec.Timeout = 5 * time.Second
	if err := r.e.Stage(r.now, &spec, 4); err != nil {
		t.Fatal(err)
	}
	r.now += int64(12 * time.Second)
	r.e.Tick(r.now, r.tx)
	var staged, active *OpSnapshot
	for i := range r.e.Snapshot().Ops {
		o := &r.e.Snapshot().Ops[i]
		switch o.Op {
		case 2:
			staged = o
		case 1:
			active = o
		}
	}
	if staged == nil || active == nil {
		t.Fatalf("snapshot %+v", r.e.Snapshot().Ops)
	}
	if staged.State != "STAGED" || staged.StateMs != 12000 || staged.ExpiresInMs != 63000 {
		t.Errorf("staged: state %s for %d ms, expires in %d ms; want STAGED for 12000 ms, expiring in 3 x 5 s + 60 s - 12 s = 63000 ms",
			staged.State, staged.StateMs, staged.ExpiresInMs)
	}
	if active.StateMs != 0 || active.ExpiresInMs != 0 {
		t.Errorf("active: state %d ms, expires in %d ms; want neither", active.StateMs, active.ExpiresInMs)
	}
}

// TestFrozenGapExcused: with FrozenAfter set, a gap between two Ticks
// longer than it (this process did not run) does not count as the peers'
// silence: a context whose rank went quiet just before the gap is still
// ACTIVE after it, and fails a Timeout of real silence later. Without
// FrozenAfter the same gap fails it at once.
func TestFrozenGapExcused(t *testing.T) {
	for _, frozen := range []bool{true, false} {
		e := New(Config{Logger: quiet()})
		if frozen {
			e.cfg.FrozenAfter = time.Second
		}
		r := newRigOn(t, e, parser.OpKey{Job: 1, Group: 1, Op: 1, OpGen: 1}, kulisch.FP32Arrival, 1<<20)
		r.step()
		r.e.Tick(r.now, r.tx)
		r.now += int64(2 * time.Hour) // stopped for two Timeouts
		r.e.Tick(r.now, r.tx)
		s, _ := r.e.Status(r.key)
		if frozen != (s.State == parser.StateActive) {
			t.Fatalf("FrozenAfter %v: after the gap %v, want ACTIVE only when the gap is excused", frozen, s.State)
		}
		if !frozen {
			continue
		}
		// Ticking again (no gap over FrozenAfter) for a Timeout.
		for end := r.now + int64(time.Hour) + int64(time.Second); r.now < end; {
			r.now += int64(500 * time.Millisecond)
			r.e.Tick(r.now, r.tx)
		}
		if s, _ := r.e.Status(r.key); s.State != parser.StateFailed || s.FailCause != parser.FailTimeout {
			t.Fatalf("a Timeout of real silence after the gap: %+v, want FAILED, TIMEOUT", s)
		}
	}
}

// TestSilentReceiverNamed: a RESULT_OUT receiver that never acknowledges
// fails the operation at the timeout with an error naming it as an
// inbound timeout names its sender: endpoint, MAC and port.
func TestSilentReceiverNamed(t *testing.T) {
	e := New(Config{Logger: quiet()})
	key := parser.OpKey{Job: 3, Group: 1, Op: 1, OpGen: 1}
	spec := singleSpec(key, kulisch.FP32Arrival, 363, 1500, 8192)
	spec.Timeout = 100 * time.Millisecond
	tx := &sink{}
	now := int64(1e9)
	if err := e.Stage(now, &spec, 4); err != nil {
		t.Fatal(err)
	}
	if err := e.Commit(now, key); err != nil {
		t.Fatal(err)
	}
	for i, mac := range [][6]byte{rank0, rank1} {
		g := parser.Group{Format: parser.FormatFP32, Count: 363, Values: make([]byte, 4*363)}
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: tx.PortMAC(i), Src: mac}, Class: parser.ClassData,
			Op: key, SrcEP: uint16(1 + i), DstEP: uint16(100 + i), PacketID: 1, Flags: parser.FlagLast, Stream: uint16(10 + i)}, nil, g)
		if err != nil {
			t.Fatal(err)
		}
		e.HandleData(now, i, f, tx)
	}
	// Only rank 1 acknowledges its RESULT.
	p := parser.Progress{Op: key, SrcEP: 2, DstEP: 201, Stream: 21, PacketID: 1, Committed: 363,
		IntervalCredits: 64, ByteCredits: 64 * 1514, Flags: parser.ProgressFlagResult | parser.ProgressFlagComplete}
	pb := make([]byte, parser.EthLen+p.Len())
	if _, err := p.Encode(pb, parser.Eth{Dst: tx.PortMAC(1), Src: rank1}); err != nil {
		t.Fatal(err)
	}
	e.HandleProgress(now, 1, pb, tx)
	for at := now; at <= now+int64(time.Second); at += int64(10 * time.Millisecond) {
		e.Tick(at, tx)
	}
	s, ok := e.Status(key)
	if !ok || s.State != parser.StateFailed || s.Err == nil {
		t.Fatalf("status %+v, want FAILED", s)
	}
	want := fmt.Sprintf("(peer endpoint 1, MAC %s, port 0)", net.HardwareAddr(rank0[:]))
	if msg := s.Err.Error(); !strings.Contains(msg, "RESULT_OUT stream 20") || !strings.Contains(msg, want) {
		t.Fatalf("error %q, want RESULT_OUT stream 20 and %s", msg, want)
	}
}

// TestSnapshotOnDemand: unread, the introspection snapshot is rebuilt once
// every UnwatchedSnapshotInterval, not every SnapshotInterval; a context
// that changes state (or comes, or goes) is in it at the next Tick
// whatever the interval; once read it is rebuilt every SnapshotInterval.
// (A switch resting 1024 persistent collectives spent a quarter of a core
// rebuilding a snapshot nobody read.)
func TestSnapshotOnDemand(t *testing.T) {
	r := newRig(t, kulisch.FP32Arrival, 1<<20)
	r.e.HandleData(r.now, 0, r.data[0], r.tx)
	r.e.Tick(r.now, r.tx)
	builds := func(d time.Duration) int {
		n, last := 0, r.e.snap.Load()
		for end := r.now + int64(d); r.now < end; {
			r.now += int64(time.Millisecond)
			r.e.Tick(r.now, r.tx)
			if s := r.e.snap.Load(); s != last {
				n, last = n+1, s
			}
		}
		return n
	}
	if n := builds(2 * UnwatchedSnapshotInterval); n != 2 {
		t.Fatalf("unread for %v: rebuilt %d times, want 2", 2*UnwatchedSnapshotInterval, n)
	}
	// A state change shows at the next Tick: the other contributor never
	// comes, so the context FAILS at its timeout.
	r.now += int64(2 * time.Hour)
	r.e.Tick(r.now, r.tx)
	if ops := r.e.snap.Load().Ops; len(ops) != 1 || ops[0].State != "FAILED" {
		t.Fatalf("the Tick that failed the context published %+v, want it FAILED", ops)
	}
	r.e.Remove(r.key)
	r.now += int64(time.Millisecond)
	r.e.Tick(r.now, r.tx)
	if ops := r.e.snap.Load().Ops; len(ops) != 0 {
		t.Fatalf("the Tick after the context was removed published %d contexts, want none", len(ops))
	}
	r.e.Snapshot() // someone looks
	if n := builds(time.Second); n < 9 || n > 10 {
		t.Fatalf("read: rebuilt %d times in 1 s, want every %v", n, SnapshotInterval)
	}
}

// BenchmarkTickMany: one worker's Tick, every 100 ms (the slow tick of a
// worker whose contexts rest), with 200 contexts installed, unread and
// read (a reader every tick keeps the snapshot rebuilt every
// SnapshotInterval, as every tick did before it was rebuilt on demand).
func BenchmarkTickMany(b *testing.B) {
	for _, read := range []bool{false, true} {
		b.Run(fmt.Sprint("read=", read), func(b *testing.B) {
			e := New(Config{Logger: quiet(), MaxOps: 256, MaxRingBytes: 1 << 40})
			var r *rig
			for i := range 200 {
				r = newRigOn(b, e, parser.OpKey{Job: 1, Group: 1, Op: uint16(i + 1), OpGen: 1}, kulisch.FP32Arrival, 1<<20)
			}
			now := r.now
			b.ReportAllocs()
			for b.Loop() {
				now += int64(100 * time.Millisecond)
				e.Tick(now, r.tx)
				if read {
					e.Snapshot()
				}
			}
		})
	}
}

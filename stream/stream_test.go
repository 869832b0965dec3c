package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// oracle is the naive model: a coverage bit per element and every accepted
// Packet ID with its range and hash.
type oracle struct {
	covered []bool
	pids    map[uint32][3]uint64 // first, end, hash
}

func newOracle(n uint32) *oracle {
	return &oracle{covered: make([]bool, n), pids: map[uint32][3]uint64{}}
}

// verdict is what a receiver with unlimited memory and credit decides.
func (o *oracle) verdict(pid, first, end uint32, hash uint64) Verdict {
	if end <= first || int(end) > len(o.covered) {
		return Invalid
	}
	if p, ok := o.pids[pid]; ok {
		if p == [3]uint64{uint64(first), uint64(end), hash} {
			return Duplicate
		}
		return Invalid
	}
	for i := first; i < end; i++ {
		if o.covered[i] {
			return Invalid
		}
	}
	return Accepted
}

func (o *oracle) accept(pid, first, end uint32, hash uint64) {
	o.pids[pid] = [3]uint64{uint64(first), uint64(end), hash}
	for i := first; i < end; i++ {
		o.covered[i] = true
	}
}

func (o *oracle) watermark() uint32 {
	for i, c := range o.covered {
		if !c {
			return uint32(i)
		}
	}
	return uint32(len(o.covered))
}

// holes returns the uncovered ranges in [watermark, highest covered end).
func (o *oracle) holes() []Hole {
	top := 0
	for i, c := range o.covered {
		if c {
			top = i + 1
		}
	}
	var hs []Hole
	for i := int(o.watermark()); i < top; {
		if o.covered[i] {
			i++
			continue
		}
		j := i
		for j < top && !o.covered[j] {
			j++
		}
		hs = append(hs, Hole{uint32(i), uint32(j)})
		i = j
	}
	return hs
}

type frameDesc struct {
	pid, first, end uint32
	hash            uint64
}

// TestRecvAgainstOracle feeds random frames, including conflicting
// overlaps, changed content and duplicates, in random order and compares
// every verdict, the watermark and the holes with the oracle. History is
// large enough that the window can verify every duplicate.
func TestRecvAgainstOracle(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		n := uint32(50 + rng.IntN(300))
		// A clean partition of the vector, plus noise frames.
		var frames []frameDesc
		pid := uint32(1)
		for at := uint32(0); at < n; {
			c := min(uint32(1+rng.IntN(20)), n-at)
			frames = append(frames, frameDesc{pid, at, at + c, rng.Uint64()})
			pid++
			at += c
		}
		clean := len(frames)
		for range rng.IntN(40) {
			f := frames[rng.IntN(clean)]
			switch rng.IntN(4) {
			case 0: // exact duplicate
			case 1: // changed bytes, same pid
				f.hash ^= 1
			case 2: // overlap under a new pid
				f.pid = pid
				pid++
				if f.end < n {
					f.end++
				}
			case 3: // old pid, other range
				if f.first > 0 {
					f.first--
				} else {
					f.end--
				}
			}
			frames = append(frames, f)
		}
		rng.Shuffle(len(frames), func(i, j int) { frames[i], frames[j] = frames[j], frames[i] })
		// Unbounded credit so that NoCredit never masks a verdict; the
		// window's other bounds are tested separately.
		r := NewRecvWindow(RecvConfig{VectorLen: n, Intervals: 4096, History: 4096})
		o := newOracle(n)
		var hs [MaxHoles]Hole
		for _, f := range frames {
			want := o.verdict(f.pid, f.first, f.end, f.hash)
			got := r.Admit(f.pid, f.first, f.end-f.first, 100, f.hash)
			if got != want {
				t.Fatalf("seed %d frame %+v: verdict %v, oracle %v", seed, f, got, want)
			}
			if got == Accepted {
				o.accept(f.pid, f.first, f.end, f.hash)
			}
			if r.Committed() != o.watermark() {
				t.Fatalf("seed %d: watermark %d, oracle %d", seed, r.Committed(), o.watermark())
			}
			wantH := o.holes()
			k := r.Holes(hs[:])
			if k != min(len(wantH), MaxHoles) {
				t.Fatalf("seed %d: %d holes, oracle %v", seed, k, wantH)
			}
			for i := 0; i < k; i++ {
				if hs[i] != wantH[i] {
					t.Fatalf("seed %d: hole %d = %v, oracle %v", seed, i, hs[i], wantH[i])
				}
			}
			r.Release(r.Committed())
		}
		if r.Done() != (o.watermark() == n) {
			t.Fatalf("seed %d: done %v, oracle watermark %d of %d", seed, r.Done(), o.watermark(), n)
		}
	}
}

func TestRecvBounds(t *testing.T) {
	// Interval bound: the frame at the watermark is always admissible;
	// out-of-order frames leave room for it.
	r := NewRecvWindow(RecvConfig{VectorLen: 100, Intervals: 3, Bytes: 1000, Elements: 40, MaxFrame: 100})
	if v := r.Admit(1, 10, 10, 100, 1); v != Accepted {
		t.Fatalf("out of order: %v", v)
	}
	if v := r.Admit(2, 30, 5, 100, 2); v != Accepted {
		t.Fatalf("second out of order: %v", v)
	}
	if v := r.Admit(3, 20, 5, 100, 3); v != NoCredit {
		t.Fatalf("third out of order must leave room for the watermark frame: %v", v)
	}
	// The interval left is the watermark frame's, which needs no credit:
	// none is advertised, so a sender that obeys credits sends nothing
	// Admit would refuse (protocol.md 7).
	if ci, cb := r.Credits(); ci != 0 || cb != 1000-200-100 {
		t.Fatalf("credits %d / %d bytes, want 0 / %d (the watermark frame's reserve withheld)", ci, cb, 1000-200-100)
	}
	if v := r.Admit(4, 0, 10, 100, 4); v != Accepted {
		t.Fatalf("watermark frame: %v", v)
	}
	if r.Committed() != 20 {
		t.Fatalf("committed %d", r.Committed())
	}
	// Committed data holds no interval credit: only [30,35) is pending,
	// above the hole [20,30) whose frame keeps its reserve.
	if ci, _ := r.Credits(); ci != 1 {
		t.Fatalf("interval credits %d, want 1", ci)
	}

	// Nothing released: the element window is based at 0, so [40, 41)
	// ends past 0+40.
	if v := r.Admit(8, 40, 1, 100, 8); v != NoCredit {
		t.Fatalf("unreleased element window: %v", v)
	}
	r.Release(20)
	if v := r.Admit(5, 20, 5, 100, 5); v != Accepted {
		t.Fatalf("after release: %v", v)
	}
	if v := r.Admit(7, 25, 5, 100, 7); v != Accepted {
		t.Fatalf("fill: %v", v)
	}
	if r.Committed() != 35 {
		t.Fatalf("committed %d", r.Committed())
	}
	// Element bound relative to the release point (35): end 76 > 75.
	r.Release(35)
	if v := r.Admit(6, 35, 41, 100, 6); v != NoCredit {
		t.Fatalf("element span: %v", v)
	}
	if v := r.Admit(6, 35, 40, 100, 6); v != Accepted {
		t.Fatalf("element span edge: %v", v)
	}
	// Byte bound.
	r2 := NewRecvWindow(RecvConfig{VectorLen: 100, Intervals: 10, Bytes: 250, MaxFrame: 100})
	if v := r2.Admit(1, 5, 1, 100, 1); v != Accepted {
		t.Fatal(v)
	}
	if v := r2.Admit(2, 7, 1, 51, 2); v != NoCredit {
		t.Fatalf("bytes: %v", v)
	}
	if v := r2.Admit(3, 0, 1, 150, 3); v != Accepted {
		t.Fatalf("watermark frame within the reserve: %v", v)
	}
	// Outside the vector.
	if v := r2.Admit(3, 99, 2, 1, 1); v != Invalid {
		t.Fatalf("range: %v", v)
	}
	// LAST alone is not completion.
	r3 := NewRecvWindow(RecvConfig{VectorLen: 10, Intervals: 4})
	r3.Admit(1, 5, 5, 1, 1)
	if r3.Done() {
		t.Fatal("done with a hole")
	}
	r3.Admit(2, 0, 5, 1, 2)
	if !r3.Done() {
		t.Fatal("not done")
	}
	// A stale duplicate below the watermark and beyond history is ACKed.
	r4 := NewRecvWindow(RecvConfig{VectorLen: 100, Intervals: 1, History: 1})
	for i := uint32(0); i < 10; i++ {
		if v := r4.Admit(i+1, i*10, 10, 1, uint64(i)); v != Accepted {
			t.Fatal(v)
		}
		r4.Release(r4.Committed())
	}
	if v := r4.Admit(1, 0, 10, 1, 0); v != Duplicate {
		t.Fatalf("stale: %v", v)
	}
	if v := r4.Admit(10, 90, 10, 1, 7); v != Invalid {
		t.Fatalf("changed bytes in history: %v", v)
	}
}

// link is a lossy, duplicating, reordering channel with delays.
type link struct {
	rng  *rand.Rand
	q    []msg
	loss float64
	dup  float64
}

type msg struct {
	at   int64
	data []byte
}

func (l *link) send(now int64, b []byte) {
	if l.rng.Float64() < l.loss {
		return
	}
	c := l.rng.IntN(2) + 1
	if l.rng.Float64() >= l.dup {
		c = 1
	}
	for range c {
		l.q = append(l.q, msg{now + int64(1e5+l.rng.IntN(3e6)), append([]byte(nil), b...)})
	}
}

func (l *link) recv(now int64) (out [][]byte) {
	k := 0
	for _, m := range l.q {
		if m.at <= now {
			out = append(out, m.data)
		} else {
			l.q[k] = m
			k++
		}
	}
	l.q = l.q[:k]
	l.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// putTestFrame writes the test links' 20-byte frame: Packet ID, range and
// 8 bytes of content derived from the range.
func putTestFrame(b []byte, pid, first, count uint32) {
	binary.BigEndian.PutUint32(b[0:], pid)
	binary.BigEndian.PutUint32(b[4:], first)
	binary.BigEndian.PutUint32(b[8:], count)
	binary.BigEndian.PutUint64(b[12:], uint64(first)*31+uint64(count))
}

func parseTestFrame(f []byte) (pid, first, count uint32, hash uint64) {
	return binary.BigEndian.Uint32(f[0:]), binary.BigEndian.Uint32(f[4:]), binary.BigEndian.Uint32(f[8:]), Hash(f[12:20])
}

// answer is the test receiver's reply to frame pid with verdict v: it
// releases rw with a lag first, as an engine waiting on another
// contributor would.
func answer(rw *RecvWindow, rng *rand.Rand, pid uint32, v Verdict) []byte {
	rw.Release(rw.Committed() - min(rw.Committed(), uint32(rng.IntN(50))))
	return progressMsg(rw, pid, v)
}

// recvProgress ends a step of the test receiver (a complete stream is
// released whole) and returns the PROGRESS that arrive at the sender now.
func recvProgress(back *link, rw *RecvWindow, now int64) []progressFields {
	if rw.Done() {
		rw.Release(rw.cfg.VectorLen)
	}
	var ms []progressFields
	for _, p := range back.recv(now) {
		ms = append(ms, parseProgressMsg(p))
	}
	return ms
}

// progressMsg is the test links' PROGRESS: what rw answers to frame pid
// with verdict v.
func progressMsg(rw *RecvWindow, pid uint32, v Verdict) []byte {
	var hs [MaxHoles]Hole
	k := rw.Holes(hs[:])
	ci, cb := rw.Credits()
	p := make([]byte, 17+8*k)
	p[16+8*k] = byte(v)
	binary.BigEndian.PutUint32(p[0:], pid)
	binary.BigEndian.PutUint32(p[4:], rw.Committed())
	binary.BigEndian.PutUint32(p[8:], uint32(ci))
	binary.BigEndian.PutUint32(p[12:], cb)
	for i := 0; i < k; i++ {
		binary.BigEndian.PutUint32(p[16+8*i:], hs[i].Start)
		binary.BigEndian.PutUint32(p[20+8*i:], hs[i].End)
	}
	return p
}

type progressFields struct {
	pid, committed uint32
	holes          []Hole
	ci, cb         int
	v              Verdict
}

func parseProgressMsg(p []byte) progressFields {
	k := (len(p) - 17) / 8
	m := progressFields{pid: binary.BigEndian.Uint32(p[0:]), committed: binary.BigEndian.Uint32(p[4:]),
		ci: int(binary.BigEndian.Uint32(p[8:])), cb: int(binary.BigEndian.Uint32(p[12:])), v: Verdict(p[len(p)-1])}
	for i := 0; i < k; i++ {
		m.holes = append(m.holes, Hole{binary.BigEndian.Uint32(p[16+8*i:]), binary.BigEndian.Uint32(p[20+8*i:])})
	}
	return m
}

// TestSendRecvLossy runs a sender and a receiver over lossy links in both
// directions and checks, against the oracle, that every element is applied
// exactly once and that both ends finish.
func TestSendRecvLossy(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := uint32(2000 + rng.IntN(5000))
		loss := rng.Float64() * 0.3
		fwd := &link{rng: rng, loss: loss, dup: 0.2}
		back := &link{rng: rng, loss: loss, dup: 0.2}
		sw := NewSendWindow(SendConfig{Name: "test", ReplayDepth: 16, FrameSize: 64, Intervals: 12, Bytes: 12 * 64, Elements: 600, Deadline: -1})
		rw := NewRecvWindow(RecvConfig{VectorLen: n, Intervals: 12, Bytes: 12 * 64, Elements: 600, MaxFrame: 64})
		applied := make([]int, n)
		o := newOracle(n)
		next := uint32(0)
		now := int64(0)
		for step := 0; ; step++ {
			now += 1e6
			if step > 200000 {
				t.Fatalf("seed %d: no progress: committed %d/%d", seed, rw.Committed(), n)
			}
			// Send new frames while credit allows.
			for next < n {
				c := min(uint32(1+rng.IntN(40)), n-next)
				buf, pid, ok := sw.Reserve(now, next, c, 20)
				if !ok {
					break
				}
				putTestFrame(buf, pid, next, c)
				fwd.send(now, sw.Commit(now, 20))
				next += c
			}
			for {
				f, ok := sw.NextRetransmit(now)
				if !ok {
					break
				}
				fwd.send(now, f)
			}
			for _, f := range fwd.recv(now) {
				pid, first, c, h := parseTestFrame(f)
				want := o.verdict(pid, first, first+c, h)
				v := rw.Admit(pid, first, c, len(f), h)
				switch v {
				case Accepted:
					if want != Accepted {
						t.Fatalf("seed %d: accepted, oracle %v", seed, want)
					}
					o.accept(pid, first, first+c, h)
					for i := first; i < first+c; i++ {
						applied[i]++
					}
				case Duplicate:
					if want != Duplicate {
						t.Fatalf("seed %d: duplicate, oracle %v", seed, want)
					}
				case NoCredit:
					if want != Accepted {
						t.Fatalf("seed %d: no credit, oracle %v", seed, want)
					}
				default:
					t.Fatalf("seed %d: %v for a clean stream", seed, v)
				}
				back.send(now, answer(rw, rng, pid, v))
			}
			for _, m := range recvProgress(back, rw, now) {
				sw.OnProgress(now, m.pid, m.committed, m.holes, m.ci, m.cb)
				if m.v == NoCredit {
					sw.OnRejected(m.pid)
				}
			}
			if rw.Done() && sw.Idle() && next == n {
				break
			}
		}
		for i, a := range applied {
			if a != 1 {
				t.Fatalf("seed %d: element %d applied %d times", seed, i, a)
			}
		}
	}
}

func TestSendSilentAndBackoff(t *testing.T) {
	sw := NewSendWindow(SendConfig{Name: "parent stream 9", ReplayDepth: 4, FrameSize: 64, RTO: 10, MaxRTO: 40, Deadline: 1000})
	if _, _, ok := sw.Reserve(0, 100, 50, 10); !ok {
		t.Fatal("reserve")
	}
	sw.Commit(0, 10)
	var times []int64
	for now := int64(1); now <= 200; now++ {
		if _, ok := sw.NextRetransmit(now); ok {
			times = append(times, now)
		}
	}
	want := []int64{10, 30, 70, 110, 150, 190} // 10, +20, +40, then capped at 40
	if len(times) != len(want) {
		t.Fatalf("retransmit times %v, want %v", times, want)
	}
	for i := range want {
		if times[i] != want[i] {
			t.Fatalf("retransmit times %v, want %v", times, want)
		}
	}
	if err := sw.Check(1000); err != nil {
		t.Fatalf("early: %v", err)
	}
	err := sw.Check(1001)
	var se *SilentError
	if !errors.As(err, &se) || !errors.Is(err, ErrPeerSilent) || se.From != 100 || se.To != 150 || se.Stream != "parent stream 9" {
		t.Fatalf("got %v", err)
	}
	sw.OnProgress(1001, 1, 150, nil, 4, 1000)
	if !sw.Idle() || sw.Check(5000) != nil {
		t.Fatal("not released")
	}
}

func TestSendHoleRetransmitAndCredits(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 8, FrameSize: 64, Intervals: 3, RTO: 1000, MinRetransmitGap: 10})
	for i := uint32(0); i < 3; i++ {
		if _, _, ok := sw.Reserve(0, i*10, 10, 10); !ok {
			t.Fatalf("reserve %d", i)
		}
		sw.Commit(0, 10)
	}
	if _, _, ok := sw.Reserve(0, 30, 10, 10); ok {
		t.Fatal("interval credit not enforced")
	}
	// Frame 3 [20,30) arrived: holes [0,20); 2 credits free; frames 1,2 are
	// behind pid 3? No: pid 3 is the newest, so nothing is in flight after it.
	sw.OnProgress(20, 3, 0, []Hole{{0, 20}}, 2, 1000)
	got := 0
	for {
		f, ok := sw.NextRetransmit(20)
		if !ok {
			break
		}
		got++
		_ = f
	}
	if got != 2 {
		t.Fatalf("hole retransmits %d, want 2", got)
	}
	if _, _, ok := sw.Reserve(20, 30, 10, 10); !ok {
		t.Fatal("credit after progress")
	}
	sw.Commit(20, 10)
	if _, _, ok := sw.Reserve(20, 40, 10, 10); !ok {
		t.Fatal("second credit")
	}
	sw.Commit(20, 10)
	if _, _, ok := sw.Reserve(20, 50, 10, 10); ok {
		t.Fatal("credits exhausted by frames in flight")
	}
	sw.OnProgress(30, 5, 50, nil, 3, 1000)
	if !sw.Idle() {
		t.Fatal("not idle")
	}
}

func TestAllocs(t *testing.T) {
	r := NewRecvWindow(RecvConfig{VectorLen: 1 << 30, Intervals: 64, Bytes: 1 << 20, Elements: 1 << 16})
	var hs [MaxHoles]Hole
	pid, at := uint32(1), uint32(0)
	a := alloctest.PerRun(1000, func() {
		// Out of order pair, then release.
		r.Admit(pid+1, at+10, 10, 100, 2)
		r.Admit(pid, at, 10, 100, 1)
		r.Admit(pid, at, 10, 100, 1)
		r.Holes(hs[:])
		r.Release(r.Committed())
		pid += 2
		at += 20
	})
	if a != 0 {
		t.Fatalf("recv allocs %v", a)
	}
	sw := NewSendWindow(SendConfig{ReplayDepth: 64, FrameSize: 1514})
	holes := []Hole{{5, 6}}
	now := int64(0)
	first := uint32(0)
	a = alloctest.PerRun(1000, func() {
		now += 1e6
		buf, pid, ok := sw.Reserve(now, first, 10, 100)
		if !ok {
			t.Fatal("reserve")
		}
		buf[0] = byte(pid)
		sw.Commit(now, 100)
		sw.OnProgress(now, pid, first, holes, 10, 10000)
		for {
			if _, ok := sw.NextRetransmit(now + 1e9); !ok {
				break
			}
		}
		sw.OnProgress(now, pid, first+10, nil, 10, 10000)
		first += 10
	})
	if a != 0 {
		t.Fatalf("send allocs %v", a)
	}
}

func BenchmarkRecvAdmit(b *testing.B) {
	r := NewRecvWindow(RecvConfig{VectorLen: ^uint32(0), Intervals: 64})
	b.ReportAllocs()
	at := uint32(0)
	for i := 0; b.Loop(); i++ {
		r.Admit(uint32(i+1), at, 363, 1500, uint64(i))
		r.Release(r.Committed())
		at += 363
		if at > 1<<31 {
			r = NewRecvWindow(RecvConfig{VectorLen: ^uint32(0), Intervals: 64})
			at = 0
		}
	}
}

// TestSendOutOfOrderRelease: a relay sends frames in arrival order, not
// element order; a cumulative ACK must free every covered slot, not only a
// prefix of Packet IDs.
func TestSendOutOfOrderRelease(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 3, FrameSize: 64})
	for _, first := range []uint32{20, 10, 0} {
		buf, pid, ok := sw.Reserve(0, first, 10, 10)
		if !ok {
			t.Fatalf("reserve %d", first)
		}
		buf[0] = byte(first)
		sw.Commit(0, 10)
		_ = pid
	}
	if sw.Free() != 0 {
		t.Fatal("window should be full")
	}
	sw.OnProgress(1, 3, 20, nil, 3, 1000) // [0,20) acknowledged: pids 2 and 3
	if sw.Free() != 2 {
		t.Fatalf("free %d after ACK of the two newest frames, want 2", sw.Free())
	}
	f, ok := sw.Frame(1)
	if !ok || f[0] != 20 {
		t.Fatal("the remaining frame lost its bytes")
	}
	if from, to := sw.Outstanding(); from != 20 || to != 30 {
		t.Fatalf("outstanding [%d,%d)", from, to)
	}
	// The freed slots are reused without disturbing the kept frame.
	buf, _, _ := sw.Reserve(1, 30, 10, 10)
	buf[0] = 30
	sw.Commit(1, 10)
	if f, _ := sw.Frame(1); f[0] != 20 {
		t.Fatal("slot reuse overwrote an unacknowledged frame")
	}
}

// TestSlowReceiverNoSpuriousRetransmit: a lossless peer whose queue delays
// every answer far beyond the configured RTO (one frame served per 2 ms, 64
// in flight: up to 128 ms) must cost no retransmission at all. Before the
// RTT estimator and the single-probe timer, every frame timed out after
// 20 ms and was resent, which doubled the peer's queue (the tree stall).
func TestSlowReceiverNoSpuriousRetransmit(t *testing.T) {
	const n = 20000
	sw := NewSendWindow(SendConfig{ReplayDepth: 64, FrameSize: 64, Intervals: 64, RTO: 20e6, MaxRTO: 200e6, Deadline: -1})
	rw := NewRecvWindow(RecvConfig{VectorLen: n, Intervals: 64, MaxFrame: 64})
	type fr struct{ pid, first, count uint32 }
	var queue []fr // the receiver's FIFO input
	next := uint32(0)
	busyUntil := int64(0)
	var applied [n]int
	for now := int64(0); !(rw.Done() && sw.Idle()); now += 100e3 {
		if now > 60e9 {
			t.Fatalf("stalled at %d", rw.Committed())
		}
		for next < n {
			c := min(uint32(40), n-next)
			if _, pid, ok := sw.Reserve(now, next, c, 20); ok {
				sw.Commit(now, 20)
				queue = append(queue, fr{pid, next, c})
				next += c
				continue
			}
			break
		}
		for {
			f, ok := sw.NextRetransmit(now)
			if !ok {
				break
			}
			_ = f
			t.Fatalf("retransmission at %d ms with a lossless peer (SRTT %d ms, RTO %d ms)", now/1e6, sw.SRTT()/1e6, sw.RTO()/1e6)
		}
		if len(queue) > 0 && now >= busyUntil {
			f := queue[0]
			queue = queue[1:]
			busyUntil = now + 2e6
			if v := rw.Admit(f.pid, f.first, f.count, 20, uint64(f.first)); v != Accepted {
				t.Fatalf("verdict %v", v)
			}
			for i := f.first; i < f.first+f.count; i++ {
				applied[i]++
			}
			rw.Release(rw.Committed())
			ci, cb := rw.Credits()
			sw.OnProgress(now, f.pid, rw.Committed(), nil, ci, int(cb))
		}
	}
	if r, _ := sw.Stats(); r != 0 {
		t.Fatalf("%d retransmissions", r)
	}
	for i, a := range applied {
		if a != 1 {
			t.Fatalf("element %d applied %d times", i, a)
		}
	}
}

// TestLateAckOfOriginalAfterProbe: the timer probes the oldest frame; the
// answer to its original transmission arrives right after. That answer
// must not be read as the peer having seen the probe (which would declare
// every frame sent before the probe lost and resend the whole window).
func TestLateAckOfOriginalAfterProbe(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 8, FrameSize: 64, RTO: 100, MaxRTO: 1000, Deadline: -1})
	for i := uint32(0); i < 4; i++ {
		sw.Reserve(0, i*10, 10, 10)
		sw.Commit(0, 10)
	}
	if _, ok := sw.NextRetransmit(100); !ok {
		t.Fatal("no probe at the RTO")
	}
	if _, ok := sw.NextRetransmit(100); ok {
		t.Fatal("a timeout resent more than the oldest frame")
	}
	sw.OnProgress(101, 1, 10, nil, 8, 1000) // the original of pid 1
	if _, ok := sw.NextRetransmit(102); ok {
		t.Fatal("late answer to the original condemned frames sent before the probe")
	}
	sw.OnProgress(103, 2, 20, nil, 8, 1000) // pid 2 was only slow
	if _, ok := sw.NextRetransmit(104); ok {
		t.Fatal("retransmission after progress")
	}
	if r, to := sw.Stats(); r != 1 || to != 1 {
		t.Fatalf("stats %d/%d, want 1 probe", r, to)
	}
}

// TestHeldAboveHoleNeverResent: frames the peer reported holding above a
// hole are never retransmitted, only the hole, however long it stays open.
func TestHeldAboveHoleNeverResent(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 8, FrameSize: 64, RTO: 100, MaxRTO: 400, Deadline: -1})
	for i := uint32(0); i < 4; i++ {
		buf, _, _ := sw.Reserve(0, i*10, 10, 10)
		buf[0] = byte(i)
		sw.Commit(0, 10)
	}
	// pid 1 [0,10) lost; pids 2..4 held (the peer said so for each).
	for pid := uint32(2); pid <= 4; pid++ {
		sw.OnProgress(5, pid, 0, []Hole{{0, 10}}, 8, 1000)
	}
	for now := int64(5); now < 5000; now++ {
		for {
			f, ok := sw.NextRetransmit(now)
			if !ok {
				break
			}
			if f[0] != 0 {
				t.Fatalf("resent frame %d held by the peer at %d", f[0], now)
			}
		}
	}
}

// TestRejectedResentOnlyOnMoreRoom: frames the receiver refused for credit
// are not resent on the refusals' own PROGRESS (which still advertise
// credit), only once a PROGRESS shows more room (a higher watermark, more
// credit, or a window update), oldest first and no more of them than that
// PROGRESS's credit; no new frame goes out while refused ones wait. Before,
// every refusal re-armed every other refused frame, a resend storm as fast
// as the refusals came back.
func TestRejectedResentOnlyOnMoreRoom(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pid       uint32
		committed uint32
		credits   int
		want      []uint32 // Packet IDs resent, in order
	}{
		{"same room", 3, 20, 2, nil},
		{"watermark moved", 3, 30, 2, []uint32{4, 5}},
		{"more credit", 3, 20, 3, []uint32{3, 4, 5}},
		{"window update", 0, 20, 2, []uint32{3, 4}},
		{"no credit at all", 0, 20, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw := NewSendWindow(SendConfig{ReplayDepth: 16, FrameSize: 64, Intervals: 16, RTO: 1e9})
			for i := uint32(0); i < 8; i++ {
				buf, _, ok := sw.Reserve(0, i*10, 10, 10)
				if !ok {
					t.Fatalf("reserve %d", i)
				}
				buf[0] = byte(i + 1) // the Packet ID, to see what is resent
				sw.Commit(0, 10)
			}
			// Frames 1, 2 (pids 1, 2) committed; 3..8 refused one by one,
			// each refusal advertising 2 credits (room kept for a hole).
			sw.OnProgress(1, 2, 20, nil, 2, 1000)
			for pid := uint32(3); pid <= 8; pid++ {
				sw.OnProgress(2, pid, 20, nil, 2, 1000)
				sw.OnRejected(pid)
			}
			if f, ok := sw.NextRetransmit(3); ok {
				t.Fatalf("resent pid %d on the refusals' own PROGRESS", f[0])
			}
			if sw.CanSend(3, 90, 90, 10) {
				t.Fatal("a new frame is admitted while refused ones wait")
			}
			sw.OnProgress(4, tc.pid, tc.committed, nil, tc.credits, 1000)
			var got []uint32
			for {
				f, ok := sw.NextRetransmit(4)
				if !ok {
					break
				}
				got = append(got, uint32(f[0]))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("resent %v, want %v", got, tc.want)
			}
			if sw.CanSend(4, 90, 90, 10) {
				t.Fatal("a new frame is admitted while refused ones wait")
			}
		})
	}
}

// TestRejectedClockedByWindowUpdates is the slow-leaf case seen on a rank:
// the receiver's element window is full, it refuses everything but the
// frame at its watermark and opens one frame of room at a time with a
// window update. The sender must resend exactly one refused frame per
// update (each then accepted), never the whole refused set.
func TestRejectedClockedByWindowUpdates(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 16, FrameSize: 64, Intervals: 16, RTO: 1e12, MaxRTO: 1e12})
	const frames = 10
	for i := uint32(0); i < frames; i++ {
		if _, _, ok := sw.Reserve(0, i*10, 10, 10); !ok {
			t.Fatalf("reserve %d", i)
		}
		sw.Commit(0, 10)
	}
	// Frame 1 accepted, 2..10 refused: no credit left.
	sw.OnProgress(1, 1, 10, nil, 0, 0)
	for pid := uint32(2); pid <= frames; pid++ {
		sw.OnProgress(1, pid, 10, nil, 0, 0)
		sw.OnRejected(pid)
	}
	resends := 0
	committed := uint32(10)
	for now := int64(2); committed < frames*10; now++ {
		if now > 1000 {
			t.Fatalf("stuck at %d", committed)
		}
		sw.OnProgress(now, 0, committed, nil, 1, 64) // window update: one frame of room
		n := 0
		for {
			f, ok := sw.NextRetransmit(now)
			if !ok {
				break
			}
			_ = f
			n++
		}
		if n != 1 {
			t.Fatalf("window update at %d: %d frames resent, want 1", committed, n)
		}
		resends++
		committed += 10
		// The resent frame is accepted: PROGRESS OK naming it, no credit.
		sw.OnProgress(now, committed/10, committed, nil, 0, 0)
	}
	if resends != frames-1 || !sw.Idle() {
		t.Fatalf("%d resends for %d refused frames, idle %v", resends, frames-1, sw.Idle())
	}
}

// TestRearmedBeforeNewFrames: a window update's credit goes to the refused
// frame it re-arms, not to a new frame sent ahead of it (which the receiver
// would refuse in turn, once per update).
func TestRearmedBeforeNewFrames(t *testing.T) {
	sw := NewSendWindow(SendConfig{ReplayDepth: 16, FrameSize: 64, Intervals: 16, RTO: 1e12, MaxRTO: 1e12})
	for i := uint32(0); i < 2; i++ {
		if _, _, ok := sw.Reserve(0, i*10, 10, 10); !ok {
			t.Fatalf("reserve %d", i)
		}
		sw.Commit(0, 10)
	}
	sw.OnProgress(1, 1, 10, nil, 0, 0)
	sw.OnProgress(1, 2, 10, nil, 0, 0)
	sw.OnRejected(2)
	sw.OnProgress(2, 0, 10, nil, 1, 64) // window update: room for one frame
	if sw.CanSend(2, 20, 30, 10) {
		t.Fatal("a new frame may take the credit the refused frame was re-armed with")
	}
	if _, ok := sw.NextRetransmit(2); !ok {
		t.Fatal("the refused frame is not resent")
	}
	if sw.CanSend(2, 20, 30, 10) {
		t.Fatal("a new frame is admitted beyond the credit")
	}
	sw.OnProgress(3, 2, 20, nil, 1, 64) // accepted, one more frame of room
	if !sw.CanSend(3, 20, 30, 10) {
		t.Fatal("no new frame admitted once the refused one was accepted")
	}
}

// TestCoalescedProgressHoldsBelowPID: one PROGRESS answers a batch (the
// engine coalesces them), naming its newest frame. Frame 1 was lost,
// frames 2..5 accepted: the PROGRESS for 5 says committed 0 and holes
// inside frame 1's range. Frames 2..4 were sent before 5 and overlap no
// hole, so an accepted 5 proves the peer holds them; only frame 1 may be
// resent. OnProgress alone cannot know 5 was accepted (a NO_CREDIT answer
// names the frame too) and resends 2..4 as well, as a refusal-safe sender
// must; and with a full hole list (it may stop short) nothing above the
// last hole is known either.
func TestCoalescedProgressHoldsBelowPID(t *testing.T) {
	run := func(accepted bool, holes []Hole) (resent []byte) {
		sw := NewSendWindow(SendConfig{ReplayDepth: 8, FrameSize: 64, RTO: 1e6, MaxRTO: 4e6, Deadline: -1})
		for i := uint32(0); i < 5; i++ {
			buf, _, _ := sw.Reserve(int64(i), i*100, 100, 10)
			buf[0] = byte(i + 1)
			sw.Commit(int64(i), 10)
		}
		if accepted {
			sw.OnProgressAccepted(10, 5, 0, holes, 8, 1000)
		} else {
			sw.OnProgress(10, 5, 0, holes, 8, 1000)
		}
		for {
			f, ok := sw.NextRetransmit(20)
			if !ok {
				return resent
			}
			resent = append(resent, f[0])
		}
	}
	one := []Hole{{0, 100}}
	if got := run(true, one); string(got) != "\x01" {
		t.Fatalf("accepted PROGRESS: resent frames %v, want only [1]", got)
	}
	if got := run(false, one); string(got) != "\x01\x02\x03\x04" {
		t.Fatalf("plain PROGRESS: resent frames %v, want [1 2 3 4]", got)
	}
	full := make([]Hole, MaxHoles) // 32 holes, all inside frame 1: [0,1), [2,3), ... [62,63)
	for i := range full {
		full[i] = Hole{Start: uint32(2 * i), End: uint32(2*i + 1)}
	}
	if got := run(true, full); string(got) != "\x01\x02\x03\x04" {
		t.Fatalf("accepted PROGRESS with a full hole list: resent frames %v, want [1 2 3 4]", got)
	}
}

// TestHashCatchesChangedValue: a body resent with any one value (up to 4
// bytes in a row) changed, or one byte fewer, never hashes like the
// original, so Admit calls it Invalid rather than a duplicate.
func TestHashCatchesChangedValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	body := make([]byte, 1456)
	for i := range body {
		body[i] = byte(rng.IntN(256))
	}
	h := Hash(body)
	if Hash(body[:len(body)-1]) == h {
		t.Error("a shorter body hashes like the original")
	}
	changed := make([]byte, len(body))
	for off := 0; off < len(body); off++ {
		for _, w := range []int{1, 2, 4} {
			if off+w > len(body) {
				continue
			}
			copy(changed, body)
			for k := 0; k < w; k++ {
				changed[off+k] ^= byte(1 + rng.IntN(255)) // a real change in every byte of the run
			}
			if Hash(changed) == h {
				t.Fatalf("bytes [%d, %d) changed, same hash", off, off+w)
			}
		}
	}
}

// TestCreditsAreHonoured: a new frame that the advertised credits allow
// (one interval, its bytes within the byte credit) is admitted, whatever
// holes are open: a receiver that advertised room it then refused made
// senders that obey credits resend on NO_CREDIT (protocol.md 7).
func TestCreditsAreHonoured(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 300; trial++ {
		r := NewRecvWindow(RecvConfig{VectorLen: 1 << 20, Intervals: 2 + rng.IntN(6), Bytes: 300 + rng.IntN(900), MaxFrame: 100})
		next, pid := uint32(0), uint32(0)
		var skipped [][2]uint32 // frames "lost": never sent, so they leave holes
		for step := 0; step < 40; step++ {
			ci, cb := r.Credits()
			size := 40 + rng.IntN(61)
			if ci == 0 || int(cb) < size {
				// Nothing new may go: fill the lowest hole, as a sender's
				// retransmission would (it needs no credit).
				if len(skipped) == 0 {
					break
				}
				h := skipped[0]
				skipped = skipped[1:]
				pid++
				if v := r.Admit(pid, h[0], h[1]-h[0], 100, uint64(pid)); v != Accepted {
					t.Fatalf("trial %d: the hole-closing frame [%d,%d) refused: %v", trial, h[0], h[1], v)
				}
				continue
			}
			first, count := next, uint32(1+rng.IntN(10))
			next += count
			if rng.IntN(3) == 0 {
				skipped = append(skipped, [2]uint32{first, first + count}) // lost on the way
				continue
			}
			pid++
			if v := r.Admit(pid, first, count, size, uint64(pid)); v != Accepted {
				t.Fatalf("trial %d step %d: frame [%d,%d) of %d bytes within credits %d / %d refused: %v", trial, step, first, first+count, size, ci, cb, v)
			}
		}
	}
}

// TestWatermarkFrameNeedsNoCredit: a receiver whose window is full of
// frames above a hole advertises no credit, yet keeps room for the frame
// that closes the hole; its sender may send that frame as a new frame, not
// only as a retransmission (a relay forwards the hole's frame to its
// outputs only once it has it), and the receiver takes it. A frame above
// the watermark still waits for credit, and so does one at the watermark
// while the peer reports no hole.
func TestWatermarkFrameNeedsNoCredit(t *testing.T) {
	const frame = 100
	rw := NewRecvWindow(RecvConfig{VectorLen: 1000, Intervals: 8, Bytes: 8 * frame, MaxFrame: frame})
	pid := uint32(2)
	for first := uint32(10); ; first += 10 {
		if v := rw.Admit(pid, first, 10, frame, uint64(first)); v != Accepted {
			if v != NoCredit {
				t.Fatalf("frame at %d: %v", first, v)
			}
			break
		}
		pid++
	}
	ci, cb := rw.Credits()
	holes := make([]Hole, MaxHoles)
	holes = holes[:rw.Holes(holes)]
	sw := NewSendWindow(SendConfig{ReplayDepth: 16, FrameSize: frame, Intervals: 8, Bytes: 8 * frame, RTO: 1e9})
	sw.OnProgress(1, 0, rw.Committed(), nil, 0, 0)
	if sw.CanSend(1, 0, 10, frame) {
		t.Fatal("a frame at the watermark may go without credit while the peer reports no hole (its element window may bind)")
	}
	sw.OnProgress(1, 0, rw.Committed(), holes, ci, int(cb))
	if ci != 0 || int(cb) >= frame {
		t.Fatalf("a full window advertises %d intervals and %d bytes: room for a frame above the hole", ci, cb)
	}
	if sw.CanSend(2, 100, 110, frame) {
		t.Fatal("a frame above the hole may go without credit")
	}
	if !sw.CanSend(2, 0, 10, frame) {
		t.Fatal("the frame that closes the hole is withheld for credit")
	}
	if _, p, ok := sw.Reserve(2, 0, 10, frame); !ok {
		t.Fatal("Reserve refused the frame that closes the hole")
	} else if v := rw.Admit(p, 0, 10, frame, 0); v != Accepted || rw.Committed() != uint32(10+10*(pid-2)) {
		t.Fatalf("the receiver answered %v to the frame that closes its hole (committed %d)", v, rw.Committed())
	}
}

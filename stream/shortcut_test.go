package stream

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

// twin drives two SendWindows with the same calls: one on its shortcuts
// (release by moving head, a PROGRESS touching only the frames up to the one
// it names, no retransmit scan while nothing is lost), one with them off
// (every PROGRESS scans the whole window, the behaviour the rest of this
// file tests). Every answer of the two must be the same.
type twin struct {
	t         *testing.T
	fast, gen *SendWindow
}

func newTwin(t *testing.T, cfg SendConfig) *twin {
	tw := &twin{t: t, fast: NewSendWindow(cfg), gen: NewSendWindow(cfg)}
	tw.gen.general = true
	return tw
}

// view is everything a user of a SendWindow can observe.
type view struct {
	roomF, roomB, unackF, unackB int
	from, to, committed          uint32
	ci, cb                       int
	retx, timeouts               uint64
	next                         uint32
	can                          bool
	rto, srtt                    int64
}

func state(w *SendWindow, now int64, probe uint32) view {
	var v view
	v.roomF, v.roomB = w.Room()
	v.unackF, v.unackB = w.Unacked()
	v.from, v.to = w.Outstanding()
	v.committed = w.Committed()
	v.ci, v.cb = w.Credits()
	v.retx, v.timeouts = w.Stats()
	v.next, v.can, v.rto, v.srtt = w.NextPacketID(), w.CanSend(now, probe-min(probe, 20), probe, 20), w.RTO(), w.SRTT()
	return v
}

func (tw *twin) same(now int64, probe uint32, what string) {
	tw.t.Helper()
	if a, b := state(tw.fast, now, probe), state(tw.gen, now, probe); a != b {
		tw.t.Fatalf("after %s:\nshortcuts %+v\ngeneral   %+v", what, a, b)
	}
}

// send reserves, encodes and commits one frame in both; ok is false when
// neither admits it.
func (tw *twin) send(now int64, first, count uint32) ([]byte, bool) {
	tw.t.Helper()
	b1, p1, ok1 := tw.fast.Reserve(now, first, count, 20)
	b2, p2, ok2 := tw.gen.Reserve(now, first, count, 20)
	if ok1 != ok2 || p1 != p2 {
		tw.t.Fatalf("Reserve [%d,+%d): shortcuts %v pid %d, general %v pid %d", first, count, ok1, p1, ok2, p2)
	}
	if !ok1 {
		return nil, false
	}
	putTestFrame(b1, p1, first, count)
	putTestFrame(b2, p1, first, count)
	f := tw.fast.Commit(now, 20)
	if g := tw.gen.Commit(now, 20); !bytes.Equal(f, g) {
		tw.t.Fatalf("Commit: %x vs %x", f, g)
	}
	return f, true
}

func (tw *twin) retransmit(now int64) ([]byte, bool) {
	tw.t.Helper()
	f, ok1 := tw.fast.NextRetransmit(now)
	g, ok2 := tw.gen.NextRetransmit(now)
	if ok1 != ok2 || !bytes.Equal(f, g) {
		tw.t.Fatalf("NextRetransmit: shortcuts %v %x, general %v %x", ok1, f, ok2, g)
	}
	return f, ok1
}

// TestSendShortcutsMatchGeneral runs lossy, duplicating, reordering links
// with senders in element order (where the shortcuts apply) and out of it
// (a relay: frames of a block sent shuffled), small windows and credits so
// that frames are refused, with and without MinRetransmitGap, and checks
// after every call that both windows answer alike, and that the stream
// completes with every element applied once.
func TestSendShortcutsMatchGeneral(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := uint32(1000 + rng.IntN(4000))
		loss := []float64{0, 0.02, 0.2}[seed%3]
		relay := seed%4 == 0
		fwd := &link{rng: rng, loss: loss, dup: 0.1}
		back := &link{rng: rng, loss: loss, dup: 0.1}
		depth := 4 + rng.IntN(120)
		credit := 2 + rng.IntN(depth)
		if relay {
			// A relay's block of up to 8 shuffled frames must fit both
			// windows, or the frame that closes the block's first hole
			// finds no room (the engine sends only completed ranges).
			depth, credit = max(depth, 10), max(credit, 10)
		}
		byteCredit := credit * 20
		if relay {
			byteCredit *= 8 // likewise: intervals bound it
		}
		elems := uint32(0)
		if !relay && seed%2 == 1 {
			elems = uint32(200 + rng.IntN(800))
		}
		cfg := SendConfig{Name: "twin", ReplayDepth: depth, FrameSize: 64, Intervals: credit, Bytes: byteCredit,
			Elements: elems, Deadline: -1, MinRetransmitGap: []int64{0, 2e6}[seed%2]}
		tw := newTwin(t, cfg)
		rw := NewRecvWindow(RecvConfig{VectorLen: n, Intervals: credit, Bytes: byteCredit, Elements: max(elems, 600), MaxFrame: 64})
		applied := make([]int, n)
		var plan [][2]uint32 // relay: the block's ranges, in the order they go out
		next := uint32(0)
		now := int64(0)
		for step := 0; ; step++ {
			now += 1e6
			if step > 300000 {
				t.Fatalf("seed %d: no progress: committed %d/%d; depth %d credit %d plan %v next %d; sender %+v", seed, rw.Committed(), n, depth, credit, plan, next, state(tw.fast, now, next))
			}
			for {
				if len(plan) == 0 && next < n {
					k := 1
					if relay {
						k = 1 + rng.IntN(8)
					}
					for range k {
						if next == n {
							break
						}
						c := min(uint32(1+rng.IntN(40)), n-next)
						plan = append(plan, [2]uint32{next, c})
						next += c
					}
					rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
				}
				if len(plan) == 0 {
					break
				}
				f, ok := tw.send(now, plan[0][0], plan[0][1])
				tw.same(now, plan[0][0]+plan[0][1], "send")
				if !ok {
					break
				}
				plan = plan[1:]
				fwd.send(now, f)
			}
			for {
				f, ok := tw.retransmit(now)
				tw.same(now, next, "retransmit")
				if !ok {
					break
				}
				fwd.send(now, f)
			}
			for _, f := range fwd.recv(now) {
				pid, first, c, h := parseTestFrame(f)
				v := rw.Admit(pid, first, c, len(f), h)
				if v == Accepted {
					for i := first; i < first+c; i++ {
						applied[i]++
					}
				}
				back.send(now, answer(rw, rng, pid, v))
			}
			for _, m := range recvProgress(back, rw, now) {
				if rng.IntN(5) == 0 {
					m.pid = 0 // a timer-driven PROGRESS
				}
				for _, w := range []*SendWindow{tw.fast, tw.gen} {
					switch {
					case m.v == NoCredit:
						w.OnProgress(now, m.pid, m.committed, m.holes, m.ci, m.cb)
						w.OnRejected(m.pid)
					case (m.v == Accepted || m.v == Duplicate) && seed%3 != 1:
						w.OnProgressAccepted(now, m.pid, m.committed, m.holes, m.ci, m.cb)
					default:
						w.OnProgress(now, m.pid, m.committed, m.holes, m.ci, m.cb)
					}
				}
				tw.same(now, next, "PROGRESS")
			}
			if rw.Done() && tw.fast.Idle() && next == n && len(plan) == 0 {
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

// TestProgressCostIndependentOfWindow: in an ordered stream without loss
// a PROGRESS costs the same whatever the number of frames in flight. The
// general scans grow with the window (four passes over every frame in
// flight); the shortcuts touch the frames a PROGRESS releases. Timed, but
// the two sides differ by a factor of hundreds, far beyond a noisy
// machine's jitter.
func TestProgressCostIndependentOfWindow(t *testing.T) {
	cost := func(depth int, general bool) time.Duration {
		w := NewSendWindow(SendConfig{ReplayDepth: depth, FrameSize: 64, Deadline: -1})
		w.general = general
		now, next := int64(0), uint32(0)
		fill := func() {
			for {
				b, _, ok := w.Reserve(now, next, 10, 20)
				if !ok {
					return
				}
				b[0] = 1
				w.Commit(now, 20)
				next += 10
			}
		}
		fill()
		// One PROGRESS per frame, each releasing the oldest: the window
		// stays full. The least of 5 rounds of 2000.
		best := time.Duration(1 << 62)
		for range 5 {
			t0 := time.Now()
			for range 2000 {
				now++
				w.OnProgressAccepted(now, w.at(0).pid, w.at(0).end, nil, -1, -1)
				fill()
				if _, ok := w.NextRetransmit(now); ok {
					t.Fatal("a retransmission without loss")
				}
			}
			best = min(best, time.Since(t0)/2000)
		}
		return best
	}
	small, large := cost(16, false), cost(4096, false)
	gsmall, glarge := cost(16, true), cost(4096, true)
	t.Logf("per PROGRESS: shortcuts window 16 %v, 4096 %v; general 16 %v, 4096 %v", small, large, gsmall, glarge)
	if large > 4*small {
		t.Fatalf("a PROGRESS costs %v with 4096 frames in flight and %v with 16: it scans the window", large, small)
	}
	if glarge < 20*gsmall {
		t.Fatalf("the general path did not grow with the window (%v vs %v): the comparison measures nothing", glarge, gsmall)
	}
}

// FuzzSendShortcuts drives twin windows (shortcuts on and off) with any
// sequence of sends (in element order or behind it, as a relay), valid
// PROGRESS (a watermark that only the peer's view bounds, sorted holes
// above it, any named frame or one never sent, credits), refusals,
// retransmission rounds and clock steps, and requires the same answers
// from both after every call.
func FuzzSendShortcuts(f *testing.F) {
	f.Add([]byte{0, 10, 0, 10, 0, 10, 1, 15, 2, 0, 3, 1, 4, 200, 0, 5, 1, 30, 7})
	f.Add([]byte{0, 5, 0, 5, 5, 3, 0, 9, 2, 12, 1, 3, 3, 2, 4, 255, 4, 255, 1, 40, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		tw := newTwin(t, SendConfig{Name: "fuzz", ReplayDepth: 16, FrameSize: 64, Intervals: 12, Bytes: 12 * 20,
			Elements: 400, Deadline: -1, MinRetransmitGap: 1e6})
		now, next := int64(1e9), uint32(0)
		var pids []uint32 // every Packet ID sent
		var hs []Hole
		for len(b) >= 2 {
			op, v := b[0]%6, b[1]
			b = b[2:]
			switch op {
			case 0, 5: // a new frame: at next, or (5) behind it, as a relay sends
				first := next
				if op == 5 && next > uint32(v) {
					first = next - uint32(v)
				}
				c := 1 + uint32(v%20)
				if _, ok := tw.send(now, first, c); ok {
					pids = append(pids, tw.fast.NextPacketID()-1)
					next = max(next, first+c)
				}
			case 1, 2: // PROGRESS (2: the named frame was accepted)
				if len(b) < 2 {
					return
				}
				committed := min(uint32(v)*4, next)
				var pid uint32
				switch {
				case b[0]%8 == 1: // a Packet ID never sent (a peer's mistake or a forgery)
					pid = uint32(b[1])<<24 | uint32(b[0])
				case len(pids) > 0 && b[0]%4 != 0:
					pid = pids[int(b[0])%len(pids)]
				}
				// Holes: sorted, disjoint, above the watermark, below next.
				hs = hs[:0]
				at := committed
				for k := 0; k < int(b[1]%4) && at+2 < next; k++ {
					s := at + 1 + uint32(b[1]>>2)%8
					e := min(s+1+uint32(k), next)
					if s >= e {
						break
					}
					hs = append(hs, Hole{s, e})
					at = e
				}
				ci, cb := int(b[0]%16), int(b[1])*2
				for _, w := range []*SendWindow{tw.fast, tw.gen} {
					if op == 2 {
						w.OnProgressAccepted(now, pid, committed, hs, ci, cb)
					} else {
						w.OnProgress(now, pid, committed, hs, ci, cb)
					}
				}
				b = b[2:]
			case 3: // the newest PROGRESS refused a frame
				if len(pids) > 0 {
					pid := pids[int(v)%len(pids)]
					tw.fast.OnRejected(pid)
					tw.gen.OnRejected(pid)
				}
			case 4: // time passes; a retransmission round
				now += int64(v) * 1e6
				for {
					if _, ok := tw.retransmit(now); !ok {
						break
					}
				}
			}
			tw.same(now, next+1, "a fuzzed call")
		}
	})
}

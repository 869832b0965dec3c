// This file owns ingress fault injection: a Port wrapper whose ReadBatch
// loses, duplicates, reorders and delays the frames the port received,
// before the dataplane classifies them (a lost frame is never learned or
// counted, as if the wire had lost it).
//
// Design: a reader goroutine reads the wrapped port into a fixed set of
// preallocated slots and hands slot indices to the consumer (the port's RX
// goroutine, inside ReadBatch) through a lock-free SPSC index ring; the
// consumer applies the decisions, holds and delays frames, copies released
// frames into the caller's buffers and hands the slots back through a
// second ring. Nothing is allocated per frame; the two goroutines wake each
// other at most once per batch through one-slot channels.

package dataplane

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// IngressFault configures impairment of the frames one port receives. The
// zero value is no fault.
//
// Decisions are reproducible: for every frame read from the port (frames
// the port marks oversize excepted) three numbers are drawn, in this order,
// from rand.NewPCG(Seed, Seed^0x5851f42d4c957f2d) with Uint64: u1 drops the
// frame when u1/2^64*100 < DropPercent, u2 duplicates it (two copies in a
// row) when below DuplicatePercent, u3 holds it back when below
// ReorderPercent. All three are drawn whatever the outcome, so one frame's
// fate does not shift the next frame's draws.
type IngressFault struct {
	// DropPercent (0..100) is the probability that a frame is lost.
	DropPercent float64
	// DuplicatePercent (0..100) is the probability that a frame is
	// delivered twice in a row.
	DuplicatePercent float64
	// ReorderPercent (0..100) is the probability that a frame is held back.
	ReorderPercent float64
	// ReorderDepth is how many later frames overtake a held frame (>= 1
	// when ReorderPercent > 0; 0 means 1). Dropped and held frames do not
	// overtake; a released frame follows the frame that released it.
	ReorderDepth int
	// ReorderIdle releases every held frame once no frame arrived for that
	// long, so it is late rather than lost; 0 means 10ms (as on egress).
	ReorderIdle time.Duration
	// Delay is added to every frame before the dataplane sees it.
	Delay time.Duration
	// Seed makes the decisions reproducible; 0 picks a fixed seed.
	Seed uint64
}

// Active reports whether f changes anything.
func (f IngressFault) Active() bool {
	return f.DropPercent > 0 || f.DuplicatePercent > 0 || f.ReorderPercent > 0 || f.Delay > 0
}

// ingressSlots bounds the frames inside an ingress fault (delayed, held or
// not yet handed on): 1024 covers a 1 ms delay at ~1 Mpps and costs
// 1024 x FrameSize(mtu) (1.5 MiB at MTU 1500). When every slot is taken
// the reader stops reading, so further frames wait in the socket and, once
// it is full, are counted as kernel drops.
const ingressSlots = 1024

// faultSeedMix is the second PCG word, as on egress.
const faultSeedMix = 0x5851f42d4c957f2d

// faultEpoch anchors the monotonic nanoseconds of the fault clock.
var faultEpoch = time.Now()

func faultNow() int64 { return int64(time.Since(faultEpoch)) }

// threshold maps a percentage to the bound a uniform uint64 draw must stay
// under: u < threshold(p) exactly when u/2^64*100 < p (up to float rounding).
func threshold(p float64) uint64 {
	if p <= 0 {
		return 0
	}
	x := p / 100 * (1 << 64)
	if x >= 1<<64 {
		return math.MaxUint64 // 100%: every draw but MaxUint64 itself; see hit
	}
	return uint64(x)
}

// hit reports whether draw u falls under a percentage's threshold; 100%
// always hits.
func hit(u, thr uint64) bool { return u < thr || thr == math.MaxUint64 }

// idxRing is a single-producer single-consumer ring of slot indices.
type idxRing struct {
	head atomic.Uint32 // next to pop; written by the consumer
	_    [60]byte      // head and tail on separate cache lines
	tail atomic.Uint32 // next to push; written by the producer
	_    [60]byte
	buf  [ingressSlots]uint16
}

// push never fails: there are only ingressSlots indices in circulation.
func (r *idxRing) push(i int) {
	t := r.tail.Load()
	r.buf[t%ingressSlots] = uint16(i)
	r.tail.Store(t + 1)
}

func (r *idxRing) pop() (int, bool) {
	h := r.head.Load()
	if h == r.tail.Load() {
		return 0, false
	}
	i := int(r.buf[h%ingressSlots])
	r.head.Store(h + 1)
	return i, true
}

type heldSlot struct {
	idx  int
	left int
}

type ingressPort struct {
	Port
	depth                       int
	delay, idle                 int64
	thrDrop, thrDup, thrReorder uint64

	// Slots: written by the reader before it pushes the index on arrived,
	// by the consumer (dup) after it popped it.
	slots [][]byte
	lens  []int
	due   []int64
	dup   []bool

	free    idxRing // consumer -> reader
	arrived idxRing // reader -> consumer
	sig     chan struct{}
	freed   chan struct{}
	errc    chan error
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  atomic.Bool // the wrapped port reported net.ErrClosed

	// Added to by the consumer once per batch of decisions (admit) or of
	// delivered frames (emit), read by Stats: frames dropped (drop_percent),
	// extra copies delivered (duplicate_percent) and frames held back
	// (reorder_percent).
	drops, dups, reordered atomic.Uint64

	// Consumer (ReadBatch) state.
	rng         *rand.Rand
	held        []heldSlot
	ready       []int // FIFO of slot indices: ready[rHead:rTail] modulo ingressSlots
	rHead       int
	rTail       int
	dupSent     bool // the head's first copy went out; its duplicate is next
	lastArrival int64
	timer       *time.Timer

	// Reader state.
	own    []int // slot indices the reader holds
	rbufs  [][]byte
	rsizes []int
}

func withIngressFault(p Port, f IngressFault) *ingressPort {
	if f.ReorderDepth < 1 {
		f.ReorderDepth = 1
	}
	if f.ReorderIdle <= 0 {
		f.ReorderIdle = reorderIdle
	}
	seed := f.Seed
	if seed == 0 {
		seed = 0x9e3779b9
	}
	fs := FrameSize(p.MTU())
	fp := &ingressPort{Port: p, depth: f.ReorderDepth, delay: int64(f.Delay), idle: int64(f.ReorderIdle),
		thrDrop: threshold(f.DropPercent), thrDup: threshold(f.DuplicatePercent), thrReorder: threshold(f.ReorderPercent),
		slots: make([][]byte, ingressSlots), lens: make([]int, ingressSlots), due: make([]int64, ingressSlots),
		dup: make([]bool, ingressSlots), sig: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		errc: make(chan error, 1), quit: make(chan struct{}), done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(seed, seed^faultSeedMix)), held: make([]heldSlot, 0, ingressSlots),
		ready: make([]int, ingressSlots), own: make([]int, 0, ingressSlots),
		rbufs: make([][]byte, DefaultBatch), rsizes: make([]int, DefaultBatch)}
	mem := make([]byte, ingressSlots*fs)
	for i := range fp.slots {
		fp.slots[i] = mem[i*fs : (i+1)*fs : (i+1)*fs]
		fp.free.push(i)
	}
	fp.timer = time.NewTimer(time.Hour)
	fp.timer.Stop()
	go fp.read()
	return fp
}

// Unwrap returns the wrapped port.
func (fp *ingressPort) Unwrap() Port { return fp.Port }

// read is the reader goroutine: it fills free slots from the wrapped port.
func (fp *ingressPort) read() {
	defer close(fp.done)
	for {
		for len(fp.own) < len(fp.rbufs) {
			i, ok := fp.free.pop()
			if !ok {
				break
			}
			fp.own = append(fp.own, i)
		}
		if len(fp.own) == 0 {
			// Every slot is delayed, held or queued: wait for the consumer.
			select {
			case <-fp.freed:
				continue
			case <-fp.quit:
				return
			}
		}
		k := min(len(fp.own), len(fp.rbufs))
		use := fp.own[len(fp.own)-k:]
		for j, i := range use {
			fp.rbufs[j] = fp.slots[i]
		}
		n, err := fp.Port.ReadBatch(fp.rbufs[:k], fp.rsizes[:k])
		now := faultNow()
		for j := 0; j < n; j++ {
			i := use[j]
			fp.lens[i] = fp.rsizes[j]
			fp.due[i] = now + fp.delay
			fp.arrived.push(i)
		}
		// The unused indices of use move down over the used ones.
		copy(use, use[n:])
		fp.own = fp.own[:len(fp.own)-n]
		if n > 0 {
			fp.wakeConsumer()
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				fp.closed.Store(true)
				fp.wakeConsumer()
				return
			}
			select {
			case fp.errc <- err:
				fp.wakeConsumer()
			default:
			}
			// As the dataplane's RX loop does: do not spin on a failing port.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-fp.quit:
				return
			}
		}
	}
}

func (fp *ingressPort) wakeConsumer() {
	select {
	case fp.sig <- struct{}{}:
	default:
	}
}

func (fp *ingressPort) release(i int) {
	fp.free.push(i)
}

// signalFreed wakes a reader waiting for free slots.
func (fp *ingressPort) signalFreed() {
	select {
	case fp.freed <- struct{}{}:
	default:
	}
}

func (fp *ingressPort) pushReady(i int) {
	fp.ready[fp.rTail%ingressSlots] = i
	fp.rTail++
}

// admit applies the decisions to every frame the reader handed over.
func (fp *ingressPort) admit(now int64) {
	var dropped, reordered uint64
	released := false
	for {
		i, ok := fp.arrived.pop()
		if !ok {
			break
		}
		fp.lastArrival = now
		if fp.lens[i] == 0 {
			fp.release(i) // oversize: the wrapped port counted it
			released = true
			continue
		}
		uDrop, uDup, uReorder := fp.rng.Uint64(), fp.rng.Uint64(), fp.rng.Uint64()
		if hit(uDrop, fp.thrDrop) {
			fp.release(i)
			released = true
			dropped++
			continue
		}
		fp.dup[i] = hit(uDup, fp.thrDup)
		if hit(uReorder, fp.thrReorder) {
			fp.held = append(fp.held, heldSlot{idx: i, left: fp.depth})
			reordered++
			continue
		}
		fp.pushReady(i)
		k := 0
		for _, h := range fp.held {
			if h.left--; h.left <= 0 {
				fp.pushReady(h.idx)
				continue
			}
			fp.held[k] = h
			k++
		}
		fp.held = fp.held[:k]
	}
	if dropped > 0 {
		fp.drops.Add(dropped)
	}
	if reordered > 0 {
		fp.reordered.Add(reordered)
	}
	if released {
		// A reader that ran out of slots waits for this signal; without it
		// a batch of frames that were all dropped (drop_percent: 100) left
		// it waiting for ever, and the port stopped receiving.
		fp.signalFreed()
	}
}

// emit copies due frames into bufs and returns how many it filled.
func (fp *ingressPort) emit(now int64, bufs [][]byte, sizes []int) int {
	n, freed := 0, false
	var dups uint64
	for n < len(bufs) && fp.rHead != fp.rTail {
		i := fp.ready[fp.rHead%ingressSlots]
		if fp.due[i] > now {
			break
		}
		if fp.lens[i] > len(bufs[n]) {
			sizes[n] = 0 // cannot happen with the dataplane's FrameSize(MTU) buffers
		} else {
			sizes[n] = copy(bufs[n], fp.slots[i][:fp.lens[i]])
		}
		n++
		if fp.dup[i] {
			if !fp.dupSent {
				fp.dupSent = true
				continue
			}
			dups++ // the second copy just went out
		}
		fp.dupSent = false
		fp.rHead++
		fp.release(i)
		freed = true
	}
	if freed {
		fp.signalFreed()
	}
	if dups > 0 {
		fp.dups.Add(dups)
	}
	return n
}

// Stats adds the fault's own counts to the wrapped port's.
func (fp *ingressPort) Stats() PortStats {
	s := fp.Port.Stats()
	s.Fault.IngressDrops += fp.drops.Load()
	s.Fault.IngressDuplicates += fp.dups.Load()
	s.Fault.IngressReordered += fp.reordered.Load()
	return s
}

// ReadBatch implements Port: it returns at least one impaired frame, an
// error of the wrapped port, or, after Close, an error wrapping net.ErrClosed.
func (fp *ingressPort) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	for {
		now := faultNow()
		fp.admit(now)
		if len(fp.held) > 0 && now-fp.lastArrival >= fp.idle {
			for _, h := range fp.held {
				fp.pushReady(h.idx)
			}
			fp.held = fp.held[:0]
		}
		if n := fp.emit(now, bufs, sizes); n > 0 {
			return n, nil
		}
		select {
		case err := <-fp.errc:
			return 0, err
		case <-fp.quit:
			return 0, fmt.Errorf("ingress fault on %s: %w", fp.Name(), net.ErrClosed)
		default:
		}
		if fp.closed.Load() && fp.rHead == fp.rTail {
			return 0, fmt.Errorf("ingress fault on %s: %w", fp.Name(), net.ErrClosed)
		}
		// Sleep until a frame arrives, the head of the queue is due or the
		// held frames' idle release, whichever comes first.
		var wake int64
		deadline := false
		if fp.rHead != fp.rTail {
			wake, deadline = fp.due[fp.ready[fp.rHead%ingressSlots]], true
		}
		if len(fp.held) > 0 {
			if w := fp.lastArrival + fp.idle; !deadline || w < wake {
				wake, deadline = w, true
			}
		}
		if !deadline {
			select {
			case <-fp.sig:
			case <-fp.quit:
			}
			continue
		}
		fp.timer.Reset(time.Duration(wake - now))
		select {
		case <-fp.sig:
		case <-fp.timer.C:
		case <-fp.quit:
		}
		fp.timer.Stop()
	}
}

// Close closes the wrapped port (which ends the reader) and makes a blocked
// ReadBatch return. Frames still inside the fault are discarded.
func (fp *ingressPort) Close() error {
	err := fp.Port.Close()
	fp.once.Do(func() { close(fp.quit) })
	<-fp.done
	return err
}

// This file owns fault injection for tests and labs (tc netem does not exist
// on the lab hosts): a Port wrapper that delays and reorders the frames the
// dataplane transmits on that port. Ingress faults (loss, duplication,
// reordering and delay of received frames) are in fault_ingress.go.

package dataplane

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// Fault configures impairment of one port. The top-level fields impair
// egress (frames the dataplane transmits); Ingress impairs the frames the
// port receives. The zero value is no fault.
type Fault struct {
	// ReorderPercent (0..100, fractions allowed) is the probability that a
	// frame is held back.
	ReorderPercent float64
	// ReorderDepth is how many later frames overtake a held frame (>= 1 when
	// ReorderPercent > 0). A held frame is also released after reorderIdle
	// without traffic, so it is late rather than lost.
	ReorderDepth int
	// Delay is added to every frame before it is transmitted.
	Delay time.Duration
	// Seed makes the reorder decisions reproducible; 0 picks a fixed seed.
	Seed uint64
	// Ingress impairs received frames, before the dataplane classifies them.
	Ingress IngressFault
}

// Active reports whether f changes anything.
func (f Fault) Active() bool { return f.egressActive() || f.Ingress.Active() }

// String says what f does, for logs and status ("ingress drop 40%, delay
// 2ms; egress reorder 5% depth 8"); "" when f is inactive.
func (f Fault) String() string {
	var parts []string
	side := func(name string, drop, dup, reorder float64, depth int, delay time.Duration) {
		var d []string
		if drop > 0 {
			d = append(d, fmt.Sprintf("drop %g%%", drop))
		}
		if dup > 0 {
			d = append(d, fmt.Sprintf("duplicate %g%%", dup))
		}
		if reorder > 0 {
			d = append(d, fmt.Sprintf("reorder %g%% depth %d", reorder, max(depth, 1)))
		}
		if delay > 0 {
			d = append(d, "delay "+delay.String())
		}
		if len(d) > 0 {
			parts = append(parts, name+" "+strings.Join(d, ", "))
		}
	}
	in := f.Ingress
	side("ingress", in.DropPercent, in.DuplicatePercent, in.ReorderPercent, in.ReorderDepth, in.Delay)
	side("egress", 0, 0, f.ReorderPercent, f.ReorderDepth, f.Delay)
	return strings.Join(parts, "; ")
}

func (f Fault) egressActive() bool { return f.ReorderPercent > 0 || f.Delay > 0 }

// reorderIdle releases held frames when no more traffic arrives to overtake them.
const reorderIdle = 10 * time.Millisecond

// faultQueue bounds frames in flight inside a fault port; more are dropped
// (a short WriteBatch count with errFaultQueueFull) and counted as the
// fault's egress drops, the way a netem qdisc drops past its limit.
const faultQueue = 4096

// errFaultQueueFull tells the dataplane that the frames an egress fault did
// not take are already counted (FaultStats.EgressDrops).
var errFaultQueueFull = errors.New("dataplane: egress fault queue full")

type faultItem struct {
	buf []byte
	due time.Time
}

type faultPort struct {
	Port
	f    Fault
	q    chan faultItem
	quit chan struct{}
	done chan struct{}
	// dropped counts frames refused for a full queue (any writer);
	// reordered the frames run held back.
	dropped, reordered atomic.Uint64
	// txDrops counts, by reason, frames the wrapped port failed to send
	// from run: WriteBatch had already reported them sent, so the
	// dataplane cannot see these failures itself.
	txDrops [numDropReasons]atomic.Uint64
}

// WithFault wraps p so frames written to it are delayed and reordered as f
// says, and frames read from it are impaired as f.Ingress says. The
// per-frame copy and the extra goroutine make this a test/lab feature only;
// with an inactive f it returns p unchanged.
func WithFault(p Port, f Fault) Port {
	if f.Ingress.Active() {
		// Lane frames bypass the ingress fault (laneOf looks through
		// it), so the lane must not take DATA: keep it to CONTROL.
		if n, ok := p.(laneNarrower); ok {
			n.keepLaneNarrow()
		}
		p = withIngressFault(p, f.Ingress)
	}
	if !f.egressActive() {
		return p
	}
	if f.ReorderDepth < 1 {
		f.ReorderDepth = 1
	}
	fp := &faultPort{Port: p, f: f, q: make(chan faultItem, faultQueue), quit: make(chan struct{}), done: make(chan struct{})}
	go fp.run()
	return fp
}

// Unwrap returns the wrapped port.
func (fp *faultPort) Unwrap() Port { return fp.Port }

func (fp *faultPort) WriteBatch(bufs [][]byte) (int, error) {
	due := time.Now().Add(fp.f.Delay)
	for i, b := range bufs {
		c := getBuffer(len(b))
		copy(c, b)
		select {
		case fp.q <- faultItem{buf: c, due: due}:
		default:
			putBuffer(c)
			fp.dropped.Add(uint64(len(bufs) - i))
			return i, errFaultQueueFull
		}
	}
	return len(bufs), nil
}

// Stats adds the fault's own counts to the wrapped port's.
func (fp *faultPort) Stats() PortStats {
	s := fp.Port.Stats()
	s.Fault.EgressDrops += fp.dropped.Load()
	s.Fault.EgressReordered += fp.reordered.Load()
	for r := range fp.txDrops {
		s.Drops[r] += fp.txDrops[r].Load()
	}
	return s
}

func (fp *faultPort) Close() error {
	select {
	case <-fp.quit:
	default:
		close(fp.quit)
		<-fp.done
	}
	return fp.Port.Close()
}

type heldFrame struct {
	buf  []byte
	left int
}

func (fp *faultPort) run() {
	defer close(fp.done)
	seed := fp.f.Seed
	if seed == 0 {
		seed = 0x9e3779b9
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	var held []heldFrame
	out := make([][]byte, 1)
	send := func(b []byte) {
		out[0] = b
		if n, err := fp.Port.WriteBatch(out); n < 1 {
			if r := txDropReason(err); r != 0 {
				fp.txDrops[r].Add(1)
			}
		}
		putBuffer(b)
	}
	idle := time.NewTimer(reorderIdle)
	defer idle.Stop()
	for {
		select {
		case <-fp.quit:
			for _, h := range held {
				send(h.buf)
			}
			return
		case <-idle.C:
			for _, h := range held {
				send(h.buf)
			}
			held = held[:0]
			idle.Reset(reorderIdle)
		case it := <-fp.q:
			if d := time.Until(it.due); d > 0 {
				time.Sleep(d)
			}
			if fp.f.ReorderPercent > 0 && rng.Float64()*100 < fp.f.ReorderPercent {
				held = append(held, heldFrame{buf: it.buf, left: fp.f.ReorderDepth})
				fp.reordered.Add(1)
			} else {
				send(it.buf)
				k := 0
				for _, h := range held {
					h.left--
					if h.left <= 0 {
						send(h.buf)
						continue
					}
					held[k] = h
					k++
				}
				held = held[:k]
			}
			idle.Reset(reorderIdle)
		}
	}
}

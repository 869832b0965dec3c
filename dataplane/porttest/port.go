package porttest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prismd/prismd/dataplane"
)

// Port is a fake port. Safe for concurrent use.
type Port struct {
	name string
	mac  [6]byte
	mtu  int

	rx     chan []byte
	closed chan struct{}
	once   sync.Once

	mu     sync.Mutex
	sent   [][]byte
	notify chan struct{}

	replay  [][]byte    // if set, every ReadBatch returns these frames (benchmarks)
	discard bool        // WriteBatch only counts
	down    atomic.Bool // WriteBatch fails with dataplane.ErrLinkDown (SetLinkDown)

	written     atomic.Uint64
	oversize    atomic.Uint64
	KernelDrops atomic.Uint64 // tests may set it to check the metric path
}

// New returns a port with the given name, MAC and MTU (0 means 1500).
func New(name string, mac [6]byte, mtu int) *Port {
	if mtu == 0 {
		mtu = 1500
	}
	return &Port{name: name, mac: mac, mtu: mtu, rx: make(chan []byte, 4096),
		closed: make(chan struct{}), notify: make(chan struct{}, 1)}
}

// MAC builds a locally administered unicast MAC 02:00:00:00:00:b.
func MAC(b byte) [6]byte { return [6]byte{2, 0, 0, 0, 0, b} }

// SetReplay makes every ReadBatch return copies of frames without blocking,
// and WriteBatch discard frames (only counting them): for benchmarks and
// allocation tests of the per-frame path. Call before the port is used.
func (p *Port) SetReplay(frames [][]byte) {
	p.replay = frames
	p.discard = true
}

// SetLinkDown makes WriteBatch send nothing and fail with
// dataplane.ErrLinkDown while down is set, as a port without carrier does.
func (p *Port) SetLinkDown(down bool) { p.down.Store(down) }

// SetDiscard makes WriteBatch only count frames (see Written), never store them.
func (p *Port) SetDiscard() { p.discard = true }

// Inject queues a copy of frame for the dataplane to read.
func (p *Port) Inject(frame []byte) {
	p.rx <- append([]byte(nil), frame...)
}

func (p *Port) Name() string { return p.name }
func (p *Port) MAC() [6]byte { return p.mac }
func (p *Port) MTU() int     { return p.mtu }

func (p *Port) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	if p.replay != nil {
		select {
		case <-p.closed:
			return 0, net.ErrClosed
		default:
		}
		n := 0
		for n < len(bufs) && n < len(p.replay) {
			sizes[n] = copy(bufs[n], p.replay[n])
			n++
		}
		return n, nil
	}
	var f []byte
	select {
	case f = <-p.rx:
	case <-p.closed:
		return 0, fmt.Errorf("porttest %s: %w", p.name, net.ErrClosed)
	}
	n := 0
	for {
		if len(f) > len(bufs[n]) {
			sizes[n] = 0
			p.oversize.Add(1)
		} else {
			sizes[n] = copy(bufs[n], f)
		}
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case f = <-p.rx:
		default:
			return n, nil
		}
	}
}

func (p *Port) WriteBatch(bufs [][]byte) (int, error) {
	select {
	case <-p.closed:
		return 0, net.ErrClosed
	default:
	}
	if p.down.Load() {
		return 0, fmt.Errorf("porttest: %s: %w", p.name, dataplane.ErrLinkDown)
	}
	p.written.Add(uint64(len(bufs)))
	if p.discard {
		return len(bufs), nil
	}
	p.mu.Lock()
	for _, b := range bufs {
		p.sent = append(p.sent, append([]byte(nil), b...))
	}
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
	return len(bufs), nil
}

// Written is the number of frames the dataplane wrote to this port.
// Pending is how many injected frames the dataplane has not read yet.
func (p *Port) Pending() int { return len(p.rx) }

func (p *Port) Written() uint64 { return p.written.Load() }

func (p *Port) Stats() dataplane.PortStats {
	return dataplane.PortStats{KernelDrops: p.KernelDrops.Load(), Oversize: p.oversize.Load()}
}

func (p *Port) Close() error {
	err := net.ErrClosed
	p.once.Do(func() { close(p.closed); err = nil })
	return err
}

// Take removes and returns the frames written so far.
func (p *Port) Take() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sent
	p.sent = nil
	return s
}

// ErrTimeout is returned by Wait when too few frames arrived.
var ErrTimeout = errors.New("porttest: timeout")

// Wait returns once n frames were written (and removes them), or after d.
func (p *Port) Wait(n int, d time.Duration) ([][]byte, error) {
	deadline := time.After(d)
	for {
		p.mu.Lock()
		if len(p.sent) >= n {
			s := p.sent[:n:n]
			p.sent = append([][]byte(nil), p.sent[n:]...)
			p.mu.Unlock()
			return s, nil
		}
		p.mu.Unlock()
		select {
		case <-p.notify:
		case <-deadline:
			return p.Take(), fmt.Errorf("%w: port %s got fewer than %d frames", ErrTimeout, p.name, n)
		}
	}
}

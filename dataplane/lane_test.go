package dataplane_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// lanePort is a porttest.Port with a control lane fed by its own channel,
// as an AF_PACKET port with PortOptions.Lane has.
type lanePort struct {
	*porttest.Port
	lane   chan []byte
	closed chan struct{}
	once   sync.Once
}

func newLanePort(name string, mac [6]byte) *lanePort {
	return &lanePort{Port: porttest.New(name, mac, 1500), lane: make(chan []byte, 1024), closed: make(chan struct{})}
}

func (p *lanePort) HasLane() bool { return true }

func (p *lanePort) ReadLane(bufs [][]byte, sizes []int) (int, error) {
	select {
	case f := <-p.lane:
		sizes[0] = copy(bufs[0], f)
		return 1, nil
	case <-p.closed:
		return 0, fmt.Errorf("lane %s: %w", p.Name(), net.ErrClosed)
	}
}

func (p *lanePort) Close() error {
	p.once.Do(func() { close(p.closed) })
	return p.Port.Close()
}

// laneGateHandler blocks inside Handle on a frame of class 2 with op 99 until
// gate is closed, holding the worker, and records the control frames
// (class 1) it handled by sequence number, with their ingress port.
type laneGateHandler struct {
	gate    chan struct{}
	blocked chan struct{}
	once    sync.Once
	mu      sync.Mutex
	control map[uint32]int // sequence -> ingress port
	calls   atomic.Int64
}

func (h *laneGateHandler) Handle(now int64, in int, f []byte, tx dataplane.Sender) {
	h.calls.Add(1)
	switch f[15] {
	case 2:
		if binary.BigEndian.Uint16(f[14+14:]) == 99 {
			h.once.Do(func() { close(h.blocked) })
			<-h.gate
		}
	case 1:
		h.mu.Lock()
		h.control[binary.BigEndian.Uint32(f[len(f)-4:])] = in
		h.mu.Unlock()
	}
}

func (h *laneGateHandler) Tick(now int64, tx dataplane.Sender) {}

// TestLaneFramesReachBusyWorker: CONTROL frames from a port's lane reach
// the worker's handler exactly once, with the lane port's index, also while
// another goroutine holds the worker for longer than RingWait (they wait in
// the port's ring to the worker, which the lane loop produces into in turn
// with the RX goroutine, instead of being dropped), and a lane frame for
// another switch is forwarded like any frame.
func TestLaneFramesReachBusyWorker(t *testing.T) {
	for _, noInline := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoInline=%v", noInline), func(t *testing.T) {
			node := [6]byte{2, 0, 0, 0, 0, 1}
			h := &laneGateHandler{gate: make(chan struct{}), blocked: make(chan struct{}), control: map[uint32]int{}}
			d, err := dataplane.New(dataplane.Options{Workers: 1, NodeMAC: &node, NoInline: noInline,
				Handler: func(int, int) dataplane.Handler { return h }})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			p0 := porttest.New("p0", porttest.MAC(0x10), 1500)
			p1 := newLanePort("p1", porttest.MAC(0x11))
			if err := d.SetPorts([]dataplane.Port{p0, p1}); err != nil {
				t.Fatal(err)
			}
			// Hold the worker: a DATA frame from port 0 that blocks.
			p0.Inject(prism(node, hostA, 0x10, 2, 1, 1, 99))
			select {
			case <-h.blocked:
			case <-time.After(5 * time.Second):
				t.Fatal("the blocking frame never reached the handler")
			}
			const n = 50
			for seq := uint32(0); seq < n; seq++ {
				p1.lane <- binary.BigEndian.AppendUint32(prism(node, hostB, 0x10, 1, 1, 1, 7), seq)
			}
			// A CONTROL frame for another node, whose MAC the switch
			// learned on port 0: forwarded there from the lane.
			p0.Inject(eth(bcast, hostC, 0x0800, 1, 2, 3))
			other := binary.BigEndian.AppendUint32(prism(hostC, hostB, 0x10, 1, 1, 1, 7), 1000)
			time.Sleep(50 * time.Millisecond)
			p1.lane <- other
			time.Sleep(dataplane.RingWait + 20*time.Millisecond) // longer than any wait for the worker
			close(h.gate)
			deadline := time.Now().Add(5 * time.Second)
			for {
				h.mu.Lock()
				got := len(h.control)
				h.mu.Unlock()
				if got == n || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for seq := uint32(0); seq < n; seq++ {
				in, ok := h.control[seq]
				if !ok || in != 1 {
					t.Fatalf("lane CONTROL frame %d: handled %v, port %d (want port 1); %d of %d handled, drops %v",
						seq, ok, in, len(h.control), n, d.Stats().Ports[1].Drops)
				}
			}
			if _, ok := h.control[1000]; ok {
				t.Error("a CONTROL frame for another node's MAC reached the handler")
			}
			if !sent(p0, other) {
				t.Error("a lane CONTROL frame for another node was not forwarded toward it")
			}
			if dr := d.Stats().Ports[1].Drops[dataplane.DropRingFull]; dr != 0 {
				t.Errorf("%d lane frames dropped as ring_full", dr)
			}
			if c := h.calls.Load(); c != n+1 {
				t.Errorf("%d handler calls, want %d (the blocking frame and %d CONTROL frames, each once)", c, n+1, n)
			}
		})
	}
}

// sent reports whether port p transmitted frame f (taking what it sent).
func sent(p *porttest.Port, f []byte) bool {
	for _, w := range p.Take() {
		if string(w) == string(f) {
			return true
		}
	}
	return false
}

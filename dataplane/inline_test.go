package dataplane_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// orderHandler checks what the worker model promises a Handler, whoever
// runs it (its worker goroutine or an RX goroutine inline): never two calls
// at once, every frame once, and each port's frames in arrival order. The
// frame's last 4 bytes carry its sequence number on its port.
type orderHandler struct {
	in      atomic.Bool
	mu      sync.Mutex // guards errs only; the handler itself must need no lock
	errs    []string
	next    [2]uint32
	handled atomic.Int64
}

func (h *orderHandler) fail(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) < 10 {
		h.errs = append(h.errs, fmt.Sprintf(format, args...))
	}
}

func (h *orderHandler) Handle(now int64, in int, f []byte, tx dataplane.Sender) {
	if !h.in.CompareAndSwap(false, true) {
		h.fail("Handle entered while another call runs")
		return
	}
	defer h.in.Store(false)
	seq := binary.BigEndian.Uint32(f[len(f)-4:])
	if seq != h.next[in] {
		h.fail("port %d: frame %d handled when %d was next", in, seq, h.next[in])
	}
	h.next[in] = seq + 1
	h.handled.Add(1)
}

func (h *orderHandler) Tick(now int64, tx dataplane.Sender) {
	if !h.in.CompareAndSwap(false, true) {
		h.fail("Tick entered while another call runs")
		return
	}
	h.in.Store(false)
}

// TestWorkerExactlyOnceInOrder feeds one worker from two ports at once, in
// bursts larger than its rings, with and without inline runs, and checks
// the handler's view against the sequence each port was given.
func TestWorkerExactlyOnceInOrder(t *testing.T) {
	for _, noInline := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoInline=%v", noInline), func(t *testing.T) {
			h := &orderHandler{}
			node := [6]byte{2, 0, 0, 0, 0, 1}
			d, ports := setup(t, 2, dataplane.Options{Workers: 1, NodeMAC: &node, NoInline: noInline,
				Handler: func(int, int) dataplane.Handler { return h }})
			const perPort, burst = 20000, 500
			var wg sync.WaitGroup
			for p := range ports {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := uint32(0); seq < perPort; seq++ {
						f := prism(node, [6]byte{0x0a, 0, 0, 0, 1, byte(p)}, 0x10, 2, 1, 1, 1)
						f = binary.BigEndian.AppendUint32(f, seq)
						ports[p].Inject(f)
						if seq%burst == burst-1 {
							// Let the burst drain, mostly: a port whose
							// queue never empties would test nothing but
							// one long batch.
							for ports[p].Pending() > burst/2 {
								time.Sleep(50 * time.Microsecond)
							}
						}
					}
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(10 * time.Second)
			for h.handled.Load() < 2*perPort && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			st := d.Stats()
			drops := st.Ports[0].Drops[dataplane.DropRingFull] + st.Ports[1].Drops[dataplane.DropRingFull]
			if len(h.errs) > 0 || h.handled.Load() != 2*perPort || drops != 0 {
				t.Fatalf("handled %d of %d frames, ring_full drops %d, errors: %v", h.handled.Load(), 2*perPort, drops, h.errs)
			}
		})
	}
}

// TestInlineSparseFramesHandled: single frames, each arriving when the
// worker is asleep, are all handled promptly (an inline run that left a
// frame behind without waking anyone would show as a frame waiting for
// the next one).
func TestInlineSparseFramesHandled(t *testing.T) {
	h := &idleHandler{}
	node := [6]byte{2, 0, 0, 0, 0, 1}
	_, ports := setup(t, 2, dataplane.Options{Workers: 1, NodeMAC: &node,
		Handler: func(int, int) dataplane.Handler { return h }})
	for i := int64(1); i <= 50; i++ {
		ports[i%2].Inject(prism(node, porttest.MAC(byte(0x40+i%2)), 0x10, 2, 1, 1, 1))
		deadline := time.Now().Add(2 * time.Second)
		for h.handled.Load() < i && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if h.handled.Load() != i {
			t.Fatalf("frame %d not handled within 2 s (handled %d)", i, h.handled.Load())
		}
	}
}

// gatedOrder is an orderHandler whose first frame of port 1 blocks until
// open is closed.
type gatedOrder struct {
	orderHandler
	entered, open chan struct{}
	once          sync.Once
}

func (h *gatedOrder) Handle(now int64, in int, f []byte, tx dataplane.Sender) {
	if in == 1 {
		h.once.Do(func() { close(h.entered); <-h.open })
		return
	}
	h.orderHandler.Handle(now, in, f, tx)
}

// TestInlineKeepsPortOrder: while port 1's receive loop runs the worker
// inline and is stuck in the handler, port 0's frames queue in its ring;
// when the holder lets go after its bounded rounds, port 0's loop may take
// the worker with newer frames in hand, and must drain the older ones
// from its ring first. One frame per batch makes many such hand-overs.
func TestInlineKeepsPortOrder(t *testing.T) {
	for try := 0; try < 5; try++ {
		h := &gatedOrder{entered: make(chan struct{}), open: make(chan struct{})}
		node := [6]byte{2, 0, 0, 0, 0, 1}
		d, ports := setup(t, 2, dataplane.Options{Workers: 1, Batch: 1, NodeMAC: &node,
			Handler: func(int, int) dataplane.Handler { return h }})
		ports[1].Inject(prism(node, [6]byte{0x0a, 0, 0, 0, 1, 1}, 0x10, 2, 1, 1, 1))
		<-h.entered
		const frames = 200
		for seq := uint32(0); seq < frames; seq++ {
			f := prism(node, [6]byte{0x0a, 0, 0, 0, 1, 0}, 0x10, 2, 1, 1, 1)
			ports[0].Inject(binary.BigEndian.AppendUint32(f, seq))
		}
		for ports[0].Pending() > frames-100 { // let the ring fill while the holder is stuck
			time.Sleep(100 * time.Microsecond)
		}
		close(h.open)
		deadline := time.Now().Add(10 * time.Second)
		for h.handled.Load() < frames && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		h.mu.Lock()
		errs, n := h.errs, h.handled.Load()
		h.mu.Unlock()
		if len(errs) > 0 || n != frames {
			t.Fatalf("try %d: handled %d of %d frames of port 0, errors: %v (drops %v)", try, n, frames, errs, d.Stats().Ports[0].Drops)
		}
		d.Close()
	}
}

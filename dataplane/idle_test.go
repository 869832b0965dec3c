package dataplane_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// idleHandler is idle until it handles a frame, then keeps timers armed.
type idleHandler struct {
	ticks, handled atomic.Int64
	busy           atomic.Bool
}

func (h *idleHandler) Handle(now int64, in int, f []byte, tx dataplane.Sender) {
	h.handled.Add(1)
	h.busy.Store(true)
}
func (h *idleHandler) Tick(now int64, tx dataplane.Sender) { h.ticks.Add(1) }
func (h *idleHandler) Idle() bool                          { return !h.busy.Load() }

// ticksIn counts Tick calls during d.
func ticksIn(h *idleHandler, d time.Duration) int64 {
	a := h.ticks.Load()
	time.Sleep(d)
	return h.ticks.Load() - a
}

// handleOne injects a PRISM frame on port and waits until handled counts it.
func handleOne(t *testing.T, port *porttest.Port, handled *atomic.Int64) {
	t.Helper()
	port.Inject(prism(porttest.MAC(0x10), hostA, 0x10, 1, 1, 1, 1))
	deadline := time.Now().Add(2 * time.Second)
	for handled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if handled.Load() == 0 {
		t.Fatal("frame not handled")
	}
}

func TestIdleWorkerStopsTicking(t *testing.T) {
	h := &idleHandler{}
	_, ports := setup(t, 1, dataplane.Options{Handler: func(int, int) dataplane.Handler { return h }})
	time.Sleep(10 * TickWait) // let the worker notice it is idle
	if n := ticksIn(h, 50*time.Millisecond); n > 1 {
		t.Fatalf("idle handler got %d ticks in 50 ms, want at most 1", n)
	}
	handleOne(t, ports[0], &h.handled)
	// Busy now: ticks resume at about TickInterval. Wait up to a second for
	// 5 of them so a loaded CI machine does not make this flaky; an idle
	// worker would give none.
	start := h.ticks.Load()
	for end := time.Now().Add(time.Second); h.ticks.Load()-start < 5 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := h.ticks.Load() - start; n < 5 {
		t.Fatalf("busy handler got %d ticks in 1 s, want about 1000", n)
	}
}

// pacedHandler asks for a tick every 100 ms until it handles a frame, then
// for the usual TickInterval.
type pacedHandler struct{ idleHandler }

func (h *pacedHandler) Idle() bool { return false }
func (h *pacedHandler) TickEvery() time.Duration {
	if h.busy.Load() {
		return 0
	}
	return 100 * time.Millisecond
}

// TestPacedWorkerTicksSlowly: a handler that only has coarse timers armed
// (dataplane.Pacer) is ticked at its pace, not 1000 times a second, and a
// frame that arms fine timers brings TickInterval back at once.
func TestPacedWorkerTicksSlowly(t *testing.T) {
	h := &pacedHandler{}
	_, ports := setup(t, 1, dataplane.Options{Handler: func(int, int) dataplane.Handler { return h }})
	time.Sleep(10 * TickWait) // let the worker slow its ticker down
	// 500 ms at 100 ms is 5 ticks; at TickInterval it would be ~500.
	if n := ticksIn(&h.idleHandler, 500*time.Millisecond); n < 2 || n > 20 {
		t.Fatalf("paced handler got %d ticks in 500 ms, want about 5", n)
	}
	handleOne(t, ports[0], &h.handled)
	// 50 ticks within 300 ms: only a ticker back at TickInterval gives
	// them (the slow one would give 3); generous for a loaded machine.
	start := h.ticks.Load()
	for end := time.Now().Add(300 * time.Millisecond); h.ticks.Load()-start < 50 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := h.ticks.Load() - start; n < 50 {
		t.Fatalf("handler with fine timers got %d ticks in 300 ms, want about 300", n)
	}
}

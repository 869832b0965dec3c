package dataplane

import (
	"errors"
	"testing"
	"time"
)

// TestSparseTunerDecides drives the lane policy with a synthetic clock:
// a new port is on the lane; a window above 2*fps moves it to the ring at
// once; a rate between fps and 2*fps changes nothing; a single quiet
// window (a sender that lost its core) does not move it back, sparseQuiet
// windows in a row do; a failed move changes nothing.
func TestSparseTunerDecides(t *testing.T) {
	const fps = 50000
	var calls []bool
	fail := false
	tu, err := newSparseTuner(fps, func(all bool) error {
		if fail {
			return errTest
		}
		calls = append(calls, all)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tu.wide.Load() || len(calls) != 1 || !calls[0] {
		t.Fatalf("a new port: wide %v, calls %v; want on the lane", tu.wide.Load(), calls)
	}
	w := int64(sparseWindow)
	now := int64(0)
	// window feeds frames at rate r (frames/s) for one window and reads at its end.
	window := func(r int) {
		now += w
		tu.readAt(int(int64(r)*w/int64(time.Second)), now)
	}
	for _, tc := range []struct {
		name  string
		rates []int
		wide  bool
	}{
		{"sparse stays on the lane", []int{1000, 40000, 0}, true},
		{"between the thresholds stays", []int{90000, 70000}, true},
		{"busy moves to the ring at once", []int{150000}, false},
		{"one quiet window is a stall, not the end", []int{0, 150000, 0, 0, 80000}, false},
		{"sparseQuiet-1 quiet windows are not enough", []int{0, 0, 0, 0, 0, 0, 0}, false},
		{"the sparseQuiet-th is", []int{1000}, true},
	} {
		for _, r := range tc.rates {
			window(r)
		}
		if tu.wide.Load() != tc.wide {
			t.Fatalf("%s: wide %v, want %v (calls %v)", tc.name, tu.wide.Load(), tc.wide, calls)
		}
	}
	if got := tu.switches.Load(); got != 2 {
		t.Fatalf("switches %d, want 2", got)
	}
	// Reads inside a window decide nothing, however many frames they count.
	now += w / 4
	tu.readAt(1_000_000, now)
	if !tu.wide.Load() {
		t.Fatal("a read inside the window decided")
	}
	// A move the socket refuses leaves the state as it was: the burst
	// above makes this window busy, but the port stays on the lane.
	fail = true
	now += w
	tu.readAt(0, now)
	if !tu.wide.Load() || tu.switches.Load() != 2 {
		t.Fatalf("a refused move changed the state: wide %v, switches %d", tu.wide.Load(), tu.switches.Load())
	}
}

var errTest = errors.New("refused")

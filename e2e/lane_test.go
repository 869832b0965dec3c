package e2e

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/host"
)

// TestRepeatedSmallCollectives: a training loop's many small collectives
// (here 32 KiB of FP32 between two ranks, 46 DATA frames a call) arrive
// at the switch fast enough to move its ports from lane to ring, but in
// bursts that each wait for the last, so on the ring the tail of every
// call waited for the ring's block timeout. The port then went back and
// forth between lane and ring (35-77 moves in 1000-3000 calls), each move
// stalling the calls in flight for 6-8 ms. Now the ring's timed-out
// blocks send the port back to the lane for a growing hold, and the moves
// happen off the receive path: few moves, every result exact, and the
// frames that waited for the timer are counted.
func TestRepeatedSmallCollectives(t *testing.T) {
	e := up(t, "single", "h1", am.Config{})
	// The threshold low enough that the calls exceed twice it on a slow
	// machine too (the default, 50000, needs calls of under 0.25 ms).
	cfgFile := e.lab.ConfigFile("sw1")
	cfg, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cfg, []byte("\n      mtu: ")) {
		t.Fatalf("%s has no port mtu lines to put rx_sparse_fps next to:\n%s", cfgFile, cfg)
	}
	cfg = bytes.ReplaceAll(cfg, []byte("\n      mtu: "), []byte("\n      rx_sparse_fps: 5000\n      mtu: "))
	if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	reloads := func() int {
		b, _ := os.ReadFile(e.lab.LogFile("sw1"))
		return bytes.Count(b, []byte("configuration reloaded"))
	}
	r0 := reloads()
	if err := syscall.Kill(e.lab.PID("sw1"), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); reloads() == r0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sw1 did not reload its config:\n%s", e.lab.LogTail("sw1", 20))
		}
	}
	cs := e.comms(61, "h1", "h2")
	const calls = 1500
	took := persistentRuns(t, cs, "allreduce", 0, 8192, calls, 700, &host.Options{Acc: "fp32"})
	m := scrape(t, e.lab, "sw1")
	moves := sumSeries(t, m, "prismd_port_lane_switches_total")
	held, frames := sumSeries(t, m, "prismd_port_ring_held_frames_total"), sumSeries(t, m, "prismd_frames_total")
	if !regexp.MustCompile(`(?m)^prismd_port_ring_held_frames_total\{port="p1"\} `).MatchString(m) {
		t.Error("sw1 exports no prismd_port_ring_held_frames_total for p1")
	}
	slices.Sort(took)
	t.Logf("%d calls of 8192 FP32: median %v, p99 %v, max %v; %v lane/ring moves on sw1, %v of its %v frames held by the ring's timer",
		calls, took[calls/2], took[calls*99/100], took[calls-1], moves, held, frames)
	// On the ring the tail of nearly every call waited for the timer.
	if held > frames/20 {
		t.Errorf("%v of %v frames waited for the ring's timer, want at most 5%%", held, frames)
	}
	// Two ports, each back on the lane within its first windows on the
	// ring, its hold doubling from 256 ms: a handful of moves each in the
	// few seconds of the loop.
	if moves > 40 {
		t.Errorf("%v lane/ring moves on sw1 in %d calls, want at most 40", moves, calls)
	}
	if took[calls/2] > 5*time.Millisecond {
		t.Errorf("median call %v: the calls wait for the ring", took[calls/2])
	}
}

package afpacket

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// vethPair creates a veth pair with unique names, up, deleted at cleanup.
func vethPair(t *testing.T) (a, b string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (veth, AF_PACKET)")
	}
	a, b = fmt.Sprintf("afl%da", os.Getpid()%100000), fmt.Sprintf("afl%db", os.Getpid()%100000)
	_ = exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", a).Run() })
	for _, n := range []string{a, b} {
		if out, err := exec.Command("ip", "link", "set", n, "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s up: %v: %s", n, err, out)
		}
	}
	return a, b
}

// frame builds a frame of size bytes (at least 14) with EtherType et and,
// when size allows, class byte class, tagged with a sequence byte.
func frame(size int, et uint16, class, seq byte) []byte {
	f := make([]byte, size)
	copy(f, []byte{0x02, 0, 0, 0, 0, 0xbb, 0x02, 0, 0, 0, 0, 0xaa})
	f[12], f[13] = byte(et>>8), byte(et)
	if size > classOff {
		f[14], f[classOff] = 0x10, class
	}
	if size > 16 {
		f[16] = seq
	}
	return f
}

// TestLaneTakesControlOnly: with a lane, each frame reaches exactly one of
// the two receive paths: PRISM CONTROL frames the lane, at once; DATA,
// PROGRESS, other EtherTypes and a PRISM frame too short to hold the class
// byte the ring (where the dataplane counts it). Without a lane the ring
// has them all.
func TestLaneTakesControlOnly(t *testing.T) {
	a, b := vethPair(t)
	tx, err := Open(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	send := []struct {
		f    []byte
		lane bool
	}{
		{frame(64, prismEtherType, 2, 1), false},            // DATA
		{frame(48, prismEtherType, classControl, 2), true},  // CONTROL
		{frame(60, 0x0800, classControl, 3), false},         // IPv4 whose byte 15 happens to be 1
		{frame(60, prismEtherType, 4, 4), false},            // PROGRESS
		{frame(15, prismEtherType, 0, 0), false},            // short: no class byte
		{frame(184, prismEtherType, classControl, 6), true}, // CONTROL (STAGE-sized)
	}
	for _, withLane := range []bool{true, false} {
		rx, err := Open(b, Options{RxRing: true, Lane: withLane})
		if err != nil {
			t.Fatal(err)
		}
		if rx.HasLane() != withLane {
			t.Fatalf("Lane %v: HasLane %v", withLane, rx.HasLane())
		}
		time.Sleep(20 * time.Millisecond)
		laneGot := make(chan [][]byte, 1)
		sent := time.Now()
		var laneAt time.Duration
		if withLane {
			go func() {
				var got [][]byte
				bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, []int{0, 0}
				for len(got) < 2 {
					n, _, err := rx.RecvLane(bufs, sizes)
					if err != nil {
						break
					}
					for i := 0; i < n; i++ {
						got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
					}
				}
				laneAt = time.Since(sent)
				laneGot <- got
			}()
		}
		for _, s := range send {
			if _, err := tx.SendBatch([][]byte{s.f}); err != nil {
				t.Fatal(err)
			}
		}
		var ring [][]byte
		want := 0
		for _, s := range send {
			if !s.lane || !withLane {
				want++
			}
		}
		bufs, sizes := make([][]byte, 8), make([]int, 8)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		deadline := time.Now().Add(2 * time.Second)
		for len(ring) < want && time.Now().Before(deadline) {
			n, _, err := rx.RecvBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if f := bufs[i][:sizes[i]]; len(f) >= 12 && f[11] == 0xaa { // ours, not the kernel's IPv6 chatter
					ring = append(ring, append([]byte(nil), f...))
				}
			}
		}
		var lane [][]byte
		if withLane {
			select {
			case lane = <-laneGot:
			case <-time.After(2 * time.Second):
				t.Fatal("lane: no CONTROL frames")
			}
		}
		var wantRing, wantLane [][]byte
		for _, s := range send {
			if s.lane && withLane {
				wantLane = append(wantLane, s.f)
			} else {
				wantRing = append(wantRing, s.f)
			}
		}
		same := func(what string, got, want [][]byte) {
			if len(got) != len(want) {
				t.Fatalf("Lane %v: %s got %d frames, want %d", withLane, what, len(got), len(want))
			}
			for i := range got {
				if string(got[i]) != string(want[i]) {
					t.Fatalf("Lane %v: %s frame %d = %x, want %x", withLane, what, i, got[i], want[i])
				}
			}
		}
		same("ring", ring, wantRing)
		same("lane", lane, wantLane)
		if withLane {
			t.Logf("both CONTROL frames out of the lane %v after sending", laneAt)
		}
		if err := rx.Close(); err != nil {
			t.Fatal(err)
		}
		if withLane {
			if _, _, err := rx.RecvLane(bufs, sizes); err == nil {
				t.Fatal("RecvLane after Close returned no error")
			}
		}
	}
}

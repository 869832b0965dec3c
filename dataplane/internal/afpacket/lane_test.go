package afpacket

import (
	"bytes"
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
	// The kernel's own IPv6 chatter (MLD reports, router solicitations)
	// would otherwise arrive among the test's frames; and the addresses
	// are fixed so that none of it can carry the test frames' source
	// address (a random veth MAC ends in 0xaa one time in 256, which is
	// how an MLD report once passed for frame 65536).
	for i, n := range []string{a, b} {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n+"/disable_ipv6", []byte("1"), 0); err != nil && !os.IsNotExist(err) {
			t.Fatalf("disabling IPv6 on %s: %v", n, err)
		}
		if out, err := exec.Command("ip", "link", "set", n, "address", fmt.Sprintf("02:00:00:00:01:%02x", i+1)).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s address: %v: %s", n, err, out)
		}
	}
	for _, n := range []string{a, b} {
		if out, err := exec.Command("ip", "link", "set", n, "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s up: %v: %s", n, err, out)
		}
	}
	return a, b
}

// testSrc is the source address of every frame the tests build; the
// collectors keep only frames from it.
var testSrc = []byte{0x02, 0, 0, 0, 0, 0xaa}

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

// TestLaneTakesItsClassesOnly: with a lane, each frame reaches exactly one
// of the two receive paths: PRISM frames of the lane's classes the lane, at
// once; other classes, other EtherTypes (even when their byte 15 looks
// like a lane class), class bytes past the mask's range and a PRISM frame
// too short to hold the class byte the ring (where the dataplane counts
// it). Without a lane the ring has them all.
func TestLaneTakesItsClassesOnly(t *testing.T) {
	a, b := vethPair(t)
	tx, err := Open(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	send := [][]byte{
		frame(64, prismEtherType, 2, 1),              // DATA
		frame(48, prismEtherType, classControl, 2),   // CONTROL
		frame(60, 0x0800, classControl, 3),           // IPv4 whose byte 15 happens to be 1
		frame(60, prismEtherType, classProgress, 4),  // PROGRESS
		frame(15, prismEtherType, 0, 0),              // short: no class byte
		frame(184, prismEtherType, classControl, 6),  // CONTROL (STAGE-sized)
		frame(60, 0x86dd, classProgress, 7),          // IPv6 whose byte 15 happens to be 4
		frame(60, prismEtherType, 3, 8),              // RESULT
		frame(60, prismEtherType, 4+32, 9),           // class 36: 1<<36 would wrap to bit 4
		frame(80, prismEtherType, classProgress, 10), // PROGRESS
	}
	for _, tc := range []struct {
		name string
		opts Options
		mask uint16 // the classes expected on the lane
	}{
		{"control lane", Options{RxRing: true, Lane: true}, 1 << classControl},
		{"progress lane", Options{RxRing: true, LaneClasses: 1 << classProgress}, 1 << classProgress},
		{"both", Options{RxRing: true, Lane: true, LaneClasses: 1 << classProgress}, 1<<classControl | 1<<classProgress},
		{"no lane", Options{RxRing: true}, 0},
		{"no ring, no lane", Options{Lane: true, LaneClasses: 1 << classProgress}, 0},
	} {
		withLane := tc.mask != 0
		onLane := func(f []byte) bool {
			return withLane && len(f) > classOff && int(f[12])<<8|int(f[13]) == prismEtherType &&
				f[classOff] <= maxLaneClass && tc.mask&(1<<f[classOff]) != 0
		}
		var wantRing, wantLane [][]byte
		for _, f := range send {
			if onLane(f) {
				wantLane = append(wantLane, f)
			} else {
				wantRing = append(wantRing, f)
			}
		}
		rx, err := Open(b, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if rx.HasLane() != withLane {
			t.Fatalf("%s: HasLane %v", tc.name, rx.HasLane())
		}
		time.Sleep(20 * time.Millisecond)
		laneGot := make(chan [][]byte, 1)
		sent := time.Now()
		var laneAt time.Duration
		if withLane {
			go func() {
				var got [][]byte
				bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, []int{0, 0}
				for len(got) < len(wantLane) {
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
		for _, f := range send {
			if _, err := tx.SendBatch([][]byte{f}); err != nil {
				t.Fatal(err)
			}
		}
		var ring [][]byte
		bufs, sizes := make([][]byte, 8), make([]int, 8)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		deadline := time.Now().Add(2 * time.Second)
		for len(ring) < len(wantRing) && time.Now().Before(deadline) {
			n, _, err := rx.RecvBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if f := bufs[i][:sizes[i]]; len(f) >= 12 && bytes.Equal(f[6:12], testSrc) { // ours, not the kernel's IPv6 chatter
					ring = append(ring, append([]byte(nil), f...))
				}
			}
		}
		var lane [][]byte
		if withLane {
			select {
			case lane = <-laneGot:
			case <-time.After(2 * time.Second):
				t.Fatalf("%s: no lane frames", tc.name)
			}
		}
		same := func(what string, got, want [][]byte) {
			if len(got) != len(want) {
				t.Fatalf("%s: %s got %d frames, want %d", tc.name, what, len(got), len(want))
			}
			for i := range got {
				if string(got[i]) != string(want[i]) {
					t.Fatalf("%s: %s frame %d = %x, want %x", tc.name, what, i, got[i], want[i])
				}
			}
		}
		same("ring", ring, wantRing)
		same("lane", lane, wantLane)
		if withLane {
			t.Logf("%s: %d frames out of the lane %v after sending", tc.name, len(lane), laneAt)
		}
		if err := rx.Close(); err != nil {
			t.Fatal(err)
		}
		if withLane {
			if _, _, err := rx.RecvLane(bufs, sizes); err == nil {
				t.Fatalf("%s: RecvLane after Close returned no error", tc.name)
			}
		}
	}
}

// TestLaneWidensExactlyOnce: with the lane in a fanout group, SetLaneAll
// moves every frame, PRISM or not, to the lane and back to the ring (the
// lane keeping its CONTROL), and however often it flips while frames flow,
// each frame reaches exactly one of the two receive paths: none lost,
// none read twice.
//
// With LazyRing the socket starts with every frame on the lane and no
// ring; the first SetLaneAll(false) has the reading goroutine map the ring
// (which moves the socket within the group), and from then on the modes
// behave as with a ring from the start.
func TestLaneWidensExactlyOnce(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("LazyRing=%v", lazy), func(t *testing.T) { laneWidens(t, lazy) })
	}
}

func laneWidens(t *testing.T, lazy bool) {
	a, b := vethPair(t)
	tx, err := Open(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx, err := Open(b, Options{RxRing: true, Lane: true, LazyRing: lazy})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if !rx.CanWidenLane() {
		t.Fatal("the lane did not join a fanout group with the ring (PACKET_FANOUT with IGNORE_OUTGOING needs Linux 4.20+)")
	}
	if lazy && (rx.ring != nil || !rx.wide) {
		t.Fatal("a lazy ring was mapped at Open, or the lane does not take every frame")
	}
	if none, err := Open(b, Options{RxRing: true}); err != nil {
		t.Fatal(err)
	} else {
		if none.CanWidenLane() || none.SetLaneAll(true) == nil {
			t.Fatal("a socket without a lane claims it can widen one")
		}
		none.Close()
	}
	// seqFrame: a frame carrying a 32-bit sequence number at 20.
	seqFrame := func(et uint16, class byte, seq uint32) []byte {
		f := frame(64, et, class, 0)
		f[20], f[21], f[22], f[23] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
		return f
	}
	type got struct {
		seq  uint32
		et   uint16
		lane bool
	}
	frames := make(chan got, 1<<16)
	collect := func(lane bool, recv func(bufs [][]byte, sizes []int) (int, int, error)) {
		bufs, sizes := make([][]byte, 64), make([]int, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		for {
			n, _, err := recv(bufs, sizes)
			if err != nil {
				return
			}
			for i := 0; i < n; i++ {
				if f := bufs[i][:sizes[i]]; len(f) >= 24 && bytes.Equal(f[6:12], testSrc) {
					frames <- got{uint32(f[20])<<24 | uint32(f[21])<<16 | uint32(f[22])<<8 | uint32(f[23]), uint16(f[12])<<8 | uint16(f[13]), lane}
				}
			}
		}
	}
	go collect(false, rx.RecvBatch)
	go collect(true, rx.RecvLane)
	recvUntil := func(want int, d time.Duration) []got {
		var out []got
		for deadline := time.After(d); len(out) < want; {
			select {
			case g := <-frames:
				out = append(out, g)
			case <-deadline:
				return out
			}
		}
		return out
	}

	// Each mode on its own: where do DATA, CONTROL and IPv4 go?
	for _, wide := range []bool{true, false, true, false} {
		if err := rx.SetLaneAll(wide); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Second); !wide && rx.lazy && !rx.ringReady.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the reader did not map the lazy ring within 2 s of SetLaneAll(false)")
			}
		}
		if _, err := tx.SendBatch([][]byte{seqFrame(prismEtherType, 2, 1), seqFrame(0x0800, 2, 2), seqFrame(prismEtherType, classControl, 3)}); err != nil {
			t.Fatal(err)
		}
		g := recvUntil(3, 2*time.Second)
		if len(g) != 3 {
			t.Fatalf("wide=%v: got %d frames, want 3", wide, len(g))
		}
		for _, x := range g {
			if wantLane := wide || x.seq == 3; x.lane != wantLane {
				t.Fatalf("wide=%v: frame %d (EtherType %#04x) on the lane=%v, want %v", wide, x.seq, x.et, x.lane, wantLane)
			}
		}
	}

	// Flipping while frames flow.
	const total = 40000
	stop := make(chan struct{})
	flips := 0
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for wide := false; ; wide = !wide {
			select {
			case <-stop:
				return
			default:
			}
			if err := rx.SetLaneAll(wide); err != nil {
				t.Error(err)
				return
			}
			flips++
			time.Sleep(50 * time.Microsecond)
		}
	}()
	drops0, _ := rx.KernelDrops()
	batch := make([][]byte, 0, 32)
	for seq := uint32(0); seq < total; {
		batch = batch[:0]
		for len(batch) < cap(batch) && seq < total {
			et := uint16(prismEtherType)
			if seq%5 == 4 {
				et = 0x0800
			}
			batch = append(batch, seqFrame(et, 2, seq))
			seq++
		}
		if _, err := tx.SendBatch(batch); err != nil {
			t.Fatal(err)
		}
		if seq%1024 == 0 {
			time.Sleep(200 * time.Microsecond) // let the readers keep up: a kernel drop would look like a loss
		}
	}
	g := recvUntil(total, 5*time.Second)
	close(stop)
	<-flipped
	if extra := recvUntil(1, 100*time.Millisecond); len(extra) > 0 {
		g = append(g, extra...)
	}
	if drops, _ := rx.KernelDrops(); drops != drops0 {
		t.Fatalf("the kernel dropped %d frames: the readers fell behind, the count below would mislead", drops-drops0)
	}
	seen := make([]int, total)
	onLane := 0
	for _, x := range g {
		if x.seq >= total {
			t.Fatalf("unexpected sequence %d", x.seq)
		}
		seen[x.seq]++
		if x.lane {
			onLane++
		}
	}
	for seq, n := range seen {
		if n != 1 {
			t.Fatalf("frame %d read %d times (%d flips; %d frames read, %d on the lane)", seq, n, flips, len(g), onLane)
		}
	}
	if onLane == 0 || onLane == total {
		t.Fatalf("%d of %d frames on the lane in %d flips: the flips never split the stream", onLane, total, flips)
	}
	t.Logf("%d frames, each read once, %d on the lane, %d flips", total, onLane, flips)
}

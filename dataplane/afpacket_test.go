package dataplane_test

// Tests and benchmarks of the AF_PACKET port on real veths (root only): the
// TPACKET_V3 ring must deliver exactly what recvmmsg delivers (and put 802.1Q
// tags back), and BenchmarkForwardVeth measures forwarding through a real
// dataplane with each receive path.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// vethPorts opens a port on each end of a fresh veth pair inside one namespace.
func vethPorts(tb testing.TB, a, b dataplane.PortOptions) (pa, pb dataplane.Port) {
	env := netnstest.New(tb, "pt")
	ns := env.Namespace("x")
	ifa, ifb := env.Veth(ns, ns)
	env.DisableOffloads(ns, ifa)
	env.DisableOffloads(ns, ifb)
	env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	var err error
	env.Do(ns, func() {
		if pa, err = dataplane.OpenAFPacket(ifa, a); err != nil {
			return
		}
		pb, err = dataplane.OpenAFPacket(ifb, b)
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pa.Close(); pb.Close() })
	return pa, pb
}

func testFrame(dst, src [6]byte, et uint16, n int, seq byte) []byte {
	f := make([]byte, n)
	copy(f, dst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], et)
	for i := 14; i < n; i++ {
		f[i] = seq + byte(i)
	}
	return f
}

// readN reads until n frames with EtherType et arrived (other frames are
// ignored) or the deadline passes.
func readN(t *testing.T, p dataplane.Port, n int, et uint16) [][]byte {
	t.Helper()
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < n {
			k, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				return
			}
			for i := 0; i < k; i++ {
				if sizes[i] >= 14 && binary.BigEndian.Uint16(bufs[i][12:]) == et ||
					sizes[i] >= 18 && binary.BigEndian.Uint16(bufs[i][16:]) == et {
					got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
				}
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		p.Close()
		<-done
		t.Fatalf("got %d of %d frames", len(got), n)
	}
	return got
}

func TestAFPacketReceivePaths(t *testing.T) {
	for _, ring := range []bool{true, false} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			tx, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{NoRxRing: !ring})
			const et = 0x88B6
			var want [][]byte
			for i, n := range []int{60, 64, 1000, 1514} {
				want = append(want, testFrame(rx.MAC(), tx.MAC(), et, n, byte(i)))
			}
			if ring {
				// An 802.1Q-tagged frame: the kernel strips the tag into
				// metadata, the ring path must put it back. (recvmmsg loses
				// it; that path is kept only as the fallback.)
				v := testFrame(rx.MAC(), tx.MAC(), 0x8100, 200, 9)
				binary.BigEndian.PutUint16(v[14:], 0x2005) // PCP 1, VID 5
				binary.BigEndian.PutUint16(v[16:], et)
				want = append(want, v)
			}
			if n, err := tx.WriteBatch(want); n != len(want) || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(want))
			}
			got := readN(t, rx, len(want), et)
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("frame %d:\n got %x\nwant %x", i, got[i], want[i])
				}
			}
		})
	}
}

func TestAFPacketRingOversize(t *testing.T) {
	tx, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{MTU: 576})
	const et = 0x88B6
	big := testFrame(rx.MAC(), tx.MAC(), et, 1000, 1) // over 576+18
	ok := testFrame(rx.MAC(), tx.MAC(), et, 500, 2)
	if n, err := tx.WriteBatch([][]byte{big, ok}); n != 2 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readN(t, rx, 1, et)
	if !bytes.Equal(got[0], ok) {
		t.Fatalf("got %x, want the 500-byte frame", got[0])
	}
	if o := rx.Stats().Oversize; o != 1 {
		t.Fatalf("Oversize = %d, want 1", o)
	}
}

func TestAFPacketRingCloseUnblocksRead(t *testing.T) {
	_, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{})
	errc := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, 2048)}
		for {
			if _, err := rx.ReadBatch(bufs, make([]int, 1)); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	rx.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReadBatch still blocked after Close")
	}
}

// readLent reads lent batches until n frames with EtherType et arrived,
// keeping copies, and returns them with the frames of the last batch as
// lent (still valid: nothing was read after them).
func readLent(t *testing.T, l dataplane.Lender, mtu, n int, et uint16) (got, last [][]byte) {
	t.Helper()
	bufs, frames := make([][]byte, 8), make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(mtu))
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		k, err := l.ReadLent(bufs, frames)
		if err != nil {
			t.Fatal(err)
		}
		last = last[:0]
		for _, f := range frames[:k] {
			if f != nil && (len(f) >= 14 && binary.BigEndian.Uint16(f[12:]) == et ||
				len(f) >= 18 && binary.BigEndian.Uint16(f[16:]) == et) {
				got = append(got, append([]byte(nil), f...))
				last = append(last, f)
			}
		}
	}
	if len(got) < n {
		t.Fatalf("got %d of %d frames", len(got), n)
	}
	return got, last
}

// TestAFPacketLentFrames: frames lent in place out of the ring are the
// frames sent, 802.1Q tags put back, and a frame longer than the port's
// MTU allows is skipped and counted as oversize, as with the copy.
func TestAFPacketLentFrames(t *testing.T) {
	tx, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{MTU: 1000})
	l, ok := rx.(dataplane.Lender)
	if !ok || !l.Lends() {
		t.Fatal("an AF_PACKET port with a ring does not lend")
	}
	const et = 0x88B6
	var want [][]byte
	for i, n := range []int{60, 64, 700, 1014} {
		want = append(want, testFrame(rx.MAC(), tx.MAC(), et, n, byte(i)))
	}
	v := testFrame(rx.MAC(), tx.MAC(), 0x8100, 200, 9)
	binary.BigEndian.PutUint16(v[14:], 0x2005) // PCP 1, VID 5
	binary.BigEndian.PutUint16(v[16:], et)
	want = append(want, v)
	send := append([][]byte{testFrame(rx.MAC(), tx.MAC(), et, 1200, 7)}, want...) // over 1000+18: skipped
	if n, err := tx.WriteBatch(send); n != len(send) || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(send))
	}
	got, _ := readLent(t, l, rx.MTU(), len(want), et)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d:\n got %x\nwant %x", i, got[i], want[i])
		}
	}
	if o := rx.Stats().Oversize; o != 1 {
		t.Fatalf("Oversize = %d, want 1", o)
	}
	l.ReleaseLent()
	// Without a ring there is nothing to lend.
	_, rm := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{NoRxRing: true})
	if l, ok := rm.(dataplane.Lender); ok && l.Lends() {
		t.Fatal("a recvmmsg port claims to lend")
	}
}

// TestAFPacketLentFramesStayValid: lent frames are not overwritten while
// the kernel keeps filling the ring behind them (far more than the ring
// holds), the next reads go on in order from where the batch stopped, and
// Close waits until the frames are handed back.
func TestAFPacketLentFramesStayValid(t *testing.T) {
	tx, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{})
	l := rx.(dataplane.Lender)
	const et = 0x88B6
	seqFrame := func(seq uint32) []byte {
		f := testFrame(rx.MAC(), tx.MAC(), et, 1500, byte(seq))
		binary.BigEndian.PutUint32(f[14:], seq)
		return f
	}
	var first [][]byte
	for s := uint32(0); s < 20; s++ {
		first = append(first, seqFrame(s))
	}
	if n, err := tx.WriteBatch(first); n != len(first) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	time.Sleep(5 * time.Millisecond) // past the block timeout: the block is retired
	bufs, frames := make([][]byte, 4), make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(rx.MTU()))
	}
	k, err := l.ReadLent(bufs, frames)
	if err != nil || k == 0 {
		t.Fatalf("ReadLent = %d, %v", k, err)
	}
	keep := make([][]byte, k)
	for i, f := range frames[:k] {
		keep[i] = append([]byte(nil), f...)
	}
	// 8 MiB more behind them: the ring (4 MiB) fills and the kernel drops.
	var flood [][]byte
	for s := uint32(1000); s < 1000+5600; s++ {
		flood = append(flood, seqFrame(s))
		if len(flood) == 64 {
			tx.WriteBatch(flood)
			flood = flood[:0]
		}
	}
	time.Sleep(20 * time.Millisecond)
	for i, f := range frames[:k] {
		if !bytes.Equal(f, keep[i]) {
			t.Fatalf("lent frame %d changed while lent", i)
		}
	}
	// The reads continue with the frame after the batch, in order.
	next := binary.BigEndian.Uint32(keep[k-1][14:]) + 1
	got, _ := readLent(t, l, rx.MTU(), int(20-next)+1, et)
	for i, f := range got {
		if s := binary.BigEndian.Uint32(f[14:]); i < int(20-next) && s != next+uint32(i) {
			t.Fatalf("after the lent batch: frame %d has sequence %d, want %d", i, s, next+uint32(i))
		}
	}
	closed := make(chan struct{})
	go func() { rx.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while frames were lent")
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := l.ReadLent(bufs, frames); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadLent after Close: %v, want net.ErrClosed", err)
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close still waiting after the lent frames were handed back")
	}
	l.ReleaseLent() // nothing lent: a no-op
}

// BenchmarkForwardVeth pushes b.N frames through a running dataplane between
// two veths (sender -> [dataplane] -> counter, as scripts/bench-forward.sh
// does across namespaces) and reports received frames/s and ns per received
// frame; the sender outruns the forwarder, so only received frames count.
//
//	go test -run '^$' -bench ForwardVeth -benchmem ./dataplane/
func BenchmarkForwardVeth(b *testing.B) {
	for _, ring := range []bool{false, true} {
		for _, size := range []int{64, 1500} {
			b.Run(fmt.Sprintf("ring=%v/%s", ring, sizeName(size)), func(b *testing.B) {
				benchForwardVeth(b, ring, size)
			})
		}
	}
}

// forwardVeths builds h1 <-> swA and h2 <-> swB veth pairs in a fresh
// namespace, opens the hosts' ends with host and the switch's ends with sw,
// and starts a dataplane bridging swA and swB. ports is h1, swA, h2, swB;
// everything is closed at cleanup.
func forwardVeths(tb testing.TB, host, sw dataplane.PortOptions) (ports [4]dataplane.Port, d *dataplane.Dataplane) {
	env := netnstest.New(tb, "pt")
	ns := env.Namespace("x")
	h1, swA := env.Veth(ns, ns)
	h2, swB := env.Veth(ns, ns)
	for _, i := range []string{h1, swA, h2, swB} {
		env.DisableOffloads(ns, i)
	}
	env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	var err error
	env.Do(ns, func() {
		for i, n := range []string{h1, swA, h2, swB} {
			o := host
			if i%2 == 1 {
				o = sw
			}
			if ports[i], err = dataplane.OpenAFPacket(n, o); err != nil {
				return
			}
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	if d, err = dataplane.New(dataplane.Options{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close(); ports[0].Close(); ports[2].Close() })
	if err := d.SetPorts([]dataplane.Port{ports[1], ports[3]}); err != nil {
		tb.Fatal(err)
	}
	return ports, d
}

// readEvery reads p until it is closed, calling each with every frame of
// EtherType et (at least min bytes long); the channel closes when it stops.
func readEvery(p dataplane.Port, et uint16, min int, each func(f []byte)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, dataplane.DefaultBatch)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				return
			}
			for i := 0; i < n; i++ {
				if sizes[i] >= max(min, 14) && binary.BigEndian.Uint16(bufs[i][12:]) == et {
					each(bufs[i][:sizes[i]])
				}
			}
		}
	}()
	return done
}

func benchForwardVeth(b *testing.B, ring bool, size int) {
	ports, _ := forwardVeths(b, dataplane.PortOptions{NoRxRing: !ring}, dataplane.PortOptions{NoRxRing: !ring})
	const et = 0x88B6
	// Teach the switch where h2 is, then stream h1 -> h2.
	ports[2].WriteBatch([][]byte{testFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ports[2].MAC(), 0x88B7, 60, 0)})
	time.Sleep(5 * time.Millisecond)
	f := testFrame(ports[2].MAC(), ports[0].MAC(), et, size, 0)
	batch := make([][]byte, dataplane.DefaultBatch)
	for i := range batch {
		batch[i] = f
	}
	var got atomic.Int64
	rxDone := readEvery(ports[2], et, 14, func([]byte) { got.Add(1) })
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(len(batch), b.N-sent)
		n, _ := ports[0].WriteBatch(batch[:k])
		sent += k
		if n < k {
			time.Sleep(50 * time.Microsecond) // peer backlog full: let it drain
		}
	}
	// Frames still in flight: wait until the count settles (ring blocks are
	// handed over after at most 1 ms).
	for last := int64(-1); got.Load() != last; {
		last = got.Load()
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	r := got.Load()
	ports[2].Close()
	<-rxDone
	if r == 0 && b.N >= 1000 {
		b.Fatal("no frame forwarded")
	}
	b.ReportMetric(float64(r)/b.Elapsed().Seconds(), "rx-frames/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(r), "ns/rx-frame")
	b.ReportMetric(float64(r)/float64(b.N), "delivered")
}

// The per-batch AF_PACKET paths (sendmmsg, ring walk, recvmmsg) allocate nothing.
func TestAFPacketPortZeroAllocs(t *testing.T) {
	for _, ring := range []bool{true, false} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			tx, rx := vethPorts(t, dataplane.PortOptions{}, dataplane.PortOptions{NoRxRing: !ring})
			const k = 8
			batch := make([][]byte, k)
			for i := range batch {
				batch[i] = testFrame(rx.MAC(), tx.MAC(), 0x88B6, 128, byte(i))
			}
			bufs := make([][]byte, k)
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, k)
			step := func() {
				if n, err := tx.WriteBatch(batch); n != k || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
				for got := 0; got < k; {
					n, err := rx.ReadBatch(bufs, sizes)
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
			}
			step()
			if a := alloctest.PerRun(50, step); a != 0 && !raceEnabled {
				t.Errorf("%.1f allocations per write+read of %d frames, want 0", a, k)
			}
		})
	}
}

// TestSparseLaneFollowsRate: a switch port with PortOptions.SparseFPS reads
// every frame on its lane while traffic is sparse, moves to its ring when a
// stream exceeds twice the threshold, and back once the stream has been
// quiet for a while; across the moves every frame is forwarded exactly
// once (sequence numbers counted at the receiving host).
func TestSparseLaneFollowsRate(t *testing.T) {
	const fps = 10000
	ports, d := forwardVeths(t, dataplane.PortOptions{NoRxRing: true}, dataplane.PortOptions{Lane: true, SparseFPS: fps})
	portA := func() dataplane.PortSample { return d.Stats().Ports[0] }
	if !portA().LaneAll {
		t.Fatal("a new port is not on its lane")
	}
	const et = 0x88B6
	ports[2].WriteBatch([][]byte{testFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ports[2].MAC(), 0x88B7, 60, 0)})
	time.Sleep(10 * time.Millisecond)
	var seen sync.Map
	var got, dups atomic.Int64
	readEvery(ports[2], et, 20, func(f []byte) {
		if _, dup := seen.LoadOrStore(binary.BigEndian.Uint32(f[14:]), true); dup {
			dups.Add(1)
		}
		got.Add(1)
	})
	seq := uint32(0)
	send := func(k int) {
		batch := make([][]byte, k)
		for i := range batch {
			f := testFrame(ports[2].MAC(), ports[0].MAC(), et, 200, 0)
			binary.BigEndian.PutUint32(f[14:], seq)
			seq++
			batch[i] = f
		}
		if n, err := ports[0].WriteBatch(batch); n != k {
			t.Fatalf("sent %d of %d: %v", n, k, err)
		}
	}
	// Sparse: a frame every 2 ms.
	for i := 0; i < 20; i++ {
		send(1)
		time.Sleep(2 * time.Millisecond)
	}
	if st := portA(); !st.LaneAll || st.LaneSwitches != 0 {
		t.Fatalf("sparse traffic: LaneAll %v after %d switches, want the lane throughout", st.LaneAll, st.LaneSwitches)
	}
	// A stream well above 2*fps (64 frames at a time, every 0.3 ms or
	// whatever the sleep's real granularity is: 1.5 ms on a loaded VM is
	// still 40k frames/s) moves it to the ring.
	for t0 := time.Now(); time.Since(t0) < time.Second && (portA().LaneAll || time.Since(t0) < 30*time.Millisecond); {
		send(64)
		time.Sleep(300 * time.Microsecond)
	}
	if st := portA(); st.LaneAll {
		t.Fatalf("a stream of %d frames did not move the port to its ring (switches %d)", seq, st.LaneSwitches)
	}
	// Sparse again, for longer than sparseQuiet windows: back to the lane.
	for t0 := time.Now(); time.Since(t0) < 500*time.Millisecond && !portA().LaneAll; {
		send(1)
		time.Sleep(2 * time.Millisecond)
	}
	// Bursts this short leave ring blocks to the kernel's timer, so the
	// port may also have gone back to the lane for them (the held rule)
	// and to the ring again: any even number of moves.
	st := portA()
	if !st.LaneAll || st.LaneSwitches < 2 || st.LaneSwitches%2 != 0 {
		t.Fatalf("after the stream: LaneAll %v, switches %d; want the lane again after an even number of switches", st.LaneAll, st.LaneSwitches)
	}
	send(1)
	for last := int64(-1); got.Load() != last; {
		last = got.Load()
		time.Sleep(20 * time.Millisecond)
	}
	if kd := portA().KernelDrops; kd != 0 {
		t.Fatalf("the kernel dropped %d frames at the switch port: the count below would mislead", kd)
	}
	if g, dup := got.Load(), dups.Load(); g != int64(seq) || dup != 0 {
		t.Fatalf("the receiving host got %d frames (%d duplicates) of %d sent", g, dup, seq)
	}
	t.Logf("%d frames forwarded once each across %d lane/ring switches", seq, st.LaneSwitches)
}

// TestIngressFaultKeepsLaneNarrow: lane frames do not pass through an
// ingress fault, so a port wrapped in one keeps only CONTROL on its lane:
// the DATA the fault must impair is read from the ring, through the fault.
func TestIngressFaultKeepsLaneNarrow(t *testing.T) {
	pa, pb := vethPorts(t, dataplane.PortOptions{NoRxRing: true}, dataplane.PortOptions{Lane: true, SparseFPS: dataplane.DefaultSparseFPS})
	if st := pb.Stats(); !st.LaneAll {
		t.Fatal("a port with SparseFPS does not start on its lane")
	}
	fp := dataplane.WithFault(pb, dataplane.Fault{Ingress: dataplane.IngressFault{DropPercent: 100}})
	if st := fp.Stats(); st.LaneAll {
		t.Fatal("behind an ingress fault the port still reads every frame on its lane")
	}
	// Every DATA frame must meet the fault (100% loss) on the read path.
	data := testFrame(pb.MAC(), pa.MAC(), 0x88B5, 64, 0)
	data[15] = 2 // class DATA
	for i := 0; i < 20; i++ {
		if _, err := pa.WriteBatch([][]byte{data}); err != nil {
			t.Fatal(err)
		}
	}
	l, ok := pb.(dataplane.Laner)
	if !ok {
		t.Fatal("the port has no lane")
	}
	got := make(chan int, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		n, _ := l.ReadLane(bufs, sizes)
		got <- n
	}()
	select {
	case n := <-got:
		t.Fatalf("%d DATA frames came out of the lane, past the ingress fault", n)
	case <-time.After(300 * time.Millisecond):
	}
	if st := fp.Stats(); st.Fault.IngressDrops == 0 {
		// Nothing read them yet: read through the fault.
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		done := make(chan struct{})
		go func() { defer close(done); fp.ReadBatch(bufs, sizes) }()
		time.Sleep(200 * time.Millisecond)
		if st := fp.Stats(); st.Fault.IngressDrops == 0 {
			t.Fatal("the DATA frames did not meet the ingress fault")
		}
		fp.Close()
		<-done
	}
}

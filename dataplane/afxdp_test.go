package dataplane_test

// Tests of the AF_XDP port on real veths (root only; CI runs them as root):
// each test puts an AF_XDP port on one end of a veth pair in namespace "a"
// and an AF_PACKET port on the other end in namespace "b", so every frame
// crosses the kernel for real and is compared byte for byte.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// far is the destination of the test frames: a unicast MAC no port owns,
// as for frames a switch forwards. (Non-PRISM frames to the AF_XDP port's
// own MAC go to its host stack, see TestAFXDPHostTrafficPasses.)
var far = [6]byte{0x02, 0, 0, 0, 0, 0x42}

type xdpPair struct {
	env      *netnstest.Env
	nsA, nsB string
	ifA, ifB string
	x, peer  dataplane.Port
}

// newXDPPair builds the pair with both ends at mtu and opens the ports.
func newXDPPair(tb testing.TB, mtu int, o dataplane.XDPOptions) *xdpPair {
	env := netnstest.New(tb, "xd")
	p := &xdpPair{env: env, nsA: env.Namespace("a"), nsB: env.Namespace("b")}
	p.ifA, p.ifB = env.Veth(p.nsA, p.nsB)
	for _, x := range [][2]string{{p.nsA, p.ifA}, {p.nsB, p.ifB}} {
		env.DisableOffloads(x[0], x[1])
		// No IPv6 autoconf or MLD frames in the way of the frames under test.
		env.MustExec(x[0], "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
		if mtu != 1500 {
			env.MustExec(x[0], "ip", "link", "set", x[1], "mtu", fmt.Sprint(mtu))
		}
	}
	var err error
	env.Do(p.nsA, func() { p.x, err = dataplane.OpenAFXDP(p.ifA, o) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.x.Close() })
	env.Do(p.nsB, func() { p.peer, err = dataplane.OpenAFPacket(p.ifB, dataplane.PortOptions{}) })
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.peer.Close() })
	return p
}

// xdpSeqFrames returns n frames of EtherType et with a 16-bit sequence number at
// offset 14 and sizes cycling through sizes.
func xdpSeqFrames(dst, src [6]byte, et uint16, n int, sizes []int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		f := testFrame(dst, src, et, sizes[i%len(sizes)], byte(i*7))
		binary.BigEndian.PutUint16(f[14:], uint16(i))
		out[i] = f
	}
	return out
}

func writeAll(t *testing.T, p dataplane.Port, frames [][]byte) {
	t.Helper()
	for i := 0; i < len(frames); i += dataplane.DefaultBatch {
		b := frames[i:min(i+dataplane.DefaultBatch, len(frames))]
		if n, err := p.WriteBatch(b); n != len(b) || err != nil {
			t.Fatalf("WriteBatch of %d frames = %d, %v", len(b), n, err)
		}
	}
}

func sameFrames(t *testing.T, dir string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d frames, want %d", dir, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: frame %d (%d bytes) differs:\n got %x\nwant %x", dir, i, len(want[i]), head(got[i]), head(want[i]))
		}
	}
}

// collectCounting reads until n frames of EtherType et arrived, or until
// 5 s pass without a frame (then it closes p to end the blocked read),
// adding every frame read to progress. It may run off the test goroutine:
// it does not fail the test, the caller compares.
func collectCounting(p dataplane.Port, n int, et uint16, progress *atomic.Int64) [][]byte {
	bufs := make([][]byte, dataplane.DefaultBatch)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
	}
	sizes := make([]int, len(bufs))
	var got [][]byte
	done := make(chan struct{})
	defer close(done)
	go func() {
		for last := int64(-1); ; {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Second):
			}
			if cur := progress.Load(); cur == last {
				p.Close()
				return
			} else {
				last = cur
			}
		}
	}()
	for len(got) < n {
		k, err := p.ReadBatch(bufs, sizes)
		if err != nil {
			return got
		}
		for i := 0; i < k; i++ {
			if sizes[i] >= 14 && binary.BigEndian.Uint16(bufs[i][12:]) == et {
				got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
			}
		}
		progress.Add(int64(k))
	}
	return got
}

func head(b []byte) []byte { return b[:min(len(b), 64)] }

// Frames cross the AF_XDP port unchanged in both directions, at MTU 1500
// (one 2 KiB UMEM chunk per frame) and 9000 (multi-buffer frames spanning
// three 4 KiB chunks), including an 802.1Q-tagged frame and sizes at every
// chunk boundary, with the program attached in generic and in native mode.
func TestAFXDPExchange(t *testing.T) {
	for _, c := range []struct {
		mtu    int
		native bool
	}{{1500, false}, {9000, false}, {1500, true}, {9000, true}} {
		mtu := c.mtu
		t.Run(fmt.Sprintf("mtu=%d/native=%v", mtu, c.native), func(t *testing.T) {
			p := newXDPPair(t, mtu, dataplane.XDPOptions{Native: c.native})
			if p.x.MTU() != mtu {
				t.Fatalf("MTU() = %d, want the interface MTU %d", p.x.MTU(), mtu)
			}
			const et = 0x88B6
			// Untagged frames are at most mtu+14 bytes; the tagged one below
			// takes the full mtu+18.
			sizes := []int{60, 64, 1000, 1514}
			if mtu == 9000 {
				sizes = append(sizes, 1792, 1793, 2048, 3840, 3841, 4096, 4097, 8192, 9014)
			}
			for _, dir := range []struct {
				name     string
				from, to dataplane.Port
			}{{"peer->xdp", p.peer, p.x}, {"xdp->peer", p.x, p.peer}} {
				want := xdpSeqFrames(far, dir.from.MAC(), et, 3*len(sizes), sizes)
				v := testFrame(far, dir.from.MAC(), 0x8100, mtu+18, 9)
				binary.BigEndian.PutUint16(v[14:], 0x2005) // PCP 1, VID 5
				binary.BigEndian.PutUint16(v[16:], et)
				want = append(want, v)
				writeAll(t, dir.from, want)
				sameFrames(t, dir.name, readN(t, dir.to, len(want), et), want)
			}
			if d := p.x.Stats().KernelDrops; d != 0 {
				t.Errorf("KernelDrops = %d, want 0", d)
			}
		})
	}
}

// Thousands of frames in full batches, both ways, arrive complete and in
// order (the sequence number in each frame checks it): the fill ring is
// refilled and TX chunks come back from the completion ring many times over.
func TestAFXDPLargeBatches(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	const et, n = 0x88B6, 6000
	sizes := []int{60, 333, 1514}
	for _, dir := range []struct {
		name     string
		from, to dataplane.Port
	}{{"xdp->peer", p.x, p.peer}, {"peer->xdp", p.peer, p.x}} {
		want := xdpSeqFrames(far, dir.from.MAC(), et, n, sizes)
		var progress atomic.Int64
		got := make(chan [][]byte, 1)
		go func() { got <- collectCounting(dir.to, n, et, &progress) }()
		// Flow control: never more than 512 frames ahead of the reader, so
		// a slow reader (race detector, loaded CI machine) drops nothing
		// in the receiving socket and the comparison can be exact.
		for i := 0; i < n; i += 256 {
			for deadline := time.Now().Add(5 * time.Second); int64(i)-progress.Load() > 512; {
				if time.Now().After(deadline) {
					t.Fatalf("%s: reader stuck at %d of %d frames", dir.name, progress.Load(), i)
				}
				time.Sleep(time.Millisecond)
			}
			writeAll(t, dir.from, want[i:min(i+256, n)])
		}
		sameFrames(t, dir.name, <-got, want)
	}
}

// Frames the kernel cannot place (rings full while nobody reads) are counted
// in KernelDrops, each exactly once: sent = read + dropped.
func TestAFXDPKernelDrops(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{RingSize: 64})
	const et, n = 0x88B6, 300
	writeAll(t, p.peer, xdpSeqFrames(far, p.peer.MAC(), et, n, []int{100}))
	time.Sleep(100 * time.Millisecond) // let the kernel finish delivering
	drops := p.x.Stats().KernelDrops
	got := collectFor(p.x, et, 300*time.Millisecond)
	if drops == 0 || uint64(got)+drops != n {
		t.Fatalf("read %d + KernelDrops %d != %d sent (with a 64-frame ring and no reader)", got, drops, n)
	}
}

// Frames the device drops after the kernel took them from the TX ring (here:
// the veth has no carrier because its peer is down, so each sendto kick
// reports EBUSY) are counted as drop reason tx_driver_drop, one per frame:
// the oracle is the interface's own tx_dropped counter. TX invalid
// descriptors are covered in package xdp (TestStatsSumQueues).
func TestAFXDPTxDriverDrops(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	txDropped := func() uint64 {
		out := p.env.MustExec(p.nsA, "cat", "/sys/class/net/"+p.ifA+"/statistics/tx_dropped")
		v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// peer sets ifB down or up and waits until ifA's carrier follows.
	peer := func(state, carrier string) {
		p.env.MustExec(p.nsB, "ip", "link", "set", p.ifB, state)
		for deadline := time.Now().Add(5 * time.Second); ; {
			if c := p.env.MustExec(p.nsA, "cat", "/sys/class/net/"+p.ifA+"/carrier"); strings.TrimSpace(c) == carrier {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s carrier is not %s 5s after its peer went %s", p.ifA, carrier, state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	peer("down", "0")
	before := txDropped()
	const k = 40
	frames := xdpSeqFrames(far, p.x.MAC(), 0x88B6, k, []int{100})
	if n, err := p.x.WriteBatch(frames); n != k || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want %d queued", n, err, k)
	}
	dev := txDropped() - before
	st := p.x.Stats()
	if dev != k || st.Drops[dataplane.DropTxDriverDrop] != k {
		t.Fatalf("%d frames without carrier: interface tx_dropped +%d, Stats tx_driver_drop %d; want %d each",
			k, dev, st.Drops[dataplane.DropTxDriverDrop], k)
	}
	if st.Drops[dataplane.DropTxInvalidDesc] != 0 || st.KernelDrops != 0 {
		t.Errorf("Stats %+v: only tx_driver_drop should have moved", st)
	}
	// With the carrier back the frames go through and the count stays.
	peer("up", "1")
	writeAll(t, p.x, frames)
	sameFrames(t, "xdp->peer", readN(t, p.peer, k, 0x88B6), frames)
	if d := p.x.Stats().Drops[dataplane.DropTxDriverDrop]; d != k {
		t.Errorf("tx_driver_drop = %d after frames went through, want still %d", d, k)
	}
}

// collectFor counts frames of EtherType et read until d passes without one.
func collectFor(p dataplane.Port, et uint16, d time.Duration) int {
	bufs := make([][]byte, dataplane.DefaultBatch)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
	}
	sizes := make([]int, len(bufs))
	got := 0
	res := make(chan int)
	go func() {
		for {
			k, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				close(res)
				return
			}
			c := 0
			for i := 0; i < k; i++ {
				if sizes[i] >= 14 && binary.BigEndian.Uint16(bufs[i][12:]) == et {
					c++
				}
			}
			res <- c
		}
	}()
	for {
		select {
		case c := <-res:
			got += c
		case <-time.After(d):
			p.Close()
			for range res {
			}
			return got
		}
	}
}

// A frame longer than the port MTU (but within a UMEM chunk) is counted as
// oversize and its slot skipped, as on the AF_PACKET port.
func TestAFXDPOversize(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{MTU: 576})
	const et = 0x88B6
	big := testFrame(far, p.peer.MAC(), et, 1000, 1)
	ok := testFrame(far, p.peer.MAC(), et, 500, 2)
	writeAll(t, p.peer, [][]byte{big, ok})
	got := readN(t, p.x, 1, et)
	if !bytes.Equal(got[0], ok) {
		t.Fatalf("got %x, want the 500-byte frame", head(got[0]))
	}
	if o := p.x.Stats().Oversize; o != 1 {
		t.Fatalf("Oversize = %d, want 1", o)
	}
	// The port refuses to send what it could not receive.
	if n, err := p.x.WriteBatch([][]byte{big, ok}); n != 1 || err == nil {
		t.Fatalf("WriteBatch(too long, ok) = %d, %v; want 1 and an error", n, err)
	}
}

// Unicast non-PRISM traffic for the port's own MAC stays with the host stack
// (the XDP program passes it), PRISM to that MAC and everything else reaches
// the socket.
func TestAFXDPHostTrafficPasses(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	env := p.env
	ma, mb := p.x.MAC(), p.peer.MAC()
	macA, macB := net.HardwareAddr(ma[:]).String(), net.HardwareAddr(mb[:]).String()
	env.MustExec(p.nsA, "ip", "addr", "add", "10.78.0.1/24", "dev", p.ifA)
	env.MustExec(p.nsB, "ip", "addr", "add", "10.78.0.2/24", "dev", p.ifB)
	// Static neighbours: ARP requests are broadcasts, which the switch
	// port takes (see the package documentation).
	env.MustExec(p.nsA, "ip", "neigh", "replace", "10.78.0.2", "lladdr", macB, "dev", p.ifA, "nud", "permanent")
	env.MustExec(p.nsB, "ip", "neigh", "replace", "10.78.0.1", "lladdr", macA, "dev", p.ifB, "nud", "permanent")
	if out, err := env.Exec(p.nsB, "ping", "-c", "2", "-i", "0.2", "-W", "2", "10.78.0.1"); err != nil {
		t.Fatalf("ping to the XDP port's own address failed (program did not pass host traffic): %v\n%s", err, out)
	}
	// The echo requests did not reach the socket: the first frame it reads
	// is this PRISM frame to the same MAC.
	f := testFrame(p.x.MAC(), p.peer.MAC(), 0x88B5, 100, 3)
	writeAll(t, p.peer, [][]byte{f})
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := p.x.ReadBatch(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], f) {
		t.Fatalf("ReadBatch = %d, %v, %x; want the PRISM frame", n, err, head(bufs[0][:sizes[0]]))
	}
}

// Close wakes a blocked ReadBatch with net.ErrClosed, later calls fail the
// same way, and the XDP program is gone: the interface can be opened again.
func TestAFXDPClose(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	if out := p.env.MustExec(p.nsA, "ip", "link", "show", "dev", p.ifA); !strings.Contains(out, "xdpgeneric") {
		t.Fatalf("no generic XDP program on %s while the port is open:\n%s", p.ifA, out)
	}
	errc := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, 2048)}
		for {
			if _, err := p.x.ReadBatch(bufs, make([]int, 1)); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := p.x.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReadBatch still blocked 2s after Close")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Close took %v", d)
	}
	if _, err := p.x.ReadBatch([][]byte{make([]byte, 64)}, []int{0}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch on a closed port: %v, want net.ErrClosed", err)
	}
	f := testFrame(p.peer.MAC(), p.x.MAC(), 0x88B6, 64, 0)
	if _, err := p.x.WriteBatch([][]byte{f}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch on a closed port: %v, want net.ErrClosed", err)
	}
	if out := p.env.MustExec(p.nsA, "ip", "link", "show", "dev", p.ifA); strings.Contains(out, "xdp") {
		t.Fatalf("XDP program still attached after Close:\n%s", out)
	}
	var err error
	var again dataplane.Port
	p.env.Do(p.nsA, func() { again, err = dataplane.OpenAFXDP(p.ifA, dataplane.XDPOptions{}) })
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	again.Close()
}

// A reader on an idle port sleeps in ppoll: the process burns next to no CPU
// while ReadBatch waits (a spinning reader would use a whole core).
func TestAFXDPIdleReadSleeps(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := p.x.ReadBatch([][]byte{make([]byte, 2048)}, []int{0})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, w0 := cpu(), time.Now()
	time.Sleep(500 * time.Millisecond)
	used, wall := cpu()-c0, time.Since(w0)
	select {
	case err := <-done:
		t.Fatalf("ReadBatch returned on an idle port: %v", err)
	default:
	}
	if used > wall/10 {
		t.Errorf("process used %v of CPU in %v while the reader waited; want under 10%%", used, wall)
	}
	p.x.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v", err)
	}
}

// The per-batch AF_XDP paths (copy into TX chunks + one kick, RX ring walk +
// fill ring refill, the idle ppoll) allocate nothing.
func TestAFXDPZeroAllocs(t *testing.T) {
	p := newXDPPair(t, 1500, dataplane.XDPOptions{})
	// Both ends AF_XDP, so only this backend is measured (the AF_PACKET
	// port's sync.Pool allocates at random under -race).
	p.peer.Close()
	var err error
	p.env.Do(p.nsB, func() { p.peer, err = dataplane.OpenAFXDP(p.ifB, dataplane.XDPOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer p.peer.Close()
	const k = 32
	out := xdpSeqFrames(far, p.x.MAC(), 0x88B6, k, []int{128})
	in := xdpSeqFrames(far, p.peer.MAC(), 0x88B6, k, []int{128})
	bufs := make([][]byte, k)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, k)
	read := func(from dataplane.Port) {
		for got := 0; got < k; {
			n, err := from.ReadBatch(bufs, sizes)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	step := func() {
		if n, err := p.x.WriteBatch(out); n != k || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		read(p.peer)
		if n, err := p.peer.WriteBatch(in); n != k || err != nil {
			t.Fatalf("peer WriteBatch = %d, %v", n, err)
		}
		read(p.x)
	}
	step()
	if a := alloctest.PerRun(50, step); a != 0 {
		t.Errorf("%.1f allocations per %d frames each way, want 0", a, k)
	}
}

// An error opening the port names the interface (cmd/prismd adds the
// advice; e2e.TestXDPRefusedNamesFix covers a real kernel refusal).
func TestAFXDPErrorNamesInterface(t *testing.T) {
	env := netnstest.New(t, "xd")
	ns := env.Namespace("a")
	var err error
	env.Do(ns, func() { _, err = dataplane.OpenAFXDP("xdnosuchif0", dataplane.XDPOptions{}) })
	if err == nil || !strings.Contains(err.Error(), "xdnosuchif0") {
		t.Fatalf("OpenAFXDP(missing interface) = %v, want an error naming it", err)
	}
}

// BenchmarkForwardVethXDP is BenchmarkForwardVeth with AF_XDP switch ports
// (generic and native attach): h1 -> [dataplane on two AF_XDP ports] -> h2,
// the hosts on AF_PACKET. Only received frames count.
//
//	go test -run '^$' -bench ForwardVethXDP -benchmem ./dataplane/
func BenchmarkForwardVethXDP(b *testing.B) {
	for _, native := range []bool{false, true} {
		for _, size := range []int{64, 1500} {
			b.Run(fmt.Sprintf("native=%v/%s", native, sizeName(size)), func(b *testing.B) {
				benchForwardXDP(b, native, size)
			})
		}
	}
}

func benchForwardXDP(b *testing.B, native bool, size int) {
	env := netnstest.New(b, "xd")
	ns := env.Namespace("x")
	h1, swA := env.Veth(ns, ns)
	h2, swB := env.Veth(ns, ns)
	for _, i := range []string{h1, swA, h2, swB} {
		env.DisableOffloads(ns, i)
	}
	env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	var hosts [2]dataplane.Port
	var sw [2]dataplane.Port
	var err error
	env.Do(ns, func() {
		if hosts[0], err = dataplane.OpenAFPacket(h1, dataplane.PortOptions{}); err != nil {
			return
		}
		if hosts[1], err = dataplane.OpenAFPacket(h2, dataplane.PortOptions{}); err != nil {
			return
		}
		if sw[0], err = dataplane.OpenAFXDP(swA, dataplane.XDPOptions{Native: native}); err != nil {
			return
		}
		sw[1], err = dataplane.OpenAFXDP(swB, dataplane.XDPOptions{Native: native})
	})
	if err != nil {
		b.Fatal(err)
	}
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close(); hosts[0].Close(); hosts[1].Close() })
	if err := d.SetPorts(sw[:]); err != nil {
		b.Fatal(err)
	}
	const et = 0x88B6
	hosts[1].WriteBatch([][]byte{testFrame([6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, hosts[1].MAC(), 0x88B7, 60, 0)})
	time.Sleep(5 * time.Millisecond)
	f := testFrame(hosts[1].MAC(), hosts[0].MAC(), et, size, 0)
	batch := make([][]byte, dataplane.DefaultBatch)
	for i := range batch {
		batch[i] = f
	}
	var got atomic.Int64
	rxDone := readEvery(hosts[1], et, 14, func([]byte) { got.Add(1) })
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(len(batch), b.N-sent)
		n, _ := hosts[0].WriteBatch(batch[:k])
		sent += k
		if n < k {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for last := int64(-1); got.Load() != last; {
		last = got.Load()
		time.Sleep(20 * time.Millisecond)
	}
	b.StopTimer()
	r := got.Load()
	hosts[1].Close()
	<-rxDone
	if r == 0 && b.N >= 1000 {
		b.Fatal("no frame forwarded")
	}
	b.ReportMetric(float64(r)/b.Elapsed().Seconds(), "rx-frames/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(r), "ns/rx-frame")
	b.ReportMetric(float64(r)/float64(b.N), "delivered")
}

package dataplane_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
)

// Hand-built frames: the tests do not use the parser to build bytes, so a
// parser bug cannot hide a dataplane bug.

func eth(dst, src [6]byte, etype uint16, payload ...byte) []byte {
	f := make([]byte, 14, 14+len(payload))
	copy(f[0:], dst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], etype)
	return append(f, payload...)
}

// prism builds a PRISM frame: control word then an 18-byte operation identity
// then a few body bytes.
func prism(dst, src [6]byte, version, class byte, job uint64, group, op uint16) []byte {
	p := make([]byte, 2+18+8)
	p[0], p[1] = version, class
	binary.BigEndian.PutUint64(p[2:], job)
	binary.BigEndian.PutUint16(p[10:], group)
	binary.BigEndian.PutUint16(p[14:], op)
	return eth(dst, src, 0x88B5, p...)
}

var (
	hostA = [6]byte{0x0a, 0, 0, 0, 0, 0xa}
	hostB = [6]byte{0x0a, 0, 0, 0, 0, 0xb}
	hostC = [6]byte{0x0a, 0, 0, 0, 0, 0xc}
	bcast = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mcast = [6]byte{0x01, 0x80, 0xc2, 0, 0, 0x0e}
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64          { return c.ns.Load() }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func setup(t *testing.T, nports int, opts dataplane.Options) (*dataplane.Dataplane, []*porttest.Port) {
	t.Helper()
	d, err := dataplane.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var ports []*porttest.Port
	var ifs []dataplane.Port
	for i := 0; i < nports; i++ {
		p := porttest.New("p"+string(rune('0'+i)), porttest.MAC(byte(0x10+i)), 1500)
		ports = append(ports, p)
		ifs = append(ifs, p)
	}
	if err := d.SetPorts(ifs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, ports
}

// expect checks that exactly the ports in want received frame (once each) and
// the others nothing, after everything in flight drained.
func expect(t *testing.T, ports []*porttest.Port, frame []byte, want ...int) {
	t.Helper()
	set := map[int]bool{}
	for _, w := range want {
		set[w] = true
		got, err := ports[w].Wait(1, 2*time.Second)
		if err != nil {
			t.Fatalf("port %d: %v", w, err)
		}
		if !bytes.Equal(got[0], frame) {
			t.Fatalf("port %d got %x, want %x", w, got[0], frame)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for i, p := range ports {
		if extra := p.Take(); len(extra) > 0 {
			t.Fatalf("port %d got %d unexpected frames (want only ports %v): %x", i, len(extra), want, extra[0])
		}
		_ = set
	}
}

func drops(d *dataplane.Dataplane, port int, r dataplane.DropReason) uint64 {
	return d.Stats().Ports[port].Drops[r]
}

func waitDrops(t *testing.T, d *dataplane.Dataplane, port int, r dataplane.DropReason, want uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for drops(d, port, r) < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := drops(d, port, r); got != want {
		t.Fatalf("port %d drops{reason=%s} = %d, want %d", port, r, got, want)
	}
}

func TestLearningAndFlooding(t *testing.T) {
	d, ports := setup(t, 3, dataplane.Options{})
	f1 := eth(hostB, hostA, 0x0800, 1, 2, 3)
	ports[0].Inject(f1)
	expect(t, ports, f1, 1, 2) // B unknown: flood to all but ingress

	f2 := eth(hostA, hostB, 0x0800, 4)
	ports[1].Inject(f2)
	expect(t, ports, f2, 0) // A learned on port 0

	f3 := eth(hostB, hostA, 0x0800, 5)
	ports[0].Inject(f3)
	expect(t, ports, f3, 1) // B learned on port 1

	f4 := eth(bcast, hostA, 0x0806, 6)
	ports[0].Inject(f4)
	expect(t, ports, f4, 1, 2)

	f5 := eth([6]byte{0x01, 0x00, 0x5e, 0, 0, 0xfb}, hostB, 0x0800, 7) // IPv4 multicast (mDNS)
	ports[1].Inject(f5)
	expect(t, ports, f5, 0, 2)

	// Station move: A now talks from port 2.
	f6 := eth(bcast, hostA, 0x0806, 8)
	ports[2].Inject(f6)
	expect(t, ports, f6, 0, 1)
	if m := d.Stats().Ports[2].Moved; m != 1 {
		t.Fatalf("A moved to port 2: moves counted there %d, want 1", m)
	}
	f7 := eth(hostA, hostB, 0x0800, 9)
	ports[1].Inject(f7)
	expect(t, ports, f7, 2)
}

func TestHairpinDropped(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	fa := eth(bcast, hostA, 0x0806)
	ports[0].Inject(fa)
	expect(t, ports, fa, 1)
	fc := eth(bcast, hostC, 0x0806)
	ports[0].Inject(fc)
	expect(t, ports, fc, 1)
	// A and C both on port 0: a frame between them must not go back out.
	f := eth(hostC, hostA, 0x0800, 1)
	ports[0].Inject(f)
	waitDrops(t, d, 0, dataplane.DropHairpin, 1)
	expect(t, ports, nil)
}

// TestLinkLocalBoundaries: the reserved range is 01:80:C2:00:00:01-0F;
// STP's :00 and the next group address, :10, are flooded, and a zero
// source learns nothing (a frame to 00:00:00:00:00:00 is still unknown
// unicast, flooded).
func TestLinkLocalBoundaries(t *testing.T) {
	d, ports := setup(t, 3, dataplane.Options{})
	for _, last := range []byte{0x00, 0x10} {
		f := eth([6]byte{0x01, 0x80, 0xc2, 0, 0, last}, hostA, 0x0027, 1)
		ports[0].Inject(f)
		expect(t, ports, f, 1, 2)
	}
	ports[0].Inject(eth(bcast, [6]byte{}, 0x0806, 1))
	waitDrops(t, d, 0, dataplane.DropBadSrcMAC, 1)
	f := eth([6]byte{}, hostB, 0x0800, 2)
	ports[1].Inject(f)
	expect(t, ports, f, 0, 2)
	if got := drops(d, 0, dataplane.DropLinkLocal); got != 0 {
		t.Fatalf("link_local drops %d, want 0", got)
	}
}

// TestEgressMTU: between ports of different MTUs a frame too long for its
// egress port is dropped there as tx_oversize, flooded or unicast, and
// still reaches the ports it fits.
func TestEgressMTU(t *testing.T) {
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ports := []*porttest.Port{porttest.New("p0", porttest.MAC(0x10), 9000), porttest.New("p1", porttest.MAC(0x11), 1500),
		porttest.New("p2", porttest.MAC(0x12), 9000)}
	if err := d.SetPorts([]dataplane.Port{ports[0], ports[1], ports[2]}); err != nil {
		t.Fatal(err)
	}
	big := eth(bcast, hostA, 0x0800, make([]byte, 4000)...)
	ports[0].Inject(big)
	expect(t, ports, big, 2)
	waitDrops(t, d, 1, dataplane.DropTxOversize, 1)
	// Learn B on p1, then a unicast frame too long for it, and one that fits
	// (1500 bytes of payload, the header and a tag's worth of slack).
	fb := eth(bcast, hostB, 0x0806, 1)
	ports[1].Inject(fb)
	expect(t, ports, fb, 0, 2)
	ports[0].Inject(eth(hostB, hostA, 0x0800, make([]byte, 1600)...))
	waitDrops(t, d, 1, dataplane.DropTxOversize, 2)
	fits := eth(hostB, hostA, 0x0800, make([]byte, 1500)...)
	ports[0].Inject(fits)
	expect(t, ports, fits, 1)
	if got := drops(d, 0, dataplane.DropTxOversize) + drops(d, 2, dataplane.DropTxOversize); got != 0 {
		t.Fatalf("tx_oversize counted on ports 0 or 2: %d", got)
	}
}

// TestIngressOversize: an untagged frame over the ingress port's MTU (its
// sender's MTU is larger: the read buffer keeps 4 bytes for a VLAN tag) is
// dropped as oversize on arrival; the same length with an 802.1Q tag, and
// an untagged frame of exactly MTU bytes, are relayed. Relayed, the
// untagged one failed on every egress port (tx_error).
func TestIngressOversize(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	over := eth(bcast, hostA, 0x0800, make([]byte, 1502)...)
	ports[0].Inject(over)
	waitDrops(t, d, 0, dataplane.DropOversize, 1)
	tagged := eth(bcast, hostA, 0x8100, make([]byte, 1504)...) // tag + 1500 bytes
	ports[0].Inject(tagged)
	expect(t, ports, tagged, 1)
	fits := eth(bcast, hostA, 0x0800, make([]byte, 1500)...)
	ports[0].Inject(fits)
	expect(t, ports, fits, 1)
	if got := drops(d, 0, dataplane.DropOversize); got != 1 {
		t.Fatalf("oversize drops %d, want 1 (the untagged frame over the MTU only)", got)
	}
}

func TestAging(t *testing.T) {
	var clk fakeClock
	clk.add(time.Hour)
	d, ports := setup(t, 3, dataplane.Options{MACAging: 10 * time.Second, Clock: clk.now})
	fa := eth(bcast, hostA, 0x0806)
	ports[0].Inject(fa)
	expect(t, ports, fa, 1, 2)
	if got := d.Stats().MACEntries; got != 1 {
		t.Fatalf("MAC entries = %d, want 1", got)
	}
	clk.add(5 * time.Second)
	f := eth(hostA, hostB, 0x0800, 1)
	ports[1].Inject(f)
	expect(t, ports, f, 0) // still learned
	clk.add(11 * time.Second)
	// A aged out (B was learned 11 s ago, too): unknown unicast floods again.
	f2 := eth(hostA, hostC, 0x0800, 2)
	ports[2].Inject(f2)
	expect(t, ports, f2, 0, 1)
	d.SweepForTest()
	if got := d.Stats().MACEntries; got != 1 { // only C, just learned
		t.Fatalf("MAC entries after sweep = %d, want 1", got)
	}
}

func TestDropsByReason(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	local := porttest.MAC(0x10) // port 0's MAC
	cases := []struct {
		name   string
		frame  []byte
		reason dataplane.DropReason
	}{
		{"short", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, dataplane.DropShortFrame},
		{"empty-ethertype", eth(hostB, hostA, 0x0800)[:12], dataplane.DropShortFrame},
		{"group source", eth(hostB, mcast, 0x0800, 1), dataplane.DropBadSrcMAC},
		{"zero source", eth(bcast, [6]byte{}, 0x0806, 1), dataplane.DropBadSrcMAC},
		{"PAUSE", eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x01}, hostA, 0x8808, 1), dataplane.DropLinkLocal},
		{"LACP", eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x02}, hostA, 0x8809, 1), dataplane.DropLinkLocal},
		{"802.1X", eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x03}, hostA, 0x888e, 1), dataplane.DropLinkLocal},
		{"LLDP", eth(mcast, hostA, 0x88cc, 1), dataplane.DropLinkLocal},
		{"reserved 0F", eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x0f}, hostA, 0x88cc, 1), dataplane.DropLinkLocal},
		{"own source", eth(hostB, porttest.MAC(0x11), 0x0800, 1), dataplane.DropLoopback},
		{"bad version", prism(local, hostA, 0x20, 2, 1, 1, 1), dataplane.DropBadVersion},
		{"version 0", prism(local, hostA, 0x00, 2, 1, 1, 1), dataplane.DropBadVersion},
		{"class 0", prism(local, hostA, 0x10, 0, 1, 1, 1), dataplane.DropUnknownClass},
		{"class 5", prism(local, hostA, 0x10, 5, 1, 1, 1), dataplane.DropUnknownClass},
		{"class 255", prism(local, hostA, 0x11, 255, 1, 1, 1), dataplane.DropUnknownClass},
		{"no control word", eth(local, hostA, 0x88B5, 0x10), dataplane.DropTruncated},
		{"short op identity", prism(local, hostA, 0x10, 1, 1, 1, 1)[:14+2+17], dataplane.DropTruncated},
		{"valid, no engine", prism(local, hostA, 0x1f, 3, 1, 1, 1), dataplane.DropUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := drops(d, 0, c.reason)
			ports[0].Inject(c.frame)
			waitDrops(t, d, 0, c.reason, before+1)
			expect(t, ports, nil)
		})
	}
	// Every drop above was counted once under its own reason and nowhere else.
	var total uint64
	for _, r := range dataplane.DropReasons() {
		total += drops(d, 0, r)
	}
	if total != uint64(len(cases)) {
		t.Fatalf("total drops = %d, want %d", total, len(cases))
	}
}

func TestOversizeCounted(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	big := eth(bcast, hostA, 0x0800, make([]byte, 1500+4+1)...)
	ports[0].Inject(big)
	waitDrops(t, d, 0, dataplane.DropOversize, 1)
	expect(t, ports, nil)
}

func TestPRISMTransitAndGroup(t *testing.T) {
	d, ports := setup(t, 3, dataplane.Options{})
	learn := eth(bcast, hostB, 0x0806)
	ports[1].Inject(learn)
	expect(t, ports, learn, 0, 2)
	// Not addressed to us: bridged unchanged, even with a bad version.
	f := prism(hostB, hostA, 0x70, 9, 42, 7, 3)
	ports[0].Inject(f)
	expect(t, ports, f, 1)
	// Group destination is never local for PRISM: flooded.
	g := prism(bcast, hostA, 0x10, 2, 42, 7, 3)
	ports[0].Inject(g)
	expect(t, ports, g, 1, 2)
	// Non-PRISM frame to our own MAC belongs to the host stack: not bridged.
	h := eth(porttest.MAC(0x10), hostA, 0x0800, 1)
	ports[0].Inject(h)
	expect(t, ports, nil)
	st := d.Stats()
	if st.Classes[dataplane.ClassTransit] != 2 || st.Classes[dataplane.ClassHost] != 1 {
		t.Fatalf("classes transit=%d host=%d, want 2 and 1", st.Classes[dataplane.ClassTransit], st.Classes[dataplane.ClassHost])
	}
}

type seen struct {
	worker int
	in     int
	frame  []byte
}

type recHandler struct {
	w     int
	out   chan<- seen
	echo  bool
	ticks *atomic.Int64
}

func (h *recHandler) Handle(now int64, in int, frame []byte, tx dataplane.Sender) {
	h.out <- seen{h.w, in, append([]byte(nil), frame...)}
	if h.echo {
		r := append([]byte(nil), frame...)
		copy(r[0:6], frame[6:12])
		m := tx.PortMAC(in)
		copy(r[6:12], m[:])
		tx.Send(in, r)
	}
}

func (h *recHandler) Tick(now int64, tx dataplane.Sender) { h.ticks.Add(1) }

func TestLocalPRISMShardedToWorkers(t *testing.T) {
	const workers = 4
	out := make(chan seen, 1024)
	var ticks atomic.Int64
	d, ports := setup(t, 2, dataplane.Options{
		Workers: workers,
		NodeMAC: &[6]byte{2, 0, 0, 0, 0, 1},
		Handler: func(w, n int) dataplane.Handler {
			if n != workers {
				t.Errorf("factory got workers=%d", n)
			}
			return &recHandler{w: w, out: out, ticks: &ticks}
		},
	})
	node := [6]byte{2, 0, 0, 0, 0, 1}
	type key struct {
		job       uint64
		group, op uint16
	}
	owner := map[key]int{}
	used := map[int]bool{}
	n := 0
	for job := uint64(1); job <= 8; job++ {
		for op := uint16(1); op <= 4; op++ {
			for rep := 0; rep < 2; rep++ {
				dst := node
				if rep == 1 {
					dst = porttest.MAC(0x11) // port 1's MAC is local too
				}
				f := prism(dst, hostA, 0x10, byte(1+int(op)%4), job, 5, op)
				// Generations must not change the shard.
				binary.BigEndian.PutUint16(f[14+2+10:], uint16(rep))
				ports[rep].Inject(f)
				n++
				s := <-out
				if !bytes.Equal(s.frame, f) || s.in != rep {
					t.Fatalf("worker got in=%d %x, want in=%d %x", s.in, s.frame, rep, f)
				}
				k := key{job, 5, op}
				if w, ok := owner[k]; ok && w != s.worker {
					t.Fatalf("op %v handled by workers %d and %d", k, w, s.worker)
				}
				owner[k] = s.worker
				used[s.worker] = true
			}
		}
	}
	if len(used) < 2 {
		t.Fatalf("32 operations all landed on %d worker(s): sharding is not spreading", len(used))
	}
	time.Sleep(5 * TickWait)
	if ticks.Load() == 0 {
		t.Fatal("Tick never called")
	}
	st := d.Stats()
	var local uint64
	for _, c := range []dataplane.FrameClass{dataplane.ClassControl, dataplane.ClassData, dataplane.ClassResult, dataplane.ClassProgress} {
		local += st.Classes[c]
	}
	if local != uint64(n) {
		t.Fatalf("local class counters sum to %d, want %d", local, n)
	}
}

const TickWait = 2 * dataplane.TickInterval

func TestWorkerSender(t *testing.T) {
	out := make(chan seen, 16)
	var ticks atomic.Int64
	_, ports := setup(t, 2, dataplane.Options{
		Handler: func(w, n int) dataplane.Handler { return &recHandler{w: w, out: out, echo: true, ticks: &ticks} },
	})
	f := prism(porttest.MAC(0x11), hostA, 0x10, 1, 9, 9, 9)
	ports[1].Inject(f)
	<-out
	want := append([]byte(nil), f...)
	copy(want[0:6], hostA[:])
	m := porttest.MAC(0x11)
	copy(want[6:12], m[:])
	expect(t, ports, want, 1)
}

// refHandler echoes each frame with SendRef from a buffer of its own and
// then changes the buffer's last byte: what leaves is what the buffer holds
// at the flush, proving the worker queued the buffer itself.
type refHandler struct {
	out  chan<- seen
	bufs [][]byte
	n    int
}

func (h *refHandler) Handle(now int64, in int, frame []byte, tx dataplane.Sender) {
	rs, ok := tx.(dataplane.RefSender)
	if !ok {
		panic("the worker's Sender is not a RefSender")
	}
	b := h.bufs[h.n%len(h.bufs)][:len(frame)]
	h.n++
	copy(b, frame)
	copy(b[0:6], frame[6:12])
	m := tx.PortMAC(in)
	copy(b[6:12], m[:])
	rs.SendRef(in, b)
	b[len(b)-1] = 0xEE // before the flush: this is what goes out
	h.out <- seen{0, in, nil}
}

func (h *refHandler) Tick(now int64, tx dataplane.Sender) {}

func TestWorkerSenderRef(t *testing.T) {
	out := make(chan seen, 1024)
	h := &refHandler{out: out, bufs: make([][]byte, 1024)}
	for i := range h.bufs {
		h.bufs[i] = make([]byte, 1514)
	}
	_, ports := setup(t, 2, dataplane.Options{Handler: func(w, n int) dataplane.Handler { return h }})
	// More frames than one TX batch holds: a full queue is flushed first.
	const k = 300
	for i := range k {
		f := prism(porttest.MAC(0x11), hostA, 0x10, 1, 9, 9, uint16(i))
		ports[1].Inject(f)
	}
	for range k {
		<-out
	}
	got, err := ports[1].Wait(k, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[uint16]bool{}
	for _, f := range got {
		if f[len(f)-1] != 0xEE || [6]byte(f[0:6]) != hostA {
			t.Fatalf("frame % x: want the buffer as it was at the flush (last byte 0xee), addressed back to hostA", f)
		}
		ops[binary.BigEndian.Uint16(f[14+2+12:])] = true
	}
	if len(ops) != k {
		t.Fatalf("%d distinct frames of %d echoed: a queued buffer was overwritten before it went out", len(ops), k)
	}
}

func TestSetPortsKeepsUntouched(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	p2 := porttest.New("p2", porttest.MAC(0x12), 1500)
	if err := d.SetPorts([]dataplane.Port{ports[0], ports[1], p2}); err != nil {
		t.Fatal(err)
	}
	all := []*porttest.Port{ports[0], ports[1], p2}
	f := eth(bcast, hostA, 0x0806)
	ports[0].Inject(f)
	expect(t, all, f, 1, 2)
	// Remove port 1: port 0 and p2 (now index 1) keep working.
	if err := d.SetPorts([]dataplane.Port{ports[0], p2}); err != nil {
		t.Fatal(err)
	}
	if _, err := ports[1].WriteBatch([][]byte{f}); err == nil {
		t.Fatal("removed port was not closed")
	}
	g := eth(bcast, hostB, 0x0806)
	p2.Inject(g)
	expect(t, []*porttest.Port{ports[0], p2}, g, 0)
	if got := len(d.Stats().Ports); got != 2 {
		t.Fatalf("stats has %d ports, want 2", got)
	}
}

func TestCloseIdempotentAndConcurrent(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{Workers: 2})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			ports[0].Inject(eth(bcast, hostA, 0x0806, byte(i)))
		}
	}()
	wg.Wait()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err == nil {
		t.Fatal("second Close returned nil")
	}
}

func TestJumboFrames(t *testing.T) {
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := porttest.New("a", porttest.MAC(1), 9000)
	b := porttest.New("b", porttest.MAC(2), 9000)
	if err := d.SetPorts([]dataplane.Port{a, b}); err != nil {
		t.Fatal(err)
	}
	f := eth(bcast, hostA, 0x0800, bytes.Repeat([]byte{0x5a}, 9000)...)
	a.Inject(f)
	got, err := b.Wait(1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0], f) {
		t.Fatalf("jumbo frame changed: %d bytes, want %d", len(got[0]), len(f))
	}
	a.Inject(append(f, 1, 2, 3, 4, 5)) // 9019 bytes: over MTU + header + tag
	waitDrops(t, d, 0, dataplane.DropOversize, 1)
}

// TestLinkDownForgetsStations: a station learned on a port whose link then
// goes down is forgotten at the first send that finds the link down, so
// its later frames are flooded (and reach it if it moved) instead of being
// dropped until it ages out; once the port sends again, the next outage
// forgets again.
func TestLinkDownForgetsStations(t *testing.T) {
	d, ports := setup(t, 3, dataplane.Options{})
	learnB := func(on int) {
		t.Helper()
		fb := eth(bcast, hostB, 0x0806, byte(on))
		ports[on].Inject(fb)
		var others []int
		for i := range ports {
			if i != on {
				others = append(others, i)
			}
		}
		expect(t, ports, fb, others...)
	}
	for outage := 1; outage <= 2; outage++ {
		learnB(1)
		f := eth(hostB, hostA, 0x0800, 1)
		ports[0].Inject(f)
		expect(t, ports, f, 1) // unicast to B's port
		ports[1].SetLinkDown(true)
		ports[0].Inject(eth(hostB, hostA, 0x0800, 2))
		waitDrops(t, d, 1, dataplane.DropTxLinkDown, uint64(2*outage-1))
		// Forgotten: flooded, to p2 (where B might be now) and to p1 (dropped).
		f3 := eth(hostB, hostA, 0x0800, 3)
		ports[0].Inject(f3)
		expect(t, ports, f3, 2)
		waitDrops(t, d, 1, dataplane.DropTxLinkDown, uint64(2*outage))
		if n := d.Stats().MACEntries; n != 1 { // A only
			t.Fatalf("outage %d: %d MAC entries after the link went down, want 1 (A)", outage, n)
		}
		ports[1].SetLinkDown(false)
	}
}

// TestMACTableFullCounted: a full MAC table learns no new station; the
// frames whose sources it could not take are counted per port, the
// capacity is reported, and a frame to such a station is flooded.
func TestMACTableFullCounted(t *testing.T) {
	d, ports := setup(t, 3, dataplane.Options{MACTableSize: 64})
	capacity := d.Stats().MACCapacity
	if capacity != 32 {
		t.Fatalf("MACCapacity %d for 64 slots, want 32", capacity)
	}
	const stations = 40
	for i := range stations {
		f := eth(bcast, [6]byte{0x02, 0xaa, 0, 0, 0, byte(i)}, 0x0806, byte(i))
		ports[0].Inject(f)
		expect(t, ports, f, 1, 2)
	}
	st := d.Stats()
	if st.MACEntries != capacity || st.Ports[0].Unlearned != stations-uint64(capacity) {
		t.Fatalf("%d stations in a table of %d: %d entries, %d unlearned; want %d, %d",
			stations, capacity, st.MACEntries, st.Ports[0].Unlearned, capacity, stations-capacity)
	}
	// The last station was not learned: a frame to it is flooded.
	f := eth([6]byte{0x02, 0xaa, 0, 0, 0, stations - 1}, hostB, 0x0800, 1)
	ports[1].Inject(f)
	expect(t, ports, f, 0, 2)
}

// TestCountersSurviveReopen: a port reopened under its name (an interface
// re-created, or its MTU changed) continues its counts instead of starting
// over at 0, and the frame classes of a port removed for good stay in the
// totals: Prometheus counters never go back while prismd runs.
func TestCountersSurviveReopen(t *testing.T) {
	d, ports := setup(t, 2, dataplane.Options{})
	f := eth(bcast, hostA, 0x0806, 1)
	for range 3 {
		ports[1].Inject(f)
		expect(t, ports, f, 0)
	}
	ports[0].Inject(eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x0e}, hostB, 0x88cc, 1))
	waitDrops(t, d, 0, dataplane.DropLinkLocal, 1)
	before := d.Stats()
	p1b := porttest.New("p1", porttest.MAC(0x21), 1500)
	if err := d.SetPorts([]dataplane.Port{ports[0], p1b}); err != nil {
		t.Fatal(err)
	}
	after := d.Stats()
	if a, b := after.Ports[1], before.Ports[1]; a.RxFrames != b.RxFrames || a.TxFrames != b.TxFrames || a.RxBytes != b.RxBytes {
		t.Fatalf("reopened p1: rx %d tx %d bytes %d, want the old port's %d %d %d", a.RxFrames, a.TxFrames, a.RxBytes, b.RxFrames, b.TxFrames, b.RxBytes)
	}
	p1b.Inject(f)
	if _, err := ports[0].Wait(1, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := d.Stats().Ports[1].RxFrames; got != before.Ports[1].RxFrames+1 {
		t.Fatalf("reopened p1 received one more frame: rx %d, want %d", got, before.Ports[1].RxFrames+1)
	}
	// p0 reopened too, then removed for good: its port series goes, the
	// class totals stay.
	classes := func(st dataplane.Stats) (n uint64) {
		for _, v := range st.Classes {
			n += v
		}
		return n
	}
	total := classes(d.Stats())
	p0b := porttest.New("p0", porttest.MAC(0x20), 1500)
	if err := d.SetPorts([]dataplane.Port{p0b, p1b}); err != nil {
		t.Fatal(err)
	}
	if got := d.Stats().Ports[0].Drops[dataplane.DropLinkLocal]; got != 1 {
		t.Fatalf("reopened p0: link_local drops %d, want the old port's 1", got)
	}
	if err := d.SetPorts([]dataplane.Port{p1b}); err != nil {
		t.Fatal(err)
	}
	if got := classes(d.Stats()); got != total {
		t.Fatalf("frame classes summed %d after removing p0, want %d", got, total)
	}
}

// TestLinkStateInStats: a port's sample carries the link state the daemon
// last reported and how many times it changed (prismd_port_up and
// prismd_port_link_changes_total). A report that repeats the state, and a
// first report of up (what an unreported port is taken to be), change
// nothing; the state outlives the port being reopened under its name.
func TestLinkStateInStats(t *testing.T) {
	d, _ := setup(t, 2, dataplane.Options{})
	steps := []struct {
		name string
		s    dataplane.LinkState
	}{
		{"p0", dataplane.LinkUp}, {"p0", dataplane.LinkNoCarrier}, {"p0", dataplane.LinkNoCarrier},
		{"p0", dataplane.LinkAdminDown}, {"p0", dataplane.LinkUp}, {"p1", dataplane.LinkGone},
	}
	// The oracle: a naive replay of the reports.
	state := map[string]dataplane.LinkState{}
	changes := map[string]uint64{}
	for _, st := range steps {
		d.SetLinkState(st.name, st.s)
		if state[st.name] != st.s {
			changes[st.name]++
		}
		state[st.name] = st.s
		for _, p := range d.Stats().Ports {
			if p.Link != state[p.Name] || p.LinkChanges != changes[p.Name] {
				t.Fatalf("after %s %v: port %s link %v, %d changes; want %v, %d", st.name, st.s, p.Name, p.Link, p.LinkChanges, state[p.Name], changes[p.Name])
			}
		}
	}
	if err := d.SetPorts([]dataplane.Port{porttest.New("p0", porttest.MAC(0x10), 1500), porttest.New("p1", porttest.MAC(0x11), 1500)}); err != nil {
		t.Fatal(err)
	}
	if p := d.Stats().Ports[1]; p.Link != dataplane.LinkGone || p.LinkChanges != 1 {
		t.Fatalf("p1 reopened: link %v, %d changes; want gone, 1", p.Link, p.LinkChanges)
	}
}

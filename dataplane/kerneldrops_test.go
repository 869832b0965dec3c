package dataplane_test

// Kernel drops on a real AF_PACKET port (root only): a port with the
// smallest receive buffer (or ring) that nobody reads is flooded from its
// veth peer, so the kernel drops frames and counts them in
// PACKET_STATISTICS, which resets on every read. The port must accumulate
// the count across reads, and prismd_port_kernel_drops_total must show it.

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/netnstest"
	"github.com/prismd/prismd/metrics"
)

func TestKernelDropsAccumulate(t *testing.T) {
	for _, ring := range []bool{false, true} {
		t.Run(fmt.Sprintf("ring=%v", ring), func(t *testing.T) {
			env := netnstest.New(t, "kd")
			ns := env.Namespace("x")
			// No IPv6: the kernel would otherwise send router solicitations
			// and DAD probes on the veths, frames this test does not count.
			env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
			ifa, ifb := env.Veth(ns, ns)
			env.DisableOffloads(ns, ifa)
			env.DisableOffloads(ns, ifb)
			var tx, rx dataplane.Port
			var err error
			env.Do(ns, func() {
				if tx, err = dataplane.OpenAFPacket(ifa, dataplane.PortOptions{}); err != nil {
					return
				}
				// SocketBuffer 1: the kernel raises it to its minimum (a
				// frame or two) and the ring to its minimum of 4 blocks
				// (~500 of these frames).
				rx, err = dataplane.OpenAFPacket(ifb, dataplane.PortOptions{SocketBuffer: 1, NoRxRing: !ring})
			})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			defer rx.Close()

			// The dataplane holds rx without an RX goroutine, so nothing
			// reads it; its Stats and the collector read the port's counter.
			d, err := dataplane.New(dataplane.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			d.StepForTest([]dataplane.Port{rx}, 0)
			srv, err := metrics.New(d, metrics.BuildInfo{Version: "test", Revision: "x"})
			if err != nil {
				t.Fatal(err)
			}
			metric := func() uint64 {
				t.Helper()
				return gathered(t, srv.Registry(), "prismd_port_kernel_drops_total", map[string]string{"port": ifb})
			}

			const et, n = 0x88B6, 3000
			frames := make([][]byte, dataplane.DefaultBatch)
			seq := 0
			flood := func() {
				t.Helper()
				for sent := 0; sent < n; {
					k := min(len(frames), n-sent)
					for i := range frames[:k] {
						frames[i] = testFrame(rx.MAC(), tx.MAC(), et, 1000, byte(seq))
						binary.BigEndian.PutUint32(frames[i][14:], uint32(seq))
						seq++
					}
					w, err := tx.WriteBatch(frames[:k])
					if err != nil || w != k {
						t.Fatalf("WriteBatch = %d, %v; want %d", w, err, k)
					}
					sent += k
				}
			}
			// settled reads KernelDrops until two reads 20ms apart agree: veth
			// delivers in the sender's softirq, but a loaded host may defer
			// that to ksoftirqd. Each read resets the kernel's counter, so
			// this relies on the accumulation under test (without it the
			// reads settle at 0, which fails below).
			settled := func() uint64 {
				last := rx.Stats().KernelDrops
				for i := 0; i < 100; i++ {
					time.Sleep(20 * time.Millisecond)
					v := rx.Stats().KernelDrops
					if v == last {
						return v
					}
					last = v
				}
				t.Fatalf("KernelDrops still moving after 2s: %d", last)
				return 0
			}

			flood()
			d1 := settled()
			if d1 == 0 || d1 > n {
				t.Fatalf("after %d unread frames: KernelDrops = %d, want 1..%d", n, d1, n)
			}
			// The kernel counter was reset by that read: a port that did not
			// accumulate would report 0 now.
			if again := rx.Stats().KernelDrops; again != d1 {
				t.Fatalf("second read without traffic: KernelDrops = %d, want %d (accumulated)", again, d1)
			}
			if m := metric(); m != d1 {
				t.Fatalf("prismd_port_kernel_drops_total = %d, want %d", m, d1)
			}
			if s := d.Stats().Ports[0].KernelDrops; s != d1 {
				t.Fatalf("Dataplane.Stats KernelDrops = %d, want %d", s, d1)
			}

			flood()
			settled()
			m2 := metric() // the scrape reads (and resets) the kernel counter first
			d2 := rx.Stats().KernelDrops
			if d2 != m2 {
				t.Fatalf("after a scrape: KernelDrops = %d, metric said %d", d2, m2)
			}
			if d2 <= d1 || d2-d1 > n {
				t.Fatalf("after a second flood of %d: KernelDrops = %d, want %d < x <= %d", n, d2, d1, d1+n)
			}

			// Every frame sent was either dropped by the kernel or is
			// waiting in the socket: drain it and count.
			got := drainCount(t, rx, et)
			if uint64(got)+d2 != 2*n {
				t.Fatalf("received %d + kernel drops %d = %d, want the %d frames sent", got, d2, uint64(got)+d2, 2*n)
			}
			t.Logf("%d frames sent, %d dropped by the kernel, %d delivered", 2*n, d2, got)
		})
	}
}

// drainCount reads p until no frame arrived for 200ms and returns how many
// frames of EtherType et it read; it closes p.
func drainCount(t *testing.T, p dataplane.Port, et uint16) int {
	t.Helper()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.FrameSize(p.MTU()))
	}
	sizes := make([]int, len(bufs))
	counts := make(chan int, 1024)
	go func() {
		defer close(counts)
		for {
			k, err := p.ReadBatch(bufs, sizes)
			if err != nil {
				return
			}
			c := 0
			for i := 0; i < k; i++ {
				if sizes[i] >= 14 && binary.BigEndian.Uint16(bufs[i][12:]) == et {
					c++
				}
			}
			counts <- c
		}
	}()
	total := 0
	for {
		select {
		case c := <-counts:
			total += c
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	p.Close()
	for c := range counts {
		total += c
	}
	return total
}

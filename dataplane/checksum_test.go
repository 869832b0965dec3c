package dataplane_test

// Hosts whose interfaces keep TX checksum offload on (every veth's default)
// send TCP and UDP with partial checksums (CHECKSUM_PARTIAL). A Linux
// bridge passes the skb on still marked; prismd reads the bytes and sends
// new ones, so unless it completes those checksums the receiver drops
// every such frame: ping works, TCP hangs. These tests keep the hosts'
// checksum offload on, unlike every other veth test here.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// hostOffloads leaves TX checksum offload on (the point of these tests)
// but turns segmentation off: with TSO a host hands the veth 64 KB TCP
// super-frames, which no AF_PACKET switch can forward (oversize).
func hostOffloads(t *testing.T, env *netnstest.Env, ns, ifname string) {
	t.Helper()
	env.MustExec(ns, "ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off", "tx", "on")
	if out := env.MustExec(ns, "ethtool", "-k", ifname); !strings.Contains(out, "tx-checksumming: on") {
		t.Fatalf("TX checksum offload is not on on %s:\n%s", ifname, out)
	}
}

// checksumTopo is h1 -- [dataplane with sw ports] -- h2, the hosts' ends
// with TX checksum offload on, IPv4 and IPv6 addresses.
func checksumTopo(t *testing.T, opts dataplane.PortOptions) (env *netnstest.Env, h1, h2 string, d *dataplane.Dataplane) {
	env = netnstest.New(t, "ck")
	h1, h2 = env.Namespace("h1"), env.Namespace("h2")
	sw := env.Namespace("sw")
	h1If, swA := env.Veth(h1, sw)
	h2If, swB := env.Veth(h2, sw)
	env.DisableOffloads(sw, swA)
	env.DisableOffloads(sw, swB)
	hostOffloads(t, env, h1, h1If)
	hostOffloads(t, env, h2, h2If)
	env.MustExec(sw, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	for _, h := range [][3]string{{h1, h1If, "1"}, {h2, h2If, "2"}} {
		env.MustExec(h[0], "ip", "addr", "add", "10.77.0."+h[2]+"/24", "dev", h[1])
		env.MustExec(h[0], "ip", "addr", "add", "fd77::"+h[2]+"/64", "dev", h[1], "nodad")
	}
	var err error
	if d, err = dataplane.New(dataplane.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var ports []dataplane.Port
	env.Do(sw, func() {
		for _, n := range []string{swA, swB} {
			var p dataplane.Port
			if p, err = dataplane.OpenAFPacket(n, opts); err != nil {
				return
			}
			ports = append(ports, p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetPorts(ports); err != nil {
		t.Fatal(err)
	}
	return env, h1, h2, d
}

// receivePaths are the port options whose receive paths must each complete
// checksums: the ring (lending its frames in place), recvmmsg, and the
// lane (a SparseFPS no stream reaches keeps every frame on it).
var receivePaths = []struct {
	name string
	opts dataplane.PortOptions
}{
	{"ring", dataplane.PortOptions{}},
	{"recvmmsg", dataplane.PortOptions{NoRxRing: true}},
	{"lane", dataplane.PortOptions{Lane: true, SparseFPS: 1 << 30}},
}

// TestPartialChecksumsCompleted: a TCP transfer (IPv4 and IPv6) and UDP
// datagrams cross the dataplane between hosts that leave checksums partial;
// every byte arrives and the ports count the frames they completed.
func TestPartialChecksumsCompleted(t *testing.T) {
	for _, path := range receivePaths {
		t.Run(path.name, func(t *testing.T) {
			env, h1, h2, d := checksumTopo(t, path.opts)
			for _, dst := range []string{"10.77.0.2", "fd77::2"} {
				tcpTransfer(t, env, h1, h2, dst, 1<<20)
			}
			udpDatagrams(t, env, h1, h2, "10.77.0.2", 20)
			st := d.Stats()
			for i, p := range st.Ports {
				if p.Checksum.Completed == 0 || p.Checksum.Unfinished != 0 {
					t.Errorf("port %d (%s) checksums %+v, want some completed, none unfinished", i, p.Name, p.Checksum)
				}
			}
			// h1 sent about 1400 data segments per transfer, h2 their ACKs.
			if c := st.Ports[0].Checksum.Completed; c < 2*(1<<20)/1500 {
				t.Errorf("port 0 completed %d checksums, want at least %d", c, 2*(1<<20)/1500)
			}
		})
	}
}

// tcpTransfer sends n bytes from namespace from to dst:5001 in namespace to,
// with Go's net package on threads switched into those namespaces.
func tcpTransfer(t *testing.T, env *netnstest.Env, from, to, dst string, n int) {
	t.Helper()
	var ln net.Listener
	var err error
	env.Do(to, func() { ln, err = net.Listen("tcp", net.JoinHostPort(dst, "5001")) })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		k, _ := io.Copy(io.Discard, c)
		got <- k
	}()
	env.Do(from, func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", net.JoinHostPort(dst, "5001"), 5*time.Second); err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		_, err = c.Write(bytes.Repeat([]byte{0x5a}, n))
	})
	if err != nil {
		t.Fatalf("TCP to %s through the dataplane: %v", dst, err)
	}
	select {
	case k := <-got:
		if k != int64(n) {
			t.Fatalf("TCP to %s: %d of %d bytes arrived", dst, k, n)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("TCP to %s: the receiver never finished", dst)
	}
}

// udpDatagrams sends k datagrams from namespace from to dst:5002 in
// namespace to, one at a time, and wants each one received.
func udpDatagrams(t *testing.T, env *netnstest.Env, from, to, dst string, k int) {
	t.Helper()
	var rc, sc net.PacketConn
	var err error
	env.Do(to, func() { rc, err = net.ListenPacket("udp", net.JoinHostPort(dst, "5002")) })
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	env.Do(from, func() { sc, err = net.ListenPacket("udp", ":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	to2 := &net.UDPAddr{IP: net.ParseIP(dst), Port: 5002}
	buf := make([]byte, 2048)
	for i := 0; i < k; i++ {
		msg := []byte(fmt.Sprintf("datagram %d %s", i, strings.Repeat("x", i*37)))
		if _, err := sc.WriteTo(msg, to2); err != nil {
			t.Fatal(err)
		}
		rc.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, _, err := rc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("UDP datagram %d never arrived: %v", i, err)
		}
		if !bytes.Equal(buf[:n], msg) {
			t.Fatalf("UDP datagram %d: got %q", i, buf[:n])
		}
	}
}

// markedPort is a port on the far end of a veth whose near end (with an
// address and TX checksum offload on) a raw UDP socket sends from: every
// datagram arrives at the port marked as having a partial checksum.
func markedPort(t *testing.T, opts dataplane.PortOptions) (p dataplane.Port, send func()) {
	env := netnstest.New(t, "ck")
	ns := env.Namespace("x")
	a, b := env.Veth(ns, ns)
	hostOffloads(t, env, ns, a)
	env.DisableOffloads(ns, b)
	env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	env.MustExec(ns, "ip", "addr", "add", "10.78.0.1/24", "dev", a)
	mac := ifMAC(t, env, ns, b)
	env.MustExec(ns, "ip", "neigh", "add", "10.78.0.2", "lladdr", net.HardwareAddr(mac[:]).String(), "dev", a)
	var err error
	var fd int
	env.Do(ns, func() {
		if p, err = dataplane.OpenAFPacket(b, opts); err != nil {
			return
		}
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return
		}
		err = unix.Connect(fd, &unix.SockaddrInet4{Port: 5003, Addr: [4]byte{10, 78, 0, 2}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(); unix.Close(fd) })
	payload := bytes.Repeat([]byte{0xc3}, 1001)
	return p, func() {
		if _, err := unix.Write(fd, payload); err != nil {
			t.Fatal(err)
		}
	}
}

// Completing checksums allocates nothing on any receive path, and what
// comes out is valid (gopacket's receiver check).
func TestPartialChecksumZeroAllocs(t *testing.T) {
	for _, c := range []struct {
		name string
		opts dataplane.PortOptions
		lend bool
	}{
		{"ring", dataplane.PortOptions{}, false},
		{"ring lent", dataplane.PortOptions{}, true},
		{"recvmmsg", dataplane.PortOptions{NoRxRing: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, send := markedPort(t, c.opts)
			const k = 8
			bufs := make([][]byte, k)
			frames := make([][]byte, k)
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, k)
			read := dataplane.CopyingReader(p.ReadBatch, bufs, sizes, frames)
			release := func() {}
			if c.lend {
				l := p.(dataplane.Lender)
				read = func() (int, error) { return l.ReadLent(bufs, frames) }
				release = l.ReleaseLent
			}
			var bad int
			check := true // gopacket allocates: only outside AllocsPerRun
			step := func() {
				for i := 0; i < k; i++ {
					send()
				}
				for got := 0; got < k; {
					n, err := read()
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range frames[:n] {
						if len(f) > 42 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 17 {
							got++
							if check && !udpValid(f) {
								bad++
							}
						}
					}
				}
				release()
			}
			step()
			check = false
			before := p.Stats().Checksum.Completed
			if a := alloctest.PerRun(50, step); a != 0 && !raceEnabled {
				t.Errorf("%.1f allocations per %d marked frames sent and read, want 0", a, k)
			}
			if got := p.Stats().Checksum.Completed - before; got < 50*k {
				t.Errorf("%d checksums completed in 50 steps of %d frames, want %d", got, k, 50*k)
			}
			if bad != 0 {
				t.Errorf("%d frames read with a wrong UDP checksum", bad)
			}
		})
	}
}

// udpValid is gopacket's receiver check of an IPv4/UDP frame's checksum.
func udpValid(f []byte) bool {
	pkt := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
	u, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ok || pkt.NetworkLayer() == nil {
		return false
	}
	_ = u.SetNetworkLayerForChecksum(pkt.NetworkLayer())
	err, r := u.VerifyChecksum()
	return err == nil && r.Valid
}

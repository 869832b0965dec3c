package dataplane_test

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/mdlayher/packet"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/internal/netnstest"
)

// topology: h1 --veth-- [sw: prismd dataplane] --veth-- h2, each in its own
// network namespace; the dataplane runs in-process with sockets opened in sw.
type topo struct {
	env           *netnstest.Env
	h1, h2, sw    string
	h1If, h2If    string
	swA, swB      string
	dp            *dataplane.Dataplane
	swAMAC, h2MAC [6]byte
}

func newTopo(t *testing.T) *topo { return newTopoOpts(t, dataplane.PortOptions{}) }

// newTopoOpts is newTopo with the switch ports opened with opts.
func newTopoOpts(t *testing.T, opts dataplane.PortOptions) *topo {
	env := netnstest.New(t, "pt")
	tp := &topo{env: env, h1: env.Namespace("h1"), h2: env.Namespace("h2"), sw: env.Namespace("sw")}
	tp.h1If, tp.swA = env.Veth(tp.h1, tp.sw)
	tp.h2If, tp.swB = env.Veth(tp.h2, tp.sw)
	for _, x := range [][2]string{{tp.h1, tp.h1If}, {tp.h2, tp.h2If}, {tp.sw, tp.swA}, {tp.sw, tp.swB}} {
		env.DisableOffloads(x[0], x[1])
	}
	// The switch ports carry no addresses: keep IPv6 autoconf quiet there.
	env.MustExec(tp.sw, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	env.MustExec(tp.h1, "ip", "addr", "add", "10.77.0.1/24", "dev", tp.h1If)
	env.MustExec(tp.h2, "ip", "addr", "add", "10.77.0.2/24", "dev", tp.h2If)
	d, err := dataplane.New(dataplane.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var ports []dataplane.Port
	var oerr error
	env.Do(tp.sw, func() {
		for _, n := range []string{tp.swA, tp.swB} {
			p, err := dataplane.OpenAFPacket(n, opts)
			if err != nil {
				oerr = err
				return
			}
			ports = append(ports, p)
		}
	})
	if oerr != nil {
		t.Fatal(oerr)
	}
	if err := d.SetPorts(ports); err != nil {
		t.Fatal(err)
	}
	tp.dp = d
	tp.swAMAC = ports[0].MAC()
	tp.h2MAC = ifMAC(t, env, tp.h2, tp.h2If)
	return tp
}

func ifMAC(t *testing.T, env *netnstest.Env, ns, ifname string) [6]byte {
	var m [6]byte
	var err error
	env.Do(ns, func() {
		var ifi *net.Interface
		ifi, err = net.InterfaceByName(ifname)
		if err == nil {
			copy(m[:], ifi.HardwareAddr)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rawSock opens an AF_PACKET socket for EtherType 0x88B5 on ifname in ns.
func rawSock(t *testing.T, env *netnstest.Env, ns, ifname string) *packet.Conn {
	var c *packet.Conn
	var err error
	env.Do(ns, func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(ifname); err == nil {
			c, err = packet.Listen(ifi, packet.Raw, 0x88B5, nil)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestIntegrationVeth(t *testing.T) {
	tp := newTopo(t)
	env := tp.env
	t.Run("ping", func(t *testing.T) {
		for _, c := range [][2]string{{tp.h1, "10.77.0.2"}, {tp.h2, "10.77.0.1"}} {
			if out, err := env.Exec(c[0], "ping", "-c", "3", "-i", "0.2", "-W", "2", c[1]); err != nil {
				t.Fatalf("ping from %s to %s failed: %v\n%s", c[0], c[1], err, out)
			}
		}
	})

	s1 := rawSock(t, env, tp.h1, tp.h1If)
	s2 := rawSock(t, env, tp.h2, tp.h2If)
	src := ifMAC(t, env, tp.h1, tp.h1If)

	t.Run("transit PRISM unchanged", func(t *testing.T) {
		f := prism(tp.h2MAC, src, 0x10, 2, 0xdeadbeef, 3, 4)
		f = append(f, bytes.Repeat([]byte{0xa5}, 40)...)
		if _, err := s1.WriteTo(f, &packet.Addr{HardwareAddr: tp.h2MAC[:]}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		s2.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, _, err := s2.ReadFrom(buf)
		if err != nil {
			t.Fatalf("h2 got no PRISM frame: %v", err)
		}
		if !bytes.Equal(buf[:n], f) {
			t.Fatalf("frame changed in transit:\n got %x\nwant %x", buf[:n], f)
		}
	})

	t.Run("local PRISM unsupported", func(t *testing.T) {
		before := drops(tp.dp, 0, dataplane.DropUnsupported)
		f := prism(tp.swAMAC, src, 0x10, 1, 7, 7, 7)
		if _, err := s1.WriteTo(f, &packet.Addr{HardwareAddr: tp.swAMAC[:]}); err != nil {
			t.Fatal(err)
		}
		waitDrops(t, tp.dp, 0, dataplane.DropUnsupported, before+1)
		// Not forwarded to h2.
		s2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, _, err := s2.ReadFrom(make([]byte, 2048)); err == nil {
			t.Fatalf("local PRISM frame leaked to h2 (%d bytes)", n)
		}
	})

	st := tp.dp.Stats()
	if st.Ports[0].RxFrames == 0 || st.Ports[1].TxFrames == 0 || st.MACEntries < 2 {
		t.Fatalf("counters not moving: %+v", st)
	}
}

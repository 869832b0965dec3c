package dataplane_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"

	"github.com/prismd/prismd/dataplane"
)

// A switch port whose link goes down and up again keeps forwarding, however
// often it flaps while idle. Each time a link goes down the kernel reports
// ENETDOWN once to every packet socket on it; counted as read failures,
// those stopped the port's receive loop for good after maxRxErrors flaps
// with no frame in between (a cable reseated, a peer rebooting a few times).
func TestLinkFlapsKeepPortReceiving(t *testing.T) {
	// The daemon's socket options (cmd/prismd PortConfig.Options): the
	// control lane is the socket that reports ENETDOWN from its reads.
	tp := newTopoOpts(t, dataplane.PortOptions{Lane: true, SparseFPS: dataplane.DefaultSparseFPS})
	env := tp.env
	// Quiet hosts: nothing may reach the port between flaps (a frame read
	// between two flaps hid the failure).
	for _, ns := range []string{tp.h1, tp.h2} {
		env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	}
	const flaps = 150 // above maxRxErrors (100)
	env.Do(tp.sw, func() {
		l, err := netlink.LinkByName(tp.swA)
		if err != nil {
			t.Error(err)
			return
		}
		for i := 0; i < flaps; i++ {
			if err := netlink.LinkSetDown(l); err != nil {
				t.Error(err)
				return
			}
			if err := netlink.LinkSetUp(l); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(12 * time.Millisecond) // each receive loop sees each one (it pauses 10 ms after an error)
		}
	})
	if t.Failed() {
		return
	}
	s1 := rawSock(t, env, tp.h1, tp.h1If)
	s2 := rawSock(t, env, tp.h2, tp.h2If)
	src := ifMAC(t, env, tp.h1, tp.h1If)
	f := prism(tp.h2MAC, src, 0x10, 2, 0xfeed, 3, 4)
	f = append(f, bytes.Repeat([]byte{0x5a}, 40)...)
	buf := make([]byte, 2048)
	// The veth carrier comes back within milliseconds; retry a few times.
	for try := 0; try < 20; try++ {
		if _, err := s1.WriteTo(f, &packet.Addr{HardwareAddr: tp.h2MAC[:]}); err != nil {
			t.Fatal(err)
		}
		s2.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, _, err := s2.ReadFrom(buf); err == nil && bytes.Equal(buf[:n], f) {
			return
		}
	}
	t.Fatalf("after %d flaps of its link, port %s forwards nothing", flaps, tp.swA)
}

package dataplane_test

import (
	"testing"
	"time"

	"github.com/mdlayher/packet"

	"github.com/prismd/prismd/dataplane"
)

// Frames flooded to a port whose link has no carrier (the host at the far
// end of its veth set its side down, as an unplugged cable does) are
// dropped as tx_link_down, not tx_error, every one of them and nothing
// else; once the carrier is back the same flood reaches the host. The
// kernel answers each such frame with ENOBUFS; that the batch then costs
// two system calls and not one per frame is TestSendAllGivesUpOnDeadLink's
// (package mmsg), this test's is what a user reads in the metrics.
func TestFloodToPortWithoutCarrier(t *testing.T) {
	tp := newTopoOpts(t, dataplane.PortOptions{})
	env := tp.env
	for _, ns := range []string{tp.h1, tp.h2} {
		env.MustExec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	}
	env.MustExec(tp.h2, "ip", "link", "set", tp.h2If, "down")
	// Wait until the switch side has lost its carrier.
	deadline := time.Now().Add(5 * time.Second)
	for env.MustExec(tp.sw, "cat", "/sys/class/net/"+tp.swB+"/carrier") != "0\n" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s1 := rawSock(t, env, tp.h1, tp.h1If)
	src := ifMAC(t, env, tp.h1, tp.h1If)
	bcast := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	f := testFrame(bcast, src, 0x88b5, 200, 1) // PRISM EtherType: rawSock listens to it; to a broadcast MAC it is transit, flooded
	const n = 300
	// What went out before the carrier was lost (h1's IPv6 chatter before
	// the sysctl took effect, flooded to every port) is not the flood's.
	tx0, txErr0 := tp.dp.Stats().Ports[1].TxFrames, tp.dp.Stats().Ports[1].Drops[dataplane.DropTxError]
	for i := 0; i < n; i++ {
		if _, err := s1.WriteTo(f, &packet.Addr{HardwareAddr: bcast[:]}); err != nil {
			t.Fatal(err)
		}
	}
	portB := func() dataplane.PortSample { return tp.dp.Stats().Ports[1] }
	deadline = time.Now().Add(5 * time.Second)
	for portB().Drops[dataplane.DropTxLinkDown] < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	st := portB()
	if got := st.Drops[dataplane.DropTxLinkDown]; got != n {
		t.Errorf("tx_link_down on the port without carrier: %d, want the %d flooded frames", got, n)
	}
	if st.Drops[dataplane.DropTxError] != txErr0 || st.TxFrames != tx0 {
		t.Errorf("port without carrier, during the flood: tx_error %d, transmitted %d; want 0 and 0", st.Drops[dataplane.DropTxError]-txErr0, st.TxFrames-tx0)
	}

	// Carrier back: the flood goes out again and nothing more is dropped.
	env.MustExec(tp.h2, "ip", "link", "set", tp.h2If, "up")
	s2 := rawSock(t, env, tp.h2, tp.h2If)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 2048)
		k := 0
		for k < 5 {
			s2.SetReadDeadline(time.Now().Add(5 * time.Second))
			m, _, err := s2.ReadFrom(buf)
			if err != nil {
				break
			}
			if m >= 14 && buf[12] == 0x88 && buf[13] == 0xb5 {
				k++
			}
		}
		got <- k
	}()
	for i := 0; i < 200; i++ { // the carrier takes a moment to come back
		if _, err := s1.WriteTo(f, &packet.Addr{HardwareAddr: bcast[:]}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if k := <-got; k < 5 {
		t.Errorf("after the carrier came back the host received %d flooded frames, want at least 5", k)
	}
	if st := portB(); st.TxFrames == 0 {
		t.Errorf("after the carrier came back the port transmitted nothing (tx_link_down %d)", st.Drops[dataplane.DropTxLinkDown])
	}
}

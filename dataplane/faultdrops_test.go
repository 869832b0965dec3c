package dataplane_test

// Frames lost on purpose (fault injection) or below the dataplane (a port's
// transmit ring) are counted: by reason in Stats and, through package
// metrics, in prismd_port_drops_total and prismd_port_fault_*_total.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
	"github.com/prismd/prismd/internal/netnstest"
	"github.com/prismd/prismd/metrics"
)

// shortPort sends at most n frames of each batch and returns err for the rest.
type shortPort struct {
	*porttest.Port
	n   int
	err error
}

func (p *shortPort) WriteBatch(bufs [][]byte) (int, error) {
	if len(bufs) <= p.n {
		return p.Port.WriteBatch(bufs)
	}
	k, _ := p.Port.WriteBatch(bufs[:p.n])
	return k, p.err
}

// TestTxDropReasons: the frames a WriteBatch does not send are counted under
// the reason its error names: tx_ring_full for ErrTxFull (wrapped or not),
// tx_error for anything else; and never under both.
func TestTxDropReasons(t *testing.T) {
	other := errors.New("sendmmsg: no buffer space")
	for _, tc := range []struct {
		err  error
		want dataplane.DropReason
	}{
		{dataplane.ErrTxFull, dataplane.DropTxRingFull},
		{fmt.Errorf("port x: %w", dataplane.ErrTxFull), dataplane.DropTxRingFull},
		{other, dataplane.DropTxError},
		{nil, dataplane.DropTxError},
	} {
		t.Run(fmt.Sprint(tc.err), func(t *testing.T) {
			d, err := dataplane.New(dataplane.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			in := porttest.New("p0", porttest.MAC(1), 1500)
			out := &shortPort{Port: porttest.New("p1", porttest.MAC(2), 1500), n: 1, err: tc.err}
			out.SetDiscard()
			// One batch of 5 frames: the RX goroutine forwards it with one
			// WriteBatch, of which 1 frame goes out.
			step := d.StepForTest([]dataplane.Port{in, out}, 0)
			for i := 0; i < 5; i++ {
				in.Inject(eth(bcast, hostA, 0x88B6, byte(i)))
			}
			step()
			st := d.Stats().Ports[1]
			if st.TxFrames != 1 || out.Written() != 1 {
				t.Fatalf("tx frames %d, written %d; want 1", st.TxFrames, out.Written())
			}
			for _, r := range dataplane.DropReasons() {
				want := uint64(0)
				if r == tc.want {
					want = 4
				}
				if st.Drops[r] != want {
					t.Errorf("drops{reason=%s} = %d, want %d", r, st.Drops[r], want)
				}
			}
		})
	}
}

// TestFaultEgressQueueFullCounted: an egress fault with a long delay holds
// at most faultQueue (4096) frames; the dataplane forwards more, and every
// frame is accounted for exactly once: accepted (transmit counter) or
// dropped by the fault (its egress drops), never as tx_error as well. The
// oracle is the number of frames forwarded, whatever the timing.
func TestFaultEgressQueueFullCounted(t *testing.T) {
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := porttest.New("p0", porttest.MAC(1), 1500)
	raw := porttest.New("p1", porttest.MAC(2), 1500)
	raw.SetDiscard()
	out := dataplane.WithFault(raw, dataplane.Fault{Delay: 300 * time.Millisecond})
	if err := d.SetPorts([]dataplane.Port{in, out}); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	for i := 0; i < n; i++ {
		in.Inject(eth(bcast, hostA, 0x88B6, byte(i), byte(i>>8)))
	}
	var st dataplane.PortSample
	for deadline := time.Now().Add(10 * time.Second); ; {
		st = d.Stats().Ports[1]
		if st.TxFrames+st.Fault.EgressDrops == n && raw.Written() == st.TxFrames {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %d accepted + %d fault drops, %d written; want %d forwarded, all accepted ones written",
				st.TxFrames, st.Fault.EgressDrops, raw.Written(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.Fault.EgressDrops == 0 {
		t.Fatalf("no fault drops: %d frames fit a queue of 4096", st.TxFrames)
	}
	for _, r := range dataplane.DropReasons() {
		if st.Drops[r] != 0 {
			t.Errorf("drops{reason=%s} = %d, want 0: the fault's drops are counted once, as fault drops", r, st.Drops[r])
		}
	}
	if st.Fault.IngressDrops != 0 || st.Fault.IngressDuplicates != 0 {
		t.Errorf("ingress fault counters moved without an ingress fault: %+v", st.Fault)
	}
	t.Logf("%d forwarded: %d accepted by the fault, %d dropped for a full queue", n, st.TxFrames, st.Fault.EgressDrops)
}

// TestFaultEgressSendFailuresCounted: behind an egress fault the dataplane
// sees every frame accepted; when the wrapped port then fails to send them,
// the fault counts them by the reason the error names, and Dataplane.Stats
// adds the port's counts to its own.
func TestFaultEgressSendFailuresCounted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want dataplane.DropReason
	}{
		{dataplane.ErrTxFull, dataplane.DropTxRingFull},
		{errors.New("sendmmsg: no buffer space"), dataplane.DropTxError},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			d, err := dataplane.New(dataplane.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			in := porttest.New("p0", porttest.MAC(1), 1500)
			broken := &shortPort{Port: porttest.New("p1", porttest.MAC(2), 1500), n: 0, err: tc.err}
			out := dataplane.WithFault(broken, dataplane.Fault{Delay: time.Millisecond})
			if err := d.SetPorts([]dataplane.Port{in, out}); err != nil {
				t.Fatal(err)
			}
			const n = 5
			for i := 0; i < n; i++ {
				in.Inject(eth(bcast, hostA, 0x88B6, byte(i)))
			}
			var st dataplane.PortSample
			for deadline := time.Now().Add(5 * time.Second); ; {
				st = d.Stats().Ports[1]
				if st.Drops[tc.want] == n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("drops{reason=%s} = %d after 5s, want %d", tc.want, st.Drops[tc.want], n)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if st.TxFrames != n {
				t.Errorf("tx frames %d, want %d (the fault accepted them)", st.TxFrames, n)
			}
			for _, r := range dataplane.DropReasons() {
				if r != tc.want && st.Drops[r] != 0 {
					t.Errorf("drops{reason=%s} = %d, want 0", r, st.Drops[r])
				}
			}
		})
	}
}

// TestFaultDropsVeth (root): h1 -> [sw: dataplane, ingress fault on the
// port from h1, egress fault on the port to h2] -> h2 over real veths. h1
// sends n frames; the ingress fault drops and duplicates by the documented
// draw rule, the egress fault (a long delay) drops what its queue cannot
// hold. prismd_port_fault_drops_total and prismd_port_fault_duplicates_total,
// scraped through a real registry, must equal the rule's counts (ingress)
// and what h2's interface did not receive (egress), exactly.
func TestFaultDropsVeth(t *testing.T) {
	env := netnstest.New(t, "fd")
	h1, h2, sw := env.Namespace("h1"), env.Namespace("h2"), env.Namespace("sw")
	h1If, swA := env.Veth(h1, sw)
	h2If, swB := env.Veth(h2, sw)
	for _, x := range [][2]string{{h1, h1If}, {h2, h2If}, {sw, swA}, {sw, swB}} {
		env.DisableOffloads(x[0], x[1])
		// No IPv6: no router solicitations or DAD frames besides the test's,
		// which would take draws of the ingress fault and reach h2.
		env.MustExec(x[0], "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	in := dataplane.IngressFault{DropPercent: 30, DuplicatePercent: 10, Seed: 11}
	var a, b, gen dataplane.Port
	var err error
	env.Do(sw, func() {
		if a, err = dataplane.OpenAFPacket(swA, dataplane.PortOptions{}); err != nil {
			return
		}
		b, err = dataplane.OpenAFPacket(swB, dataplane.PortOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	a = dataplane.WithFault(a, dataplane.Fault{Ingress: in})
	// 300ms: far longer than h1 takes to send the burst, so the fault's
	// 4096-frame queue overflows.
	b = dataplane.WithFault(b, dataplane.Fault{Delay: 300 * time.Millisecond})
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetPorts([]dataplane.Port{a, b}); err != nil {
		t.Fatal(err)
	}
	srv, err := metrics.New(d, metrics.BuildInfo{Version: "test", Revision: "x"})
	if err != nil {
		t.Fatal(err)
	}
	env.Do(h1, func() { gen, err = dataplane.OpenAFPacket(h1If, dataplane.PortOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer gen.Close()

	counter := func(ns, iface, name string) uint64 {
		out := env.MustExec(ns, "cat", "/sys/class/net/"+iface+"/statistics/"+name)
		v, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	rx0 := counter(h2, h2If, "rx_packets")
	const n = 8000
	h2MAC := ifMAC(t, env, h2, h2If)
	frames := make([][]byte, dataplane.DefaultBatch)
	for sent := 0; sent < n; {
		k := min(len(frames), n-sent)
		for i := range frames[:k] {
			frames[i] = testFrame(h2MAC, gen.MAC(), 0x88B6, 64, byte(sent+i))
		}
		if w, err := gen.WriteBatch(frames[:k]); w != k || err != nil {
			t.Fatalf("h1 WriteBatch = %d, %v; want %d", w, err, k)
		}
		sent += k
	}
	wantDrops, wantDups := ingressCounts(n, in)
	forwarded := n - wantDrops + wantDups

	// Wait until the egress fault has sent everything it took and h2's
	// interface has counted it.
	var st dataplane.PortSample
	var delivered uint64
	for deadline := time.Now().Add(15 * time.Second); ; {
		st = d.Stats().Ports[1]
		delivered = counter(h2, h2If, "rx_packets") - rx0
		if st.TxFrames+st.Fault.EgressDrops == forwarded && delivered == st.TxFrames {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: port to h2 accepted %d, fault dropped %d, h2 received %d; want %d forwarded (rule: %d sent - %d dropped + %d duplicated); port from h1: %+v",
				st.TxFrames, st.Fault.EgressDrops, delivered, forwarded, n, wantDrops, wantDups, d.Stats().Ports[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	reg := srv.Registry()
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   uint64
	}{
		{"prismd_port_fault_drops_total", map[string]string{"port": swA, "direction": "ingress"}, wantDrops},
		{"prismd_port_fault_duplicates_total", map[string]string{"port": swA}, wantDups},
		{"prismd_port_receive_frames_total", map[string]string{"port": swA}, forwarded},
		{"prismd_port_kernel_drops_total", map[string]string{"port": swA}, 0},
		{"prismd_port_fault_drops_total", map[string]string{"port": swA, "direction": "egress"}, 0},
		{"prismd_port_fault_drops_total", map[string]string{"port": swB, "direction": "egress"}, forwarded - delivered},
		{"prismd_port_fault_drops_total", map[string]string{"port": swB, "direction": "ingress"}, 0},
		{"prismd_port_fault_duplicates_total", map[string]string{"port": swB}, 0},
		{"prismd_port_transmit_frames_total", map[string]string{"port": swB}, delivered},
		{"prismd_port_drops_total", map[string]string{"port": swB, "reason": "tx_error"}, 0},
	} {
		if got := gathered(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.labels, got, c.want)
		}
	}
	if forwarded == delivered {
		t.Errorf("the egress fault dropped nothing (%d frames all fit its queue); the test did not exercise it", forwarded)
	}
	t.Logf("h1 sent %d; ingress fault dropped %d, duplicated %d; egress fault dropped %d; h2 received %d",
		n, wantDrops, wantDups, forwarded-delivered, delivered)
}

// gathered returns the counter name{labels} from reg, failing t if absent.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			return uint64(m.GetCounter().GetValue())
		}
	}
	t.Fatalf("no %s%v in the scrape", name, labels)
	return 0
}

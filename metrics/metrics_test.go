package metrics_test

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prismd/prismd/dataplane"
	"github.com/prismd/prismd/dataplane/porttest"
	"github.com/prismd/prismd/metrics"
)

type fakeSource struct{ st dataplane.Stats }

func (f fakeSource) Stats() dataplane.Stats { return f.st }

func TestCollectorExposition(t *testing.T) {
	var st dataplane.Stats
	p := dataplane.PortSample{Name: "p1", RxFrames: 10, RxBytes: 1000, TxFrames: 7, TxBytes: 700, KernelDrops: 3}
	p.Drops[dataplane.DropHairpin] = 2
	p.Drops[dataplane.DropUnsupported] = 5
	p.Drops[dataplane.DropTxDriverDrop] = 8
	p.Fault = dataplane.FaultStats{IngressDrops: 11, IngressDuplicates: 4, EgressDrops: 13, IngressReordered: 21, EgressReordered: 8}
	p.LaneAll, p.LaneSwitches = true, 6
	p.Unlearned, p.RingHeld, p.Moved = 12, 17, 5
	st.Ports = append(st.Ports, p)
	st.MACCapacity = 32768
	st.Classes[dataplane.ClassL2] = 4
	st.Classes[dataplane.ClassData] = 6
	st.MACEntries = 9
	reg := mustServer(t, fakeSource{st}).Registry()

	want := `
# HELP prismd_port_receive_frames_total Frames read from the port, including ones later dropped, but not those longer than its MTU, which only prismd_port_drops_total{reason="oversize"} counts.
# TYPE prismd_port_receive_frames_total counter
prismd_port_receive_frames_total{port="p1"} 10
# HELP prismd_port_receive_bytes_total Bytes of frames read from the port (Ethernet header included, FCS excluded).
# TYPE prismd_port_receive_bytes_total counter
prismd_port_receive_bytes_total{port="p1"} 1000
# HELP prismd_port_transmit_frames_total Frames the port accepted for transmission.
# TYPE prismd_port_transmit_frames_total counter
prismd_port_transmit_frames_total{port="p1"} 7
# HELP prismd_port_transmit_bytes_total Bytes of frames the port accepted for transmission.
# TYPE prismd_port_transmit_bytes_total counter
prismd_port_transmit_bytes_total{port="p1"} 700
# HELP prismd_port_kernel_drops_total Frames the kernel dropped before prismd read them from the port: the socket's receive buffer or ring was full (AF_XDP: RX ring full, no free fill ring chunk, frame too long for a chunk, invalid descriptor).
# TYPE prismd_port_kernel_drops_total counter
prismd_port_kernel_drops_total{port="p1"} 3
# HELP prismd_port_fault_drops_total Frames the port's fault injection (tests and labs) dropped, by direction: ingress frames were lost before prismd counted them as received; egress frames did not fit the fault's queue and are not counted as transmitted.
# TYPE prismd_port_fault_drops_total counter
prismd_port_fault_drops_total{direction="egress",port="p1"} 13
prismd_port_fault_drops_total{direction="ingress",port="p1"} 11
# HELP prismd_port_fault_duplicates_total Extra copies of received frames the port's ingress fault injection delivered; each copy is counted as received.
# TYPE prismd_port_fault_duplicates_total counter
prismd_port_fault_duplicates_total{port="p1"} 4
# HELP prismd_port_fault_reordered_total Frames the port's fault injection (tests and labs) held back for later frames to overtake (reorder_percent), by direction.
# TYPE prismd_port_fault_reordered_total counter
prismd_port_fault_reordered_total{direction="egress",port="p1"} 8
prismd_port_fault_reordered_total{direction="ingress",port="p1"} 21
# HELP prismd_mac_table_entries Live (not aged out) entries in the MAC learning table.
# TYPE prismd_mac_table_entries gauge
prismd_mac_table_entries 9
# HELP prismd_frames_total Received frames by classification.
# TYPE prismd_frames_total counter
prismd_frames_total{class="control"} 0
prismd_frames_total{class="data"} 6
prismd_frames_total{class="host"} 0
prismd_frames_total{class="l2"} 4
prismd_frames_total{class="progress"} 0
prismd_frames_total{class="result"} 0
prismd_frames_total{class="transit"} 0
# HELP prismd_port_drops_total Frames dropped by prismd or lost by its port, by port and reason. tx_invalid_desc and tx_driver_drop (and tx_error or tx_ring_full behind an egress fault) were lost after the port accepted them, so they are also in prismd_port_transmit_frames_total.
# TYPE prismd_port_drops_total counter
prismd_port_drops_total{port="p1",reason="bad_src_mac"} 0
prismd_port_drops_total{port="p1",reason="bad_version"} 0
prismd_port_drops_total{port="p1",reason="hairpin"} 2
prismd_port_drops_total{port="p1",reason="link_local"} 0
prismd_port_drops_total{port="p1",reason="loopback"} 0
prismd_port_drops_total{port="p1",reason="oversize"} 0
prismd_port_drops_total{port="p1",reason="ring_full"} 0
prismd_port_drops_total{port="p1",reason="short_frame"} 0
prismd_port_drops_total{port="p1",reason="truncated"} 0
prismd_port_drops_total{port="p1",reason="tx_driver_drop"} 8
prismd_port_drops_total{port="p1",reason="tx_error"} 0
prismd_port_drops_total{port="p1",reason="tx_invalid_desc"} 0
prismd_port_drops_total{port="p1",reason="tx_link_down"} 0
prismd_port_drops_total{port="p1",reason="tx_oversize"} 0
prismd_port_drops_total{port="p1",reason="tx_queue_full"} 0
prismd_port_drops_total{port="p1",reason="tx_ring_full"} 0
prismd_port_drops_total{port="p1",reason="unknown_class"} 0
prismd_port_drops_total{port="p1",reason="unsupported"} 5
`
	wantLane := `
# HELP prismd_port_lane_all 1 while every frame the port receives is read on its lane (traffic below rx_sparse_fps: no ring block wait), 0 while only PRISM CONTROL is (the ring's one wakeup per block).
# TYPE prismd_port_lane_all gauge
prismd_port_lane_all{port="p1"} 1
# HELP prismd_port_lane_switches_total Times the port moved its frames between its lane and its ring (rx_sparse_fps).
# TYPE prismd_port_lane_switches_total counter
prismd_port_lane_switches_total{port="p1"} 6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantLane), "prismd_port_lane_all", "prismd_port_lane_switches_total"); err != nil {
		t.Fatal(err)
	}
	wantMore := `
# HELP prismd_mac_table_capacity Stations the MAC learning table holds (mac_table_size); at capacity new stations are not learned and frames to them are flooded to every port.
# TYPE prismd_mac_table_capacity gauge
prismd_mac_table_capacity 32768
# HELP prismd_port_mac_unlearned_total Received frames whose source MAC the full MAC table could not learn (prismd_mac_table_entries at prismd_mac_table_capacity): forwarded, but frames to their senders are flooded.
# TYPE prismd_port_mac_unlearned_total counter
prismd_port_mac_unlearned_total{port="p1"} 12
# HELP prismd_port_mac_moves_total Received frames whose source MAC was learned on another port until then: a station that moved, once; a loop through the switch, at the rate of the looping frames (prismd runs no spanning tree).
# TYPE prismd_port_mac_moves_total counter
prismd_port_mac_moves_total{port="p1"} 5
# HELP prismd_port_ring_held_frames_total Frames the port's receive ring handed out from a block the kernel retired on its timer, partly filled: each waited up to rx_ring_timeout. Many of them mean bursty traffic the lane would serve faster (the port moves to it by itself with rx_sparse_fps).
# TYPE prismd_port_ring_held_frames_total counter
prismd_port_ring_held_frames_total{port="p1"} 17
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMore), "prismd_mac_table_capacity", "prismd_port_mac_unlearned_total", "prismd_port_mac_moves_total",
		"prismd_port_ring_held_frames_total"); err != nil {
		t.Fatal(err)
	}
	names := []string{"prismd_port_receive_frames_total", "prismd_port_receive_bytes_total",
		"prismd_port_transmit_frames_total", "prismd_port_transmit_bytes_total", "prismd_port_kernel_drops_total",
		"prismd_mac_table_entries", "prismd_frames_total", "prismd_port_drops_total",
		"prismd_port_fault_drops_total", "prismd_port_fault_duplicates_total", "prismd_port_fault_reordered_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Build info, Go and process collectors are present.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, n := range []string{"prismd_build_info", "go_goroutines", "process_cpu_seconds_total"} {
		if !have[n] {
			t.Errorf("metric %s missing", n)
		}
	}
}

func mustServer(t *testing.T, src metrics.Source) *metrics.Server {
	t.Helper()
	s, err := metrics.New(src, metrics.BuildInfo{Version: "test", Revision: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPromtoolCheck runs promtool on the real /metrics output of a running
// dataplane with a fake port.
func TestPromtoolCheck(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found in PATH: `make deps` installs it (Debian package prometheus)")
	}
	d, err := dataplane.New(dataplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := porttest.New("p1", porttest.MAC(1), 1500)
	q := porttest.New("p2", porttest.MAC(2), 1500)
	if err := d.SetPorts([]dataplane.Port{p, q}); err != nil {
		t.Fatal(err)
	}
	p.Inject([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0a, 0, 0, 0, 0, 1, 0x08, 0x06})
	if _, err := q.Wait(1, 2e9); err != nil {
		t.Fatal(err)
	}
	s := mustServer(t, d)
	if err := s.Serve("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`prismd_port_receive_frames_total{port="p1"} 1`)) {
		t.Fatalf("/metrics lacks the received frame:\n%s", body)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestRegisterExtraCollector(t *testing.T) {
	s := mustServer(t, nil)
	c := fakeSource{}
	if err := s.Register(metrics.NewCollector(c)); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(metrics.NewCollector(c)); err == nil {
		t.Fatal("registering the same descriptors twice succeeded")
	}
}

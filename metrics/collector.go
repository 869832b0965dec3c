package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prismd/prismd/dataplane"
)

const namespace = "prismd"

// Source is what the collector reads; *dataplane.Dataplane implements it.
type Source interface {
	Stats() dataplane.Stats
}

// Collector exports the dataplane counters.
type Collector struct {
	src Source

	rxFrames, rxBytes, txFrames, txBytes *prometheus.Desc
	ringWaits                            *prometheus.Desc
	drops, kernelDrops, frames, macs     *prometheus.Desc
	macCapacity, unlearned, moved        *prometheus.Desc
	faultDrops, faultDups, faultReorders *prometheus.Desc
	laneAll, laneSwitches, ringHeld      *prometheus.Desc
	csumCompleted, csumUnfinished        *prometheus.Desc
	up, linkChanges                      *prometheus.Desc
}

// Fault injection (config fault:, tests and labs) has its own families,
// prismd_port_fault_drops_total{port,direction},
// prismd_port_fault_duplicates_total{port} and
// prismd_port_fault_reordered_total{port,direction}, rather than reasons in
// prismd_port_drops_total:
//   - those losses are wanted: an alert on prismd_port_drops_total must not
//     fire because a lab injects loss, yet the lab must see exactly how much;
//   - an ingress fault loses a frame before the dataplane counts it (as the
//     kernel does, which has prismd_port_kernel_drops_total), while every
//     receive-side reason of prismd_port_drops_total is a frame also in
//     prismd_port_receive_frames_total;
//   - direction is what tells the two fault stages apart. Its values are
//     closed (ingress, egress), as are the reasons: two series per port.
const (
	dirIngress = "ingress"
	dirEgress  = "egress"
)

// NewCollector returns a Collector reading src at every scrape.
func NewCollector(src Source) *Collector {
	port := []string{"port"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &Collector{
		src:      src,
		rxFrames: d("port_receive_frames_total", "Frames read from the port, including ones later dropped, but not those longer than its MTU, which only prismd_port_drops_total{reason=\"oversize\"} counts.", port),
		rxBytes:  d("port_receive_bytes_total", "Bytes of frames read from the port (Ethernet header included, FCS excluded).", port),
		txFrames: d("port_transmit_frames_total", "Frames the port accepted for transmission.", port),
		txBytes:  d("port_transmit_bytes_total", "Bytes of frames the port accepted for transmission.", port),
		drops: d("port_drops_total", "Frames dropped by prismd or lost by its port, by port and reason. "+
			"tx_invalid_desc and tx_driver_drop (and tx_error or tx_ring_full behind an egress fault) were lost after the port accepted them, "+
			"so they are also in prismd_port_transmit_frames_total.", []string{"port", "reason"}),
		kernelDrops: d("port_kernel_drops_total", "Frames the kernel dropped before prismd read them from the port: "+
			"the socket's receive buffer or ring was full (AF_XDP: RX ring full, no free fill ring chunk, frame too long for a chunk, invalid descriptor).", port),
		faultDrops: d("port_fault_drops_total", "Frames the port's fault injection (tests and labs) dropped, by direction: "+
			"ingress frames were lost before prismd counted them as received; egress frames did not fit the fault's queue and are not counted as transmitted.",
			[]string{"port", "direction"}),
		faultDups: d("port_fault_duplicates_total", "Extra copies of received frames the port's ingress fault injection delivered; each copy is counted as received.", port),
		faultReorders: d("port_fault_reordered_total", "Frames the port's fault injection (tests and labs) held back for later frames to overtake (reorder_percent), by direction.",
			[]string{"port", "direction"}),
		ringWaits: d("port_ring_waits_total", "Local PRISM frames the port's receive loop held (up to "+dataplane.RingWait.String()+") until a busy engine worker had room, "+
			"instead of dropping them as ring_full.", port),
		laneAll: d("port_lane_all", "1 while every frame the port receives is read on its lane (traffic below rx_sparse_fps: no ring block wait), "+
			"0 while only PRISM CONTROL is (the ring's one wakeup per block).", port),
		laneSwitches: d("port_lane_switches_total", "Times the port moved its frames between its lane and its ring (rx_sparse_fps).", port),
		ringHeld: d("port_ring_held_frames_total", "Frames the port's receive ring handed out from a block the kernel retired on its timer, partly filled: "+
			"each waited up to rx_ring_timeout. Many of them mean bursty traffic the lane would serve faster (the port moves to it by itself with rx_sparse_fps).", port),
		csumCompleted: d("port_checksum_completed_total", "Received TCP/UDP frames whose checksum the sending host left partial (TX checksum offload) "+
			"and prismd completed before forwarding them (afpacket ports only: afxdp ports are not told).", port),
		csumUnfinished: d("port_checksum_unfinished_total", "Received frames marked with a partial checksum that prismd could not complete "+
			"(not TCP/UDP over IPv4 or extension-free IPv6, or an encapsulated inner checksum): forwarded unchanged, "+
			"so their receiver likely drops them.", port),
		up: d("port_up", "1 while the port's link is up with carrier, 0 while it is set down, has no carrier or its interface is gone "+
			"(as the daemon's link watcher last saw it): the link state prismctl show ports prints.", port),
		linkChanges: d("port_link_changes_total", "Times the port's link state changed (up, set down, no carrier, gone) since the daemon started: "+
			"a flapping cable or peer shows here even when each outage was shorter than a scrape.", port),
		frames: d("frames_total", "Received frames by classification.", []string{"class"}),
		macs:   d("mac_table_entries", "Live (not aged out) entries in the MAC learning table.", nil),
		macCapacity: d("mac_table_capacity", "Stations the MAC learning table holds (mac_table_size); at capacity new stations are not learned "+
			"and frames to them are flooded to every port.", nil),
		unlearned: d("port_mac_unlearned_total", "Received frames whose source MAC the full MAC table could not learn "+
			"(prismd_mac_table_entries at prismd_mac_table_capacity): forwarded, but frames to their senders are flooded.", port),
		moved: d("port_mac_moves_total", "Received frames whose source MAC was learned on another port until then: a station that moved, once; "+
			"a loop through the switch, at the rate of the looping frames (prismd runs no spanning tree).", port),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rxFrames, c.rxBytes, c.txFrames, c.txBytes, c.drops, c.kernelDrops, c.frames, c.macs, c.macCapacity, c.unlearned, c.moved, c.faultDrops, c.faultDups, c.faultReorders, c.ringWaits, c.laneAll, c.laneSwitches, c.ringHeld, c.csumCompleted, c.csumUnfinished, c.up, c.linkChanges} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	cnt := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, p := range st.Ports {
		cnt(c.rxFrames, p.RxFrames, p.Name)
		cnt(c.rxBytes, p.RxBytes, p.Name)
		cnt(c.txFrames, p.TxFrames, p.Name)
		cnt(c.txBytes, p.TxBytes, p.Name)
		cnt(c.kernelDrops, p.KernelDrops, p.Name)
		cnt(c.ringWaits, p.RingWaits, p.Name)
		// Every reason is exported, zero or not, so rate() works from the
		// first drop on; the label set is closed (dataplane.DropReasons).
		for _, r := range dataplane.DropReasons() {
			cnt(c.drops, p.Drops[r], p.Name, r.String())
		}
		cnt(c.faultDrops, p.Fault.IngressDrops, p.Name, dirIngress)
		cnt(c.faultDrops, p.Fault.EgressDrops, p.Name, dirEgress)
		cnt(c.faultDups, p.Fault.IngressDuplicates, p.Name)
		cnt(c.faultReorders, p.Fault.IngressReordered, p.Name, dirIngress)
		cnt(c.faultReorders, p.Fault.EgressReordered, p.Name, dirEgress)
		all := 0.0
		if p.LaneAll {
			all = 1
		}
		ch <- prometheus.MustNewConstMetric(c.laneAll, prometheus.GaugeValue, all, p.Name)
		cnt(c.laneSwitches, p.LaneSwitches, p.Name)
		cnt(c.ringHeld, p.RingHeld, p.Name)
		cnt(c.unlearned, p.Unlearned, p.Name)
		cnt(c.moved, p.Moved, p.Name)
		cnt(c.csumCompleted, p.Checksum.Completed, p.Name)
		cnt(c.csumUnfinished, p.Checksum.Unfinished, p.Name)
		up := 0.0
		if p.Link == dataplane.LinkUp {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, p.Name)
		cnt(c.linkChanges, p.LinkChanges, p.Name)
	}
	for _, cl := range dataplane.FrameClasses() {
		cnt(c.frames, st.Classes[cl], cl.String())
	}
	ch <- prometheus.MustNewConstMetric(c.macs, prometheus.GaugeValue, float64(st.MACEntries))
	ch <- prometheus.MustNewConstMetric(c.macCapacity, prometheus.GaugeValue, float64(st.MACCapacity))
}

// BuildInfo is exported as prismd_build_info.
type BuildInfo struct {
	Version, Revision string
}

// NewBuildInfo returns the constant prismd_build_info gauge (value 1).
func NewBuildInfo(b BuildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "A metric with a constant '1' value labeled by version, revision and goversion from which prismd was built.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

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
	drops, kernelDrops, frames, macs     *prometheus.Desc
}

// NewCollector returns a Collector reading src at every scrape.
func NewCollector(src Source) *Collector {
	port := []string{"port"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &Collector{
		src:         src,
		rxFrames:    d("port_receive_frames_total", "Frames read from the port, including ones later dropped.", port),
		rxBytes:     d("port_receive_bytes_total", "Bytes of frames read from the port (Ethernet header included, FCS excluded).", port),
		txFrames:    d("port_transmit_frames_total", "Frames transmitted on the port.", port),
		txBytes:     d("port_transmit_bytes_total", "Bytes of frames transmitted on the port.", port),
		drops:       d("port_drops_total", "Frames dropped by prismd, by port and reason.", []string{"port", "reason"}),
		kernelDrops: d("port_kernel_drops_total", "Frames the kernel dropped because the port's socket receive buffer was full.", port),
		frames:      d("frames_total", "Received frames by classification.", []string{"class"}),
		macs:        d("mac_table_entries", "Live (not aged out) entries in the MAC learning table.", nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rxFrames, c.rxBytes, c.txFrames, c.txBytes, c.drops, c.kernelDrops, c.frames, c.macs} {
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
		// Every reason is exported, zero or not, so rate() works from the
		// first drop on; the label set is closed (dataplane.DropReasons).
		for _, r := range dataplane.DropReasons() {
			cnt(c.drops, p.Drops[r], p.Name, r.String())
		}
	}
	for _, cl := range dataplane.FrameClasses() {
		cnt(c.frames, st.Classes[cl], cl.String())
	}
	ch <- prometheus.MustNewConstMetric(c.macs, prometheus.GaugeValue, float64(st.MACEntries))
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

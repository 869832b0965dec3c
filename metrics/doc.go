// Package metrics exposes prismd's counters to Prometheus, node_exporter
// style: a prometheus.Collector reads plain atomic counters (via
// dataplane.Stats) at scrape time, so the hot path never touches Prometheus.
// It only reads counters: it must not change dataplane state. Other packages
// (the engine) add their own collectors with Server.Register. Tests of any
// exporter lint their exposition with metricstest.Promtool.
package metrics

package main

import (
	"testing"
)

// FuzzParseConfig: no configuration file, however broken, panics prismd's
// loader, and one it accepts is valid again as loaded (Validate fills in
// defaults once; a second pass must agree).
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"ports: [{name: a}]\n",
		"node_mac: \"02:00:00:00:00:01\"\nports:\n  - name: p1\n    mtu: 9000\n    rx_ring: true\n    rx_ring_timeout: 1ms\n    rx_lane: true\n    rx_sparse_fps: 50000\n    qdisc_bypass: true\nworkers: 2\nworker_handoff: false\nmac_aging: 300s\nmetrics_listen: 127.0.0.1:9100\ncontrol_listen: /run/prismd/prismd.sock\nam_sources: [\"02:00:00:00:00:02\"]\nkulisch_partials: scaled\n",
		"ports:\n  - name: a\n    backend: afxdp\n    xdp_mode: native\n",
		"ports:\n  - name: a\n    fault:\n      ingress: {drop_percent: 0.5, duplicate_percent: 2, reorder_percent: 10, reorder_depth: 4, delay_us: 300, seed: 7}\n      egress: {reorder_percent: 2.5, reorder_depth: 2, delay_us: 50, seed: 9}\n",
		"ports: [{name: b, fault: {reorder_percent: 10, reorder_depth: 3, delay_us: 50}}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig("fuzz.yaml", b)
		if err != nil {
			return
		}
		if err := c.Validate("fuzz.yaml"); err != nil {
			t.Fatalf("an accepted config fails validation again: %v\n%s", err, b)
		}
		for i, p := range c.Ports {
			_ = p.fault()
			if p.Name == "" {
				t.Fatalf("ports[%d] accepted without a name:\n%s", i, b)
			}
		}
	})
}

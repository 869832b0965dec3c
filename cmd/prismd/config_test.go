package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prismd/prismd/dataplane"
)

const fullConfig = `node_mac: "02:00:00:00:00:01"
ports:
  - name: p1
    mtu: 1500
    fault:
      reorder_percent: 10
      reorder_depth: 3
      delay_us: 50
  - name: p2
workers: 2
worker_handoff: true
mac_aging: 300s
metrics_listen: "127.0.0.1:9100"
control_listen: "/run/prismd/prismd.sock"
am_sources: ["02:00:00:00:00:aa"]
`

func TestParseFullConfig(t *testing.T) {
	c, err := ParseConfig("t.yaml", []byte(fullConfig))
	if err != nil {
		t.Fatal(err)
	}
	if *c.NodeMACAddr() != [6]byte{2, 0, 0, 0, 0, 1} || len(c.Ports) != 2 || c.Ports[0].MTU != 1500 ||
		c.Ports[0].Fault.DelayUS != 50 || c.Workers != 2 || !c.WorkerHandoff || c.Aging() != 300*time.Second ||
		c.AMSourceMACs()[0] != [6]byte{2, 0, 0, 0, 0, 0xaa} {
		t.Fatalf("parsed %+v", c)
	}
	f := c.Ports[0].fault()
	if f.ReorderPercent != 10 || f.ReorderDepth != 3 || f.Delay != 50*time.Microsecond {
		t.Fatalf("fault %+v", f)
	}
	c, err = ParseConfig("t.yaml", []byte("ports: [{name: eth1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers != 1 || c.WorkerHandoff || c.Aging() != 300*time.Second || c.NodeMACAddr() != nil || c.MetricsListen != "" || c.PlainKulischPartials() {
		t.Fatalf("defaults: %+v", c)
	}
	if c, err = ParseConfig("t.yaml", []byte("ports: [{name: eth1}]\nkulisch_partials: plain\n")); err != nil || !c.PlainKulischPartials() {
		t.Fatalf("kulisch_partials: plain: %v %+v", err, c)
	}
	if c, err = ParseConfig("t.yaml", []byte("ports: [{name: eth1}]\nkulisch_partials: scaled\n")); err != nil || !c.CompactKulischPartials() || c.PlainKulischPartials() {
		t.Fatalf("kulisch_partials: scaled: %v %+v", err, c)
	}
	if c, err = ParseConfig("t.yaml", []byte("ports: [{name: eth1}]\nkulisch_partials: f64\n")); err != nil || c.CompactKulischPartials() || c.PlainKulischPartials() {
		t.Fatalf("kulisch_partials: f64: %v %+v", err, c)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown top key", "ports: [{name: a}]\nworkerz: 2\n", "line 2: field workerz not found"},
		{"unknown port key", "ports:\n  - name: a\n    speed: 10\n", "line 3: field speed not found in a ports entry"},
		{"unknown fault key", "ports:\n  - name: a\n    fault: {loss: 1}\n", "field loss not found in fault"},
		{"wrong type", "ports: [{name: a}]\nworkers: many\n", `line 2: workers: "many" is not a whole number`},
		{"port wrong type", "ports: [{name: a, rx_ring: maybe}]\n", `line 1: rx_ring: "maybe" is not true or false`},
		{"bare port name", "ports: [eth0, eth1]\n", `line 1: ports entry "eth0": write each port as a mapping, e.g. ports: [{name: eth0}]`},
		{"am_sources scalar", "ports: [{name: a}]\nam_sources: 02:00:00:00:00:aa\n", `line 2: am_sources: "02:00:00:00:00:aa" is not a list, e.g. [a, b]`},
		{"empty", "", "file is empty"},
		{"no ports", "workers: 1\n", "ports: no ports"},
		{"kulisch partials", "ports: [{name: a}]\nkulisch_partials: tiny\n", `kulisch_partials: "tiny": use f64`},
		{"max contexts", "ports: [{name: a}]\nmax_contexts: 70000\n", `max_contexts: 70000 is out of range; use 1..65535 (default 1024)`},
		{"accumulator memory", "ports: [{name: a}]\naccumulator_memory_mb: -1\n", `accumulator_memory_mb: -1 is out of range; use 1..1048576 MiB per worker (default 1024)`},
		{"dup port", "ports: [{name: a}, {name: a}]\n", "ports[1].name: interface \"a\" is already ports[0]"},
		{"long name", "ports: [{name: abcdefghijklmnop}]\n", "ports[0].name"},
		{"mtu", "ports: [{name: a, mtu: 20000}]\n", "ports[0].mtu: 20000 is out of range"},
		// yaml would read these as 1500 and 1, silently.
		{"mtu fraction", "ports:\n  - name: a\n    mtu: 1500.5\n", "line 3: mtu must be a whole number written without a decimal point, not 1500.5"},
		{"workers fraction", "ports: [{name: a}]\nworkers: 1.5\n", "line 2: workers must be a whole number written without a decimal point, not 1.5"},
		{"delay fraction", "ports: [{name: a, fault: {ingress: {delay_us: 2.5}}}]\n", "line 1: delay_us must be a whole number written without a decimal point, not 2.5"},
		{"sparse fps", "ports: [{name: a, rx_sparse_fps: -1}]\n", "ports[0].rx_sparse_fps: -1 is out of range"},
		{"sparse fps afxdp", "ports: [{name: a, backend: afxdp, rx_sparse_fps: 10}]\n", "afxdp has no rx_ring, rx_ring_timeout, rx_lane, rx_sparse_fps"},
		{"reorder pct", "ports: [{name: a, fault: {reorder_percent: 101, reorder_depth: 1}}]\n", "reorder_percent: 101"},
		{"reorder pct nan", "ports: [{name: a, fault: {reorder_percent: .nan, reorder_depth: 1}}]\n", "reorder_percent: NaN is not a percentage"},
		{"reorder depth", "ports: [{name: a, fault: {reorder_percent: 5}}]\n", "reorder_depth: must be >= 1"},
		{"node mac group", "node_mac: \"01:00:5e:00:00:01\"\nports: [{name: a}]\n", "node_mac: 01:00:5e:00:00:01 is a group"},
		{"node mac junk", "node_mac: zz\nports: [{name: a}]\n", "node_mac: \"zz\" is not a MAC"},
		{"aging", "mac_aging: forever\nports: [{name: a}]\n", "mac_aging: \"forever\" is not a duration"},
		{"aging small", "mac_aging: 1ms\nports: [{name: a}]\n", "mac_aging: 1ms is out of range"},
		{"mac table size", "mac_table_size: 8\nports: [{name: a}]\n", "mac_table_size: 8 is out of range; use 32..4194304 stations (default 32768)"},
		{"mac table size type", "mac_table_size: many\nports: [{name: a}]\n", "mac_table_size"},
		{"workers", "workers: -1\nports: [{name: a}]\n", "workers: -1 is out of range"},
		{"metrics", "metrics_listen: nope\nports: [{name: a}]\n", "metrics_listen: \"nope\" is not host:port"},
		{"control", "control_listen: rel.sock\nports: [{name: a}]\n", "control_listen: \"rel.sock\" must be an absolute path"},
		{"am source", "am_sources: [\"ff:ff:ff:ff:ff:ff\"]\nports: [{name: a}]\n", "am_sources[0]: ff:ff:ff:ff:ff:ff is a group"},
		{"am source zero", "am_sources: [\"00:00:00:00:00:00\"]\nports: [{name: a}]\n", "am_sources[0]: 00:00:00:00:00:00 is the all-zero MAC"},
		{"node mac zero", "node_mac: \"00:00:00:00:00:00\"\nports: [{name: a}]\n", "node_mac: 00:00:00:00:00:00 is the all-zero MAC"},
		{"two docs", "ports: [{name: a}]\n---\nports: [{name: b}]\n", "second YAML document"},
		// Syntax errors name the line with the problem: the library said
		// "line 1" (where the ports list began) for a key on line 3, and
		// no line at all for the second.
		{"key under list", "ports:\n  - name: w1m-p1\n  mac_aging: 5s\n", "t.yaml: line 3: did not find expected '-' indicator"},
		{"key dedented", "workers: 1\nports:\n  - name: a\n mtu: 5\n", "t.yaml: line 4: did not find expected key"},
		{"colon in value", "mac_aging: 5s: 6s\nports: [{name: a}]\n", "t.yaml: line 1: mapping values are not allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig("t.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestCheckConfigFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(fullConfig), 0o644)
	os.WriteFile(bad, []byte("ports: [{name: a}]\nbogus: 1\n"), 0o644)
	var out, errb bytes.Buffer
	// A good file whose interfaces are not here (p1, p2) fails on them
	// alone; TestCheckConfigInterfaces passes one whose interfaces exist.
	if rc := run([]string{"--config", good, "--check-config"}, &out, &errb); rc != 1 || strings.Count(errb.String(), "no such network interface") != 2 {
		t.Fatalf("good config, missing interfaces: rc=%d stderr=%s", rc, errb.String())
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"--config", bad, "--check-config"}, &out, &errb); rc != 1 {
		t.Fatalf("bad config: rc=%d", rc)
	}
	if !strings.Contains(errb.String(), "field bogus not found") {
		t.Fatalf("stderr %q", errb.String())
	}
	if rc := run([]string{"--config", filepath.Join(dir, "missing.yaml"), "--check-config"}, &out, &errb); rc != 1 {
		t.Fatalf("missing file: rc=%d", rc)
	}
	if rc := run([]string{"--log-format", "xml", "--check-config"}, &out, &errb); rc != 2 {
		t.Fatalf("bad flag: rc=%d", rc)
	}
	errb.Reset()
	if rc := run([]string{"-h"}, &out, &errb); rc != 0 || !strings.Contains(errb.String(), "-check-config") {
		t.Fatalf("-h: rc=%d (want 0: help was asked for), usage %q", rc, errb.String())
	}
	// The interfaces as this namespace has them: the loopback is wrong
	// anywhere, and so is a missing one here: the daemon refuses to start
	// with it, so a check guarding ExecStartPre must fail.
	lo, missing := filepath.Join(dir, "lo.yaml"), filepath.Join(dir, "missing-if.yaml")
	os.WriteFile(lo, []byte("ports: [{name: lo}]\n"), 0o644)
	os.WriteFile(missing, []byte("ports: [{name: prismd-nope9}]\n"), 0o644)
	errb.Reset()
	if rc := run([]string{"--config", lo, "--check-config"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), `port "lo": interface "lo" is the loopback`) {
		t.Fatalf("loopback port: rc=%d stderr %q", rc, errb.String())
	}
	errb.Reset()
	out.Reset()
	if rc := run([]string{"--config", missing, "--check-config"}, &out, &errb); rc != 1 ||
		!strings.Contains(errb.String(), `configuration invalid: `+missing+`: port "prismd-nope9": interface "prismd-nope9": no such network interface`) ||
		!strings.Contains(errb.String(), "(it has: ") || !strings.Contains(errb.String(), "prismd would refuse to start") || out.Len() != 0 {
		t.Fatalf("missing interface: rc=%d stdout %q stderr %q; want 1, naming the interface and that prismd would not start", rc, out.String(), errb.String())
	}
	// A control socket in a directory that does not exist: the daemon
	// cannot bind it and stops, so the check fails too.
	nodir := filepath.Join(dir, "nodir.yaml")
	os.WriteFile(nodir, []byte("ports: [{name: lo}]\ncontrol_listen: "+filepath.Join(dir, "absent", "p.sock")+"\n"), 0o644)
	errb.Reset()
	out.Reset()
	if rc := run([]string{"--config", nodir, "--check-config"}, &out, &errb); rc != 1 ||
		!strings.Contains(errb.String(), "directory "+filepath.Join(dir, "absent")+" does not exist") || out.Len() != 0 {
		t.Fatalf("control_listen in a missing directory: rc=%d stdout %q stderr %q", rc, out.String(), errb.String())
	}
	out.Reset()
	if rc := run([]string{"--version"}, &out, &errb); rc != 0 || !strings.HasPrefix(out.String(), "prismd ") {
		t.Fatalf("--version: rc=%d stdout %q", rc, out.String())
	}
}

// TestPortSocketOptions: the rx_ring, rx_ring_timeout, rx_lane, rx_sparse_fps and qdisc_bypass keys
// reach the dataplane's port options; absent keys keep the fast defaults.
func TestPortSocketOptions(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.yaml")
	src := "ports:\n  - name: a\n  - name: b\n    rx_ring: false\n    rx_ring_timeout: 2ms\n    qdisc_bypass: false\n    rx_lane: false\n" +
		"  - name: c\n    rx_sparse_fps: 0\n  - name: d\n    rx_sparse_fps: 120000\n"
	if err := os.WriteFile(f, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Ports[0].Options(), c.Ports[1].Options()
	if a.NoRxRing || a.NoQdiscBypass || a.RingTimeout != 0 || !a.Lane || a.SparseFPS != dataplane.DefaultSparseFPS {
		t.Errorf("defaults: got %+v, want ring, lane and bypass on, SparseFPS %d", a, dataplane.DefaultSparseFPS)
	}
	if o := c.Ports[2].Options(); o.SparseFPS != 0 || !o.Lane {
		t.Errorf("rx_sparse_fps: 0: got %+v, want SparseFPS 0 with the lane", o)
	}
	if o := c.Ports[3].Options(); o.SparseFPS != 120000 {
		t.Errorf("rx_sparse_fps: 120000: got SparseFPS %d", o.SparseFPS)
	}
	if !b.NoRxRing || !b.NoQdiscBypass || b.RingTimeout != 2*time.Millisecond || b.Lane {
		t.Errorf("explicit: got %+v, want ring off, bypass off, 2ms, lane off", b)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("ports:\n  - name: a\n    rx_ring_timeout: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(bad); err == nil || !strings.Contains(err.Error(), "rx_ring_timeout") {
		t.Errorf("1s ring timeout: err = %v, want one naming rx_ring_timeout", err)
	}
}

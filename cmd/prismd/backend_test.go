package main

import (
	"strings"
	"testing"

	"github.com/prismd/prismd/deploy"
)

// TestPortBackend: the backend key picks afpacket (default) or afxdp, and
// anything else, or AF_PACKET-only keys on an afxdp port, is an error that
// names the key and says what to write instead.
func TestPortBackend(t *testing.T) {
	c, err := ParseConfig("b.yaml", []byte("ports:\n  - name: a\n  - name: b\n    backend: afxdp\n    mtu: 9000\n  - name: c\n    backend: afpacket\n  - name: d\n    backend: afxdp\n    xdp_mode: native\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{c.Ports[0].Backend, c.Ports[1].Backend, c.Ports[2].Backend}; got[0] != "" || got[1] != BackendAFXDP || got[2] != BackendAFPacket {
		t.Fatalf("backends = %q", got)
	}
	if o := c.Ports[1].XDPOptions(); o.MTU != 9000 || o.Native {
		t.Errorf("XDPOptions() = %+v, want MTU 9000, generic", o)
	}
	if o := c.Ports[3].XDPOptions(); !o.Native {
		t.Errorf("xdp_mode: native: XDPOptions() = %+v, want Native", o)
	}
	for _, tc := range []struct{ src, want string }{
		{"ports:\n  - name: a\n    backend: xdp\n", `ports[0].backend: "xdp" is not a port backend; use afpacket (default) or afxdp`},
		{"ports:\n  - name: a\n    backend: afxdp\n    rx_ring: false\n", "ports[0].backend: afxdp has no rx_ring"},
		{"ports:\n  - name: a\n    backend: afxdp\n    qdisc_bypass: true\n", "use backend: afpacket"},
		{"ports:\n  - name: a\n    backend: afxdp\n    rx_lane: false\n", "afxdp has no rx_ring, rx_ring_timeout, rx_lane"},
		{"ports:\n  - name: a\n    xdp_mode: native\n", "ports[0].xdp_mode: applies to backend: afxdp only"},
		{"ports:\n  - name: a\n    backend: afxdp\n    xdp_mode: drv\n", `"drv" is not an XDP attach mode; use generic (default) or native`},
	} {
		if _, err := ParseConfig("b.yaml", []byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want one containing %q", tc.src, err, tc.want)
		}
	}
}

// labNodeConfig is the configuration a lab generates for the prismd node
// of the single lab with keys added to its node entry (package deploy,
// which cannot import this one), parsed by this package, and its bytes.
func labNodeConfig(t *testing.T, keys string) (*Config, []byte) {
	t.Helper()
	src, err := deploy.Embedded("single")
	if err != nil {
		t.Fatal(err)
	}
	tp, err := deploy.Parse([]byte(strings.Replace(string(src), "{kind: prismd}", "{kind: prismd"+keys+"}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	lc, err := deploy.NewPrismdConfig(tp, "sw1", "/run/prismd-lab/single")
	if err != nil {
		t.Fatal(err)
	}
	b, err := lc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig("sw1.yaml", b)
	if err != nil {
		t.Fatalf("%q: prismd refuses the lab's config: %v\n%s", keys, err, b)
	}
	return c, b
}

// TestLabConfigBackend: the configuration a lab generates for a prismd node
// is accepted by this parser, and every port gets the node's backend and
// attach mode.
func TestLabConfigBackend(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		backend    string
		native     bool
	}{
		{"default", "", "", false},
		{"afpacket", ", backend: afpacket", BackendAFPacket, false},
		{"afxdp", ", backend: afxdp", BackendAFXDP, false},
		{"afxdp generic", ", backend: afxdp, xdp_mode: generic", BackendAFXDP, false},
		{"afxdp native", ", backend: afxdp, xdp_mode: native", BackendAFXDP, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, b := labNodeConfig(t, tc.keys)
			if len(c.Ports) != 2 {
				t.Fatalf("%d ports, want 2:\n%s", len(c.Ports), b)
			}
			for _, p := range c.Ports {
				if p.Backend != tc.backend || p.XDPOptions().Native != tc.native {
					t.Errorf("port %s: backend %q native %v, want %q %v", p.Name, p.Backend, p.XDPOptions().Native, tc.backend, tc.native)
				}
			}
		})
	}
}

// TestLabConfigKulischPartials: a lab node's kulisch_partials reaches
// prismd's parsed config unchanged, and prismd's default when absent.
func TestLabConfigKulischPartials(t *testing.T) {
	for _, tc := range []struct {
		keys           string
		plain, compact bool
	}{
		{"", false, false},
		{", kulisch_partials: f64", false, false},
		{", kulisch_partials: scaled", false, true},
		{", kulisch_partials: plain", true, false},
	} {
		c, b := labNodeConfig(t, tc.keys)
		if c.PlainKulischPartials() != tc.plain || c.CompactKulischPartials() != tc.compact {
			t.Errorf("%q: plain %v compact %v, want %v %v\n%s", tc.keys, c.PlainKulischPartials(), c.CompactKulischPartials(), tc.plain, tc.compact, b)
		}
	}
}

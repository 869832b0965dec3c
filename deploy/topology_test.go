package deploy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// minimal is a valid file the error cases below each break in one place.
const minimal = `name: t1
topology:
  nodes:
    h1: {kind: host, ipv4: 10.0.0.1/24}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    sw1: {kind: prismd}
  links:
    - endpoints: ["h1:eth0", "sw1:p1"]
    - endpoints: ["h2:eth0", "sw1:p2"]
`

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		line int    // expected line, 0 = any
		want string // substring of the message
	}{
		{"empty", "", 0, "empty topology"},
		{"not yaml", "name: [", 1, "invalid YAML"},
		{"unknown top key", "name: a\nmtus: 9000\n", 2, `unknown key "mtus" in the top level; valid keys are: name, mtu, topology`},
		{"unknown topology key", "name: a\ntopology:\n  node: {}\n", 3, `unknown key "node" in topology; valid keys are: nodes, links`},
		{"unknown node key", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, image: x}", 1), 6, `unknown key "image" in a node; valid keys are: kind, ipv4, backend, xdp_mode, kulisch_partials`},
		{"unknown link key", strings.Replace(minimal, `    - endpoints: ["h2:eth0", "sw1:p2"]`, "    - endpoints: [\"h2:eth0\", \"sw1:p2\"]\n      mt: 9000", 1), 10, `unknown key "mt" in a link`},
		{"node not mapping", strings.Replace(minimal, "{kind: prismd}", "prismd", 1), 6, "a node must be a mapping"},
		{"macs not a MAC", strings.Replace(minimal, "{kind: prismd}", `{kind: prismd, macs: {p1: "02:00:00"}}`, 1), 6, `node sw1: macs: p1: "02:00:00" is not a MAC`},
		{"macs unknown iface", strings.Replace(minimal, "{kind: prismd}", `{kind: prismd, macs: {p9: "02:00:00:00:00:09"}}`, 1), 6, `node sw1: macs: "p9" is not one of its interfaces (p1, p2)`},
		{"macs group", strings.Replace(minimal, "{kind: prismd}", `{kind: prismd, macs: {node: "01:00:5e:00:00:01"}}`, 1), 6, "is a group (multicast) address"},
		{"macs host node", strings.Replace(minimal, "{kind: host, ipv4: 10.0.0.2/24}", `{kind: host, ipv4: 10.0.0.2/24, macs: {node: "02:00:00:00:00:09"}}`, 1), 5, "a host has no MAC of its own"},
		{"macs duplicate", strings.Replace(minimal, "{kind: prismd}", `{kind: prismd, macs: {p1: "02:00:00:00:00:09", p2: "02:00:00:00:00:09"}}`, 1), 6, "has MAC 02:00:00:00:00:09, as sw1:p1 does"},
		{"mtu type", "name: a\nmtu: big\n", 2, `mtu: "big" is not a whole number`},
		{"fault type", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, fault: {ingress: {drop_percent: abc}}}", 1), 6,
			`fault.ingress.drop_percent: "abc" is not a number`},
		{"second document", minimal + "---\nname: b\n", 0, "second YAML document"},
		{"no name", strings.Replace(minimal, "name: t1", "", 1), 0, "missing name"},
		{"bad lab name", strings.Replace(minimal, "name: t1", "name: Spine_Leaf", 1), 0, `lab name "Spine_Leaf"`},
		{"long lab name", strings.Replace(minimal, "name: t1", "name: abcdefghijklm", 1), 0, "at most 12"},
		{"no nodes", "name: a\ntopology:\n  links: []\n", 0, "no nodes"},
		{"bad kind", strings.Replace(minimal, "{kind: prismd}", "{kind: router}", 1), 6, `unknown kind "router"; use host, prismd or bridge`},
		{"no kind", strings.Replace(minimal, "{kind: prismd}", "{ipv4: 10.0.0.9/24}", 1), 6, "node sw1 has no kind"},
		{"bad ipv4", strings.Replace(minimal, "10.0.0.2/24", "10.0.0.2", 1), 5, `ipv4 "10.0.0.2" is not an IPv4 address with prefix length`},
		{"ipv6", strings.Replace(minimal, "10.0.0.2/24", "fd00::2/64", 1), 5, "not an IPv4 address"},
		{"dup address", strings.Replace(minimal, "10.0.0.2/24", "10.0.0.1/16", 1), 5, "address 10.0.0.1 is already used by node h1"},
		{"ipv4 on switch", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, ipv4: 10.0.0.9/24}", 1), 6, "ipv4 is only for kind host"},
		{"unknown node in link", strings.Replace(minimal, `"h2:eth0", "sw1:p2"`, `"h3:eth0", "sw1:p2"`, 1), 9, `link 2: unknown node "h3"`},
		{"iface twice", strings.Replace(minimal, `"sw1:p2"`, `"sw1:p1"`, 1), 9, "interface sw1:p1 is already used by link 1"},
		{"one endpoint", strings.Replace(minimal, `["h2:eth0", "sw1:p2"]`, `["h2:eth0"]`, 1), 9, "has 1 endpoints; a link has exactly two"},
		{"no colon", strings.Replace(minimal, `"h2:eth0"`, `"h2-eth0"`, 1), 9, `endpoint "h2-eth0" must be NODE:IFACE`},
		{"ifname too long", strings.Replace(minimal, `sw1:p2`, `sw1:abcdefghijklmnop`, 1), 9, "not a valid Linux name (1..15 characters"},
		{"ifname slash", strings.Replace(minimal, `sw1:p2`, `sw1:a/b`, 1), 9, "not a valid Linux name"},
		{"reserved iface", strings.Replace(minimal, `sw1:p2`, `sw1:node`, 1), 9, `"node" is reserved`},
		{"self link", strings.Replace(minimal, `"h2:eth0", "sw1:p2"`, `"sw1:p3", "sw1:p2"`, 1), 9, "connects node sw1 to itself"},
		{"mtu low", strings.Replace(minimal, "name: t1", "name: t1\nmtu: 67", 1), 0, "mtu 67 is out of range; use 68..9216"},
		{"mtu high", strings.Replace(minimal, "name: t1", "name: t1\nmtu: 9217", 1), 0, "mtu 9217 is out of range"},
		{"link mtu", strings.Replace(minimal, `    - endpoints: ["h2:eth0", "sw1:p2"]`, "    - endpoints: [\"h2:eth0\", \"sw1:p2\"]\n      mtu: 10000", 1), 9, "link 2 (h2:eth0 - sw1:p2): mtu 10000 is out of range"},
		{"isolated node", strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1: {kind: prismd}\n    sw2: {kind: prismd}", 1), 7, "node sw2 is in no link"},
		{"dup node", strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1: {kind: prismd}\n    sw1: {kind: bridge}", 1), 0, `"sw1" already defined`},
		{"bad node name", strings.Replace(strings.ReplaceAll(minimal, "sw1", "sw.1"), "", "", 1), 6, `node name "sw.1"`},
		{"unknown backend", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: xdp}", 1), 6, `node sw1: unknown backend "xdp"; use afpacket (default) or afxdp`},
		{"backend case", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: AFXDP}", 1), 6, `unknown backend "AFXDP"`},
		{"backend type", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: [afxdp]}", 1), 6, "cannot unmarshal"},
		{"unknown xdp_mode", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: afxdp, xdp_mode: drv}", 1), 6, `node sw1: unknown xdp_mode "drv"; use generic (default, any driver) or native`},
		{"xdp_mode without backend", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, xdp_mode: native}", 1), 6, "node sw1: xdp_mode applies to backend: afxdp only; add backend: afxdp to the node or remove xdp_mode"},
		{"xdp_mode with afpacket", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: afpacket, xdp_mode: generic}", 1), 6, "xdp_mode applies to backend: afxdp only"},
		{"backend on host", strings.Replace(minimal, "10.0.0.1/24}", "10.0.0.1/24, backend: afxdp}", 1), 4, "node h1: backend is only for kind prismd (it picks how prismd reaches its ports), not host; remove it"},
		{"valid backend on bridge", strings.Replace(minimal, "{kind: prismd}", "{kind: bridge, backend: afpacket}", 1), 6, "node sw1: backend is only for kind prismd"},
		{"xdp_mode on host", strings.Replace(minimal, "10.0.0.2/24}", "10.0.0.2/24, xdp_mode: generic}", 1), 5, "node h2: xdp_mode is only for kind prismd with backend: afxdp, not host; remove it"},
		{"xdp_mode on bridge", strings.Replace(minimal, "{kind: prismd}", "{kind: bridge, xdp_mode: native}", 1), 6, "xdp_mode is only for kind prismd"},
		// In a block mapping the error names the line of the bad value, not the node's.
		{"block backend line", strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1:\n      kind: prismd\n      backend: afxpd", 1), 8, `unknown backend "afxpd"`},
		{"block xdp_mode line", strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1:\n      kind: prismd\n      backend: afxdp\n      xdp_mode: fast", 1), 9, `unknown xdp_mode "fast"`},
		{"unknown kulisch_partials", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, kulisch_partials: compact}", 1), 6,
			`node sw1: unknown kulisch_partials "compact"; use f64 (default: KULISCH_F64 where binary64 holds the values, the least CPU), scaled (KULISCH_SCALED only, the fewest bytes) or plain (plain KULISCH, for parents without format codes 7 and 8)`},
		{"kulisch_partials case", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, kulisch_partials: F64}", 1), 6, `unknown kulisch_partials "F64"; use f64`},
		{"kulisch_partials empty string", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, kulisch_partials: \" \"}", 1), 6, `unknown kulisch_partials " "`},
		{"kulisch_partials type", strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, kulisch_partials: [scaled]}", 1), 6, "cannot unmarshal"},
		{"kulisch_partials on host", strings.Replace(minimal, "10.0.0.1/24}", "10.0.0.1/24, kulisch_partials: scaled}", 1), 4,
			"node h1: kulisch_partials is only for kind prismd (it picks how prismd sends exact partials to its parent switch), not host; remove it"},
		{"kulisch_partials on bridge", strings.Replace(minimal, "{kind: prismd}", "{kind: bridge, kulisch_partials: f64}", 1), 6, "node sw1: kulisch_partials is only for kind prismd"},
		{"block kulisch_partials line", strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1:\n      kind: prismd\n      backend: afpacket\n      kulisch_partials: scaledd", 1), 9, `unknown kulisch_partials "scaledd"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.src)
			}
			if !errors.Is(err, ErrTopology) {
				t.Errorf("error %v is not ErrTopology", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			var te *Error
			if tc.line != 0 && (!errors.As(err, &te) || te.Line != tc.line) {
				t.Errorf("error %q: want line %d", err, tc.line)
			}
		})
	}
}

func TestParseFileNamesFile(t *testing.T) {
	_, err := ParseFile("lab/nonexistent.yaml")
	if err == nil {
		t.Fatal("no error for a missing file")
	}
	dir := t.TempDir()
	p := dir + "/x.yaml"
	writeFile(t, p, "name: a\nbogus: 1\n")
	_, err = ParseFile(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":2: ") {
		t.Fatalf("error %v does not start with %s:2:", err, p)
	}
}

// TestParseBackend: the accepted backend/xdp_mode combinations on a prismd
// node, what Node holds for each, and that they survive Marshal.
func TestParseBackend(t *testing.T) {
	for _, tc := range []struct {
		keys             string // inserted after "kind: prismd"
		backend, xdpMode string
	}{
		{"", "", ""},
		{", backend: afpacket", BackendAFPacket, ""},
		{", backend: afxdp", BackendAFXDP, ""},
		{", backend: afxdp, xdp_mode: generic", BackendAFXDP, XDPGeneric},
		{", xdp_mode: native, backend: afxdp", BackendAFXDP, XDPNative},
	} {
		t.Run(tc.keys, func(t *testing.T) {
			tp, err := Parse([]byte(strings.Replace(minimal, "{kind: prismd}", "{kind: prismd"+tc.keys+"}", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if n := tp.Nodes["sw1"]; n.Backend != tc.backend || n.XDPMode != tc.xdpMode {
				t.Errorf("sw1 backend %q xdp_mode %q, want %q %q", n.Backend, n.XDPMode, tc.backend, tc.xdpMode)
			}
			for _, h := range []string{"h1", "h2"} {
				if n := tp.Nodes[h]; n.Backend != "" || n.XDPMode != "" {
					t.Errorf("host %s got backend %q xdp_mode %q", h, n.Backend, n.XDPMode)
				}
			}
			back, err := Parse(tp.Marshal())
			if err != nil {
				t.Fatalf("reparse of Marshal: %v\n%s", err, tp.Marshal())
			}
			if !reflect.DeepEqual(stripLines(back), stripLines(tp)) {
				t.Errorf("Marshal round trip differs:\n%s", tp.Marshal())
			}
		})
	}
	// Build (topologies made in code) applies the same rules.
	nodes := []Node{{Name: "h", Kind: KindHost}, {Name: "s", Kind: KindPrismd, XDPMode: XDPNative}}
	links := []Link{{A: Endpoint{"h", "e"}, B: Endpoint{"s", "p"}}}
	if _, err := Build("b", 0, nodes, links); err == nil || !strings.Contains(err.Error(), "xdp_mode applies to backend: afxdp only") {
		t.Errorf("Build with xdp_mode and no backend: %v", err)
	}
	nodes[0].Backend = BackendAFXDP
	if _, err := Build("b", 0, nodes, links); err == nil || !strings.Contains(err.Error(), "node h: backend is only for kind prismd") {
		t.Errorf("Build with a backend on a host: %v", err)
	}
	// A file's error says file:line.
	p := t.TempDir() + "/b.yaml"
	writeFile(t, p, strings.Replace(minimal, "{kind: prismd}", "{kind: prismd, backend: dpdk}", 1))
	if _, err := ParseFile(p); err == nil || !strings.HasPrefix(err.Error(), p+":6: node sw1: unknown backend \"dpdk\"") {
		t.Errorf("ParseFile error %v does not start with %s:6: and name the backend", err, p)
	}
}

// TestParseKulischPartials: the accepted kulisch_partials values on a prismd
// node, alone and next to backend keys, what Node holds, that Marshal
// renders the key and survives a round trip, and that Build and ParseFile
// apply the same rules.
func TestParseKulischPartials(t *testing.T) {
	for _, tc := range []struct {
		keys     string // inserted after "kind: prismd"
		want     string // Node.KulischPartials
		rendered string // in Marshal's line for sw1; "" = no kulisch_partials key
	}{
		{"", "", ""},
		{", kulisch_partials: f64", KulischF64, "sw1: {kind: prismd, kulisch_partials: f64}"},
		{", kulisch_partials: scaled", KulischScaled, "sw1: {kind: prismd, kulisch_partials: scaled}"},
		{", kulisch_partials: plain", KulischPlain, "sw1: {kind: prismd, kulisch_partials: plain}"},
		{`, kulisch_partials: "scaled"`, KulischScaled, "sw1: {kind: prismd, kulisch_partials: scaled}"},
		{", kulisch_partials: scaled, backend: afxdp, xdp_mode: native", KulischScaled,
			"sw1: {kind: prismd, backend: afxdp, xdp_mode: native, kulisch_partials: scaled}"},
	} {
		t.Run(tc.keys, func(t *testing.T) {
			tp, err := Parse([]byte(strings.Replace(minimal, "{kind: prismd}", "{kind: prismd"+tc.keys+"}", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if got := tp.Nodes["sw1"].KulischPartials; got != tc.want {
				t.Errorf("sw1 kulisch_partials %q, want %q", got, tc.want)
			}
			for _, h := range []string{"h1", "h2"} {
				if n := tp.Nodes[h]; n.KulischPartials != "" {
					t.Errorf("host %s got kulisch_partials %q", h, n.KulischPartials)
				}
			}
			m := string(tp.Marshal())
			if tc.rendered == "" && strings.Contains(m, "kulisch_partials") {
				t.Errorf("Marshal renders kulisch_partials the file does not set:\n%s", m)
			}
			if tc.rendered != "" && !strings.Contains(m, "\n    "+tc.rendered+"\n") {
				t.Errorf("Marshal:\n%s\nwant the line %q", m, tc.rendered)
			}
			back, err := Parse(tp.Marshal())
			if err != nil {
				t.Fatalf("reparse of Marshal: %v\n%s", err, m)
			}
			if !reflect.DeepEqual(stripLines(back), stripLines(tp)) {
				t.Errorf("Marshal round trip differs:\n%s", m)
			}
		})
	}
	// Build (topologies made in code) applies the same rules.
	nodes := []Node{{Name: "h", Kind: KindHost}, {Name: "s", Kind: KindPrismd, KulischPartials: KulischScaled}}
	links := []Link{{A: Endpoint{"h", "e"}, B: Endpoint{"s", "p"}}}
	if tp, err := Build("b", 0, nodes, links); err != nil || tp.Nodes["s"].KulischPartials != KulischScaled {
		t.Errorf("Build with kulisch_partials scaled: %v", err)
	}
	nodes[1].KulischPartials = "compact"
	if _, err := Build("b", 0, nodes, links); err == nil || !strings.Contains(err.Error(), `node s: unknown kulisch_partials "compact"; use f64`) {
		t.Errorf("Build with an unknown kulisch_partials: %v", err)
	}
	nodes[1].KulischPartials, nodes[0].KulischPartials = "", KulischPlain
	if _, err := Build("b", 0, nodes, links); err == nil || !strings.Contains(err.Error(), "node h: kulisch_partials is only for kind prismd") {
		t.Errorf("Build with kulisch_partials on a host: %v", err)
	}
	// A file's error says file:line, the line of the value in a block mapping.
	p := t.TempDir() + "/k.yaml"
	writeFile(t, p, strings.Replace(minimal, "    sw1: {kind: prismd}", "    sw1:\n      kind: prismd\n      kulisch_partials: f32", 1))
	if _, err := ParseFile(p); err == nil || !strings.HasPrefix(err.Error(), p+":8: node sw1: unknown kulisch_partials \"f32\"") {
		t.Errorf("ParseFile error %v does not start with %s:8: and name the value", err, p)
	}
}

func mustParse(t *testing.T, name string) *Topology {
	t.Helper()
	b, err := Embedded(name)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tp
}

func TestShippedTopologies(t *testing.T) {
	want := []string{"bridge-pair", "fat-tree", "single", "single-afxdp", "single-jumbo", "spine-leaf", "spine-leaf-jumbo"}
	if got := EmbeddedNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("EmbeddedNames = %v, want %v", got, want)
	}
	for _, name := range want {
		tp := mustParse(t, name)
		// Round trip through Marshal.
		back, err := Parse(tp.Marshal())
		if err != nil {
			t.Fatalf("%s: reparse of Marshal: %v\n%s", name, err, tp.Marshal())
		}
		if !reflect.DeepEqual(stripLines(back), stripLines(tp)) {
			t.Errorf("%s: Marshal round trip differs:\n%s", name, tp.Marshal())
		}
		if l, loop := tp.Loop(); loop {
			t.Errorf("%s: link %v - %v closes a loop", name, l.A, l.B)
		}
		// Every host reaches every other host through switches only.
		hosts := tp.Hosts()
		for _, a := range hosts {
			for _, b := range hosts {
				if a == b {
					continue
				}
				p, err := tp.Path(a, b)
				if err != nil {
					t.Fatalf("%s: Path(%s, %s): %v", name, a, b, err)
				}
				for _, h := range p[1 : len(p)-1] {
					if !tp.Nodes[h.Node].Kind.IsSwitch() {
						t.Errorf("%s: path %s->%s transits host %s", name, a, b, h.Node)
					}
				}
			}
		}
	}
	sl := mustParse(t, "spine-leaf")
	if sl.MTU != 1500 || len(sl.Hosts()) != 4 || len(sl.NodesOf(KindPrismd)) != 3 {
		t.Errorf("spine-leaf: mtu %d, %d hosts, %d prismd", sl.MTU, len(sl.Hosts()), len(sl.NodesOf(KindPrismd)))
	}
	for i, h := range []string{"h1", "h2", "h3", "h4"} {
		if a, _ := sl.HostAddr(h); a.String() != fmt.Sprintf("10.0.0.%d", i+1) {
			t.Errorf("spine-leaf %s address %v", h, a)
		}
	}
	if j := mustParse(t, "spine-leaf-jumbo"); j.MTU != 9000 || j.Links[0].MTU != 9000 {
		t.Errorf("spine-leaf-jumbo MTU %d / link %d", j.MTU, j.Links[0].MTU)
	}
	ft := mustParse(t, "fat-tree")
	if n := len(ft.NodesOf(KindPrismd)); n != 10 || len(ft.Hosts()) != 8 {
		t.Errorf("fat-tree: %d switches, %d hosts", n, len(ft.Hosts()))
	}
	if p, _ := ft.Path("h1", "h8"); len(p) != 8 {
		t.Errorf("fat-tree h1->h8 path %v, want 8 nodes", p)
	}
	if bp := mustParse(t, "bridge-pair"); len(bp.NodesOf(KindBridge)) != 1 {
		t.Error("bridge-pair has no bridge")
	}
	// single-afxdp is single on AF_XDP ports: the same nodes, links and
	// addresses; only the switch's backend differs.
	sx, s1 := mustParse(t, "single-afxdp"), mustParse(t, "single")
	if n := sx.Nodes["sw1"]; n.Backend != BackendAFXDP || n.XDPMode != XDPGeneric {
		t.Errorf("single-afxdp sw1: backend %q xdp_mode %q, want afxdp generic", n.Backend, n.XDPMode)
	}
	sx.Nodes["sw1"].Backend, sx.Nodes["sw1"].XDPMode = "", ""
	sx.Name = s1.Name
	if !reflect.DeepEqual(stripLines(sx), stripLines(s1)) {
		t.Error("single-afxdp differs from single in more than the switch's backend")
	}
	for _, name := range want {
		if name == "single-afxdp" {
			continue
		}
		for _, n := range mustParse(t, name).Nodes {
			if n.Backend != "" || n.XDPMode != "" {
				t.Errorf("%s: node %s sets backend %q xdp_mode %q", name, n.Name, n.Backend, n.XDPMode)
			}
		}
	}
	// No shipped lab overrides prismd's kulisch_partials default.
	for _, name := range want {
		for _, n := range mustParse(t, name).Nodes {
			if n.KulischPartials != "" {
				t.Errorf("%s: node %s sets kulisch_partials %q", name, n.Name, n.KulischPartials)
			}
		}
	}
}

func stripLines(t *Topology) *Topology {
	c := *t
	c.Nodes = map[string]*Node{}
	for k, n := range t.Nodes {
		nn := *n
		nn.Line = 0
		c.Nodes[k] = &nn
	}
	c.Links = append([]Link(nil), t.Links...)
	for i := range c.Links {
		c.Links[i].Line = 0
	}
	return &c
}

func TestPortsAndPaths(t *testing.T) {
	sl := mustParse(t, "spine-leaf")
	if got := Ports(sl, "l1"); !reflect.DeepEqual(got, []string{"p1", "p2", "p3"}) {
		t.Errorf("Ports(l1) = %v", got)
	}
	if got := Ports(sl, "s1"); !reflect.DeepEqual(got, []string{"p1", "p2"}) {
		t.Errorf("Ports(s1) = %v", got)
	}
	for _, tc := range []struct {
		node, iface string
		want        int
	}{{"l1", "p1", 0}, {"l1", "p3", 2}, {"s1", "p2", 1}, {"h1", "eth0", 0}, {"l1", "p9", -1}, {"zz", "p1", -1}} {
		if got := PortIndex(sl, tc.node, tc.iface); got != tc.want {
			t.Errorf("PortIndex(%s, %s) = %d, want %d", tc.node, tc.iface, got, tc.want)
		}
	}
	// Port order is first appearance in links, not name order.
	tp, err := Parse([]byte(`name: po
topology:
  nodes:
    a: {kind: host}
    b: {kind: host}
    sw: {kind: prismd}
  links:
    - endpoints: ["sw:zeta", "a:e"]
    - endpoints: ["b:e", "sw:alpha"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := Ports(tp, "sw"); !reflect.DeepEqual(got, []string{"zeta", "alpha"}) {
		t.Errorf("Ports(sw) = %v, want [zeta alpha]", got)
	}
	wantN := []Adjacency{{"p1", Endpoint{"s1", "p1"}, 1500}, {"p2", Endpoint{"h1", "eth0"}, 1500}, {"p3", Endpoint{"h2", "eth0"}, 1500}}
	if got := sl.Neighbors("l1"); !reflect.DeepEqual(got, wantN) {
		t.Errorf("Neighbors(l1) = %v, want %v", got, wantN)
	}
	p, err := sl.Path("h1", "h4")
	if err != nil {
		t.Fatal(err)
	}
	wantP := []Hop{{"h1", "", "eth0"}, {"l1", "p2", "p1"}, {"s1", "p1", "p2"}, {"l2", "p1", "p3"}, {"h4", "eth0", ""}}
	if !reflect.DeepEqual(p, wantP) {
		t.Errorf("Path(h1, h4) = %v, want %v", p, wantP)
	}
	if p, _ := sl.Path("h1", "h2"); !reflect.DeepEqual(p, []Hop{{"h1", "", "eth0"}, {"l1", "p2", "p3"}, {"h2", "eth0", ""}}) {
		t.Errorf("Path(h1, h2) = %v", p)
	}
	if p, _ := sl.Path("h3", "h3"); !reflect.DeepEqual(p, []Hop{{Node: "h3"}}) {
		t.Errorf("Path(h3, h3) = %v", p)
	}
	if _, err := sl.Path("h1", "nope"); err == nil {
		t.Error("Path to unknown node succeeded")
	}
	// A dual-homed host does not forward: no path between the switches.
	dh, err := Parse([]byte(`name: dh
topology:
  nodes:
    h: {kind: host}
    s1: {kind: prismd}
    s2: {kind: bridge}
  links:
    - endpoints: ["h:e1", "s1:p1"]
    - endpoints: ["h:e2", "s2:p1"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dh.Path("s1", "s2"); !errors.Is(err, ErrNoPath) {
		t.Errorf("Path(s1, s2) through a host: err %v, want ErrNoPath", err)
	}
	if _, err := dh.Path("h", "s2"); err != nil {
		t.Errorf("Path(h, s2): %v", err)
	}
}

func TestLoop(t *testing.T) {
	tp, err := Parse([]byte(`name: lp
topology:
  nodes:
    a: {kind: prismd}
    b: {kind: prismd}
    c: {kind: prismd}
  links:
    - endpoints: ["a:p1", "b:p1"]
    - endpoints: ["b:p2", "c:p1"]
    - endpoints: ["c:p2", "a:p2"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := tp.Loop(); !ok || l.A != (Endpoint{"c", "p2"}) {
		t.Errorf("Loop() = %v, %v; want the c:p2 - a:p2 link", l, ok)
	}
}

func TestMAC(t *testing.T) {
	// Independent oracle: the documented construction, spelled out.
	h := sha256.Sum256([]byte("spine-leaf\x00h1\x00eth0"))
	want := [6]byte{0x02, h[0], h[1], h[2], h[3], h[4]}
	if got := MAC("spine-leaf", "h1", "eth0"); got != want {
		t.Errorf("MAC = % x, want % x", got, want)
	}
	// Golden value: other tools (the AM) depend on it never changing.
	if got := HardwareAddr(MAC("spine-leaf", "h1", "eth0")).String(); got != "02:9a:29:38:2a:61" {
		t.Errorf("MAC(spine-leaf, h1, eth0) = %s, want 02:9a:29:38:2a:61", got)
	}
	// Unique and locally administered unicast across a whole topology.
	ft := mustParse(t, "fat-tree")
	seen := map[[6]byte]string{}
	for _, n := range ft.NodeNames() {
		for _, ifc := range append(Ports(ft, n), NodeMACIface) {
			m := ft.MAC(n, ifc)
			if m[0] != 0x02 {
				t.Errorf("%s:%s MAC % x is not 02:...", n, ifc, m)
			}
			hw := net.HardwareAddr(m[:])
			if prev, dup := seen[m]; dup {
				t.Errorf("%s:%s and %s share MAC %v", n, ifc, prev, hw)
			}
			seen[m] = n + ":" + ifc
		}
	}
	if MAC("a", "h1", "eth0") == MAC("b", "h1", "eth0") {
		t.Error("MAC does not depend on the lab name")
	}
	// The separator makes ("ab","c") and ("a","bc") different.
	if MAC("x", "ab", "c") == MAC("x", "a", "bc") {
		t.Error("MAC is ambiguous across the node/iface boundary")
	}
}

func TestPrismdConfig(t *testing.T) {
	tp := mustParse(t, "single")
	c, err := NewPrismdConfig(tp, "sw1", "/run/prismd-lab/single")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	mac := func(n, i string) string { m := MAC("single", n, i); return net.HardwareAddr(m[:]).String() }
	want := fmt.Sprintf(`node_mac: %s
ports:
    - name: p1
      mtu: 1500
    - name: p2
      mtu: 1500
workers: 1
mac_aging: 300s
metrics_listen: 127.0.0.1:9100
control_listen: /run/prismd-lab/single/sw1.sock
am_sources:
    - %s
    - %s
`, mac("sw1", "node"), mac("h1", "eth0"), mac("h2", "eth0"))
	if string(b) != want {
		t.Errorf("config:\n%s\nwant:\n%s", b, want)
	}
	// The node's backend and xdp_mode go on every port, in the daemon's keys.
	xc, err := NewPrismdConfig(mustParse(t, "single-afxdp"), "sw1", "/run/prismd-lab/single-afxdp")
	if err != nil {
		t.Fatal(err)
	}
	xb, err := xc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	wantPorts := `ports:
    - name: p1
      mtu: 1500
      backend: afxdp
      xdp_mode: generic
    - name: p2
      mtu: 1500
      backend: afxdp
      xdp_mode: generic
workers: 1
`
	if !strings.Contains(string(xb), wantPorts) {
		t.Errorf("single-afxdp config:\n%s\nwant it to contain:\n%s", xb, wantPorts)
	}
	// kulisch_partials is a top-level key of the daemon's schema, after
	// am_sources, and absent unless the node sets it (prismd's default).
	for _, v := range []string{KulischF64, KulischScaled, KulischPlain} {
		src, err := Embedded("spine-leaf")
		if err != nil {
			t.Fatal(err)
		}
		kt, err := Parse([]byte(strings.Replace(string(src), "l1: {kind: prismd}", "l1: {kind: prismd, kulisch_partials: "+v+"}", 1)))
		if err != nil {
			t.Fatal(err)
		}
		for _, node := range []string{"l1", "l2"} {
			kc, err := NewPrismdConfig(kt, node, "/run/prismd-lab/spine-leaf")
			if err != nil {
				t.Fatal(err)
			}
			kb, err := kc.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var top map[string]any
			if err := yaml.Unmarshal(kb, &top); err != nil {
				t.Fatalf("%s: generated config is not YAML: %v\n%s", node, err, kb)
			}
			got, has := top["kulisch_partials"]
			switch node {
			case "l1":
				if got != v || !strings.HasSuffix(string(kb), "\nkulisch_partials: "+v+"\n") {
					t.Errorf("l1 with kulisch_partials %s: config:\n%s\nwant it to end with the top-level line kulisch_partials: %s", v, kb, v)
				}
			case "l2":
				if has {
					t.Errorf("l2 without kulisch_partials: config carries kulisch_partials %v, want no key (prismd's default):\n%s", got, kb)
				}
			}
		}
	}
	if strings.Contains(string(b), "kulisch_partials") {
		t.Errorf("single's config carries kulisch_partials:\n%s", b)
	}
	if _, err := NewPrismdConfig(tp, "h1", "/x"); err == nil {
		t.Error("config for a host accepted")
	}
	if _, err := NewPrismdConfig(tp, "sw1", "/"+strings.Repeat("d", 120)); err == nil {
		t.Error("socket path over 107 bytes accepted")
	}
}

func TestBuildLargeAndLimits(t *testing.T) {
	nodes := []Node{{Name: "s1", Kind: KindPrismd}}
	var links []Link
	for i := 1; i <= 40; i++ {
		h := fmt.Sprintf("h%d", i)
		nodes = append(nodes, Node{Name: h, Kind: KindHost})
		links = append(links, Link{A: Endpoint{h, "eth0"}, B: Endpoint{"s1", fmt.Sprintf("p%d", i)}})
	}
	tp, err := Build("big", 0, nodes, links)
	if err != nil {
		t.Fatal(err)
	}
	if tp.MTU != DefaultMTU || tp.Links[39].MTU != DefaultMTU || PortIndex(tp, "s1", "p40") != 39 {
		t.Errorf("defaults: mtu %d, link mtu %d, port %d", tp.MTU, tp.Links[39].MTU, PortIndex(tp, "s1", "p40"))
	}
	// Build does not alias the caller's slices.
	if nodes[0].Ifaces != nil || links[0].MTU != 0 {
		t.Error("Build modified its arguments")
	}
	// Temporary veth names fit IFNAMSIZ at the largest link index.
	if n := tmpName("abcdefghijkl", MaxLinks-1, 'b'); len(n) > MaxIfName {
		t.Errorf("tmpName %q is %d > %d characters", n, len(n), MaxIfName)
	}
	if tmpPrefix("a") == tmpPrefix("b") {
		t.Error("tmpPrefix does not depend on the lab name")
	}
}

func TestEmbeddedAndLoad(t *testing.T) {
	a, err := Embedded("single")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Embedded("single.yaml")
	if err != nil || string(a) != string(b) {
		t.Errorf("Embedded with .yaml: %v", err)
	}
	if _, err := Embedded("nope"); err == nil || !strings.Contains(err.Error(), "spine-leaf") {
		t.Errorf("Embedded(nope) error %v does not list the shipped names", err)
	}
	if tp, err := Load("fat-tree"); err != nil || tp.Name != "fat-tree" {
		t.Errorf("Load(fat-tree) = %v, %v", tp, err)
	}
	p := t.TempDir() + "/f.yaml"
	writeFile(t, p, strings.Replace(minimal, "name: t1", "name: local", 1))
	if tp, err := Load(p); err != nil || tp.Name != "local" {
		t.Errorf("Load(file) = %v, %v", tp, err)
	}
	if _, err := Load("nope"); err == nil {
		t.Error("Load(nope) succeeded")
	}
}

// TestGivenMACsParse: macs replace the derived MACs of the interfaces they
// name (and of the node), and survive Marshal.
func TestGivenMACsParse(t *testing.T) {
	src := strings.Replace(minimal, "{kind: prismd}", `{kind: prismd, macs: {node: "0a:00:00:00:00:01", p2: "0a:00:00:00:00:02"}}`, 1)
	tp, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		node, iface string
		want        [6]byte
	}{
		{"sw1", NodeMACIface, [6]byte{0x0a, 0, 0, 0, 0, 1}},
		{"sw1", "p2", [6]byte{0x0a, 0, 0, 0, 0, 2}},
		{"sw1", "p1", MAC(tp.Name, "sw1", "p1")}, // not given: derived
		{"h1", "eth0", MAC(tp.Name, "h1", "eth0")},
	} {
		if got := tp.MAC(c.node, c.iface); got != c.want {
			t.Errorf("MAC(%s, %s) = %v, want %v", c.node, c.iface, HardwareAddr(got), HardwareAddr(c.want))
		}
	}
	again, err := Parse(tp.Marshal())
	if err != nil {
		t.Fatalf("Marshal does not parse: %v\n%s", err, tp.Marshal())
	}
	if got := again.MAC("sw1", "p2"); got != [6]byte{0x0a, 0, 0, 0, 0, 2} {
		t.Errorf("after Marshal: %v\n%s", HardwareAddr(got), tp.Marshal())
	}
	pc, err := NewPrismdConfig(tp, "sw1", "/run/x")
	if err != nil {
		t.Fatal(err)
	}
	if pc.NodeMAC != "0a:00:00:00:00:01" {
		t.Errorf("prismd's node_mac %q, want the given one", pc.NodeMAC)
	}
}

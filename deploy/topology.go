// This file owns the topology file format: parsing, validation and the
// queries (MACs, port indexes, neighbours, paths) every tool derives from it.

package deploy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/prismd/prismd/internal/yamlerr"
)

// Kind is what a node is. The zero value is invalid.
type Kind int

const (
	// KindHost is an end system: a namespace with interfaces and an optional
	// IPv4 address on its first interface.
	KindHost Kind = iota + 1
	// KindPrismd is a switch run by bin/prismd.
	KindPrismd
	// KindBridge is a Linux bridge joining all the node's interfaces, the
	// reference switch prismd is compared against.
	KindBridge
)

var kindNames = map[string]Kind{"host": KindHost, "prismd": KindPrismd, "bridge": KindBridge}

func (k Kind) String() string {
	switch k {
	case KindHost:
		return "host"
	case KindPrismd:
		return "prismd"
	case KindBridge:
		return "bridge"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// IsSwitch reports whether frames may transit a node of this kind.
func (k Kind) IsSwitch() bool { return k == KindPrismd || k == KindBridge }

// Limits of the format. Each exists because of a name or size the kernel or
// prismd imposes; see the comments.
const (
	// MaxLabName keeps "pl-<lab>-<node>" readable and leaves room in the
	// 108-byte unix socket path /run/prismd-lab/<lab>/<node>.sock.
	MaxLabName = 12
	// MaxNodeName bounds the same socket path; namespace names could be longer.
	MaxNodeName = 32
	// MaxIfName is IFNAMSIZ-1: the kernel refuses longer interface names.
	MaxIfName = 15
	// MinMTU is the IPv4 minimum (RFC 791); the kernel refuses less on veth.
	MinMTU = 68
	// MaxMTU is the largest jumbo frame common switch ASICs and prismd accept.
	MaxMTU = 9216
	// DefaultMTU applies when the file gives none.
	DefaultMTU = 1500
	// MaxLinks keeps temporary veth names (see tmpPrefix) within IFNAMSIZ.
	MaxLinks = 9999
)

// NodeMACIface is the pseudo interface name whose MAC is a node's own
// (prismd's node_mac). It is reserved: no link may use it.
const NodeMACIface = "node"

// BridgeIface is the name of the Linux bridge inside a bridge node.
const BridgeIface = "br0"

// Node is one node of a topology.
type Node struct {
	Name string
	Kind Kind
	// IPv4 is the host's address with its prefix length; invalid (the zero
	// Prefix) when none is given. Only hosts have one.
	IPv4 netip.Prefix
	// Ifaces are the node's interfaces in order of first appearance in the
	// links; for a prismd node the position is the port index.
	Ifaces []string
	// Backend is the port backend prismd uses on every port of a prismd
	// node: BackendAFPacket or BackendAFXDP; empty leaves prismd's default
	// (afpacket). Only prismd nodes have one.
	Backend string
	// XDPMode is where an afxdp node attaches its XDP program: XDPGeneric
	// or XDPNative; empty leaves prismd's default (generic). Only with
	// Backend BackendAFXDP.
	XDPMode string
	// KulischPartials is how a prismd node sends exact partials to its
	// parent: KulischF64, KulischScaled or KulischPlain, prismd's
	// kulisch_partials; empty leaves prismd's default (f64). Only prismd
	// nodes have one.
	KulischPartials string
	// Fault impairs every port of a prismd node (tests and labs); nil for
	// none. Only prismd nodes have one.
	Fault *Fault
	// MACs gives interfaces (and, under NodeMACIface, a prismd or bridge
	// node itself) MACs of their own instead of the derived ones (MAC):
	// real NICs, whose MACs the AM must address, or a node its operator
	// numbered. A lab sets them on its veths; nil for none.
	MACs     map[string][6]byte
	macsLine int // where macs is written (0 if built in code)
	// Line is where the node is defined in the file (0 if built in code).
	Line int
}

// Fault is prismd's per-port fault key (cmd/prismd, tests and labs) in its
// ingress/egress form, given once for a node and written to each of its
// ports: ingress loss, duplication, reordering and delay of the frames a
// port receives, egress reordering and delay of those it sends. Each port
// gets a seed of its own (PortSeed), so that a node's ports do not drop
// and reorder in step.
type Fault struct {
	Ingress *IngressFault `yaml:"ingress,omitempty"`
	Egress  *EgressFault  `yaml:"egress,omitempty"`
}

// IngressFault impairs received frames; percentages may have fractions.
type IngressFault struct {
	DropPercent      float64 `yaml:"drop_percent,omitempty"`      // 0..100
	DuplicatePercent float64 `yaml:"duplicate_percent,omitempty"` // 0..100
	ReorderPercent   float64 `yaml:"reorder_percent,omitempty"`   // 0..100
	ReorderDepth     int     `yaml:"reorder_depth,omitempty"`     // 1..1000 when reorder_percent > 0
	DelayUS          int     `yaml:"delay_us,omitempty"`          // 0..1000000
	Seed             uint64  `yaml:"seed,omitempty"`
}

// EgressFault impairs transmitted frames.
type EgressFault struct {
	ReorderPercent float64 `yaml:"reorder_percent,omitempty"` // 0..100
	ReorderDepth   int     `yaml:"reorder_depth,omitempty"`   // 1..1000 when reorder_percent > 0
	DelayUS        int     `yaml:"delay_us,omitempty"`        // 0..1000000
	Seed           uint64  `yaml:"seed,omitempty"`
}

// flow renders f in YAML flow style for Marshal's one-line node entries:
// the keys and omitempty of the struct tags, the same encoder as the
// generated prismd configs.
func (f *Fault) flow() string {
	var n yaml.Node
	if err := n.Encode(f); err != nil {
		return "{}" // cannot happen: plain numbers and pointers to structs of them
	}
	var flowStyle func(*yaml.Node)
	flowStyle = func(n *yaml.Node) {
		n.Style |= yaml.FlowStyle
		for _, c := range n.Content {
			flowStyle(c)
		}
	}
	flowStyle(&n)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return "{}"
	}
	return strings.TrimSpace(string(b))
}

// PortSeed is the seed a node's fault gives its port index port: the
// configured seed (or, for 0, one derived from the node's name) mixed with
// the index, so the lab is reproducible and no two ports draw alike (the
// generated config flips bits of it for the egress direction).
func PortSeed(node string, seed uint64, port int) uint64 {
	if seed == 0 {
		h := fnv.New64a()
		h.Write([]byte(node))
		seed = h.Sum64()
	}
	return seed ^ uint64(port+1)*0x9e3779b97f4a7c15
}

// Port backends and XDP attach modes of a prismd node (Node.Backend,
// Node.XDPMode). The values are prismd's own config values (cmd/prismd,
// PortConfig), which the generated configuration passes on unchanged.
const (
	BackendAFPacket = "afpacket"
	BackendAFXDP    = "afxdp"
	XDPGeneric      = "generic"
	XDPNative       = "native"
)

// Encodings of a prismd node's exact partials (Node.KulischPartials), the
// values of prismd's top-level kulisch_partials, passed on unchanged.
const (
	// KulischF64 (prismd's default) sends a frame whose values binary64
	// holds as KULISCH_F64, the least CPU: about 2.09 x the vector of
	// gradient-like FP32 data on a leaf's uplink (scripts/bench.sh part 4).
	KulischF64 = "f64"
	// KulischScaled sends KULISCH_SCALED groups only, the fewest bytes:
	// about 1.6 x the vector of the same data.
	KulischScaled = "scaled"
	// KulischPlain sends plain KULISCH values only, for a parent built
	// before format codes 7 and 8.
	KulischPlain = "plain"
)

// Endpoint is one end of a link: an interface of a node.
type Endpoint struct {
	Node  string
	Iface string
}

func (e Endpoint) String() string { return e.Node + ":" + e.Iface }

// Link is a point-to-point cable (a veth pair in a lab).
type Link struct {
	A, B Endpoint
	// MTU of both ends, the topology default when the file gives none.
	MTU int
	// Line is where the link is defined in the file (0 if built in code).
	Line int
}

// Topology is a parsed and validated topology file. Treat it as read-only:
// its indexes are built once by Parse or Build.
type Topology struct {
	Name  string
	MTU   int
	Nodes map[string]*Node
	Links []Link

	names []string         // node names, sorted
	ends  map[Endpoint]int // endpoint -> link index
}

// Error is a topology error: where it is and what to do about it.
type Error struct {
	File string // may be empty
	Line int    // 0 when unknown
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrTopology is matched by errors.Is for every *Error.
var ErrTopology = errors.New("invalid topology")

func (e *Error) Is(target error) bool { return target == ErrTopology }

func errAt(line int, format string, args ...any) *Error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// File format. Each level checks its own keys so that an unknown key is
// reported with the valid ones, which the yaml package's KnownFields error
// does not say.

type fileTop struct {
	Name     string       `yaml:"name"`
	MTU      int          `yaml:"mtu"`
	Topology fileTopology `yaml:"topology"`
	line     int
}

type fileTopology struct {
	Nodes map[string]fileNode `yaml:"nodes"`
	Links []fileLink          `yaml:"links"`
	line  int
}

type fileNode struct {
	Kind    string `yaml:"kind"`
	IPv4    string `yaml:"ipv4"`
	Backend string `yaml:"backend"`
	XDPMode string `yaml:"xdp_mode"`
	// KulischPartials is prismd's kulisch_partials for the node.
	KulischPartials string            `yaml:"kulisch_partials"`
	Fault           *fileFault        `yaml:"fault"`
	MACs            map[string]string `yaml:"macs"`
	line            int
	macsLine        int
	// Lines of the backend, xdp_mode and kulisch_partials values, so an
	// error points at the key rather than at the node (a block mapping
	// spans several lines).
	backendLine, xdpModeLine, kulischLine int
}

// fileFault is a node's fault key: each level checks its keys, so a typo
// is reported with the valid ones and the line.
type fileFault struct {
	Fault
	line int
}

func (f *fileFault) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "fault", "ingress", "egress"); err != nil {
		return err
	}
	f.line = n.Line
	for i := 0; i+1 < len(n.Content); i += 2 {
		dir, v := n.Content[i].Value, n.Content[i+1]
		keys := []string{"reorder_percent", "reorder_depth", "delay_us", "seed"}
		var dst any
		switch dir {
		case "ingress":
			keys = append([]string{"drop_percent", "duplicate_percent"}, keys...)
			f.Ingress = &IngressFault{}
			dst = f.Ingress
		case "egress":
			f.Egress = &EgressFault{}
			dst = f.Egress
		}
		if err := checkKeys(v, "fault."+dir, keys...); err != nil {
			return err
		}
		if err := checkWhole(v, "fault."+dir+".", "reorder_depth", "delay_us", "seed"); err != nil {
			return err
		}
		if err := v.Decode(dst); err != nil {
			// The library's message spans lines and names no key: find
			// the key whose value it quotes.
			msg := err.Error()
			if i := strings.LastIndex(msg, ": cannot unmarshal"); i >= 0 {
				msg = msg[i+2:]
			}
			if val, want, ok := yamlerr.Want(msg); ok {
				for k := 0; k+1 < len(v.Content); k += 2 {
					// (The library shortens a long value to its start and "...".)
					got := v.Content[k+1].Value
					if p, cut := strings.CutSuffix(val, "..."); got == val || cut && strings.HasPrefix(got, p) {
						return errAt(v.Content[k+1].Line, "fault.%s.%s: %q is not %s", dir, v.Content[k].Value, got, want)
					}
				}
			}
			return errAt(v.Line, "fault.%s: wrong type of value: %s", dir, msg)
		}
	}
	return nil
}

type fileLink struct {
	Endpoints []string `yaml:"endpoints"`
	MTU       int      `yaml:"mtu"`
	line      int
}

func checkKeys(n *yaml.Node, what string, allowed ...string) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n.Line, "%s must be a mapping (key: value lines), got %s", what, yamlKind(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ok := false
		for _, a := range allowed {
			if k.Value == a {
				ok = true
			}
		}
		if !ok {
			return errAt(k.Line, "unknown key %q in %s; valid keys are: %s", k.Value, what, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// checkWhole refuses a fraction for the keys of mapping n that hold whole
// numbers: yaml decodes 1500.5 into an int as 1500, silently. what
// prefixes the key in the message.
func checkWhole(n *yaml.Node, what string, keys ...string) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		if v.Kind == yaml.ScalarNode && v.Tag == "!!float" && slices.Contains(keys, k) {
			return errAt(v.Line, "%s%s must be a whole number written without a decimal point, not %s", what, k, v.Value)
		}
	}
	return nil
}

func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

func (f *fileTop) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "the top level", "name", "mtu", "topology"); err != nil {
		return err
	}
	if err := checkWhole(n, "", "mtu"); err != nil {
		return err
	}
	type plain fileTop
	f.line = n.Line
	return n.Decode((*plain)(f))
}

func (f *fileTopology) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "topology", "nodes", "links"); err != nil {
		return err
	}
	type plain fileTopology
	f.line = n.Line
	return n.Decode((*plain)(f))
}

func (f *fileNode) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "a node", "kind", "ipv4", "backend", "xdp_mode", "kulisch_partials", "fault", "macs"); err != nil {
		return err
	}
	type plain fileNode
	f.line = n.Line
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "backend":
			f.backendLine = n.Content[i+1].Line
		case "xdp_mode":
			f.xdpModeLine = n.Content[i+1].Line
		case "kulisch_partials":
			f.kulischLine = n.Content[i+1].Line
		case "macs":
			f.macsLine = n.Content[i+1].Line
		}
	}
	return n.Decode((*plain)(f))
}

func (f *fileLink) UnmarshalYAML(n *yaml.Node) error {
	if err := checkKeys(n, "a link", "endpoints", "mtu"); err != nil {
		return err
	}
	if err := checkWhole(n, "a link's ", "mtu"); err != nil {
		return err
	}
	type plain fileLink
	f.line = n.Line
	return n.Decode((*plain)(f))
}

// ParseFile reads and parses a topology file; errors carry the file name.
func ParseFile(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	var te *Error
	if errors.As(err, &te) {
		te.File = path
	}
	return t, err
}

var yamlLine = regexp.MustCompile(`^yaml: (?:unmarshal errors:\n\s*)?line (\d+): (.*)$`)

// Parse parses and validates a topology file. Unknown keys, wrong types and
// every inconsistency are errors (*Error, matching ErrTopology).
func Parse(src []byte) (*Topology, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	var f fileTop
	if err := dec.Decode(&f); err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, te
		}
		if err.Error() == "EOF" {
			return nil, errAt(0, "empty topology file; it needs at least name: and topology: nodes:")
		}
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			fmt.Sscan(m[1], &line)
			msg = m[2]
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		if strings.Contains(msg, "cannot unmarshal") {
			if d := yamlerr.Describe(src, line, msg); d != "" {
				msg = d
			} else {
				msg = "wrong type of value: " + msg
			}
		} else if !strings.Contains(msg, "already defined") {
			msg = "invalid YAML: " + msg + " (check indentation, brackets and quotes)"
		}
		return nil, errAt(line, "%s", msg)
	}
	// A second document would be silently ignored; refuse it.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, errAt(extra.Line, "a second YAML document (---) is not allowed; put one lab per file")
	}
	if f.Name == "" {
		return nil, errAt(f.line, "missing name: give the lab a name of [a-z0-9-], at most %d characters", MaxLabName)
	}
	nodes := make([]*Node, 0, len(f.Topology.Nodes))
	for name, fn := range f.Topology.Nodes {
		k, ok := kindNames[fn.Kind]
		if !ok {
			if fn.Kind == "" {
				return nil, errAt(fn.line, "node %s has no kind; add kind: host, prismd or bridge", name)
			}
			return nil, errAt(fn.line, "node %s: unknown kind %q; use host, prismd or bridge", name, fn.Kind)
		}
		n := &Node{Name: name, Kind: k, Line: fn.line}
		if fn.IPv4 != "" {
			p, err := netip.ParsePrefix(fn.IPv4)
			if err != nil || !p.Addr().Is4() {
				return nil, errAt(fn.line, "node %s: ipv4 %q is not an IPv4 address with prefix length, like 10.0.0.1/24", name, fn.IPv4)
			}
			n.IPv4 = p
		}
		n.Backend, n.XDPMode = fn.Backend, fn.XDPMode
		if err := checkBackend(n, fn.backendLine, fn.xdpModeLine); err != nil {
			return nil, err
		}
		n.KulischPartials = fn.KulischPartials
		if err := checkKulischPartials(n, fn.kulischLine); err != nil {
			return nil, err
		}
		if fn.Fault != nil {
			f := fn.Fault.Fault
			n.Fault = &f
			if err := checkFault(n, fn.Fault.line); err != nil {
				return nil, err
			}
		}
		for iface, v := range fn.MACs {
			m, err := net.ParseMAC(v)
			if err != nil || len(m) != 6 {
				return nil, errAt(fn.macsLine, "node %s: macs: %s: %q is not a MAC like 02:00:00:00:00:01", name, iface, v)
			}
			if n.MACs == nil {
				n.MACs = map[string][6]byte{}
			}
			n.MACs[iface] = [6]byte(m)
		}
		n.macsLine = fn.macsLine
		nodes = append(nodes, n)
	}
	links := make([]Link, 0, len(f.Topology.Links))
	for i, fl := range f.Topology.Links {
		if len(fl.Endpoints) != 2 {
			return nil, errAt(fl.line, "link %d has %d endpoints; a link has exactly two, like endpoints: [\"h1:eth0\", \"sw1:p1\"]", i+1, len(fl.Endpoints))
		}
		var ends [2]Endpoint
		for j, s := range fl.Endpoints {
			node, iface, ok := strings.Cut(s, ":")
			if !ok || node == "" || iface == "" || strings.Contains(iface, ":") {
				return nil, errAt(fl.line, "link %d: endpoint %q must be NODE:IFACE, like \"h1:eth0\"", i+1, s)
			}
			ends[j] = Endpoint{node, iface}
		}
		links = append(links, Link{A: ends[0], B: ends[1], MTU: fl.MTU, Line: fl.line})
	}
	return build(f.Name, f.MTU, nodes, links)
}

// Build validates a topology assembled in code (tests generate large ones).
// mtu 0 means DefaultMTU; a link MTU of 0 means the topology's.
func Build(name string, mtu int, nodes []Node, links []Link) (*Topology, error) {
	ns := make([]*Node, len(nodes))
	for i := range nodes {
		n := nodes[i]
		n.Ifaces = nil
		ns[i] = &n
	}
	return build(name, mtu, ns, append([]Link(nil), links...))
}

var (
	labNameRE  = regexp.MustCompile(`^[a-z0-9-]+$`)
	nodeNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]*$`)
)

func validIfName(s string) bool {
	if s == "" || len(s) > MaxIfName || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || r == '/' || r == ':' {
			return false
		}
	}
	return true
}

// checkBackend validates a node's backend and xdp_mode; the lines are where
// each value is written (the node's line when built in code). Parse checks
// with the keys' lines before build checks again with the node's.
func checkBackend(n *Node, backendLine, modeLine int) error {
	if n.Backend != "" {
		if n.Kind != KindPrismd {
			return errAt(backendLine, "node %s: backend is only for kind prismd (it picks how prismd reaches its ports), not %v; remove it", n.Name, n.Kind)
		}
		if n.Backend != BackendAFPacket && n.Backend != BackendAFXDP {
			return errAt(backendLine, "node %s: unknown backend %q; use %s (default) or %s", n.Name, n.Backend, BackendAFPacket, BackendAFXDP)
		}
	}
	if n.XDPMode != "" {
		if n.Kind != KindPrismd {
			return errAt(modeLine, "node %s: xdp_mode is only for kind prismd with backend: %s, not %v; remove it", n.Name, BackendAFXDP, n.Kind)
		}
		if n.XDPMode != XDPGeneric && n.XDPMode != XDPNative {
			return errAt(modeLine, "node %s: unknown xdp_mode %q; use %s (default, any driver) or %s (driver XDP)", n.Name, n.XDPMode, XDPGeneric, XDPNative)
		}
		if n.Backend != BackendAFXDP {
			return errAt(modeLine, "node %s: xdp_mode applies to backend: %s only; add backend: %s to the node or remove xdp_mode", n.Name, BackendAFXDP, BackendAFXDP)
		}
	}
	return nil
}

// checkKulischPartials validates a node's kulisch_partials; line is where
// the value is written (the node's line when built in code).
func checkKulischPartials(n *Node, line int) error {
	if n.KulischPartials == "" {
		return nil
	}
	if n.Kind != KindPrismd {
		return errAt(line, "node %s: kulisch_partials is only for kind prismd (it picks how prismd sends exact partials to its parent switch), not %v; remove it", n.Name, n.Kind)
	}
	switch n.KulischPartials {
	case KulischF64, KulischScaled, KulischPlain:
		return nil
	}
	return errAt(line, "node %s: unknown kulisch_partials %q; use %s (default: KULISCH_F64 where binary64 holds the values, the least CPU), %s (KULISCH_SCALED only, the fewest bytes) or %s (plain KULISCH, for parents without format codes 7 and 8)",
		n.Name, n.KulischPartials, KulischF64, KulischScaled, KulischPlain)
}

// checkFault validates a node's fault with prismd's own rules (cmd/prismd
// checks them again when it starts); line is where the key is written.
func checkFault(n *Node, line int) error {
	f := n.Fault
	if f == nil {
		return nil
	}
	if n.Kind != KindPrismd {
		return errAt(line, "node %s: fault is only for kind prismd (it impairs the switch's ports), not %v; remove it", n.Name, n.Kind)
	}
	if f.Ingress == nil && f.Egress == nil {
		return errAt(line, "node %s: fault has neither ingress nor egress; add one, e.g. fault: {ingress: {drop_percent: 1}}", n.Name)
	}
	pct := func(key string, v float64) error {
		if !(v >= 0 && v <= 100) {
			return errAt(line, "node %s: fault.%s %v is not a percentage; use 0..100", n.Name, key, v)
		}
		return nil
	}
	reorder := func(dir string, p float64, depth, delay int) error {
		if err := pct(dir+".reorder_percent", p); err != nil {
			return err
		}
		if depth < 0 || depth > 1000 {
			return errAt(line, "node %s: fault.%s.reorder_depth %d is out of range; use 1..1000", n.Name, dir, depth)
		}
		if p > 0 && depth == 0 {
			return errAt(line, "node %s: fault.%s.reorder_depth must be >= 1 when reorder_percent > 0 (how many later frames overtake a held one)", n.Name, dir)
		}
		if delay < 0 || delay > 1_000_000 {
			return errAt(line, "node %s: fault.%s.delay_us %d is out of range; use 0..1000000 microseconds", n.Name, dir, delay)
		}
		return nil
	}
	if in := f.Ingress; in != nil {
		if err := pct("ingress.drop_percent", in.DropPercent); err != nil {
			return err
		}
		if err := pct("ingress.duplicate_percent", in.DuplicatePercent); err != nil {
			return err
		}
		if err := reorder("ingress", in.ReorderPercent, in.ReorderDepth, in.DelayUS); err != nil {
			return err
		}
	}
	if e := f.Egress; e != nil {
		if err := reorder("egress", e.ReorderPercent, e.ReorderDepth, e.DelayUS); err != nil {
			return err
		}
	}
	return nil
}

func build(name string, mtu int, nodes []*Node, links []Link) (*Topology, error) {
	if !labNameRE.MatchString(name) || len(name) > MaxLabName {
		return nil, errAt(0, "lab name %q: use only a-z, 0-9 and -, at most %d characters (it prefixes namespace names)", name, MaxLabName)
	}
	if mtu == 0 {
		mtu = DefaultMTU
	}
	if mtu < MinMTU || mtu > MaxMTU {
		return nil, errAt(0, "mtu %d is out of range; use %d..%d", mtu, MinMTU, MaxMTU)
	}
	t := &Topology{Name: name, MTU: mtu, Nodes: map[string]*Node{}, ends: map[Endpoint]int{}}
	if len(nodes) == 0 {
		return nil, errAt(0, "no nodes; add topology: nodes: with at least one node")
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	addrs := map[netip.Addr]string{}
	for _, n := range nodes {
		if !nodeNameRE.MatchString(n.Name) || len(n.Name) > MaxNodeName {
			return nil, errAt(n.Line, "node name %q: use letters, digits, _ and - (not first), at most %d characters", n.Name, MaxNodeName)
		}
		if _, dup := t.Nodes[n.Name]; dup {
			return nil, errAt(n.Line, "node %s is defined twice", n.Name)
		}
		if n.Kind < KindHost || n.Kind > KindBridge {
			return nil, errAt(n.Line, "node %s: invalid kind %v; use host, prismd or bridge", n.Name, n.Kind)
		}
		if n.IPv4.IsValid() {
			if n.Kind != KindHost {
				return nil, errAt(n.Line, "node %s: ipv4 is only for kind host, not %v; remove it", n.Name, n.Kind)
			}
			a := n.IPv4.Addr()
			if !a.Is4() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
				return nil, errAt(n.Line, "node %s: ipv4 %v is not a unicast IPv4 address", n.Name, n.IPv4)
			}
			if other, dup := addrs[a]; dup {
				return nil, errAt(n.Line, "node %s: address %v is already used by node %s; give each host its own", n.Name, a, other)
			}
			addrs[a] = n.Name
		}
		if err := checkBackend(n, n.Line, n.Line); err != nil {
			return nil, err
		}
		if err := checkKulischPartials(n, n.Line); err != nil {
			return nil, err
		}
		if err := checkFault(n, n.Line); err != nil {
			return nil, err
		}
		t.Nodes[n.Name] = n
		t.names = append(t.names, n.Name)
	}
	if len(links) > MaxLinks {
		return nil, errAt(0, "%d links; at most %d are supported", len(links), MaxLinks)
	}
	for i := range links {
		l := &links[i]
		if l.MTU == 0 {
			l.MTU = mtu
		}
		if l.MTU < MinMTU || l.MTU > MaxMTU {
			return nil, errAt(l.Line, "link %d (%v - %v): mtu %d is out of range; use %d..%d", i+1, l.A, l.B, l.MTU, MinMTU, MaxMTU)
		}
		if l.A.Node == l.B.Node {
			return nil, errAt(l.Line, "link %d connects node %s to itself; connect two different nodes", i+1, l.A.Node)
		}
		for _, e := range []Endpoint{l.A, l.B} {
			n, ok := t.Nodes[e.Node]
			if !ok {
				return nil, errAt(l.Line, "link %d: unknown node %q in endpoint %v; define it under topology: nodes:", i+1, e.Node, e)
			}
			if !validIfName(e.Iface) {
				return nil, errAt(l.Line, "link %d: interface name %q is not a valid Linux name (1..%d characters, no spaces, '/' or ':')", i+1, e.Iface, MaxIfName)
			}
			if e.Iface == "lo" || e.Iface == NodeMACIface || (n.Kind == KindBridge && e.Iface == BridgeIface) {
				return nil, errAt(l.Line, "link %d: interface name %q is reserved on node %s; pick another", i+1, e.Iface, e.Node)
			}
			if j, dup := t.ends[e]; dup {
				return nil, errAt(l.Line, "link %d: interface %v is already used by link %d; each interface takes one link", i+1, e, j+1)
			}
			t.ends[e] = i
			n.Ifaces = append(n.Ifaces, e.Iface)
		}
	}
	for _, name := range t.names {
		n := t.Nodes[name]
		if len(n.Ifaces) == 0 {
			return nil, errAt(n.Line, "node %s is in no link; connect it or remove it", name)
		}
	}
	t.Links = links
	if err := checkMACs(t); err != nil {
		return nil, err
	}
	return t, nil
}

// checkMACs validates the nodes' macs: each names an interface of its node
// (or NodeMACIface, for a prismd or bridge node) and is a unicast MAC, and
// no two interfaces of the topology, given or derived, share one: the AM
// and the switches address nodes and ports by MAC.
func checkMACs(t *Topology) error {
	owner := map[[6]byte]string{}
	for _, name := range t.names {
		n := t.Nodes[name]
		line := n.macsLine
		if line == 0 {
			line = n.Line
		}
		for _, iface := range slices.Sorted(maps.Keys(n.MACs)) {
			m := n.MACs[iface]
			switch {
			case iface == NodeMACIface && n.Kind == KindHost:
				return errAt(line, "node %s: macs: a host has no MAC of its own (%q); give its interfaces' MACs", name, iface)
			case iface != NodeMACIface && !slices.Contains(n.Ifaces, iface):
				return errAt(line, "node %s: macs: %q is not one of its interfaces (%s)", name, iface, strings.Join(n.Ifaces, ", "))
			case m[0]&1 != 0:
				return errAt(line, "node %s: macs: %s: %v is a group (multicast) address; give a unicast one", name, iface, HardwareAddr(m))
			case m == [6]byte{}:
				return errAt(line, "node %s: macs: %s: the all-zero MAC is not an interface's", name, iface)
			}
		}
		ifaces := n.Ifaces
		if n.Kind != KindHost {
			ifaces = append(slices.Clone(ifaces), NodeMACIface)
		}
		for _, iface := range ifaces {
			m := t.MAC(name, iface)
			if o, dup := owner[m]; dup {
				return errAt(line, "node %s: %s has MAC %v, as %s does; every interface needs its own", name, iface, HardwareAddr(m), o)
			}
			owner[m] = name + ":" + iface
		}
	}
	return nil
}

// NodeNames returns every node name, sorted.
func (t *Topology) NodeNames() []string { return append([]string(nil), t.names...) }

// NodesOf returns the names of the nodes of kind k, sorted.
func (t *Topology) NodesOf(k Kind) []string {
	var r []string
	for _, n := range t.names {
		if t.Nodes[n].Kind == k {
			r = append(r, n)
		}
	}
	return r
}

// Hosts returns the host names, sorted.
func (t *Topology) Hosts() []string { return t.NodesOf(KindHost) }

// LinkOf returns the link an endpoint belongs to.
func (t *Topology) LinkOf(e Endpoint) (Link, bool) {
	i, ok := t.ends[e]
	if !ok {
		return Link{}, false
	}
	return t.Links[i], true
}

// Peer returns the endpoint at the other end of e's link.
func (t *Topology) Peer(e Endpoint) (Endpoint, bool) {
	l, ok := t.LinkOf(e)
	if !ok {
		return Endpoint{}, false
	}
	if l.A == e {
		return l.B, true
	}
	return l.A, true
}

// Adjacency is one interface of a node and what it is cabled to.
type Adjacency struct {
	Iface string   // the local interface
	Peer  Endpoint // the remote end
	MTU   int
}

// Neighbors returns node's interfaces in port order with their peers; nil
// for an unknown node.
func (t *Topology) Neighbors(node string) []Adjacency {
	n, ok := t.Nodes[node]
	if !ok {
		return nil
	}
	r := make([]Adjacency, 0, len(n.Ifaces))
	for _, ifc := range n.Ifaces {
		l := t.Links[t.ends[Endpoint{node, ifc}]]
		p, _ := t.Peer(Endpoint{node, ifc})
		r = append(r, Adjacency{Iface: ifc, Peer: p, MTU: l.MTU})
	}
	return r
}

// Hop is one node on a path. In is the interface the frame arrives on (empty
// at the source), Out the one it leaves by (empty at the destination).
type Hop struct {
	Node string
	In   string
	Out  string
}

// ErrNoPath is returned by Path when the nodes are not connected through
// switches.
var ErrNoPath = errors.New("no path")

// Path returns a shortest path from one node to another that transits only
// switches (prismd and bridge nodes), found by breadth-first search over
// interfaces in port order, so it is deterministic. Both ends are included.
func (t *Topology) Path(from, to string) ([]Hop, error) {
	if _, ok := t.Nodes[from]; !ok {
		return nil, fmt.Errorf("deploy: path from unknown node %q", from)
	}
	if _, ok := t.Nodes[to]; !ok {
		return nil, fmt.Errorf("deploy: path to unknown node %q", to)
	}
	if from == to {
		return []Hop{{Node: from}}, nil
	}
	type via struct {
		prev    string
		out, in string // prev's out interface, this node's in interface
	}
	seen := map[string]via{from: {}}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur != from && !t.Nodes[cur].Kind.IsSwitch() {
			continue // hosts do not forward
		}
		for _, a := range t.Neighbors(cur) {
			if _, ok := seen[a.Peer.Node]; ok {
				continue
			}
			seen[a.Peer.Node] = via{prev: cur, out: a.Iface, in: a.Peer.Iface}
			if a.Peer.Node == to {
				var chain []string // to ... from
				for n := to; n != from; n = seen[n].prev {
					chain = append(chain, n)
				}
				chain = append(chain, from)
				hops := make([]Hop, len(chain))
				for i := range hops {
					hops[i].Node = chain[len(chain)-1-i]
					if i > 0 {
						v := seen[hops[i].Node]
						hops[i].In, hops[i-1].Out = v.in, v.out
					}
				}
				return hops, nil
			}
			queue = append(queue, a.Peer.Node)
		}
	}
	return nil, fmt.Errorf("deploy: %s to %s: %w", from, to, ErrNoPath)
}

// MAC returns the deterministic MAC of interface iface of node in lab: a
// locally administered unicast address (first byte 0x02) followed by the
// first five bytes of SHA-256("lab\x00node\x00iface"). iface NodeMACIface
// ("node") gives the node's own MAC. Hashing rather than numbering keeps a
// MAC stable when nodes are added to a topology.
func MAC(lab, node, iface string) [6]byte {
	h := sha256.Sum256([]byte(lab + "\x00" + node + "\x00" + iface))
	return [6]byte{0x02, h[0], h[1], h[2], h[3], h[4]}
}

// HardwareAddr converts a MAC to a net.HardwareAddr.
func HardwareAddr(m [6]byte) net.HardwareAddr { return net.HardwareAddr(m[:]) }

// MAC returns the MAC of node's interface iface in this topology: the one
// the node's macs key gives, else the derived one (MAC).
func (t *Topology) MAC(node, iface string) [6]byte {
	if n := t.Nodes[node]; n != nil {
		if m, ok := n.MACs[iface]; ok {
			return m
		}
	}
	return MAC(t.Name, node, iface)
}

// HostMACs returns the MAC of every host interface, hosts sorted by name and
// interfaces in link order: the sources prismd accepts an Aggregation
// Manager from.
func (t *Topology) HostMACs() [][6]byte {
	var r [][6]byte
	for _, h := range t.Hosts() {
		for _, ifc := range t.Nodes[h].Ifaces {
			r = append(r, t.MAC(h, ifc))
		}
	}
	return r
}

// PortIndex returns the 0-based port index of node's interface iface: its
// position among the node's interfaces in order of first appearance in the
// links (docs/protocol.md: "node port index, 0-based"). -1 if there is no
// such interface.
func PortIndex(t *Topology, node, iface string) int {
	n, ok := t.Nodes[node]
	if !ok {
		return -1
	}
	for i, ifc := range n.Ifaces {
		if ifc == iface {
			return i
		}
	}
	return -1
}

// Ports returns node's interfaces in port index order (nil if unknown).
func Ports(t *Topology, node string) []string {
	n, ok := t.Nodes[node]
	if !ok {
		return nil
	}
	return append([]string(nil), n.Ifaces...)
}

// Loop returns a link that closes a cycle, if any. Ethernet forwarding in
// prismd and in a Linux bridge without STP floods forever around a cycle, so
// prismctl warns about one.
func (t *Topology) Loop() (Link, bool) {
	parent := map[string]string{}
	var find func(string) string
	find = func(n string) string {
		p, ok := parent[n]
		if !ok || p == n {
			return n
		}
		r := find(p)
		parent[n] = r
		return r
	}
	for _, l := range t.Links {
		a, b := find(l.A.Node), find(l.B.Node)
		if a == b {
			return l, true
		}
		parent[a] = b
	}
	return Link{}, false
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// Marshal renders t in the topology file format; Parse(t.Marshal()) gives
// an equal topology. Up saves it as topology.yaml in the state directory so
// a lab built in code can be inspected and removed with prismctl.
func (t *Topology) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nmtu: %d\ntopology:\n  nodes:\n", t.Name, t.MTU)
	for _, name := range t.names {
		n := t.Nodes[name]
		fmt.Fprintf(&b, "    %s: {kind: %v", name, n.Kind)
		if n.IPv4.IsValid() {
			fmt.Fprintf(&b, ", ipv4: %v", n.IPv4)
		}
		if n.Backend != "" {
			fmt.Fprintf(&b, ", backend: %s", n.Backend)
		}
		if n.XDPMode != "" {
			fmt.Fprintf(&b, ", xdp_mode: %s", n.XDPMode)
		}
		if n.KulischPartials != "" {
			fmt.Fprintf(&b, ", kulisch_partials: %s", n.KulischPartials)
		}
		if n.Fault != nil {
			fmt.Fprintf(&b, ", fault: %s", n.Fault.flow())
		}
		if len(n.MACs) > 0 {
			var ms []string
			for _, iface := range slices.Sorted(maps.Keys(n.MACs)) {
				ms = append(ms, fmt.Sprintf("%q: %q", iface, HardwareAddr(n.MACs[iface]).String()))
			}
			fmt.Fprintf(&b, ", macs: {%s}", strings.Join(ms, ", "))
		}
		b.WriteString("}\n")
	}
	b.WriteString("  links:\n")
	for _, l := range t.Links {
		fmt.Fprintf(&b, "    - endpoints: [%q, %q]", l.A.String(), l.B.String())
		if l.MTU != t.MTU {
			fmt.Fprintf(&b, "\n      mtu: %d", l.MTU)
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

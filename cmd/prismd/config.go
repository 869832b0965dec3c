// This file owns the prismd configuration file: its schema, strict parsing
// and validation. Only cmd/prismd parses files; libraries take Options.

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/prismd/prismd/internal/yamlerr"

	"github.com/prismd/prismd/dataplane"
)

// Config is the YAML configuration file. Every key is optional except ports;
// unknown keys are errors. Example (the lab generator emits exactly this):
//
//	node_mac: "02:00:00:00:00:01"   # optional; extra local MAC for PRISM
//	ports:                          # order defines port index 0,1,2,... used by CONTROL bindings
//	  - name: p1                    # interface name
//	    mtu: 1500                   # optional; default: the interface MTU
//	    rx_ring: true               # optional; TPACKET_V3 receive ring (false: recvmmsg)
//	    rx_ring_timeout: 1ms        # optional; max wait of a frame in a partly filled block
//	    rx_sparse_fps: 50000        # optional; below this many frames/s every frame skips the ring (0: only CONTROL does)
//	    qdisc_bypass: true          # optional; false keeps egress visible to tcpdump
//	    backend: afpacket           # optional; afpacket (default) or afxdp (XDP program + AF_XDP sockets)
//	    xdp_mode: generic           # optional, afxdp only; generic (default, any driver) or native (driver XDP)
//	    fault:                      # optional, tests/labs only (egress of this port)
//	      reorder_percent: 0        # 0..100, fractions allowed
//	      reorder_depth: 3
//	      delay_us: 0
//	      ingress:                  # optional; received frames, before classification
//	        drop_percent: 0.5       # 0..100, fractions allowed; also duplicate_percent,
//	        reorder_percent: 0      #   reorder_depth, delay_us and seed (reproducible)
//	      # egress: {reorder_percent, reorder_depth, delay_us, seed} instead of the keys above
//	workers: 1                      # engine workers (default 1)
//	worker_handoff: false           # true: every local PRISM frame waits for its worker goroutine
//	mac_aging: 300s                 # default 300s
//	mac_table_size: 32768           # stations the MAC table holds, rounded up to a power of two (default 32768; 32..4194304; restart to change)
//	max_contexts: 1024              # PRISM operation contexts the switch holds, shared evenly by the workers (default 1024; 1..65535; restart to change)
//	accumulator_memory_mb: 1024     # accumulator memory each worker's contexts may reserve, MiB (default 1024; 1..1048576; restart to change)
//	metrics_listen: "127.0.0.1:9100"   # empty or absent disables
//	control_listen: "/run/prismd/prismd.sock"  # HTTP over a unix socket; empty or absent disables
//	am_sources: ["02:00:00:00:00:aa"]  # MACs allowed to send CONTROL
//	kulisch_partials: f64           # f64 (default: KULISCH_F64 where binary64 holds a frame), scaled (fewest bytes) or plain (KULISCH only)
type Config struct {
	NodeMAC  string       `yaml:"node_mac"`
	Ports    []PortConfig `yaml:"ports"`
	Workers  int          `yaml:"workers"`
	MACAging string       `yaml:"mac_aging"`
	// MACTableSize is how many stations the MAC table holds (0: the
	// default, dataplane.DefaultMACTableSize/2). A full table learns no
	// new station and floods frames to them. Read at start.
	MACTableSize int `yaml:"mac_table_size"`
	// MaxContexts and AccumulatorMemoryMB bound what a switch holds (0:
	// the defaults, 1024 contexts and 1 GiB per worker): a STAGE past
	// either is NO_RESOURCES. Read at start.
	MaxContexts         int      `yaml:"max_contexts"`
	AccumulatorMemoryMB int      `yaml:"accumulator_memory_mb"`
	MetricsListen       string   `yaml:"metrics_listen"`
	ControlListen       string   `yaml:"control_listen"`
	AMSources           []string `yaml:"am_sources"`
	// KulischPartials chooses how exact partials travel to a parent
	// (protocol section 6): "f64" (default) sends a frame whose values
	// binary64 holds as one KULISCH_F64 group and plans KULISCH_SCALED
	// groups for the others, the least CPU; "scaled" plans every frame as
	// KULISCH_SCALED groups, the fewest bytes, for trees whose links are
	// slower than their switches; "plain" sends plain KULISCH values only,
	// for a parent built before format codes 7 and 8. Read at start; a
	// reload that changes it warns that it needs a restart.
	KulischPartials string `yaml:"kulisch_partials"`
	// WorkerHandoff turns off inline runs (dataplane.Options.NoInline): by
	// default a port's receive loop runs an idle worker's engine itself,
	// which saves a thread wakeup per batch on hosts with fewer cores than
	// ports plus workers; with a core for each, handing off keeps receiving
	// and aggregating in parallel.
	WorkerHandoff bool `yaml:"worker_handoff"`

	// Derived by Validate.
	nodeMAC   *[6]byte
	aging     time.Duration
	amSources [][6]byte
}

// PortConfig is one entry of ports.
type PortConfig struct {
	Name  string       `yaml:"name"`
	MTU   int          `yaml:"mtu"`
	Fault *FaultConfig `yaml:"fault"`
	// RxRing receives through a TPACKET_V3 mmap ring (default true): one
	// wakeup per block instead of per frame. false uses recvmmsg, which
	// adds no latency when traffic is sparse.
	RxRing *bool `yaml:"rx_ring"`
	// RxRingTimeout bounds how long a frame waits in a partly filled ring
	// block (default 1ms; 0..100ms).
	RxRingTimeout time.Duration `yaml:"rx_ring_timeout"`
	// RxLane (default true, with the ring) receives PRISM CONTROL frames
	// on a second socket that hands each one over at once: through the
	// ring, a CONTROL request and its ACK waited about 0.8 ms at every
	// switch on their way, and the AM's setup of every collective is four
	// such exchanges with every node (dataplane.PortOptions.Lane).
	RxLane *bool `yaml:"rx_lane"`
	// RxSparseFPS (default dataplane.DefaultSparseFPS, with the lane):
	// below this many received frames a second every frame takes
	// the lane, above twice it only CONTROL does; 0 keeps the lane to
	// CONTROL (dataplane.PortOptions.SparseFPS).
	RxSparseFPS *int `yaml:"rx_sparse_fps"`
	// QdiscBypass sends past the qdisc layer (default true); false keeps
	// egress visible to tcpdump and subject to any qdisc on the port.
	QdiscBypass *bool `yaml:"qdisc_bypass"`
	// Backend is how the port reaches the wire: "afpacket" (default) or
	// "afxdp" (an XDP program steering frames to AF_XDP sockets; faster,
	// but the host stack on the port sees only unicast frames for the
	// port's own MAC). rx_ring, rx_ring_timeout and qdisc_bypass apply to
	// afpacket only.
	Backend string `yaml:"backend"`
	// XDPMode is where the afxdp backend attaches its XDP program:
	// "generic" (default; works on every interface) or "native" (in the
	// driver; faster on NICs with XDP support, refused by the others).
	XDPMode string `yaml:"xdp_mode"`
}

// Port backends (PortConfig.Backend).
const (
	BackendAFPacket = "afpacket"
	BackendAFXDP    = "afxdp"
)

// XDPOptions maps the port entry to the AF_XDP backend's options.
func (p PortConfig) XDPOptions() dataplane.XDPOptions {
	return dataplane.XDPOptions{MTU: p.MTU, Native: p.XDPMode == "native"}
}

// Options maps the port entry to the dataplane's socket options.
func (p PortConfig) Options() dataplane.PortOptions {
	o := dataplane.PortOptions{
		MTU:           p.MTU,
		NoRxRing:      p.RxRing != nil && !*p.RxRing,
		Lane:          p.RxLane == nil || *p.RxLane,
		RingTimeout:   p.RxRingTimeout,
		NoQdiscBypass: p.QdiscBypass != nil && !*p.QdiscBypass,
		SparseFPS:     dataplane.DefaultSparseFPS,
	}
	if p.RxSparseFPS != nil {
		o.SparseFPS = *p.RxSparseFPS
	}
	return o
}

// FaultConfig impairs frames transmitted on the port (tests and labs only).
// Ingress and Egress are in config_fault.go; the keys directly under fault
// are the original egress form.
type FaultConfig struct {
	ReorderPercent float64             `yaml:"reorder_percent"`
	ReorderDepth   int                 `yaml:"reorder_depth"`
	DelayUS        int                 `yaml:"delay_us"`
	Ingress        *IngressFaultConfig `yaml:"ingress"`
	Egress         *EgressFaultConfig  `yaml:"egress"`
}

func (p PortConfig) fault() dataplane.Fault {
	if p.Fault == nil {
		return dataplane.Fault{}
	}
	f := dataplane.Fault{ReorderPercent: p.Fault.ReorderPercent, ReorderDepth: p.Fault.ReorderDepth,
		Delay: time.Duration(p.Fault.DelayUS) * time.Microsecond}
	p.Fault.faultSections(&f)
	return f
}

// ConfigError is a configuration problem: what is wrong and how to fix it.
type ConfigError struct {
	File  string
	Field string // dotted path, e.g. "ports[1].mtu"; empty for syntax errors
	Msg   string
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Field + ": " + e.Msg
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid configuration")

func (e *ConfigError) Unwrap() error { return ErrConfig }

// LoadConfig reads, strictly parses and validates file.
func LoadConfig(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		// The hint follows the cause: "pass an existing file" read oddly
		// under permission denied or for a directory.
		hint := "pass an existing file with --config"
		switch {
		case errors.Is(err, fs.ErrPermission):
			hint = "prismd runs as a user that may not read it: fix its mode or owner"
		case errors.Is(err, syscall.EISDIR):
			hint = "--config names a directory; name the YAML file in it"
		}
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("cannot read: %v (%s)", err, hint)}
	}
	return ParseConfig(file, b)
}

// ParseConfig parses YAML strictly: unknown keys and wrong types are errors
// naming the key and line.
func ParseConfig(file string, b []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ConfigError{File: file, Msg: "file is empty; it needs at least a ports: list"}
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if te := (*yaml.TypeError)(nil); !errors.As(err, &te) {
			msg = syntaxLine(b, msg)
		}
		msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
		msg = describeTypes(b, msg)
		msg = strings.ReplaceAll(msg, "in type main.Config", "(valid keys: node_mac, ports, workers, worker_handoff, mac_aging, mac_table_size, max_contexts, accumulator_memory_mb, metrics_listen, control_listen, am_sources, kulisch_partials)")
		msg = strings.ReplaceAll(msg, "in type main.PortConfig", "in a ports entry (valid keys: name, mtu, rx_ring, rx_ring_timeout, rx_lane, rx_sparse_fps, qdisc_bypass, backend, xdp_mode, fault)")
		msg = strings.ReplaceAll(msg, "in type main.FaultConfig", "in fault (valid keys: reorder_percent, reorder_depth, delay_us, ingress, egress)")
		msg = strings.ReplaceAll(msg, "in type main.IngressFaultConfig", "in fault.ingress (valid keys: drop_percent, duplicate_percent, reorder_percent, reorder_depth, delay_us, seed)")
		msg = strings.ReplaceAll(msg, "in type main.EgressFaultConfig", "in fault.egress (valid keys: reorder_percent, reorder_depth, delay_us, seed)")
		return nil, &ConfigError{File: file, Msg: msg}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &ConfigError{File: file, Msg: fmt.Sprintf("line %d: a second YAML document; put everything in one document", extra.Line)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err == nil {
		if n := fraction(&root); n != nil {
			return nil, &ConfigError{File: file, Msg: fmt.Sprintf("line %d: %s must be a whole number written without a decimal point, not %s", n[1].Line, n[0].Value, n[1].Value)}
		}
	}
	if err := c.Validate(file); err != nil {
		return nil, err
	}
	return &c, nil
}

// syntaxLine gives a YAML syntax error msg the line where the problem is.
// The library reports the line where the enclosing block began, one before
// the block's first entry ("line 1" for a ports entry's key indented too
// little on line 3), or no line at all ("mapping values are not allowed in
// this context"), and keeps the problem's own position to itself. The
// first prefix of whole lines that fails with the same problem ends at
// the line where the parser met it; for an unclosed quote or bracket that
// is the line that opened it, which is where the fix goes.
func syntaxLine(src []byte, msg string) string {
	_, problem := cutLine(msg)
	lines := bytes.SplitAfter(src, []byte("\n"))
	if len(lines) > maxSyntaxLines {
		return msg
	}
	for k := 1; k <= len(lines); k++ {
		var n yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if err == nil {
			continue
		}
		if _, p := cutLine(strings.TrimPrefix(err.Error(), "yaml: ")); p == problem {
			return fmt.Sprintf("line %d: %s", k, problem)
		}
	}
	return msg
}

// maxSyntaxLines bounds syntaxLine, which parses the file once per line:
// a hand-written configuration has a few hundred at most.
const maxSyntaxLines = 5000

// cutLine splits "line N: problem" into N and the problem; 0 and msg when
// msg names no line.
func cutLine(msg string) (int, string) {
	var n int
	if _, err := fmt.Sscanf(msg, "line %d:", &n); err == nil {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			return n, rest
		}
	}
	return 0, msg
}

// describeTypes rewrites each "line N: cannot unmarshal ..." of msg to name
// the key and what it wants (yamlerr), and a port given as a bare name,
// which the ports list does not take, to the form it does.
func describeTypes(src []byte, msg string) string {
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "line %d:", &n); err != nil {
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		rest := strings.TrimSpace(l[strings.Index(l, ":")+1:])
		if v, _, ok := yamlerr.Want(rest); ok && strings.HasSuffix(rest, "main.PortConfig") {
			lines[i] = fmt.Sprintf("%sline %d: ports entry %q: write each port as a mapping, e.g. ports: [{name: %s}]", indent, n, v, v)
		} else if d := yamlerr.Describe(src, n, rest); d != "" {
			lines[i] = fmt.Sprintf("%sline %d: %s", indent, n, d)
		}
	}
	return strings.Join(lines, "\n")
}

// wholeKeys are the keys of the schema that hold whole numbers: yaml
// decodes 1500.5 into an int as 1500, silently, so a fraction there is
// refused by fraction instead.
var wholeKeys = map[string]bool{"workers": true, "mac_table_size": true, "max_contexts": true, "accumulator_memory_mb": true, "mtu": true, "rx_sparse_fps": true, "reorder_depth": true, "delay_us": true, "seed": true}

// fraction returns the first key/value pair under n whose key is one of
// wholeKeys and whose value is written as a float, or nil.
func fraction(n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if wholeKeys[k.Value] && v.Kind == yaml.ScalarNode && v.Tag == "!!float" {
				return []*yaml.Node{k, v}
			}
		}
	}
	for _, c := range n.Content {
		if r := fraction(c); r != nil {
			return r
		}
	}
	return nil
}

func parseUnicastMAC(s string) ([6]byte, error) {
	var m [6]byte
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return m, fmt.Errorf("%q is not a MAC address; write it like \"02:00:00:00:00:01\"", s)
	}
	copy(m[:], hw)
	if m[0]&1 != 0 {
		return m, fmt.Errorf("%s is a group (multicast/broadcast) MAC; use a unicast one (first octet even)", s)
	}
	if m == ([6]byte{}) {
		// The bridge drops frames from it as bad_src_mac: an AM at it
		// could never be heard.
		return m, fmt.Errorf("%s is the all-zero MAC, which no frame may come from; give the interface's real MAC", s)
	}
	return m, nil
}

// Validate checks every field and fills in defaults.
func (c *Config) Validate(file string) error {
	bad := func(field, format string, a ...any) error {
		return &ConfigError{File: file, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if c.NodeMAC != "" {
		m, err := parseUnicastMAC(c.NodeMAC)
		if err != nil {
			return bad("node_mac", "%v", err)
		}
		c.nodeMAC = &m
	}
	if len(c.Ports) == 0 {
		return bad("ports", "no ports; list at least one interface, e.g.\n  ports:\n    - name: eth1")
	}
	if c.MACTableSize != 0 && (c.MACTableSize < 32 || c.MACTableSize > maxMACTableSize) {
		return bad("mac_table_size", "%d is out of range; use 32..%d stations (default %d)", c.MACTableSize, maxMACTableSize, dataplane.DefaultMACTableSize/2)
	}
	if c.MaxContexts != 0 && (c.MaxContexts < 1 || c.MaxContexts > 65535) {
		return bad("max_contexts", "%d is out of range; use 1..65535 (default 1024)", c.MaxContexts)
	}
	if c.AccumulatorMemoryMB != 0 && (c.AccumulatorMemoryMB < 1 || c.AccumulatorMemoryMB > 1<<20) {
		return bad("accumulator_memory_mb", "%d is out of range; use 1..1048576 MiB per worker (default 1024)", c.AccumulatorMemoryMB)
	}
	switch c.KulischPartials {
	case "", "f64", "scaled", "plain":
	default:
		return bad("kulisch_partials", "%q: use f64 (the default: KULISCH_F64 where binary64 holds the values, the least CPU), scaled (KULISCH_SCALED only, the fewest bytes) or plain (KULISCH values only, for parents without format codes 7 and 8)", c.KulischPartials)
	}
	seen := map[string]int{}
	for i, p := range c.Ports {
		f := fmt.Sprintf("ports[%d]", i)
		switch {
		case p.Name == "":
			return bad(f+".name", "missing; set it to the interface name (see `ip link`)")
		case len(p.Name) > 15 || strings.ContainsAny(p.Name, "/ \t:"):
			return bad(f+".name", "%q is not a valid Linux interface name (at most 15 characters, no '/', ':' or spaces)", p.Name)
		}
		if j, dup := seen[p.Name]; dup {
			return bad(f+".name", "interface %q is already ports[%d]; list each interface once", p.Name, j)
		}
		seen[p.Name] = i
		if p.MTU != 0 && (p.MTU < 68 || p.MTU > 9216) {
			return bad(f+".mtu", "%d is out of range; use 68..9216 (PRISM uses 576, 1500 or 9000) or omit it for the interface MTU", p.MTU)
		}
		if p.RxRingTimeout < 0 || p.RxRingTimeout > 100*time.Millisecond {
			return bad(f+".rx_ring_timeout", "%v is out of range; use 0..100ms (default 1ms)", p.RxRingTimeout)
		}
		if p.RxSparseFPS != nil && (*p.RxSparseFPS < 0 || *p.RxSparseFPS > 100_000_000) {
			return bad(f+".rx_sparse_fps", "%d is out of range; use 0 (the lane takes CONTROL only) up to 100000000 frames/s (default %d)", *p.RxSparseFPS, dataplane.DefaultSparseFPS)
		}
		switch p.Backend {
		case "", BackendAFPacket:
		case BackendAFXDP:
			if p.RxRing != nil || p.RxRingTimeout != 0 || p.QdiscBypass != nil || p.RxLane != nil || p.RxSparseFPS != nil {
				return bad(f+".backend", "afxdp has no rx_ring, rx_ring_timeout, rx_lane, rx_sparse_fps or qdisc_bypass (AF_PACKET socket options); remove them or use backend: afpacket")
			}
		default:
			return bad(f+".backend", "%q is not a port backend; use afpacket (default) or afxdp", p.Backend)
		}
		switch {
		case p.XDPMode != "" && p.Backend != BackendAFXDP:
			return bad(f+".xdp_mode", "applies to backend: afxdp only; add that or remove xdp_mode")
		case p.XDPMode != "" && p.XDPMode != "generic" && p.XDPMode != "native":
			return bad(f+".xdp_mode", "%q is not an XDP attach mode; use generic (default) or native", p.XDPMode)
		}
		if p.Fault != nil {
			if !(p.Fault.ReorderPercent >= 0 && p.Fault.ReorderPercent <= 100) { // NaN too
				return bad(f+".fault.reorder_percent", "%v is not a percentage; use 0..100", p.Fault.ReorderPercent)
			}
			if p.Fault.ReorderDepth < 0 || p.Fault.ReorderDepth > 1000 {
				return bad(f+".fault.reorder_depth", "%d is out of range; use 1..1000", p.Fault.ReorderDepth)
			}
			if p.Fault.ReorderPercent > 0 && p.Fault.ReorderDepth == 0 {
				return bad(f+".fault.reorder_depth", "must be >= 1 when reorder_percent > 0 (how many later frames overtake a held one)")
			}
			if p.Fault.DelayUS < 0 || p.Fault.DelayUS > 1_000_000 {
				return bad(f+".fault.delay_us", "%d is out of range; use 0..1000000 microseconds", p.Fault.DelayUS)
			}
			if err := p.Fault.validateSections(f+".fault", bad); err != nil {
				return err
			}
		}
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.Workers < 1 || c.Workers > 1024 {
		return bad("workers", "%d is out of range; use 1..1024 (about one per core you give prismd)", c.Workers)
	}
	c.aging = dataplane.DefaultMACAging
	if c.MACAging != "" {
		d, err := time.ParseDuration(c.MACAging)
		if err != nil {
			return bad("mac_aging", "%q is not a duration; write e.g. 300s or 5m", c.MACAging)
		}
		if d < time.Second || d > 1_000_000*time.Second {
			return bad("mac_aging", "%v is out of range; use 1s..1000000s (default 300s)", d)
		}
		c.aging = d
	}
	if c.MetricsListen != "" {
		_, port, err := net.SplitHostPort(c.MetricsListen)
		if err != nil {
			return bad("metrics_listen", "%q is not host:port (e.g. \"127.0.0.1:9100\"); use \"\" to disable", c.MetricsListen)
		}
		if _, err := strconv.ParseUint(port, 10, 16); port != "" && err != nil {
			// Listen found that out only at start-up (":99999").
			return bad("metrics_listen", "%q: port %q is not a number 0..65535", c.MetricsListen, port)
		}
	}
	if c.ControlListen != "" && !filepath.IsAbs(c.ControlListen) {
		return bad("control_listen", "%q must be an absolute path of a unix socket (e.g. /run/prismd/prismd.sock); use \"\" to disable", c.ControlListen)
	}
	c.amSources = nil
	for i, s := range c.AMSources {
		m, err := parseUnicastMAC(s)
		if err != nil {
			return bad(fmt.Sprintf("am_sources[%d]", i), "%v", err)
		}
		c.amSources = append(c.amSources, m)
	}
	return nil
}

// NodeMACAddr returns the parsed node MAC, or nil.
func (c *Config) NodeMACAddr() *[6]byte { return c.nodeMAC }

// Aging returns the parsed MAC aging time.
func (c *Config) Aging() time.Duration { return c.aging }

// AMSourceMACs returns the parsed am_sources.
func (c *Config) AMSourceMACs() [][6]byte { return c.amSources }

// maxMACTableSize bounds mac_table_size: 4M stations are 8M slots of 16
// bytes, 128 MiB, allocated at start and at every flush.
const maxMACTableSize = 1 << 22

// MACTableSlots is dataplane.Options.MACTableSize for mac_table_size: the
// table keeps itself at most half full, so twice the stations (0 keeps
// the default).
func (c *Config) MACTableSlots() int { return 2 * c.MACTableSize }

// PlainKulischPartials reports whether exact partials must be sent as plain
// KULISCH values (kulisch_partials: plain).
func (c *Config) PlainKulischPartials() bool { return c.KulischPartials == "plain" }

// CompactKulischPartials reports whether exact partials must never be sent
// as KULISCH_F64 (kulisch_partials: scaled).
func (c *Config) CompactKulischPartials() bool { return c.KulischPartials == "scaled" }

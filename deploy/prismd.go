// This file owns what a lab tells prismd: the generated configuration and
// where the binary is found. The schema belongs to cmd/prismd; this is a
// producer of it and must follow it field for field.

package deploy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// MetricsAddr is where every lab prismd serves /metrics. Each switch has its
// own namespace, hence its own loopback, so one fixed address serves all.
const MetricsAddr = "127.0.0.1:9100"

// PrismdPort is one port in a prismd configuration.
type PrismdPort struct {
	Name string `yaml:"name"`
	MTU  int    `yaml:"mtu"`
	// Backend and XDPMode are the node's (Node.Backend, Node.XDPMode), on
	// every port; omitted when the topology leaves prismd's default.
	Backend string `yaml:"backend,omitempty"`
	XDPMode string `yaml:"xdp_mode,omitempty"`
	// Fault is the node's (Node.Fault) with this port's seeds (PortSeed).
	Fault *Fault `yaml:"fault,omitempty"`
}

// PrismdConfig is the configuration file a lab writes for each prismd node,
// in the daemon's schema (field order as the daemon documents it).
type PrismdConfig struct {
	NodeMAC       string       `yaml:"node_mac"`
	Ports         []PrismdPort `yaml:"ports"`
	Workers       int          `yaml:"workers"`
	MACAging      string       `yaml:"mac_aging"`
	MetricsListen string       `yaml:"metrics_listen"`
	ControlListen string       `yaml:"control_listen"`
	AMSources     []string     `yaml:"am_sources"`
	// KulischPartials is the node's (Node.KulischPartials); omitted when
	// the topology leaves prismd's default (f64).
	KulischPartials string `yaml:"kulisch_partials,omitempty"`
}

// NewPrismdConfig returns the configuration of prismd node node when the
// lab's state directory is labDir: node MAC MAC(lab, node, "node"), ports in
// PortIndex order, each with the node's backend and xdp_mode, the control
// socket in labDir, every host interface MAC as an allowed Aggregation
// Manager source (any host may run the AM), and the node's kulisch_partials.
func NewPrismdConfig(t *Topology, node, labDir string) (*PrismdConfig, error) {
	n, ok := t.Nodes[node]
	if !ok || n.Kind != KindPrismd {
		return nil, fmt.Errorf("deploy: %q is not a prismd node of lab %s", node, t.Name)
	}
	c := &PrismdConfig{
		NodeMAC:         HardwareAddr(t.MAC(node, NodeMACIface)).String(),
		Workers:         1,
		MACAging:        "300s",
		MetricsListen:   MetricsAddr,
		ControlListen:   filepath.Join(labDir, node+".sock"),
		AMSources:       []string{},
		KulischPartials: n.KulischPartials,
	}
	for i, a := range t.Neighbors(node) {
		c.Ports = append(c.Ports, PrismdPort{Name: a.Iface, MTU: a.MTU, Backend: n.Backend, XDPMode: n.XDPMode, Fault: portFault(n, i)})
	}
	for _, m := range t.HostMACs() {
		c.AMSources = append(c.AMSources, HardwareAddr(m).String())
	}
	// sun_path is 108 bytes including the NUL; a longer path would fail in
	// prismd's bind with a message that does not mention the state directory.
	if len(c.ControlListen) > 107 {
		return nil, fmt.Errorf("deploy: control socket path %s is longer than 107 bytes; use a shorter state directory", c.ControlListen)
	}
	return c, nil
}

// portFault is node n's fault for its port index port: the same
// impairment on every port, each with seeds of its own.
func portFault(n *Node, port int) *Fault {
	if n.Fault == nil {
		return nil
	}
	f := &Fault{}
	if in := n.Fault.Ingress; in != nil {
		c := *in
		c.Seed = PortSeed(n.Name, in.Seed, port)
		f.Ingress = &c
	}
	if e := n.Fault.Egress; e != nil {
		c := *e
		c.Seed = PortSeed(n.Name, e.Seed, port) ^ 0x5bd1e995 // not the ingress draws again
		f.Egress = &c
	}
	return f
}

// Marshal renders the configuration as YAML.
func (c *PrismdConfig) Marshal() ([]byte, error) { return yaml.Marshal(c) }

// ErrNoPrismd is returned when a lab with prismd nodes cannot find the binary.
var ErrNoPrismd = errors.New("prismd binary not found")

// FindPrismd locates bin/prismd: $PRISMD_BIN (the binary, or a directory
// holding it, as the Makefile sets it), then next to the running executable
// (bin/prismctl beside bin/prismd), then $PATH.
func FindPrismd() (string, error) {
	isExe := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
	}
	if env := os.Getenv("PRISMD_BIN"); env != "" {
		for _, p := range []string{env, filepath.Join(env, "prismd")} {
			if isExe(p) {
				return filepath.Abs(p)
			}
		}
	}
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "prismd"); isExe(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("prismd"); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("deploy: %w: build it (make build, or go build -o bin/ ./cmd/prismd), then pass its path (--prismd or Options.Prismd) or set PRISMD_BIN", ErrNoPrismd)
}

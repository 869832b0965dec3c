// This file owns the description of a bitmap job (JobSpec), its validation
// and its defaults.

package bitmapam

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

// Kind is the use case of a job. The zero value is invalid.
type Kind uint8

const (
	// AllReduce (bitmap-framework section 3): workers aggregate toward a
	// root host (the parameter server role) over a VAT of switches with
	// pre-configured A-BMs; the root multicasts the result.
	AllReduce Kind = iota + 1
	// Multicast (section 5): a source multicasts to receivers; ACKs are
	// aggregated over the reverse of the multicast tree against
	// pre-configured A-BMs (or not at all with NoAggregation).
	Multicast
	// MoE (section 4): every source host multicasts tokens to experts with
	// INSTALL; the combine tree is the reverse, self-installed. One operation
	// per source host.
	MoE
)

func (k Kind) String() string {
	switch k {
	case AllReduce:
		return "allreduce"
	case Multicast:
		return "multicast"
	case MoE:
		return "moe"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Endpoint is one bit position of the job and the host it lives on.
type Endpoint struct {
	ID   int    `json:"id"`
	Host string `json:"host"`
}

// JobSpec describes one bitmap job. Every participant computes the same Plan
// from the same JobSpec and topology.
type JobSpec struct {
	Kind Kind `json:"kind"`
	// Op is the operation identity. For MoE it is the identity of the first
	// source's operation; source i uses Operation ID Op.Op + i.
	Op parser.OpKey `json:"op"`
	// Tenant is written into every context (offset 36) and every extension.
	Tenant uint32 `json:"tenant"`
	// Endpoints are the job's bit positions: workers (AllReduce), receivers
	// (Multicast) or experts (MoE). IDs are distinct and below Bits.
	Endpoints []Endpoint `json:"endpoints"`
	// Root is the AllReduce root host (it adds its own endpoints locally and
	// multicasts the result) or the Multicast source host.
	Root string `json:"root,omitempty"`
	// Sources are the MoE token source hosts (nil = every host that has an
	// expert).
	Sources []string `json:"sources,omitempty"`
	// Bits is the job's bit space (0 = the largest ID + 1, rounded up to 64).
	Bits int `json:"bits,omitempty"`
	// NoAggregation (Multicast) registers no A-BM, so every receiver's ACK
	// reaches the source individually: the comparison point of
	// bitmap-framework section 5.
	NoAggregation bool `json:"no_aggregation,omitempty"`
	// Aggregators (AllReduce) restricts the VAT to these switches (the VAT
	// root always aggregates); nil means every merge point. The
	// dissemination tree is computed from the physical topology regardless,
	// so with a restricted VAT the two trees differ.
	Aggregators []string `json:"aggregators,omitempty"`
	// ActiveK is K for the encoding chooser: the most endpoints one set
	// carries (0 = all endpoints; MoE: top-K).
	ActiveK int `json:"active_k,omitempty"`
	// MaxBodyBytes is the header budget of one endpoint-set body (0 =
	// bitmapfwd.DefaultMaxBodyBytes).
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`

	// VectorLen is the operation's vector length in elements (required).
	VectorLen uint32 `json:"vector_len"`
	// MTU is 576, 1500 or 9000 (0 = 1500).
	MTU int `json:"mtu,omitempty"`
	// TimeoutMS is the context Timeout: the PARTIAL deadline and the soft
	// state lifetime (0 = 200 ms; bitmap-framework section 8 asks for short
	// completion timeouts).
	TimeoutMS uint32 `json:"timeout_ms,omitempty"`
	// MaxTerms is N (0 = the number of endpoints, MoE: ActiveK).
	MaxTerms uint32 `json:"max_terms,omitempty"`
}

// ErrSpec is wrapped by every JobSpec validation error.
var ErrSpec = errors.New("bitmapam: invalid job")

// Defaults for JobSpec fields left zero.
const (
	DefaultTimeoutMS = 200
	// DefaultIntervals is also the bound on INSTALL soft state per context
	// (docs/protocol.md 8.8): enough windows/tokens in flight for a host to
	// keep a link busy, and well under the 1024 prismd advertises.
	DefaultIntervals = 512
)

func (s *JobSpec) mtu() int {
	if s.MTU == 0 {
		return parser.MTUDefault
	}
	return s.MTU
}

func (s *JobSpec) timeout() uint32 {
	if s.TimeoutMS == 0 {
		return DefaultTimeoutMS
	}
	return s.TimeoutMS
}

// BitSpace is the job's bit-space capacity.
func (s *JobSpec) BitSpace() int {
	if s.Bits > 0 {
		return s.Bits
	}
	mx := 0
	for _, e := range s.Endpoints {
		mx = max(mx, e.ID+1)
	}
	return max(64, (mx+63)&^63)
}

func (s *JobSpec) activeK() int {
	if s.ActiveK > 0 {
		return s.ActiveK
	}
	return len(s.Endpoints)
}

func (s *JobSpec) maxTerms() uint32 {
	if s.MaxTerms > 0 {
		return s.MaxTerms
	}
	if s.Kind == MoE {
		return uint32(max(1, s.activeK()))
	}
	return uint32(max(1, len(s.Endpoints)))
}

// Validate checks the spec against the topology.
func (s *JobSpec) Validate(topo *deploy.Topology) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrSpec, fmt.Sprintf(format, a...))
	}
	if s.Kind < AllReduce || s.Kind > MoE {
		return bad("kind %d is not allreduce, multicast or moe", s.Kind)
	}
	if len(s.Endpoints) == 0 {
		return bad("no endpoints")
	}
	if s.VectorLen == 0 {
		return bad("vector length 0")
	}
	if !parser.IsDefinedMTU(s.mtu()) {
		return bad("MTU %d is not 576, 1500 or 9000", s.mtu())
	}
	bits := s.BitSpace()
	if bits > bitmapfwd.MaxBits {
		return bad("bit space %d above %d", bits, bitmapfwd.MaxBits)
	}
	seen := map[int]bool{}
	for _, e := range s.Endpoints {
		if e.ID < 0 || e.ID >= bits {
			return bad("endpoint %d outside the bit space 0..%d", e.ID, bits-1)
		}
		if seen[e.ID] {
			return bad("endpoint %d assigned twice", e.ID)
		}
		seen[e.ID] = true
		if err := isHost(topo, e.Host); err != nil {
			return bad("endpoint %d: %v", e.ID, err)
		}
	}
	switch s.Kind {
	case AllReduce, Multicast:
		if err := isHost(topo, s.Root); err != nil {
			return bad("root: %v", err)
		}
		if s.Kind == Multicast {
			for _, e := range s.Endpoints {
				if e.Host == s.Root {
					return bad("receiver %d is on the source host %s", e.ID, s.Root)
				}
			}
		}
	case MoE:
		for _, h := range s.sources() {
			if err := isHost(topo, h); err != nil {
				return bad("source: %v", err)
			}
		}
		if int(s.Op.Op)+len(s.sources()) > 0xFFFF {
			return bad("operation IDs %d.. overflow for %d sources", s.Op.Op, len(s.sources()))
		}
	}
	for _, a := range s.Aggregators {
		n, ok := topo.Nodes[a]
		if !ok || n.Kind != deploy.KindPrismd {
			return bad("aggregator %q is not a prismd switch", a)
		}
	}
	return nil
}

// sources lists the MoE source hosts, sorted.
func (s *JobSpec) sources() []string {
	if len(s.Sources) > 0 {
		r := append([]string(nil), s.Sources...)
		sort.Strings(r)
		return r
	}
	m := map[string]bool{}
	for _, e := range s.Endpoints {
		m[e.Host] = true
	}
	r := make([]string, 0, len(m))
	for h := range m {
		r = append(r, h)
	}
	sort.Strings(r)
	return r
}

func isHost(topo *deploy.Topology, h string) error {
	n, ok := topo.Nodes[h]
	if !ok {
		return fmt.Errorf("node %q is not in topology %s (hosts: %s)", h, topo.Name, strings.Join(topo.Hosts(), ", "))
	}
	if n.Kind != deploy.KindHost {
		return fmt.Errorf("node %q is a %v, not a host", h, n.Kind)
	}
	return nil
}

// HostEndpoints assigns perHost consecutive endpoint IDs to each host in
// order: hosts[0] gets 0..perHost-1, hosts[1] the next perHost, and so on.
func HostEndpoints(hosts []string, perHost int) []Endpoint {
	var r []Endpoint
	for i, h := range hosts {
		for j := 0; j < perHost; j++ {
			r = append(r, Endpoint{ID: i*perHost + j, Host: h})
		}
	}
	return r
}

// contextFor is the STAGE context record of every node of op.
func (s *JobSpec) contextFor(role parser.Role) parser.ContextRecord {
	in, out := parser.FormatFP32, parser.FormatFP32
	if s.Kind == Multicast {
		// File bytes travel as INT8 values: any bit pattern is admitted
		// and nothing is added (ACKs have no payload).
		in, out = parser.FormatINT8, parser.FormatINT8
	}
	mtu := s.mtu()
	n := s.maxTerms()
	elems := uint32(parser.MaxPacketElements(mtu)) * 64
	return parser.ContextRecord{
		Role: role, Collective: parser.CollBitmap, InputFormat: in, AccPolicy: parser.AccKulischFixed,
		PartialPolicy: parser.FormatAuto, OutputFormat: out, KulischWidth: uint16(am.KulischWidthFor(int(n))),
		VectorLen: s.VectorLen, MTU: uint16(mtu), WindowIntervals: DefaultIntervals, ReplayDepth: 64,
		WindowBytes: uint32(64 * mtu), WindowElements: elems, MaxTerms: n, TimeoutMs: s.timeout(), Tenant: s.Tenant,
	}
}

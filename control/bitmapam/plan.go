// This file owns planning: the trees of a bitmap job, the bindings of every
// switch (with endpoints and streams unique within the operation), the A-BMs
// and BIFT masks, and the host view of every binding.

package bitmapam

import (
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

// Link is one binding seen from a host: the values the host writes when it
// sends on it, or checks when it receives on it.
type Link struct {
	Stream uint16 `json:"stream"`
	// SrcEP and DstEP are the frame's Source and Destination Endpoint.
	SrcEP uint16 `json:"src_ep"`
	DstEP uint16 `json:"dst_ep"`
	// Peer is the switch port MAC: the destination MAC when sending, the
	// source MAC when receiving.
	Peer net.HardwareAddr `json:"peer"`
	// PeerName is the switch (for messages).
	PeerName string `json:"peer_name"`
}

// HostPlan is what one host needs to take part in one operation.
type HostPlan struct {
	Host  string           `json:"host"`
	Iface string           `json:"iface"`
	MAC   net.HardwareAddr `json:"mac"`
	// Endpoints are the job's endpoint IDs on this host, ascending.
	Endpoints []int `json:"endpoints"`
	// Up carries DATA toward the root: AllReduce contributions, reliable
	// multicast ACKs, MoE expert outputs. Nil when the host has none.
	Up *Link `json:"up,omitempty"`
	// Down is where RESULT arrives: the AllReduce result, file data, tokens.
	Down *Link `json:"down,omitempty"`
	// RootIn (root / source host only) is where merged DATA arrives.
	RootIn *Link `json:"root_in,omitempty"`
	// RootOut (root / source host only) is where the host sends RESULT.
	RootOut *Link `json:"root_out,omitempty"`
}

// SwitchPlan is one switch's STAGE.
type SwitchPlan struct {
	Name string
	// MAC is the node MAC CONTROL is addressed to.
	MAC      net.HardwareAddr
	Context  parser.ContextRecord
	Bindings []parser.Binding
	// Peers names each binding's peer (a host or a switch), for messages.
	Peers []string
	// ABM is the node's A-BM (nil: no pre-configured aggregation).
	ABM *bitmapfwd.Set
	// Masks maps a RESULT_OUT binding index to its BIFT mask.
	Masks map[int]*bitmapfwd.Set
	// Dissemination reports whether the node replicates RESULT, VAT whether
	// it aggregates on a pre-configured tree.
	Dissemination, VAT bool
}

// OpPlan is the plan of one operation (one per source for MoE).
type OpPlan struct {
	Op   parser.OpKey
	Root string // the root host (AllReduce root, multicast or token source)
	// Switches in a deterministic order (by name).
	Switches []*SwitchPlan
	// Hosts by name; the root host included.
	Hosts map[string]*HostPlan
}

// Switch returns the plan of one switch, or nil.
func (o *OpPlan) Switch(name string) *SwitchPlan {
	for _, s := range o.Switches {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Plan is a job's registration: its encoding and every operation's plan.
type Plan struct {
	Spec   JobSpec
	Bits   int
	Choice bitmapfwd.Choice
	Ops    []*OpPlan
}

// OpFor returns the operation whose root is host (MoE: the source's
// operation), or nil.
func (p *Plan) OpFor(root string) *OpPlan {
	for _, o := range p.Ops {
		if o.Root == root {
			return o
		}
	}
	return nil
}

// Compute plans spec on topo.
func Compute(topo *deploy.Topology, spec JobSpec) (*Plan, error) {
	if err := spec.Validate(topo); err != nil {
		return nil, err
	}
	bits := spec.BitSpace()
	ch, err := bitmapfwd.Choose(bitmapfwd.ChooseInput{Domain: bits, Active: max(1, spec.activeK()), MaxBodyBytes: spec.MaxBodyBytes})
	if err != nil {
		return nil, fmt.Errorf("%w: encoding: %v", ErrSpec, err)
	}
	p := &Plan{Spec: spec, Bits: bits, Choice: ch}
	switch spec.Kind {
	case AllReduce:
		op, err := planAllReduce(topo, &spec, bits)
		if err != nil {
			return nil, err
		}
		p.Ops = []*OpPlan{op}
	case Multicast:
		b := newBuilder(topo, &spec, bits, spec.Op, spec.Root)
		if err := b.sourceTree(spec.Endpoints, true, !spec.NoAggregation); err != nil {
			return nil, err
		}
		p.Ops = []*OpPlan{b.finish()}
	case MoE:
		for i, src := range spec.sources() {
			op := spec.Op
			op.Op += uint16(i)
			var experts []Endpoint
			for _, e := range spec.Endpoints {
				// Experts on the source host are served locally: a bit
				// routed back out of the ingress port would loop.
				if e.Host != src {
					experts = append(experts, e)
				}
			}
			b := newBuilder(topo, &spec, bits, op, src)
			if len(experts) > 0 {
				if err := b.sourceTree(experts, true, false); err != nil {
					return nil, err
				}
			}
			o := b.finish()
			// Every host learns its endpoints even if no switch serves it.
			for _, e := range spec.Endpoints {
				if e.Host == src {
					h := b.host(src)
					h.Endpoints = appendUnique(h.Endpoints, e.ID)
				}
			}
			p.Ops = append(p.Ops, o)
		}
	}
	for _, o := range p.Ops {
		for _, s := range o.Switches {
			if len(s.Bindings) > parser.MaxBindings {
				return nil, fmt.Errorf("%w: switch %s needs %d bindings, more than %d", ErrSpec, s.Name, len(s.Bindings), parser.MaxBindings)
			}
		}
	}
	if err := p.checkUpFrames(); err != nil {
		return nil, err
	}
	return p, nil
}

// upFrameLen is the size, after the Ethernet header, of the smallest DATA a
// switch with A-BM abm sends up when its aggregation completes: the P-BM is
// the A-BM in its STAGE encoding (engine/bitmap keeps that encoding), plus
// one partial value when the job carries values (AllReduce; ACKs have none).
// Without AUTH: the key is a runtime matter, and a tag adds 16 bytes.
func (p *Plan) upFrameLen(s *SwitchPlan, abm *bitmapfwd.Set) (int, error) {
	_, body, err := EncodeRecord(abm, p.Choice.Params, int(s.Context.MaxTerms))
	if err != nil {
		return 0, fmt.Errorf("switch %s: A-BM: %w", s.Name, err)
	}
	n := parser.CWLen + parser.DataHdrLen + parser.ExtHdrLen + len(body)
	if p.Spec.Kind == AllReduce {
		// Partial policy AUTO under KULISCH_FIXED: an exact sum is, in
		// general, one Kulisch value of the context's width.
		n += parser.GroupDescLen + 1 + int(s.Context.KulischWidth)/8
	}
	return n, nil
}

// checkUpFrames refuses a plan in which a switch could never send its
// merged partial: a dense A-BM grows with the endpoints below the switch
// (8 KiB for 65536), and the P-BM of what the switch sends up is that A-BM.
// It names the worst switch. Domain boundaries (docs/protocol.md 8.10) are
// the remedy: a boundary node sends up its one-endpoint boundary set
// instead, so the frames above it stay small whatever the job's size. This
// planner does not place boundaries yet.
func (p *Plan) checkUpFrames() error {
	var worst *SwitchPlan
	n := 0
	for _, o := range p.Ops {
		for _, s := range o.Switches {
			if s.ABM == nil || s.ABM.IsEmpty() {
				continue
			}
			m, err := p.upFrameLen(s, s.ABM)
			if err != nil {
				return err
			}
			if m > n {
				worst, n = s, m
			}
		}
	}
	mtu := p.Spec.mtu()
	if n <= mtu {
		return nil
	}
	what := "merged partial (with one value)"
	if p.Spec.Kind != AllReduce {
		what = "merged ACK"
	}
	remedy := "split the job into aggregation domains whose roots are domain boundaries (docs/protocol.md 8.10), each sending up " +
		"one boundary endpoint instead of its A-BM"
	if mtu < parser.MTUJumbo && n <= parser.MTUJumbo {
		remedy += ", or use MTU 9000"
	}
	return fmt.Errorf("%w: job of %d endpoints at MTU %d: switch %s aggregates %d of them, so the %s it sends up carries that A-BM "+
		"and takes %d bytes, more than the MTU; %s", ErrSpec, len(p.Spec.Endpoints), mtu, worst.Name, worst.ABM.Count(), what, n, remedy)
}

func appendUnique(s []int, v int) []int {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	s = append(s, v)
	sort.Ints(s)
	return s
}

// builder accumulates one operation's plan.
type builder struct {
	topo       *deploy.Topology
	spec       *JobSpec
	bits       int
	op         *OpPlan
	sw         map[string]*SwitchPlan
	nextEP     uint16
	nextStream uint16
}

func newBuilder(topo *deploy.Topology, spec *JobSpec, bits int, op parser.OpKey, root string) *builder {
	b := &builder{topo: topo, spec: spec, bits: bits, sw: map[string]*SwitchPlan{}, nextEP: 1, nextStream: 1,
		op: &OpPlan{Op: op, Root: root, Hosts: map[string]*HostPlan{}}}
	b.host(root)
	return b
}

func (b *builder) ep() uint16     { b.nextEP++; return b.nextEP - 1 }
func (b *builder) stream() uint16 { b.nextStream++; return b.nextStream - 1 }

func (b *builder) mac(node, iface string) net.HardwareAddr {
	m := b.topo.MAC(node, iface)
	return net.HardwareAddr(m[:])
}

func (b *builder) isSwitch(n string) bool { return b.topo.Nodes[n].Kind == deploy.KindPrismd }

func (b *builder) switchPlan(name string) *SwitchPlan {
	s := b.sw[name]
	if s == nil {
		s = &SwitchPlan{Name: name, MAC: b.mac(name, deploy.NodeMACIface), Masks: map[int]*bitmapfwd.Set{}}
		b.sw[name] = s
	}
	return s
}

func (b *builder) host(name string) *HostPlan {
	h := b.op.Hosts[name]
	if h == nil {
		ifc := b.topo.Nodes[name].Ifaces[0]
		h = &HostPlan{Host: name, Iface: ifc, MAC: b.mac(name, ifc)}
		b.op.Hosts[name] = h
	}
	return h
}

func (b *builder) addBinding(s *SwitchPlan, bd parser.Binding, peer string) int {
	s.Bindings = append(s.Bindings, bd)
	s.Peers = append(s.Peers, peer)
	return len(s.Bindings) - 1
}

// hop is how a BFS reached a node: from parent, leaving this node by out
// toward the parent and arriving at the parent on in.
type hop struct {
	parent  string
	out, in string
}

// bfsFrom runs a breadth-first search from src over switches (hosts are
// reached but never transited), neighbours in port order, as am.BuildTree
// and deploy.Path do: a deterministic shortest-path tree.
func bfsFrom(topo *deploy.Topology, src string) map[string]hop {
	prev := map[string]hop{src: {}}
	q := []string{src}
	for len(q) > 0 {
		cur := q[0]
		q = q[1:]
		if cur != src && !topo.Nodes[cur].Kind.IsSwitch() {
			continue
		}
		for _, a := range topo.Neighbors(cur) {
			if _, ok := prev[a.Peer.Node]; ok {
				continue
			}
			prev[a.Peer.Node] = hop{parent: cur, out: a.Peer.Iface, in: a.Iface}
			q = append(q, a.Peer.Node)
		}
	}
	return prev
}

// edgeKey names a logical edge upper -> lower of a source tree.
type edgeKey struct{ upper, lower string }

type treeEdge struct {
	upperIface, lowerIface   string
	stream, upperEP, lowerEP uint16
	outIdx                   int // upper's RESULT_OUT binding (switch upper)
}

// sourceTree plans the multicast tree from the builder's root host to the
// hosts of eps (the dissemination tree) and, when up, the reverse
// aggregation direction on the same edges (CONTRIBUTOR at the upper node,
// PARENT at the lower one, mirroring the RESULT bindings: same stream and
// endpoints, so a receiver answers on the mirror of what it received). With
// abm every switch is registered with the A-BM of the endpoints below it.
func (b *builder) sourceTree(eps []Endpoint, up, abm bool) error {
	root := b.op.Root
	prev := bfsFrom(b.topo, root)
	byHost := map[string][]int{}
	for _, e := range eps {
		byHost[e.Host] = append(byHost[e.Host], e.ID)
	}
	hosts := make([]string, 0, len(byHost))
	for h := range byHost {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	edges := map[edgeKey]*treeEdge{}
	for _, h := range hosts {
		if _, ok := prev[h]; !ok || h == root {
			return fmt.Errorf("%w: host %s is not reachable from %s through switches", ErrSpec, h, root)
		}
		// Logical nodes on the path h -> root: the endpoints and the prismd
		// switches (bridges forward frames they are not addressed by).
		lower, lowerIface := h, prev[h].out
		sawSwitch := false
		for x := h; x != root; {
			hp := prev[x]
			upper := hp.parent
			if upper != root && !b.isSwitch(upper) {
				x = upper // a bridge: transparent
				continue
			}
			if upper == root && !sawSwitch {
				return fmt.Errorf("%w: no prismd switch between %s and %s", ErrSpec, root, h)
			}
			sawSwitch = true
			k := edgeKey{upper, lower}
			e := edges[k]
			if e == nil {
				e = &treeEdge{upperIface: hp.in, lowerIface: lowerIface, stream: b.stream(), upperEP: b.ep(), lowerEP: b.ep(), outIdx: -1}
				edges[k] = e
				b.wireEdge(k, e, up)
			}
			if e.outIdx >= 0 {
				s := b.sw[upper]
				m := s.Masks[e.outIdx]
				for _, id := range byHost[h] {
					m.Add(id)
				}
				if abm {
					if s.ABM == nil {
						s.ABM = bitmapfwd.NewSet(b.bits)
					}
					for _, id := range byHost[h] {
						s.ABM.Add(id)
					}
				}
			}
			if upper == root {
				break
			}
			lower, lowerIface = upper, prev[upper].out
			x = upper
		}
		hp := b.host(h)
		for _, id := range byHost[h] {
			hp.Endpoints = appendUnique(hp.Endpoints, id)
		}
	}
	return nil
}

// wireEdge creates the bindings of one source-tree edge.
func (b *builder) wireEdge(k edgeKey, e *treeEdge, up bool) {
	upperMAC, lowerMAC := b.mac(k.upper, e.upperIface), b.mac(k.lower, e.lowerIface)
	if b.isSwitch(k.upper) {
		s := b.switchPlan(k.upper)
		s.Dissemination = true
		var fl uint8
		if !b.isSwitch(k.lower) {
			fl = parser.BindingFlagRank
		}
		port := uint16(deploy.PortIndex(b.topo, k.upper, e.upperIface))
		bd := parser.Binding{Kind: parser.KindResultOut, Flags: fl, Stream: e.stream, LocalEP: e.upperEP, PeerEP: e.lowerEP, Port: port}
		copy(bd.PeerMAC[:], lowerMAC)
		e.outIdx = b.addBinding(s, bd, k.lower)
		s.Masks[e.outIdx] = bitmapfwd.NewSet(b.bits)
		if up {
			bd.Kind = parser.KindContributor
			b.addBinding(s, bd, k.lower)
		}
	} else {
		// The root host.
		h := b.host(k.upper)
		h.RootOut = &Link{Stream: e.stream, SrcEP: e.upperEP, DstEP: e.lowerEP, Peer: lowerMAC, PeerName: k.lower}
		if up {
			h.RootIn = &Link{Stream: e.stream, SrcEP: e.lowerEP, DstEP: e.upperEP, Peer: lowerMAC, PeerName: k.lower}
		}
	}
	if b.isSwitch(k.lower) {
		s := b.switchPlan(k.lower)
		s.Dissemination = true
		var fl uint8
		if !b.isSwitch(k.upper) {
			fl = parser.BindingFlagRank
		}
		port := uint16(deploy.PortIndex(b.topo, k.lower, e.lowerIface))
		bd := parser.Binding{Kind: parser.KindResultIn, Flags: fl, Stream: e.stream, LocalEP: e.lowerEP, PeerEP: e.upperEP, Port: port}
		copy(bd.PeerMAC[:], upperMAC)
		b.addBinding(s, bd, k.upper)
		if up {
			bd.Kind = parser.KindParent
			b.addBinding(s, bd, k.upper)
		}
	} else {
		h := b.host(k.lower)
		h.Down = &Link{Stream: e.stream, SrcEP: e.upperEP, DstEP: e.lowerEP, Peer: upperMAC, PeerName: k.upper}
		if up {
			h.Up = &Link{Stream: e.stream, SrcEP: e.lowerEP, DstEP: e.upperEP, Peer: upperMAC, PeerName: k.upper}
		}
	}
}

// finish assigns roles and contexts and returns the operation's plan.
func (b *builder) finish() *OpPlan {
	names := make([]string, 0, len(b.sw))
	for n := range b.sw {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := b.sw[n]
		hasParent, switchChild := false, false
		for i, bd := range s.Bindings {
			switch bd.Kind {
			case parser.KindParent, parser.KindResultIn:
				// A parent in either tree: the VAT parent, or the
				// multicast parent of a dissemination-only node.
				hasParent = true
			case parser.KindContributor, parser.KindResultOut:
				if b.isSwitch(s.Peers[i]) {
					switchChild = true
				}
			}
		}
		role := parser.RoleLeaf
		switch {
		case !hasParent && switchChild:
			role = parser.RoleRoot
		case switchChild:
			role = parser.RoleInternal
		}
		s.Context = b.spec.contextFor(role)
		b.op.Switches = append(b.op.Switches, s)
	}
	// A node waits one base timeout longer than the slowest node below it,
	// so a PARTIAL from below reaches it before its own timer fires and the
	// root sees one PARTIAL naming exactly the missing endpoints, not a
	// cascade of partial partials.
	height := map[string]int{}
	var h func(n string) int
	h = func(n string) int {
		if v, ok := height[n]; ok {
			return v
		}
		height[n] = 0 // cycle guard; trees have none
		best := 0
		s := b.sw[n]
		for i, bd := range s.Bindings {
			if bd.Kind == parser.KindContributor && b.isSwitch(s.Peers[i]) {
				best = max(best, h(s.Peers[i])+1)
			}
		}
		height[n] = best
		return best
	}
	for _, s := range b.op.Switches {
		s.Context.TimeoutMs = min(600000, b.spec.timeout()*uint32(1+h(s.Name)))
	}
	return b.op
}

// MaxTimeout is the longest context Timeout of any switch of the plan: the
// longest a PARTIAL can take to reach a root.
func (p *Plan) MaxTimeout() time.Duration {
	t := time.Duration(p.Spec.timeout()) * time.Millisecond
	for _, o := range p.Ops {
		for _, s := range o.Switches {
			t = max(t, time.Duration(s.Context.TimeoutMs)*time.Millisecond)
		}
	}
	return t
}

// BaseTimeout is the job's base context Timeout (the leaves').
func (p *Plan) BaseTimeout() time.Duration {
	return time.Duration(p.Spec.timeout()) * time.Millisecond
}

// planAllReduce plans the VAT (aggregation toward the root host over
// switches chosen by am.BuildTree, optionally restricted to Aggregators) and,
// separately, the dissemination tree from the root host.
func planAllReduce(topo *deploy.Topology, spec *JobSpec, bits int) (*OpPlan, error) {
	b := newBuilder(topo, spec, bits, spec.Op, spec.Root)
	root := b.host(spec.Root)
	var remote []Endpoint
	byHost := map[string][]int{}
	var hosts []string
	for _, e := range spec.Endpoints {
		if e.Host == spec.Root {
			root.Endpoints = appendUnique(root.Endpoints, e.ID)
			continue
		}
		remote = append(remote, e)
		if byHost[e.Host] == nil {
			hosts = append(hosts, e.Host)
		}
		byHost[e.Host] = append(byHost[e.Host], e.ID)
	}
	if len(remote) == 0 {
		return b.finish(), nil
	}
	sort.Strings(hosts)
	// Dissemination first: RESULT from the root host to every worker host.
	if err := b.sourceTree(remote, false, false); err != nil {
		return nil, err
	}
	// The VAT.
	rh := make([]am.RankHost, len(hosts))
	for i, h := range hosts {
		rh[i] = am.RankHost{Node: h}
	}
	tree, err := am.BuildTree(topo, rh)
	if err != nil {
		return nil, fmt.Errorf("%w: VAT: %v", ErrSpec, err)
	}
	keep := map[string]bool{tree.Root: true}
	for _, n := range tree.Nodes {
		keep[n.Name] = spec.Aggregators == nil || keep[n.Name]
	}
	for _, a := range spec.Aggregators {
		if tree.Node(a) != nil {
			keep[a] = true
		}
	}
	// up returns the nearest kept node at or above n.
	var up func(n string) string
	up = func(n string) string {
		for !keep[n] {
			n = tree.Node(n).Parent.Parent
		}
		return n
	}
	// abm[n] is the set below VAT node n.
	abm := map[string]*bitmapfwd.Set{}
	addBelow := func(n string, ids []int) {
		for x := n; ; {
			if keep[x] {
				if abm[x] == nil {
					abm[x] = bitmapfwd.NewSet(bits)
				}
				for _, id := range ids {
					abm[x].Add(id)
				}
			}
			tn := tree.Node(x)
			if tn.Parent == nil {
				return
			}
			x = tn.Parent.Parent
		}
	}
	// edge resolves the physical path lower -> upper into ports and MACs.
	edge := func(lower, upper string) (lowerIface, upperIface string, err error) {
		hops, err := topo.Path(lower, upper)
		if err != nil {
			return "", "", fmt.Errorf("%w: VAT edge %s -> %s: %v", ErrSpec, lower, upper, err)
		}
		return hops[0].Out, hops[len(hops)-1].In, nil
	}
	// Workers to their aggregator.
	for r, h := range hosts {
		agg := up(tree.Ranks[r].Leaf)
		li, ui, err := edge(h, agg)
		if err != nil {
			return nil, err
		}
		s := b.switchPlan(agg)
		s.VAT = true
		st, local, peer := b.stream(), b.ep(), b.ep()
		bd := parser.Binding{Kind: parser.KindContributor, Flags: parser.BindingFlagRank, Stream: st, LocalEP: local, PeerEP: peer,
			Port: uint16(deploy.PortIndex(topo, agg, ui))}
		copy(bd.PeerMAC[:], b.mac(h, li))
		b.addBinding(s, bd, h)
		hp := b.host(h)
		hp.Up = &Link{Stream: st, SrcEP: peer, DstEP: local, Peer: b.mac(agg, ui), PeerName: agg}
		addBelow(agg, byHost[h])
	}
	// Switch edges of the VAT, and the VAT root's PARENT toward the root
	// host (the parameter server role).
	for _, n := range tree.Nodes {
		if !keep[n.Name] {
			continue
		}
		child := b.switchPlan(n.Name)
		child.VAT = true
		var upper string
		rank := uint8(0)
		if n.Parent == nil {
			upper, rank = spec.Root, parser.BindingFlagRank
		} else {
			upper = up(n.Parent.Parent)
		}
		li, ui, err := edge(n.Name, upper)
		if err != nil {
			return nil, err
		}
		st, cl, pl := b.stream(), b.ep(), b.ep()
		bd := parser.Binding{Kind: parser.KindParent, Flags: rank, Stream: st, LocalEP: cl, PeerEP: pl,
			Port: uint16(deploy.PortIndex(topo, n.Name, li))}
		copy(bd.PeerMAC[:], b.mac(upper, ui))
		b.addBinding(child, bd, upper)
		if n.Parent == nil {
			root.RootIn = &Link{Stream: st, SrcEP: cl, DstEP: pl, Peer: b.mac(n.Name, li), PeerName: n.Name}
			continue
		}
		ps := b.switchPlan(upper)
		pb := parser.Binding{Kind: parser.KindContributor, Stream: st, LocalEP: pl, PeerEP: cl,
			Port: uint16(deploy.PortIndex(topo, upper, ui))}
		copy(pb.PeerMAC[:], b.mac(n.Name, li))
		b.addBinding(ps, pb, n.Name)
	}
	for n, s := range abm {
		b.sw[n].ABM = s
	}
	return b.finish(), nil
}

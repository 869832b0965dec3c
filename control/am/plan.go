// This file owns the per-node plan of one operation: the STAGE context record
// and bindings of every tree node, with logical endpoints and stream IDs
// allocated so that each is unique within the operation, and the per-rank
// grant fields that mirror the leaf's bindings.

package am

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/prismd/prismd/parser"
)

// params is a validated, normalized invocation.
type params struct {
	Collective   parser.Collective
	RootRank     int
	Input        parser.Format
	Acc          parser.AccPolicy
	Partial      parser.Format
	Output       parser.Format
	KulischWidth int
	VectorLen    uint32
	MTU          int
	TimeoutMS    uint32
	Size         int
	// Persistent is a parameter like the others: ranks of one invocation
	// must agree on it, and a prepared operation (never persistent) does
	// not match a persistent invocation.
	Persistent bool
	// InvocationLen: BeginRequest.InvocationLen, kept when it divides
	// VectorLen of a persistent request (differences reads it).
	InvocationLen uint32
}

// nodePlan is what one tree node is told.
type nodePlan struct {
	node     *TreeNode
	ctx      contextRecord
	bindings []binding
	// owner names the peer behind each stream, for failure reports: the
	// source of a CONTRIBUTOR or RESULT_IN stream ("rank 2 (h3)", "subtree
	// l2", "the RESULT from s1"), the receiver of a PARENT or RESULT_OUT one
	// ("the parent s1", "subtree l2", "rank 2 (h3)").
	owner map[uint16]string
	// ownerRank is the rank behind a RANK stream: its DATA in, or its
	// RESULT out (a dead rank acknowledges no RESULT).
	ownerRank map[uint16]int
	// ownerChild is the child switch behind a CONTRIBUTOR stream from a
	// subtree: where to look next for what the node waits for.
	ownerChild map[uint16]string
	// ownerSwitch is the switch at the other end of a stream between two
	// tree nodes (either direction): the peer a node that timed out on
	// the stream accuses (diagnose).
	ownerSwitch map[uint16]string
}

// rankPlan mirrors a rank's leaf bindings for its grant.
type rankPlan struct {
	data   StreamBinding
	result *StreamBinding
}

// plan is the whole operation's setup.
type plan struct {
	nodes map[string]*nodePlan
	order []string // tree order (root first)
	ranks []rankPlan
	win   Window
}

// KulischWidthFor is the smallest multiple of 8 not below 278 + ceil(log2 N):
// the width that keeps N finite FP32-domain terms exact (prism-protocol,
// "Wire formats and accumulator profiles").
func KulischWidthFor(n int) int {
	lg := 0
	if n > 1 {
		lg = bits.Len(uint(n - 1))
	}
	return (278 + lg + 7) &^ 7
}

// buildPlan allocates endpoints and streams and builds every node's STAGE.
func buildPlan(t *Tree, p params, win Window) (pl *plan, err error) {
	pl = &plan{nodes: map[string]*nodePlan{}, ranks: make([]rankPlan, len(t.Ranks)), win: win}
	var nextEP, nextStream uint16 = 1, 1
	wrapped := false // a number came round to 0: the plan cannot be numbered
	ep := func() uint16 { nextEP++; wrapped = wrapped || nextEP == 0; return nextEP - 1 }
	st := func() uint16 { nextStream++; wrapped = wrapped || nextStream == 0; return nextStream - 1 }
	defer func() {
		if wrapped && err == nil {
			pl, err = nil, fmt.Errorf("%d ranks and %d switches need more than the 65535 endpoint or stream numbers of one operation", len(t.Ranks), len(t.Nodes))
		}
	}()
	for _, n := range t.Nodes {
		pl.order = append(pl.order, n.Name)
		pl.nodes[n.Name] = &nodePlan{node: n, owner: map[uint16]string{}, ownerRank: map[uint16]int{}, ownerChild: map[uint16]string{}, ownerSwitch: map[uint16]string{},
			ctx: contextRecord{
				Role: n.Role, Collective: p.Collective, Input: p.Input, Acc: p.Acc, Partial: p.Partial,
				Output: p.Output, KulischWidth: uint16(p.KulischWidth), VectorLen: p.VectorLen, MTU: uint16(p.MTU),
				Intervals: win.Intervals, ReplayDepth: win.ReplayDepth, WindowBytes: win.Bytes,
				WindowElems: win.Elements, MaxTerms: uint32(p.Size), TimeoutMS: p.TimeoutMS,
			}}
	}
	// resultTo reports whether the RESULT must reach this rank.
	resultTo := func(r int) bool { return p.Collective == parser.CollAllReduce || r == p.RootRank }
	// onResultPath: nodes that carry RESULT (every node for ALLREDUCE, the
	// path root..destination leaf for REDUCE).
	onPath := map[string]bool{}
	for r, rp := range t.Ranks {
		if !resultTo(r) {
			continue
		}
		for n := t.Node(rp.Leaf); n != nil; {
			onPath[n.Name] = true
			if n.Parent == nil {
				break
			}
			n = t.Node(n.Parent.Parent)
		}
	}
	for _, n := range t.Nodes {
		np := pl.nodes[n.Name]
		// Ranks attached here: DATA in, RESULT out.
		for _, r := range n.Ranks {
			rp := t.Ranks[r]
			s, local, peer := st(), ep(), ep()
			np.bindings = append(np.bindings, binding{Kind: parser.KindContributor, Flags: parser.BindingFlagRank,
				Stream: s, Local: local, Peer: peer, Port: uint16(rp.LeafPort), PeerMAC: rp.HostMAC, rank: r,
				peerName: fmt.Sprintf("rank %d (%s)", r, rp.Host)})
			np.owner[s] = fmt.Sprintf("rank %d (%s)", r, rp.Host)
			np.ownerRank[s] = r
			pl.ranks[r].data = StreamBinding{StreamID: s, SrcEndpoint: peer, DstEndpoint: local}
			if resultTo(r) {
				s, local, peer := st(), ep(), ep()
				np.bindings = append(np.bindings, binding{Kind: parser.KindResultOut, Flags: parser.BindingFlagRank,
					Stream: s, Local: local, Peer: peer, Port: uint16(rp.LeafPort), PeerMAC: rp.HostMAC, rank: r})
				np.owner[s] = fmt.Sprintf("rank %d (%s)", r, rp.Host)
				np.ownerRank[s] = r
				pl.ranks[r].result = &StreamBinding{StreamID: s, SrcEndpoint: local, DstEndpoint: peer}
			}
		}
	}
	// Switch edges: DATA child -> parent, RESULT parent -> child.
	for _, n := range t.Nodes {
		for _, e := range n.Children {
			parent, child := pl.nodes[e.Parent], pl.nodes[e.Child]
			s, pLocal, cLocal := st(), ep(), ep()
			parent.bindings = append(parent.bindings, binding{Kind: parser.KindContributor, Stream: s,
				Local: pLocal, Peer: cLocal, Port: uint16(e.ParentPort), PeerMAC: e.ChildMAC, rank: -1})
			parent.owner[s] = "subtree " + e.Child
			parent.ownerChild[s] = e.Child
			parent.ownerSwitch[s], child.ownerSwitch[s] = e.Child, e.Parent
			child.bindings = append(child.bindings, binding{Kind: parser.KindParent, Stream: s,
				Local: cLocal, Peer: pLocal, Port: uint16(e.ChildPort), PeerMAC: e.ParentMAC, rank: -1})
			child.owner[s] = "the parent " + e.Parent
			if onPath[e.Child] {
				s, pLocal, cLocal := st(), ep(), ep()
				parent.bindings = append(parent.bindings, binding{Kind: parser.KindResultOut, Stream: s,
					Local: pLocal, Peer: cLocal, Port: uint16(e.ParentPort), PeerMAC: e.ChildMAC, rank: -1})
				parent.owner[s] = "subtree " + e.Child
				child.bindings = append(child.bindings, binding{Kind: parser.KindResultIn, Stream: s,
					Local: cLocal, Peer: pLocal, Port: uint16(e.ChildPort), PeerMAC: e.ParentMAC, rank: -1})
				child.owner[s] = "the RESULT from " + parent.node.Name
				parent.ownerSwitch[s], child.ownerSwitch[s] = e.Child, e.Parent
			}
		}
	}
	for _, np := range pl.nodes {
		if len(np.bindings) > parser.MaxBindings {
			return nil, fmt.Errorf("%w: node %s would need %d bindings, more than %d", ErrTopology, np.node.Name, len(np.bindings), parser.MaxBindings)
		}
	}
	return pl, nil
}

// same reports whether two ranks' requests ask for the same collective:
// every parameter but the informational InvocationLen.
func (p params) same(q params) bool {
	p.InvocationLen, q.InvocationLen = 0, 0
	return p == q
}

// kindOf is the kind of the node's binding of stream s (0 if none).
func (np *nodePlan) kindOf(s uint16) parser.BindingKind {
	for _, b := range np.bindings {
		if b.Stream == s {
			return b.Kind
		}
	}
	return 0
}

// invocationLen is the elements one call sums: a persistent operation's
// invocation length when known, else its vector length.
func (p params) invocationLen() uint32 {
	if p.Persistent && p.InvocationLen > 0 {
		return p.InvocationLen
	}
	return p.VectorLen
}

// lenDesc is p's vector length as its rank means it: a persistent
// collective's per invocation (its VectorLen is every invocation's).
func (p params) lenDesc() string {
	if n := p.invocationLen(); n != p.VectorLen {
		return fmt.Sprintf("%d per invocation", n)
	}
	return strconv.FormatUint(uint64(p.VectorLen), 10)
}

// differences names, in the request's own field names, where p (a rank's
// request) differs from q (the first rank's): "size 3 vs 2, vector_len
// 1000 vs 2000". The mismatch error printed both structs whole, Go field
// names and all, and left the reader to find the field.
func (p params) differences(q params) string {
	var d []string
	add := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s %v vs %v", name, a, b))
		}
	}
	// Size first: the Kulisch width follows from it (278 + ceil(log2
	// size) bits), so a size mismatch listed "kulisch_width 280 vs 288"
	// first, a field no rank set.
	add("size", p.Size, q.Size)
	add("collective", p.Collective, q.Collective)
	add("root_rank", p.RootRank, q.RootRank)
	add("input_format", p.Input, q.Input)
	add("acc_policy", p.Acc, q.Acc)
	add("partial_policy", p.Partial, q.Partial)
	add("output_format", p.Output, q.Output)
	if p.Size == q.Size {
		add("kulisch_width", p.KulischWidth, q.KulischWidth)
	}
	if p.VectorLen != q.VectorLen && p.invocationLen() != q.invocationLen() {
		// (The same length per invocation on both sides: the lengths
		// differ only because one is persistent, which follows. Said,
		// "vector_len 1000 per invocation vs 1000" named a difference a
		// reader could not see.)
		d = append(d, fmt.Sprintf("vector_len %s vs %s", p.lenDesc(), q.lenDesc()))
	}
	add("mtu", p.MTU, q.MTU)
	add("timeout_ms", p.TimeoutMS, q.TimeoutMS)
	add("persistent", p.Persistent, q.Persistent)
	return strings.Join(d, ", ")
}

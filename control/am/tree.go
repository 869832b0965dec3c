// This file owns tree selection: from a topology and the ranks' hosts it
// picks the leaves, the root and the merge points, and resolves every logical
// edge into the port and peer MAC at each end across plain forwarding hops.

package am

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

// ErrTopology is wrapped by every tree-selection error. Its text has no
// "am:" of its own: ranks read it inside the runtime channel's error, which
// already says "am: topology:".
var ErrTopology = errors.New("cannot place the collective on the topology")

// RankPlace is where one rank attaches: its host interface and its leaf.
type RankPlace struct {
	Rank     int
	Host     string
	Iface    string
	HostMAC  net.HardwareAddr
	Leaf     string
	LeafPort int              // the leaf's port toward the host
	LeafMAC  net.HardwareAddr // that port's MAC: where the rank sends DATA
	// Path is the physical path host -> leaf (only bridges between).
	Path []string
}

// Edge is a logical child -> parent edge of the tree, resolved into ports:
// ChildPort is the first hop's egress at the child, ParentPort the first
// hop's egress at the parent (toward the child). Via lists the forwarding
// nodes between them.
//
// ChildMAC and ParentMAC are the MACs of those two ports: a switch sends
// PRISM frames from the MAC of its egress port, and a receiver checks the
// source against the binding's peer MAC, so a switch-to-switch binding names
// the peer's port MAC (a port MAC is always local to its node, so it is
// also the right destination).
type Edge struct {
	Child, Parent         string
	ChildPort, ParentPort int
	ChildMAC, ParentMAC   net.HardwareAddr
	Via                   []string
}

// TreeNode is one switch taking part in the arithmetic.
type TreeNode struct {
	Name   string
	Role   parser.Role
	MAC    net.HardwareAddr // node MAC (Topology.MAC(node, "node"))
	Parent *Edge            // nil at the root / SINGLE
	// Children are the child subtrees (edges whose Parent is this node),
	// ordered by child name.
	Children []*Edge
	// Ranks attached directly, ascending.
	Ranks []int
	Depth int // logical depth, root = 0
}

// Tree is the logical aggregation tree of one operation.
type Tree struct {
	Single bool
	Root   string
	// Nodes in deterministic order: root first, then by depth and name.
	Nodes []*TreeNode
	Ranks []RankPlace // indexed by rank
	// Forwarders are switches on tree paths that only forward.
	Forwarders []string

	byName map[string]*TreeNode
}

// Node returns the tree node of that name, or nil.
func (t *Tree) Node(name string) *TreeNode { return t.byName[name] }

// Kind is "SINGLE" or "TREE".
func (t *Tree) Kind() string {
	if t.Single {
		return "SINGLE"
	}
	return "TREE"
}

// RankHost names where one rank runs: its host node and (optionally) the
// interface it uses and its actual MAC.
type RankHost struct {
	Node  string
	Iface string           // "" = the host's first interface
	MAC   net.HardwareAddr // nil = topology MAC
}

// BuildTree selects the aggregation tree for ranks (index = rank) on topo.
//
// Leaf: the nearest prismd switch of each rank's host (only Linux bridges may
// lie between). If every rank shares one leaf the tree is SINGLE. Otherwise
// the root is the prismd switch minimizing the maximum hop distance to the
// leaves (ties: smaller sum of distances, then smaller name), paths are the
// breadth-first tree from the root (neighbours in port order), and a switch
// joins the tree where paths from two or more leaves merge. Every other
// switch on a path just forwards.
func BuildTree(topo *deploy.Topology, ranks []RankHost) (*Tree, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("%w: no ranks", ErrTopology)
	}
	t := &Tree{Ranks: make([]RankPlace, len(ranks)), byName: map[string]*TreeNode{}}
	leaves := map[string]bool{}
	for r, rh := range ranks {
		p, err := placeRank(topo, r, rh)
		if err != nil {
			return nil, err
		}
		t.Ranks[r] = p
		leaves[p.Leaf] = true
	}
	add := func(name string) *TreeNode {
		n := t.byName[name]
		if n == nil {
			m := topo.MAC(name, deploy.NodeMACIface)
			n = &TreeNode{Name: name, MAC: net.HardwareAddr(m[:])}
			t.byName[name] = n
		}
		return n
	}
	if len(leaves) == 1 {
		leaf := t.Ranks[0].Leaf
		n := add(leaf)
		n.Role = parser.RoleSingle
		t.Single, t.Root = true, leaf
		for r := range t.Ranks {
			n.Ranks = append(n.Ranks, r)
		}
		t.Nodes = []*TreeNode{n}
		return t, nil
	}
	leafNames := make([]string, 0, len(leaves))
	for l := range leaves {
		leafNames = append(leafNames, l)
	}
	sort.Strings(leafNames)

	// Root: min max-distance, then min sum, then name.
	bestMax, bestSum := -1, -1
	for _, cand := range topo.NodesOf(deploy.KindPrismd) {
		dist, _ := bfs(topo, cand)
		mx, sum, ok := 0, 0, true
		for _, l := range leafNames {
			d, reach := dist[l]
			if !reach {
				ok = false
				break
			}
			sum += d
			if d > mx {
				mx = d
			}
		}
		if !ok {
			continue
		}
		if bestMax < 0 || mx < bestMax || (mx == bestMax && sum < bestSum) {
			bestMax, bestSum, t.Root = mx, sum, cand
		}
	}
	if t.Root == "" {
		return nil, fmt.Errorf("%w: no prismd switch reaches every leaf (%s)", ErrTopology, strings.Join(leafNames, ", "))
	}
	_, prev := bfs(topo, t.Root)

	// Count, for every node on a leaf->root path, the distinct neighbours the
	// paths arrive from: two or more means paths merge there.
	from := map[string]map[string]bool{}
	for _, l := range leafNames {
		for n := l; n != t.Root; n = prev[n].node {
			p := prev[n].node
			if from[p] == nil {
				from[p] = map[string]bool{}
			}
			from[p][n] = true
		}
	}
	member := func(n string) bool {
		return n == t.Root || leaves[n] || (topo.Nodes[n].Kind == deploy.KindPrismd && len(from[n]) >= 2)
	}
	fwd := map[string]bool{}
	for _, l := range leafNames {
		n := l
		for n != t.Root {
			// Walk up to the next member: that is n's logical parent.
			child := n
			childPort := deploy.PortIndex(topo, child, prev[child].out)
			var via []string
			cur := prev[child]
			for !member(cur.node) {
				via = append(via, cur.node)
				fwd[cur.node] = true
				cur = prev[cur.node]
			}
			parent := cur.node
			// The parent's port toward the child is the interface on which
			// the path from the child arrives at the parent.
			last := child
			if len(via) > 0 {
				last = via[len(via)-1]
			}
			parentPort := deploy.PortIndex(topo, parent, prev[last].in)
			cn, pn := add(child), add(parent)
			if cn.Parent == nil {
				cm, pm := topo.MAC(child, prev[child].out), topo.MAC(parent, prev[last].in)
				e := &Edge{Child: child, Parent: parent, ChildPort: childPort, ParentPort: parentPort,
					ChildMAC: net.HardwareAddr(cm[:]), ParentMAC: net.HardwareAddr(pm[:]), Via: via}
				cn.Parent = e
				pn.Children = append(pn.Children, e)
			}
			n = parent
		}
	}
	add(t.Root)
	for _, p := range t.Ranks {
		n := t.byName[p.Leaf]
		n.Ranks = append(n.Ranks, p.Rank)
	}
	for _, n := range t.byName {
		sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Child < n.Children[j].Child })
		switch {
		case n.Parent == nil:
			n.Role = parser.RoleRoot
		case len(n.Children) > 0:
			n.Role = parser.RoleInternal
		default:
			n.Role = parser.RoleLeaf
		}
		d := 0
		for e := n.Parent; e != nil; e = t.byName[e.Parent].Parent {
			d++
		}
		n.Depth = d
		t.Nodes = append(t.Nodes, n)
	}
	sort.Slice(t.Nodes, func(i, j int) bool {
		a, b := t.Nodes[i], t.Nodes[j]
		if a.Depth != b.Depth {
			return a.Depth < b.Depth
		}
		return a.Name < b.Name
	})
	for f := range fwd {
		t.Forwarders = append(t.Forwarders, f)
	}
	sort.Strings(t.Forwarders)
	return t, nil
}

// hop is how BFS reached a node: from node via its interface out, arriving on in.
type hop struct {
	node    string
	out, in string
}

// bfs from src over switches (hosts are never transited), neighbours in port
// order: distances and predecessor hops.
func bfs(topo *deploy.Topology, src string) (map[string]int, map[string]hop) {
	dist := map[string]int{src: 0}
	prev := map[string]hop{}
	q := []string{src}
	for len(q) > 0 {
		cur := q[0]
		q = q[1:]
		for _, a := range topo.Neighbors(cur) {
			nb := a.Peer.Node
			if _, ok := dist[nb]; ok || !topo.Nodes[nb].Kind.IsSwitch() {
				continue
			}
			dist[nb] = dist[cur] + 1
			// prev[nb] points back toward src: leaving nb by a.Peer.Iface,
			// arriving at cur on a.Iface.
			prev[nb] = hop{node: cur, out: a.Peer.Iface, in: a.Iface}
			q = append(q, nb)
		}
	}
	return dist, prev
}

// macOwner finds the host interface of topo whose deterministic MAC is
// mac. Lab hosts carry these MACs; a real host's NIC keeps its own, which
// matches none.
func macOwner(topo *deploy.Topology, mac net.HardwareAddr) (host, iface string, ok bool) {
	if len(mac) != 6 || mac[0] != 0x02 {
		return "", "", false // not a lab MAC: no hashing per host for a real NIC
	}
	for _, h := range topo.Hosts() {
		for _, i := range topo.Nodes[h].Ifaces {
			if m := topo.MAC(h, i); bytes.Equal(m[:], mac) {
				return h, i, true
			}
		}
	}
	return "", "", false
}

// ifaceHint is the --node-iface a rank on host h's interface i needs: none
// when it is the host's only link.
func ifaceHint(topo *deploy.Topology, h, i string) string {
	if len(topo.Nodes[h].Ifaces) == 1 {
		return ""
	}
	return " --node-iface " + i + " (PRISM_NODE_IFACE)"
}

func placeRank(topo *deploy.Topology, r int, rh RankHost) (RankPlace, error) {
	n, ok := topo.Nodes[rh.Node]
	if !ok {
		return RankPlace{}, fmt.Errorf("%w: rank %d: node %q is not in topology %s (hosts: %s)", ErrTopology, r, rh.Node, topo.Name, strings.Join(topo.Hosts(), ", "))
	}
	if n.Kind != deploy.KindHost {
		return RankPlace{}, fmt.Errorf("%w: rank %d: node %q is a %v, not a host", ErrTopology, r, rh.Node, n.Kind)
	}
	iface := rh.Iface
	if iface == "" {
		iface = n.Ifaces[0]
	}
	if deploy.PortIndex(topo, rh.Node, iface) < 0 {
		return RankPlace{}, fmt.Errorf("%w: rank %d: host %s has no interface %q (has %s)", ErrTopology, r, rh.Node, iface, strings.Join(n.Ifaces, ", "))
	}
	mac := rh.MAC
	if mac == nil {
		m := topo.MAC(rh.Node, iface)
		mac = net.HardwareAddr(m[:])
	} else if h, i, ok := macOwner(topo, mac); ok && (h != rh.Node || i != iface) {
		// The rank's interface is another host's in this topology: it named
		// the wrong host (two ranks swapped their --node, a copied command
		// line). Placed as asked, its leaf would wait for DATA that arrives
		// on another port and the operation would time out blaming a rank.
		return RankPlace{}, fmt.Errorf("%w: rank %d says it is on %s %s, but its interface MAC %s is %s %s's in topology %s: pass --node %s (PRISM_NODE)%s",
			ErrTopology, r, rh.Node, iface, mac, h, i, topo.Name, h, ifaceHint(topo, h, i))
	}
	// Walk through bridges until the first prismd switch.
	peer, _ := topo.Peer(deploy.Endpoint{Node: rh.Node, Iface: iface})
	path := []string{rh.Node}
	seen := map[string]bool{rh.Node: true}
	type item struct {
		ep   deploy.Endpoint
		path []string
	}
	q := []item{{peer, path}}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		nn := topo.Nodes[it.ep.Node]
		if seen[it.ep.Node] {
			continue
		}
		seen[it.ep.Node] = true
		p := append(append([]string(nil), it.path...), it.ep.Node)
		switch nn.Kind {
		case deploy.KindPrismd:
			lm := topo.MAC(it.ep.Node, it.ep.Iface)
			return RankPlace{Rank: r, Host: rh.Node, Iface: iface, HostMAC: mac, Leaf: it.ep.Node,
				LeafPort: deploy.PortIndex(topo, it.ep.Node, it.ep.Iface), LeafMAC: net.HardwareAddr(lm[:]), Path: p}, nil
		case deploy.KindBridge:
			for _, a := range topo.Neighbors(it.ep.Node) {
				if a.Iface != it.ep.Iface {
					q = append(q, item{a.Peer, p})
				}
			}
		}
	}
	return RankPlace{}, fmt.Errorf("%w: rank %d: host %s:%s reaches no prismd switch", ErrTopology, r, rh.Node, iface)
}

// locateIface finds the host interface of topo whose MAC (its macs key or
// the lab's derived one) is mac: where the AM's CONTROL leaves from. ""
// when none is (a NIC the topology does not list).
func locateIface(topo *deploy.Topology, mac net.HardwareAddr) (host, iface string) {
	if len(mac) != 6 {
		return "", ""
	}
	for _, h := range topo.Hosts() {
		for _, i := range topo.Nodes[h].Ifaces {
			if m := topo.MAC(h, i); bytes.Equal(m[:], mac) {
				return h, i
			}
		}
	}
	return "", ""
}

// controlPath lists the switches a CONTROL frame from the AM crosses on
// its way to node, nearest the AM first (bridges and forwarders
// included), along the path the topology resolves; ok is false when the
// AM's place in the topology is unknown or no path leads there.
func (m *Manager) controlPath(node string) (via []string, ok bool) {
	if m.amHost == "" {
		return nil, false
	}
	first, ok := m.cfg.Topology.Peer(deploy.Endpoint{Node: m.amHost, Iface: m.amIface})
	if !ok {
		return nil, false
	}
	hops, err := m.cfg.Topology.Path(first.Node, node)
	if err != nil {
		return nil, false
	}
	for _, h := range hops[:len(hops)-1] {
		via = append(via, h.Node)
	}
	return via, true
}

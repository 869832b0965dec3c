package am

import (
	"errors"
	"reflect"
	"testing"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

// midHop: leaf l1 reaches spine s1 through a Linux bridge br1, leaf l2
// through a prismd m1 that is not in the tree; h5 reaches l1 through br2.
const midHop = `
name: midhop
topology:
  nodes:
    s1: {kind: prismd}
    l1: {kind: prismd}
    l2: {kind: prismd}
    m1: {kind: prismd}
    br1: {kind: bridge}
    br2: {kind: bridge}
    h1: {kind: host}
    h2: {kind: host}
    h3: {kind: host}
    h4: {kind: host}
    h5: {kind: host}
  links:
    - endpoints: ["l1:up", "br1:a"]
    - endpoints: ["br1:b", "s1:p1"]
    - endpoints: ["l2:up", "m1:x"]
    - endpoints: ["m1:y", "s1:p2"]
    - endpoints: ["h1:eth0", "l1:d1"]
    - endpoints: ["h2:eth0", "l1:d2"]
    - endpoints: ["h3:eth0", "l2:d1"]
    - endpoints: ["h4:eth0", "l2:d2"]
    - endpoints: ["h5:eth0", "br2:a"]
    - endpoints: ["br2:b", "l1:d3"]
`

func loadTopo(t *testing.T, name string) *deploy.Topology {
	t.Helper()
	var topo *deploy.Topology
	var err error
	if name == "midhop" {
		topo, err = deploy.Parse([]byte(midHop))
	} else {
		topo, err = deploy.Load(name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func hostsOf(names ...string) []RankHost {
	r := make([]RankHost, len(names))
	for i, n := range names {
		r[i] = RankHost{Node: n}
	}
	return r
}

// wantEdge is an edge as read off the YAML by hand: ports are positions in
// order of first appearance in the links.
type wantEdge struct {
	child, parent         string
	childPort, parentPort int
	via                   []string
}

func TestBuildTree(t *testing.T) {
	tests := []struct {
		name       string
		topo       string
		hosts      []string
		single     bool
		root       string
		roles      map[string]parser.Role
		edges      []wantEdge
		leafPorts  []int // per rank
		leaves     []string
		forwarders []string
	}{
		{
			name: "single", topo: "single", hosts: []string{"h1", "h2"}, single: true, root: "sw1",
			roles: map[string]parser.Role{"sw1": parser.RoleSingle}, leafPorts: []int{0, 1}, leaves: []string{"sw1", "sw1"},
		},
		{
			name: "spine-leaf same leaf is SINGLE", topo: "spine-leaf", hosts: []string{"h2", "h1"}, single: true, root: "l1",
			roles: map[string]parser.Role{"l1": parser.RoleSingle}, leafPorts: []int{2, 1}, leaves: []string{"l1", "l1"},
		},
		{
			name: "spine-leaf", topo: "spine-leaf", hosts: []string{"h1", "h2", "h3", "h4"}, root: "s1",
			roles:     map[string]parser.Role{"s1": parser.RoleRoot, "l1": parser.RoleLeaf, "l2": parser.RoleLeaf},
			edges:     []wantEdge{{"l1", "s1", 0, 0, nil}, {"l2", "s1", 0, 1, nil}},
			leafPorts: []int{1, 2, 1, 2}, leaves: []string{"l1", "l1", "l2", "l2"},
		},
		{
			name: "fat-tree 8 ranks", topo: "fat-tree", hosts: []string{"h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"}, root: "c1",
			roles: map[string]parser.Role{"c1": parser.RoleRoot, "c2": parser.RoleInternal,
				"e1": parser.RoleLeaf, "e2": parser.RoleLeaf, "e3": parser.RoleLeaf, "e4": parser.RoleLeaf},
			edges: []wantEdge{
				{"e1", "c1", 0, 1, []string{"a1"}}, {"e2", "c1", 0, 2, []string{"a2"}}, {"c2", "c1", 0, 0, nil},
				{"e3", "c2", 0, 1, []string{"a3"}}, {"e4", "c2", 0, 2, []string{"a4"}},
			},
			leafPorts:  []int{1, 2, 1, 2, 1, 2, 1, 2},
			leaves:     []string{"e1", "e1", "e2", "e2", "e3", "e3", "e4", "e4"},
			forwarders: []string{"a1", "a2", "a3", "a4"},
		},
		{
			name: "fat-tree across cores, c2 only forwards", topo: "fat-tree", hosts: []string{"h5", "h1"}, root: "c1",
			roles:      map[string]parser.Role{"c1": parser.RoleRoot, "e1": parser.RoleLeaf, "e3": parser.RoleLeaf},
			edges:      []wantEdge{{"e1", "c1", 0, 1, []string{"a1"}}, {"e3", "c1", 0, 0, []string{"a3", "c2"}}},
			leafPorts:  []int{1, 1},
			leaves:     []string{"e3", "e1"},
			forwarders: []string{"a1", "a3", "c2"},
		},
		{
			name: "forwarding-only hops in the middle", topo: "midhop", hosts: []string{"h1", "h3", "h5", "h4"}, root: "s1",
			roles: map[string]parser.Role{"s1": parser.RoleRoot, "l1": parser.RoleLeaf, "l2": parser.RoleLeaf},
			// l1: up=0 d1=1 d2=2 d3=3; s1: p1=0 p2=1; l2: up=0 d1=1 d2=2.
			edges:      []wantEdge{{"l1", "s1", 0, 0, []string{"br1"}}, {"l2", "s1", 0, 1, []string{"m1"}}},
			leafPorts:  []int{1, 1, 3, 2},
			leaves:     []string{"l1", "l2", "l1", "l2"},
			forwarders: []string{"br1", "m1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			tr, err := BuildTree(topo, hostsOf(tc.hosts...))
			if err != nil {
				t.Fatal(err)
			}
			if tr.Single != tc.single || tr.Root != tc.root {
				t.Errorf("single=%v root=%s, want %v %s", tr.Single, tr.Root, tc.single, tc.root)
			}
			roles := map[string]parser.Role{}
			var edges []wantEdge
			for _, n := range tr.Nodes {
				roles[n.Name] = n.Role
				if n.Parent != nil {
					e := n.Parent
					edges = append(edges, wantEdge{e.Child, e.Parent, e.ChildPort, e.ParentPort, e.Via})
					cm := topo.MAC(e.Child, deploy.Ports(topo, e.Child)[e.ChildPort])
					pm := topo.MAC(e.Parent, deploy.Ports(topo, e.Parent)[e.ParentPort])
					if string(e.ChildMAC) != string(cm[:]) || string(e.ParentMAC) != string(pm[:]) {
						t.Errorf("edge %s->%s MACs %v %v, want the port MACs %x %x", e.Child, e.Parent, e.ChildMAC, e.ParentMAC, cm, pm)
					}
				}
				if m := topo.MAC(n.Name, "node"); string(n.MAC) != string(m[:]) {
					t.Errorf("node %s MAC %v, want %x", n.Name, n.MAC, m)
				}
			}
			if !reflect.DeepEqual(roles, tc.roles) {
				t.Errorf("roles %v, want %v", roles, tc.roles)
			}
			byChild := func(es []wantEdge) map[string]wantEdge {
				m := map[string]wantEdge{}
				for _, e := range es {
					m[e.child] = e
				}
				return m
			}
			if !reflect.DeepEqual(byChild(edges), byChild(tc.edges)) {
				t.Errorf("edges\n got %+v\nwant %+v", edges, tc.edges)
			}
			for r, p := range tr.Ranks {
				if p.LeafPort != tc.leafPorts[r] || p.Leaf != tc.leaves[r] {
					t.Errorf("rank %d: leaf %s port %d, want %s port %d", r, p.Leaf, p.LeafPort, tc.leaves[r], tc.leafPorts[r])
				}
				if m := topo.MAC(p.Leaf, deploy.Ports(topo, p.Leaf)[p.LeafPort]); string(p.LeafMAC) != string(m[:]) {
					t.Errorf("rank %d leaf MAC %v, want %x", r, p.LeafMAC, m)
				}
				if m := topo.MAC(tc.hosts[r], "eth0"); string(p.HostMAC) != string(m[:]) {
					t.Errorf("rank %d host MAC %v, want %x", r, p.HostMAC, m)
				}
			}
			if !reflect.DeepEqual(tr.Forwarders, tc.forwarders) {
				t.Errorf("forwarders %v, want %v", tr.Forwarders, tc.forwarders)
			}
			if tr.Nodes[0].Name != tc.root {
				t.Errorf("first node %s, want the root", tr.Nodes[0].Name)
			}
		})
	}
}

func TestBuildTreeErrors(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	for _, hs := range [][]RankHost{
		hostsOf("h9"),
		hostsOf("s1"),
		{{Node: "h1", Iface: "eth7"}},
		nil,
	} {
		if _, err := BuildTree(topo, hs); !errors.Is(err, ErrTopology) {
			t.Errorf("%v: err %v, want ErrTopology", hs, err)
		}
	}
	bp := loadTopo(t, "bridge-pair")
	if _, err := BuildTree(bp, hostsOf("h1", "h2")); !errors.Is(err, ErrTopology) {
		t.Errorf("bridge-pair has no prismd: err %v", err)
	}
}

func TestKulischWidthFor(t *testing.T) {
	// 278 + ceil(log2 N), rounded up to a byte.
	for _, c := range []struct{ n, w int }{{1, 280}, {2, 280}, {4, 280}, {5, 288}, {8, 288}, {1024, 288}, {1025, 296}} {
		if got := KulischWidthFor(c.n); got != c.w {
			t.Errorf("KulischWidthFor(%d) = %d, want %d", c.n, got, c.w)
		}
	}
}

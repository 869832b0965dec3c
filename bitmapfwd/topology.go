// This file owns the topology description the control plane hands to
// ComputeBIFT, and the shortest-path computation of every switch's table.

package bitmapfwd

import "strconv"

// Topology is an undirected graph of nodes (switches and hosts alike) with
// endpoints attached to some of them. Port p of node u is u's p-th entry in
// Neighbors; a link listed at one end must be listed at the other (parallel
// links are two entries at each end).
type Topology struct {
	Nodes []Node
}

// Node is one vertex of a Topology.
type Node struct {
	// Name is used in error messages only.
	Name string
	// Neighbors lists the node index at the far end of each port, in port
	// order.
	Neighbors []int
	// Endpoints lists the endpoint IDs (bit positions in the job's bit
	// space) attached to this node: a host's ranks, or a switch's own.
	Endpoints []int
}

func topoErr(node int, what string, v int) error {
	return paramErr(0, "topology node "+strconv.Itoa(node)+" "+what, v, ErrTopology)
}

// Validate checks indices, symmetry, self-loops and that every endpoint is
// attached to exactly one node inside 0..bits-1.
func (t *Topology) Validate(bits int) error {
	n := len(t.Nodes)
	owner := make(map[int]int)
	for u, nd := range t.Nodes {
		for p, v := range nd.Neighbors {
			if v < 0 || v >= n {
				return topoErr(u, "port "+strconv.Itoa(p)+" neighbour index", v)
			}
			if v == u {
				return topoErr(u, "port "+strconv.Itoa(p)+" self-loop", v)
			}
		}
		for _, e := range nd.Endpoints {
			if e < 0 || e >= bits {
				return topoErr(u, "endpoint outside the domain", e)
			}
			if o, dup := owner[e]; dup {
				return topoErr(u, "endpoint also attached to node "+strconv.Itoa(o), e)
			}
			owner[e] = u
		}
	}
	// Symmetry: the number of links u->v equals v->u.
	links := make(map[[2]int]int)
	for u, nd := range t.Nodes {
		for _, v := range nd.Neighbors {
			links[[2]int{u, v}]++
		}
	}
	for k, c := range links {
		if links[[2]int{k[1], k[0]}] != c {
			return topoErr(k[0], "asymmetric link to node", k[1])
		}
	}
	return nil
}

// ComputeBIFT computes node's table over a bit space of capacity bits: each
// endpoint's bit goes into the mask of the first-hop port of a shortest path
// (in hops) from node to the endpoint's node; endpoints attached to node go
// into the LocalPort mask; unreachable endpoints stay in no mask. Ties are
// broken deterministically: the lowest first-hop port index among all
// shortest paths wins, so every switch computes the same tables from the same
// description regardless of map or queue order.
func ComputeBIFT(t *Topology, node, bits int) (*BIFT, error) {
	if err := t.Validate(bits); err != nil {
		return nil, err
	}
	return computeBIFT(t, node, bits)
}

// ComputeAllBIFTs computes the table of every node (hosts included; the
// control plane uses the switches').
func ComputeAllBIFTs(t *Topology, bits int) ([]*BIFT, error) {
	if err := t.Validate(bits); err != nil {
		return nil, err
	}
	out := make([]*BIFT, len(t.Nodes))
	for u := range t.Nodes {
		b, err := computeBIFT(t, u, bits)
		if err != nil {
			return nil, err
		}
		out[u] = b
	}
	return out, nil
}

func computeBIFT(t *Topology, node, bits int) (*BIFT, error) {
	n := len(t.Nodes)
	if node < 0 || node >= n {
		return nil, paramErr(0, "topology node index", node, ErrParam)
	}
	self := &t.Nodes[node]
	b, err := NewBIFT(bits, len(self.Neighbors))
	if err != nil {
		return nil, err
	}
	// Layered BFS. Layer 1 is discovered in port order and every later
	// layer in the order of its discoverers, so each layer is sorted by
	// first-hop port; a node's first discoverer therefore carries the lowest
	// first-hop port among all its shortest paths. The result does not
	// depend on how the far ends list their ports.
	dist := make([]int, n)
	firstHop := make([]int, n)
	for i := range dist {
		dist[i] = -1
	}
	dist[node] = 0
	var layer []int
	for p, v := range self.Neighbors {
		if dist[v] == -1 { // parallel links: the lowest port keeps v
			dist[v] = 1
			firstHop[v] = p
			layer = append(layer, v)
		}
	}
	for d := 2; len(layer) > 0; d++ {
		var next []int
		for _, u := range layer {
			for _, v := range t.Nodes[u].Neighbors {
				if dist[v] == -1 {
					dist[v] = d
					firstHop[v] = firstHop[u]
					next = append(next, v)
				}
			}
		}
		layer = next
	}
	masks := make([]Set, len(self.Neighbors))
	for p := range masks {
		masks[p] = MakeSet(bits)
	}
	local := MakeSet(bits)
	for v, nd := range t.Nodes {
		for _, e := range nd.Endpoints {
			switch {
			case v == node:
				local.Add(e)
			case dist[v] > 0:
				masks[firstHop[v]].Add(e)
			}
		}
	}
	if err := b.SetMask(LocalPort, &local); err != nil {
		return nil, err
	}
	for p := range masks {
		if err := b.SetMask(p, &masks[p]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

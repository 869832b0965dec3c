package bitmapfwd

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
)

// copyRec records what Replicate emitted, copying each subset (emit may not
// keep it).
type copyRec struct {
	ports []int
	sets  map[int]oracle
}

func (c *copyRec) emit(port int, sub *Set) {
	if c.sets == nil {
		c.sets = map[int]oracle{}
	}
	if _, dup := c.sets[port]; dup {
		panic("two copies to one port")
	}
	c.ports = append(c.ports, port)
	o := oracle{}
	for e := range sub.All() {
		o[e] = true
	}
	c.sets[port] = o
}

// naiveReplicate is the oracle: bit by bit, portOf says where a bit goes
// (-2 = no route).
func naiveReplicate(dst oracle, inPort int, portOf func(e int) int) (copies map[int]oracle, looped, unrouted int) {
	copies = map[int]oracle{}
	for e := range dst {
		p := portOf(e)
		switch {
		case p == -2:
			unrouted++
		case p == inPort && p >= 0:
			looped++
		default:
			if copies[p] == nil {
				copies[p] = oracle{}
			}
			copies[p][e] = true
		}
	}
	return copies, looped, unrouted
}

func compareReplicate(t *testing.T, what string, b *BIFT, dst oracle, inPort int, portOf func(int) int) ReplicateResult {
	t.Helper()
	d := fromOracle(t, b.Cap(), dst)
	before := NewSet(b.Cap())
	before.Copy(d)
	scratch := NewSet(b.Cap())
	scratch.Add(0) // dirty scratch must not leak into a copy
	var rec copyRec
	r := b.Replicate(d, inPort, scratch, rec.emit)
	want, looped, unrouted := naiveReplicate(dst, inPort, portOf)
	if len(rec.sets) != len(want) {
		t.Fatalf("%s: %d copies, want %d", what, len(rec.sets), len(want))
	}
	bitsSent := 0
	for p, o := range want {
		got := rec.sets[p]
		if !slices.Equal(got.sorted(), o.sorted()) {
			t.Fatalf("%s: port %d got %v want %v", what, p, trunc(got.sorted()), trunc(o.sorted()))
		}
		bitsSent += len(o)
	}
	if r.Copies != len(want) || r.Bits != bitsSent || r.Looped != looped || r.Unrouted != unrouted || r.Empty != (len(dst) == 0) {
		t.Fatalf("%s: result %+v, want copies=%d bits=%d looped=%d unrouted=%d", what, r, len(want), bitsSent, looped, unrouted)
	}
	if !slices.IsSorted(rec.ports) && !(len(rec.ports) > 0 && rec.ports[len(rec.ports)-1] == LocalPort) {
		t.Fatalf("%s: copies not in port order: %v", what, rec.ports)
	}
	if !d.Equal(before) {
		t.Fatalf("%s: Replicate modified dst", what)
	}
	// Forwarded is the union of the copies.
	fw := NewSet(b.Cap())
	b.Forwarded(fw, d, inPort)
	u := oracle{}
	for _, o := range want {
		for e := range o {
			u[e] = true
		}
	}
	checkSet(t, what+" Forwarded", fw, u)
	return r
}

// Every bit position, for every BSL: a star where every bit has its own
// neighbour, so one set bit gives exactly one copy carrying only that bit.
func TestReplicateEveryBitEveryBSL(t *testing.T) {
	for _, bsl := range []int{64, 128, 256, 512, 1024, 4096} {
		b, err := NewBIFT(bsl, bsl)
		if err != nil {
			t.Fatal(err)
		}
		m := NewSet(bsl)
		for p := range bsl {
			m.Clear()
			m.Add(p)
			if err := b.SetMask(p, m); err != nil {
				t.Fatal(err)
			}
		}
		portOf := func(e int) int { return e }
		d, scratch := NewSet(bsl), NewSet(bsl)
		for bit := range bsl {
			d.Clear()
			d.Add(bit)
			n := 0
			r := b.Replicate(d, -1, scratch, func(port int, sub *Set) {
				n++
				if port != bit || sub.Count() != 1 || !sub.Contains(bit) {
					t.Fatalf("bsl %d bit %d: copy to port %d carrying %v", bsl, bit, port, sub)
				}
			})
			if n != 1 || r.Copies != 1 || r.Bits != 1 {
				t.Fatalf("bsl %d bit %d: %d copies %+v", bsl, bit, n, r)
			}
		}
		all := oracle{}
		for e := range bsl {
			all[e] = true
		}
		compareReplicate(t, "all bits", b, all, -1, portOf)
		compareReplicate(t, "all bits, ingress 5", b, all, 5, portOf)
	}
}

func TestReplicateRandomAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{64, 256, 1000, 4096, 65536} {
		for _, ports := range []int{1, 2, 4, 7, 48} {
			// Random partition of the bit space over ports, some bits unrouted
			// (-2) and some local (-1).
			owner := make([]int, n)
			for e := range owner {
				switch x := r.IntN(ports + 2); {
				case x == ports:
					owner[e] = -2
				case x == ports+1 && r.IntN(4) == 0:
					owner[e] = LocalPort
				default:
					owner[e] = x % ports
				}
			}
			// Or contiguous blocks, the shape real topologies give.
			if r.IntN(2) == 0 {
				for e := range owner {
					owner[e] = e * ports / n
				}
			}
			b, err := NewBIFT(n, ports)
			if err != nil {
				t.Fatal(err)
			}
			for p := LocalPort; p < ports; p++ {
				m := NewSet(n)
				for e, o := range owner {
					if o == p {
						m.Add(e)
					}
				}
				if err := b.SetMask(p, m); err != nil {
					t.Fatal(err)
				}
			}
			portOf := func(e int) int { return owner[e] }
			iters := 20
			if n == 65536 {
				iters = 4
			}
			for range iters {
				dst := randOracle(r, n, 0.05)
				compareReplicate(t, "random", b, dst, r.IntN(ports+1)-1, portOf)
			}
		}
	}
}

func TestReplicateEmptyUnknownAndIngress(t *testing.T) {
	b, _ := NewBIFT(8, 3)
	_ = b.SetMask(0, mustBits(t, "11000000"))
	_ = b.SetMask(1, mustBits(t, "00110000"))
	_ = b.SetMask(2, mustBits(t, "00001100"))
	scratch := NewSet(8)
	calls := 0
	emit := func(int, *Set) { calls++ }

	r := b.Replicate(NewSet(8), -1, scratch, emit)
	if calls != 0 || !r.Empty || r != (ReplicateResult{Empty: true}) {
		t.Fatalf("empty set: %d copies, %+v", calls, r)
	}
	// Bit 7 has no route: dropped and counted.
	r = b.Replicate(mustBits(t, "00000001"), -1, scratch, emit)
	if calls != 0 || r.Unrouted != 1 || r.Copies != 0 || r.Empty {
		t.Fatalf("unknown bit: %d copies, %+v", calls, r)
	}
	// Never back to the ingress port: bits behind port 1 arrive on port 1.
	var rec copyRec
	var ctr ReplicateCounters
	ctr.Add(ReplicateResult{Empty: true})
	r = b.Replicate(mustBits(t, "10100001"), 1, scratch, rec.emit)
	ctr.Add(r)
	if ctr.Calls.Load() != 2 || ctr.Empty.Load() != 1 || ctr.Copies.Load() != 1 || ctr.Bits.Load() != 1 ||
		ctr.Looped.Load() != 1 || ctr.Unrouted.Load() != 1 {
		t.Fatalf("counters %d %d %d %d %d %d", ctr.Calls.Load(), ctr.Empty.Load(), ctr.Copies.Load(),
			ctr.Bits.Load(), ctr.Looped.Load(), ctr.Unrouted.Load())
	}
	if !slices.Equal(rec.ports, []int{0}) || r.Looped != 1 || r.Unrouted != 1 || r.Copies != 1 {
		t.Fatalf("ingress: ports %v %+v", rec.ports, r)
	}
	// Only bits behind the ingress: nothing sent.
	r = b.Replicate(mustBits(t, "00110000"), 1, scratch, emit)
	if calls != 0 || r.Looped != 2 || r.Copies != 0 {
		t.Fatalf("all looped: %+v", r)
	}
}

func TestBIFTMaskErrors(t *testing.T) {
	b, _ := NewBIFT(8, 2)
	if err := b.SetMask(0, mustBits(t, "11000000")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMask(1, mustBits(t, "01100000")); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlap accepted: %v", err)
	}
	if err := b.SetMask(LocalPort, mustBits(t, "10000000")); !errors.Is(err, ErrOverlap) {
		t.Fatalf("local overlap accepted: %v", err)
	}
	// Replacing a port's own mask is not an overlap with itself.
	if err := b.SetMask(0, mustBits(t, "01000000")); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMask(2, mustBits(t, "00000001")); !errors.Is(err, ErrParam) {
		t.Fatalf("port 2 of 2 accepted: %v", err)
	}
	if err := b.SetMask(1, NewSet(16)); !errors.Is(err, ErrCapacity) {
		t.Fatalf("capacity mismatch accepted: %v", err)
	}
}

// fig1 builds the Fig. 1 network: s7 on top of s5 and s6; s5 over s1, s2;
// s6 over s3, s4; two servers under each leaf. Nodes 0..6 are s1..s7, 7..14
// are w1..w8; wi holds endpoint i-1.
func fig1() *Topology {
	t := &Topology{Nodes: make([]Node, 15)}
	name := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	for i := range 7 {
		t.Nodes[i].Name = name[i]
	}
	link := func(a, b int) {
		t.Nodes[a].Neighbors = append(t.Nodes[a].Neighbors, b)
		t.Nodes[b].Neighbors = append(t.Nodes[b].Neighbors, a)
	}
	const s1, s2, s3, s4, s5, s6, s7 = 0, 1, 2, 3, 4, 5, 6
	link(s7, s5)
	link(s7, s6)
	link(s5, s1)
	link(s5, s2)
	link(s6, s3)
	link(s6, s4)
	for i := range 8 {
		w := 7 + i
		t.Nodes[w].Name = "w" + string(rune('1'+i))
		t.Nodes[w].Endpoints = []int{i}
		link([]int{s1, s1, s2, s2, s3, s3, s4, s4}[i], w)
	}
	return t
}

func TestComputeBIFTFig1(t *testing.T) {
	tables, err := ComputeAllBIFTs(fig1(), 8)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]string{
		0: {"00111111", "10000000", "01000000"}, // s1: up to s5, w1, w2
		4: {"00001111", "11000000", "00110000"}, // s5: up to s7, s1, s2
		6: {"11110000", "00001111"},             // s7: s5, s6
		5: {"11110000", "00001100", "00000011"}, // s6: s7, s3, s4
	}
	for node, masks := range want {
		for p, m := range masks {
			if got := tables[node].Mask(p).String(); got != m {
				t.Errorf("node %d port %d mask %s, want %s", node, p, got, m)
			}
		}
	}
	// A host's own endpoint is local.
	if got := tables[7].Mask(LocalPort).String(); got != "10000000" {
		t.Errorf("w1 local %s", got)
	}
	// Result dissemination from the root s6 with the root's A-BM as D-BM:
	// one copy toward s7 carrying 11110000, nothing toward s3/s4.
	var rec copyRec
	r := tables[5].Replicate(mustBits(t, "11110000"), -1, NewSet(8), rec.emit)
	if !slices.Equal(rec.ports, []int{0}) || r.Copies != 1 || r.Branch() {
		t.Fatalf("s6 dissemination %v %+v", rec.ports, r)
	}
}

func TestComputeBIFTTieBreakAndErrors(t *testing.T) {
	// A square: 0-1, 0-2, 1-3, 2-3; endpoint 0 on node 3. Two shortest
	// paths from node 0: ports 0 (via 1) and 1 (via 2). Lowest port wins,
	// whatever the listing order of the far side.
	sq := &Topology{Nodes: []Node{
		{Neighbors: []int{1, 2}},
		{Neighbors: []int{3, 0}},
		{Neighbors: []int{0, 3}},
		{Neighbors: []int{2, 1}, Endpoints: []int{0}},
	}}
	b, err := ComputeBIFT(sq, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Mask(0).Contains(0) || b.Mask(1).Contains(0) {
		t.Fatal("tie not broken to the lowest port")
	}
	// Node 3 reaches node 0 via port 0 (node 2) or port 1 (node 1): port 0.
	sq.Nodes[0].Endpoints = []int{5}
	b, _ = ComputeBIFT(sq, 3, 64)
	if !b.Mask(0).Contains(5) {
		t.Fatal("tie from node 3 not port 0")
	}
	// Unreachable endpoint: in no mask.
	iso := &Topology{Nodes: []Node{{}, {Endpoints: []int{3}}}}
	b, _ = ComputeBIFT(iso, 0, 64)
	var rec copyRec
	if r := b.Replicate(fromOracle(t, 64, oracle{3: true}), -1, NewSet(64), rec.emit); r.Unrouted != 1 {
		t.Fatalf("unreachable: %+v", r)
	}
	for name, topo := range map[string]*Topology{
		"asymmetric": {Nodes: []Node{{Neighbors: []int{1}}, {}}},
		"self-loop":  {Nodes: []Node{{Neighbors: []int{0, 0}}}},
		"range":      {Nodes: []Node{{Neighbors: []int{4}}}},
		"dup ep":     {Nodes: []Node{{Endpoints: []int{1}}, {Endpoints: []int{1}}}},
		"ep domain":  {Nodes: []Node{{Endpoints: []int{64}}}},
	} {
		if _, err := ComputeBIFT(topo, 0, 64); !errors.Is(err, ErrTopology) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A 65536-endpoint domain: a spine with 64 leaves of 1024 endpoints, each
// leaf's hosts hanging off it; replication at the spine and at a leaf.
func TestReplicate65536ManyNeighbours(t *testing.T) {
	const n, leaves, perLeaf, hostsPerLeaf = 65536, 64, 1024, 16
	topo := &Topology{}
	add := func(nd Node) int { topo.Nodes = append(topo.Nodes, nd); return len(topo.Nodes) - 1 }
	spine := add(Node{Name: "spine"})
	link := func(a, b int) {
		topo.Nodes[a].Neighbors = append(topo.Nodes[a].Neighbors, b)
		topo.Nodes[b].Neighbors = append(topo.Nodes[b].Neighbors, a)
	}
	owner := make([]int, n) // spine port, leaf port
	leafPort := make([]int, n)
	for l := range leaves {
		leaf := add(Node{})
		link(spine, leaf)
		for h := range hostsPerLeaf {
			var eps []int
			for k := range perLeaf / hostsPerLeaf {
				e := l*perLeaf + h*(perLeaf/hostsPerLeaf) + k
				eps = append(eps, e)
				owner[e] = l
				leafPort[e] = 1 + h
			}
			host := add(Node{Endpoints: eps})
			link(leaf, host)
		}
	}
	tables, err := ComputeAllBIFTs(topo, n)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(21, 22))
	for range 5 {
		dst := randOracle(r, n, 0.01)
		compareReplicate(t, "spine", tables[spine], dst, -1, func(e int) int { return owner[e] })
		// Leaf 3 received on its uplink, port 0.
		compareReplicate(t, "leaf", tables[1+3*(1+hostsPerLeaf)], dst, 0, func(e int) int {
			if owner[e] == 3 {
				return leafPort[e]
			}
			return 0
		})
	}
}

func TestReplicateAllocs(t *testing.T) {
	tables, _ := ComputeAllBIFTs(fig1(), 8)
	d, scratch := mustBits(t, "11111111"), NewSet(8)
	n := 0
	emit := func(port int, sub *Set) { n += sub.Count() }
	var ctr ReplicateCounters
	allocs := alloctest.PerRun(200, func() {
		ctr.Add(tables[6].Replicate(d, -1, scratch, emit))
		ctr.Add(tables[4].Replicate(d, 0, scratch, emit))
	})
	if allocs != 0 {
		t.Fatalf("Replicate allocates %v per run", allocs)
	}
}

// A BIFT is read-only once built: workers replicate through it at once,
// each with its own scratch (run under -race).
func TestReplicateConcurrentReaders(t *testing.T) {
	tables, _ := ComputeAllBIFTs(fig1(), 8)
	d := mustBits(t, "11111111")
	done := make(chan ReplicateResult)
	for range 4 {
		go func() {
			scratch := NewSet(8)
			var r ReplicateResult
			for range 1000 {
				r = tables[6].Replicate(d, -1, scratch, func(int, *Set) {})
			}
			done <- r
		}()
	}
	for range 4 {
		if r := <-done; r.Copies != 2 || r.Bits != 8 {
			t.Errorf("concurrent replicate: %+v", r)
		}
	}
}

package bitmapam

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/parser"
)

func loadTopo(t *testing.T, name string) *deploy.Topology {
	t.Helper()
	b, err := deploy.Embedded(name)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := deploy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// onPath is the naive oracle: the prismd switches on deploy.Path(from, to),
// in order.
func onPath(t *testing.T, topo *deploy.Topology, from, to string) []string {
	t.Helper()
	hops, err := topo.Path(from, to)
	if err != nil {
		t.Fatal(err)
	}
	var r []string
	for _, h := range hops {
		if topo.Nodes[h.Node].Kind == deploy.KindPrismd {
			r = append(r, h.Node)
		}
	}
	return r
}

func setOf(bits int, ids ...int) *bitmapfwd.Set {
	s := bitmapfwd.NewSet(bits)
	for _, id := range ids {
		s.Add(id)
	}
	return s
}

// peerBinding finds, at switch peer, the binding of kind k on the same
// stream whose endpoints mirror (local, peer): the far end of one edge.
func peerBinding(t *testing.T, o *OpPlan, peer string, k parser.BindingKind, stream, local, remote uint16) (*SwitchPlan, int) {
	t.Helper()
	s := o.Switch(peer)
	if s == nil {
		t.Fatalf("binding points at %s, which is not in the plan", peer)
	}
	for i, b := range s.Bindings {
		if b.Kind == k && b.Stream == stream && b.LocalEP == remote && b.PeerEP == local {
			return s, i
		}
	}
	t.Fatalf("switch %s has no %v binding on stream %d mirroring endpoints %d/%d", peer, k, stream, local, remote)
	return nil, 0
}

// multicast replicates d from the root host by following the plan's
// bindings and masks (BIER: a copy per binding whose mask intersects, with
// D-BM AND mask) and returns how often each endpoint was reached, and at
// which host.
func multicast(t *testing.T, o *OpPlan, bits int, d *bitmapfwd.Set) map[int][]string {
	t.Helper()
	got := map[int][]string{}
	root := o.Hosts[o.Root]
	if root.RootOut == nil {
		t.Fatalf("root %s has no RESULT link", o.Root)
	}
	type copyAt struct {
		sw  *SwitchPlan
		set *bitmapfwd.Set
	}
	s, _ := peerBinding(t, o, root.RootOut.PeerName, parser.KindResultIn, root.RootOut.Stream, root.RootOut.SrcEP, root.RootOut.DstEP)
	q := []copyAt{{s, d}}
	for steps := 0; len(q) > 0; steps++ {
		if steps > 10000 {
			t.Fatal("replication does not terminate")
		}
		c := q[0]
		q = q[1:]
		for i, b := range c.sw.Bindings {
			if b.Kind != parser.KindResultOut {
				continue
			}
			m := c.sw.Masks[i]
			if m == nil {
				t.Fatalf("%s binding %d (RESULT_OUT to %s) has no BIFT mask", c.sw.Name, i, c.sw.Peers[i])
			}
			sub := bitmapfwd.NewSet(bits)
			sub.And(c.set, m)
			if sub.IsEmpty() {
				continue
			}
			peer := c.sw.Peers[i]
			if h, ok := o.Hosts[peer]; ok && o.Switch(peer) == nil {
				if h.Down == nil || h.Down.Stream != b.Stream || h.Down.SrcEP != b.LocalEP || h.Down.DstEP != b.PeerEP {
					t.Fatalf("host %s's Down link does not mirror %s binding %d", peer, c.sw.Name, i)
				}
				for e := sub.Next(0); e >= 0; e = sub.Next(e + 1) {
					if !slices.Contains(h.Endpoints, e) {
						t.Errorf("endpoint %d delivered to host %s, which does not hold it", e, peer)
					}
					got[e] = append(got[e], peer)
				}
				continue
			}
			ns, _ := peerBinding(t, o, peer, parser.KindResultIn, b.Stream, b.LocalEP, b.PeerEP)
			q = append(q, copyAt{ns, sub})
		}
	}
	return got
}

// aggregate sends each endpoint's P-BM up from its host along Up/PARENT
// bindings, merging at switches with an A-BM as section 8.7 says, and
// returns the P-BMs the root host receives.
func aggregate(t *testing.T, o *OpPlan, bits int, eps []Endpoint) []*bitmapfwd.Set {
	t.Helper()
	type pkt struct {
		sw   *SwitchPlan
		pbm  *bitmapfwd.Set
		from int // binding index it arrived on
	}
	acc := map[string]*bitmapfwd.Set{}
	var q []pkt
	for _, e := range eps {
		h := o.Hosts[e.Host]
		if h.Up == nil {
			t.Fatalf("host %s has no Up link", e.Host)
		}
		s, i := peerBinding(t, o, h.Up.PeerName, parser.KindContributor, h.Up.Stream, h.Up.SrcEP, h.Up.DstEP)
		q = append(q, pkt{s, setOf(bits, e.ID), i})
	}
	var atRoot []*bitmapfwd.Set
	for len(q) > 0 {
		p := q[0]
		q = q[1:]
		out := p.pbm
		if p.sw.ABM != nil && p.sw.ABM.Intersects(p.pbm) {
			if !p.pbm.SubsetOf(p.sw.ABM) {
				t.Fatalf("%s: P-BM %v not inside A-BM %v", p.sw.Name, p.pbm, p.sw.ABM)
			}
			a := acc[p.sw.Name]
			if a == nil {
				a = bitmapfwd.NewSet(bits)
				acc[p.sw.Name] = a
			}
			if a.Intersects(p.pbm) {
				t.Fatalf("%s: P-BM %v arrives twice", p.sw.Name, p.pbm)
			}
			a.Or(a, p.pbm)
			if !a.Equal(p.sw.ABM) {
				continue
			}
			out = a
		}
		var parent *parser.Binding
		for i := range p.sw.Bindings {
			if p.sw.Bindings[i].Kind == parser.KindParent {
				if parent != nil {
					t.Fatalf("%s has two PARENT bindings", p.sw.Name)
				}
				parent = &p.sw.Bindings[i]
			}
		}
		if parent == nil {
			t.Fatalf("%s has no PARENT binding", p.sw.Name)
		}
		pi := slices.IndexFunc(p.sw.Bindings, func(b parser.Binding) bool { return &b == parent })
		_ = pi
		peer := ""
		for i := range p.sw.Bindings {
			if &p.sw.Bindings[i] == parent {
				peer = p.sw.Peers[i]
			}
		}
		if peer == o.Root {
			ri := o.Hosts[o.Root].RootIn
			if ri == nil || ri.Stream != parent.Stream || ri.SrcEP != parent.LocalEP || ri.DstEP != parent.PeerEP {
				t.Fatalf("root's RootIn does not mirror %s's PARENT", p.sw.Name)
			}
			atRoot = append(atRoot, out)
			continue
		}
		ns, i := peerBinding(t, o, peer, parser.KindContributor, parent.Stream, parent.LocalEP, parent.PeerEP)
		q = append(q, pkt{ns, out, i})
	}
	for n, a := range acc {
		if s := o.Switch(n); !a.Equal(s.ABM) {
			t.Errorf("%s never completed: got %v of A-BM %v", n, a, s.ABM)
		}
	}
	return atRoot
}

// checkStage encodes every switch's STAGE into a whole CONTROL frame and
// decodes it with the parser, which applies every rule of section 5.1, then
// checks the node-state rules the parser cannot (ports, MACs, duplicate
// streams and endpoints).
func checkStage(t *testing.T, topo *deploy.Topology, p *Plan) {
	t.Helper()
	for _, o := range p.Ops {
		for _, s := range o.Switches {
			body, err := p.StageBody(s, parser.MTUJumbo)
			if err != nil {
				t.Fatal(err)
			}
			c := parser.Control{Op: o.Op, Txn: 1, SrcEP: AMEndpoint, Cmd: parser.CmdStage, FragCount: 1, Body: body}
			buf := make([]byte, parser.EthLen+c.Len())
			n, err := c.Encode(buf, parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}})
			if err != nil {
				t.Fatal(err)
			}
			var d parser.Control
			if err := d.Decode(buf[:n], parser.Limits{}); err != nil {
				t.Fatalf("%s: STAGE does not decode: %v", s.Name, err)
			}
			st := d.Stage()
			if st.Context.Collective != parser.CollBitmap || st.Context.Tenant != p.Spec.Tenant {
				t.Errorf("%s: context %+v", s.Name, st.Context)
			}
			ports := len(deploy.Ports(topo, s.Name))
			kinds := map[[2]int]bool{}
			locals := map[uint16]bool{}
			for i := 0; i < st.NBindings(); i++ {
				b := st.Binding(i)
				if int(b.Port) >= ports {
					t.Errorf("%s binding %d: port %d of %d", s.Name, i, b.Port, ports)
				}
				if b.PeerMAC == [6]byte{} || b.PeerMAC[0]&1 != 0 {
					t.Errorf("%s binding %d: peer MAC %x", s.Name, i, b.PeerMAC)
				}
				k := [2]int{int(b.Kind), int(b.Stream)}
				if kinds[k] {
					t.Errorf("%s: two %v bindings share stream %d", s.Name, b.Kind, b.Stream)
				}
				kinds[k] = true
				if b.Kind == parser.KindContributor || b.Kind == parser.KindResultIn {
					if locals[b.LocalEP] {
						t.Errorf("%s: two incoming bindings share local endpoint %d", s.Name, b.LocalEP)
					}
					locals[b.LocalEP] = true
				}
			}
			// The set records decode to the planned sets.
			var it parser.SetRecordIter
			nrec := 0
			for r, ok := st.NextSet(&it); ok; r, ok = st.NextSet(&it) {
				nrec++
				got := bitmapfwd.NewSet(p.Bits)
				if err := bitmapfwd.Decode(r.Set, got, bitmapfwd.Params{Encoding: bitmapfwd.Encoding(r.Encoding)}); err != nil {
					t.Fatalf("%s record %d: %v", s.Name, r.BindingIndex, err)
				}
				want := s.ABM
				if r.BindingIndex != parser.OwnSet {
					want = s.Masks[int(r.BindingIndex)]
				}
				if !got.Equal(want) {
					t.Errorf("%s record %d: decodes to %v, planned %v", s.Name, r.BindingIndex, got, want)
				}
			}
			if nrec != len(s.Masks)+btoi(s.ABM != nil) {
				t.Errorf("%s: %d set records, want %d masks + A-BM", s.Name, nrec, len(s.Masks))
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestMulticastPlan(t *testing.T) {
	for _, tc := range []struct {
		topo, src string
	}{{"spine-leaf", "h1"}, {"spine-leaf", "h4"}, {"fat-tree", "h1"}, {"fat-tree", "h6"}} {
		t.Run(tc.topo+"-"+tc.src, func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			var recv []string
			for _, h := range topo.Hosts() {
				if h != tc.src {
					recv = append(recv, h)
				}
			}
			spec := JobSpec{Kind: Multicast, Op: parser.OpKey{Job: 9, Group: 1, GroupGen: 1, Op: 1, OpGen: 1}, Tenant: 7,
				Endpoints: HostEndpoints(recv, 1), Root: tc.src, VectorLen: 100000}
			p, err := Compute(topo, spec)
			if err != nil {
				t.Fatal(err)
			}
			o := p.Ops[0]
			checkStage(t, topo, p)
			all := setOf(p.Bits)
			for _, e := range spec.Endpoints {
				all.Add(e.ID)
			}
			// Each endpoint reached exactly once, at its own host.
			got := multicast(t, o, p.Bits, all)
			for _, e := range spec.Endpoints {
				if len(got[e.ID]) != 1 || got[e.ID][0] != e.Host {
					t.Errorf("endpoint %d (%s) reached at %v", e.ID, e.Host, got[e.ID])
				}
			}
			// Every subset too (the repair multicasts).
			for mask := 1; mask < 1<<len(spec.Endpoints); mask += 5 {
				d := setOf(p.Bits)
				for i, e := range spec.Endpoints {
					if mask&(1<<i) != 0 {
						d.Add(e.ID)
					}
				}
				got := multicast(t, o, p.Bits, d)
				for _, e := range spec.Endpoints {
					want := 0
					if d.Contains(e.ID) {
						want = 1
					}
					if len(got[e.ID]) != want {
						t.Errorf("D-BM %v: endpoint %d reached %d times", d, e.ID, len(got[e.ID]))
					}
				}
			}
			// A-BM = the receivers below, by the naive path oracle.
			for _, s := range o.Switches {
				want := setOf(p.Bits)
				for _, e := range spec.Endpoints {
					if slices.Contains(onPath(t, topo, tc.src, e.Host), s.Name) {
						want.Add(e.ID)
					}
				}
				if s.ABM == nil || !s.ABM.Equal(want) {
					t.Errorf("%s: A-BM %v, want %v", s.Name, s.ABM, want)
				}
				// Masks: the receivers whose path leaves s toward that peer.
				for i, m := range s.Masks {
					want := setOf(p.Bits)
					for _, e := range spec.Endpoints {
						path := onPath(t, topo, tc.src, e.Host)
						j := slices.Index(path, s.Name)
						next := e.Host
						if j >= 0 && j+1 < len(path) {
							next = path[j+1]
						}
						if j >= 0 && next == s.Peers[i] {
							want.Add(e.ID)
						}
					}
					if !m.Equal(want) {
						t.Errorf("%s mask toward %s: %v, want %v", s.Name, s.Peers[i], m, want)
					}
				}
			}
			// One merged ACK at the source.
			acks := aggregate(t, o, p.Bits, spec.Endpoints)
			if len(acks) != 1 || !acks[0].Equal(all) {
				t.Errorf("source receives %v, want one ACK %v", acks, all)
			}
			// Without aggregation: no A-BM anywhere, N ACKs.
			spec.NoAggregation = true
			p2, err := Compute(topo, spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range p2.Ops[0].Switches {
				if s.ABM != nil {
					t.Errorf("%s has an A-BM without aggregation", s.Name)
				}
			}
			if acks := aggregate(t, p2.Ops[0], p2.Bits, spec.Endpoints); len(acks) != len(spec.Endpoints) {
				t.Errorf("without aggregation the source receives %d ACKs, want %d", len(acks), len(spec.Endpoints))
			}
		})
	}
}

func TestAllReducePlan(t *testing.T) {
	for _, tc := range []struct {
		topo, root  string
		perHost     int
		aggregators []string
	}{
		{"spine-leaf", "h1", 1, nil},
		{"spine-leaf", "h3", 2, nil},
		{"fat-tree", "h1", 1, nil},
		{"fat-tree", "h8", 2, nil},
		// A VAT on two switches only: the dissemination tree differs.
		{"fat-tree", "h1", 1, []string{"a3"}},
		{"spine-leaf", "h1", 1, []string{"s1"}},
	} {
		t.Run(fmt.Sprint(tc.topo, "-", tc.root, "-", tc.perHost, tc.aggregators), func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			spec := JobSpec{Kind: AllReduce, Op: parser.OpKey{Job: 3, Group: 1, GroupGen: 1, Op: 2, OpGen: 1},
				Endpoints: HostEndpoints(topo.Hosts(), tc.perHost), Root: tc.root, VectorLen: 4096, Aggregators: tc.aggregators}
			p, err := Compute(topo, spec)
			if err != nil {
				t.Fatal(err)
			}
			o := p.Ops[0]
			checkStage(t, topo, p)
			var remote []Endpoint
			rootEPs := setOf(p.Bits)
			for _, e := range spec.Endpoints {
				if e.Host == tc.root {
					rootEPs.Add(e.ID)
				} else {
					remote = append(remote, e)
				}
			}
			if got := setOf(p.Bits, o.Hosts[tc.root].Endpoints...); !got.Equal(rootEPs) {
				t.Errorf("root endpoints %v, want %v", got, rootEPs)
			}
			// The root receives every remote endpoint exactly once, in one
			// merged contribution (the VAT root's A-BM).
			acks := aggregate(t, o, p.Bits, remote)
			want := setOf(p.Bits)
			for _, e := range remote {
				want.Add(e.ID)
			}
			if len(acks) != 1 || !acks[0].Equal(want) {
				t.Errorf("root receives %v, want one %v", acks, want)
			}
			// The result reaches every remote endpoint once.
			got := multicast(t, o, p.Bits, want)
			for _, e := range remote {
				if len(got[e.ID]) != 1 {
					t.Errorf("endpoint %d reached %v", e.ID, got[e.ID])
				}
			}
			// A-BM = endpoints below in the VAT: the hosts whose path to the
			// VAT root passes the switch (naive oracle), for VAT switches.
			var vatRoot string
			for _, s := range o.Switches {
				for i, b := range s.Bindings {
					if b.Kind == parser.KindParent && s.Peers[i] == tc.root {
						vatRoot = s.Name
					}
				}
			}
			for _, s := range o.Switches {
				if !s.VAT {
					if s.ABM != nil {
						t.Errorf("%s is not in the VAT but has A-BM %v", s.Name, s.ABM)
					}
					continue
				}
				if tc.aggregators != nil && s.Name != vatRoot && !slices.Contains(tc.aggregators, s.Name) {
					t.Errorf("%s aggregates but is not an allowed aggregator", s.Name)
				}
				w := setOf(p.Bits)
				for _, e := range remote {
					if slices.Contains(onPath(t, topo, e.Host, vatRoot), s.Name) {
						w.Add(e.ID)
					}
				}
				if !s.ABM.Equal(w) {
					t.Errorf("%s: A-BM %v, want %v", s.Name, s.ABM, w)
				}
			}
			if tc.aggregators != nil {
				vat, dis := 0, 0
				for _, s := range o.Switches {
					vat += btoi(s.VAT)
					dis += btoi(s.Dissemination)
				}
				if vat >= dis {
					t.Errorf("restricted VAT has %d switches, dissemination %d: the trees should differ", vat, dis)
				}
			}
		})
	}
}

func TestMoEPlan(t *testing.T) {
	topo := loadTopo(t, "fat-tree")
	spec := JobSpec{Kind: MoE, Op: parser.OpKey{Job: 4, Group: 1, GroupGen: 1, Op: 10, OpGen: 1},
		Endpoints: HostEndpoints(topo.Hosts(), 2), ActiveK: 4, VectorLen: 300}
	p, err := Compute(topo, spec)
	if err != nil {
		t.Fatal(err)
	}
	checkStage(t, topo, p)
	if len(p.Ops) != len(topo.Hosts()) {
		t.Fatalf("%d operations, want one per source host", len(p.Ops))
	}
	ops := map[uint16]bool{}
	for _, o := range p.Ops {
		ops[o.Op.Op] = true
		for _, s := range o.Switches {
			if s.ABM != nil {
				t.Errorf("MoE switch %s has an A-BM: the combine tree is self-installed", s.Name)
			}
		}
		// Every top-4 selection of remote experts reaches each expert once.
		var remote []int
		for _, e := range spec.Endpoints {
			if e.Host != o.Root {
				remote = append(remote, e.ID)
			}
		}
		sort.Ints(remote)
		for i := 0; i+3 < len(remote); i += 3 {
			d := setOf(p.Bits, remote[i], remote[i+1], remote[(i+5)%len(remote)], remote[(i+9)%len(remote)])
			got := multicast(t, o, p.Bits, d)
			for e := d.Next(0); e >= 0; e = d.Next(e + 1) {
				if len(got[e]) != 1 {
					t.Errorf("source %s: expert %d reached %v", o.Root, e, got[e])
				}
			}
		}
		// Experts answer on the mirror of the dispatch binding.
		for _, h := range o.Hosts {
			if h.Host == o.Root {
				continue
			}
			if h.Up == nil || h.Down == nil || h.Up.Stream != h.Down.Stream || h.Up.SrcEP != h.Down.DstEP {
				t.Errorf("source %s: host %s Up %+v does not mirror Down %+v", o.Root, h.Host, h.Up, h.Down)
			}
		}
	}
	if len(ops) != len(p.Ops) {
		t.Errorf("operations share IDs: %v", ops)
	}
}

// TestLargeDomain plans a multicast to 65536 endpoints (256 hosts with 256
// endpoints each) in process: the chooser picks a compact encoding, every
// set record decodes back, every endpoint is reached exactly once.
// largeTopo is src - sp - 4 aggregation switches - 4 leaves each - 16
// hosts each (256 hosts, sorted), links at MTU 9000: with 256 endpoints per
// host the top switch holds 4 masks of 16384 bits.
func largeTopo(t *testing.T) (*deploy.Topology, []string) {
	const aggs, leavesPer, hostsPer = 4, 4, 16
	nodes := []deploy.Node{{Name: "src", Kind: deploy.KindHost}, {Name: "sp", Kind: deploy.KindPrismd}}
	links := []deploy.Link{{A: deploy.Endpoint{Node: "src", Iface: "eth0"}, B: deploy.Endpoint{Node: "sp", Iface: "p0"}}}
	var hosts []string
	for a := 0; a < aggs; a++ {
		an := fmt.Sprintf("a%d", a)
		nodes = append(nodes, deploy.Node{Name: an, Kind: deploy.KindPrismd})
		links = append(links, deploy.Link{A: deploy.Endpoint{Node: an, Iface: "up"}, B: deploy.Endpoint{Node: "sp", Iface: fmt.Sprintf("p%d", a+1)}})
		for l := 0; l < leavesPer; l++ {
			ln := fmt.Sprintf("l%d", a*leavesPer+l)
			nodes = append(nodes, deploy.Node{Name: ln, Kind: deploy.KindPrismd})
			links = append(links, deploy.Link{A: deploy.Endpoint{Node: ln, Iface: "up"}, B: deploy.Endpoint{Node: an, Iface: fmt.Sprintf("d%d", l)}})
			for h := 0; h < hostsPer; h++ {
				hn := fmt.Sprintf("h%s_%d", ln, h)
				hosts = append(hosts, hn)
				nodes = append(nodes, deploy.Node{Name: hn, Kind: deploy.KindHost})
				links = append(links, deploy.Link{A: deploy.Endpoint{Node: hn, Iface: "eth0"}, B: deploy.Endpoint{Node: ln, Iface: fmt.Sprintf("d%d", h)}})
			}
		}
	}
	sort.Strings(hosts)
	topo, err := deploy.Build("big", 9000, nodes, links)
	if err != nil {
		t.Fatal(err)
	}
	return topo, hosts
}

// TestDenseAllReduceNeedsBoundaries: a dense AllReduce over 65536 endpoints
// at MTU 1500 is refused at plan time, naming the job size, the MTU and the
// remedies (domain boundaries; here MTU 9000 would also do); the same job
// at MTU 9000, and a 1024-endpoint job at 1500, plan.
func TestDenseAllReduceNeedsBoundaries(t *testing.T) {
	topo, hosts := largeTopo(t)
	spec := JobSpec{Kind: AllReduce, Op: parser.OpKey{Job: 2, Group: 1, GroupGen: 1, Op: 1, OpGen: 1},
		Endpoints: HostEndpoints(hosts, 256), Root: "src", VectorLen: 1 << 20, MTU: 1500}
	_, err := Compute(topo, spec)
	if err == nil || !errors.Is(err, ErrSpec) {
		t.Fatalf("dense 64k AllReduce at MTU 1500: %v", err)
	}
	for _, want := range []string{"job of 65536 endpoints at MTU 1500", "more than the MTU", "domain boundaries", "8.10", "use MTU 9000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Log(err)
	// The switch it names: in the same job at 9000 (where it plans), its
	// A-BM holds that many endpoints and, with one exact value, needs more
	// than 1500 bytes on the wire (counted from the section 6 and 8 layouts).
	m := regexp.MustCompile(`switch (\S+) aggregates (\d+) of them`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q names no switch", err)
	}
	spec.MTU = 9000
	p, err := Compute(topo, spec)
	if err != nil {
		t.Fatalf("dense 64k AllReduce at MTU 9000: %v", err)
	}
	sw := p.Ops[0].Switch(m[1])
	if sw == nil || sw.ABM == nil || fmt.Sprint(sw.ABM.Count()) != m[2] {
		t.Fatalf("switch %s with %s endpoints is not in the 9000 plan", m[1], m[2])
	}
	_, body, err := EncodeRecord(sw.ABM, p.Choice.Params, int(sw.Context.MaxTerms))
	if err != nil {
		t.Fatal(err)
	}
	if wire := 2 + 40 + 16 + len(body) + 4 + 1 + int(sw.Context.KulischWidth)/8; wire <= 1500 {
		t.Fatalf("switch %s's partial is %d bytes: the refusal at 1500 was wrong", m[1], wire)
	}
	small := spec
	small.MTU, small.Endpoints = 1500, HostEndpoints(hosts[:4], 256)
	if _, err := Compute(topo, small); err != nil {
		t.Fatalf("1024 endpoints at MTU 1500: %v", err)
	}
	// A multicast with ACK aggregation has no values: its merged ACK is the
	// A-BM alone, refused the same way at 1500.
	mc := JobSpec{Kind: Multicast, Op: spec.Op, Endpoints: spec.Endpoints, Root: "src", VectorLen: 1 << 20, MTU: 1500}
	if _, err := Compute(topo, mc); err == nil || !strings.Contains(err.Error(), "merged ACK") {
		t.Fatalf("dense 64k multicast with A-BMs at MTU 1500: %v", err)
	}
}

func TestLargeDomain(t *testing.T) {
	const perHost = 256
	topo, hosts := largeTopo(t)
	spec := JobSpec{Kind: Multicast, Op: parser.OpKey{Job: 1, Group: 1, GroupGen: 1, Op: 1, OpGen: 1},
		Endpoints: HostEndpoints(hosts, perHost), Root: "src", VectorLen: 1 << 20, MTU: 9000}
	// A pre-configured A-BM of all 65536 endpoints is 8 KiB in any
	// encoding; with the spine's 16 masks its STAGE cannot fit one jumbo
	// frame, and the planner says so instead of sending it.
	pa, err := Compute(topo, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pa.StageBody(pa.Ops[0].Switch("sp"), 9000); err == nil || !strings.Contains(err.Error(), "link MTU") {
		t.Errorf("dense 64k A-BM STAGE: got %v, want a link MTU error", err)
	}
	if _, err := pa.StageBody(pa.Ops[0].Switch("l3"), 9000); err != nil {
		t.Errorf("leaf STAGE: %v", err)
	}
	// Self-installed ACK trees (no A-BM) fit.
	spec.NoAggregation = true
	p, err := Compute(topo, spec)
	if err != nil {
		t.Fatal(err)
	}
	if p.Bits != 65536 {
		t.Fatalf("bit space %d", p.Bits)
	}
	t.Logf("65536 endpoints, all active: %v, %d set IDs, worst body %d bytes", p.Choice.Encoding, p.Choice.SetCount, p.Choice.MaxBodyBytes)
	checkStage(t, topo, p)
	for _, s := range p.Ops[0].Switches {
		body, err := p.StageBody(s, 9000)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name == "sp" || s.Name == "l0" {
			t.Logf("%s STAGE: %d bytes, %d bindings", s.Name, len(body), len(s.Bindings))
		}
	}
	// A full D-BM spans 16 FLAT Set IDs: one body per set.
	full := setOf(p.Bits)
	for _, e := range spec.Endpoints {
		full.Add(e.ID)
	}
	bodies, err := FlatBodies(full, p.Choice.WordCount)
	if err != nil || len(bodies) != p.Choice.SetCount {
		t.Errorf("full set: %d FLAT bodies (%v), want %d", len(bodies), err, p.Choice.SetCount)
	}
	back := setOf(p.Bits)
	for _, b := range bodies {
		part := setOf(p.Bits)
		if err := bitmapfwd.DecodeFlat(b, part); err != nil {
			t.Fatal(err)
		}
		if back.Intersects(part) {
			t.Error("FLAT bodies overlap")
		}
		back.Or(back, part)
	}
	if !back.Equal(full) {
		t.Error("FLAT bodies do not cover the set")
	}
	all := setOf(p.Bits)
	for _, e := range spec.Endpoints {
		all.Add(e.ID)
	}
	got := multicast(t, p.Ops[0], p.Bits, all)
	if len(got) != 65536 {
		t.Fatalf("%d endpoints reached, want 65536", len(got))
	}
	for e, at := range got {
		if len(at) != 1 {
			t.Fatalf("endpoint %d reached %d times", e, len(at))
		}
	}
	// Sparse MoE-like sets in the same domain: LIST when K is tiny.
	spec2 := spec
	spec2.Kind, spec2.ActiveK, spec2.Root = MoE, 8, ""
	spec2.Sources = []string{"src"}
	p2, err := Compute(topo, spec2)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Choice.Encoding != bitmapfwd.List {
		t.Errorf("64k domain, K=8: chose %v, want LIST", p2.Choice.Encoding)
	}
	d := setOf(p2.Bits, 5, 700, 40000, 65535)
	enc, body, err := EncodeSet(d, p2.Choice.Params, 8)
	if err != nil || enc != bitmapfwd.List || len(body) != 4+4*4 {
		t.Errorf("K=4 set: %v %d bytes %v", enc, len(body), err)
	}
	hits := multicast(t, p2.Ops[0], p2.Bits, d)
	if len(hits) != 4 {
		t.Errorf("sparse D-BM reached %v", hits)
	}
}

func TestSpecErrors(t *testing.T) {
	topo := loadTopo(t, "spine-leaf")
	base := JobSpec{Kind: Multicast, Endpoints: HostEndpoints([]string{"h2", "h3"}, 1), Root: "h1", VectorLen: 10}
	for name, mut := range map[string]func(*JobSpec){
		"no kind":         func(s *JobSpec) { s.Kind = 0 },
		"no endpoints":    func(s *JobSpec) { s.Endpoints = nil },
		"dup endpoint":    func(s *JobSpec) { s.Endpoints = append(s.Endpoints, Endpoint{ID: 0, Host: "h4"}) },
		"unknown host":    func(s *JobSpec) { s.Endpoints[0].Host = "h9" },
		"switch as host":  func(s *JobSpec) { s.Root = "s1" },
		"receiver=source": func(s *JobSpec) { s.Endpoints[0].Host = "h1" },
		"bad MTU":         func(s *JobSpec) { s.MTU = 1400 },
		"no vector":       func(s *JobSpec) { s.VectorLen = 0 },
		"bad aggregator":  func(s *JobSpec) { s.Aggregators = []string{"h2"} },
	} {
		s := base
		s.Endpoints = append([]Endpoint(nil), base.Endpoints...)
		mut(&s)
		if _, err := Compute(topo, s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

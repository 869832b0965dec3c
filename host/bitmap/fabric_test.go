package bitmap

// An in-memory fabric of fake switches that implement docs/protocol.md
// section 8 from a bitmapam plan's STAGE content (bindings, A-BMs, BIFT
// masks): binding admission, BIER replication with D-BM AND mask, C-BM soft
// state on INSTALL at branch nodes, aggregation against the A-BM or C-BM with
// exact sums, PARTIAL on the context timeout, unchanged forwarding without
// state, and L2 forwarding of frames not addressed to a switch. Links can drop
// and duplicate frames. It is the stand-in for engine/bitmap, which is written
// concurrently from the same section, so the host protocols are tested
// without root.

import (
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/deploy"
	ebitmap "github.com/prismd/prismd/engine/bitmap"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

type delivery struct {
	node, iface string
	frame       []byte
}

type fabric struct {
	t     testing.TB
	topo  *deploy.Topology
	plan  *bitmapam.Plan
	q     chan delivery
	hosts map[string]*fakeConn
	sw    map[string]*fakeSwitch
	eng   map[string]*engSwitch // engine_test.go: real engine/bitmap shards instead
	// swKeys is the engine switches' keyring and hostKeys each host's job
	// key (auth_test.go: withKeys); nil: nobody signs.
	swKeys   *ebitmap.Keyring
	hostKeys map[string][]byte
	owner    map[[6]byte]string
	timeout  time.Duration

	mu        sync.Mutex
	rng       *rand.Rand
	loss, dup float64
	// drop, when set (under mu), sees every frame put on a link by node
	// and drops it by returning true: targeted losses.
	drop    func(node string, frame []byte) bool
	dropped int
	// toRoot counts DATA frames delivered to each host (ACKs at a source).
	delivered map[string]int
	stop      chan struct{}
	wg        sync.WaitGroup
	pending   []delivery // frames switches emitted, owned by the fabric goroutine
}

func newFabric(t testing.TB, topo *deploy.Topology, plan *bitmapam.Plan, loss, dup float64, seed uint64) *fabric {
	return newFabricWith(t, topo, plan, loss, dup, seed, false)
}

// newFabricWith is newFabric; with engine the switches are engine/bitmap
// Shards staged from the plan (engine_test.go), not the fake. opts adjust
// the fabric before its switches are built.
func newFabricWith(t testing.TB, topo *deploy.Topology, plan *bitmapam.Plan, loss, dup float64, seed uint64, engine bool, opts ...func(*fabric)) *fabric {
	f := &fabric{t: t, topo: topo, plan: plan, q: make(chan delivery, 1<<16), hosts: map[string]*fakeConn{},
		sw: map[string]*fakeSwitch{}, owner: map[[6]byte]string{}, rng: rand.New(rand.NewPCG(seed, 1)),
		loss: loss, dup: dup, delivered: map[string]int{}, stop: make(chan struct{})}
	tm := plan.Spec.TimeoutMS
	if tm == 0 {
		tm = bitmapam.DefaultTimeoutMS
	}
	f.timeout = time.Duration(tm) * time.Millisecond
	for _, n := range topo.NodeNames() {
		f.owner[topo.MAC(n, deploy.NodeMACIface)] = n
		for _, ifc := range topo.Nodes[n].Ifaces {
			f.owner[topo.MAC(n, ifc)] = n
		}
	}
	for _, n := range topo.NodesOf(deploy.KindPrismd) {
		s := &fakeSwitch{name: n, f: f, ctxs: map[parser.OpKey]*fctx{}, pids: map[[2]int]uint32{}}
		for _, o := range plan.Ops {
			if sp := o.Switch(n); sp != nil {
				s.ctxs[o.Op] = &fctx{op: o.Op, sp: sp, rounds: map[uint64]*fround{}, soft: map[uint64]softEntry{}}
			}
		}
		f.sw[n] = s
	}
	for _, o := range opts {
		o(f)
	}
	if engine {
		f.eng = newEngSwitches(t, f)
	}
	f.wg.Add(1)
	go f.run()
	t.Cleanup(f.close)
	return f
}

func (f *fabric) close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	f.wg.Wait()
}

// conn returns host's Conn on its first interface.
func (f *fabric) conn(host string) *fakeConn {
	ifc := f.topo.Nodes[host].Ifaces[0]
	m := f.topo.MAC(host, ifc)
	c := &fakeConn{f: f, host: host, iface: ifc, mac: net.HardwareAddr(m[:]), in: make(chan []byte, 1<<14), closed: make(chan struct{})}
	f.mu.Lock()
	f.hosts[host] = c
	f.mu.Unlock()
	return c
}

// newPort opens a Port on host's Conn with the host's job key, if any.
func (f *fabric) newPort(host string) *Port {
	p := NewPort(f.conn(host))
	if k := f.hostKeys[host]; k != nil {
		if err := p.SetKey(f.plan.Spec.Op.Job, k); err != nil {
			f.t.Fatal(err)
		}
	}
	return p
}

// transmit puts a frame on the link of node:iface, with loss and dup.
// Hosts call it; switches (inside the fabric goroutine) call forward, which
// never blocks: a switch blocking on its own queue would deadlock the fabric.
func (f *fabric) transmit(node, iface string, frame []byte) { f.put(node, iface, frame, false) }

func (f *fabric) forward(node, iface string, frame []byte) { f.put(node, iface, frame, true) }

func (f *fabric) put(node, iface string, frame []byte, inLoop bool) {
	peer, ok := f.topo.Peer(deploy.Endpoint{Node: node, Iface: iface})
	if !ok {
		return
	}
	f.mu.Lock()
	drop := f.rng.Float64() < f.loss || f.drop != nil && f.drop(node, frame)
	dup := f.rng.Float64() < f.dup
	if drop {
		f.dropped++
	}
	f.mu.Unlock()
	if drop {
		return
	}
	n := 1
	if dup {
		n = 2
	}
	for i := 0; i < n; i++ {
		d := delivery{peer.Node, peer.Iface, append([]byte(nil), frame...)}
		if inLoop {
			f.pending = append(f.pending, d)
			continue
		}
		select {
		case f.q <- d:
		case <-f.stop:
			return
		}
	}
}

func (f *fabric) run() {
	defer f.wg.Done()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		var d delivery
		if len(f.pending) > 0 {
			d = f.pending[0]
			f.pending = f.pending[1:]
		} else {
			select {
			case <-f.stop:
				return
			case d = <-f.q:
			case now := <-tick.C:
				f.expire(now)
				continue
			}
		}
		f.deliver(d)
		// Timers fire even under load.
		select {
		case now := <-tick.C:
			f.expire(now)
		default:
		}
	}
}

// expire runs every switch's timers.
func (f *fabric) expire(now time.Time) {
	for _, n := range f.topo.NodesOf(deploy.KindPrismd) {
		if e := f.eng[n]; e != nil {
			e.tick(now)
			continue
		}
		f.sw[n].expire(now)
	}
}

func (f *fabric) deliver(d delivery) {
	if e := f.eng[d.node]; e != nil {
		e.receive(d.iface, d.frame)
		return
	}
	if s := f.sw[d.node]; s != nil {
		s.receive(d.iface, d.frame)
		return
	}
	f.mu.Lock()
	c := f.hosts[d.node]
	f.mu.Unlock()
	if c == nil || string(d.frame[0:6]) != string(c.mac) {
		return
	}
	if parser.Class(d.frame[parser.CWOff+1]) == parser.ClassData {
		f.mu.Lock()
		f.delivered[d.node]++
		f.mu.Unlock()
	}
	select {
	case c.in <- d.frame:
	default:
	}
}

func (f *fabric) dataDelivered(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delivered[host]
}

type fakeConn struct {
	f      *fabric
	host   string
	iface  string
	mac    net.HardwareAddr
	in     chan []byte
	once   sync.Once
	closed chan struct{}
}

func (c *fakeConn) ReadFrame(b []byte) (int, error) {
	select {
	case fr := <-c.in:
		return copy(b, fr), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *fakeConn) WriteFrame(b []byte) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	mtu := c.f.plan.Spec.MTU
	if mtu == 0 {
		mtu = parser.MTUDefault
	}
	if len(b)-parser.EthLen > mtu {
		c.f.t.Errorf("%s sent a %d-byte frame, above the MTU %d", c.host, len(b)-parser.EthLen, mtu)
	}
	c.f.transmit(c.host, c.iface, b)
	return nil
}

func (c *fakeConn) MAC() net.HardwareAddr { return c.mac }
func (c *fakeConn) Close() error          { c.once.Do(func() { close(c.closed) }); return nil }

type softEntry struct {
	cbm      *bitmapfwd.Set
	deadline time.Time
}

type fround struct {
	agg    *tokenAgg
	target *bitmapfwd.Set
	start  time.Time
	soft   bool
}

type fctx struct {
	op     parser.OpKey
	sp     *bitmapam.SwitchPlan
	rounds map[uint64]*fround
	soft   map[uint64]softEntry
}

// timeout is the context's Timeout: PARTIAL deadline and soft-state life.
func (c *fctx) timeout() time.Duration {
	return time.Duration(c.sp.Context.TimeoutMs) * time.Millisecond
}

type fakeSwitch struct {
	name string
	f    *fabric
	ctxs map[parser.OpKey]*fctx
	pids map[[2]int]uint32
	// installs and merges count section 8 events, for tests.
	installs, merges, partials, forwards int
}

func (s *fakeSwitch) port(iface string) int { return deploy.PortIndex(s.f.topo, s.name, iface) }

func (s *fakeSwitch) local(mac []byte) bool {
	return s.f.owner[[6]byte(mac)] == s.name
}

func (s *fakeSwitch) receive(iface string, fr []byte) {
	if len(fr) < parser.EthLen || !s.local(fr[0:6]) {
		// Ordinary L2 forwarding toward the owner of the destination MAC.
		dst, ok := s.f.owner[[6]byte(fr[0:6])]
		if !ok {
			return
		}
		hops, err := s.f.topo.Path(s.name, dst)
		if err != nil || len(hops) < 2 {
			return
		}
		s.f.forward(s.name, hops[0].Out, fr)
		return
	}
	var d parser.Data
	if d.Decode(fr, parser.Limits{}) != nil || d.Flags&parser.FlagExt == 0 {
		return
	}
	c := s.ctxs[d.Op]
	if c == nil || d.Ext.Tenant != c.sp.Context.Tenant {
		return
	}
	want := parser.KindContributor
	if d.Class == parser.ClassResult {
		want = parser.KindResultIn
	}
	in := -1
	for i, b := range c.sp.Bindings {
		if b.Kind == want && b.Stream == d.Stream && b.LocalEP == d.DstEP && b.PeerEP == d.SrcEP &&
			int(b.Port) == s.port(iface) && string(b.PeerMAC[:]) == string(fr[6:12]) {
			in = i
		}
	}
	if in < 0 {
		return
	}
	set := bitmapfwd.NewSet(s.f.plan.Bits)
	if bitmapfwd.Decode(d.Ext.Set, set, bitmapfwd.Params{Encoding: bitmapfwd.Encoding(d.Ext.Encoding)}) != nil {
		return
	}
	now := time.Now()
	if d.Class == parser.ClassResult {
		s.replicate(c, &d, set, now)
		return
	}
	s.aggregate(c, &d, set, fr, now)
}

// replicate is section 8.8.
func (s *fakeSwitch) replicate(c *fctx, d *parser.Data, dbm *bitmapfwd.Set, now time.Time) {
	sent := bitmapfwd.NewSet(dbm.Cap())
	copies := 0
	for i, b := range c.sp.Bindings {
		m := c.sp.Masks[i]
		if b.Kind != parser.KindResultOut || m == nil {
			continue
		}
		sub := bitmapfwd.NewSet(dbm.Cap())
		sub.And(dbm, m)
		if sub.IsEmpty() {
			continue
		}
		copies++
		sent.Or(sent, sub)
		s.emit(c, i, d, sub, d.Ext.XFlags, nil)
	}
	if copies >= 2 && d.Ext.XFlags&parser.XFlagInstall != 0 {
		s.installs++
		c.soft[d.Ext.Token] = softEntry{cbm: sent, deadline: now.Add(c.timeout())}
	}
}

// aggregate is sections 8.7 / 8.9.
func (s *fakeSwitch) aggregate(c *fctx, d *parser.Data, pbm *bitmapfwd.Set, fr []byte, now time.Time) {
	tok := d.Ext.Token
	var target *bitmapfwd.Set
	soft := false
	if e, ok := c.soft[tok]; ok && now.Before(e.deadline) {
		target, soft = e.cbm, true
	} else if c.sp.ABM != nil {
		target = c.sp.ABM
	}
	parent := -1
	for i, b := range c.sp.Bindings {
		if b.Kind == parser.KindParent {
			parent = i
		}
	}
	if target == nil || !target.Intersects(pbm) {
		// Not a merge point for this token: forward unchanged upward.
		if parent >= 0 {
			s.forwards++
			s.emit(c, parent, d, pbm, d.Ext.XFlags, nil)
		}
		return
	}
	if !pbm.SubsetOf(target) {
		return // bad_endpoint
	}
	r := c.rounds[tok]
	if r == nil {
		r = &fround{target: target, start: now, soft: soft,
			agg: newTokenAgg(int(d.First), int(d.Count), int(c.sp.Context.KulischWidth), target)}
		c.rounds[tok] = r
	}
	var x rx
	x.d, x.set, x.raw = *d, pbm, fr
	r.agg.add(&x, now)
	if r.agg.complete() {
		s.merges++
		s.flush(c, tok, r, parent, false)
	}
}

// flush emits a round's merged (or PARTIAL) DATA on the parent binding and
// forgets the round and its soft state.
func (s *fakeSwitch) flush(c *fctx, tok uint64, r *fround, parent int, partial bool) {
	delete(c.rounds, tok)
	if r.soft {
		delete(c.soft, tok)
	}
	ps, got := r.agg.chosen()
	if parent < 0 || got.IsEmpty() {
		return
	}
	xf := uint8(0)
	if partial {
		xf = parser.XFlagPartial
	}
	w := r.agg.w
	var vals []byte
	if r.agg.n > 0 {
		acc, _ := kulisch.NewVector(r.agg.n, w)
		buf := make([]byte, kulisch.WireSize(w))
		for _, p := range ps {
			for i := 0; i < r.agg.n; i++ {
				if p.vec.PutWire(buf, i) == nil {
					_ = acc.MergeKulisch(i, buf)
				}
			}
		}
		for i := 0; i < r.agg.n; i++ {
			b, _ := acc.AppendWire(nil, i)
			vals = append(vals, b...)
		}
	}
	d := parser.Data{Class: parser.ClassData, First: uint32(r.agg.first), Ext: parser.Ext{Token: tok}}
	wd := kulisch.WireSize(w)
	emitPart := func(first, n int) {
		d.First = uint32(first)
		g := []parser.Group{{Format: parser.FormatKulisch, KBytes: uint16(w / 8), Count: uint16(n), Values: vals[(first-r.agg.first)*wd : (first-r.agg.first+n)*wd]}}
		s.emit(c, parent, &d, got, xf, g)
	}
	switch {
	case r.agg.n == 0:
		s.emit(c, parent, &d, got, xf, []parser.Group{})
	case c.sp.Bindings[parent].Flags&parser.BindingFlagRank != 0 && r.agg.n > 1:
		// Toward a host: two frames, so the host's multi-frame path runs.
		h := r.agg.n / 2
		emitPart(r.agg.first, h)
		emitPart(r.agg.first+h, r.agg.n-h)
	default:
		// Between fake switches one (possibly oversize) frame.
		emitPart(r.agg.first, r.agg.n)
	}
}

// expire emits PARTIALs for rounds older than the context timeout and drops
// expired soft state.

func (s *fakeSwitch) expire(now time.Time) {
	for _, c := range s.ctxs {
		parent := -1
		for i, b := range c.sp.Bindings {
			if b.Kind == parser.KindParent {
				parent = i
			}
		}
		for tok, r := range c.rounds {
			if now.Sub(r.start) >= c.timeout() {
				s.partials++
				s.flush(c, tok, r, parent, true)
			}
		}
		for tok, e := range c.soft {
			if _, busy := c.rounds[tok]; !busy && now.After(e.deadline) {
				delete(c.soft, tok)
			}
		}
	}
}

// emit sends d on binding i with set and xflags; groups nil means d's own.
func (s *fakeSwitch) emit(c *fctx, i int, d *parser.Data, set *bitmapfwd.Set, xflags uint8, groups []parser.Group) {
	b := c.sp.Bindings[i]
	kind := parser.ClassData
	if b.Kind == parser.KindResultOut {
		kind = parser.ClassResult
	}
	k := [2]int{int(b.Kind), int(b.Stream)}
	s.pids[k]++
	// The egress port's MAC is the source.
	ifc := deploy.Ports(s.f.topo, s.name)[b.Port]
	h := parser.DataFields{Class: kind, Op: c.op, SrcEP: b.LocalEP, DstEP: b.PeerEP, PacketID: s.pids[k],
		First: d.First, Stream: b.Stream}
	h.Eth.Dst = b.PeerMAC
	h.Eth.Src = s.f.topo.MAC(s.name, ifc)
	enc, body, err := bitmapam.EncodeSet(set, s.f.plan.Choice.Params, int(c.sp.Context.MaxTerms))
	if err != nil {
		s.f.t.Errorf("%s: encode %v: %v", s.name, set, err)
		return
	}
	ext := &parser.Ext{Encoding: uint8(enc), XFlags: xflags, Tenant: c.sp.Context.Tenant, Token: d.Ext.Token, Set: body}
	if groups == nil {
		var it parser.GroupIter
		for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
			groups = append(groups, g)
		}
	}
	n := 0
	for _, g := range groups {
		n += int(g.Count)
	}
	if n > 0 && uint64(d.First)+uint64(n) == uint64(c.sp.Context.VectorLen) {
		h.Flags |= parser.FlagLast
	}
	fr, err := parser.AppendData(nil, &h, ext, groups...)
	if err != nil {
		s.f.t.Errorf("%s: build: %v", s.name, err)
		return
	}
	s.f.forward(s.name, ifc, fr)
}

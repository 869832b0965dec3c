// Test harness: Shards wired through a fake fabric of links, hosts that
// build frames with package parser, and independent oracles (math/big exact
// sums, naive endpoint sets).

package bitmap

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

var testOp = parser.OpKey{Job: 0x42, Group: 1, GroupGen: 1, Op: 9, OpGen: 1}

const (
	testTenant = 7
	testVec    = 256
	testW      = 288 // >= 278 + ceil(log2 8)
	msT        = int64(1e6)
)

type end struct {
	name string
	port int
}

type delivery struct {
	from  end
	frame []byte
}

type tnode struct {
	name  string
	idx   int
	ports int
	sh    *Shard
	tx    *tsender
}

type thost struct {
	name string
	idx  int
	got  [][]byte
}

type tsender struct {
	f *fabric
	n *tnode
}

func (s *tsender) Send(port int, frame []byte) bool {
	s.f.q = append(s.f.q, delivery{from: end{s.n.name, port}, frame: slices.Clone(frame)})
	return true
}
func (s *tsender) PortMAC(port int) [6]byte { return s.f.mac(end{s.n.name, port}) }
func (s *tsender) NumPorts() int            { return s.n.ports }

type fabric struct {
	t     testing.TB
	n     int
	nodes map[string]*tnode
	hosts map[string]*thost
	links map[end]end
	q     []delivery
	rng   *rand.Rand // nil: FIFO delivery; else random order (reordering)
	now   int64
	// tap sees every delivery; returning false drops it.
	tap  func(to end, frame []byte) bool
	keys *Keyring
	cnt  *Counters
}

func newFabric(t testing.TB) *fabric {
	return &fabric{t: t, nodes: map[string]*tnode{}, hosts: map[string]*thost{}, links: map[end]end{},
		keys: NewKeyring(), cnt: NewCounters(), now: 1e9}
}

func (f *fabric) node(name string, ports int) *tnode {
	f.n++
	n := &tnode{name: name, idx: f.n, ports: ports}
	n.sh = NewShard(Config{Counters: f.cnt, Keys: f.keys, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	n.tx = &tsender{f: f, n: n}
	f.nodes[name] = n
	return n
}

func (f *fabric) host(name string) *thost {
	f.n++
	h := &thost{name: name, idx: f.n}
	f.hosts[name] = h
	return h
}

func (f *fabric) link(a string, pa int, b string, pb int) {
	f.links[end{a, pa}] = end{b, pb}
	f.links[end{b, pb}] = end{a, pa}
}

func (f *fabric) idxOf(name string) int {
	if n := f.nodes[name]; n != nil {
		return n.idx
	}
	return f.hosts[name].idx
}

func (f *fabric) mac(e end) [6]byte {
	if f.hosts[e.name] != nil {
		return [6]byte{0x02, 0xaa, 0, 0, byte(f.idxOf(e.name)), 0}
	}
	return [6]byte{0x02, 0, 0, byte(f.idxOf(e.name)), byte(e.port), 1}
}

func (f *fabric) ep(e end) uint16 {
	if f.hosts[e.name] != nil {
		return uint16(1000 + f.idxOf(e.name))
	}
	return uint16(100*f.idxOf(e.name) + e.port)
}

// run delivers until nothing is in flight.
func (f *fabric) run() {
	for len(f.q) > 0 {
		var dl delivery
		if f.rng != nil {
			i := f.rng.IntN(len(f.q))
			dl = f.q[i]
			f.q = slices.Delete(f.q, i, i+1)
		} else {
			// FIFO pops the head without moving the queue: the 64k tests
			// queue tens of thousands of frames.
			dl, f.q[0] = f.q[0], delivery{}
			f.q = f.q[1:]
		}
		to, ok := f.links[dl.from]
		if !ok {
			f.t.Fatalf("frame sent on unlinked %v", dl.from)
		}
		if f.tap != nil && !f.tap(to, dl.frame) {
			continue
		}
		if n := f.nodes[to.name]; n != nil {
			if !n.sh.HandleData(f.now, to.port, dl.frame, n.tx) {
				f.t.Fatalf("%s: frame of a foreign operation", to.name)
			}
			continue
		}
		h := f.hosts[to.name]
		h.got = append(h.got, dl.frame)
	}
}

// tick advances time and runs every shard's timers, in the given order
// (all nodes when none given), delivering after each.
func (f *fabric) tick(dt int64, order ...string) {
	f.now += dt
	if len(order) == 0 {
		for name := range f.nodes {
			order = append(order, name)
		}
		slices.Sort(order)
	}
	for _, name := range order {
		n := f.nodes[name]
		n.sh.Tick(f.now, n.tx)
		f.run()
	}
}

// bspec describes one binding by the local port; the peer, endpoints and
// stream follow from the links. Stream = endpoint of the end farther from
// the root (the child), so both ends agree.
type bspec struct {
	kind parser.BindingKind
	port int
	mask string // RESULT_OUT: BIFT mask in the figures' notation
	rank bool
}

func figSet(t testing.TB, bitsStr string, words int) []byte {
	t.Helper()
	s, err := bitmapfwd.ParseBits(bitsStr)
	if err != nil {
		t.Fatal(err)
	}
	return parser.AppendFlatSet(nil, 0, uint16(words), toU32(slices.Collect(s.All()))...)
}

func toU32(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}

func baseContext(role parser.Role) parser.ContextRecord {
	return parser.ContextRecord{Role: role, Collective: parser.CollBitmap, InputFormat: parser.FormatFP32,
		AccPolicy: parser.AccKulischFixed, PartialPolicy: parser.FormatKulisch, OutputFormat: parser.FormatFP32,
		KulischWidth: testW, VectorLen: testVec, MTU: 1500, WindowIntervals: 64, ReplayDepth: 4, WindowBytes: 1 << 16,
		WindowElements: 1452, MaxTerms: 8, TimeoutMs: 50, Tenant: testTenant}
}

// stageSpec builds the StageSpec of node name.
func (f *fabric) stageSpec(name string, cr parser.ContextRecord, abm string, words int, bs []bspec) parser.StageSpec {
	spec := parser.StageSpec{Context: cr}
	for i, b := range bs {
		me := end{name, b.port}
		peer, ok := f.links[me]
		if !ok {
			f.t.Fatalf("%s port %d not linked", name, b.port)
		}
		stream := f.ep(peer)
		if b.kind == parser.KindParent || b.kind == parser.KindResultIn {
			stream = f.ep(me)
		}
		var fl uint8
		if b.rank {
			fl = parser.BindingFlagRank
		}
		spec.Bindings = append(spec.Bindings, parser.Binding{Kind: b.kind, Flags: fl, Stream: stream,
			LocalEP: f.ep(me), PeerEP: f.ep(peer), Port: uint16(b.port), PeerMAC: f.mac(peer)})
		if b.mask != "" {
			spec.Sets = append(spec.Sets, parser.SetRecord{BindingIndex: uint8(i), Encoding: parser.EncFlat, Set: figSet(f.t, b.mask, words)})
		}
	}
	if abm != "" {
		spec.Sets = append(spec.Sets, parser.SetRecord{BindingIndex: parser.OwnSet, Encoding: parser.EncFlat, Set: figSet(f.t, abm, words)})
	}
	return spec
}

// decodeStage turns a StageSpec into the parser.Stage control hands over,
// through the real CONTROL encoder and validating decoder.
func decodeStage(t testing.TB, op parser.OpKey, spec *parser.StageSpec) parser.Stage {
	t.Helper()
	body := make([]byte, spec.Len())
	if _, err := spec.Encode(body); err != nil {
		t.Fatal(err)
	}
	c := parser.Control{Op: op, Txn: 1, SrcEP: 0xFFFE, DstEP: 1, Cmd: parser.CmdStage, FragCount: 1, Body: body}
	buf := make([]byte, parser.EthLen+c.Len())
	n, err := c.Encode(buf, parser.Eth{Dst: [6]byte{2, 0, 0, 0, 0, 1}, Src: [6]byte{2, 0, 0, 0, 0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	var dc parser.Control
	if err := dc.Decode(buf[:n], parser.Limits{MTU: len(buf)}); err != nil {
		t.Fatalf("STAGE does not decode: %v", err)
	}
	return dc.Stage()
}

func (f *fabric) stage(name string, cr parser.ContextRecord, abm string, words int, bs []bspec) {
	f.t.Helper()
	spec := f.stageSpec(name, cr, abm, words, bs)
	stg := decodeStage(f.t, testOp, &spec)
	n := f.nodes[name]
	if st, det := n.sh.Stage(f.now, testOp, &stg, n.ports); st != parser.StatusOK {
		f.t.Fatalf("%s: STAGE %v detail %d", name, st, det)
	}
	if st := n.sh.Commit(f.now, testOp); st != parser.StatusOK {
		f.t.Fatalf("%s: COMMIT %v", name, st)
	}
}

// hostFrame builds a frame host sends to its switch: DATA (host is a child:
// stream = its endpoint) or RESULT (host is a parent: stream = the switch
// end's endpoint).
func (f *fabric) hostFrame(host string, cl parser.Class, token uint64, xf uint8, set []byte, enc uint8, first uint32, vals []float32) []byte {
	f.t.Helper()
	me := end{host, 0}
	peer := f.links[me]
	stream := f.ep(me)
	if cl == parser.ClassResult {
		stream = f.ep(peer)
	}
	h := parser.DataFields{Eth: parser.Eth{Dst: f.mac(peer), Src: f.mac(me)}, Class: cl, Op: testOp,
		SrcEP: f.ep(me), DstEP: f.ep(peer), PacketID: 1, First: first, Stream: stream}
	if len(vals) > 0 && first+uint32(len(vals)) == testVec {
		h.Flags = parser.FlagLast
	}
	ext := &parser.Ext{Encoding: enc, XFlags: xf, Tenant: testTenant, Token: token, Set: set}
	var groups []parser.Group
	if len(vals) > 0 {
		groups = append(groups, parser.Group{Format: parser.FormatFP32, Count: uint16(len(vals)), Values: fp32Bytes(vals)})
	}
	fr, err := parser.AppendData(nil, &h, ext, groups...)
	if err != nil {
		f.t.Fatal(err)
	}
	if k := f.keys.Get(testOp.Job); k != nil && xf&parser.XFlagAuth != 0 {
		if err := parser.NewAuthenticator(k).Sign(fr); err != nil {
			f.t.Fatal(err)
		}
	}
	return fr
}

// inject puts a host's frame on its link.
func (f *fabric) inject(host string, frame []byte) {
	f.q = append(f.q, delivery{from: end{host, 0}, frame: frame})
}

func fp32Bytes(vs []float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func flat(eps ...uint32) []byte { return parser.AppendFlatSet(nil, 0, 1, eps...) }

// decoded is a received frame, decoded with the test's operation limits.
type decoded struct {
	d    parser.Data
	eps  []uint32
	vals []*big.Rat // exact value of every element
}

func decodeFrame(t testing.TB, fr []byte) decoded {
	t.Helper()
	var x decoded
	if err := x.d.Decode(fr, parser.Limits{VectorLen: testVec, KulischBytes: testW / 8, MTU: 1500, ListCap: 1024}); err != nil {
		t.Fatalf("received frame does not decode: %v", err)
	}
	if x.d.Flags&parser.FlagExt == 0 {
		t.Fatalf("received frame without EXT")
	}
	var it parser.SetIter
	for e, ok := x.d.Ext.NextEndpoint(&it); ok; e, ok = x.d.Ext.NextEndpoint(&it) {
		x.eps = append(x.eps, e)
	}
	var gi parser.GroupIter
	for g, ok := x.d.NextGroup(&gi); ok; g, ok = x.d.NextGroup(&gi) {
		w := g.Format.Width(int(g.KBytes))
		for i := 0; i < int(g.Count); i++ {
			x.vals = append(x.vals, exactValue(t, g.Format, g.Values[i*w:(i+1)*w]))
		}
	}
	return x
}

// exactValue is the oracle's reading of one wire value (math/big, no
// package kulisch).
func exactValue(t testing.TB, f parser.Format, b []byte) *big.Rat {
	switch f {
	case parser.FormatFP32:
		v := math.Float32frombits(binary.LittleEndian.Uint32(b))
		if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			t.Fatalf("non-finite value %v", v)
		}
		return new(big.Rat).SetFloat64(float64(v))
	case parser.FormatKulisch:
		if b[0] == parser.KulischPosZero || b[0] == parser.KulischNegZero {
			return new(big.Rat)
		}
		if b[0] != parser.KulischFinite {
			t.Fatalf("non-finite Kulisch state %d", b[0])
		}
		le := slices.Clone(b[1:])
		neg := le[len(le)-1]&0x80 != 0
		slices.Reverse(le)
		i := new(big.Int).SetBytes(le)
		if neg {
			i.Sub(i, new(big.Int).Lsh(big.NewInt(1), uint(8*len(le))))
		}
		return new(big.Rat).SetFrac(i, new(big.Int).Lsh(big.NewInt(1), 149))
	case parser.FormatFP16, parser.FormatBF16, parser.FormatINT8:
		var v float32
		switch f {
		case parser.FormatFP16:
			v = math.Float32frombits(kulisch.FP16ToFP32(binary.LittleEndian.Uint16(b)))
		case parser.FormatBF16:
			v = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16)
		default:
			v = float32(int8(b[0]))
		}
		return new(big.Rat).SetFloat64(float64(v))
	}
	t.Fatalf("format %v", f)
	return nil
}

// randF32 draws values across many binades, so that a rounded (FP32) sum
// differs from the exact one unless the arithmetic is exact.
func randF32(r *rand.Rand) float32 {
	m := r.Float64()*2 - 1
	e := r.IntN(40) - 20
	return float32(math.Ldexp(m, e))
}

func exactSum(vs ...float32) *big.Rat {
	s := new(big.Rat)
	for _, v := range vs {
		s.Add(s, new(big.Rat).SetFloat64(float64(v)))
	}
	return s
}

// roundFP32 rounds an exact value to the nearest binary32 (ties to even).
func roundFP32(r *big.Rat) *big.Rat {
	f, _ := r.Float32()
	return new(big.Rat).SetFloat64(float64(f))
}

// Domain boundaries (docs/protocol.md 8.10) in process: a dense AllReduce
// over 65536 worker endpoints through real Shards, every frame encoded and
// decoded by package parser at MTU 1500; PARTIAL across a boundary; replays
// of block partials; the STAGE rules of the boundary record; allocations.
// Oracles: math/big exact sums and naive endpoint maps.

package bitmap

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/parser"
)

// The 64k job: 16 blocks (domains) of 4096 endpoints; in each block a block
// root (a domain boundary standing for endpoint 65536+k above) over 4 leaf
// switches, each over 16 hosts of 64 worker endpoints; an upper root over
// the 16 block roots, whose A-BM is the 16 boundary endpoints. Every STAGE
// fits one 1500-byte frame (a leaf's is the largest kind: 34 bindings,
// a 1024-bit A-BM and 16 masks). Without the boundaries a root aggregating
// all 65536 endpoints would need an 8 KiB A-BM and P-BM.
const (
	bigBlocks  = 16
	bigLeaves  = 4  // per block
	bigHosts   = 16 // per leaf
	bigPerHost = 64 // worker endpoints per host
	bigPerLeaf = bigHosts * bigPerHost
	bigBlock   = bigLeaves * bigPerLeaf // 4096
	bigN       = bigBlocks * bigBlock   // 65536
	bigBase    = 65536                  // boundary endpoint of block k: bigBase + k
	bigVec     = 8
	bigW       = 296 // >= 278 + ceil(log2 65536)
	bigMTU     = 1500
)

var bigLim = parser.Limits{VectorLen: bigVec, KulischBytes: bigW / 8, MTU: bigMTU}

func blockName(k int) string   { return fmt.Sprintf("b%02d", k) }
func leafName(k, j int) string { return fmt.Sprintf("l%02d.%d", k, j) }
func hostName(k, j, i int) string {
	return fmt.Sprintf("h%02d.%d.%02d", k, j, i)
}

// hostOf names the host of endpoint e.
func hostOf(e int) string {
	return hostName(e/bigBlock, e%bigBlock/bigPerLeaf, e%bigPerLeaf/bigPerHost)
}

type bigNet struct {
	t    *testing.T
	f    *fabric
	vals [][bigVec]float32 // per endpoint
	// toTop are the DATA frames delivered to the upper root, decoded.
	toTop []decodedBig
	// maxLen is the largest frame seen per receiving kind ("top", "b", "l", "h").
	maxLen map[string]int
	// dupTop re-queues a copy of every DATA frame delivered to the upper root.
	dupTop bool
}

type decodedBig struct {
	frame   []byte
	eps     []uint32
	partial bool
}

func bigCtx(role parser.Role, terms, timeoutMs uint32) parser.ContextRecord {
	cr := baseContext(role)
	cr.KulischWidth, cr.VectorLen, cr.MaxTerms, cr.TimeoutMs = bigW, bigVec, terms, timeoutMs
	cr.WindowIntervals = 4 // tokens in flight per node; keeps 81 nodes' slots small
	return cr
}

// stageBig stages name with bindings bs (no masks in bs) and set records
// sets, through the real encoder and decoder, and returns the STAGE's bytes
// after the Ethernet header.
func (f *fabric) stageBig(name string, cr parser.ContextRecord, bs []bspec, sets []parser.SetRecord) int {
	f.t.Helper()
	spec := f.stageSpec(name, cr, "", 0, bs)
	spec.Sets = append(spec.Sets, sets...)
	stg := decodeStage(f.t, testOp, &spec)
	n := f.nodes[name]
	if st, det := n.sh.Stage(f.now, testOp, &stg, n.ports); st != parser.StatusOK {
		f.t.Fatalf("%s: STAGE %v detail %d", name, st, det)
	}
	if st := n.sh.Commit(f.now, testOp); st != parser.StatusOK {
		f.t.Fatalf("%s: COMMIT %v", name, st)
	}
	return parser.CWLen + parser.ControlHdrLen + spec.Len()
}

func rangeU32(from, n int) []uint32 {
	r := make([]uint32, n)
	for i := range r {
		r[i] = uint32(from + i)
	}
	return r
}

func flatRec(idx uint8, setID, words int, eps []uint32) parser.SetRecord {
	return parser.SetRecord{BindingIndex: idx, Encoding: parser.EncFlat, Set: parser.AppendFlatSet(nil, uint16(setID), uint16(words), eps...)}
}

func newBigNet(t *testing.T, seed uint64) *bigNet {
	f := newFabric(t)
	n := &bigNet{t: t, f: f, maxLen: map[string]int{}}
	f.node("top", bigBlocks)
	for k := 0; k < bigBlocks; k++ {
		f.node(blockName(k), bigLeaves+1)
		f.link("top", k, blockName(k), bigLeaves)
		for j := 0; j < bigLeaves; j++ {
			f.node(leafName(k, j), bigHosts+1)
			f.link(blockName(k), j, leafName(k, j), bigHosts)
		}
	}
	for k := 0; k < bigBlocks; k++ {
		for j := 0; j < bigLeaves; j++ {
			for i := 0; i < bigHosts; i++ {
				f.host(hostName(k, j, i))
				f.link(hostName(k, j, i), 0, leafName(k, j), i)
			}
		}
	}
	// Parents wait twice as long as their children (doc.go, Timeouts).
	maxStage := 0
	for k := 0; k < bigBlocks; k++ {
		for j := 0; j < bigLeaves; j++ {
			lo := k*bigBlock + j*bigPerLeaf
			var bs []bspec
			sets := []parser.SetRecord{flatRec(parser.OwnSet, lo/bigPerLeaf, bigPerLeaf/64, rangeU32(lo, bigPerLeaf))}
			for i := 0; i < bigHosts; i++ {
				bs = append(bs, bspec{kind: parser.KindContributor, port: i, rank: true}, bspec{kind: parser.KindResultOut, port: i, rank: true})
				h := lo + i*bigPerHost
				sets = append(sets, flatRec(uint8(len(bs)-1), h/64, 1, rangeU32(h, bigPerHost)))
			}
			bs = append(bs, bspec{kind: parser.KindParent, port: bigHosts}, bspec{kind: parser.KindResultIn, port: bigHosts})
			maxStage = max(maxStage, f.stageBig(leafName(k, j), bigCtx(parser.RoleLeaf, bigPerLeaf, 50), bs, sets))
		}
		lo := k * bigBlock
		var bs []bspec
		sets := []parser.SetRecord{
			flatRec(parser.OwnSet, k, bigBlock/64, rangeU32(lo, bigBlock)),
			flatRec(parser.BoundarySet, bigBase/64, 1, []uint32{uint32(bigBase + k)}),
		}
		for j := 0; j < bigLeaves; j++ {
			bs = append(bs, bspec{kind: parser.KindContributor, port: j}, bspec{kind: parser.KindResultOut, port: j})
			sets = append(sets, flatRec(uint8(len(bs)-1), (lo+j*bigPerLeaf)/bigPerLeaf, bigPerLeaf/64, rangeU32(lo+j*bigPerLeaf, bigPerLeaf)))
		}
		bs = append(bs, bspec{kind: parser.KindParent, port: bigLeaves}, bspec{kind: parser.KindResultIn, port: bigLeaves})
		maxStage = max(maxStage, f.stageBig(blockName(k), bigCtx(parser.RoleInternal, bigBlock, 100), bs, sets))
	}
	var bs []bspec
	sets := []parser.SetRecord{flatRec(parser.OwnSet, bigBase/64, 1, rangeU32(bigBase, bigBlocks))}
	for k := 0; k < bigBlocks; k++ {
		bs = append(bs, bspec{kind: parser.KindContributor, port: k}, bspec{kind: parser.KindResultOut, port: k})
		sets = append(sets, flatRec(uint8(len(bs)-1), bigBase/64, 1, []uint32{uint32(bigBase + k)}))
	}
	maxStage = max(maxStage, f.stageBig("top", bigCtx(parser.RoleRoot, bigN, 200), bs, sets))
	if maxStage > bigMTU {
		t.Fatalf("a STAGE is %d bytes after the Ethernet header, above the %d link MTU", maxStage, bigMTU)
	}
	t.Logf("largest STAGE: %d bytes after the Ethernet header", maxStage)

	r := rand.New(rand.NewPCG(seed, 64))
	n.vals = make([][bigVec]float32, bigN)
	for e := range n.vals {
		for i := range n.vals[e] {
			n.vals[e][i] = randF32(r)
		}
	}
	// Every frame on every link: within the MTU and valid for the parser.
	f.tap = func(to end, fr []byte) bool {
		if len(fr)-parser.EthLen > bigMTU {
			t.Fatalf("frame to %v is %d bytes after the Ethernet header", to, len(fr)-parser.EthLen)
		}
		var d parser.Data
		if err := d.Decode(fr, bigLim); err != nil {
			t.Fatalf("frame to %v does not decode: %v", to, err)
		}
		kind := to.name[:1]
		if to.name == "top" {
			kind = "top"
		}
		n.maxLen[kind] = max(n.maxLen[kind], len(fr)-parser.EthLen)
		if to.name == "top" && d.Class == parser.ClassData {
			x := decodedBig{frame: slices.Clone(fr), partial: d.Ext.XFlags&parser.XFlagPartial != 0}
			var it parser.SetIter
			for e, ok := d.Ext.NextEndpoint(&it); ok; e, ok = d.Ext.NextEndpoint(&it) {
				x.eps = append(x.eps, e)
			}
			first := true
			for _, y := range n.toTop {
				first = first && !slices.Equal(y.eps, x.eps)
			}
			n.toTop = append(n.toTop, x)
			if n.dupTop && first { // a copy of the original, not of the copy
				f.q = append(f.q, delivery{from: f.links[to], frame: slices.Clone(fr)})
			}
		}
		return true
	}
	return n
}

// workerFrame is endpoint e's contribution: P-BM {e}, the whole vector.
func (n *bigNet) workerFrame(e int) []byte {
	f := n.f
	me := end{hostOf(e), 0}
	peer := f.links[me]
	h := parser.DataFields{Eth: parser.Eth{Dst: f.mac(peer), Src: f.mac(me)}, Class: parser.ClassData, Op: testOp,
		SrcEP: f.ep(me), DstEP: f.ep(peer), PacketID: uint32(e%bigPerHost + 1), First: 0, Flags: parser.FlagLast, Stream: f.ep(me)}
	ext := &parser.Ext{Encoding: parser.EncFlat, Tenant: testTenant, Token: 1, Set: parser.AppendFlatSet(nil, uint16(e/64), 1, uint32(e))}
	fr, err := parser.AppendData(nil, &h, ext, parser.Group{Format: parser.FormatFP32, Count: bigVec, Values: fp32Bytes(n.vals[e][:])})
	if err != nil {
		n.t.Fatal(err)
	}
	return fr
}

// send queues the contribution of every endpoint not in withheld.
func (n *bigNet) send(withheld map[int]bool) {
	for e := 0; e < bigN; e++ {
		if !withheld[e] {
			n.f.inject(hostOf(e), n.workerFrame(e))
		}
	}
}

// f32Units is an FP32 value as an integer number of 2^-149 (every finite
// FP32 value is one), from its bits alone.
func f32Units(v float32) *big.Int {
	b := math.Float32bits(v)
	exp, m := int(b>>23&0xFF), int64(b&0x7FFFFF)
	sh := 0
	if exp != 0 {
		m |= 1 << 23
		sh = exp - 1
	}
	x := new(big.Int).Lsh(big.NewInt(m), uint(sh))
	if b>>31 != 0 {
		x.Neg(x)
	}
	return x
}

// oracle is the exact sum over the endpoints not withheld, rounded once to
// FP32 (nearest, ties to even: big.Rat.Float32).
func (n *bigNet) oracle(withheld map[int]bool) [bigVec]uint32 {
	var sums [bigVec]big.Int
	for e := range n.vals {
		if withheld[e] {
			continue
		}
		for i, v := range n.vals[e] {
			sums[i].Add(&sums[i], f32Units(v))
		}
	}
	var out [bigVec]uint32
	den := new(big.Int).Lsh(big.NewInt(1), 149)
	for i := range sums {
		f, _ := new(big.Rat).SetFrac(&sums[i], den).Float32()
		out[i] = math.Float32bits(f)
	}
	return out
}

// checkResults: every host received exactly one RESULT, for exactly its 64
// endpoints, PARTIAL as wanted, bit-identical to want.
func (n *bigNet) checkResults(want [bigVec]uint32, partial bool) {
	t := n.t
	t.Helper()
	for e0 := 0; e0 < bigN; e0 += bigPerHost {
		h := n.f.hosts[hostOf(e0)]
		if len(h.got) != 1 {
			t.Fatalf("%s received %d frames, want 1 RESULT", h.name, len(h.got))
		}
		var d parser.Data
		if err := d.Decode(h.got[0], bigLim); err != nil {
			t.Fatal(err)
		}
		var eps []uint32
		var it parser.SetIter
		for e, ok := d.Ext.NextEndpoint(&it); ok; e, ok = d.Ext.NextEndpoint(&it) {
			eps = append(eps, e)
		}
		if d.Class != parser.ClassResult || !slices.Equal(eps, rangeU32(e0, bigPerHost)) {
			t.Fatalf("%s: %v for endpoints %v, want RESULT for %d..%d", h.name, d.Class, eps, e0, e0+bigPerHost-1)
		}
		if got := d.Ext.XFlags&parser.XFlagPartial != 0; got != partial {
			t.Fatalf("%s: PARTIAL %v, want %v", h.name, got, partial)
		}
		var gi parser.GroupIter
		g, ok := d.NextGroup(&gi)
		if !ok || g.Format != parser.FormatFP32 || g.Count != bigVec || d.First != 0 {
			t.Fatalf("%s: group %+v", h.name, g)
		}
		for i := 0; i < bigVec; i++ {
			if got := binary.LittleEndian.Uint32(g.Values[4*i:]); got != want[i] {
				t.Fatalf("%s element %d: %#08x (%g), want %#08x (%g)", h.name, i, got, math.Float32frombits(got), want[i], math.Float32frombits(want[i]))
			}
		}
	}
}

func (n *bigNet) drops() uint64 {
	var s uint64
	for i := range n.f.cnt.Drops {
		s += n.f.cnt.Drops[i].Load()
	}
	return s
}

func (n *bigNet) snapshot(name string) CtxSnapshot {
	sh := n.f.nodes[name].sh
	sh.publish(n.f.now)
	return sh.Snapshot().Ctxs[0]
}

// parseSetString reads bitmapfwd.Set.String's "{a,b,c}/capacity".
func parseSetString(t *testing.T, s string) map[int]bool {
	t.Helper()
	body, _, ok := strings.Cut(strings.TrimPrefix(s, "{"), "}/")
	if !ok {
		t.Fatalf("set string %q", s)
	}
	m := map[int]bool{}
	for _, x := range strings.Split(body, ",") {
		if x == "" {
			continue
		}
		v, err := strconv.Atoi(x)
		if err != nil {
			t.Fatalf("set string %q: %v", s, err)
		}
		m[v] = true
	}
	return m
}

func skipLong(t *testing.T) {
	if testing.Short() {
		t.Skip("65536 endpoints in process: skipped with -short")
	}
}

// TestBoundary64kAllReduce: every one of 65536 workers contributes 8 random
// FP32 values; each host receives the exact sum rounded once, not PARTIAL.
// The upper root sees 16 DATA frames, one per block, each with P-BM = that
// block's boundary endpoint. With dups, every frame to the upper root is
// delivered twice, and block partials are replayed after the result: none
// over-completes or reaches a host again.
func TestBoundary64kAllReduce(t *testing.T) {
	skipLong(t)
	for _, dups := range []bool{false, true} {
		t.Run(fmt.Sprint("dups=", dups), func(t *testing.T) {
			n := newBigNet(t, 1)
			n.dupTop = dups
			n.send(nil)
			n.f.run()
			n.checkResults(n.oracle(nil), false)
			c := n.f.cnt
			if c.Completed.Load() != bigBlocks*bigLeaves+bigBlocks+1 || c.Partials.Load() != 0 || n.drops() != 0 ||
				c.BoundaryUp.Load() != bigBlocks || c.Expansions.Load() != bigBlocks {
				t.Fatalf("completed %d partials %d drops %d boundary up %d expansions %d", c.Completed.Load(), c.Partials.Load(),
					n.drops(), c.BoundaryUp.Load(), c.Expansions.Load())
			}
			want := 1
			if dups {
				want = 2
			}
			seen := map[uint32]int{}
			for _, x := range n.toTop {
				if len(x.eps) != 1 || x.partial {
					t.Fatalf("frame to the upper root with P-BM %v, PARTIAL %v", x.eps, x.partial)
				}
				seen[x.eps[0]]++
			}
			for k := 0; k < bigBlocks; k++ {
				if seen[uint32(bigBase+k)] != want {
					t.Fatalf("block %d reached the upper root %d times, want %d", k, seen[uint32(bigBase+k)], want)
				}
			}
			if dups {
				if d := c.Duplicates.Load(); d != bigBlocks {
					t.Fatalf("duplicates %d, want %d", d, bigBlocks)
				}
				// Replays long after the result: still duplicates.
				n.dupTop = false
				n.f.now += 10 * msT
				for _, x := range n.toTop[:3] {
					n.f.q = append(n.f.q, delivery{from: n.f.links[end{"top", int(x.eps[0] - bigBase)}], frame: x.frame})
				}
				n.f.run()
				if d := c.Duplicates.Load(); d != bigBlocks+3 {
					t.Fatalf("duplicates after replay %d, want %d", d, bigBlocks+3)
				}
				n.checkResults(n.oracle(nil), false) // still exactly one result per host
			}
			if st := n.snapshot("top").Stats; st.Completed != 1 || st.Partials != 0 {
				t.Fatalf("upper root stats %+v", st)
			}
			t.Logf("largest frame after the Ethernet header, by receiver: %v", n.maxLen)
		})
	}
}

// TestBoundary64kMissing: four workers in two blocks never send. Their
// leaves time out, then their block roots, which send PARTIAL with P-BM =
// their boundary endpoint; the upper root completes at block granularity
// and its result carries PARTIAL to every host, holding exactly the sum of
// the workers that sent. The frames at the top name the incomplete blocks
// (PARTIAL) and only them; the block roots' snapshots name exactly the
// missing workers. A replayed block PARTIAL and a worker arriving after its
// block went up change nothing.
func TestBoundary64kMissing(t *testing.T) {
	skipLong(t)
	n := newBigNet(t, 2)
	withheld := map[int]bool{
		2*bigBlock + 5: true, 2*bigBlock + 6: true, // block 2, leaf 0, one host
		2*bigBlock + 3*bigPerLeaf + 100: true, // block 2, leaf 3
		9*bigBlock + bigBlock - 1:       true, // block 9, leaf 3, last endpoint
	}
	missBlocks := map[int]bool{}
	missLeaves := map[string]bool{}
	for e := range withheld {
		missBlocks[e/bigBlock] = true
		missLeaves[leafName(e/bigBlock, e%bigBlock/bigPerLeaf)] = true
	}
	n.send(withheld)
	n.f.run()
	for _, h := range n.f.hosts {
		if len(h.got) != 0 {
			t.Fatalf("%s received a result before any timeout", h.name)
		}
	}
	n.f.tick(60 * msT) // the leaves' 50 ms: their PARTIALs reach the block roots, which wait
	if got := n.f.cnt.Partials.Load(); got != uint64(len(missLeaves)) {
		t.Fatalf("%d PARTIALs after the leaves' timeout, want %d", got, len(missLeaves))
	}
	for _, h := range n.f.hosts {
		if len(h.got) != 0 {
			t.Fatalf("%s received a result after the leaves' timeout", h.name)
		}
	}
	n.f.tick(50 * msT) // the block roots' 100 ms
	n.checkResults(n.oracle(withheld), true)

	// At the top: one frame per block; exactly the blocks with missing
	// workers are PARTIAL, and the P-BMs name blocks, never workers.
	if len(n.toTop) != bigBlocks {
		t.Fatalf("%d frames reached the upper root, want %d", len(n.toTop), bigBlocks)
	}
	complete, partial := map[int]bool{}, map[int]bool{}
	for _, x := range n.toTop {
		if len(x.eps) != 1 || x.eps[0] < bigBase || x.eps[0] >= bigBase+bigBlocks {
			t.Fatalf("P-BM %v at the upper root", x.eps)
		}
		if x.partial {
			partial[int(x.eps[0]-bigBase)] = true
		} else {
			complete[int(x.eps[0]-bigBase)] = true
		}
	}
	for k := 0; k < bigBlocks; k++ {
		if partial[k] != missBlocks[k] || complete[k] == missBlocks[k] {
			t.Fatalf("block %d: PARTIAL %v, complete %v; blocks with missing workers %v", k, partial[k], complete[k], missBlocks)
		}
	}
	// The boundaries' snapshots name exactly the missing workers.
	for k := 0; k < bigBlocks; k++ {
		cs := n.snapshot(blockName(k))
		if got := parseSetString(t, cs.Boundary); len(got) != 1 || !got[bigBase+k] {
			t.Fatalf("%s: boundary %q", blockName(k), cs.Boundary)
		}
		want := map[int]bool{}
		for e := range withheld {
			if e/bigBlock == k {
				want[e] = true
			}
		}
		if !missBlocks[k] {
			if len(cs.Partials) != 0 {
				t.Fatalf("%s: partials %+v", blockName(k), cs.Partials)
			}
			continue
		}
		if len(cs.Partials) != 1 || cs.Partials[0].Token != 1 {
			t.Fatalf("%s: partials %+v", blockName(k), cs.Partials)
		}
		if got := parseSetString(t, cs.Partials[0].Missing); !maps.Equal(got, want) {
			t.Fatalf("%s: missing %v, want %v", blockName(k), got, want)
		}
	}
	c := n.f.cnt
	if got := c.Partials.Load(); got != uint64(len(missLeaves)+len(missBlocks)) {
		t.Fatalf("%d PARTIALs, want %d (leaves and block roots; the upper root completes)", got, len(missLeaves)+len(missBlocks))
	}
	if st := n.snapshot("top").Stats; st.Completed != 1 || st.Partials != 0 {
		t.Fatalf("upper root stats %+v", st)
	}

	// Replays of the blocks' PARTIALs, and the last worker of block 9
	// arriving late: its leaf sends it up as a repair, block 9 already went
	// up as a whole, so it is dropped there (late) and nothing else moves.
	dupBefore, topBefore := c.Duplicates.Load(), len(n.toTop)
	for _, x := range n.toTop {
		if x.partial {
			n.f.q = append(n.f.q, delivery{from: n.f.links[end{"top", int(x.eps[0] - bigBase)}], frame: x.frame})
		}
	}
	n.f.run()
	if got := c.Duplicates.Load() - dupBefore; got != uint64(len(missBlocks)) {
		t.Fatalf("replayed PARTIALs: %d duplicates, want %d", got, len(missBlocks))
	}
	n.f.now += 5 * msT
	n.f.inject(hostOf(9*bigBlock+bigBlock-1), n.workerFrame(9*bigBlock+bigBlock-1))
	n.f.run()
	if c.Drops[DropLate].Load() != 1 || len(n.toTop) != topBefore+len(missBlocks) {
		t.Fatalf("late worker: %d late drops, %d frames to the top", c.Drops[DropLate].Load(), len(n.toTop))
	}
	n.checkResults(n.oracle(withheld), true) // nobody received anything new
}

// bx is a small domain boundary: workers w1, w2 (endpoints 0, 1) below,
// host "up" above as its parent (PARENT and RESULT_IN on port 2); A-BM
// {0,1}, masks {0} and {1}, boundary set {64}.
func bxSpec(f *fabric, mod func(bs *[]bspec, sets *[]parser.SetRecord)) parser.StageSpec {
	bs := []bspec{
		{kind: parser.KindContributor, port: 0, rank: true},
		{kind: parser.KindContributor, port: 1, rank: true},
		{kind: parser.KindResultOut, port: 0, rank: true},
		{kind: parser.KindResultOut, port: 1, rank: true},
		{kind: parser.KindParent, port: 2, rank: true},
		{kind: parser.KindResultIn, port: 2, rank: true},
	}
	sets := []parser.SetRecord{flatRec(parser.OwnSet, 0, 1, []uint32{0, 1}), flatRec(2, 0, 1, []uint32{0}),
		flatRec(3, 0, 1, []uint32{1}), flatRec(parser.BoundarySet, 1, 1, []uint32{64})}
	if mod != nil {
		mod(&bs, &sets)
	}
	spec := f.stageSpec("bx", baseContext(parser.RoleLeaf), "", 0, bs)
	spec.Sets = sets
	return spec
}

func bxFabric(t testing.TB) *fabric {
	f := newFabric(t)
	f.node("bx", 3)
	for i, h := range []string{"w1", "w2", "up"} {
		f.host(h)
		f.link(h, 0, "bx", i)
	}
	spec := bxSpec(f, nil)
	stg := decodeStage(t, testOp, &spec)
	n := f.nodes["bx"]
	if st, det := n.sh.Stage(f.now, testOp, &stg, 3); st != parser.StatusOK || n.sh.Commit(f.now, testOp) != parser.StatusOK {
		t.Fatalf("STAGE %v detail %d", st, det)
	}
	return f
}

// recordOffset is the STAGE body offset of the first set record with index idx.
func recordOffset(spec *parser.StageSpec, idx uint8) uint16 {
	off := parser.ContextRecordLen + len(spec.Bindings)*parser.BindingLen
	for i := range spec.Sets {
		if spec.Sets[i].BindingIndex == idx {
			return uint16(off)
		}
		off += spec.Sets[i].Len()
	}
	return parser.NoDetail
}

// TestStageBoundary: the node-state rules of the boundary record, each
// answered INVALID with Detail = the 0xFE record's body offset. (A second
// 0xFE record and one outside a BITMAP context are refused by the parser:
// parser.TestStageBoundaryRecord.)
func TestStageBoundary(t *testing.T) {
	f := newFabric(t)
	f.node("bx", 3)
	for i, h := range []string{"w1", "w2", "up"} {
		f.host(h)
		f.link(h, 0, "bx", i)
	}
	for _, tc := range []struct {
		name string
		mod  func(bs *[]bspec, sets *[]parser.SetRecord)
		ok   bool
	}{
		{"ok", nil, true},
		{"boundary first", func(_ *[]bspec, s *[]parser.SetRecord) { *s = append((*s)[3:], (*s)[:3]...) }, true},
		{"overlaps the A-BM", func(_ *[]bspec, s *[]parser.SetRecord) { (*s)[3] = flatRec(parser.BoundarySet, 0, 1, []uint32{1}) }, false},
		{"overlaps a mask", func(_ *[]bspec, s *[]parser.SetRecord) {
			(*s)[2] = flatRec(3, 0, 1, []uint32{1, 5})
			(*s)[3] = flatRec(parser.BoundarySet, 0, 1, []uint32{5})
		}, false},
		{"no A-BM", func(_ *[]bspec, s *[]parser.SetRecord) { *s = (*s)[1:] }, false},
		{"no PARENT", func(b *[]bspec, _ *[]parser.SetRecord) { *b = append((*b)[:4], (*b)[5]) }, false},
	} {
		spec := bxSpec(f, tc.mod)
		stg := decodeStage(t, testOp, &spec)
		st, det := NewShard(Config{}).Stage(0, testOp, &stg, 3)
		want, wantDet := parser.StatusOK, uint16(parser.NoDetail)
		if !tc.ok {
			want, wantDet = parser.StatusInvalid, recordOffset(&spec, parser.BoundarySet)
		}
		if st != want || det != wantDet {
			t.Errorf("%s: %v detail %d, want %v detail %d", tc.name, st, det, want, wantDet)
		}
	}
}

// TestBoundarySmall: bx's aggregate goes up with P-BM {64} (FLAT Set ID 1,
// one word), PARTIAL on timeout with the missing worker in the snapshot; a
// RESULT for {64} reaches w1 and w2 with their own endpoints, other bits of
// its D-BM are counted; with INSTALL the boundary set means nothing.
func TestBoundarySmall(t *testing.T) {
	f := bxFabric(t)
	var up []decodedBig
	f.tap = func(to end, fr []byte) bool {
		if to.name == "up" {
			var d parser.Data
			if err := d.Decode(fr, parser.Limits{VectorLen: testVec, KulischBytes: testW / 8, MTU: 1500}); err != nil {
				t.Fatal(err)
			}
			x := decodedBig{frame: slices.Clone(fr), partial: d.Ext.XFlags&parser.XFlagPartial != 0}
			if string(d.Ext.Set) != string(parser.AppendFlatSet(nil, 1, 1, 64)) {
				t.Fatalf("P-BM body %x, want the boundary record's", d.Ext.Set)
			}
			up = append(up, x)
		}
		return true
	}
	vals := []float32{1.5, -2, 0.25}
	// From below, a P-BM naming the boundary itself is refused: passed up
	// it would count as the whole domain.
	f.inject("w1", f.hostFrame("w1", parser.ClassData, 1, 0, parser.AppendFlatSet(nil, 0, 2, 0, 64), parser.EncFlat, 0, vals))
	f.run()
	if len(up) != 0 || f.cnt.Drops[DropBadEndpoint].Load() != 1 || f.cnt.Merged.Load() != 0 {
		t.Fatalf("P-BM with the boundary endpoint from below: %d frames up, %d bad_endpoint", len(up), f.cnt.Drops[DropBadEndpoint].Load())
	}
	f.inject("w1", f.hostFrame("w1", parser.ClassData, 1, 0, flat(0), parser.EncFlat, 0, vals))
	f.inject("w2", f.hostFrame("w2", parser.ClassData, 1, 0, flat(1), parser.EncFlat, 0, vals))
	f.inject("w1", f.hostFrame("w1", parser.ClassData, 2, 0, flat(0), parser.EncFlat, 0, vals))
	f.run()
	if len(up) != 1 || up[0].partial {
		t.Fatalf("%d frames up (partial %v), want token 1 complete", len(up), len(up) > 0 && up[0].partial)
	}
	f.tick(60 * msT)
	if len(up) != 2 || !up[1].partial {
		t.Fatalf("token 2: %d frames up", len(up))
	}
	cs := f.nodes["bx"].sh
	cs.publish(f.now)
	if p := cs.Snapshot().Ctxs[0].Partials; len(p) != 1 || p[0].Token != 2 || p[0].Missing != "{1}/128" {
		t.Fatalf("partials %+v", p)
	}
	// Multicast: {64} and a stray bit 70 from the upper domain.
	res := func(xf uint8, eps ...uint32) []byte {
		return f.hostFrame("up", parser.ClassResult, 1, xf, parser.AppendFlatSet(nil, 1, 1, eps...), parser.EncFlat, 0, vals)
	}
	drops := f.cnt.Drops[DropBadEndpoint].Load()
	f.inject("up", res(parser.XFlagPartial, 64, 70))
	f.run()
	for i, h := range []string{"w1", "w2"} {
		got := f.hosts[h].got
		if len(got) != 1 {
			t.Fatalf("%s got %d frames", h, len(got))
		}
		x := decodeFrame(t, got[0])
		if !slices.Equal(x.eps, []uint32{uint32(i)}) || x.d.Ext.XFlags&parser.XFlagPartial == 0 ||
			string(x.d.Ext.Set) != string(parser.AppendFlatSet(nil, 0, 1, uint32(i))) {
			t.Fatalf("%s: D-BM %v (%x), xflags %#x", h, x.eps, x.d.Ext.Set, x.d.Ext.XFlags)
		}
		f.hosts[h].got = nil
	}
	if f.cnt.Drops[DropBadEndpoint].Load() != drops+1 || f.cnt.UnroutedBits.Load() != 1 || f.cnt.Expansions.Load() != 1 {
		t.Fatalf("bad_endpoint %d, unrouted %d, expansions %d", f.cnt.Drops[DropBadEndpoint].Load()-drops,
			f.cnt.UnroutedBits.Load(), f.cnt.Expansions.Load())
	}
	// INSTALL (an MoE dispatch or a self-installed ACK tree) carries global
	// sets: {64} is no endpoint any mask of bx routes.
	f.inject("up", res(parser.XFlagInstall, 64))
	f.run()
	if len(f.hosts["w1"].got)+len(f.hosts["w2"].got) != 0 || f.cnt.Expansions.Load() != 1 || f.cnt.EmptySets.Load() != 1 {
		t.Fatalf("INSTALL for {64}: delivered %d, expansions %d", len(f.hosts["w1"].got)+len(f.hosts["w2"].got), f.cnt.Expansions.Load())
	}
}

// TestAllocsBoundaryEmit: two contributions complete bx's A-BM and one DATA
// with P-BM = the boundary set goes up, per token, without allocating.
func TestAllocsBoundaryEmit(t *testing.T) {
	f := bxFabric(t)
	sh := f.nodes["bx"].sh
	vals := make([]float32, chunk)
	w1 := f.hostFrame("w1", parser.ClassData, 1, 0, flat(0), parser.EncFlat, 0, vals)
	w2 := f.hostFrame("w2", parser.ClassData, 1, 0, flat(1), parser.EncFlat, 0, vals)
	var tx sink
	tok := uint64(1)
	run := func() {
		tok++
		setToken(w1, tok)
		setToken(w2, tok)
		sh.HandleData(f.now, 0, w1, &tx)
		sh.HandleData(f.now, 1, w2, &tx)
	}
	if a := alloctest.PerRun(1000, run); a != 0 {
		t.Fatalf("boundary emit allocates %v per token", a)
	}
	if tx.frames != 1001 || f.cnt.BoundaryUp.Load() != 1001 {
		t.Fatalf("%d frames, %d boundary emits for 1001 tokens", tx.frames, f.cnt.BoundaryUp.Load())
	}
}

// TestAllocsBoundaryExpand: a RESULT for bx's boundary set is re-expanded
// to its A-BM and sent as two copies without allocating.
func TestAllocsBoundaryExpand(t *testing.T) {
	f := bxFabric(t)
	sh := f.nodes["bx"].sh
	fr := f.hostFrame("up", parser.ClassResult, 1, 0, parser.AppendFlatSet(nil, 1, 1, 64), parser.EncFlat, 0, make([]float32, 64))
	var tx sink
	if a := alloctest.PerRun(1000, func() { sh.HandleData(f.now, 2, fr, &tx) }); a != 0 {
		t.Fatalf("re-expansion allocates %v per frame", a)
	}
	if tx.frames != 2*1001 || f.cnt.Expansions.Load() != 1001 {
		t.Fatalf("%d copies, %d expansions for 1001 frames", tx.frames, f.cnt.Expansions.Load())
	}
}

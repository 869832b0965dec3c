package bitmap

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prismd/prismd/parser"
)

// fig2 builds Fig. 2: a token source behind a source-side branch node sb,
// which reaches e1..e4 through s1 and e5..e8 through s7 (endpoints 0..7).
// No node has an A-BM: the combine tree is what INSTALL leaves behind.
func fig2(t testing.TB, timeoutMs uint32) *fabric { return fig2ABM(t, timeoutMs, false) }

// fig2ABM is fig2, with pre-configured A-BMs when abms is set (sb
// 11111111, s1 11110000, s7 00001111): the reliable-multicast tree set up
// by the control plane instead of self-installed.
func fig2ABM(t testing.TB, timeoutMs uint32, abms bool) *fabric {
	f := newFabric(t)
	f.node("sb", 3)
	f.node("s1", 5)
	f.node("s7", 5)
	f.host("src")
	for i := 1; i <= 8; i++ {
		f.host(fmt.Sprintf("e%d", i))
	}
	f.link("src", 0, "sb", 0)
	f.link("sb", 1, "s1", 0)
	f.link("sb", 2, "s7", 0)
	for i := 0; i < 4; i++ {
		f.link(fmt.Sprintf("e%d", i+1), 0, "s1", i+1)
		f.link(fmt.Sprintf("e%d", i+5), 0, "s7", i+1)
	}
	sbc := baseContext(parser.RoleInternal)
	sbc.TimeoutMs = 2 * timeoutMs // the parent waits for its children's PARTIALs
	abm := func(s string) string {
		if abms {
			return s
		}
		return ""
	}
	f.stage("sb", sbc, abm("11111111"), 1, []bspec{
		{kind: parser.KindResultIn, port: 0},
		{kind: parser.KindParent, port: 0, rank: true},
		{kind: parser.KindResultOut, port: 1, mask: "11110000"},
		{kind: parser.KindResultOut, port: 2, mask: "00001111"},
		{kind: parser.KindContributor, port: 1},
		{kind: parser.KindContributor, port: 2},
	})
	for k, name := range []string{"s1", "s7"} {
		bs := []bspec{{kind: parser.KindResultIn, port: 0}, {kind: parser.KindParent, port: 0}}
		for i := 0; i < 4; i++ {
			m := []byte("00000000")
			m[4*k+i] = '1'
			bs = append(bs, bspec{kind: parser.KindResultOut, port: i + 1, mask: string(m), rank: true},
				bspec{kind: parser.KindContributor, port: i + 1, rank: true})
		}
		cr := baseContext(parser.RoleInternal)
		cr.TimeoutMs = timeoutMs
		f.stage(name, cr, abm([]string{"11110000", "00001111"}[k]), 1, bs)
	}
	return f
}

// slotTargets returns the C-BM targets a node's snapshot shows, in the
// figures' 8-bit notation.
func slotTargets(f *fabric, node string) []string {
	sh := f.nodes[node].sh
	sh.publish(f.now)
	var out []string
	for _, c := range sh.Snapshot().Ctxs {
		for _, s := range c.Slots {
			out = append(out, s.Kind+":"+s.Target[:8])
		}
	}
	slices.Sort(out)
	return out
}

func TestFig2MoEInstall(t *testing.T) {
	f := fig2(t, 50)
	f.inject("src", f.hostFrame("src", parser.ClassResult, 0x1234, parser.XFlagInstall, flat(1, 2, 5, 6), parser.EncFlat, 0, []float32{1, 2, 3, 4}))
	f.run()
	for node, want := range map[string]string{"sb": "cbm:01100110", "s1": "cbm:01100000", "s7": "cbm:00000110"} {
		if got := slotTargets(f, node); len(got) != 1 || got[0] != want {
			t.Errorf("%s installed %v, want [%s]", node, got, want)
		}
	}
	// Each selected expert got exactly one copy carrying only its bit.
	for i := 1; i <= 8; i++ {
		h := f.hosts[fmt.Sprintf("e%d", i)]
		sel := i == 2 || i == 3 || i == 6 || i == 7
		if sel != (len(h.got) == 1) || len(h.got) > 1 {
			t.Fatalf("e%d got %d copies", i, len(h.got))
		}
		if sel {
			x := decodeFrame(t, h.got[0])
			if fmt.Sprint(x.eps) != fmt.Sprint([]uint32{uint32(i - 1)}) || x.d.Ext.XFlags&parser.XFlagInstall == 0 {
				t.Fatalf("e%d copy D-BM %v xflags %#x", i, x.eps, x.d.Ext.XFlags)
			}
		}
	}
}

// TestFig2MoEBatch: a batch of random top-K tokens is dispatched, experts
// answer (in random order) with weighted outputs, and the source gets
// exactly one combined vector per token equal to the exact sum.
func TestFig2MoEBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	f := fig2(t, 50)
	const tokens, dim = 48, 8
	type tok struct {
		experts []uint32
		out     map[uint32][]float32
	}
	batch := make([]tok, tokens)
	for k := range batch {
		K := 1 + r.IntN(4)
		perm := r.Perm(8)[:K]
		slices.Sort(perm)
		batch[k].out = map[uint32][]float32{}
		for _, e := range perm {
			batch[k].experts = append(batch[k].experts, uint32(e))
			v := make([]float32, dim)
			for i := range v {
				v[i] = randF32(r) // g_k * f_k(x), already weighted by the expert
			}
			batch[k].out[uint32(e)] = v
		}
		hidden := []float32{float32(k), 1, 2, 3}
		f.inject("src", f.hostFrame("src", parser.ClassResult, uint64(1000+k), parser.XFlagInstall, flat(batch[k].experts...), parser.EncFlat, 0, hidden))
	}
	f.run()
	// Experts answer every copy they got, in random order.
	f.rng = r
	for i := 1; i <= 8; i++ {
		h := f.hosts[fmt.Sprintf("e%d", i)]
		for _, fr := range h.got {
			x := decodeFrame(t, fr)
			tk := x.d.Ext.Token
			e := uint32(i - 1)
			f.inject(h.name, f.hostFrame(h.name, parser.ClassData, tk, 0, flat(e), parser.EncFlat, 0, batch[tk-1000].out[e]))
		}
	}
	f.run()
	got := map[uint64]int{}
	for _, fr := range f.hosts["src"].got {
		x := decodeFrame(t, fr)
		tk := x.d.Ext.Token
		got[tk]++
		b := batch[tk-1000]
		if fmt.Sprint(x.eps) != fmt.Sprint(b.experts) {
			t.Fatalf("token %d: P-BM %v, want %v", tk, x.eps, b.experts)
		}
		if x.d.Ext.XFlags&parser.XFlagPartial != 0 || len(x.vals) != dim {
			t.Fatalf("token %d: partial or %d values", tk, len(x.vals))
		}
		for i := 0; i < dim; i++ {
			var terms []float32
			for _, e := range b.experts {
				terms = append(terms, b.out[e][i])
			}
			want := exactSum(terms...)
			if len(b.experts) == 1 {
				want = exactSum(terms[0]) // a lone expert's output passes through unmerged, as sent
			}
			if x.vals[i].Cmp(want) != 0 {
				t.Fatalf("token %d element %d: got %v want %v", tk, i, x.vals[i].FloatString(30), want.FloatString(30))
			}
		}
	}
	for k := range batch {
		if got[uint64(1000+k)] != 1 {
			t.Fatalf("token %d: source got %d combined vectors", 1000+k, got[uint64(1000+k)])
		}
	}
	for name, n := range f.nodes {
		if _, _, open, _ := n.sh.Status(testOp); open != 0 {
			t.Errorf("%s: %d soft-state entries left", name, open)
		}
	}
	_ = big.NewRat
}

// TestFig2SoftStateBound: INSTALLs beyond Window Intervals entries are
// forwarded without installing (counted), and their combine passes through
// unmerged, still exact.
func TestFig2SoftStateBound(t *testing.T) {
	f := fig2(t, 50)
	// s1 is a branch for every token below: its table (64) overflows.
	for k := 0; k < 70; k++ {
		f.inject("src", f.hostFrame("src", parser.ClassResult, uint64(k+1), parser.XFlagInstall, flat(0, 1), parser.EncFlat, 0, []float32{1}))
	}
	f.run()
	if got := f.cnt.InstallNoRoom.Load(); got != 6 {
		t.Fatalf("installs refused %d, want 6", got)
	}
	for _, e := range []uint32{0, 1} {
		name := fmt.Sprintf("e%d", e+1)
		f.inject(name, f.hostFrame(name, parser.ClassData, 70, 0, flat(e), parser.EncFlat, 0, []float32{float32(e) + 1}))
	}
	f.run()
	var sum big.Rat
	var n int
	for _, fr := range f.hosts["src"].got {
		x := decodeFrame(t, fr)
		if x.d.Ext.Token == 70 {
			n++
			sum.Add(&sum, x.vals[0])
		}
	}
	if n != 2 || sum.Cmp(big.NewRat(3, 1)) != 0 {
		t.Fatalf("uninstalled token: %d frames, sum %v", n, sum.String())
	}
}

// TestReliableMulticastACKs: 8 receivers acknowledge each window with
// zero-group DATA; the source gets exactly one ACK per window. With one ACK
// dropped, it gets one PARTIAL ACK whose miss set is exactly that receiver,
// and the retransmission to the miss set closes the loop.
func TestReliableMulticastACKs(t *testing.T) {
	for _, pre := range []bool{false, true} {
		t.Run(fmt.Sprint("preconfigured=", pre), func(t *testing.T) { testACKs(t, pre) })
	}
}

func testACKs(t *testing.T, pre bool) {
	f := fig2ABM(t, 50, pre)
	install := parser.XFlagInstall
	if pre {
		install = 0
	}
	all := []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	const windows = 10
	const lost = 5 // window 5: r5's ACK (endpoint 4) is lost
	f.tap = func(to end, fr []byte) bool {
		if to.name == "s7" && to.port == 1 {
			x := decodeFrame(t, fr)
			return !(x.d.Class == parser.ClassData && x.d.Ext.Token == lost)
		}
		return true
	}
	for w := uint64(1); w <= windows; w++ {
		f.inject("src", f.hostFrame("src", parser.ClassResult, w, install, flat(all...), parser.EncFlat, 0, []float32{float32(w)}))
	}
	f.run()
	ackAll := func() {
		for i := 1; i <= 8; i++ {
			h := f.hosts[fmt.Sprintf("e%d", i)]
			for _, fr := range h.got {
				x := decodeFrame(t, fr)
				f.inject(h.name, f.hostFrame(h.name, parser.ClassData, x.d.Ext.Token, 0, flat(uint32(i-1)), parser.EncFlat, 0, nil))
			}
			h.got = nil
		}
		f.run()
	}
	ackAll()
	acks := map[uint64][]decoded{}
	collect := func() {
		for _, fr := range f.hosts["src"].got {
			x := decodeFrame(t, fr)
			if x.d.Count != 0 || x.d.Groups != 0 {
				t.Fatalf("ACK with payload")
			}
			acks[x.d.Ext.Token] = append(acks[x.d.Ext.Token], x)
		}
		f.hosts["src"].got = nil
	}
	collect()
	for w := uint64(1); w <= windows; w++ {
		a := acks[w]
		if w == lost {
			if len(a) != 0 {
				t.Fatalf("window %d: ACK before the timeout", w)
			}
			continue
		}
		if len(a) != 1 || fmt.Sprint(a[0].eps) != fmt.Sprint(all) || a[0].d.Ext.XFlags&parser.XFlagPartial != 0 {
			t.Fatalf("window %d: %d ACKs %v", w, len(a), a)
		}
	}
	f.tick(60 * msT) // s1/s7 timers: s7 sends its PARTIAL
	f.tick(60 * msT) // sb's timer
	collect()
	a := acks[lost]
	if len(a) != 1 || a[0].d.Ext.XFlags&parser.XFlagPartial == 0 {
		t.Fatalf("window %d: %d ACKs after the timeout (want one PARTIAL)", lost, len(a))
	}
	miss := missSet(all, a[0].eps)
	if fmt.Sprint(miss) != "[4]" {
		t.Fatalf("miss set %v, want [4] (r5)", miss)
	}
	// Selective retransmission to the miss set, same token.
	f.tap = nil
	f.inject("src", f.hostFrame("src", parser.ClassResult, lost, install, flat(miss...), parser.EncFlat, 0, []float32{lost}))
	f.run()
	for i := 1; i <= 8; i++ {
		if n := len(f.hosts[fmt.Sprintf("e%d", i)].got); (i == 5) != (n == 1) || n > 1 {
			t.Fatalf("retransmission: e%d got %d", i, n)
		}
	}
	ackAll()
	collect()
	a = acks[lost]
	if len(a) != 2 || fmt.Sprint(a[1].eps) != "[4]" {
		t.Fatalf("after repair: %d ACKs, last %v", len(a), a[len(a)-1].eps)
	}
	if f.cnt.ExpiredEmpty.Load() != 0 {
		t.Fatalf("soft state expired empty: %d", f.cnt.ExpiredEmpty.Load())
	}
}

func missSet(all, got []uint32) []uint32 {
	var m []uint32
	for _, e := range all {
		if !slices.Contains(got, e) {
			m = append(m, e)
		}
	}
	return m
}

var _ = strings.Repeat

// TestFig2MoERedispatchPerToken reproduces, at the switches, why a MoE
// source has to re-dispatch every Token (one per chunk of a token) to that
// Token's own miss set (docs/protocol.md 8.9: D-BM AND NOT P-BM), never to
// the union of its chunks' misses. Two chunk Tokens go to experts e1, e2
// (below branch s1) and e5; e2's return of chunk 0 and e1's return of chunk
// 1 are lost, so the source holds PARTIALs {e1,e5} for chunk 0 and {e2,e5}
// for chunk 1.
//
//   - per Token: chunk 0 goes again to {e2} only, chunk 1 to {e1}; each
//     return reaches the source alone, disjoint from its PARTIAL, and the
//     two tile each chunk's dispatch set;
//   - union (what host/bitmap did): both chunks go to {e1,e2}; s1 is a
//     branch for them again, merges the cached returns of both experts and
//     sends {e1,e2} for each chunk, which overlaps what the source already
//     holds: the source can use neither, misses the same experts, and the
//     same re-dispatch produced the same overlap every round until it gave
//     up (the MoE lab test that failed on real switches).
func TestFig2MoERedispatchPerToken(t *testing.T) {
	for _, union := range []bool{false, true} {
		t.Run(fmt.Sprint("union=", union), func(t *testing.T) {
			f := fig2(t, 50)
			experts := []uint32{0, 1, 4}
			out := map[uint32][]float32{0: {1.5}, 1: {-2.25}, 4: {0.125}}
			lost := map[uint64]uint32{100: 1, 101: 0} // chunk Token -> expert whose return is lost once
			f.tap = func(to end, fr []byte) bool {
				x := decodeFrame(t, fr)
				if to.name == "s1" && x.d.Class == parser.ClassData && len(x.eps) == 1 {
					if e, ok := lost[x.d.Ext.Token]; ok && e == x.eps[0] {
						delete(lost, x.d.Ext.Token)
						return false
					}
				}
				return true
			}
			answer := func() {
				for _, e := range experts {
					h := f.hosts[fmt.Sprintf("e%d", e+1)]
					for _, fr := range h.got {
						x := decodeFrame(t, fr)
						f.inject(h.name, f.hostFrame(h.name, parser.ClassData, x.d.Ext.Token, 0, flat(e), parser.EncFlat, 0, out[e]))
					}
					h.got = nil
				}
				f.run()
			}
			for _, tk := range []uint64{100, 101} {
				f.inject("src", f.hostFrame("src", parser.ClassResult, tk, parser.XFlagInstall, flat(experts...), parser.EncFlat, 0, []float32{1}))
			}
			f.run()
			answer()
			f.tick(60 * msT) // s1: PARTIALs
			f.tick(60 * msT) // sb: PARTIALs
			held := map[uint64][][]uint32{}
			for _, fr := range f.hosts["src"].got {
				x := decodeFrame(t, fr)
				held[x.d.Ext.Token] = append(held[x.d.Ext.Token], x.eps)
			}
			f.hosts["src"].got = nil
			if fmt.Sprint(held[100]) != "[[0 4]]" || fmt.Sprint(held[101]) != "[[1 4]]" {
				t.Fatalf("before the re-dispatch the source holds %v, want chunk 0 [[0 4]], chunk 1 [[1 4]]", held)
			}
			f.tick(10 * msT) // the source's re-dispatch comes later than the late guard
			redo := map[uint64][]uint32{100: {1}, 101: {0}}
			if union {
				redo = map[uint64][]uint32{100: {0, 1}, 101: {0, 1}}
			}
			for _, tk := range []uint64{100, 101} {
				f.inject("src", f.hostFrame("src", parser.ClassResult, tk, parser.XFlagInstall, flat(redo[tk]...), parser.EncFlat, 0, []float32{1}))
			}
			f.run()
			answer()
			for _, fr := range f.hosts["src"].got {
				x := decodeFrame(t, fr)
				held[x.d.Ext.Token] = append(held[x.d.Ext.Token], x.eps)
			}
			for _, tk := range []uint64{100, 101} {
				tiled := tiles(held[tk], experts)
				if union && tiled {
					t.Errorf("chunk %d: the union re-dispatch left a tiling %v: the case no longer shows the overlap", tk-100, held[tk])
				}
				if !union && !tiled {
					t.Errorf("chunk %d: the source holds %v: no disjoint contributions cover %v", tk-100, held[tk], experts)
				}
			}
		})
	}
}

// tiles reports whether some of the P-BMs in held are pairwise disjoint and
// together equal want (brute force over subsets: the oracle).
func tiles(held [][]uint32, want []uint32) bool {
	for m := 1; m < 1<<len(held); m++ {
		seen := map[uint32]int{}
		for i, s := range held {
			if m&(1<<i) != 0 {
				for _, e := range s {
					seen[e]++
				}
			}
		}
		ok := len(seen) == len(want)
		for _, e := range want {
			ok = ok && seen[e] == 1
		}
		if ok {
			return true
		}
	}
	return false
}

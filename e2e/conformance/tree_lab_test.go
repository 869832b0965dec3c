package conformance

// Multi-switch roles (LEAF, INTERNAL, ROOT) against a real prismd, with
// this package playing the other switches of the tree. The lab is one
// prismd sw1 with four hosts: h1 and h2 are ranks (and h1 the AM), hx and
// hy run spec-built switches (tree_peer_test.go) that sw1 is staged to
// take as its parent or its children. Every switch-to-switch frame sw1
// sends is decoded and checked against docs/protocol.md, and every one it
// accepts was built from it.

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
)

const treeTopology = `# sw1 with two ranks (h1, h2) and two hosts playing switches (hx, hy)
name: tree
mtu: 1500
topology:
  nodes:
    h1: {kind: host, ipv4: 10.0.0.1/24}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    hx: {kind: host, ipv4: 10.0.0.3/24}
    hy: {kind: host, ipv4: 10.0.0.4/24}
    sw1: {kind: prismd}
  links:
    - endpoints: ["h1:eth0", "sw1:p1"]
    - endpoints: ["h2:eth0", "sw1:p2"]
    - endpoints: ["hx:eth0", "sw1:p3"]
    - endpoints: ["hy:eth0", "sw1:p4"]
`

type treeEnv struct {
	*env
	hx, hy *nic
	px, py mac // sw1's port MACs toward hx and hy
	pxIdx  uint16
	pyIdx  uint16
	caps   []capRecord
	op     uint16
	stamps map[*nic]*trStamps
}

func newTreeEnv(t *testing.T) *treeEnv {
	e := newEnvOn(t, treeTopology, 0x7EE00000)
	lab := e.lab
	te := &treeEnv{env: e}
	te.hx = openNIC(t, lab, "hx", "eth0")
	te.hy = openNIC(t, lab, "hy", "eth0")
	te.px, te.py = mac(lab.Topo.MAC("sw1", "p3")), mac(lab.Topo.MAC("sw1", "p4"))
	te.pxIdx = uint16(deploy.PortIndex(lab.Topo, "sw1", "p3"))
	te.pyIdx = uint16(deploy.PortIndex(lab.Topo, "sw1", "p4"))
	te.stamps = map[*nic]*trStamps{}
	for _, h := range []struct {
		n    *nic
		node string
	}{{e.h1, "h1"}, {e.h2, "h2"}, {te.hx, "hx"}, {te.hy, "hy"}} {
		te.stamps[h.n] = openTrStamps(t, lab, h.node, "eth0")
	}
	return te
}

func (te *treeEnv) nextID() ident {
	te.op++
	return ident{Job: te.jobID, Group: 1, GroupGen: 1, Op: te.op, OpGen: 1}
}

// upLink is the edge to a parent played on n (sw1 port port, MAC sw).
func (te *treeEnv) upLink(name string, n *nic, sw mac, port uint16) *trLink {
	return &trLink{name: name, nic: n, stamps: te.stamps[n], swMAC: sw, port: port,
		dStream: 0x31, dSW: 0x40, dPeer: 0x41, rStream: 0x32, rSW: 0x42, rPeer: 0x43}
}

// downLink is the edge to child k played on n.
func (te *treeEnv) downLink(name string, k int, n *nic, sw mac, port uint16) *trLink {
	kk := uint16(k)
	return &trLink{name: name, nic: n, stamps: te.stamps[n], swMAC: sw, port: port,
		dStream: 0x51 + kk, dSW: 0x60 + 2*kk, dPeer: 0x70 + 2*kk,
		rStream: 0x55 + kk, rSW: 0x61 + 2*kk, rPeer: 0x71 + 2*kk}
}

// rankBindings are the CONTRIBUTOR (and RESULT_OUT) bindings of ranks on
// h1/h2 with the numbering of lab_test.go (senders and result sinks).
func (te *treeEnv) rankBindings(ranks []int, results bool) []binding {
	var b []binding
	for _, r := range ranks {
		b = append(b, binding{Kind: bkContributor, Flags: bfRank, Stream: uint16(r + 1),
			Local: swDataEP(r), Peer: rankDataEP(r), Port: te.portIdx[r], MAC: te.rankNIC(r).mac})
		if results {
			b = append(b, binding{Kind: bkResultOut, Flags: bfRank, Stream: uint16(r + 1),
				Local: swResEP(r), Peer: rankResEP(r), Port: te.portIdx[r], MAC: te.rankNIC(r).mac})
		}
	}
	return b
}

// trCtx is the context record every tree test stages: ALLREDUCE, FP32 in
// and out, MTU 1500, Replay Depth = Window Intervals, Window Bytes =
// intervals x MTU, Window Elements = intervals x 1452.
func trCtx(role, acc, partial uint8, op trOp, maxTerms, timeout uint32) stageCtx {
	return stageCtx{Role: role, Collective: collAllreduce, In: fmtFP32, Acc: acc, Partial: partial, Out: fmtFP32,
		W: uint16(op.W), VecLen: op.VecLen, MTU: 1500, WI: op.WI, RD: op.WI, WB: op.WB,
		WE: uint32(op.WI) * uint32(maxElemsPerFrame(1500)), MaxTerms: maxTerms, Timeout: timeout}
}

func trNewOp(id ident, vecLen uint32, acc uint8, wi uint16) trOp {
	o := trOp{ID: id, VecLen: vecLen, WI: wi, WB: uint32(wi) * 1500}
	if acc == accKulischFixed {
		o.W = 280 // 278 + ceil(log2 4), a byte multiple
	}
	return o
}

// rankSpec is the opSpec the rank senders and result sinks of lab_test.go
// use for o.
func (o trOp) rankSpec() opSpec {
	return opSpec{ID: o.ID, Collective: collAllreduce, W: uint16(o.W), VecLen: o.VecLen, WI: o.WI, WB: o.WB,
		WE: uint32(o.WI) * uint32(maxElemsPerFrame(1500)), ResultTo: []int{0, 1}}
}

// activate STAGEs and COMMITs s on sw1 (expecting OK at each step).
func (te *treeEnv) activate(t *testing.T, id ident, s stage) bool {
	t.Helper()
	r := te.am.must(t, control{ID: id, Cmd: cmdStage, Body: s.encode()})
	if r.C.Status != stOK || r.Ack.State != osStaged {
		t.Errorf("STAGE (role %d, partial policy %d): ACK status %d state %d detail %d, want OK STAGED", s.Ctx.Role, s.Ctx.Partial, r.C.Status, r.Ack.State, r.Ack.Detail)
		return false
	}
	te.am.expectAck(t, "COMMIT", te.am.cmd(id, cmdCommit), stOK, osActive)
	return true
}

func (te *treeEnv) abort(t *testing.T, id ident) {
	t.Helper()
	te.am.must(t, te.am.cmd(id, cmdAbort))
}

// readCaps reads every CAPS page (5.3).
func (te *treeEnv) readCaps(t *testing.T) {
	count := 1
	for p := 0; p < count; p++ {
		r := te.am.must(t, control{Cmd: cmdCapsQuery, Body: []byte{byte(p), 0, 0, 0}})
		if r.C.Cmd != cmdCapsResponse {
			t.Fatalf("CAPS_QUERY page %d answered with command %d", p, r.C.Cmd)
		}
		count = int(r.C.FragCount)
		pg, err := decodeCapsPage(r.C.Body)
		if err != nil {
			t.Fatalf("CAPS page %d: %v", p, err)
		}
		if pg.PortCount != 4 {
			t.Errorf("CAPS Port Count %d, sw1 has 4 ports", pg.PortCount)
		}
		te.caps = append(te.caps, pg.Records...)
	}
	for _, r := range te.caps {
		t.Logf("caps: in %d acc %#x partial %d out %d W %d..%d terms %d bindings %d", r.In, r.Acc, r.Partial, r.Out, r.MinW, r.MaxW, r.MaxTerms, r.MaxBindings)
	}
}

// covers reports whether a capability record covers FP32 in/out with acc
// and partial at W 280, 4 terms, 8 bindings and window wi.
// needKulischFixed skips t unless a capability record covers FP32 /
// KULISCH_FIXED / partial / FP32 with a window of wi intervals.
func (te *treeEnv) needKulischFixed(t *testing.T, partial uint8, wi uint16) {
	t.Helper()
	if !te.covers(accKulischFixed, partial, wi) {
		t.Skipf("no capability record covers FP32 / KULISCH_FIXED / partial format %d / FP32", partial)
	}
}

func (te *treeEnv) covers(acc, partial uint8, wi uint16) bool {
	for _, r := range te.caps {
		if r.In != fmtFP32 || r.Out != fmtFP32 || r.Acc != acc || r.Partial != partial {
			continue
		}
		if acc == accKulischFixed && (r.MinW > 280 || r.MaxW < 280) {
			continue
		}
		if r.MaxTerms >= 4 && r.MaxBindings >= 8 && r.MaxWI >= wi && r.MaxRD >= wi && r.MaxWB >= uint32(wi)*1500 {
			return true
		}
	}
	return false
}

// ---- values ----

// trWideInputs are two ranks' vectors whose exact sums span many binades
// from one element to the next (exponents cycle over -100, 0, +100 and the
// second rank adds a term 2^-30 smaller), so KULISCH partials cannot be
// packed into a few wide KULISCH_SCALED groups: many partial frames.
func trWideInputs(seed uint64, n int) [2][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x51ed))
	var v [2][]float32
	v[0], v[1] = make([]float32, n), make([]float32, n)
	for i := 0; i < n; i++ {
		e := []int{-100, 0, 100}[i%3] + rng.IntN(5)
		a := float32(math.Ldexp(1+rng.Float64(), e))
		b := float32(math.Ldexp(1+rng.Float64(), e-30))
		if rng.IntN(2) == 0 {
			a = -a
		}
		if rng.IntN(2) == 0 {
			b = -b
		}
		v[0][i], v[1][i] = a, b
	}
	return v
}

// trNarrowInputs are two ranks' vectors like gradients: per element both
// terms have exponents within 4 binades of each other (over -60..60), so
// every exact sum has at most 24 + 5 significant bits: binary64 holds each
// one exactly and FP32 few of them. Section 6's [choice]: prismd sends such
// partials as KULISCH_F64 frames.
func trNarrowInputs(seed uint64, n int) [2][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0xf64))
	var v [2][]float32
	v[0], v[1] = make([]float32, n), make([]float32, n)
	for i := 0; i < n; i++ {
		e := rng.IntN(121) - 60
		for {
			a, b := trRandF32(rng, e, e+1), trRandF32(rng, e-3, e-1)
			if s := trAdd(trF32(a), trF32(b)); s.State == trFinite && trF64Exact(s) {
				v[0][i], v[1][i] = a, b
				break
			}
		}
	}
	return v
}

// trRankSum is the exact partial of the two ranks' inputs under the
// accumulator: KULISCH_FIXED the exact sum, FP32_ARRIVAL the sum rounded
// once into FP32 state (from +0: a exactly, then a + b rounded).
func trRankSum(acc uint8, a, b float32) trVal {
	if acc == accKulischFixed {
		return trAdd(trF32(a), trF32(b))
	}
	return trF32(exactSum(a, b))
}

// trRandF32 is a random nonzero FP32 of exponent in [lo, hi].
func trRandF32(rng *rand.Rand, lo, hi int) float32 {
	v := float32(math.Ldexp(1+rng.Float64(), lo+rng.IntN(hi-lo+1)))
	if rng.IntN(2) == 0 {
		v = -v
	}
	return v
}

// trGroupPlan is one group of a spec-built child partial: a format and a
// count (KULISCH_SCALED: B and Shift from shiftDown below the canonical
// one, or the edge Shift + 8B == W when edge).
type trGroupPlan struct {
	Format    uint8
	Count     int
	ShiftDown int
	Edge      bool
}

// trChildPartial is the partial of a child switch standing for two ranks:
// for each planned group, values its format represents exactly (AUTO may
// send any of them, 6), and the frames' groups.
func trChildPartial(seed uint64, w int, plan [][]trGroupPlan) ([]trVal, [][]group) {
	rng := rand.New(rand.NewPCG(seed, 0xc41d))
	var vals []trVal
	var frames [][]group
	for fi, fp := range plan {
		var gs []group
		for gi, gp := range fp {
			xs := make([]trVal, gp.Count)
			switch gp.Format {
			case fmtINT8:
				v := make([]int8, gp.Count)
				for i := range v {
					for v[i] == 0 {
						v[i] = int8(rng.IntN(256) - 128)
					}
					xs[i] = trFloat(float64(v[i]))
				}
				gs = append(gs, trInt8Group(v))
			case fmtFP16:
				bits := make([]uint16, gp.Count)
				for i := range bits {
					exp := uint16(rng.IntN(31)) // 0 (subnormal) .. 30
					m := uint16(rng.IntN(1024))
					if exp == 0 && m == 0 {
						m = 1
					}
					bits[i] = uint16(rng.IntN(2))<<15 | exp<<10 | m
					xs[i] = trFloat(trHalf(bits[i]))
				}
				gs = append(gs, trFP16Group(bits))
			case fmtBF16:
				bits := make([]uint16, gp.Count)
				for i := range bits {
					f := trRandF32(rng, -60, 60)
					bits[i] = uint16(math.Float32bits(f) >> 16)
					xs[i] = trFloat(float64(math.Float32frombits(uint32(bits[i]) << 16)))
				}
				gs = append(gs, bf16Group(bits))
			case fmtFP32:
				f := make([]float32, gp.Count)
				for i := range f {
					f[i] = trRandF32(rng, -60, 60)
					xs[i] = trF32(f[i])
				}
				gs = append(gs, fp32Group(f))
			case fmtKulisch:
				for i := range xs {
					// exact sums of two FP32 that no narrower format holds;
					// a +0 and a -0 (states 1 and 2) in the first frames.
					switch {
					case fi == 0 && gi == 0 && i == 1:
						xs[i] = trVal{State: trPosZero, U: new(big.Int)}
					case fi == 1 && i == 0:
						xs[i] = trVal{State: trNegZero, U: new(big.Int)}
					default:
						e := rng.IntN(100) - 50
						xs[i] = trAdd(trF32(trRandF32(rng, e, e)), trF32(trRandF32(rng, e-40, e-40)))
					}
				}
				gs = append(gs, trKulischGroup(w, xs))
			case fmtScaled:
				e := rng.IntN(80) - 40
				for i := range xs {
					xs[i] = trAdd(trF32(trRandF32(rng, e, e+2)), trF32(trRandF32(rng, e-12, e-10)))
				}
				s, b, _ := trScaledCanon(w, xs)
				switch {
				case gp.Edge:
					b = 33
					s = w - 8*b
				case gp.ShiftDown > 0:
					s -= gp.ShiftDown
					// the lower Shift widens the integers: recompute B.
					for _, x := range xs {
						v := new(big.Int).Abs(x.U)
						v.Rsh(v, uint(s))
						if x.U.Sign() < 0 {
							v.Neg(v)
						}
						b = max(b, trMinBytes(v))
					}
				}
				gs = append(gs, trScaledGroup(b, s, xs))
			case fmtF64:
				// Values binary64 holds (6, KULISCH_F64): exact sums of two
				// FP32 about 20 binades apart, with exponents set by the
				// element's position so that two children's values at one
				// element (same plan) also sum to a value binary64 holds;
				// in every group the Kulisch unit 2^-149 and -3 units
				// (-1.5 x 2^-148), and +0 and -0 in every other frame.
				for i := range xs {
					pos := len(vals) + i
					e := (pos*37)%200 - 100
					switch {
					case fi%2 == 0 && i == 0:
						xs[i] = trVal{State: trPosZero, U: new(big.Int)}
					case fi%2 == 0 && i == 1:
						xs[i] = trVal{State: trNegZero, U: new(big.Int)}
					case i == 2:
						xs[i] = trUnits(big.NewInt(1))
					case i == 3:
						xs[i] = trUnits(big.NewInt(-3))
					default:
						xs[i] = trAdd(trF32(trRandF32(rng, e, e+2)), trF32(trRandF32(rng, e-20, e-18)))
					}
				}
				gs = append(gs, trF64Group(xs))
			}
			vals = append(vals, xs...)
		}
		frames = append(frames, gs)
	}
	return vals, frames
}

// trSetF64 replaces element pos of a child partial built by trChildPartial
// (frame j covering [100j, 100j + 100)) with x; the element must lie in a
// KULISCH_F64 group.
func trSetF64(vals []trVal, frames [][]group, pos int, x trVal) {
	off := pos % 100
	for gi, g := range frames[pos/100] {
		if off >= int(g.Count) {
			off -= int(g.Count)
			continue
		}
		if g.Format != fmtF64 {
			panic("trSetF64: element not in a KULISCH_F64 group")
		}
		b, ok := trF64Bits(x)
		if !ok {
			panic("trSetF64: binary64 does not hold the value")
		}
		v := append([]byte(nil), g.Values...)
		binary.LittleEndian.PutUint64(v[8*off:], b)
		frames[pos/100][gi].Values = v
		vals[pos] = x
		return
	}
	panic("trSetF64: no such element")
}

// trGroupsLen is the element count of a frame's groups.
func trGroupsLen(gs []group) int {
	n := 0
	for _, g := range gs {
		n += int(g.Count)
	}
	return n
}

// TestTree runs sw1 as LEAF, ROOT and INTERNAL of trees whose other
// switches are this package's spec-built switches.
func TestTree(t *testing.T) {
	start := time.Now()
	te := newTreeEnv(t)
	t.Logf("lab up in %v", time.Since(start))
	te.readCaps(t)
	t.Run("leaf", te.testLeaf)
	t.Run("root", te.testRoot)
	t.Run("internal", te.testInternal)
	t.Run("failure", te.testTreeFailures)
}

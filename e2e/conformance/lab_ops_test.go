package conformance

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
	"github.com/prismd/prismd/deploy/labtest"
)

func newEnv(t *testing.T) *env { return newEnvOn(t, "single", 0xC0DE0000) }

// newEnvOn brings topo up (a shipped name or YAML; h1 and h2 on sw1's p1
// and p2) with the AM on h1 and job IDs from jobBase.
func newEnvOn(t *testing.T, topo any, jobBase uint64) *env {
	labtest.RequireRoot(t)
	lab := labtest.Up(t, topo)
	e := &env{t: t, lab: lab, jobID: jobBase + uint64(time.Now().UnixNano()&0xFFFF)}
	e.h1 = openNIC(t, lab, "h1", "eth0")
	e.h2 = openNIC(t, lab, "h2", "eth0")
	e.nodeMAC = mac(lab.Topo.MAC("sw1", deploy.NodeMACIface))
	for i, ifc := range []string{"p1", "p2"} {
		e.portMAC[i] = mac(lab.Topo.MAC("sw1", ifc))
		e.portIdx[i] = uint16(deploy.PortIndex(lab.Topo, "sw1", ifc))
	}
	e.am = &manager{e: e, nic: e.h1, txn: uint32(time.Now().UnixNano())}
	return e
}

func TestLab(t *testing.T) {
	e := newEnv(t)
	t.Run("caps", e.testCaps)
	if len(e.caps) == 0 {
		t.Fatal("no capability records")
	}
	id := func(op uint16) ident { return ident{Job: e.jobID, Group: 1, GroupGen: 1, Op: op, OpGen: 1} }
	t.Run("allreduce_kulisch", func(t *testing.T) {
		e.runCollective(t, opSpec{ID: id(1), Collective: collAllreduce, Acc: accKulischFixed, VecLen: 3000, ResultTo: []int{0, 1}}, true)
	})
	t.Run("allreduce_fp32_arrival", func(t *testing.T) {
		e.runCollective(t, opSpec{ID: id(2), Collective: collAllreduce, Acc: accFP32Arrival, VecLen: 2500, ResultTo: []int{0, 1}}, false)
	})
	t.Run("reduce_kulisch", func(t *testing.T) {
		e.runCollective(t, opSpec{ID: id(3), Collective: collReduce, Acc: accKulischFixed, VecLen: 2900, ResultTo: []int{1}}, false)
	})
	t.Run("stage_invalid", func(t *testing.T) { e.testStageInvalid(t, id(10)) })
	active := id(12)
	t.Run("control_state", func(t *testing.T) { active = e.testControlState(t, id(11), id(12)) })
	t.Run("data_drops", func(t *testing.T) { e.testDataDrops(t, active) })
	t.Run("control_drops", func(t *testing.T) { e.testControlDrops(t, id(13)) })
	t.Run("push", func(t *testing.T) { e.testPush(t, id(20)) })
	t.Run("silent_contributor", func(t *testing.T) { e.testSilentContributor(t, id(30)) })
	t.Run("peer_failed", func(t *testing.T) { e.testPeerFailed(t, id(31)) })
}

// testCaps reads every CAPS page (5.3) and checks the tuples the other
// tests use are advertised.
func (e *env) testCaps(t *testing.T) {
	var pages []capsPage
	count := 1
	for p := 0; p < count; p++ {
		r := e.am.must(t, control{Cmd: cmdCapsQuery, Body: []byte{byte(p), 0, 0, 0}})
		if r.C.Cmd != cmdCapsResponse {
			t.Fatalf("CAPS_QUERY page %d answered with command %d status %d", p, r.C.Cmd, r.C.Status)
		}
		if r.C.ID != (ident{}) {
			t.Errorf("CAPS_RESPONSE identity %v, want zero (3: SHOULD be zero)", r.C.ID)
		}
		if int(r.C.FragIdx) != p {
			t.Errorf("page %d has Fragment Index %d", p, r.C.FragIdx)
		}
		if p == 0 {
			count = int(r.C.FragCount)
		} else if int(r.C.FragCount) != count {
			t.Errorf("page %d says %d pages, page 0 said %d", p, r.C.FragCount, count)
		}
		pg, err := decodeCapsPage(r.C.Body)
		if err != nil {
			t.Fatalf("page %d: %v", p, err)
		}
		if p < count-1 && len(pg.Records) != 16 {
			t.Errorf("page %d of %d holds %d records; every page but the last holds 16 (5.3)", p, count, len(pg.Records))
		}
		pages = append(pages, pg)
		e.caps = append(e.caps, pg.Records...)
	}
	for i, pg := range pages {
		t.Logf("page %d: ports %d, max MTU %d, max operations %d, %d records", i, pg.PortCount, pg.MaxMTU, pg.MaxOps, len(pg.Records))
		if pg.PortCount != 2 {
			t.Errorf("page %d: Port Count %d, sw1 has 2 ports", i, pg.PortCount)
		}
		if pg.MaxOps < 1 {
			t.Errorf("page %d: Max Operations %d", i, pg.MaxOps)
		}
		if i > 0 && (pg.PortCount != pages[0].PortCount || pg.MaxMTU != pages[0].MaxMTU || pg.MaxOps != pages[0].MaxOps) {
			t.Errorf("page %d repeats different node fields than page 0", i)
		}
	}
	e.capsPage = pages[0]
	finding(t, "max_mtu", fMaxMTU, pages[0].MaxMTU == 1500,
		"Max MTU %d on every page, but both sw1 ports are configured with MTU 1500 (the lab's link MTU); 5.3 says the page's Max MTU is \"the largest MTU all ports support\"", pages[0].MaxMTU)
	t.Logf("%d capability records", len(e.caps))
	for _, r := range e.caps {
		usesK := r.Acc == accKulischFixed || r.Partial == fmtKulisch || r.Out == fmtKulisch
		if usesK != (r.MinW != 0) || usesK != (r.MaxW != 0) || r.MinW > r.MaxW {
			t.Errorf("record %+v: Kulisch widths %d..%d (5.3: both 0 when the tuple uses no Kulisch)", r, r.MinW, r.MaxW)
		}
	}
	// A query past the last page: ACK INVALID, Detail 0 (5.3 [choice]).
	r := e.am.must(t, control{Cmd: cmdCapsQuery, Body: []byte{byte(count), 0, 0, 0}})
	finding(t, "page_past_end", fCapsPastEnd, r.C.Cmd == cmdAck && r.C.Status == stInvalid && r.Ack.Detail == 0,
		"CAPS_QUERY for page %d of %d was answered with command %d status %d, Fragment Index/Count %d/%d, body %x; 5.3 says ACK INVALID, Detail 0",
		count, count, r.C.Cmd, r.C.Status, r.C.FragIdx, r.C.FragCount, r.C.Body)
	for _, acc := range []uint8{accKulischFixed, accFP32Arrival} {
		rec, ok := e.tuple(acc)
		if !ok {
			t.Errorf("no record advertises FP32 in / accumulator %#x / FP32 out", acc)
			continue
		}
		o := e.defaults(opSpec{Acc: acc, VecLen: 3000})
		switch {
		case acc == accKulischFixed && (o.W < rec.MinW || o.W > rec.MaxW),
			o.VecLen > rec.MaxVector, rec.MaxTerms < 2, rec.MaxMTU < 1500, rec.MaxBindings < 4,
			o.WI > rec.MaxWI, o.WI > rec.MaxRD, o.WB > rec.MaxWB, o.WE > rec.MaxWE:
			t.Errorf("record %+v does not cover the operations of this test (W %d, 3000 elements, 2 terms, 4 bindings, window %d/%d/%d)", rec, o.W, o.WI, o.WB, o.WE)
		}
	}
}

// ---- inputs and the oracle ----

// inputs returns the two ranks' vectors: nonzero finite FP32 values over
// 2^-20..2^20 of both signs; in a quarter of the elements rank 1 nearly
// cancels rank 0, so the exact sum needs more than 24 bits and a wrong
// rounding shows. Every exact sum is a normal number.
func inputs(seed uint64, n int) [2][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	val := func() float32 {
		for {
			v := float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(41)-20))
			if rng.IntN(2) == 0 {
				v = -v
			}
			if v != 0 {
				return v
			}
		}
	}
	var v [2][]float32
	v[0], v[1] = make([]float32, n), make([]float32, n)
	for i := 0; i < n; i++ {
		for {
			a := val()
			b := val()
			if rng.IntN(4) == 0 {
				b = float32(-float64(a) * (1 + (rng.Float64()-0.5)*math.Ldexp(1, -8)))
			}
			s := exactSum(a, b)
			if s != 0 && math.Abs(float64(s)) >= math.Ldexp(1, -120) && !math.IsInf(float64(s), 0) {
				v[0][i], v[1][i] = a, b
				break
			}
		}
	}
	return v
}

// exactSum is a + b computed exactly (math/big) and rounded once to the
// nearest binary32, ties to even.
func exactSum(vals ...float32) float32 {
	s := new(big.Float).SetPrec(2048)
	for _, v := range vals {
		s.Add(s, new(big.Float).SetPrec(2048).SetFloat64(float64(v)))
	}
	f, _ := s.Float32()
	return f
}

// chunks cuts [0, n) into frames of at most 363 FP32 values (MTU 1500),
// some of them of two or three groups.
func chunks(n int) [][]int {
	patterns := [][]int{{363}, {200, 137}, {363}, {100, 100, 37}, {300}, {1, 361}}
	var r [][]int
	pos := 0
	for i := 0; pos < n; i++ {
		var sizes []int
		for _, s := range patterns[i%len(patterns)] {
			if pos+s > n {
				s = n - pos
			}
			if s > 0 {
				sizes = append(sizes, s)
				pos += s
			}
		}
		r = append(r, sizes)
	}
	return r
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// frameRange is the element range of chunk k.
func frameRange(cs [][]int, k int) (int, int) {
	a := 0
	for i := 0; i < k; i++ {
		a += sum(cs[i])
	}
	return a, a + sum(cs[k])
}

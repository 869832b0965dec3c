// Tests of KULISCH_SCALED partials: a two-level tree (two LEAFs under a
// ROOT) driven directly through three engines gives bit-identical results
// with scaled and plain partials, matching an exact oracle, while the
// leaf->root streams carry a fraction of the bytes; and the scaled emission
// and merge paths do not allocate.

package engine

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/kulisch"
	"github.com/prismd/prismd/parser"
)

// node is one engine of the test tree and its ports.
type node struct {
	id int
	e  *Engine
	t  *tree
}

func (n *node) Send(port int, frame []byte) bool {
	n.t.q = append(n.t.q, hop{from: n.id, port: port, frame: append([]byte(nil), frame...)})
	return true
}
func (n *node) PortMAC(port int) [6]byte { return [6]byte{2, 0x5e, 0, byte(n.id), byte(port), 1} }
func (n *node) NumPorts() int            { return 4 }

type hop struct {
	from, port int
	frame      []byte
}

// tree: leaves 0 and 1 (ranks on ports 0 and 1, parent on port 2), root 2
// (leaf 0 on port 0, leaf 1 on port 1, the result rank on port 2).
type tree struct {
	n      [3]*node
	q      []hop
	now    int64
	key    parser.OpKey
	vlen   uint32
	up     [2]int // bytes sent leaf i -> root (whole Ethernet frames)
	upData [2]int // DATA frames leaf i -> root
	scaled int    // KULISCH_SCALED groups seen on the leaf -> root streams
	f64    int    // KULISCH_F64 groups seen on the leaf -> root streams
	// firstScaled is the First of the earliest leaf 0 -> root frame with a
	// KULISCH_SCALED group (0: none, or the frame at 0).
	firstScaled uint32
	// plainFirsts are the First of leaf 0's frames to the root without a
	// KULISCH_SCALED group, in sending order.
	plainFirsts []uint32
	// narrowFirsts are the First of leaf 0's frames with a group narrower
	// than FP32 (INT8, FP16, BF16).
	narrowFirsts []uint32
	res          []uint32
	got          []bool
	resEnd       uint32 // contiguous results received
	window       uint32
	pend         [4][]hop // each rank's DATA frames not yet sent
}

func treeRankMAC(r int) [6]byte { return [6]byte{2, 0x4b, 0, 0, byte(r), 2} }

// enc is how a test's switches send exact partials (prismd's
// kulisch_partials).
type enc int

const (
	encF64    enc = iota // the default: KULISCH_F64 where binary64 holds a frame
	encScaled            // KULISCH_SCALED plans only (kulisch_partials: scaled)
	encPlain             // plain KULISCH only (kulisch_partials: plain)
)

func (m enc) String() string { return [...]string{"f64", "scaled", "plain"}[m] }

func (m enc) config() Config {
	return Config{Logger: quiet(), PlainKulischPartials: m == encPlain, CompactKulischPartials: m == encScaled}
}

// newTree stages the tree with an element window of window (the ring:
// smaller than vlen makes every ring wrap around).
func newTree(t *testing.T, partial kulisch.Format, vlen, window uint32, m enc) *tree {
	return newTreeIn(t, kulisch.FP32, partial, vlen, window, m)
}

func newTreeIn(t *testing.T, input, partial kulisch.Format, vlen, window uint32, m enc) *tree {
	tr := &tree{key: parser.OpKey{Job: 9, Group: 1, Op: 2, OpGen: 1}, vlen: vlen, now: 1e9,
		res: make([]uint32, vlen), got: make([]bool, vlen), window: window}
	for i := range tr.n {
		tr.n[i] = &node{id: i, t: tr, e: New(m.config())}
	}
	base := Spec{Op: tr.key, Collective: parser.CollReduce,
		Tuple:        kulisch.Tuple{Input: input, Acc: kulisch.KulischFixed, Partial: partial, Output: kulisch.FP32},
		KulischWidth: kulisch.RequiredWidth(4), VectorLen: vlen, MTU: 1500, WindowIntervals: 1024, ReplayDepth: 1024,
		WindowBytes: 1 << 24, WindowElements: window, MaxTerms: 4, Timeout: time.Hour}
	root := tr.n[2]
	for i := 0; i < 2; i++ {
		leaf := tr.n[i]
		s := base
		s.Role = parser.RoleLeaf
		s.Bindings = []Binding{
			{Kind: parser.KindContributor, Rank: true, Stream: 1, LocalEP: 10, PeerEP: 1, Port: 0, PeerMAC: treeRankMAC(2 * i)},
			{Kind: parser.KindContributor, Rank: true, Stream: 2, LocalEP: 11, PeerEP: 2, Port: 1, PeerMAC: treeRankMAC(2*i + 1)},
			{Kind: parser.KindParent, Stream: uint16(5 + i), LocalEP: 12, PeerEP: uint16(100 + i), Port: 2, PeerMAC: root.PortMAC(i)},
		}
		if err := leaf.e.Stage(tr.now, &s, 4); err != nil {
			t.Fatal(err)
		}
	}
	s := base
	s.Role = parser.RoleRoot
	s.Bindings = []Binding{
		{Kind: parser.KindContributor, Stream: 5, LocalEP: 100, PeerEP: 12, Port: 0, PeerMAC: tr.n[0].PortMAC(2)},
		{Kind: parser.KindContributor, Stream: 6, LocalEP: 101, PeerEP: 12, Port: 1, PeerMAC: tr.n[1].PortMAC(2)},
		{Kind: parser.KindResultOut, Rank: true, Stream: 1, LocalEP: 200, PeerEP: 1, Port: 2, PeerMAC: treeRankMAC(0)},
	}
	if err := root.e.Stage(tr.now, &s, 4); err != nil {
		t.Fatal(err)
	}
	for _, n := range tr.n {
		if err := n.e.Commit(tr.now, tr.key); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// contribute prepares rank r's whole vector as DATA frames of 363 FP32;
// run sends them as the leaf's element window allows.
func (tr *tree) contribute(t *testing.T, r int, vals []float32) {
	v := make([]byte, 4*len(vals))
	for k, x := range vals {
		binary.LittleEndian.PutUint32(v[4*k:], math.Float32bits(x))
	}
	tr.contributeRaw(t, r, parser.FormatFP32, v)
}

// contributeRaw prepares rank r's packed values of format f as DATA frames
// as full as the MTU allows (1452 INT8, 363 FP32).
func (tr *tree) contributeRaw(t *testing.T, r int, f parser.Format, packed []byte) {
	leaf := tr.n[r/2]
	w := f.Width(0)
	per := (1500 - parser.CWLen - parser.DataHdrLen - parser.GroupDescLen) / w &^ 3
	vals := packed[:len(packed)/w]
	for first, pid := 0, uint32(1); first < len(vals); first, pid = first+per, pid+1 {
		n := min(per, len(vals)-first)
		v := packed[first*w : (first+n)*w]
		var flags uint8
		if first+n == len(vals) {
			flags = parser.FlagLast
		}
		fr, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: leaf.PortMAC(r % 2), Src: treeRankMAC(r)},
			Class: parser.ClassData, Op: tr.key, SrcEP: uint16(1 + r%2), DstEP: uint16(10 + r%2), PacketID: pid,
			First: uint32(first), Flags: flags, Stream: uint16(1 + r%2)}, nil,
			parser.Group{Format: f, Count: uint16(n), Values: v})
		if err != nil {
			t.Fatal(err)
		}
		tr.pend[r] = append(tr.pend[r], hop{from: -1 - r, port: r % 2, frame: fr})
	}
}

// pump sends every rank's next frames that fit its leaf's element window
// (the leaf frees it as it emits); false when nothing was sent.
func (tr *tree) pump() bool {
	sent := false
	for r := range tr.pend {
		st, _ := tr.n[r/2].e.Status(tr.key)
		for len(tr.pend[r]) > 0 {
			h := tr.pend[r][0]
			d := parser.DataHeader(h.frame[parser.HdrOff:parser.DataBodyOff])
			if d.First()+uint32(d.Count()) > st.Completed+tr.window {
				break
			}
			tr.q = append(tr.q, h)
			tr.pend[r] = tr.pend[r][1:]
			sent = true
		}
	}
	return sent
}

// run delivers frames until none is in flight and no rank can send more.
func (tr *tree) run(t *testing.T) {
	for steps := 0; len(tr.q) > 0 || tr.pump(); steps++ {
		if steps > 1e6 {
			t.Fatal("the tree does not quiesce")
		}
		h := tr.q[0]
		tr.q = tr.q[1:]
		tr.now += 1000
		class := parser.Class(h.frame[parser.CWOff+1])
		switch {
		case h.from < 0: // a rank's DATA to its leaf
			leaf := tr.n[(-1-h.from)/2]
			leaf.e.HandleData(tr.now, h.port, h.frame, leaf)
		case h.from < 2 && h.port == 2: // leaf -> root
			tr.up[h.from] += len(h.frame)
			if class == parser.ClassData {
				tr.upData[h.from]++
				var d parser.Data
				if err := d.Decode(h.frame, parser.Limits{VectorLen: tr.vlen, KulischBytes: 35, MTU: 1500}); err != nil {
					t.Fatalf("leaf %d sent a frame its parent cannot decode: %v", h.from, err)
				}
				var it parser.GroupIter
				plain := true
				narrow := false
				for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
					narrow = narrow || g.Format == parser.FormatINT8 || g.Format == parser.FormatFP16 || g.Format == parser.FormatBF16
					if g.Format == parser.FormatKulischF64 {
						tr.f64++
					}
					if g.Format == parser.FormatKulischScaled {
						tr.scaled++
						plain = false
						if h.from == 0 && (tr.firstScaled == 0 || d.First < tr.firstScaled) {
							tr.firstScaled = d.First
						}
					}
				}
				if plain && h.from == 0 {
					tr.plainFirsts = append(tr.plainFirsts, d.First)
				}
				if narrow && h.from == 0 {
					tr.narrowFirsts = append(tr.narrowFirsts, d.First)
				}
			}
			tr.n[2].e.HandleData(tr.now, h.from, h.frame, tr.n[2])
		case h.from < 2: // PROGRESS to a rank: the ranks sent everything already
		case h.port < 2: // root PROGRESS -> leaf
			tr.n[h.port].e.HandleProgress(tr.now, 2, h.frame, tr.n[h.port])
		default: // RESULT (or PROGRESS) to the result rank
			if class == parser.ClassResult {
				tr.result(t, h.frame)
			}
		}
	}
}

// result stores a RESULT and answers it with the rank's PROGRESS.
func (tr *tree) result(t *testing.T, f []byte) {
	var d parser.Data
	if err := d.Decode(f, parser.Limits{VectorLen: tr.vlen, MTU: 1500}); err != nil {
		t.Fatal(err)
	}
	var it parser.GroupIter
	for g, ok := d.NextGroup(&it); ok; g, ok = d.NextGroup(&it) {
		if g.Format != parser.FormatFP32 {
			t.Fatalf("RESULT group of %v", g.Format)
		}
		for k := 0; k < int(g.Count); k++ {
			tr.res[g.First+uint32(k)] = binary.LittleEndian.Uint32(g.Values[4*k:])
			tr.got[g.First+uint32(k)] = true
		}
	}
	for tr.resEnd < tr.vlen && tr.got[tr.resEnd] {
		tr.resEnd++
	}
	var flags uint8 = parser.ProgressFlagResult
	if tr.resEnd == tr.vlen {
		flags |= parser.ProgressFlagComplete
	}
	p := parser.Progress{Op: tr.key, SrcEP: 1, DstEP: 200, Stream: 1, PacketID: d.PacketID, Committed: tr.resEnd,
		IntervalCredits: 1024, ByteCredits: 1 << 24, Flags: flags}
	b := make([]byte, parser.EthLen+p.Len())
	if _, err := p.Encode(b, parser.Eth{Dst: tr.n[2].PortMAC(2), Src: treeRankMAC(0)}); err != nil {
		t.Fatal(err)
	}
	tr.n[2].e.HandleProgress(tr.now, 2, b, tr.n[2])
}

// exactFP32 is the oracle: the exact sum of the terms, rounded once to FP32
// (NaN or opposite infinities give the canonical NaN, an infinity wins, an
// exact zero is -0 only when every term is -0).
func exactFP32(terms ...float32) uint32 {
	s := new(big.Float).SetPrec(400)
	var pinf, ninf, nan, nonNegZero bool
	for _, x := range terms {
		switch {
		case x != x:
			nan = true
		case math.IsInf(float64(x), 1):
			pinf = true
		case math.IsInf(float64(x), -1):
			ninf = true
		default:
			nonNegZero = nonNegZero || !(x == 0 && math.Signbit(float64(x)))
			s.Add(s, new(big.Float).SetPrec(400).SetFloat64(float64(x)))
		}
	}
	switch {
	case nan || pinf && ninf:
		return kulisch.NaN32
	case pinf:
		return 0x7F800000
	case ninf:
		return 0xFF800000
	case s.Sign() == 0 && !nonNegZero:
		return 0x80000000
	case s.Sign() == 0:
		return 0
	}
	f, _ := s.Float32()
	return math.Float32bits(f)
}

func TestTreeScaledPartials(t *testing.T) {
	const vlen = 1 << 15
	rng := rand.New(rand.NewPCG(7, 8))
	vecs := make([][]float32, 4)
	for r := range vecs {
		vecs[r] = make([]float32, vlen)
		for i := range vecs[r] {
			vecs[r][i] = float32(rng.NormFloat64())
		}
	}
	// A few specials and extremes: they must survive either encoding.
	vecs[0][5], vecs[1][6], vecs[2][7] = float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	vecs[3][7] = float32(math.Copysign(0, -1))
	vecs[0][8], vecs[1][8] = math.MaxFloat32, math.MaxFloat32 // leaf 0 holds 2 x max
	vecs[2][9] = math.SmallestNonzeroFloat32
	vecs[0][10], vecs[1][10] = 1e30, -1e30 // cancels in leaf 0: +0
	runTree := func(partial kulisch.Format, window uint32, plain enc) *tree {
		tr := newTree(t, partial, vlen, window, plain)
		for r := range vecs {
			tr.contribute(t, r, vecs[r])
		}
		tr.run(t)
		for i, n := range tr.n {
			if s, _ := n.e.Status(tr.key); s.State != parser.StateComplete {
				t.Fatalf("plain=%v node %d: %+v", plain, i, s)
			}
		}
		if tr.resEnd != vlen {
			t.Fatalf("plain=%v: results up to %d of %d", plain, tr.resEnd, vlen)
		}
		return tr
	}
	sc, pl := runTree(kulisch.KULISCH, vlen, encScaled), runTree(kulisch.KULISCH, vlen, encPlain)
	// A ring of 2003 elements wraps inside frames, groups and plans.
	wr := runTree(kulisch.KULISCH, 2003, encScaled)
	// AUTO partials (prismd's default under KULISCH_FIXED) take the scaled
	// plan where AUTO would need KULISCH groups.
	au, aup := runTree(kulisch.AUTO, vlen, encScaled), runTree(kulisch.AUTO, vlen, encPlain)
	// The default: KULISCH_F64 frames where binary64 holds every value
	// (the specials and 2 x MaxFloat32 included), scaled plans elsewhere.
	f6, f6w, f6a := runTree(kulisch.KULISCH, vlen, encF64), runTree(kulisch.KULISCH, 2003, encF64), runTree(kulisch.AUTO, vlen, encF64)
	for i := 0; i < vlen; i++ {
		want := exactFP32(vecs[0][i], vecs[1][i], vecs[2][i], vecs[3][i])
		if sc.res[i] != want || pl.res[i] != want || wr.res[i] != want || au.res[i] != want || aup.res[i] != want ||
			f6.res[i] != want || f6w.res[i] != want || f6a.res[i] != want {
			t.Fatalf("element %d: exact %#08x; KULISCH partials: scaled %#08x plain %#08x small ring %#08x; AUTO partials: scaled %#08x plain %#08x; "+
				"KULISCH_F64: %#08x, small ring %#08x, AUTO %#08x",
				i, want, sc.res[i], pl.res[i], wr.res[i], au.res[i], aup.res[i], f6.res[i], f6w.res[i], f6a.res[i])
		}
	}
	if wr.scaled == 0 || au.scaled == 0 || aup.scaled != 0 {
		t.Fatalf("KULISCH_SCALED groups: small ring %d, AUTO %d, AUTO plain %d", wr.scaled, au.scaled, aup.scaled)
	}
	if sc.scaled == 0 || pl.scaled != 0 {
		t.Fatalf("KULISCH_SCALED groups: %d with scaled partials, %d with plain ones", sc.scaled, pl.scaled)
	}
	if sc.f64+pl.f64+wr.f64+au.f64+aup.f64 != 0 {
		t.Fatalf("KULISCH_F64 groups with kulisch_partials scaled or plain: %d", sc.f64+pl.f64+wr.f64+au.f64+aup.f64)
	}
	// The leaves' metrics name what they sent: every KULISCH_F64 group
	// seen on the wire is one frame of prismd_engine_frames_encoded_by_format_total.
	leafFrames := func(tr *tree, f kulisch.Format) uint64 {
		return tr.n[0].e.Metrics().FormatFrames[f].Load() + tr.n[1].e.Metrics().FormatFrames[f].Load()
	}
	if got := leafFrames(f6, kulisch.KULISCH_F64); got != uint64(f6.f64) || leafFrames(sc, kulisch.KULISCH_F64) != 0 ||
		leafFrames(sc, kulisch.KULISCH_SCALED) == 0 {
		t.Fatalf("frames by format: KULISCH_F64 %d (wire %d), with scaled partials KULISCH_F64 %d KULISCH_SCALED %d",
			got, f6.f64, leafFrames(sc, kulisch.KULISCH_F64), leafFrames(sc, kulisch.KULISCH_SCALED))
	}
	for _, tr := range []*tree{f6, f6w, f6a} {
		// Every frame is binary64 but the few holding element 8 (2 x
		// MaxFloat32 is a binary64 too) ... all of N(0,1) sums are.
		if tr.f64 == 0 || tr.f64 < tr.upData[0]+tr.upData[1]-8 {
			t.Fatalf("KULISCH_F64 groups: %d in %d partial frames", tr.f64, tr.upData[0]+tr.upData[1])
		}
	}
	fp32 := 4 * vlen
	for i := 0; i < 2; i++ {
		rs, rp := float64(sc.up[i])/float64(fp32), float64(pl.up[i])/float64(fp32)
		t.Logf("leaf %d -> root: scaled %d B in %d frames = %.3f x the FP32 vector, plain %d B in %d frames = %.3f x (%.2f x fewer bytes)",
			i, sc.up[i], sc.upData[i], rs, pl.up[i], pl.upData[i], rp, rp/rs)
		if rs >= 3 {
			t.Errorf("leaf %d -> root carries %.3f x the FP32 vector with scaled partials, want < 3", i, rs)
		}
		if rp < 8 {
			t.Errorf("plain partials carry only %.3f x the FP32 vector: the comparison is not measuring KULISCH-280", rp)
		}
		ra, rap := float64(au.up[i])/float64(fp32), float64(aup.up[i])/float64(fp32)
		t.Logf("leaf %d -> root, AUTO partials: with scaled groups %.3f x the FP32 vector, without %.3f x", i, ra, rap)
		if ra >= 3 || ra > rs*1.05 {
			t.Errorf("leaf %d -> root carries %.3f x the FP32 vector with AUTO partials (KULISCH partials: %.3f), want < 3", i, ra, rs)
		}
		// KULISCH_F64: 8 bytes a value plus the frames' headers.
		rf := float64(f6.up[i]) / float64(fp32)
		t.Logf("leaf %d -> root, KULISCH_F64 partials: %.3f x the FP32 vector (%.2f x the scaled bytes)", i, rf, rf/rs)
		if rf < 2 || rf > 2.2 {
			t.Errorf("leaf %d -> root carries %.3f x the FP32 vector with KULISCH_F64 partials, want 2 to 2.2 (8 bytes a value)", i, rf)
		}
	}
}

// TestScaledProbeAdapts: on sums AUTO carries in FP32 (integers), a leaf
// stops making a scaled plan for every frame after AUTO has won a few in a
// row and probes one frame in scaledProbeEvery, then ever fewer (backoff,
// up to one in maxProbeGap); when the data turns into gradient-like
// values, where scaled groups win, a probe finds it within maxProbeGap
// frames and scaled groups take over. The results stay exact throughout.
// The vector is long enough for the backoff to reach maxProbeGap before
// the switch.
func TestScaledProbeAdapts(t *testing.T) {
	const vlen = 1 << 18
	rng := rand.New(rand.NewPCG(17, 18))
	integral := func() float32 { return float32(rng.IntN(1<<20) - 1<<19) }
	gradient := func() float32 { return float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9))) }
	for _, c := range []struct {
		name    string
		switch_ uint32 // first gradient-like element (vlen: none)
	}{{"integral", vlen}, {"integral-then-gradient", vlen / 2}} {
		vecs := switchVecs(vlen, c.switch_, integral, gradient)
		tr := runAutoTree(t, c.name, vlen, vlen, vecs)
		leaf := tr.n[0].e.ops[tr.key]
		frames := tr.upData[0]
		t.Logf("%s: leaf 0 sent %d partial frames, made %d scaled plans, first scaled frame at element %d",
			c.name, frames, leaf.scaledPlans, tr.firstScaled)
		if c.switch_ == vlen {
			// At most the first few frames, the backoff's ramp (16, 32,
			// 64), one in maxProbeGap after that, and a re-plan of a
			// held-back frame now and then.
			if max := autoWinsToSkip + 3 + frames/maxProbeGap + frames/8; leaf.scaledPlans > max {
				t.Errorf("%s: %d scaled plans for %d frames, want at most %d", c.name, leaf.scaledPlans, frames, max)
			}
			if tr.scaled != 0 {
				t.Errorf("%s: %d KULISCH_SCALED groups where AUTO carries more", c.name, tr.scaled)
			}
			continue
		}
		// FP32 AUTO partials carry 363 values a frame at MTU 1500; the
		// first scaled frame may begin before the switch and reach past it.
		if tr.scaled == 0 || tr.firstScaled+363 <= c.switch_ || tr.firstScaled > c.switch_+(maxProbeGap+1)*363 {
			t.Errorf("%s: first scaled frame at element %d (%d scaled groups), want within %d frames after %d",
				c.name, tr.firstScaled, tr.scaled, maxProbeGap+1, c.switch_)
		}
	}
}

// TestTreeMinimalWindow: with the smallest legal element window (one
// maximal packet) and full 1452-value INT8 frames from the ranks, a leaf
// must not hold back a short partial frame that only a rank's next frame
// (which no longer fits the window) could fill: the operation completes,
// exactly, with scaled and with plain partials.
func TestTreeMinimalWindow(t *testing.T) {
	const vlen = 20000
	window := uint32(parser.MaxPacketElements(1500))
	rng := rand.New(rand.NewPCG(9, 10))
	vecs := make([][]byte, 4)
	for r := range vecs {
		vecs[r] = make([]byte, vlen)
		for i := range vecs[r] {
			vecs[r][i] = byte(rng.IntN(256))
		}
	}
	for _, plain := range []enc{encF64, encScaled, encPlain} {
		tr := newTreeIn(t, kulisch.INT8, kulisch.KULISCH, vlen, window, plain)
		for r := range vecs {
			tr.contributeRaw(t, r, parser.FormatINT8, vecs[r])
		}
		tr.run(t)
		if tr.resEnd != vlen {
			for i, n := range tr.n {
				s, _ := n.e.Status(tr.key)
				t.Logf("node %d: %+v", i, s)
			}
			t.Fatalf("plain=%v: stalled with results up to %d of %d", plain, tr.resEnd, vlen)
		}
		for i := 0; i < vlen; i++ {
			sum := 0
			for r := range vecs {
				sum += int(int8(vecs[r][i]))
			}
			want := math.Float32bits(float32(sum))
			if sum == 0 {
				want = 0 // INT8 has no -0
			}
			if tr.res[i] != want {
				t.Fatalf("plain=%v element %d: %#08x, want %#08x (%d)", plain, i, tr.res[i], want, sum)
			}
		}
	}
}

// endSink is a dataplane.Sender that remembers, per port, the end of the
// last DATA/RESULT range sent and its Packet ID, without allocating.
type endSink struct {
	mac    byte
	end    [4]uint32
	pid    [4]uint32
	sent   [4]int
	scaled [4]int // frames whose first group is KULISCH_SCALED
	f64    [4]int // frames whose first group is KULISCH_F64
}

func (s *endSink) Send(port int, frame []byte) bool {
	s.sent[port]++
	if c := parser.Class(frame[parser.CWOff+1]); c == parser.ClassData || c == parser.ClassResult {
		h := parser.DataHeader(frame[parser.HdrOff:parser.DataBodyOff])
		s.end[port] = max(s.end[port], h.First()+uint32(h.Count()))
		s.pid[port] = h.PacketID()
		if h.Groups() > 0 {
			switch parser.GroupDescriptor(frame[parser.DataBodyOff:]).Format() {
			case parser.FormatKulischScaled:
				s.scaled[port]++
			case parser.FormatKulischF64:
				s.f64[port]++
			}
		}
	}
	return true
}
func (s *endSink) PortMAC(port int) [6]byte { return [6]byte{2, 0x5e, 0, s.mac, byte(port), 1} }
func (s *endSink) NumPorts() int            { return 4 }

// progressFrame is a reusable PROGRESS frame whose Packet ID and Committed
// a step rewrites in place.
func progressFrame(t testing.TB, key parser.OpKey, src, dst, stream uint16, flags uint8, from, to [6]byte) []byte {
	p := parser.Progress{Op: key, SrcEP: src, DstEP: dst, Stream: stream, IntervalCredits: 1024, ByteCredits: 1 << 24, Flags: flags}
	b := make([]byte, parser.EthLen+p.Len())
	if _, err := p.Encode(b, parser.Eth{Dst: to, Src: from}); err != nil {
		t.Fatal(err)
	}
	return b
}

func setProgress(b []byte, pid, committed uint32) {
	p := parser.ProgressHeader(b[parser.HdrOff : parser.HdrOff+parser.ProgressHdrLen])
	p.SetPacketID(pid)
	p.SetCommitted(committed)
}

// leafRig is a LEAF with two rank contributors (ports 0, 1) sending 363
// N(0,1) FP32 values per frame and its parent (port 2), whose PROGRESS the
// rig plays back for whatever the leaf sent; step feeds one frame per rank.
type leafRig struct {
	e    *Engine
	tx   *endSink
	key  parser.OpKey
	data [2][]byte
	prog []byte
	now  int64
	next uint32
	pid  uint32
}

func newLeafRig(tb testing.TB, partial kulisch.Format, m enc) *leafRig {
	rng := rand.New(rand.NewPCG(3, 4))
	return newLeafRigData(tb, partial, m, func(int, int) float32 { return float32(rng.NormFloat64()) })
}

// newLeafRigData is newLeafRig with rank r's value k of every frame from gen.
func newLeafRigData(tb testing.TB, partial kulisch.Format, m enc, gen func(r, k int) float32) *leafRig {
	key := parser.OpKey{Job: 3, Group: 1, Op: 1, OpGen: uint32(partial)}
	parentMAC := [6]byte{2, 0x5e, 0, 9, 0, 1}
	lr := &leafRig{e: New(m.config()), tx: &endSink{mac: 1}, key: key, now: 1e9}
	s := Spec{Op: key, Role: parser.RoleLeaf, Collective: parser.CollReduce,
		Tuple:        kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: partial, Output: kulisch.FP32},
		KulischWidth: 280, VectorLen: 1 << 31, MTU: 1500, WindowIntervals: 64, ReplayDepth: 64, WindowBytes: 64 * 1514,
		WindowElements: 8192, MaxTerms: 4, Timeout: time.Hour, Bindings: []Binding{
			{Kind: parser.KindContributor, Rank: true, Stream: 1, LocalEP: 10, PeerEP: 1, Port: 0, PeerMAC: treeRankMAC(0)},
			{Kind: parser.KindContributor, Rank: true, Stream: 2, LocalEP: 11, PeerEP: 2, Port: 1, PeerMAC: treeRankMAC(1)},
			{Kind: parser.KindParent, Stream: 5, LocalEP: 12, PeerEP: 100, Port: 2, PeerMAC: parentMAC},
		}}
	if err := lr.e.Stage(lr.now, &s, 4); err != nil {
		tb.Fatal(err)
	}
	if err := lr.e.Commit(lr.now, key); err != nil {
		tb.Fatal(err)
	}
	for r := range lr.data {
		v := make([]byte, 4*363)
		for k := 0; k < 363; k++ {
			binary.LittleEndian.PutUint32(v[4*k:], math.Float32bits(gen(r, k)))
		}
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: lr.tx.PortMAC(r), Src: treeRankMAC(r)},
			Class: parser.ClassData, Op: key, SrcEP: uint16(1 + r), DstEP: uint16(10 + r), PacketID: 1, Stream: uint16(1 + r)}, nil,
			parser.Group{Format: parser.FormatFP32, Count: 363, Values: v})
		if err != nil {
			tb.Fatal(err)
		}
		lr.data[r] = f
	}
	lr.prog = progressFrame(tb, key, 100, 12, 5, 0, parentMAC, lr.tx.PortMAC(2))
	return lr
}

func (lr *leafRig) step() {
	lr.pid++
	lr.now += 1000
	for r := range lr.data {
		h := parser.DataHeader(lr.data[r][parser.HdrOff:parser.DataBodyOff])
		h.SetPacketID(lr.pid)
		h.SetFirst(lr.next)
		lr.e.HandleData(lr.now, r, lr.data[r], lr.tx)
	}
	lr.next += 363
	setProgress(lr.prog, lr.tx.pid[2], lr.tx.end[2])
	lr.e.HandleProgress(lr.now, 2, lr.prog, lr.tx)
}

// benchLeaf: one step = two rank DATA frames of 363 FP32 absorbed and the
// completed partials encoded for the parent (scaled or plain KULISCH-280).
func benchLeaf(b *testing.B, m enc) {
	lr := newLeafRig(b, kulisch.KULISCH, m)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		lr.step()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*363), "ns/element")
	b.ReportMetric(float64(lr.tx.sent[2])/float64(b.N), "upframes/step")
}

// BenchmarkLeafScaledPartials vs BenchmarkLeafPlainPartials: the leaf's
// CPU per element with KULISCH_SCALED and with plain KULISCH partials.
func BenchmarkLeafScaledPartials(b *testing.B) { benchLeaf(b, encScaled) }
func BenchmarkLeafPlainPartials(b *testing.B)  { benchLeaf(b, encPlain) }

// BenchmarkLeafF64Partials is the same leaf with prismd's default:
// KULISCH_F64 frames, the sums of two N(0,1) values being binary64.
func BenchmarkLeafF64Partials(b *testing.B) { benchLeaf(b, encF64) }

// BenchmarkLeafAutoIntegral: AUTO partials of sums of 20-bit integers (what
// prismctl bench --data integral sends), which AUTO carries in FP32 and
// keeps beating the scaled plan with: the leaf only probes that now and
// then (backoff).
func BenchmarkLeafAutoIntegral(b *testing.B) {
	benchLeafAuto(b, func(r, k int) float32 { return float32((k*7919+r*104729)%(1<<20) - 1<<19) })
}

// BenchmarkLeafAutoSmallIntegers: sums of integers below 1000, which AUTO
// carries in FP16 (and the odd INT8 or BF16 group): PutValues writes them
// without rounding (kulisch laneBits).
func BenchmarkLeafAutoSmallIntegers(b *testing.B) {
	benchLeafAuto(b, func(r, k int) float32 { return float32((k*7 + r) % 1000) })
}

func benchLeafAuto(b *testing.B, gen func(r, k int) float32) {
	lr := newLeafRigData(b, kulisch.AUTO, encF64, gen)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		lr.step()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*363), "ns/element")
	b.ReportMetric(float64(lr.e.ops[lr.key].scaledPlans)/float64(b.N), "scaledplans/step")
}

// TestScaledPathAllocs: a LEAF encoding scaled partials (extents, plan,
// encode) and a ROOT merging them allocate nothing per frame.
func TestScaledPathAllocs(t *testing.T) {
	key := parser.OpKey{Job: 3, Group: 1, Op: 1, OpGen: 1}
	const vlen = 1 << 30
	base := Spec{Op: key, Collective: parser.CollReduce,
		Tuple:        kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: kulisch.KULISCH, Output: kulisch.FP32},
		KulischWidth: 280, VectorLen: vlen, MTU: 1500, WindowIntervals: 64, ReplayDepth: 64, WindowBytes: 64 * 1514,
		WindowElements: 8192, MaxTerms: 4, Timeout: time.Hour}
	rng := rand.New(rand.NewPCG(3, 4))

	// LEAF: KULISCH and AUTO partials (AUTO plans both ways and takes the
	// scaled plan here).
	now := int64(1e9)
	// With scaled partials and with the default, KULISCH_F64 frames.
	for _, m := range []enc{encScaled, encF64} {
		for _, partial := range []kulisch.Format{kulisch.KULISCH, kulisch.AUTO} {
			lr := newLeafRig(t, partial, m)
			for range 100 {
				lr.step()
			}
			before := lr.tx.sent[2]
			if a := alloctest.PerRun(1000, lr.step); a != 0 {
				t.Fatalf("%v leaf, %v partials: %v allocations per step", partial, m, a)
			}
			want := lr.tx.scaled[2] // frames in the encoding m should give
			if m == encF64 {
				want = lr.tx.f64[2]
			}
			if lr.tx.sent[2] == before || want < lr.tx.sent[2]/2 || lr.e.Metrics().Drops[DropNoCredit].Load() != 0 {
				t.Fatalf("%v leaf: the loop did not emit %v partials: %d frames (%d of %d so), no_credit %d",
					partial, m, lr.tx.sent[2]-before, want, lr.tx.sent[2], lr.e.Metrics().Drops[DropNoCredit].Load())
			}
		}
	}
	ltx := &endSink{mac: 1}

	// ROOT: the leaf above on port 0 (scaled groups), the result rank on port 1.
	rtx := &endSink{mac: 9}
	root := New(Config{Logger: quiet()})
	rs := base
	rs.Role = parser.RoleRoot
	rs.Bindings = []Binding{
		{Kind: parser.KindContributor, Stream: 5, LocalEP: 100, PeerEP: 12, Port: 0, PeerMAC: ltx.PortMAC(2)},
		{Kind: parser.KindResultOut, Rank: true, Stream: 1, LocalEP: 200, PeerEP: 1, Port: 1, PeerMAC: treeRankMAC(0)},
	}
	if err := root.Stage(now, &rs, 4); err != nil {
		t.Fatal(err)
	}
	if err := root.Commit(now, key); err != nil {
		t.Fatal(err)
	}
	const n = 280
	vals := make([]byte, n*5)
	for k := 0; k < n; k++ {
		vals[5*k] = parser.KulischFinite
		binary.LittleEndian.PutUint32(vals[5*k+1:], uint32(rng.Int32N(1<<30))|1)
	}
	up, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: rtx.PortMAC(0), Src: ltx.PortMAC(2)},
		Class: parser.ClassData, Op: key, SrcEP: 12, DstEP: 100, PacketID: 1, Stream: 5}, nil,
		parser.Group{Format: parser.FormatKulischScaled, KBytes: 4, Shift: 126, Count: n, Values: vals})
	if err != nil {
		t.Fatal(err)
	}
	rprog := progressFrame(t, key, 1, 200, 1, parser.ProgressFlagResult, treeRankMAC(0), rtx.PortMAC(1))
	var next, pid uint32
	rootStep := func() {
		pid++
		now += 1000
		h := parser.DataHeader(up[parser.HdrOff:parser.DataBodyOff])
		h.SetPacketID(pid)
		h.SetFirst(next)
		root.HandleData(now, 0, up, rtx)
		next += n
		setProgress(rprog, rtx.pid[1], rtx.end[1])
		root.HandleProgress(now, 1, rprog, rtx)
	}
	for range 100 {
		rootStep()
	}
	before := rtx.sent[1]
	if a := alloctest.PerRun(1000, rootStep); a != 0 {
		t.Fatalf("root: %v allocations per step", a)
	}
	m := root.Metrics()
	if rtx.sent[1] == before || m.Drops[DropNoCredit].Load() != 0 || m.Drops[DropBadFormat].Load() != 0 || m.Drops[DropArithmetic].Load() != 0 {
		t.Fatalf("root: the loop did not merge and emit: %d frames, no_credit %d bad_format %d arithmetic %d",
			rtx.sent[1]-before, m.Drops[DropNoCredit].Load(), m.Drops[DropBadFormat].Load(), m.Drops[DropArithmetic].Load())
	}
}

// TestScaledAdmission: KULISCH_SCALED is taken exactly where KULISCH
// partials are (child switches under KULISCH_FIXED with a KULISCH or AUTO
// partial policy), and dropped as bad_format from ranks and under
// FP32_ARRIVAL; a Shift past the operation's W is malformed (out_of_range).
func TestScaledAdmission(t *testing.T) {
	key := parser.OpKey{Job: 4, Group: 1, Op: 1, OpGen: 1}
	vals := []byte{parser.KulischFinite, 1, 0, 0, 0, parser.KulischNegZero, 0, 0, 0, 0}
	frame := func(tx *endSink, src [6]byte, port int, stream, srcEP, dstEP uint16, shift uint16) []byte {
		f, err := parser.AppendData(nil, &parser.DataFields{Eth: parser.Eth{Dst: tx.PortMAC(port), Src: src},
			Class: parser.ClassData, Op: key, SrcEP: srcEP, DstEP: dstEP, PacketID: 1, Stream: stream}, nil,
			parser.Group{Format: parser.FormatKulischScaled, KBytes: 4, Shift: shift, Count: 2, Values: vals})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	child := [6]byte{2, 0x5e, 0, 7, 0, 1}
	for _, c := range []struct {
		name    string
		tuple   kulisch.Tuple
		w       int
		rank    bool
		shift   uint16
		drop    Drop
		reason  string
		applied bool
	}{
		{"KULISCH partials from a switch", kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: kulisch.KULISCH, Output: kulisch.FP32}, 280, false, 126, 0, "", true},
		{"AUTO partials under KULISCH_FIXED", kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: kulisch.AUTO, Output: kulisch.FP32}, 280, false, 126, 0, "", true},
		{"from a rank", kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: kulisch.KULISCH, Output: kulisch.FP32}, 280, true, 126, DropBadFormat, "", false},
		{"under FP32_ARRIVAL", kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.FP32Arrival, Partial: kulisch.AUTO, Output: kulisch.FP32}, 0, false, 126, DropBadFormat, "", false},
		{"Shift + 8B > W", kulisch.Tuple{Input: kulisch.FP32, Acc: kulisch.KulischFixed, Partial: kulisch.KULISCH, Output: kulisch.FP32}, 280, false, 249, DropMalformed, "out_of_range", false},
	} {
		tx := &endSink{mac: 1}
		e := New(Config{Logger: quiet()})
		s := Spec{Op: key, Role: parser.RoleRoot, Collective: parser.CollReduce, Tuple: c.tuple, KulischWidth: c.w,
			VectorLen: 1000, MTU: 1500, WindowIntervals: 8, ReplayDepth: 8, WindowBytes: 1 << 16, WindowElements: 2000,
			MaxTerms: 2, Timeout: time.Hour, Bindings: []Binding{
				{Kind: parser.KindContributor, Rank: c.rank, Stream: 5, LocalEP: 100, PeerEP: 12, Port: 0, PeerMAC: child},
				{Kind: parser.KindResultOut, Rank: true, Stream: 1, LocalEP: 200, PeerEP: 1, Port: 1, PeerMAC: treeRankMAC(0)},
			}}
		if err := e.Stage(1e9, &s, 4); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := e.Commit(1e9, key); err != nil {
			t.Fatal(err)
		}
		e.HandleData(1e9, 0, frame(tx, child, 0, 5, 12, 100, c.shift), tx)
		m := e.Metrics()
		if c.applied {
			if m.Frames[parser.ClassData].Load() != 1 || m.Drops[DropBadFormat].Load() != 0 || m.Drops[DropArithmetic].Load() != 0 {
				t.Errorf("%s: not admitted: frames %d bad_format %d arithmetic %d", c.name, m.Frames[parser.ClassData].Load(),
					m.Drops[DropBadFormat].Load(), m.Drops[DropArithmetic].Load())
			}
			continue
		}
		if m.Frames[parser.ClassData].Load() != 0 || m.Drops[c.drop].Load() != 1 {
			t.Errorf("%s: frames %d, drop %v %d", c.name, m.Frames[parser.ClassData].Load(), c.drop, m.Drops[c.drop].Load())
		}
		if c.reason != "" {
			for i, r := range parser.Reasons {
				if r == c.reason && m.DecodeDrops[i].Load() != 1 {
					t.Errorf("%s: decode drop %s = %d", c.name, r, m.DecodeDrops[i].Load())
				}
			}
		}
	}
}

// TestAutoPlansNotWasted: a leaf whose inputs arrive one frame at a time
// plans an AUTO partial only when the plan can send a frame. Before, it
// planned after every arrival and threw the plan away whenever it would
// have used every available value (a later plan may pack more): with small
// integer sums of mixed widths, where every value goes through the
// planner's lookahead, that was about half of a leaf's planning. Results
// stay exact (math/big).
func TestAutoPlansNotWasted(t *testing.T) {
	const vlen = 1 << 15
	rng := rand.New(rand.NewPCG(23, 24))
	for _, c := range []struct {
		name   string
		window uint32 // element window of every stream
		val    func(i, r int) float32
	}{
		// Small integers of mixed widths, a window as large as the vector.
		{"mixed-widths", vlen, func(i, r int) float32 { return float32((i + r) % 1000) }},
		// Like 'prismctl bench --data integral' (FP32 partials), with a
		// window of two INT8 frames: the leaf's output to the root is often
		// out of credit when its inputs arrive.
		{"integral-tight-window", 2 * 1452, func(i, r int) float32 { return float32(rng.IntN(1<<20) - 1<<19) }},
	} {
		vecs := make([][]float32, 4)
		for r := range vecs {
			vecs[r] = make([]float32, vlen)
			for i := range vecs[r] {
				vecs[r][i] = c.val(i, r)
			}
		}
		tr := runAutoTree(t, c.name, vlen, c.window, vecs)
		leaf := tr.n[0].e.ops[tr.key]
		frames := tr.upData[0]
		t.Logf("%s: leaf 0 sent %d partial frames after %d AUTO plans", c.name, frames, leaf.autoPlans)
		if leaf.autoPlans > frames+frames/8+2 {
			t.Errorf("%s: %d AUTO plans for %d partial frames: plans thrown away", c.name, leaf.autoPlans, frames)
		}
	}
}

// runAutoTree runs a REDUCE of the four ranks' vecs through a tree with
// AUTO partials and an element window of window, and checks every result
// against the exact sum (math/big).
func runAutoTree(t *testing.T, name string, vlen, window uint32, vecs [][]float32) *tree {
	t.Helper()
	tr := newTree(t, kulisch.AUTO, vlen, window, encScaled)
	for r := range vecs {
		tr.contribute(t, r, vecs[r])
	}
	tr.run(t)
	if tr.resEnd != vlen {
		t.Fatalf("%s: results up to %d of %d", name, tr.resEnd, vlen)
	}
	for i := 0; i < int(vlen); i++ {
		if want := exactFP32(vecs[0][i], vecs[1][i], vecs[2][i], vecs[3][i]); tr.res[i] != want {
			t.Fatalf("%s: element %d = %#08x, exact %#08x", name, i, tr.res[i], want)
		}
	}
	return tr
}

// TestFP32FastPath: on sums AUTO carries in one FP32 group (20-bit
// integers), a leaf soon sends most frames as FP32 without computing AUTO
// sets or planning (fp32Fast), checking only that FP32 holds every value.
// When the sums turn into small integers (narrower formats pay), an AUTO
// plan is back within maxProbeGap frames; when they turn into values FP32
// does not hold (gradient-like sums), at once. The results stay exact
// (runAutoTree checks them against math/big).
func TestFP32FastPath(t *testing.T) {
	const vlen = 1 << 18
	rng := rand.New(rand.NewPCG(23, 24))
	integral := func() float32 { return float32(rng.IntN(1<<20) - 1<<19) }
	small := func() float32 { return float32(rng.IntN(64) - 32) }
	gradient := func() float32 { return float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9))) }
	for _, c := range []struct {
		name    string
		switch_ uint32
		after   func() float32
	}{{"integral", vlen, nil}, {"integral-then-small", vlen / 2, small}, {"integral-then-gradient", vlen / 2, gradient}} {
		after := c.after
		if after == nil {
			after = integral
		}
		tr := runAutoTree(t, c.name, vlen, vlen, switchVecs(vlen, c.switch_, integral, after))
		leaf := tr.n[0].e.ops[tr.key]
		frames := tr.upData[0]
		t.Logf("%s: leaf 0 sent %d frames, %d as FP32 without a plan, %d AUTO plans", c.name, frames, leaf.fp32Frames, leaf.autoPlans)
		switch c.name {
		case "integral":
			// All but the first few and the plans of the backoff.
			if leaf.fp32Frames < frames*3/4 {
				t.Errorf("%s: %d of %d frames without a plan, want most", c.name, leaf.fp32Frames, frames)
			}
		case "integral-then-small":
			first, ok := firstAtOrAfter(tr.narrowFirsts, c.switch_-361)
			if !ok || first > c.switch_+(maxProbeGap+1)*361 {
				t.Errorf("%s: first frame with a narrow group at %d (found %v), want within %d FP32 frames of %d",
					c.name, first, ok, maxProbeGap+1, c.switch_)
			}
		case "integral-then-gradient":
			if tr.scaled == 0 || tr.firstScaled > c.switch_+361 {
				t.Errorf("%s: first scaled frame at %d (%d scaled groups), want the frame that reaches element %d",
					c.name, tr.firstScaled, tr.scaled, c.switch_)
			}
		}
	}
}

// TestAutoSkipAdapts: once the scaled plan has beaten any possible AUTO plan
// scaledWinsToSkip frames in a row (gradient-like sums, where AUTO needs
// KULISCH groups), a leaf computes AUTO sets for one frame in
// scaledProbeEvery, then ever fewer (backoff, up to one in maxProbeGap);
// when the data turns to small integers (which AUTO carries in INT8 or
// FP16), an AUTO frame is back within maxProbeGap frames. The results stay
// exact (math/big).
func TestAutoSkipAdapts(t *testing.T) {
	const vlen = 1 << 18
	rng := rand.New(rand.NewPCG(19, 20))
	gradient := func() float32 { return float32(rng.NormFloat64() * math.Ldexp(1, -12+rng.IntN(9))) }
	small := func() float32 { return float32(rng.IntN(64) - 32) }
	for _, c := range []struct {
		name    string
		switch_ uint32 // first small-integer element (vlen: none)
	}{{"gradient", vlen}, {"gradient-then-small-integers", vlen / 2}} {
		vecs := switchVecs(vlen, c.switch_, gradient, small)
		tr := runAutoTree(t, c.name, vlen, vlen, vecs)
		leaf := tr.n[0].e.ops[tr.key]
		frames := tr.upData[0]
		t.Logf("%s: leaf 0 sent %d partial frames (%d without scaled groups), computed AUTO sets for %d",
			c.name, frames, len(tr.plainFirsts), leaf.autoSetFrames)
		if c.switch_ == vlen {
			if max := scaledWinsToSkip + 3 + frames/maxProbeGap + frames/8; leaf.autoSetFrames > max {
				t.Errorf("%s: AUTO sets computed for %d of %d frames, want at most %d", c.name, leaf.autoSetFrames, frames, max)
			}
			if len(tr.plainFirsts) != 0 {
				t.Errorf("%s: %d frames without scaled groups where scaled carries more", c.name, len(tr.plainFirsts))
			}
			continue
		}
		// FP32 AUTO partials carry 363 values a frame at MTU 1500, scaled
		// gradient frames about 240, scaled frames of small integers up
		// to 725 (two bytes a value): the first plain frame may begin a
		// little before the switch and must come within the probe period.
		first, ok := firstAtOrAfter(tr.plainFirsts, c.switch_-400)
		if !ok || first > c.switch_+(maxProbeGap+1)*725 {
			t.Errorf("%s: first AUTO frame after the switch at %d (found %v), want within %d frames of element %d",
				c.name, first, ok, maxProbeGap+1, c.switch_)
		}
	}
}

// firstAtOrAfter returns the smallest of firsts at or above at.
func firstAtOrAfter(firsts []uint32, at uint32) (uint32, bool) {
	best, ok := uint32(0), false
	for _, f := range firsts {
		if f >= at && (!ok || f < best) {
			best, ok = f, true
		}
	}
	return best, ok
}

// switchVecs makes four ranks' vectors of vlen values drawn from before up
// to element at, and from after from there on.
func switchVecs(vlen, at uint32, before, after func() float32) [][]float32 {
	vecs := make([][]float32, 4)
	for r := range vecs {
		vecs[r] = make([]float32, vlen)
		for i := range vecs[r] {
			if uint32(i) < at {
				vecs[r][i] = before()
			} else {
				vecs[r][i] = after()
			}
		}
	}
	return vecs
}

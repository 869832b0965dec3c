package conformance

// Lab plumbing of the BITMAP (Collective 3, section 8) tests: one prismd
// (sw1) with four hosts h1..h4 on ports p1..p4. h1 is the Aggregation
// Manager and, in contexts with a parent, the parent switch (PARENT and
// RESULT_IN bindings); h2..h4 are children: each stands for a small set of
// endpoints (its BIFT mask), contributes DATA + EXT and receives RESULT
// copies. Everything here is written from docs/protocol.md only.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prismd/prismd/deploy"
)

const bmTopology = `# sw1 and four hosts (BITMAP conformance tests)
name: bitmap
mtu: 1500
topology:
  nodes:
    h1: {kind: host, ipv4: 10.0.0.1/24}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    h3: {kind: host, ipv4: 10.0.0.3/24}
    h4: {kind: host, ipv4: 10.0.0.4/24}
    sw1: {kind: prismd}
  links:
    - endpoints: ["h1:eth0", "sw1:p1"]
    - endpoints: ["h2:eth0", "sw1:p2"]
    - endpoints: ["h3:eth0", "sw1:p3"]
    - endpoints: ["h4:eth0", "sw1:p4"]
`

// The endpoints each child host stands for (its BIFT mask), chosen to span
// several FLAT words and HIER blocks: h2 {0,5,63} (block 0), h3
// {64,100,130} (blocks 1, 2), h4 {200,511} (blocks 3, 7). bmStray is an
// endpoint of the job that no mask covers.
var bmMasks = [4][]uint32{nil, {0, 5, 63}, {64, 100, 130}, {200, 511}}

const bmStray = 300

func bmABM() []uint32 { return bmUnion(bmMasks[1], bmMasks[2], bmMasks[3]) }

type bmEnv struct {
	*env
	hosts [4]*nic
	port  [4]mac    // sw1's port MAC toward h1..h4
	pidx  [4]uint16 // sw1's port index toward h1..h4
	rec   capRecord // the tuple the contexts use
	W     uint16

	mu   sync.Mutex
	pkt  map[string]uint32 // next Packet ID per (identity, host, class)
	opNo uint16
}

func newBitmapEnv(t *testing.T) *bmEnv {
	b := &bmEnv{env: newEnvOn(t, bmTopology, 0xB17A0000), pkt: map[string]uint32{}}
	lab := b.lab
	b.hosts[0], b.hosts[1] = b.h1, b.h2
	for k := 0; k < 4; k++ {
		if k >= 2 {
			b.hosts[k] = openNIC(t, lab, fmt.Sprintf("h%d", k+1), "eth0")
		}
		p := fmt.Sprintf("p%d", k+1)
		b.port[k] = mac(lab.Topo.MAC("sw1", p))
		b.pidx[k] = uint16(deploy.PortIndex(lab.Topo, "sw1", p))
	}
	b.readCaps(t)
	return b
}

// readCaps reads every CAPS page and picks the tuple of the BITMAP
// contexts: FP32 in and out, KULISCH_FIXED, and among its records the one
// whose Partial Policy is KULISCH, else AUTO, else the first (partials that
// are exact let the tests compare sums exactly).
func (b *bmEnv) readCaps(t *testing.T) {
	count := 1
	for p := 0; p < count; p++ {
		r := b.am.must(t, control{Cmd: cmdCapsQuery, Body: []byte{byte(p), 0, 0, 0}})
		if r.C.Cmd != cmdCapsResponse {
			t.Fatalf("CAPS_QUERY page %d: command %d status %d", p, r.C.Cmd, r.C.Status)
		}
		count = int(r.C.FragCount)
		pg, err := decodeCapsPage(r.C.Body)
		if err != nil {
			t.Fatalf("CAPS page %d: %v", p, err)
		}
		b.caps = append(b.caps, pg.Records...)
	}
	rank := func(r capRecord) int {
		switch r.Partial {
		case fmtKulisch:
			return 3
		case fmtAuto:
			return 2
		}
		return 1
	}
	found := false
	for _, r := range b.caps {
		if r.In == fmtFP32 && r.Out == fmtFP32 && r.Acc == accKulischFixed && (!found || rank(r) > rank(b.rec)) {
			b.rec, found = r, true
		}
	}
	if !found {
		t.Fatalf("no capability record FP32 / KULISCH_FIXED / * / FP32 among %d", len(b.caps))
	}
	// W >= 278 + ceil(log2 Max Terms) (5.1) with Max Terms 64: 284, a byte
	// multiple: 288; raised to the record's minimum.
	b.W = 288
	if b.rec.MinW > b.W {
		b.W = b.rec.MinW
	}
	t.Logf("BITMAP tuple: FP32 in, KULISCH_FIXED (W %d), partial %d, FP32 out; record %+v", b.W, b.rec.Partial, b.rec)
}

// newID returns a fresh operation identity of the lab's job.
func (b *bmEnv) newID() ident {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opNo++
	return ident{Job: b.jobID, Group: 3, GroupGen: 1, Op: 0x100 + b.opNo, OpGen: 1}
}

// nextPkt numbers the frames one host sends on one stream 1, 2, 3, ...
func (b *bmEnv) nextPkt(id ident, k int, class uint8) uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := fmt.Sprintf("%v/%d/%d", id, k, class)
	b.pkt[key]++
	return b.pkt[key]
}

// ---- contexts ----

// Binding numbering (5.1) of every BITMAP context here. Host k (1..3 =
// h2..h4) contributes on stream k+1 (switch endpoint 0x10+k, host 0x100+k)
// and receives RESULT on path k+1 (switch 0x20+k, host 0x200+k); h1 (k =
// 0) is the parent: PARENT stream 1 (switch 0x30, h1 0x300) and RESULT_IN
// path 1 (switch 0x31, h1 0x301).
func bmSwData(k int) uint16   { return 0x10 + uint16(k) }
func bmHostData(k int) uint16 { return 0x100 + uint16(k) }
func bmSwRes(k int) uint16    { return 0x20 + uint16(k) }
func bmHostRes(k int) uint16  { return 0x200 + uint16(k) }

const (
	bmSwParent   = 0x30
	bmHostParent = 0x300
	bmSwResIn    = 0x31
	bmHostResIn  = 0x301
)

// bmSpec describes one BITMAP context on sw1.
type bmSpec struct {
	ID       ident
	Role     uint8 // roleInternal (with h1 as parent) or roleRoot / roleSingle (no parent)
	Tenant   uint32
	Timeout  uint32 // ms
	WI       uint16 // Window Intervals (also the soft-state bound, 8.8)
	VecLen   uint32
	NoABM    bool     // no A-BM record (combine-only context, 8.8)
	Children []int    // hosts with CONTRIBUTOR and RESULT_OUT bindings (default 1, 2, 3)
	ParentRO []uint32 // a RESULT_OUT binding toward h1 with this mask (multicast back toward the ingress peer)
}

func (s bmSpec) children() []int {
	if s.Children == nil {
		return []int{1, 2, 3}
	}
	return s.Children
}

func (s bmSpec) hasParent() bool { return s.Role == roleInternal || s.Role == roleLeaf }

// bindingIndex of the RESULT_OUT toward host k in the STAGE bmStage builds.
func (s bmSpec) resultOutIndex(k int) int {
	i := 0
	if s.hasParent() {
		i = 2
	}
	i += len(s.children())
	for _, c := range s.children() {
		if c == k {
			return i
		}
		i++
	}
	if k == 0 && s.ParentRO != nil {
		return i
	}
	return -1
}

func (b *bmEnv) defaults(s bmSpec) bmSpec {
	if s.ID == (ident{}) {
		s.ID = b.newID()
	}
	if s.Role == 0 {
		s.Role = roleInternal
	}
	if s.Timeout == 0 {
		s.Timeout = 5000
	}
	if s.WI == 0 {
		s.WI = 16
	}
	if s.VecLen == 0 {
		s.VecLen = 8
	}
	return s
}

// bmStage builds the STAGE of s: bindings PARENT and RESULT_IN toward h1
// (INTERNAL only), a CONTRIBUTOR per child, a RESULT_OUT per child (and one
// toward h1 when ParentRO is set); set records A-BM (FLAT, Set ID 0, 8
// words) unless NoABM, and one BIFT mask per RESULT_OUT: h2's as FLAT (one
// word), h3's as HIER (64-bit blocks, 8 blocks), h4's as LIST, h1's as LIST.
func (b *bmEnv) bmStage(s bmSpec) stage {
	c := stageCtx{Role: s.Role, Collective: collBitmap, In: fmtFP32, Acc: accKulischFixed, Partial: b.rec.Partial, Out: fmtFP32,
		W: b.W, VecLen: s.VecLen, MTU: 1500, WI: s.WI, RD: s.WI, WB: uint32(s.WI) * 1500,
		WE: uint32(s.WI) * uint32(maxElemsPerFrame(1500)), MaxTerms: 64, Timeout: s.Timeout, Tenant: s.Tenant}
	st := stage{Ctx: c}
	if s.hasParent() {
		st.Bindings = append(st.Bindings,
			binding{Kind: bkParent, Stream: 1, Local: bmSwParent, Peer: bmHostParent, Port: b.pidx[0], MAC: b.hosts[0].mac},
			binding{Kind: bkResultIn, Stream: 1, Local: bmSwResIn, Peer: bmHostResIn, Port: b.pidx[0], MAC: b.hosts[0].mac})
	}
	for _, k := range s.children() {
		st.Bindings = append(st.Bindings, binding{Kind: bkContributor, Stream: uint16(k + 1), Local: bmSwData(k), Peer: bmHostData(k), Port: b.pidx[k], MAC: b.hosts[k].mac})
	}
	for _, k := range s.children() {
		st.Bindings = append(st.Bindings, binding{Kind: bkResultOut, Stream: uint16(k + 1), Local: bmSwRes(k), Peer: bmHostRes(k), Port: b.pidx[k], MAC: b.hosts[k].mac})
	}
	if s.ParentRO != nil {
		st.Bindings = append(st.Bindings, binding{Kind: bkResultOut, Stream: 9, Local: 0x39, Peer: 0x309, Port: b.pidx[0], MAC: b.hosts[0].mac})
	}
	if !s.NoABM {
		var eps []uint32
		for _, k := range s.children() {
			eps = append(eps, bmMasks[k]...)
		}
		st.Sets = append(st.Sets, setRecord{Index: 0xFF, Encoding: encFlat, Set: flatSet(0, 8, bmSorted(eps)...)})
	}
	for _, k := range s.children() {
		idx := uint8(s.resultOutIndex(k))
		switch k {
		case 1:
			st.Sets = append(st.Sets, setRecord{Index: idx, Encoding: encFlat, Set: flatSet(0, 1, bmMasks[k]...)})
		case 2:
			st.Sets = append(st.Sets, setRecord{Index: idx, Encoding: encHier, Set: hierSet(64, 8, bmMasks[k]...)})
		default:
			st.Sets = append(st.Sets, setRecord{Index: idx, Encoding: encList, Set: listSet(bmMasks[k]...)})
		}
	}
	if s.ParentRO != nil {
		st.Sets = append(st.Sets, setRecord{Index: uint8(s.resultOutIndex(0)), Encoding: encList, Set: listSet(s.ParentRO...)})
	}
	return st
}

// activate stages and commits s and checks both ACKs.
func (b *bmEnv) activate(t *testing.T, s bmSpec) bmSpec {
	t.Helper()
	s = b.defaults(s)
	b.am.expectAck(t, "STAGE (BITMAP)", control{ID: s.ID, Cmd: cmdStage, Body: b.bmStage(s).encode()}, stOK, osStaged)
	b.am.expectAck(t, "COMMIT (BITMAP)", b.am.cmd(s.ID, cmdCommit), stOK, osActive)
	return s
}

// abort removes a context at the end of a subtest.
func (b *bmEnv) abort(t *testing.T, s bmSpec) {
	t.Helper()
	b.am.expectAck(t, "ABORT", b.am.cmd(s.ID, cmdAbort), stOK, osAborted)
}

// ---- frames the hosts send ----

func bmExt(enc uint8, tenant uint32, token uint64, xflags uint8, eps ...uint32) *extension {
	return &extension{Encoding: enc, XFlags: xflags, Tenant: tenant, Token: token, Set: bmEncode(enc, eps)}
}

// bmEncode writes a set in an encoding with the parameters the tests use:
// FLAT Set ID 0 and the fewest words that hold the largest endpoint, HIER
// 64-bit blocks and 8 blocks (16 when an endpoint is >= 512), LIST.
func bmEncode(enc uint8, eps []uint32) []byte {
	eps = bmSorted(eps)
	switch enc {
	case encFlat:
		return flatSet(0, int(eps[len(eps)-1]/64)+1, eps...)
	case encHier:
		n := 8
		for int(eps[len(eps)-1])/64 >= n {
			n *= 2
		}
		return hierSet(64, n, eps...)
	}
	return listSet(eps...)
}

// contribution is DATA + EXT from child k on its CONTRIBUTOR binding:
// values at elements [0, len(vals)) (vals nil: zero groups, an ACK).
func (b *bmEnv) contribution(s bmSpec, k int, ext *extension, vals []float32) dataFrame {
	d := dataFrame{Class: classData, ID: s.ID, SrcEP: bmHostData(k), DstEP: bmSwData(k), PacketID: b.nextPkt(s.ID, k, classData),
		Stream: uint16(k + 1), Flags: dfExt, Ext: ext}
	if vals != nil {
		d.Groups = []group{fp32Group(vals)}
		if uint32(len(vals)) == s.VecLen {
			d.Flags |= dfLast
		}
	}
	return d
}

// multicast is RESULT + EXT from h1 on the RESULT_IN binding.
func (b *bmEnv) multicast(s bmSpec, ext *extension, vals []float32) dataFrame {
	d := dataFrame{Class: classResult, ID: s.ID, SrcEP: bmHostResIn, DstEP: bmSwResIn, PacketID: b.nextPkt(s.ID, 0, classResult),
		Stream: 1, Flags: dfExt, Ext: ext}
	if vals != nil {
		d.Groups = []group{fp32Group(vals)}
		if uint32(len(vals)) == s.VecLen {
			d.Flags |= dfLast
		}
	}
	return d
}

// send sends a frame from host k to sw1's port MAC; key signs it first
// (8.6) when the extension has AUTH.
func (b *bmEnv) send(t *testing.T, k int, d dataFrame, key []byte) []byte {
	t.Helper()
	p := d.encode()
	if key != nil && d.Ext != nil && d.Ext.XFlags&xfAuth != 0 {
		signFrame(p, key)
	}
	if err := b.hosts[k].send(b.port[k], p); err != nil {
		t.Fatalf("h%d send: %v", k+1, err)
	}
	return p
}

// ---- frames sw1 sends ----

// bmRx is one DATA or RESULT frame of a context a host received from sw1.
type bmRx struct {
	Host int
	F    rxFrame
	D    dataFrame
	Set  []uint32
	Err  error
}

func (r bmRx) token() uint64 {
	if r.D.Ext == nil {
		return 0
	}
	return r.D.Ext.Token
}

// isOpFrame matches DATA (class) or RESULT frames of identity id addressed
// to host k.
func (b *bmEnv) isOpFrame(id ident, k int, class uint8) func(rxFrame) bool {
	m := b.hosts[k].mac
	return func(f rxFrame) bool {
		p := f.Payload
		return f.Eth.Dst == m && len(p) >= 2+dataHdr && p[1] == class && getIdent(p[2:]) == id
	}
}

// collect decodes the frames of class for id that host k received since
// mark.
func (b *bmEnv) collect(s bmSpec, k int, mark int, class uint8) []bmRx {
	var r []bmRx
	for _, f := range b.hosts[k].since(mark, b.isOpFrame(s.ID, k, class)) {
		x := bmRx{Host: k, F: f}
		x.D, x.Err = decodeData(f.Payload, opCtx{MTU: 1500, VecLen: s.VecLen, W: int(b.W)})
		if x.Err == nil && x.D.Ext != nil {
			x.Set, x.Err = decodeSet(x.D.Ext.Encoding, x.D.Ext.Set, 64)
		}
		r = append(r, x)
	}
	return r
}

// marks returns every host's log position.
func (b *bmEnv) marks() [4]int {
	var m [4]int
	for k := range m {
		m[k] = b.hosts[k].mark()
	}
	return m
}

// waitOp waits up to d for the first frame of class for id at host k after
// *from.
func (b *bmEnv) waitOp(s bmSpec, k int, from *int, class uint8, d time.Duration, token uint64) (bmRx, bool) {
	f, ok := b.hosts[k].waitFor(from, d, func(f rxFrame) bool {
		if !b.isOpFrame(s.ID, k, class)(f) {
			return false
		}
		p := f.Payload
		if token == 0 || p[2+33]&dfExt == 0 || len(p) < 2+dataHdr+16 {
			return token == 0
		}
		return be.Uint64(p[2+dataHdr+8:]) == token
	})
	if !ok {
		return bmRx{}, false
	}
	x := bmRx{Host: k, F: f}
	x.D, x.Err = decodeData(f.Payload, opCtx{MTU: 1500, VecLen: s.VecLen, W: int(b.W)})
	if x.Err == nil && x.D.Ext != nil {
		x.Set, x.Err = decodeSet(x.D.Ext.Encoding, x.D.Ext.Set, 64)
	}
	return x, true
}

// checkResultCopy checks a RESULT copy host k received against 8.8 and
// 5.1: the RESULT_OUT binding toward k mirrored, from sw1's port MAC,
// version 1.0, EXT with the original's Tenant, Token and XFlags (AUTH
// aside), values unchanged, and the set wantSet.
func (b *bmEnv) checkResultCopy(t *testing.T, s bmSpec, x bmRx, orig dataFrame, wantSet []uint32) {
	t.Helper()
	k := x.Host
	what := fmt.Sprintf("h%d copy of token %#x", k+1, orig.Ext.Token)
	if x.Err != nil {
		t.Errorf("%s fails the receiver rules: %v", what, x.Err)
		return
	}
	d := x.D
	if x.F.Payload[0] != version10 {
		t.Errorf("%s: version %#x, want 0x10 (2)", what, x.F.Payload[0])
	}
	if x.F.Eth.Src != b.port[k] {
		t.Errorf("%s from %s, want sw1's egress port MAC %s (9.5)", what, x.F.Eth.Src, b.port[k])
	}
	wantSrc, wantDst, wantStream := bmSwRes(k), bmHostRes(k), uint16(k+1)
	if k == 0 {
		wantSrc, wantDst, wantStream = 0x39, 0x309, 9
	}
	if d.SrcEP != wantSrc || d.DstEP != wantDst || d.Stream != wantStream {
		t.Errorf("%s: endpoints %#x->%#x stream %d, want the RESULT_OUT binding mirrored %#x->%#x stream %d (5.1)",
			what, d.SrcEP, d.DstEP, d.Stream, wantSrc, wantDst, wantStream)
	}
	if d.Ext == nil {
		t.Errorf("%s has no extension (8.8: the copy carries D-BM AND mask)", what)
		return
	}
	if d.Ext.Token != orig.Ext.Token || d.Ext.Tenant != orig.Ext.Tenant {
		t.Errorf("%s: token %#x tenant %d, want %#x and %d (8.2: echoed unchanged)", what, d.Ext.Token, d.Ext.Tenant, orig.Ext.Token, orig.Ext.Tenant)
	}
	if d.Ext.XFlags&^xfAuth != orig.Ext.XFlags&^xfAuth {
		t.Errorf("%s: XFlags %#x, original %#x (8.8: copies carry the incoming INSTALL and PARTIAL flags)", what, d.Ext.XFlags, orig.Ext.XFlags)
	}
	if d.First != orig.First || d.ElemCount != uint16(bmCount(orig)) || d.Flags&^dfRetransmit != orig.Flags&^dfRetransmit {
		t.Errorf("%s: first %d count %d flags %#x, original %d %d %#x", what, d.First, d.ElemCount, d.Flags, orig.First, bmCount(orig), orig.Flags)
	}
	if !bytes.Equal(bmBody(d), bmBody(orig)) {
		t.Errorf("%s: values changed on the way", what)
	}
	if !bmEqual(x.Set, wantSet) {
		t.Errorf("%s: set %v, want D-BM AND mask = %v (8.8)", what, x.Set, wantSet)
	}
}

func bmCount(d dataFrame) int {
	n := 0
	for _, g := range d.Groups {
		n += int(g.Count)
	}
	return n
}

// bmBody is the encoded NumberGroups of d.
func bmBody(d dataFrame) []byte {
	var b []byte
	for _, g := range d.Groups {
		b = g.appendTo(b)
	}
	return b
}

// ---- sets (a naive implementation: sorted slices) ----

func bmSorted(eps []uint32) []uint32 {
	m := map[uint32]bool{}
	for _, e := range eps {
		m[e] = true
	}
	r := make([]uint32, 0, len(m))
	for e := range m {
		r = append(r, e)
	}
	sort.Slice(r, func(i, j int) bool { return r[i] < r[j] })
	return r
}

func bmUnion(sets ...[]uint32) []uint32 {
	var all []uint32
	for _, s := range sets {
		all = append(all, s...)
	}
	return bmSorted(all)
}

func bmAnd(a, b []uint32) []uint32 {
	m := map[uint32]bool{}
	for _, e := range b {
		m[e] = true
	}
	var r []uint32
	for _, e := range bmSorted(a) {
		if m[e] {
			r = append(r, e)
		}
	}
	return r
}

func bmMinus(a, b []uint32) []uint32 {
	m := map[uint32]bool{}
	for _, e := range b {
		m[e] = true
	}
	var r []uint32
	for _, e := range bmSorted(a) {
		if !m[e] {
			r = append(r, e)
		}
	}
	return r
}

func bmEqual(a, b []uint32) bool {
	a, b = bmSorted(a), bmSorted(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ---- values (exact) ----

const bmPrec = 8192

// bmExact decodes every value of a frame to an exact big.Float by position
// (elements not carried are nil); specials (inf, NaN) are not expected in
// these tests and are reported as errors.
func bmExact(d dataFrame, n int) ([]*big.Float, error) {
	r := make([]*big.Float, n)
	pos := int(d.First)
	for _, g := range d.Groups {
		for i := 0; i < int(g.Count); i++ {
			v, err := bmValue(g, i)
			if err != nil {
				return nil, err
			}
			if pos >= n {
				return nil, fmt.Errorf("element %d beyond %d", pos, n)
			}
			r[pos] = v
			pos++
		}
	}
	return r, nil
}

func bmValue(g group, i int) (*big.Float, error) {
	f := new(big.Float).SetPrec(bmPrec)
	switch g.Format {
	case fmtINT8:
		return f.SetInt64(int64(int8(g.Values[i]))), nil
	case fmtFP16:
		h := binary.LittleEndian.Uint16(g.Values[2*i:])
		s, e, m := h>>15, int(h>>10&0x1F), int64(h&0x3FF)
		if e == 31 {
			return nil, fmt.Errorf("FP16 special %#x", h)
		}
		if e == 0 {
			f.SetMantExp(big.NewFloat(float64(m)), -24)
		} else {
			f.SetMantExp(big.NewFloat(float64(1024+m)), e-25)
		}
		if s == 1 {
			f.Neg(f)
		}
		return f, nil
	case fmtBF16:
		x := math.Float32frombits(uint32(binary.LittleEndian.Uint16(g.Values[2*i:])) << 16)
		if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
			return nil, fmt.Errorf("BF16 special")
		}
		return f.SetFloat64(float64(x)), nil
	case fmtFP32:
		x := math.Float32frombits(binary.LittleEndian.Uint32(g.Values[4*i:]))
		if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
			return nil, fmt.Errorf("FP32 special")
		}
		return f.SetFloat64(float64(x)), nil
	case fmtKulisch:
		kv := g.kulischVals()[i]
		switch kv.State {
		case 0:
			f.SetInt(kv.Int)
			return f.SetMantExp(f, -149), nil
		case 1, 2:
			return f, nil
		}
		return nil, fmt.Errorf("Kulisch special state %d", kv.State)
	}
	return nil, fmt.Errorf("format %d in a bitmap frame", g.Format)
}

// bmSum is the exact sum of several contributions, element by element.
func bmSum(vals ...[]float32) []*big.Float {
	r := make([]*big.Float, len(vals[0]))
	for i := range r {
		r[i] = new(big.Float).SetPrec(bmPrec)
		for _, v := range vals {
			r[i].Add(r[i], new(big.Float).SetPrec(bmPrec).SetFloat64(float64(v[i])))
		}
	}
	return r
}

func bmFmt(v []*big.Float) string {
	s := make([]string, len(v))
	for i, x := range v {
		if x == nil {
			s[i] = "-"
		} else {
			s[i] = x.Text('g', 20)
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

// bmValuesEqual compares a decoded partial with the exact sum; lossy
// partial formats (the Partial Policy FP32) are compared after rounding the
// sum to binary32.
func (b *bmEnv) bmValuesEqual(got, want []*big.Float) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] == nil {
			return false
		}
		w := want[i]
		if b.rec.Partial == fmtFP32 {
			f, _ := w.Float32()
			w = new(big.Float).SetFloat64(float64(f))
		}
		if got[i].Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// bmVals returns n FP32 values whose exact sums with other bmVals vectors
// need more than 24 bits (1 + tiny parts), so an accumulator that rounds
// shows.
func bmVals(seed, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Ldexp(float64(1+seed), i%5)) + float32(math.Ldexp(float64(2*i+1), -40+seed))
		if (i+seed)%3 == 0 {
			v[i] = -v[i]
		}
	}
	return v
}

// ---- prismd's control socket (9.6) ----

func (b *bmEnv) keyClient() *http.Client {
	sock := b.lab.ControlSocket("sw1")
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
}

// keyRequest sends one request of 9.6 and returns the status and body.
func (b *bmEnv) keyRequest(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	st, rb, _ := b.keyRequestCT(t, method, path, body)
	return st, rb
}

// keyRequestCT is keyRequest that also returns the Content-Type.
func (b *bmEnv) keyRequestCT(t *testing.T, method, path, body string) (int, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://prismd"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.keyClient().Do(req)
	if err != nil {
		t.Fatalf("%s %s on the control socket: %v", method, path, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(rb), resp.Header.Get("Content-Type")
}

// ---- metrics ----

// bmCounter is one series of sw1's /metrics (0 when absent).
func bmCounter(text, name string) float64 { return series(text, name) }

// bmWaitSeries waits up to d for series name to grow by want over base.
func (b *bmEnv) bmWaitSeries(base, name string, want float64, d time.Duration) float64 {
	return b.waitDelta(base, func(text string) float64 { return series(text, name) }, want, d)
}

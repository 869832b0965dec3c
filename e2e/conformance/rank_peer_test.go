package conformance

// A rank written only from docs/protocol.md: sections 6 and 7 for its DATA
// stream to the leaf (windows, credits, retransmission on evidence and on a
// timer) and for the RESULT stream from the leaf (PROGRESS after every
// frame and timer-driven ones every Timeout/4), section 9.1 for what it
// takes from the grant.

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"testing"
	"time"
)

type rkFrame struct {
	pkt         uint32
	first, end  uint32
	b           []byte // bytes after the Ethernet header, RETRANSMIT clear
	size        uint32 // Byte Credits count: Ethernet header + PRISM structures
	sentAt      time.Time
	acked       bool
	noCredit    bool
	retransmits int
}

type rkProg struct {
	At     time.Time
	Kernel time.Time // the kernel's receive time (rxFrame.Kernel)
	P      progress
}

type rkRank struct {
	e       *rkEnv
	t       *testing.T
	r       int
	nic     *nic
	g       *rkGrant
	id      ident
	leaf    mac
	mtu     int
	vecLen  uint32
	timeout time.Duration
	grantAt time.Time
	silent  bool // sends nothing at all

	mu sync.Mutex
	// RESULT side.
	vals        []float32
	have        []bool
	pkts        map[uint32][]byte
	ranges      map[uint32][2]uint32
	resFrames   []dataFrame
	lastResProg time.Time
	inexact     bool
	errs        []string
	changed     chan struct{}
	// DATA side.
	progs     []rkProg // every PROGRESS the leaf sent for the DATA stream
	progCh    chan progress
	failedAt  time.Time // first PROGRESS FAILED / UNKNOWN_OPERATION / INVALID
	failState uint8
	nextPkt   uint32
	sent      []*rkFrame
	committed uint32
	credI     uint16
	credB     uint32
	retrans   int
	stop      chan struct{}
	stopOnce  sync.Once
}

// newRank attaches rank r (on host r+1) to its grant. silent ranks send
// nothing, not even PROGRESS for RESULT.
func (e *rkEnv) newRank(t *testing.T, r int, g *rkGrant, silent bool) *rkRank {
	hw, err := net.ParseMAC(g.LeafMAC)
	if err != nil || len(hw) != 6 {
		t.Fatalf("rank %d: grant leaf_mac %q: %v", r, g.LeafMAC, err)
	}
	if g.Data == nil || g.Window == nil {
		t.Fatalf("rank %d: grant without data or window: %s", r, g.raw)
	}
	k := &rkRank{e: e, t: t, r: r, nic: e.nics[r], g: g, id: g.Op.ident(), mtu: g.MTU, vecLen: g.VectorLen,
		timeout: time.Duration(g.TimeoutMS) * time.Millisecond, grantAt: time.Now(),
		vals: make([]float32, g.VectorLen), have: make([]bool, g.VectorLen),
		pkts: map[uint32][]byte{}, ranges: map[uint32][2]uint32{}, changed: make(chan struct{}),
		progCh: make(chan progress, 8192), nextPkt: 1, credI: g.Window.Intervals, credB: g.Window.Bytes,
		stop: make(chan struct{}), silent: silent}
	copy(k.leaf[:], hw)
	k.nic.addHook(k.handle)
	t.Cleanup(k.close)
	if g.Result != nil && !silent {
		go k.resultKeepalive()
	}
	return k
}

func (k *rkRank) close() { k.stopOnce.Do(func() { close(k.stop) }) }

func (k *rkRank) errorf(format string, a ...any) {
	k.errs = append(k.errs, fmt.Sprintf("rank %d: ", k.r)+fmt.Sprintf(format, a...))
}

// report fails t with every error the rank's receive paths saw.
func (k *rkRank) report(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.errs {
		t.Error(s)
	}
	k.errs = nil
}

func (k *rkRank) handle(f rxFrame) bool {
	p := f.Payload
	if f.Eth.Dst != k.nic.mac || len(p) < 2+18 || getIdent(p[2:]) != k.id {
		return false
	}
	select {
	case <-k.stop:
		return false
	default:
	}
	switch p[1] {
	case classResult:
		k.handleResult(f)
		return true
	case classProgress:
		k.handleProgress(f)
		return true
	}
	return false
}

func (k *rkRank) handleProgress(f rxFrame) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, err := decodeProgress(f.Payload, k.mtu, k.vecLen)
	if err != nil {
		k.errorf("PROGRESS fails the receiver rules (7): %v", err)
		return
	}
	d := k.g.Data
	if f.Eth.Src != k.leaf {
		k.errorf("PROGRESS from %s, want the leaf's port MAC %s (9.1 leaf_mac)", f.Eth.Src, k.leaf)
	}
	if p.Flags&pfResult != 0 {
		k.errorf("PROGRESS with flag RESULT sent to a rank, which never sends RESULT (7): %+v", p)
		return
	}
	if p.Stream != d.StreamID || p.SrcEP != d.DstEndpoint || p.DstEP != d.SrcEndpoint {
		k.errorf("PROGRESS stream %d endpoints %d->%d, want stream %d, %d->%d (7: the binding mirrored; 9.1 data)",
			p.Stream, p.SrcEP, p.DstEP, d.StreamID, d.DstEndpoint, d.SrcEndpoint)
	}
	if p.Status != psFailed && p.Status != psUnknownOp && (p.Flags&pfComplete != 0) != (p.Committed == k.vecLen) {
		k.errorf("PROGRESS flags %#x with Committed %d of %d (7: COMPLETE exactly when Committed == Vector Length)", p.Flags, p.Committed, k.vecLen)
	}
	w := k.g.Window
	if p.IntervalCredits > w.Intervals || p.ByteCredits > w.Bytes {
		k.errorf("PROGRESS credits %d / %d exceed the granted window %d / %d", p.IntervalCredits, p.ByteCredits, w.Intervals, w.Bytes)
	}
	if (p.Status == psFailed || p.Status == psUnknownOp || p.Status == psInvalid) && k.failedAt.IsZero() {
		k.failedAt, k.failState = f.At, p.Status
	}
	k.progs = append(k.progs, rkProg{At: f.At, Kernel: f.Kernel, P: p})
	select {
	case k.progCh <- p:
	default:
	}
}

func (k *rkRank) handleResult(f rxFrame) {
	k.mu.Lock()
	defer k.mu.Unlock()
	res := k.g.Result
	if res == nil {
		k.errorf("RESULT frame to a rank whose grant has no result stream (9.1: absent for a REDUCE rank that is not root_rank)")
		return
	}
	p := f.Payload
	if len(p) >= 2+dataHdr && be.Uint16(p[2+36:]) != res.StreamID {
		k.errorf("RESULT on stream %d, the grant's result stream is %d", be.Uint16(p[2+36:]), res.StreamID)
		return
	}
	d, err := decodeData(p, opCtx{MTU: k.mtu, VecLen: k.vecLen, W: k.g.KulischWidth})
	if err != nil {
		k.errorf("RESULT fails the receiver rules (6): %v", err)
		return
	}
	k.resFrames = append(k.resFrames, d)
	if f.Eth.Src != k.leaf {
		k.errorf("RESULT packet %d from %s, want the leaf's port MAC %s", d.PacketID, f.Eth.Src, k.leaf)
	}
	if d.SrcEP != res.SrcEndpoint || d.DstEP != res.DstEndpoint {
		k.errorf("RESULT packet %d endpoints %d->%d, want %d->%d (9.1 result)", d.PacketID, d.SrcEP, d.DstEP, res.SrcEndpoint, res.DstEndpoint)
	}
	if d.Ext != nil {
		k.errorf("RESULT packet %d of a REDUCE/ALLREDUCE with EXT (8.4)", d.PacketID)
	}
	if d.PacketID == 0 {
		k.errorf("RESULT packet ID 0 (6)")
	}
	if d.Flags&dfInexact != 0 {
		k.inexact = true
	}
	for _, g := range d.Groups {
		if g.Format != fmtFP32 {
			k.errorf("RESULT packet %d: group format %d, the output format is %s", d.PacketID, g.Format, k.g.OutputFormat)
		}
	}
	status := uint8(psOK)
	key := append([]byte(nil), p...)
	key[2+33] &^= dfRetransmit
	if old, ok := k.pkts[d.PacketID]; ok {
		if string(old) == string(key) {
			status = psDuplicate
		} else {
			status = psInvalid
			k.errorf("RESULT packet %d repeated with different bytes", d.PacketID)
		}
	} else {
		end := d.First + uint32(d.ElemCount)
		for id, rg := range k.ranges {
			if d.First < rg[1] && rg[0] < end {
				k.errorf("RESULT packet %d [%d,%d) overlaps packet %d [%d,%d)", d.PacketID, d.First, end, id, rg[0], rg[1])
			}
		}
		k.pkts[d.PacketID] = key
		k.ranges[d.PacketID] = [2]uint32{d.First, end}
		pos := d.First
		for _, g := range d.Groups {
			if g.Format == fmtFP32 {
				for _, v := range g.fp32s() {
					k.vals[pos], k.have[pos] = v, true
					pos++
				}
			} else {
				pos += uint32(g.Count)
			}
		}
	}
	if !k.silent {
		k.sendResultProgress(d.PacketID, status)
	}
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *rkRank) resCommitted() uint32 {
	c := uint32(0)
	for c < k.vecLen && k.have[c] {
		c++
	}
	return c
}

// sendResultProgress answers on the RESULT stream (7); k.mu held.
func (k *rkRank) sendResultProgress(pkt uint32, status uint8) {
	res := k.g.Result
	c := k.resCommitted()
	pr := progress{ID: k.id, SrcEP: res.DstEndpoint, DstEP: res.SrcEndpoint, Stream: res.StreamID, PacketID: pkt,
		Committed: c, IntervalCredits: k.g.Window.Intervals, ByteCredits: k.g.Window.Bytes, Status: status, Flags: pfResult}
	hi := uint32(0)
	for i := int(k.vecLen) - 1; i >= int(c); i-- {
		if k.have[i] {
			hi = uint32(i + 1)
			break
		}
	}
	for i := c; i < hi && len(pr.Holes) < 32; {
		if k.have[i] {
			i++
			continue
		}
		j := i
		for j < hi && !k.have[j] {
			j++
		}
		pr.Holes = append(pr.Holes, hole{i, j})
		i = j
	}
	if c == k.vecLen {
		pr.Flags |= pfComplete
	}
	if err := k.nic.send(k.leaf, pr.encode()); err != nil {
		k.errorf("send PROGRESS: %v", err)
	}
	k.lastResProg = time.Now()
}

// resultKeepalive sends the timer-driven PROGRESS of section 7 on the
// RESULT stream: Timeout/4 after the grant or after the last PROGRESS the
// rank sent, while the stream is incomplete.
func (k *rkRank) resultKeepalive() {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-tick.C:
		}
		k.mu.Lock()
		last := k.lastResProg
		if last.Before(k.grantAt) {
			last = k.grantAt
		}
		if k.resCommitted() < k.vecLen && !k.inexact && time.Since(last) >= k.timeout/4 {
			k.sendResultProgress(0, psOK)
		}
		k.mu.Unlock()
	}
}

// waitResult waits until the RESULT covers [0, to) and returns the values.
func (k *rkRank) waitResult(t *testing.T, to uint32, d time.Duration) ([]float32, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		k.mu.Lock()
		c := k.resCommitted()
		ch := k.changed
		inexact := k.inexact
		if c >= to || inexact {
			v := append([]float32(nil), k.vals...)
			k.mu.Unlock()
			if inexact {
				t.Errorf("rank %d: RESULT ACCUMULATION_INEXACT", k.r)
				return v, false
			}
			return v, true
		}
		k.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			t.Errorf("rank %d: RESULT covers [0,%d) after %v, want [0,%d)", k.r, c, d, to)
			return nil, false
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// checkResultIDs checks the RESULT Packet IDs are 1, 2, 3, ... (6: a
// sender numbers the packets of one stream in sending order [choice]).
func (k *rkRank) checkResultIDs(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]int, 0, len(k.pkts))
	for id := range k.pkts {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for i, id := range ids {
		if id != i+1 {
			t.Errorf("rank %d: RESULT Packet IDs %v, want 1..%d (6)", k.r, ids, len(ids))
			return
		}
	}
}

// resultFlagsEnding returns the flags of the RESULT frames whose range ends
// at end.
func (k *rkRank) resultFlagsEnding(end uint32) []uint8 {
	k.mu.Lock()
	defer k.mu.Unlock()
	var r []uint8
	for _, d := range k.resFrames {
		if d.First+uint32(d.ElemCount) == end && d.ElemCount > 0 {
			r = append(r, d.Flags)
		}
	}
	return r
}

// ---- DATA sending (6, 7) ----

type rkFailure struct{ status uint8 }

func (f *rkFailure) Error() string {
	return fmt.Sprintf("the leaf answered PROGRESS status %d", f.status)
}

// frames cuts [from, to) into DATA frames (chunks' pattern of one to three
// groups); PUSH on the frame that ends at to when push.
func (k *rkRank) frames(v []float32, from, to int, push bool) []*rkFrame {
	d := k.g.Data
	var out []*rkFrame
	cs := chunks(to - from)
	pos := from
	for i, sizes := range cs {
		df := dataFrame{Class: classData, ID: k.id, SrcEP: d.SrcEndpoint, DstEP: d.DstEndpoint, PacketID: k.nextPkt,
			First: uint32(pos), Stream: d.StreamID}
		k.nextPkt++
		start := pos
		for _, n := range sizes {
			df.Groups = append(df.Groups, fp32Group(v[pos:pos+n]))
			pos += n
		}
		if uint32(pos) == k.vecLen {
			df.Flags |= dfLast
		}
		if push && i == len(cs)-1 {
			df.Flags |= dfPush
		}
		b := df.encode()
		if len(b) > k.mtu {
			k.t.Fatalf("rank %d: frame of %d bytes over MTU %d", k.r, len(b), k.mtu)
		}
		out = append(out, &rkFrame{pkt: df.PacketID, first: uint32(start), end: uint32(pos), b: b, size: uint32(14 + len(b))})
	}
	return out
}

func (k *rkRank) xmit(f *rkFrame, retransmit bool) {
	b := f.b
	if retransmit {
		b = append([]byte(nil), f.b...)
		b[2+33] |= dfRetransmit
		f.retransmits++
		k.retrans++
	}
	f.sentAt = time.Now()
	f.noCredit = false
	if err := k.nic.send(k.leaf, b); err != nil {
		k.t.Errorf("rank %d: send DATA packet %d: %v", k.r, f.pkt, err)
	}
}

// inFlight counts the frames sent and not reported accepted.
func (k *rkRank) inFlight() (n int, bytes uint32, unacked int) {
	for _, f := range k.sent {
		if f.acked {
			continue
		}
		unacked++
		if !f.noCredit {
			n++
			bytes += f.size
		}
	}
	return
}

func (k *rkRank) canSend(size uint32) bool {
	n, b, un := k.inFlight()
	return n+1 <= int(k.credI) && b+size <= k.credB && un+1 <= int(k.g.Window.ReplayDepth)
}

// apply takes one PROGRESS into the sender state; it returns an error for
// FAILED, UNKNOWN_OPERATION and INVALID (7: the sender stops).
func (k *rkRank) apply(p progress) error {
	switch p.Status {
	case psFailed, psUnknownOp, psInvalid:
		return &rkFailure{p.Status}
	}
	if p.Committed < k.committed {
		return nil // stale (7)
	}
	k.committed = p.Committed
	k.credI, k.credB = p.IntervalCredits, p.ByteCredits
	var held *rkFrame
	for _, f := range k.sent {
		if f.pkt == p.PacketID {
			held = f
		}
	}
	if p.Status == psNoCredit && held != nil && !held.acked {
		held.noCredit = true
		return nil
	}
	overlapsHole := func(f *rkFrame) bool {
		for _, h := range p.Holes {
			if f.first < h.End && h.Start < f.end {
				return true
			}
		}
		return false
	}
	maxAcked := uint32(0)
	for _, f := range k.sent {
		if !f.acked && (f.end <= p.Committed ||
			held != nil && (p.Status == psOK || p.Status == psDuplicate) && len(p.Holes) < 32 && f.end <= held.end && !overlapsHole(f)) {
			f.acked = true
		}
		if f.acked && f.pkt > maxAcked {
			maxAcked = f.pkt
		}
	}
	// Evidence (7 a): a frame sent later has been reported received.
	for _, f := range k.sent {
		if !f.acked && f.pkt < maxAcked && time.Since(f.sentAt) > 20*time.Millisecond && k.canSend(0) {
			k.xmit(f, true)
		}
	}
	return nil
}

// sendRange sends v[from:to) and returns once the leaf has committed to, or
// on a failure PROGRESS, or at the deadline.
func (k *rkRank) sendRange(ctx context.Context, v []float32, from, to int, push bool) error {
	queue := k.frames(v, from, to, push)
	const rto0 = 200 * time.Millisecond
	rto := rto0
	lastHeard := time.Now()
	for {
		// Frames refused for credit first, then new ones, within the credits.
		for _, f := range k.sent {
			if !f.acked && f.noCredit && k.canSend(f.size) {
				k.xmit(f, true)
			}
		}
		for len(queue) > 0 && k.canSend(queue[0].size) {
			f := queue[0]
			queue = queue[1:]
			k.sent = append(k.sent, f)
			k.xmit(f, false)
		}
		if k.committed >= uint32(to) {
			return nil
		}
		select {
		case p := <-k.progCh:
			if err := k.apply(p); err != nil {
				return err
			}
			lastHeard, rto = time.Now(), rto0
		case <-time.After(10 * time.Millisecond):
			if time.Since(lastHeard) >= rto {
				for _, f := range k.sent {
					if !f.acked {
						k.xmit(f, true) // the oldest unacknowledged frame only (7 b)
						break
					}
				}
				lastHeard = time.Now()
				if rto < 8*rto0 {
					rto *= 2
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("rank %d: DATA [%d,%d): committed %d at the deadline: %w", k.r, from, to, k.committed, ctx.Err())
		}
	}
}

// failedAnnouncements returns the PROGRESS FAILED with Packet ID 0 the rank
// received (7, Failure announcement).
func (k *rkRank) failedAnnouncements() []rkProg {
	k.mu.Lock()
	defer k.mu.Unlock()
	var r []rkProg
	for _, p := range k.progs {
		if p.P.Status == psFailed && p.P.PacketID == 0 {
			r = append(r, p)
		}
	}
	return r
}

// timerProgress returns the timer-driven PROGRESS (Packet ID 0, OK) the
// rank received on its DATA stream in [from, to).
func (k *rkRank) timerProgress(from, to time.Time) []rkProg {
	k.mu.Lock()
	defer k.mu.Unlock()
	var r []rkProg
	for _, p := range k.progs {
		if p.P.Status == psOK && p.P.PacketID == 0 && !p.At.Before(from) && p.At.Before(to) {
			r = append(r, p)
		}
	}
	return r
}

// ---- inputs and oracles ----

// rkInputs returns size vectors of n nonzero FP32 values over 2^-20..2^20;
// in a third of the elements the last rank nearly cancels the others, so
// the exact sum needs more than 24 bits and both the rounding and the
// order of FP32_ARRIVAL's additions show in the result.
func rkInputs(seed uint64, size, n int) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 0x2545F4914F6CDD1D))
	val := func(lo, hi int) float32 {
		v := float32(math.Ldexp(rng.Float64()+0.5, lo+rng.IntN(hi-lo+1)))
		if rng.IntN(2) == 0 {
			v = -v
		}
		return v
	}
	v := make([][]float32, size)
	for r := range v {
		v[r] = make([]float32, n)
	}
	for i := 0; i < n; i++ {
		for {
			for r := 0; r < size; r++ {
				v[r][i] = val(-20, 20)
			}
			if rng.IntN(3) == 0 && size > 1 {
				s := new(big.Float).SetPrec(2048)
				for r := 0; r < size-1; r++ {
					s.Add(s, big.NewFloat(float64(v[r][i])))
				}
				f, _ := s.Float64()
				v[size-1][i] = float32(-f * (1 + (rng.Float64()-0.5)*math.Ldexp(1, -10)))
			}
			col := make([]float32, size)
			ok := true
			for r := range v {
				col[r] = v[r][i]
				if col[r] == 0 || math.IsInf(float64(col[r]), 0) {
					ok = false
				}
			}
			s := exactSum(col...)
			if ok && s != 0 && math.Abs(float64(s)) >= math.Ldexp(1, -120) && !math.IsInf(float64(s), 0) {
				break
			}
		}
	}
	return v
}

// checkStreamPeers: each rank's leaf lists the rank's DATA stream (and
// its RESULT stream, when it has one) among its streams, named
// "rank R (HOST)"; every switch edge's stream is named at both ends (9.3).
func checkStreamPeers(t *testing.T, s rkStatus, grants []*rkGrant, hosts []string) {
	t.Helper()
	named := map[string]string{}
	for _, n := range s.Nodes {
		for _, b := range n.Streams {
			named[fmt.Sprintf("%s %s %d", n.Name, b.Kind, b.Stream)] = b.Peer
		}
	}
	for r, g := range grants {
		want := fmt.Sprintf("rank %d (%s)", r, hosts[r])
		if k := fmt.Sprintf("%s CONTRIBUTOR %d", g.Leaf, g.Data.StreamID); named[k] != want {
			t.Errorf("GET /v1/ops/{id}: node %s stream %q, want %q (9.3 streams)", g.Leaf, named[k], want)
		}
		if g.Result != nil {
			if k := fmt.Sprintf("%s RESULT_OUT %d", g.Leaf, g.Result.StreamID); named[k] != want {
				t.Errorf("GET /v1/ops/{id}: node %s stream %q, want %q (9.3 streams)", g.Leaf, named[k], want)
			}
		}
	}
	for _, n := range s.Nodes {
		if n.Parent == "" {
			continue
		}
		for _, b := range n.Streams {
			if b.Kind != "PARENT" {
				continue
			}
			if b.Peer != "the parent "+n.Parent {
				t.Errorf("GET /v1/ops/{id}: node %s PARENT stream %d named %q, want %q", n.Name, b.Stream, b.Peer, "the parent "+n.Parent)
			}
			if k := fmt.Sprintf("%s CONTRIBUTOR %d", n.Parent, b.Stream); named[k] != "subtree "+n.Name {
				t.Errorf("GET /v1/ops/{id}: node %s CONTRIBUTOR stream %d named %q, want %q", n.Parent, b.Stream, named[k], "subtree "+n.Name)
			}
		}
	}
}

// rkTree is the reduction tree as GET /v1/ops reports it plus the grants'
// leaves: each node's children (switches) and ranks.
type rkTree struct {
	root     string
	children map[string][]string
	ranks    map[string][]int
}

func rkTreeOf(s rkStatus, leafOf map[int]string) rkTree {
	t := rkTree{root: s.Root, children: map[string][]string{}, ranks: map[string][]int{}}
	for _, n := range s.Nodes {
		if n.Parent != "" {
			t.children[n.Parent] = append(t.children[n.Parent], n.Name)
		}
	}
	for r, l := range leafOf {
		t.ranks[l] = append(t.ranks[l], r)
	}
	for _, v := range t.ranks {
		sort.Ints(v)
	}
	return t
}

// arrival returns every value FP32_ARRIVAL can produce for element i: each
// node rounds each admitted term into its FP32 state in arrival order
// (5.1), its terms being its ranks' inputs and its children's partials.
func (tr rkTree) arrival(in [][]float32, i int) map[uint32]bool {
	var at func(node string) map[uint32]bool
	at = func(node string) map[uint32]bool {
		var terms []map[uint32]bool
		for _, r := range tr.ranks[node] {
			terms = append(terms, map[uint32]bool{math.Float32bits(in[r][i]): true})
		}
		for _, c := range tr.children[node] {
			terms = append(terms, at(c))
		}
		out := map[uint32]bool{}
		var rec func(acc float32, started bool, used []bool)
		rec = func(acc float32, started bool, used []bool) {
			all := true
			for j := range terms {
				if used[j] {
					continue
				}
				all = false
				used[j] = true
				for b := range terms[j] {
					x := math.Float32frombits(b)
					if started {
						rec(acc+x, true, used)
					} else {
						rec(x, true, used)
					}
				}
				used[j] = false
			}
			if all && started {
				out[math.Float32bits(acc)] = true
			}
		}
		rec(0, false, make([]bool, len(terms)))
		return out
	}
	return at(tr.root)
}

package conformance

// A spec-built switch for the multi-switch tests: on a lab host's raw
// socket, this code plays sw1's parent (it receives sw1's partial DATA on
// the PARENT binding, answers PROGRESS and sends RESULT down on RESULT_IN)
// or sw1's child (it sends partial DATA on a CONTRIBUTOR binding without
// the RANK flag and receives RESULT on RESULT_OUT). Everything here comes
// from docs/protocol.md sections 5.1, 6 and 7.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// trLink is one edge between sw1 and a spec-built switch: the host NIC
// this code uses, sw1's port on the edge, and the numbering of the DATA
// stream (contributor ID) and the RESULT path on it.
type trLink struct {
	name   string
	nic    *nic
	stamps *trStamps // kernel receive times on the same interface
	swMAC  mac       // sw1's port MAC on this edge (a switch sends from it, 9.5)
	port   uint16    // sw1's port index

	dStream, dSW, dPeer uint16 // DATA: contributor ID, sw1's endpoint, ours
	rStream, rSW, rPeer uint16 // RESULT: Result Path ID, sw1's endpoint, ours
}

// upBindings: sw1 is the child, we are its parent (PARENT + RESULT_IN).
func (l *trLink) upBindings() []binding {
	return []binding{
		{Kind: bkParent, Stream: l.dStream, Local: l.dSW, Peer: l.dPeer, Port: l.port, MAC: l.nic.mac},
		{Kind: bkResultIn, Stream: l.rStream, Local: l.rSW, Peer: l.rPeer, Port: l.port, MAC: l.nic.mac},
	}
}

// downBindings: sw1 is the parent, we are a child switch (CONTRIBUTOR
// without RANK + RESULT_OUT).
func (l *trLink) downBindings() []binding {
	return []binding{
		{Kind: bkContributor, Stream: l.dStream, Local: l.dSW, Peer: l.dPeer, Port: l.port, MAC: l.nic.mac},
		{Kind: bkResultOut, Stream: l.rStream, Local: l.rSW, Peer: l.rPeer, Port: l.port, MAC: l.nic.mac},
	}
}

// trOp is what both ends know of an operation.
type trOp struct {
	ID     ident
	VecLen uint32
	W      int
	WI     uint16
	WB     uint32
}

// ---- receiver of sw1's DATA (we are the parent) or RESULT (we are a child) ----

const (
	trAuto   = iota // answer every frame at once with full credits
	trManual        // record, answer only when the test says
	trSilent        // record, never answer
)

type trFrame struct {
	At     time.Time
	Raw    []byte
	D      dataFrame
	First  bool // first arrival of this Packet ID
	Lost   bool // ignored on purpose (a simulated loss)
	Status int  // PROGRESS status it was (or would have been) answered with; -1 none
}

type trRx struct {
	name      string
	lk        *trLink
	class     uint8
	op        trOp
	stream    uint16
	swEP      uint16
	myEP      uint16
	formatOK  func(uint8) bool
	noPush    bool
	mu        sync.Mutex
	mode      int
	lose      map[uint32]bool // packet IDs ignored (lost) until removed
	failAll   bool
	frames    []trFrame
	firstKey  map[uint32][]byte
	keys      map[uint32][]byte // accepted packets
	ranges    map[uint32][2]uint32
	sizes     map[uint32]int
	nextFirst uint32
	vals      []trVal
	have      []bool
	errs      []string
	inexact   bool
}

func newTrRx(name string, lk *trLink, class uint8, op trOp, formatOK func(uint8) bool) *trRx {
	rx := &trRx{name: name, lk: lk, class: class, op: op, formatOK: formatOK, noPush: true,
		lose: map[uint32]bool{}, firstKey: map[uint32][]byte{}, keys: map[uint32][]byte{},
		ranges: map[uint32][2]uint32{}, sizes: map[uint32]int{}, nextFirst: 1,
		vals: make([]trVal, op.VecLen), have: make([]bool, op.VecLen)}
	if class == classData {
		rx.stream, rx.swEP, rx.myEP = lk.dStream, lk.dSW, lk.dPeer
	} else {
		rx.stream, rx.swEP, rx.myEP = lk.rStream, lk.rSW, lk.rPeer
	}
	lk.nic.addHook(rx.handle)
	return rx
}

func (rx *trRx) errorf(format string, a ...any) {
	rx.errs = append(rx.errs, rx.name+": "+fmt.Sprintf(format, a...))
}

func (rx *trRx) setMode(m int) {
	rx.mu.Lock()
	rx.mode = m
	rx.mu.Unlock()
}

func (rx *trRx) handle(f rxFrame) bool {
	p := f.Payload
	if f.Eth.Dst != rx.lk.nic.mac || len(p) < 2+dataHdr || p[1] != rx.class {
		return false
	}
	h := p[2:]
	if getIdent(h) != rx.op.ID || be.Uint16(h[36:]) != rx.stream {
		return false
	}
	rx.mu.Lock()
	defer rx.mu.Unlock()
	tf := trFrame{At: f.At, Raw: p, Status: -1}
	d, err := decodeData(p, opCtx{MTU: 1500, VecLen: rx.op.VecLen, W: rx.op.W})
	tf.D = d
	if err != nil {
		rx.errorf("frame fails the receiver rules of 6: %v", err)
		rx.frames = append(rx.frames, tf)
		return true
	}
	if f.Eth.Src != rx.lk.swMAC {
		rx.errorf("packet %d from %s, want sw1's port MAC %s on this edge (9.5: a switch sends from its egress port's MAC)", d.PacketID, f.Eth.Src, rx.lk.swMAC)
	}
	if d.SrcEP != rx.swEP || d.DstEP != rx.myEP {
		rx.errorf("packet %d endpoints %#x->%#x, want %#x->%#x (5.1: the binding mirrored; 6: a switch emitting a partial uses its PARENT binding's values)", d.PacketID, d.SrcEP, d.DstEP, rx.swEP, rx.myEP)
	}
	if p[0] != version10 {
		rx.errorf("packet %d version %#x, want 0x10 (2)", d.PacketID, p[0])
	}
	if d.Ext != nil {
		rx.errorf("packet %d has EXT in a REDUCE/ALLREDUCE operation", d.PacketID)
	}
	if d.PacketID == 0 {
		rx.errorf("Packet ID 0 (6: numbered from 1)")
	}
	if rx.noPush && d.Flags&dfPush != 0 {
		rx.errorf("packet %d has PUSH, but no contributor sent PUSH (6.1 P3)", d.PacketID)
	}
	for gi, g := range d.Groups {
		if rx.formatOK != nil && !rx.formatOK(g.Format) {
			rx.errorf("packet %d group %d has format %d", d.PacketID, gi, g.Format)
		}
	}
	declared := 2 + dataHdr + int(be.Uint16(h[34:]))
	key := append([]byte(nil), p[:declared]...)
	key[2+33] &^= dfRetransmit
	if old, ok := rx.firstKey[d.PacketID]; ok {
		if string(old) != string(key) {
			rx.errorf("packet %d sent again with different bytes (6: a retransmission reuses the Packet ID and identical bytes)", d.PacketID)
		}
		if d.Flags&dfRetransmit == 0 {
			rx.errorf("packet %d sent again without RETRANSMIT (6)", d.PacketID)
		}
	} else {
		tf.First = true
		rx.firstKey[d.PacketID] = key
		if d.PacketID != rx.nextFirst {
			rx.errorf("new Packet ID %d after %d (6: a sender numbers the packets of a stream 1, 2, 3, ... in sending order)", d.PacketID, rx.nextFirst-1)
		}
		if d.PacketID >= rx.nextFirst {
			rx.nextFirst = d.PacketID + 1
		}
		if d.Flags&dfRetransmit != 0 {
			rx.errorf("packet %d has RETRANSMIT on its first transmission", d.PacketID)
		}
	}
	if rx.lose[d.PacketID] {
		tf.Lost = true
		rx.frames = append(rx.frames, tf)
		return true
	}
	status := uint8(psOK)
	if rx.failAll {
		status = psFailed
	} else if old, ok := rx.keys[d.PacketID]; ok {
		if string(old) == string(key) {
			status = psDuplicate
		} else {
			status = psInvalid
		}
	} else {
		end := d.First + uint32(d.ElemCount)
		for id, rg := range rx.ranges {
			if d.ElemCount > 0 && d.First < rg[1] && rg[0] < end {
				status = psInvalid
				rx.errorf("packet %d [%d,%d) overlaps packet %d [%d,%d)", d.PacketID, d.First, end, id, rg[0], rg[1])
			}
		}
		if status == psOK {
			rx.keys[d.PacketID] = key
			rx.ranges[d.PacketID] = [2]uint32{d.First, end}
			rx.sizes[d.PacketID] = 14 + declared
			if d.Flags&dfInexact != 0 {
				rx.inexact = true
			}
			pos := d.First
			for _, g := range d.Groups {
				for _, v := range trGroupVals(g) {
					rx.vals[pos], rx.have[pos] = v, true
					pos++
				}
			}
		}
	}
	tf.Status = int(status)
	rx.frames = append(rx.frames, tf)
	if rx.mode == trAuto || rx.failAll && rx.mode != trSilent {
		rx.sendLocked(d.PacketID, status, -1, -1)
	}
	return true
}

func (rx *trRx) committedLocked() uint32 {
	c := uint32(0)
	for c < rx.op.VecLen && rx.have[c] {
		c++
	}
	return c
}

func (rx *trRx) committed() uint32 {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return rx.committedLocked()
}

// progressLocked is the PROGRESS we would send now: committed, holes up to
// the highest element held, and (for ic, bc < 0) the window minus what is
// held above Committed (7: absolute credits).
func (rx *trRx) progressLocked(pkt uint32, status uint8, ic int, bc int64) progress {
	c := rx.committedLocked()
	p := progress{ID: rx.op.ID, SrcEP: rx.myEP, DstEP: rx.swEP, Stream: rx.stream, PacketID: pkt,
		Committed: c, Status: status}
	if rx.class == classResult {
		p.Flags |= pfResult
	}
	if c == rx.op.VecLen {
		p.Flags |= pfComplete
	}
	hi := uint32(0)
	for i := int(rx.op.VecLen) - 1; i >= 0; i-- {
		if rx.have[i] {
			hi = uint32(i + 1)
			break
		}
	}
	for i := c; i < hi && len(p.Holes) < 32; {
		if rx.have[i] {
			i++
			continue
		}
		j := i
		for j < hi && !rx.have[j] {
			j++
		}
		p.Holes = append(p.Holes, hole{i, j})
		i = j
	}
	heldN, heldB := 0, 0
	for id, rg := range rx.ranges {
		if rg[1] > c {
			heldN++
			heldB += rx.sizes[id]
		}
	}
	if ic < 0 {
		ic = max(0, int(rx.op.WI)-heldN)
	}
	if bc < 0 {
		bc = int64(max(0, int(rx.op.WB)-heldB))
	}
	p.IntervalCredits, p.ByteCredits = uint16(ic), uint32(bc)
	return p
}

func (rx *trRx) sendLocked(pkt uint32, status uint8, ic int, bc int64) progress {
	p := rx.progressLocked(pkt, status, ic, bc)
	if err := rx.lk.nic.send(rx.lk.swMAC, p.encode()); err != nil {
		rx.errorf("send PROGRESS: %v", err)
	}
	return p
}

// answer sends one PROGRESS now (credits < 0: the free window).
func (rx *trRx) answer(pkt uint32, status uint8, ic int, bc int64) progress {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return rx.sendLocked(pkt, status, ic, bc)
}

// snapshot returns a copy of the frames received so far.
func (rx *trRx) snapshot() []trFrame {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return append([]trFrame(nil), rx.frames...)
}

// maxID is the highest Packet ID seen.
func (rx *trRx) maxID() uint32 {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return rx.nextFirst - 1
}

// waitUntil polls cond (under the lock) until it holds or d passes.
func (rx *trRx) waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		rx.mu.Lock()
		ok := cond()
		rx.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (rx *trRx) waitComplete(d time.Duration) bool {
	return rx.waitUntil(d, func() bool { return rx.committedLocked() == rx.op.VecLen })
}

// report reports (once) every error the receiver saw: frames failing the
// rules of 6, wrong MACs or endpoints, Packet ID numbering, resends that
// differ, overlaps.
func (rx *trRx) report(t *testing.T) {
	t.Helper()
	rx.mu.Lock()
	defer rx.mu.Unlock()
	for _, e := range rx.errs {
		t.Error(e)
	}
	rx.errs = nil
}

// frameStats describes the frames received: count of first sends, resends,
// group formats.
func (rx *trRx) frameStats() string {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	first, re := 0, 0
	fm := map[uint8]int{}
	bytes := 0
	for _, f := range rx.frames {
		if f.First {
			first++
			bytes += len(f.Raw)
			for _, g := range f.D.Groups {
				fm[g.Format] += int(g.Count)
			}
		} else {
			re++
		}
	}
	var ks []int
	for k := range fm {
		ks = append(ks, int(k))
	}
	sort.Ints(ks)
	s := fmt.Sprintf("%d frames (%d bytes after Ethernet), %d resent; values per format:", first, bytes, re)
	for _, k := range ks {
		s += fmt.Sprintf(" %d:%d", k, fm[uint8(k)])
	}
	return s
}

// ---- sender of our DATA (we are a child) or RESULT (we are the parent) ----

type trTx struct {
	lk     *trLink
	class  uint8
	op     trOp
	stream uint16
	myEP   uint16
	swEP   uint16
	next   uint32
}

func newTrTx(lk *trLink, class uint8, op trOp) *trTx {
	tx := &trTx{lk: lk, class: class, op: op, next: 1}
	if class == classData {
		tx.stream, tx.myEP, tx.swEP = lk.dStream, lk.dPeer, lk.dSW
	} else {
		tx.stream, tx.myEP, tx.swEP = lk.rStream, lk.rPeer, lk.rSW
	}
	return tx
}

// frame builds the next frame (next Packet ID) of groups from first; LAST
// is set when it ends at the vector length.
func (tx *trTx) frame(first uint32, groups []group, flags uint8) dataFrame {
	d := dataFrame{Class: tx.class, ID: tx.op.ID, SrcEP: tx.myEP, DstEP: tx.swEP, PacketID: tx.next,
		First: first, Stream: tx.stream, Flags: flags, Groups: groups}
	tx.next++
	n := uint32(0)
	for _, g := range groups {
		n += uint32(g.Count)
	}
	if n > 0 && first+n == tx.op.VecLen {
		d.Flags |= dfLast
	}
	return d
}

func (tx *trTx) sendRaw(t *testing.T, b []byte) {
	t.Helper()
	if err := tx.lk.nic.send(tx.lk.swMAC, b); err != nil {
		t.Fatalf("%s: send %d bytes: %v", tx.lk.name, len(b), err)
	}
}

func (tx *trTx) send(t *testing.T, d dataFrame) []byte {
	t.Helper()
	b := d.encode()
	if len(b) > 1500 {
		t.Fatalf("%s: frame of %d bytes exceeds the MTU (test bug)", tx.lk.name, len(b))
	}
	tx.sendRaw(t, b)
	return b
}

// isProgress matches PROGRESS sw1 sends us for this stream (7: flag RESULT
// when it controls a RESULT transfer).
func (tx *trTx) isProgress(f rxFrame) bool {
	p := f.Payload
	if f.Eth.Dst != tx.lk.nic.mac || len(p) < 2+progressHdr || p[1] != classProgress || getIdent(p[2:]) != tx.op.ID {
		return false
	}
	return be.Uint16(p[2+22:]) == tx.stream && (p[2+39]&pfResult != 0) == (tx.class == classResult)
}

// checkProgress decodes a PROGRESS for this stream and checks what
// section 7 fixes: the receiver rules, sent from sw1's port MAC on the
// edge, the binding mirrored, COMPLETE exactly at the vector length,
// credits within the window.
func (tx *trTx) checkProgress(t *testing.T, f rxFrame) progress {
	t.Helper()
	p, err := decodeProgress(f.Payload, 1500, tx.op.VecLen)
	if err != nil {
		t.Errorf("%s: PROGRESS fails the receiver rules of 7: %v", tx.lk.name, err)
		return p
	}
	if f.Eth.Src != tx.lk.swMAC {
		t.Errorf("%s: PROGRESS from %s, want sw1's port MAC %s", tx.lk.name, f.Eth.Src, tx.lk.swMAC)
	}
	if p.SrcEP != tx.swEP || p.DstEP != tx.myEP {
		t.Errorf("%s: PROGRESS endpoints %#x->%#x, want %#x->%#x (7: the binding mirrored)", tx.lk.name, p.SrcEP, p.DstEP, tx.swEP, tx.myEP)
	}
	if f.Payload[0] != version10 {
		t.Errorf("%s: PROGRESS version %#x", tx.lk.name, f.Payload[0])
	}
	if p.Status == psOK || p.Status == psDuplicate || p.Status == psNoCredit || p.Status == psInvalid {
		if (p.Flags&pfComplete != 0) != (p.Committed == tx.op.VecLen) {
			t.Errorf("%s: PROGRESS flags %#x with committed %d of %d (7: COMPLETE exactly when Committed == Vector Length)", tx.lk.name, p.Flags, p.Committed, tx.op.VecLen)
		}
	}
	if p.IntervalCredits > tx.op.WI || p.ByteCredits > tx.op.WB {
		t.Errorf("%s: PROGRESS credits %d intervals / %d bytes exceed the window %d / %d", tx.lk.name, p.IntervalCredits, p.ByteCredits, tx.op.WI, tx.op.WB)
	}
	return p
}

// waitProgress waits for the PROGRESS naming Packet ID pkt (any when
// pkt < 0) and checks it.
func (tx *trTx) waitProgress(t *testing.T, from *int, pkt int64, d time.Duration) (progress, bool) {
	t.Helper()
	f, ok := tx.lk.nic.waitFor(from, d, func(f rxFrame) bool {
		return tx.isProgress(f) && (pkt < 0 || int64(be.Uint32(f.Payload[2+24:])) == pkt)
	})
	if !ok {
		return progress{}, false
	}
	return tx.checkProgress(t, f), true
}

// isAnnouncement matches a failure announcement on this stream: PROGRESS
// FAILED with Packet ID 0 (7).
func (tx *trTx) isAnnouncement(f rxFrame) bool {
	return tx.isProgress(f) && f.Payload[2+38] == psFailed && be.Uint32(f.Payload[2+24:]) == 0
}

// checkAnnouncements checks the failure announcement on this stream: three
// PROGRESS FAILED with Packet ID 0, 10 ms apart, with the window's
// Committed Element, then none (7). It returns the first one's time.
func (tx *trTx) checkAnnouncements(t *testing.T, from int, committed uint32, wait time.Duration) time.Time {
	t.Helper()
	n := tx.lk.nic
	first, ok := n.waitFor(&from, wait, tx.isAnnouncement)
	if !ok {
		t.Errorf("%s: no PROGRESS FAILED (Packet ID 0) on stream %#x within %v (7: a context that becomes FAILED announces it to the peer of every stream it receives)", tx.lk.name, tx.stream, wait)
		return time.Time{}
	}
	time.Sleep(250 * time.Millisecond)
	all := n.since(from-1, tx.isAnnouncement)
	if len(all) != 3 {
		t.Errorf("%s: %d failure announcements on stream %#x, want 3 (7: three times, 10 ms apart, then never again)", tx.lk.name, len(all), tx.stream)
	}
	// Spacing on kernel receive timestamps (user-space times of a busy
	// reader can make two frames look back to back).
	times := make([]time.Time, len(all))
	for i, f := range all {
		times[i] = f.At
	}
	src := "user-space"
	if tx.lk.stamps != nil {
		time.Sleep(5 * time.Millisecond)
		if ks := tx.lk.stamps.match(time.Time{}, tx.isAnnouncement); len(ks) == len(all) {
			times, src = ks, "kernel"
		}
	}
	var at []time.Duration
	short := false
	for i, f := range all {
		p := tx.checkProgress(t, f)
		if p.Committed != committed {
			t.Errorf("%s: announcement %d committed %d, want the window's committed %d", tx.lk.name, i, p.Committed, committed)
		}
		at = append(at, times[i].Sub(times[0]).Round(10*time.Microsecond))
		if i > 0 && times[i].Sub(times[i-1]) < 5*time.Millisecond { // 7: 10 ms by the node's timer; queues shorten it
			short = true
		}
	}
	if src != "kernel" {
		short = false // too coarse to judge (note T10)
		t.Logf("%s: announcement times %v (user-space, not judged)", tx.lk.name, at)
	}
	t.Run(fmt.Sprintf("announcement_spacing_%s_stream_%#x", strings.ReplaceAll(tx.lk.name, " ", "_"), tx.stream), func(t *testing.T) {
		if short {
			trFinding(t, fTrAnnounceSpacing, "%s: failure announcements on stream %#x received (kernel timestamps) at %v after the first; 7: three times, 10 ms apart", tx.lk.name, tx.stream, at)
		}
	})
	return first.At
}

// rankTx is the view of rank r's DATA stream (lab_test.go numbering) as a
// sender: its PROGRESS and failure announcements come from sw1's port r.
func (te *treeEnv) rankTx(r int, o trOp) *trTx {
	lk := &trLink{name: fmt.Sprintf("rank %d", r), nic: te.rankNIC(r), stamps: te.stamps[te.rankNIC(r)], swMAC: te.portMAC[r], port: te.portIdx[r],
		dStream: uint16(r + 1), dSW: swDataEP(r), dPeer: rankDataEP(r)}
	return newTrTx(lk, classData, o)
}

package conformance

// Lab plumbing: raw AF_PACKET sockets opened inside the lab's namespaces,
// an Aggregation Manager that sends CONTROL and checks every reply against
// section 5, and ranks that send DATA and answer RESULT with PROGRESS.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/deploy"
)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

type rxFrame struct {
	At time.Time
	// Kernel is the kernel's receive time (SO_TIMESTAMPNS; zero if none):
	// spacing rules are checked on it, since At is when a reader goroutine
	// that may wait for a core got the frame.
	Kernel  time.Time
	Eth     ethHdr
	Payload []byte // after the Ethernet header
}

// nic is a raw socket on one host interface. Every PRISM frame addressed to
// the interface's MAC is logged; hooks see each frame first and may claim
// it (RESULT frames handled by a rank's result sink).
type nic struct {
	name    string
	fd      int
	ifindex int
	mac     mac

	mu       sync.Mutex
	lastSent time.Time
	log      []rxFrame
	changed  chan struct{}
	hooks    []func(rxFrame) bool
	closed   bool
	done     chan struct{}
}

// openRaw opens an AF_PACKET socket for PRISM frames on iface (in the
// calling thread's namespace), bound to it, with a 20 ms receive timeout so
// readers can stop.
func openRaw(iface string) (int, *net.Interface, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(etherType)))
	if err != nil {
		return -1, nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(etherType), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, ifi, nil
}

func openNIC(t *testing.T, lab *deploy.Lab, node, iface string) *nic {
	t.Helper()
	n := &nic{name: node + ":" + iface, changed: make(chan struct{}), done: make(chan struct{})}
	err := lab.Do(node, func() error {
		fd, ifi, err := openRaw(iface)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			unix.Close(fd)
			return err
		}
		n.fd, n.ifindex = fd, ifi.Index
		copy(n.mac[:], ifi.HardwareAddr)
		return nil
	})
	if err != nil {
		t.Fatalf("open raw socket on %s: %v", n.name, err)
	}
	if want := mac(lab.Topo.MAC(node, iface)); n.mac != want {
		t.Fatalf("%s has MAC %s, topology says %s", n.name, n.mac, want)
	}
	go n.readLoop()
	t.Cleanup(n.close)
	return n
}

func (n *nic) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	n.mu.Unlock()
	<-n.done
	unix.Close(n.fd)
}

func (n *nic) readLoop() {
	defer close(n.done)
	buf := make([]byte, 1<<16)
	oob := make([]byte, 256)
	for {
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return
		}
		k, oobn, _, from, err := unix.Recvmsg(n.fd, buf, oob, 0)
		if err != nil {
			continue // EAGAIN on the receive timeout
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		// Every PRISM frame on the link is logged, whatever its destination
		// (a veth delivers other hosts' unicast too): negative tests look for
		// replies to spoofed source MACs. Predicates check the destination.
		eh, payload, err := splitEth(buf[:k])
		if err != nil || eh.Type != etherType {
			continue
		}
		f := rxFrame{At: time.Now(), Kernel: kernelStamp(oob[:oobn]), Eth: eh, Payload: append([]byte(nil), payload...)}
		n.mu.Lock()
		hooks := append([]func(rxFrame) bool(nil), n.hooks...)
		n.mu.Unlock()
		for _, h := range hooks {
			if h(f) {
				break
			}
		}
		n.mu.Lock()
		n.log = append(n.log, f)
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
	}
}

func (n *nic) addHook(h func(rxFrame) bool) {
	n.mu.Lock()
	n.hooks = append(n.hooks, h)
	n.mu.Unlock()
}

func (n *nic) send(dst mac, payload []byte) error {
	return n.sendFrom(n.mac, dst, payload)
}

// sendFrom sends with any source MAC (negative tests spoof one).
func (n *nic) sendFrom(src, dst mac, payload []byte) error {
	_, err := unix.Write(n.fd, ethFrame(dst, src, payload))
	n.mu.Lock()
	n.lastSent = time.Now()
	n.mu.Unlock()
	return err
}

func (n *nic) lastSend() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastSent
}

// mark is a position in the log: frames after it are new.
func (n *nic) mark() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.log)
}

// waitFor returns the first logged frame at index >= *from that satisfies
// pred, advancing *from past it, or false at the deadline.
func (n *nic) waitFor(from *int, d time.Duration, pred func(rxFrame) bool) (rxFrame, bool) {
	deadline := time.Now().Add(d)
	for {
		n.mu.Lock()
		for ; *from < len(n.log); *from++ {
			if f := n.log[*from]; pred(f) {
				*from++
				n.mu.Unlock()
				return f, true
			}
		}
		ch := n.changed
		n.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return rxFrame{}, false
		}
		select {
		case <-ch:
		case <-time.After(left):
		}
	}
}

// since returns the logged frames from index from that satisfy pred.
func (n *nic) since(from int, pred func(rxFrame) bool) []rxFrame {
	n.mu.Lock()
	defer n.mu.Unlock()
	var r []rxFrame
	for i := from; i < len(n.log); i++ {
		if pred(n.log[i]) {
			r = append(r, n.log[i])
		}
	}
	return r
}

// ---- the lab environment ----

type env struct {
	t        *testing.T
	lab      *deploy.Lab
	h1, h2   *nic
	nodeMAC  mac    // sw1's node MAC (CONTROL destination)
	portMAC  [2]mac // sw1 p1 (toward h1) and p2 (toward h2)
	portIdx  [2]uint16
	am       *manager
	caps     []capRecord
	capsPage capsPage
	jobID    uint64
}

func (e *env) rankNIC(r int) *nic {
	if r == 0 {
		return e.h1
	}
	return e.h2
}

// metrics returns sw1's /metrics text.
func (e *env) metrics() string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.lab.Metrics(ctx, "sw1")
	if err != nil {
		e.t.Fatalf("metrics: %v", err)
	}
	return s
}

// drops sums every sample whose labels carry reason="reason" in a metric
// family whose name mentions "drop". Section 10 names the reasons but not
// the metric; this reading is the test's assumption (finding 3).
func drops(text, reason string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !strings.Contains(l, `reason="`+reason+`"`) {
			continue
		}
		name := l
		if i := strings.IndexAny(l, "{ "); i >= 0 {
			name = l[:i]
		}
		if !strings.Contains(name, "drop") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// dropDelta waits up to d for the drop counter of reason to reach base+want
// and returns the increase it saw.
func (e *env) dropDelta(base string, reason string, want float64, d time.Duration) float64 {
	return e.waitDelta(base, func(text string) float64 { return drops(text, reason) }, want, d)
}

// specDropDelta is dropDelta for a reason counted where section 10's table
// says (specDrops).
func (e *env) specDropDelta(base string, reason string, want float64, d time.Duration) float64 {
	return e.waitDelta(base, func(text string) float64 { return specDrops(text, reason) }, want, d)
}

// waitDelta scrapes until count grows by want over base, or d passes.
func (e *env) waitDelta(base string, count func(string) float64, want float64, d time.Duration) float64 {
	b := count(base)
	deadline := time.Now().Add(d)
	for {
		got := count(e.metrics()) - b
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- the Aggregation Manager ----

type manager struct {
	e   *env
	nic *nic
	mu  sync.Mutex
	txn uint32
}

func (m *manager) nextTxn() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txn++
	return m.txn
}

// reply is a decoded answer to one request.
type reply struct {
	Frame rxFrame
	C     control
	Ack   ack // when C.Cmd == ACK
}

// request sends c (Txn 0: a fresh one) to sw1's node MAC and waits for the
// reply with the same Transaction ID and identity, retransmitting the
// identical bytes every 100 ms (5.). It checks the reply against section 5:
// from the MAC the request was addressed to, to the AM, identity and
// Transaction ID echoed, endpoints swapped, ACK for every request but
// CAPS_QUERY, Acked Command = the request's command.
func (m *manager) request(t *testing.T, c control) (reply, error) {
	t.Helper()
	if c.Txn == 0 {
		c.Txn = m.nextTxn()
	}
	if c.FragCount == 0 {
		c.FragCount = 1
	}
	if c.SrcEP == 0 && c.DstEP == 0 {
		c.SrcEP, c.DstEP = 0xFFFE, 0x0001
	}
	return m.requestRaw(t, c, c.encode(), m.e.nodeMAC, 5)
}

func (m *manager) requestRaw(t *testing.T, c control, payload []byte, dst mac, tries int) (reply, error) {
	t.Helper()
	from := m.nic.mark()
	for try := 0; try < tries; try++ {
		if err := m.nic.send(dst, payload); err != nil {
			return reply{}, err
		}
		f, ok := m.nic.waitFor(&from, 100*time.Millisecond, func(f rxFrame) bool {
			if len(f.Payload) < 2+controlHdr || f.Payload[1] != classControl {
				return false
			}
			h := f.Payload[2:]
			return f.Eth.Dst == m.nic.mac && be.Uint32(h[18:]) == c.Txn && getIdent(h) == c.ID
		})
		if !ok {
			continue
		}
		rc, err := decodeControl(f.Payload)
		if err != nil {
			t.Errorf("reply to txn %d does not decode: %v", c.Txn, err)
			return reply{}, err
		}
		r := reply{Frame: f, C: rc}
		if f.Eth.Src != dst {
			t.Errorf("reply to txn %d comes from %s, not from the MAC the request was addressed to (%s) (5)", c.Txn, f.Eth.Src, dst)
		}
		if rc.SrcEP != c.DstEP || rc.DstEP != c.SrcEP {
			t.Errorf("reply to txn %d: endpoints %#x->%#x, request %#x->%#x: not swapped (5)", c.Txn, rc.SrcEP, rc.DstEP, c.SrcEP, c.DstEP)
		}
		wantCmd := uint8(cmdAck)
		if c.Cmd == cmdCapsQuery && rc.Cmd == cmdCapsResponse {
			wantCmd = cmdCapsResponse
		}
		if rc.Cmd != wantCmd {
			t.Errorf("reply to command %d: command %d", c.Cmd, rc.Cmd)
		}
		if rc.Cmd == cmdAck {
			a, err := decodeAck(rc.Body)
			if err != nil {
				t.Errorf("ACK body: %v", err)
			}
			r.Ack = a
			if a.Acked != c.Cmd {
				t.Errorf("ACK of txn %d names command %d, request was %d (5.2)", c.Txn, a.Acked, c.Cmd)
			}
			if rc.Status != stInvalid && rc.Status != stInvalidBinding && a.Detail != 0xFFFF {
				t.Errorf("ACK status %d with Detail %#x, want 0xFFFF (5.2)", rc.Status, a.Detail)
			}
		}
		return r, nil
	}
	return reply{}, fmt.Errorf("no reply to command %d txn %d after %d tries", c.Cmd, c.Txn, tries)
}

// must is request that fails the test without a reply.
func (m *manager) must(t *testing.T, c control) reply {
	t.Helper()
	r, err := m.request(t, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// expectAck sends c and checks status and state.
func (m *manager) expectAck(t *testing.T, what string, c control, status, state uint8) reply {
	t.Helper()
	r := m.must(t, c)
	if r.C.Cmd != cmdAck || r.C.Status != status || r.Ack.State != state {
		t.Errorf("%s: ACK status %d state %d (detail %#x), want status %d state %d",
			what, r.C.Status, r.Ack.State, r.Ack.Detail, status, state)
	}
	return r
}

func (m *manager) cmd(id ident, cmd uint8) control {
	return control{ID: id, Cmd: cmd, Body: []byte{}}
}

// complete polls COMPLETE until pred holds or d passes; returns the last ACK.
func (m *manager) complete(t *testing.T, id ident, d time.Duration, pred func(reply) bool) reply {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r := m.must(t, m.cmd(id, cmdComplete))
		if pred(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- operations and ranks ----

type opSpec struct {
	ID         ident
	Collective uint8
	Acc        uint8
	Partial    uint8
	W          uint16
	VecLen     uint32
	Timeout    uint32
	ResultTo   []int // ranks with a RESULT_OUT binding
	WI         uint16
	WB, WE     uint32
	Push       bool
}

// Endpoint and stream numbering used by every lab operation: rank r
// contributes on stream r+1 (switch endpoint 0x10+r, rank endpoint
// 0x100+r) and receives RESULT on path r+1 (switch 0x20+r, rank 0x200+r).
func swDataEP(r int) uint16   { return 0x10 + uint16(r) }
func rankDataEP(r int) uint16 { return 0x100 + uint16(r) }
func swResEP(r int) uint16    { return 0x20 + uint16(r) }
func rankResEP(r int) uint16  { return 0x200 + uint16(r) }

func (e *env) stageOf(o opSpec) stage {
	c := stageCtx{Role: roleSingle, Collective: o.Collective, In: fmtFP32, Acc: o.Acc, Partial: o.Partial, Out: fmtFP32,
		W: o.W, VecLen: o.VecLen, MTU: 1500, WI: o.WI, RD: o.WI, WB: o.WB, WE: o.WE, MaxTerms: 2, Timeout: o.Timeout}
	s := stage{Ctx: c}
	for r := 0; r < 2; r++ {
		s.Bindings = append(s.Bindings, binding{Kind: bkContributor, Flags: bfRank, Stream: uint16(r + 1),
			Local: swDataEP(r), Peer: rankDataEP(r), Port: e.portIdx[r], MAC: e.rankNIC(r).mac})
	}
	for _, r := range o.ResultTo {
		s.Bindings = append(s.Bindings, binding{Kind: bkResultOut, Flags: bfRank, Stream: uint16(r + 1),
			Local: swResEP(r), Peer: rankResEP(r), Port: e.portIdx[r], MAC: e.rankNIC(r).mac})
	}
	return s
}

// defaults fills the window and tuple fields of o from sw1's capabilities.
func (e *env) defaults(o opSpec) opSpec {
	if o.WI == 0 {
		o.WI = 16
	}
	if o.WB == 0 {
		o.WB = uint32(o.WI) * 1500
	}
	if o.WE == 0 {
		o.WE = uint32(o.WI) * uint32(maxElemsPerFrame(1500))
	}
	if o.Timeout == 0 {
		o.Timeout = 5000
	}
	if o.Partial == 0 {
		r, ok := e.tuple(o.Acc)
		if !ok {
			e.t.Fatalf("no capability record for FP32 in, accumulator %#x, FP32 out", o.Acc)
		}
		o.Partial = r.Partial
	}
	if o.Acc == accKulischFixed && o.W == 0 {
		o.W = 280 // 278 + ceil(log2 2) = 279, rounded up to a byte
	}
	return o
}

// tuple is the capability record this test uses for an accumulator: FP32
// in and out; among several, the one whose Partial Policy is AUTO, else
// FP32, else the first.
func (e *env) tuple(acc uint8) (capRecord, bool) {
	var best capRecord
	found := false
	for _, r := range e.caps {
		if r.In != fmtFP32 || r.Out != fmtFP32 || r.Acc != acc {
			continue
		}
		if !found || r.Partial == fmtAuto || r.Partial == fmtFP32 && best.Partial != fmtAuto {
			best, found = r, true
		}
	}
	return best, found
}

// resultSink is one rank's receiver of a RESULT stream: it checks every
// RESULT against sections 5.1 and 6, stores the values, and answers each
// one with PROGRESS as section 7 asks.
type resultSink struct {
	e        *env
	rank     int
	o        opSpec
	nic      *nic
	mu       sync.Mutex
	vals     []float32
	have     []bool
	pkts     map[uint32][]byte // packet ID -> frame bytes, RETRANSMIT cleared
	ranges   map[uint32][2]uint32
	frames   []dataFrame
	errs     []string
	acks     int
	done     chan struct{}
	silent   bool // do not answer (failure tests)
	failLast bool // answer the RESULT frame with LAST with PROGRESS FAILED (peer-failure test)
}

func (s *resultSink) errorf(format string, a ...any) {
	s.errs = append(s.errs, fmt.Sprintf("rank %d RESULT: ", s.rank)+fmt.Sprintf(format, a...))
}

func (e *env) newSink(r int, o opSpec) *resultSink {
	s := &resultSink{e: e, rank: r, o: o, nic: e.rankNIC(r), vals: make([]float32, o.VecLen), have: make([]bool, o.VecLen),
		pkts: map[uint32][]byte{}, ranges: map[uint32][2]uint32{}, done: make(chan struct{})}
	s.nic.addHook(s.handle)
	return s
}

func (s *resultSink) committed() uint32 {
	c := uint32(0)
	for c < s.o.VecLen && s.have[c] {
		c++
	}
	return c
}

func (s *resultSink) handle(f rxFrame) bool {
	p := f.Payload
	if f.Eth.Dst != s.nic.mac || len(p) < 2+dataHdr || p[1] != classResult {
		return false
	}
	h := p[2:]
	if getIdent(h) != s.o.ID || be.Uint16(h[36:]) != uint16(s.rank+1) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := decodeData(p, opCtx{MTU: 1500, VecLen: s.o.VecLen, W: int(s.o.W)})
	if err != nil {
		s.errorf("frame fails the receiver rules: %v", err)
		return true
	}
	s.frames = append(s.frames, d)
	if f.Eth.Src != s.e.portMAC[s.rank] {
		s.errorf("packet %d from %s, want sw1's port MAC %s (9.5: a switch sends from its egress port's MAC)", d.PacketID, f.Eth.Src, s.e.portMAC[s.rank])
	}
	if d.SrcEP != swResEP(s.rank) || d.DstEP != rankResEP(s.rank) {
		s.errorf("packet %d endpoints %#x->%#x, want %#x->%#x (5.1 binding mirrored)", d.PacketID, d.SrcEP, d.DstEP, swResEP(s.rank), rankResEP(s.rank))
	}
	if d.Ext != nil || d.Flags&dfInexact != 0 {
		s.errorf("packet %d flags %#x", d.PacketID, d.Flags)
	}
	if d.PacketID == 0 {
		s.errorf("packet ID 0 (6: Packet IDs start at 1)")
	}
	for _, g := range d.Groups {
		if g.Format != fmtFP32 {
			s.errorf("packet %d: group format %d, Output Format is FP32", d.PacketID, g.Format)
		}
	}
	status := uint8(psOK)
	key := append([]byte(nil), p...)
	key[2+33] &^= dfRetransmit
	if old, ok := s.pkts[d.PacketID]; ok {
		if string(old) == string(key) {
			status = psDuplicate
		} else {
			status = psInvalid
			s.errorf("packet %d repeated with different bytes", d.PacketID)
		}
	} else {
		end := d.First + uint32(d.ElemCount)
		for id, rg := range s.ranges {
			if d.First < rg[1] && rg[0] < end {
				s.errorf("packet %d [%d,%d) overlaps packet %d [%d,%d)", d.PacketID, d.First, end, id, rg[0], rg[1])
			}
		}
		s.pkts[d.PacketID] = key
		s.ranges[d.PacketID] = [2]uint32{d.First, end}
		pos := d.First
		for _, g := range d.Groups {
			if g.Format != fmtFP32 {
				pos += uint32(g.Count)
				continue
			}
			for _, v := range g.fp32s() {
				s.vals[pos], s.have[pos] = v, true
				pos++
			}
		}
	}
	if s.silent {
		return true
	}
	if s.failLast && d.Flags&dfLast != 0 {
		status = psFailed
	}
	c := s.committed()
	pr := progress{ID: s.o.ID, SrcEP: rankResEP(s.rank), DstEP: swResEP(s.rank), Stream: uint16(s.rank + 1),
		PacketID: d.PacketID, Committed: c, IntervalCredits: s.o.WI, ByteCredits: s.o.WB, Status: status, Flags: pfResult}
	// Holes between the committed element and the highest element held.
	hi := uint32(0)
	for i := int(s.o.VecLen) - 1; i >= 0; i-- {
		if s.have[i] {
			hi = uint32(i + 1)
			break
		}
	}
	for i := c; i < hi && len(pr.Holes) < 32; {
		if s.have[i] {
			i++
			continue
		}
		j := i
		for j < hi && !s.have[j] {
			j++
		}
		pr.Holes = append(pr.Holes, hole{i, j})
		i = j
	}
	if c == s.o.VecLen {
		pr.Flags |= pfComplete
	}
	if err := s.nic.send(f.Eth.Src, pr.encode()); err != nil {
		s.errorf("send PROGRESS: %v", err)
	}
	s.acks++
	if c == s.o.VecLen {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
	return true
}

// wait waits for the whole RESULT and reports every error the sink saw.
func (s *resultSink) wait(t *testing.T, d time.Duration) []float32 {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		s.mu.Lock()
		c := s.committed()
		s.mu.Unlock()
		t.Errorf("rank %d: RESULT incomplete after %v: committed %d of %d", s.rank, d, c, s.o.VecLen)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.errs {
		t.Error(e)
	}
	// Packet IDs are 1, 2, 3, ... in sending order (6 [choice]).
	ids := make([]int, 0, len(s.pkts))
	for id := range s.pkts {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for i, id := range ids {
		if id != i+1 {
			t.Errorf("rank %d: RESULT Packet IDs %v, want 1..%d (6: numbered 1, 2, 3, ... in sending order)", s.rank, ids, len(ids))
			break
		}
	}
	return append([]float32(nil), s.vals...)
}

// partial reports the errors the sink saw and returns the values so far,
// for streams that do not complete.
func (s *resultSink) partial(t *testing.T) []float32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.errs {
		t.Error(e)
	}
	return append([]float32(nil), s.vals...)
}

// sender is one rank's DATA stream.
type sender struct {
	e    *env
	rank int
	o    opSpec
	nic  *nic
	next uint32
}

func (e *env) newSender(r int, o opSpec) *sender {
	return &sender{e: e, rank: r, o: o, nic: e.rankNIC(r), next: 1}
}

// frame builds DATA for v[first:first+len(split...)] with the given group
// sizes (several groups per frame are the sender's choice, 6), under the
// next Packet ID.
func (s *sender) frame(v []float32, first int, sizes []int, flags uint8) dataFrame {
	d := dataFrame{Class: classData, ID: s.o.ID, SrcEP: rankDataEP(s.rank), DstEP: swDataEP(s.rank), PacketID: s.next,
		First: uint32(first), Stream: uint16(s.rank + 1), Flags: flags}
	s.next++
	pos := first
	for _, n := range sizes {
		d.Groups = append(d.Groups, fp32Group(v[pos:pos+n]))
		pos += n
	}
	if uint32(pos) == s.o.VecLen {
		d.Flags |= dfLast
	}
	return d
}

func (s *sender) send(t *testing.T, d dataFrame) []byte {
	t.Helper()
	b := d.encode()
	if err := s.nic.send(s.e.portMAC[s.rank], b); err != nil {
		t.Fatalf("rank %d send packet %d [%d,+%d) (%d bytes): %v", s.rank, d.PacketID, d.First, len(b), len(b), err)
	}
	return b
}

// isProgressFor matches PROGRESS to rank r for its DATA stream of op id.
func (e *env) isProgressFor(id ident, r int) func(rxFrame) bool {
	m := e.rankNIC(r).mac
	return func(f rxFrame) bool {
		p := f.Payload
		return f.Eth.Dst == m && len(p) >= 2+progressHdr && p[1] == classProgress && getIdent(p[2:]) == id &&
			be.Uint16(p[2+22:]) == uint16(r+1) && p[2+39]&pfResult == 0
	}
}

// checkProgress decodes a PROGRESS sw1 sent to rank r for its DATA and
// checks the fields section 7 fixes for it.
func (e *env) checkProgress(t *testing.T, f rxFrame, o opSpec, r int) progress {
	t.Helper()
	p, err := decodeProgress(f.Payload, 1500, o.VecLen)
	if err != nil {
		t.Errorf("rank %d: PROGRESS fails the receiver rules: %v", r, err)
		return p
	}
	if f.Eth.Src != e.portMAC[r] {
		t.Errorf("rank %d: PROGRESS from %s, want sw1's port MAC %s", r, f.Eth.Src, e.portMAC[r])
	}
	if p.SrcEP != swDataEP(r) || p.DstEP != rankDataEP(r) {
		t.Errorf("rank %d: PROGRESS endpoints %#x->%#x, want %#x->%#x (7: the binding mirrored)", r, p.SrcEP, p.DstEP, swDataEP(r), rankDataEP(r))
	}
	if (p.Flags&pfComplete != 0) != (p.Committed == o.VecLen) && p.Status != psFailed {
		t.Errorf("rank %d: PROGRESS flags %#x with committed %d of %d (7: COMPLETE exactly when Committed == Vector Length)", r, p.Flags, p.Committed, o.VecLen)
	}
	if p.IntervalCredits > o.WI || p.ByteCredits > o.WB {
		t.Errorf("rank %d: PROGRESS credits %d intervals / %d bytes exceed the window %d / %d", r, p.IntervalCredits, p.ByteCredits, o.WI, o.WB)
	}
	return p
}

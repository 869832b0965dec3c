// A fake PRISM node for AM tests: an in-process responder that decodes
// CONTROL, keeps per-operation state like a switch would (STAGED, ACTIVE,
// COMPLETE, ...), answers duplicates with the recorded ACK, and can be told
// to refuse, to lose frames or to go silent.

package am

import (
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prismd/prismd/control"
	"github.com/prismd/prismd/parser"
)

// hub connects the AM's Conn and the fake nodes by destination MAC.
type hub struct {
	mu    sync.Mutex
	ports map[string]*pipeConn // by MAC string
	rng   *rand.Rand
	loss  float64 // probability of dropping a frame
	dup   float64 // probability of delivering a frame twice
}

func newHub(seed int64) *hub {
	return &hub{ports: map[string]*pipeConn{}, rng: rand.New(rand.NewSource(seed))}
}

type pipeConn struct {
	h      *hub
	mac    net.HardwareAddr
	in     chan []byte
	closed chan struct{}
	once   sync.Once
	// refuse makes WriteFrame fail with refuseErr, as a host's socket
	// with a full queue does: that many times, or for ever if negative.
	refuse    atomic.Int32
	refuseErr error
	// parked models PacketConn: while it is set and no Expect is pending,
	// frames to this conn are lost, as PacketConn then has no receive
	// socket (it keeps one 20 ms longer; this model is stricter). An AM
	// that listened too late or stopped too early loses its replies and
	// its tests fail.
	parked    bool
	expecting atomic.Int32
	expects   atomic.Int64 // Expect calls, for tests
}

// Expect implements Expecter.
func (p *pipeConn) Expect() (func(), error) {
	p.expecting.Add(1)
	p.expects.Add(1)
	var once sync.Once
	return func() { once.Do(func() { p.expecting.Add(-1) }) }, nil
}

func (h *hub) attach(mac net.HardwareAddr) *pipeConn {
	p := &pipeConn{h: h, mac: mac, in: make(chan []byte, 1024), closed: make(chan struct{})}
	h.mu.Lock()
	h.ports[mac.String()] = p
	h.mu.Unlock()
	return p
}

func (p *pipeConn) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-p.in:
		return copy(b, f), nil
	case <-p.closed:
		return 0, net.ErrClosed
	}
}

func (p *pipeConn) WriteFrame(b []byte) error {
	if n := p.refuse.Load(); n < 0 || n > 0 && p.refuse.CompareAndSwap(n, n-1) {
		return p.refuseErr
	}
	h := p.h
	h.mu.Lock()
	dst := h.ports[net.HardwareAddr(b[0:6]).String()]
	copies := 1
	if h.rng.Float64() < h.loss {
		copies = 0
	} else if h.rng.Float64() < h.dup {
		copies = 2
	}
	h.mu.Unlock()
	if dst != nil && dst.parked && dst.expecting.Load() == 0 {
		copies = 0
	}
	for i := 0; dst != nil && i < copies; i++ {
		select {
		case dst.in <- append([]byte(nil), b...):
		default:
		}
	}
	return nil
}

func (p *pipeConn) MAC() net.HardwareAddr { return p.mac }
func (p *pipeConn) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

// fakeNode is one switch's control plane.
type fakeNode struct {
	t    *testing.T
	name string
	conn *pipeConn

	mu       sync.Mutex
	records  []capRecord
	pageSize int // records per CAPS page
	refuse   map[parser.Command]parser.Status
	silent   map[parser.Command]bool // never answer these
	final    parser.OpState          // state COMPLETE answers with once ACTIVE
	missing  uint16                  // MissStream reported while not COMPLETE
	missFrom uint32
	cause    parser.FailCause // Failure Cause reported while FAILED
	ctx      map[OpIdentity]*fakeCtx
	acks     map[uint32][]byte // Transaction ID -> recorded request and answer
	reqs     map[uint32][]byte
	log      []parser.Command // commands applied (not duplicates)
	conflict int
	// staleUpTo: STAGE of a generation <= this answers STALE_GENERATION
	// (the node remembers a newer one from another AM).
	staleUpTo uint32
	// keepOld: ABORT of a newer generation leaves the installed older one
	// (a node that breaks section 5's rule).
	keepOld bool
	// maxCtx > 0: STAGE with that many contexts installed (not RELEASED
	// or ABORTED) answers NO_RESOURCES.
	maxCtx int
	// progressing: every COMPLETE on an ACTIVE context reports one more
	// completed element.
	progressing bool
	completed   uint32
	// frames and txns count every request frame received (retransmissions
	// and ignored ones included) and the distinct Transaction IDs, by
	// command: the oracle of the AM's CONTROL metrics.
	frames map[parser.Command]int
	txns   map[parser.Command]map[uint32]bool
}

type fakeCtx struct {
	state    parser.OpState
	rec      contextRecord
	bindings []binding
}

// fullCaps is the real node's capability table (package control), so the
// AM is tested against exactly what a prismd node advertises.
func fullCaps() []capRecord {
	var rs []capRecord
	for _, r := range control.Records(control.Limits{}) {
		rs = append(rs, capRecord{Input: r.InputFormat, Acc: r.AccPolicy, Partial: r.PartialPolicy, Output: r.OutputFormat,
			MinKW: r.MinKulischWidth, MaxKW: r.MaxKulischWidth, MaxVector: r.MaxVectorLen, MaxTerms: r.MaxTerms,
			MaxMTU: r.MaxMTU, MaxBindings: r.MaxBindings, MaxIntervals: r.MaxWindowIntervals, MaxReplay: r.MaxReplayDepth,
			MaxWinBytes: r.MaxWindowBytes, MaxWinElem: r.MaxWindowElements})
	}
	return rs
}

func newFakeNode(t *testing.T, h *hub, name string, mac net.HardwareAddr) *fakeNode {
	n := &fakeNode{t: t, name: name, conn: h.attach(mac), records: fullCaps(), pageSize: 7,
		refuse: map[parser.Command]parser.Status{}, silent: map[parser.Command]bool{}, final: parser.StateComplete,
		missing: parser.NoDetail, ctx: map[OpIdentity]*fakeCtx{}, acks: map[uint32][]byte{}, reqs: map[uint32][]byte{},
		frames: map[parser.Command]int{}, txns: map[parser.Command]map[uint32]bool{}}
	go n.loop()
	t.Cleanup(func() { n.conn.Close() })
	return n
}

func (n *fakeNode) loop() {
	buf := make([]byte, 65536)
	for {
		k, err := n.conn.ReadFrame(buf)
		if err != nil {
			return
		}
		frame := append([]byte(nil), buf[:k]...)
		f, err := decodeControl(frame)
		if err != nil {
			continue
		}
		n.mu.Lock()
		n.frames[f.Cmd]++
		if n.txns[f.Cmd] == nil {
			n.txns[f.Cmd] = map[uint32]bool{}
		}
		n.txns[f.Cmd][f.Txn] = true
		if n.silent[f.Cmd] {
			n.mu.Unlock()
			continue
		}
		if prev, ok := n.reqs[f.Txn]; ok {
			if string(prev) != string(frame[parser.HdrOff:]) {
				n.conflict++
				n.mu.Unlock()
				n.reply(f, parser.CmdAck, parser.StatusConflict, encodeAck(ackBody{Acked: f.Cmd, Detail: parser.NoDetail, MissStream: parser.NoDetail}), 0, 1)
				continue
			}
			ans := n.acks[f.Txn]
			n.mu.Unlock()
			_ = n.conn.WriteFrame(ans)
			continue
		}
		n.mu.Unlock()
		n.handle(f, frame)
	}
}

func (n *fakeNode) reply(req ctlFrame, cmd parser.Command, st parser.Status, body []byte, idx, cnt uint8) []byte {
	h := req.ctlHeader
	h.Cmd, h.Status, h.FragIdx, h.FragCnt = cmd, st, idx, cnt
	h.SrcEP, h.DstEP = req.DstEP, req.SrcEP
	fr, err := encodeControl(req.Src, n.conn.mac, h, body)
	if err != nil {
		n.t.Errorf("fake node %s: %v", n.name, err)
		return nil
	}
	_ = n.conn.WriteFrame(fr)
	return fr
}

func (n *fakeNode) handle(f ctlFrame, raw []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	record := func(fr []byte) {
		n.reqs[f.Txn] = append([]byte(nil), raw[parser.HdrOff:]...)
		n.acks[f.Txn] = fr
	}
	if f.Cmd == parser.CmdCapsQuery {
		page := int(f.Body[0])
		pages := (len(n.records) + n.pageSize - 1) / n.pageSize
		if pages == 0 {
			pages = 1
		}
		lo, hi := page*n.pageSize, min((page+1)*n.pageSize, len(n.records))
		p := capsPage{PortCount: 8, MaxMTU: 9000, MaxOps: 64}
		if lo < hi {
			p.Records = n.records[lo:hi]
		}
		record(n.reply(f, parser.CmdCapsResponse, parser.StatusOK, encodeCaps(p), uint8(page), uint8(pages)))
		return
	}
	c := n.ctx[f.Op]
	ack := ackBody{Acked: f.Cmd, Detail: parser.NoDetail, MissStream: parser.NoDetail}
	st := parser.StatusOK
	if s, ok := n.refuse[f.Cmd]; ok {
		st = s
	} else {
		n.log = append(n.log, f.Cmd)
		switch f.Cmd {
		case parser.CmdStage:
			if f.Op.OpGen <= n.staleUpTo {
				st = parser.StatusStaleGeneration
				break
			}
			rec, bs, err := decodeStage(f.Body)
			if err != nil {
				st = parser.StatusInvalid
				break
			}
			if c != nil {
				st = parser.StatusBadState
				break
			}
			if o := n.otherGen(f.Op); o != nil {
				// One generation of an Operation ID is installed at a
				// time (docs/protocol.md section 5).
				st, ack.State = parser.StatusBadState, o.state
				break
			}
			if n.maxCtx > 0 && n.installed() >= n.maxCtx {
				st = parser.StatusNoResources
				break
			}
			c = &fakeCtx{state: parser.StateStaged, rec: rec, bindings: bs}
			n.ctx[f.Op] = c
		case parser.CmdCommit:
			if c == nil || c.state != parser.StateStaged {
				st = parser.StatusBadState
				break
			}
			c.state = parser.StateActive
		case parser.CmdComplete:
			if c == nil {
				st = parser.StatusBadState
				break
			}
			if c.state == parser.StateActive {
				c.state = n.final
			}
			if c.state != parser.StateComplete {
				ack.MissStream, ack.MissingFrom = n.missing, n.missFrom
			}
			if c.state == parser.StateFailed {
				ack.FailCause = n.cause
			}
			if n.progressing {
				n.completed++
				ack.Completed = n.completed
			}
		case parser.CmdRelease:
			if c == nil || c.state != parser.StateComplete {
				st = parser.StatusBadState
				break
			}
			c.state = parser.StateReleased
		case parser.CmdAbort:
			if o := n.otherGen(f.Op); o != nil && c == nil && !n.keepOld {
				// ABORT of a newer generation frees the installed one.
				o.state = parser.StateAborted
			}
			if c == nil {
				st = parser.StatusBadState
				break
			}
			c.state = parser.StateAborted
		}
	}
	if c != nil {
		ack.State = c.state
	}
	record(n.reply(f, parser.CmdAck, st, encodeAck(ack), 0, 1))
}

// installed counts the contexts not RELEASED or ABORTED. Called with
// n.mu held.
func (n *fakeNode) installed() int {
	k := 0
	for _, c := range n.ctx {
		if c.state != parser.StateReleased && c.state != parser.StateAborted {
			k++
		}
	}
	return k
}

// otherGen returns the installed context (not RELEASED or ABORTED) of
// another generation of op's Operation ID, or nil. Called with n.mu held.
func (n *fakeNode) otherGen(op OpIdentity) *fakeCtx {
	for id, c := range n.ctx {
		if id != op && id.Job == op.Job && id.Group == op.Group && id.OpID == op.OpID &&
			c.state != parser.StateReleased && c.state != parser.StateAborted {
			return c
		}
	}
	return nil
}

func (n *fakeNode) opState(op OpIdentity) parser.OpState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.ctx[op]; c != nil {
		return c.state
	}
	return parser.StateNone
}

func (n *fakeNode) staged(op OpIdentity) *fakeCtx {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ctx[op]
}

func (n *fakeNode) count(cmd parser.Command) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, c := range n.log {
		if c == cmd {
			k++
		}
	}
	return k
}

// This file owns the host's socket for bitmap jobs: one Port per interface,
// the receive loop that hands frames to the operation they belong to, the
// per-stream Packet IDs, the building and checking of DATA/RESULT frames
// with the endpoint-set extension (docs/protocol.md sections 6 and 8), and
// the per-job authentication tags of keyed jobs (8.6): signed when a frame
// is built, verified when one arrives, before it reaches any operation.

package bitmap

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prismd/prismd/bitmapfwd"
	"github.com/prismd/prismd/control/am"
	"github.com/prismd/prismd/control/bitmapam"
	"github.com/prismd/prismd/internal/authkey"
	"github.com/prismd/prismd/parser"
)

// Conn moves whole Ethernet frames: am.PacketConn (AF_PACKET, EtherType
// 0x88B5 only) on a real interface, an in-memory fabric in tests.
type Conn = am.Conn

// Port is one host interface shared by every bitmap operation on it. Safe for
// concurrent use.
type Port struct {
	conn Conn
	mac  [6]byte

	mu     sync.Mutex
	subs   map[uint64][]*sub // by Job ID
	pids   map[pidKey]uint32
	closed bool
	done   chan struct{}

	txDrops atomic.Uint64

	// keys: the jobs with an authentication key, copy-on-write so that
	// every frame looks its job up with one atomic load (SetKey).
	keyMu     sync.Mutex
	keys      atomic.Pointer[map[uint64]*jobKey]
	authDrops atomic.Uint64
}

// jobKey is one job's key as the Port uses it. An Authenticator is one HMAC
// state, made once (hmac.New) and reset per frame, so signing and verifying
// allocate nothing; it is not safe for concurrent use: rx belongs to the
// read loop, and the operations' goroutines take signers from tx, a pool
// (one per P in steady state), so signing neither locks nor serializes.
type jobKey struct {
	tx sync.Pool // of *parser.Authenticator
	rx *parser.Authenticator
}

type pidKey struct {
	op     parser.OpKey
	stream uint16
	class  parser.Class
}

// sub receives the frames of one job (any operation of it; MoE and reliable
// multicast receivers learn operation identities from frames).
type sub struct {
	job uint64
	ch  chan []byte
}

// Open opens the AF_PACKET socket on iface (needs CAP_NET_RAW) with
// SocketBuffer-sized buffers (conn.go).
func Open(iface string) (*Port, error) {
	c, err := openConn(iface)
	if err != nil {
		return nil, fmt.Errorf("bitmap: %w", err)
	}
	return NewPort(c), nil
}

// KernelDrops is how many frames the kernel dropped on this Port's socket
// because its receive buffer was full, since the last call (0 for a Conn
// that cannot tell). Every such drop is a loss the protocols repair by
// timeout; a nonzero value means the host cannot keep up.
func (p *Port) KernelDrops() uint64 {
	if d, ok := p.conn.(interface{ drops() (uint64, error) }); ok {
		n, _ := d.drops()
		return n
	}
	return 0
}

// SetKey installs the authentication key of job on this Port (protocol
// 8.6), or removes it (nil key). With a key, every DATA and RESULT frame of
// the job this Port sends carries the AUTH tag, and every DATA and RESULT
// frame of the job it receives must carry a valid one: others are dropped
// before any operation sees them, and counted (AuthDrops). Every switch of
// the job and every other host must hold the same key (prismctl keys set
// installs it in a prismd).
//
// Set the key before starting the job's operations on this Port: an
// operation decides when it starts whether its frames carry a tag (and
// leaves room for it in every frame). The key is copied; it must be
// authkey.MinLen to authkey.MaxLen bytes.
func (p *Port) SetKey(job uint64, key []byte) error {
	var jk *jobKey
	if len(key) > 0 {
		if err := authkey.Check(key); err != nil {
			return fmt.Errorf("bitmap: job %d: %w", job, err)
		}
		k := append([]byte(nil), key...)
		jk = &jobKey{rx: parser.NewAuthenticator(k)}
		jk.tx.New = func() any { return parser.NewAuthenticator(k) }
	}
	p.keyMu.Lock()
	defer p.keyMu.Unlock()
	n := map[uint64]*jobKey{}
	if old := p.keys.Load(); old != nil {
		for j, k := range *old {
			n[j] = k
		}
	}
	if jk == nil {
		delete(n, job)
	} else {
		n[job] = jk
	}
	p.keys.Store(&n)
	return nil
}

// key returns job's key, or nil when the job is not keyed on this Port.
func (p *Port) key(job uint64) *jobKey {
	m := p.keys.Load()
	if m == nil {
		return nil
	}
	return (*m)[job]
}

// AuthDrops is how many DATA/RESULT frames of keyed jobs this Port dropped
// since it opened because their AUTH tag was missing or wrong: forgeries,
// or a peer (switch or host) holding another key, or none.
func (p *Port) AuthDrops() uint64 { return p.authDrops.Load() }

// sign writes the tag of a built DATA/RESULT frame of a keyed job (one whose
// extension has XFlagAuth and a zeroed tag); frames of other jobs are left
// alone. Signed frames are never modified afterwards except through sign
// again, so frames kept for retransmission can be sent from any goroutine.
func (p *Port) sign(f []byte) error {
	op, ok := parser.PeekOpKey(f[parser.EthLen:])
	if !ok {
		return nil
	}
	jk := p.key(op.Job)
	if jk == nil {
		return nil
	}
	a := jk.tx.Get().(*parser.Authenticator)
	err := a.Sign(f)
	jk.tx.Put(a)
	if err != nil {
		return fmt.Errorf("bitmap: job %d has a key but a frame was built without room for its AUTH tag", op.Job)
	}
	return nil
}

// admit is the read loop's check of a frame of job: false (counted) for a
// DATA or RESULT frame of a keyed job without a valid tag. CONTROL and
// PROGRESS carry no tag (8.6) and pass; hosts ignore them for bitmap jobs.
// Only the read loop calls it (jobKey.rx).
func (p *Port) admit(job uint64, f []byte) bool {
	jk := p.key(job)
	if jk == nil {
		return true
	}
	if c := parser.ControlWord(f[parser.CWOff:]).Class(); c != parser.ClassData && c != parser.ClassResult {
		return true
	}
	if jk.rx.Verify(f) != nil {
		p.authDrops.Add(1)
		return false
	}
	return true
}

// NewPort starts a Port over conn; the Port owns conn.
func NewPort(conn Conn) *Port {
	p := &Port{conn: conn, subs: map[uint64][]*sub{}, pids: map[pidKey]uint32{}, done: make(chan struct{})}
	copy(p.mac[:], conn.MAC())
	go p.readLoop()
	return p
}

// MAC is the interface's address.
func (p *Port) MAC() net.HardwareAddr { return net.HardwareAddr(p.mac[:]) }

// Close closes the socket; operations waiting on frames fail with ErrClosed.
func (p *Port) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.conn.Close()
	<-p.done
	return err
}

// subBuffer is how many frames one job may have queued before the reader
// drops (a drop is a loss, recovered like any other by the protocols).
const subBuffer = 8192

func (p *Port) subscribe(job uint64) *sub {
	s := &sub{job: job, ch: make(chan []byte, subBuffer)}
	p.mu.Lock()
	p.subs[job] = append(p.subs[job], s)
	p.mu.Unlock()
	return s
}

func (p *Port) unsubscribe(s *sub) {
	p.mu.Lock()
	l := p.subs[s.job]
	for i, x := range l {
		if x == s {
			p.subs[s.job] = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(p.subs[s.job]) == 0 {
		delete(p.subs, s.job)
	}
	p.mu.Unlock()
}

func (p *Port) readLoop() {
	defer close(p.done)
	defer func() {
		p.mu.Lock()
		for _, l := range p.subs {
			for _, s := range l {
				close(s.ch)
			}
		}
		p.subs = map[uint64][]*sub{}
		p.mu.Unlock()
	}()
	// 64 KiB: real frames stop at the jumbo MTU, but a test fabric may
	// deliver larger ones and a truncated frame would be a silent loss.
	buf := make([]byte, 1<<16)
	for {
		n, err := p.conn.ReadFrame(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if n < parser.HdrOff+parser.OpIDLen || string(buf[0:6]) != string(p.mac[:]) {
			continue
		}
		key, ok := parser.PeekOpKey(buf[parser.EthLen:n])
		if !ok || !p.admit(key.Job, buf[:n]) {
			continue
		}
		p.mu.Lock()
		for _, s := range p.subs[key.Job] {
			f := append([]byte(nil), buf[:n]...)
			select {
			case s.ch <- f:
			default:
			}
		}
		p.mu.Unlock()
	}
}

// nextPID numbers the packets of one stream 1, 2, 3, ... (section 6).
func (p *Port) nextPID(op parser.OpKey, stream uint16, c parser.Class) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := pidKey{op, stream, c}
	p.pids[k]++
	if p.pids[k] == 0 {
		p.pids[k] = 1
	}
	return p.pids[k]
}

func (p *Port) write(f []byte) error {
	if err := p.conn.WriteFrame(f); err != nil {
		if errors.Is(err, syscall.ENOBUFS) {
			// The device queue was full (a veth whose peer's backlog
			// overflowed answers so): the frame is lost like one dropped
			// on the wire, and every protocol here repairs that by timeout.
			p.txDrops.Add(1)
			return nil
		}
		return fmt.Errorf("bitmap: send: %w", err)
	}
	return nil
}

// TxDrops is how many frames the interface refused for a full device queue
// (ENOBUFS) since the Port opened: sent nowhere, repaired like losses.
func (p *Port) TxDrops() uint64 { return p.txDrops.Load() }

// wire is one operation's framing context on this host.
type wire struct {
	port   *Port
	plan   *bitmapam.Plan
	op     parser.OpKey
	tenant uint32
	lim    parser.Limits
	bits   int
	// auth: the job is keyed on this Port (SetKey), so every frame carries
	// the AUTH tag and is signed when built.
	auth bool
}

func newWire(port *Port, plan *bitmapam.Plan, op parser.OpKey) *wire {
	c := plan.Spec
	w := &wire{port: port, plan: plan, op: op, tenant: c.Tenant, bits: plan.Bits, auth: port.key(op.Job) != nil}
	// Kulisch groups arriving at a root carry the context's W/8 bytes.
	ctx := contextOf(plan)
	w.lim = parser.Limits{VectorLen: c.VectorLen, KulischBytes: int(ctx.KulischWidth) / 8, ListCap: int(ctx.MaxTerms)}
	return w
}

func contextOf(plan *bitmapam.Plan) parser.ContextRecord {
	for _, o := range plan.Ops {
		for _, s := range o.Switches {
			return s.Context
		}
	}
	// No switch (every endpoint on the root host): a context as the
	// planner would write it.
	mt := plan.Spec.MaxTerms
	if mt == 0 {
		mt = uint32(max(1, len(plan.Spec.Endpoints)))
	}
	return parser.ContextRecord{KulischWidth: uint16(am.KulischWidthFor(int(mt))), MaxTerms: mt}
}

// setBodies encodes s with the job's encoding: one body, or one per FLAT
// Set ID when the job's bit space spans several (BIER: one copy per set).
func (w *wire) setBodies(s *bitmapfwd.Set) ([][]byte, bitmapfwd.Encoding, error) {
	p := w.plan.Choice.Params
	if p.Encoding == bitmapfwd.Flat && w.plan.Choice.SetCount > 1 {
		b, err := bitmapam.FlatBodies(s, p.WordCount)
		return b, bitmapfwd.Flat, err
	}
	enc, b, err := bitmapam.EncodeSet(s, p, int(w.lim.ListCap))
	if err != nil {
		return nil, 0, err
	}
	return [][]byte{b}, enc, nil
}

// maxSetBody is the largest set body this job's frames carry for sets of
// up to k members, for packetisation.
func (w *wire) maxSetBody(k int) int {
	p := w.plan.Choice.Params
	switch p.Encoding {
	case bitmapfwd.Flat:
		return bitmapfwd.FlatLen(max(p.WordCount, 1))
	case bitmapfwd.List:
		return 4 + 4*k
	}
	// HIER: the upper bitmap plus one block per member, at most.
	bb := max(p.BlockBits, 64)
	blocks := (w.bits + bb - 1) / bb
	return 4 + (blocks+63)/64*8 + min(k, blocks)*bb/8
}

// frameBudget is how many value bytes (descriptors included) one frame with
// a set of up to k members can carry.
func (w *wire) frameBudget(k int) int {
	mtu := w.plan.Spec.MTU
	if mtu == 0 {
		mtu = parser.MTUDefault
	}
	n := mtu - parser.CWLen - parser.DataHdrLen - parser.ExtHdrLen - w.maxSetBody(k)
	if w.auth {
		n -= parser.TagLen
	}
	return n
}

// values is one NumberGroup to send.
type values struct {
	f     parser.Format
	count int
	b     []byte
}

// send builds and sends DATA or RESULT frames on link (one per set body).
func (w *wire) send(c parser.Class, l *bitmapam.Link, set *bitmapfwd.Set, xflags uint8, token uint64, first uint32, flags uint8, groups ...values) error {
	bodies, enc, err := w.setBodies(set)
	if err != nil {
		return err
	}
	for _, body := range bodies {
		f, err := w.frame(c, l, enc, body, xflags, token, first, flags, 0, groups...)
		if err != nil {
			return err
		}
		if err := w.port.write(f); err != nil {
			return err
		}
	}
	return nil
}

// frame builds one frame; pid 0 takes the stream's next Packet ID.
func (w *wire) frame(c parser.Class, l *bitmapam.Link, enc bitmapfwd.Encoding, body []byte, xflags uint8, token uint64, first uint32, flags uint8, pid uint32, groups ...values) ([]byte, error) {
	if pid == 0 {
		pid = w.port.nextPID(w.op, l.Stream, c)
	}
	h := parser.DataFields{Class: c, Op: w.op, SrcEP: l.SrcEP, DstEP: l.DstEP, PacketID: pid, First: first, Flags: flags, Stream: l.Stream}
	copy(h.Eth.Dst[:], l.Peer)
	h.Eth.Src = w.port.mac
	n := 0
	gs := make([]parser.Group, 0, len(groups))
	for _, g := range groups {
		gs = append(gs, parser.Group{Format: g.f, Count: uint16(g.count), First: first + uint32(n), Values: g.b})
		n += g.count
	}
	if n > 0 && uint64(first)+uint64(n) == uint64(w.plan.Spec.VectorLen) {
		h.Flags |= parser.FlagLast
	}
	if w.auth {
		xflags |= parser.XFlagAuth
	}
	ext := &parser.Ext{Encoding: uint8(enc), XFlags: xflags, Tenant: w.tenant, Token: token, Set: body}
	f, err := parser.AppendData(nil, &h, ext, gs...)
	if err != nil || !w.auth {
		return f, err
	}
	return f, w.port.sign(f)
}

// rx is a received, validated DATA or RESULT frame of this job.
type rx struct {
	d   parser.Data
	set *bitmapfwd.Set
	raw []byte
}

// accept decodes f and checks it arrived on link l (class c): operation,
// endpoints, stream, source MAC and tenant, as a switch checks its
// bindings. It returns false for frames that are not for l.
func (w *wire) accept(f []byte, c parser.Class, l *bitmapam.Link) (*rx, bool) {
	if l == nil {
		return nil, false
	}
	r := &rx{raw: f}
	if err := r.d.Decode(f, w.lim); err != nil {
		return nil, false
	}
	d := &r.d
	if d.Class != c || d.Op != w.op || d.Flags&parser.FlagExt == 0 || d.Stream != l.Stream || d.SrcEP != l.SrcEP ||
		d.DstEP != l.DstEP || string(f[6:12]) != string(l.Peer) || d.Ext.Tenant != w.tenant {
		return nil, false
	}
	r.set = bitmapfwd.NewSet(w.bits)
	if err := bitmapfwd.Decode(d.Ext.Set, r.set, bitmapfwd.Params{Encoding: bitmapfwd.Encoding(d.Ext.Encoding), ListCap: int(w.lim.ListCap)}); err != nil {
		return nil, false
	}
	return r, true
}

// fp32Bytes packs float32 values little-endian (the wire order).
func fp32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		putF32(b[4*i:], x)
	}
	return b
}

// This file owns CONTROL reliability on the AM side: one transaction is one
// request frame retransmitted with the same Transaction ID and identical
// bytes until its ACK (or CAPS_RESPONSE) arrives or a bounded time passes.

package am

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netns"
	"golang.org/x/net/bpf"

	"github.com/prismd/prismd/internal/netif"
	"github.com/prismd/prismd/parser"
)

// Conn moves whole Ethernet frames for the AM. ReadFrame blocks; after
// Close it returns net.ErrClosed.
type Conn interface {
	ReadFrame(b []byte) (int, error)
	WriteFrame(b []byte) error
	MAC() net.HardwareAddr
	Close() error
}

// ErrNoAck is wrapped when a node never answered a CONTROL request.
var ErrNoAck = errors.New("no acknowledgement")

// NodeError is a CONTROL exchange that failed at one node: it never
// answered, or it answered with a non-OK status.
type NodeError struct {
	Node   string
	Cmd    parser.Command
	Status parser.Status // meaningful when Err is nil
	Detail uint16
	State  parser.OpState
	Err    error // ErrNoAck, or a transport error
}

func (e *NodeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("node %s: %v: %v", e.Node, e.Cmd, e.Err)
	}
	if e.Status == parser.StatusNoResources && e.State == parser.StateNone {
		// "refused STAGE: NO_RESOURCES (state NONE)" left the user to
		// guess which resource and whether to retry.
		return fmt.Sprintf("node %s has no room for another operation (%v refused NO_RESOURCES): its operation contexts "+
			"(the MaxOps its capabilities advertise) or its accumulator memory are taken by other operations; "+
			"'prismctl show ops' on it lists them, and a call may fit once some end", e.Node, e.Cmd)
	}
	s := fmt.Sprintf("node %s refused %v: %v (state %v", e.Node, e.Cmd, e.Status, e.State)
	if e.Detail != parser.NoDetail {
		s += fmt.Sprintf(", offending body offset %d", e.Detail)
	}
	return s + ")"
}

func (e *NodeError) Unwrap() error { return e.Err }

// noAckError is a transaction that no answer ended (it wraps ErrNoAck).
// Its text carries the hints for a node never reached (node_mac,
// am_sources); short leaves them out, for a node that did answer earlier
// and so was reached as configured.
type noAckError struct {
	attempts int
	timeout  time.Duration
	txn      uint32
	dst, src net.HardwareAddr
	// localFails of the attempts never left this host (localErr, the
	// last: its socket refused them).
	localFails int
	localErr   error
}

func (e *noAckError) Error() string {
	return e.short() + ": is prismd running there with that node_mac, " +
		fmt.Sprintf("and this AM's %s among its am_sources? (a lab's MACs follow its name: give the AM the topology file 'prismctl lab up' wrote)", e.src)
}

func (e *noAckError) short() string {
	s := fmt.Sprintf("%v after %d transmissions in %v (Transaction ID %#x) to %s", ErrNoAck, e.attempts, e.timeout, e.txn, e.dst)
	if e.localFails > 0 {
		s += fmt.Sprintf(" (%d of them refused by this AM's own socket: %v)", e.localFails, e.localErr)
	}
	return s
}

// localSendError is a CONTROL request this AM's host could not send: the
// fault is on the AM's side (its interface %s, its queue), not the node's.
type localSendError struct {
	err   error
	src   net.HardwareAddr
	tries int // transmissions refused, all of them (0: a permanent error, at once)
}

func (e *localSendError) Error() string {
	n := ""
	if e.tries > 0 {
		n = fmt.Sprintf(" (all %d transmissions refused)", e.tries)
	}
	return fmt.Sprintf("this AM could not send on its own interface (%s)%s: %v: check that host's link and its transmit queue (ip -s link)", e.src, n, e.err)
}

func (e *localSendError) Unwrap() error { return e.err }

// transientSend reports whether a send error is a full queue or buffer
// (the frame is as good as lost and the timer resends it) rather than an
// interface that cannot send at all.
func transientSend(err error) bool {
	return errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENETDOWN)
}

func (e *noAckError) Unwrap() error { return ErrNoAck }

// ctlClient sends CONTROL transactions over a Conn and matches answers by
// Transaction ID.
type ctlClient struct {
	conn    Conn
	rto     time.Duration // first retransmission timeout; doubles up to 8x
	timeout time.Duration // bound on one transaction

	mu      sync.Mutex
	nextTxn uint32
	pending map[uint32]chan ctlFrame

	sent, retrans, received uint64 // guarded by mu

	metrics *amMetrics
}

func newCtlClient(conn Conn, rto, timeout time.Duration, met *amMetrics) *ctlClient {
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	c := &ctlClient{conn: conn, rto: rto, timeout: timeout, pending: map[uint32]chan ctlFrame{}, metrics: met,
		// A random start keeps a restarted AM from reusing Transaction IDs a
		// node still remembers (it would answer with the recorded ACK).
		nextTxn: binary.BigEndian.Uint32(seed[:]) | 1}
	go c.readLoop()
	return c
}

func (c *ctlClient) readLoop() {
	buf := make([]byte, 65536)
	for {
		n, err := c.conn.ReadFrame(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f, err := decodeControl(buf[:n])
		if err != nil || (f.Cmd != parser.CmdAck && f.Cmd != parser.CmdCapsResponse) {
			continue
		}
		if !macEq(f.Dst, c.conn.MAC()) {
			continue
		}
		// Copy: buf is reused.
		f.Body = append([]byte(nil), f.Body...)
		f.Src = append(net.HardwareAddr(nil), f.Src...)
		c.mu.Lock()
		ch := c.pending[f.Txn]
		c.received++
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- f:
			default:
			}
		}
	}
}

func macEq(a, b net.HardwareAddr) bool {
	return len(a) == 6 && len(b) == 6 && string(a) == string(b)
}

// do runs one transaction with node (MAC dst) and returns the answer frame.
// It does not interpret the status.
func (c *ctlClient) do(ctx context.Context, node string, dst net.HardwareAddr, h ctlHeader, body []byte) (ctlFrame, error) {
	ch := make(chan ctlFrame, 4)
	c.mu.Lock()
	h.Txn = c.nextTxn
	c.nextTxn++
	if c.nextTxn == 0 {
		c.nextTxn = 1
	}
	c.pending[h.Txn] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, h.Txn)
		c.mu.Unlock()
	}()
	frame, err := encodeControl(dst, c.conn.MAC(), h, body)
	if err != nil {
		return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd, Err: err}
	}
	done, err := Expect(c.conn)
	if err != nil {
		return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd, Err: &localSendError{err: fmt.Errorf("listen for the reply: %w", err), src: c.conn.MAC()}}
	}
	defer done()
	start := time.Now()
	deadline := start.Add(c.timeout)
	rto := c.rto
	cmd := cmdLabel(h.Cmd)
	c.metrics.ctlTxns.WithLabelValues(cmd).Inc()
	var sendErr error // the last transmission this host's socket refused
	sendFails := 0
	for attempt := 0; ; attempt++ {
		if err := c.conn.WriteFrame(frame); err != nil {
			if !transientSend(err) {
				return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd, Err: &localSendError{err: err, src: c.conn.MAC()}}
			}
			// A full queue on the AM's own host (ENOBUFS, EAGAIN) is a
			// lost frame, retransmitted on the timer like one the wire
			// lost: taken as final, one refused send failed the whole
			// setup and blamed the node.
			sendErr, sendFails = err, sendFails+1
			c.metrics.ctlSendErrors.WithLabelValues(cmd).Inc()
		}
		c.mu.Lock()
		c.sent++
		if attempt > 0 {
			c.retrans++
		}
		c.mu.Unlock()
		if attempt > 0 {
			c.metrics.ctlRetrans.WithLabelValues(cmd).Inc()
		}
		wait := rto
		if rem := time.Until(deadline); rem < wait {
			wait = rem
		}
		t := time.NewTimer(wait)
	waitLoop:
		for {
			select {
			case f := <-ch:
				// Match by Transaction ID and operation only: a node answers
				// from the MAC of the port the request arrived on, which is
				// not its node MAC.
				if f.Op != h.Op {
					continue
				}
				if h.Cmd == parser.CmdCapsQuery && f.Cmd != parser.CmdCapsResponse && f.Cmd != parser.CmdAck {
					continue
				}
				t.Stop()
				return f, nil
			case <-ctx.Done():
				t.Stop()
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					// The caller's bound, not a cancel: no answer came in
					// it, said as the transaction's own timeout says it
					// ("context deadline exceeded" reached 'show am').
					c.metrics.ctlTimeouts.WithLabelValues(cmd).Inc()
					return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd,
						Err: &noAckError{attempts: attempt + 1, timeout: time.Since(start).Round(time.Millisecond), txn: h.Txn, dst: dst, src: c.conn.MAC(),
							localFails: sendFails, localErr: sendErr}}
				}
				return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd, Err: ctx.Err()}
			case <-t.C:
				break waitLoop
			}
		}
		if !time.Now().Before(deadline) {
			c.metrics.ctlTimeouts.WithLabelValues(cmd).Inc()
			if sendFails == attempt+1 {
				// Not one transmission left this host: the node was
				// never asked.
				return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd, Err: &localSendError{err: sendErr, src: c.conn.MAC(), tries: sendFails}}
			}
			return ctlFrame{}, &NodeError{Node: node, Cmd: h.Cmd,
				Err: &noAckError{attempts: attempt + 1, timeout: c.timeout, txn: h.Txn, dst: dst, src: c.conn.MAC(), localFails: sendFails, localErr: sendErr}}
		}
		if rto < 8*c.rto {
			rto *= 2
		}
	}
}

// command runs a command whose answer is an ACK and checks its status.
func (c *ctlClient) command(ctx context.Context, node string, dst net.HardwareAddr, op OpIdentity, cmd parser.Command, body []byte) (ackBody, error) {
	f, err := c.do(ctx, node, dst, ctlHeader{Op: op, Cmd: cmd}, body)
	if err != nil {
		return ackBody{}, err
	}
	if f.Cmd != parser.CmdAck {
		return ackBody{}, &NodeError{Node: node, Cmd: cmd, Err: fmt.Errorf("answered with %v instead of ACK", f.Cmd)}
	}
	a, err := decodeAck(f.Body)
	if err != nil {
		return ackBody{}, &NodeError{Node: node, Cmd: cmd, Err: err}
	}
	if f.Status != parser.StatusOK {
		return a, &NodeError{Node: node, Cmd: cmd, Status: f.Status, Detail: a.Detail, State: a.State}
	}
	return a, nil
}

// caps reads every CAPS_RESPONSE page of a node.
func (c *ctlClient) caps(ctx context.Context, node string, dst net.HardwareAddr) ([]capsPage, error) {
	var pages []capsPage
	for page := 0; ; page++ {
		f, err := c.do(ctx, node, dst, ctlHeader{Cmd: parser.CmdCapsQuery}, encodeCapsQuery(uint8(page)))
		if err != nil {
			return nil, err
		}
		if f.Cmd != parser.CmdCapsResponse || f.Status != parser.StatusOK {
			a, _ := decodeAck(f.Body)
			return nil, &NodeError{Node: node, Cmd: parser.CmdCapsQuery, Status: f.Status, Detail: a.Detail, State: a.State}
		}
		p, err := decodeCaps(f.Body)
		if err != nil {
			return nil, &NodeError{Node: node, Cmd: parser.CmdCapsQuery, Err: err}
		}
		pages = append(pages, p)
		if int(f.FragIdx)+1 >= int(f.FragCnt) || page >= 255 {
			return pages, nil
		}
	}
}

// An Expecter is a Conn that receives only while a reply is expected.
// The AM's transactions and the bitmap registrar's call Expect (through
// the package function) before their first transmission and done when they
// end.
type Expecter interface {
	// Expect makes the Conn receive until done is called. Calls nest: the
	// Conn receives while any is not done. done may be called more than
	// once; only the first call counts.
	Expect() (done func(), err error)
}

// Expect calls c.Expect if c is an Expecter; other Conns always receive,
// and done does nothing.
func Expect(c Conn) (done func(), err error) {
	if e, ok := c.(Expecter); ok {
		return e.Expect()
	}
	return func() {}, nil
}

// PacketConn is the production Conn: AF_PACKET sockets on one interface
// that send CONTROL frames and receive EtherType 0x88B5 CONTROL frames only,
// and only while a transaction waits for its reply (Expect).
//
// The AM usually shares its host and interface with a rank, and every frame
// of that rank's collectives (DATA, RESULT, PROGRESS) arrives on the same
// interface. A packet socket bound to the PRISM EtherType makes the kernel
// call its receive hook for each of them, run the filter and drop the frame:
// in a SINGLE lab with the AM on rank 0's host that was 4% of the switch's
// CPU during an ALLREDUCE (on a veth the hook runs in the context that
// transmits the RESULT frame, the switch's sendmmsg; on a NIC, the host's
// softirq). An AM is idle for the whole data phase of every operation.
//
// So PacketConn sends on a socket of protocol 0, which the kernel never
// hands a frame, and receives on a second socket that exists only while a
// reply is expected and for rxLinger after. Opening that socket is cheap
// (created with protocol 0, filtered, then bound: no hook until the bind);
// taking a hook away is not: rebinding or closing waits for an RCU grace
// period, 8 ms measured here. Rebinding one socket on every transaction
// made an ordinary 2-value collective 20 ms slower; closing a parked socket
// in the background costs no one a wait. None of this needs more than
// CAP_NET_RAW, as before.
type PacketConn struct {
	tx     *packet.Conn // protocol 0: sends only
	ifi    *net.Interface
	ns     netns.NsHandle // tx's network namespace: receive sockets open there
	closed atomic.Bool

	mu        sync.Mutex
	rx        *packet.Conn  // bound to the PRISM EtherType; nil while parked
	rxSet     chan struct{} // closed and replaced whenever rx changes, and at Close
	expecting int           // Expect calls not done
	linger    *time.Timer   // parks rx rxLinger after the last done
	parking   sync.WaitGroup
}

// rxLinger is how long the receive socket outlives the last transaction:
// a setup's transactions follow each other within round trips, so one
// socket serves them all, and the data phase after it runs without one.
const rxLinger = 20 * time.Millisecond

// OpenConn opens the AM's CONTROL sockets on interface name.
func OpenConn(name string) (*PacketConn, error) {
	// The ranks' check (netif.Ethernet): the names this namespace has when
	// the one given is not among them, and the loopback refused (CONTROL
	// sent there comes straight back to the AM).
	ifi, err := netif.Ethernet(name)
	if err != nil {
		return nil, err
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("am: interface %q is down; bring it up with 'ip link set %s up'", name, name)
	}
	// The namespace and the first socket are taken on one thread: the
	// caller's, if it is locked into a namespace (and then the socket is
	// there), or any of the process's otherwise (all of them are in its
	// namespace). SIOCGSKNS would ask the socket itself, but it needs
	// CAP_NET_ADMIN, and an AM needs no more than CAP_NET_RAW.
	runtime.LockOSThread()
	ns, err := netns.Get()
	var tx *packet.Conn
	if err == nil {
		if tx, err = packet.Listen(ifi, packet.Raw, 0, nil); err != nil {
			_ = ns.Close()
		}
	}
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("am: open AF_PACKET socket on %q (needs CAP_NET_RAW): %w", name, err)
	}
	p := &PacketConn{tx: tx, ifi: ifi, ns: ns, rxSet: make(chan struct{})}
	// Open the receive socket once now, so that a missing privilege or a
	// filter the kernel refuses shows here and not at the first setup.
	if p.rx, err = p.listen(); err != nil {
		_ = tx.Close()
		_ = p.ns.Close()
		return nil, fmt.Errorf("am: open AF_PACKET socket on %q (needs CAP_NET_RAW): %w", name, err)
	}
	p.linger = time.AfterFunc(rxLinger, p.park) // nothing is expected yet
	return p, nil
}

// listen opens a receive socket for CONTROL frames in p's namespace. The
// caller's thread may be elsewhere: a program that opened the conn on a
// thread locked into a namespace (as the tests do) uses it from any
// goroutine, and an AF_PACKET socket belongs to the namespace of the thread
// that creates it.
func (p *PacketConn) listen() (*packet.Conn, error) {
	type result struct {
		c   *packet.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		cur, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		same := cur.Equal(p.ns)
		_ = cur.Close()
		if !same {
			if err := netns.Set(p.ns); err != nil {
				ch <- result{err: fmt.Errorf("enter the namespace of interface %s: %w", p.ifi.Name, err)}
				return // the thread stays locked, and the runtime ends it
			}
		}
		c, err := packet.Listen(p.ifi, packet.Raw, parser.EtherType, &packet.Config{Filter: controlOnly})
		ch <- result{c, err}
		if same {
			runtime.UnlockOSThread()
		} // else: this thread is in p's namespace now; exiting locked ends it
	}()
	r := <-ch
	return r.c, r.err
}

// Expect implements Expecter: a receive socket exists from Expect until
// rxLinger after the last done.
func (p *PacketConn) Expect() (done func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return func() {}, net.ErrClosed
	}
	if p.rx == nil {
		rx, err := p.listen()
		if err != nil {
			return func() {}, err
		}
		p.setRx(rx)
	}
	p.linger.Stop()
	p.expecting++
	var once sync.Once
	return func() { once.Do(p.unexpect) }, nil
}

func (p *PacketConn) unexpect() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.expecting--; p.expecting == 0 && p.rx != nil && !p.closed.Load() {
		p.linger.Reset(rxLinger)
	}
}

// park closes the receive socket if nothing is expected (the linger
// timer's function).
func (p *PacketConn) park() {
	p.mu.Lock()
	rx := p.rx
	if p.expecting > 0 || rx == nil || p.closed.Load() {
		p.mu.Unlock()
		return
	}
	p.setRx(nil)
	p.parking.Add(1)
	p.mu.Unlock()
	defer p.parking.Done()
	_ = rx.Close() // waits for the grace period; a ReadFrame on rx moves on
}

// setRx (under mu) makes rx the receive socket and wakes ReadFrame.
func (p *PacketConn) setRx(rx *packet.Conn) {
	p.rx = rx
	close(p.rxSet)
	p.rxSet = make(chan struct{})
}

// controlOnly is the AM socket's BPF filter: CONTROL frames only. The AM
// usually shares its host (and interface) with a rank, and without it the
// kernel cloned every DATA, RESULT and PROGRESS frame of that rank into the
// AM's socket, for the AM to read and discard: a second copy per frame on
// the rank's host. The filter is attached before bind (mdlayher/packet), so
// nothing else is ever queued.
var controlOnly = func() []bpf.RawInstruction {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: parser.CWOff + 1, Size: 1}, // the class byte of the control word
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(parser.ClassControl), SkipFalse: 1},
		bpf.RetConstant{Val: 1 << 18}, // the whole frame (any MTU)
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic("am: control filter: " + err.Error()) // a constant program: cannot fail
	}
	return prog
}()

// ReadFrame implements Conn: it reads the receive socket of the moment,
// waiting while there is none. After Close it returns net.ErrClosed (the
// socket package reports os.ErrClosed; Conn promises the net one).
func (p *PacketConn) ReadFrame(b []byte) (int, error) {
	for {
		p.mu.Lock()
		rx, set := p.rx, p.rxSet
		p.mu.Unlock()
		if p.closed.Load() {
			return 0, net.ErrClosed
		}
		if rx == nil {
			<-set
			continue
		}
		n, _, err := rx.ReadFrom(b)
		if err == nil {
			return n, nil
		}
		p.mu.Lock()
		parked := p.rx != rx
		p.mu.Unlock()
		if parked && !p.closed.Load() {
			continue // rx was parked under the read: read the next one
		}
		// A read racing Close can also see EBADF.
		if p.closed.Load() || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EBADF) {
			return n, fmt.Errorf("%w: %v", net.ErrClosed, err)
		}
		return n, err
	}
}

// WriteFrame implements Conn.
func (p *PacketConn) WriteFrame(b []byte) error {
	_, err := p.tx.WriteTo(b, &packet.Addr{HardwareAddr: net.HardwareAddr(b[0:6])})
	return err
}

// MAC implements Conn.
func (p *PacketConn) MAC() net.HardwareAddr { return p.ifi.HardwareAddr }

// Close implements Conn. Closing twice returns an error wrapping
// net.ErrClosed and closes nothing (the namespace handle is a file
// descriptor whose number may be reused by then).
func (p *PacketConn) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("am: CONTROL sockets on %s: %w", p.ifi.Name, net.ErrClosed)
	}
	p.mu.Lock()
	p.linger.Stop()
	rx := p.rx
	p.setRx(nil) // wakes a ReadFrame waiting for a socket
	p.mu.Unlock()
	err := p.tx.Close()
	if rx != nil {
		if e := rx.Close(); err == nil {
			err = e
		}
	}
	p.parking.Wait()
	_ = p.ns.Close()
	return err
}

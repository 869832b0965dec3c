// This file owns how frames move between the socket and the event loop:
// the batch Conn interface (and the adapter for frame-at-a-time Conns), the
// rank's AF_PACKET socket behind it, and the transmit queue the loop
// flushes with one system call.

package host

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prismd/prismd/host/internal/rawio"
	"github.com/prismd/prismd/parser"
)

// BatchConn is a Conn that moves frames in batches, one system call per
// batch. NewComm's socket implements it; NewCommConn adapts any other Conn
// (one frame per call, and a goroutine that reads ahead).
type BatchConn interface {
	Conn
	// ReadBatch blocks until at least one frame arrived and reads up to
	// len(bufs) frames into bufs; sizes[i] is frame i's length (0: it did
	// not fit). It returns os.ErrDeadlineExceeded once the read deadline
	// passed and net.ErrClosed after Close.
	ReadBatch(bufs [][]byte, sizes []int) (int, error)
	// WriteBatch sends frames in order and returns how many were sent.
	WriteBatch(frames [][]byte) (int, error)
	// SetReadDeadline sets when a blocked or later ReadBatch gives up (zero:
	// never). It may be called while another goroutine is in ReadBatch:
	// that is how the Comm wakes its loop for a new collective.
	SetReadDeadline(t time.Time) error
}

// frameBufSize holds the largest frame: Ethernet header + jumbo MTU.
const frameBufSize = parser.EthLen + parser.MTUJumbo

// rxBatch is how many frames the loop reads per call: a send window of
// RESULT at the AM's default window (64 frames) in one wakeup.
const rxBatch = 64

// txBatch is how many frames the loop queues before a flush forces a
// system call: a window's burst of DATA, or the PROGRESS answers to a
// received batch, go out in one sendmmsg.
const txBatch = 128

// opTable is the loop's immutable snapshot of the registered operations.
type opTable []*opRun

func (t opTable) find(key parser.OpKey) *opRun {
	for _, op := range t {
		if op.key == key {
			return op
		}
	}
	return nil
}

// packetConn is NewComm's socket: rawio's AF_PACKET pair (large receive
// buffer, recvmmsg, sendmmsg) as a BatchConn.
type packetConn struct {
	s *rawio.Socket
	// ReadFrame's one-frame batch (ReadFrame has one caller at a time).
	one [1][]byte
	sz  [1]int
}

func openPacketConn(iface string) (*packetConn, error) {
	s, err := rawio.Open(iface, rawio.Options{Batch: max(rxBatch, txBatch)})
	if err != nil {
		return nil, err
	}
	return &packetConn{s: s}, nil
}

func (p *packetConn) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return p.s.RecvBatch(bufs, sizes)
}
func (p *packetConn) WriteBatch(frames [][]byte) (int, error) { return p.s.SendBatch(frames) }
func (p *packetConn) SetReadDeadline(t time.Time) error       { return p.s.SetReadDeadline(t) }
func (p *packetConn) MAC() net.HardwareAddr                   { return p.s.MAC() }
func (p *packetConn) Close() error                            { return p.s.Close() }

// KernelDrops is how many frames the kernel dropped on the socket (its
// receive buffer was full).
func (p *packetConn) KernelDrops() uint64 { return p.s.KernelDrops() }

// Running implements linkStater.
func (p *packetConn) Running() (bool, error) { return p.s.Running() }

// linkStater is a Conn that can tell whether its link is up with carrier.
type linkStater interface{ Running() (bool, error) }

func (p *packetConn) ReadFrame(b []byte) (int, error) {
	p.one[0] = b
	n, err := p.s.RecvBatch(p.one[:], p.sz[:])
	p.one[0] = nil
	if err != nil {
		return 0, err
	}
	if n == 0 || p.sz[0] == 0 {
		return 0, errors.New("host: frame larger than the read buffer")
	}
	return p.sz[0], nil
}

func (p *packetConn) WriteFrame(b []byte) error {
	one := [1][]byte{b}
	_, err := p.s.SendBatch(one[:])
	return err
}

// dropCounter is a Conn that can tell how many frames the kernel dropped.
type dropCounter interface{ KernelDrops() uint64 }

func asBatch(c Conn) BatchConn {
	if b, ok := c.(BatchConn); ok {
		return b
	}
	return newSingleConn(c)
}

// singleConn adapts a frame-at-a-time Conn (a test pipe, a custom socket)
// to BatchConn: a goroutine reads ahead into a channel, so ReadBatch can
// honour deadlines the Conn knows nothing about. It copies and allocates
// per frame; production sockets implement BatchConn themselves.
type singleConn struct {
	Conn
	in   chan []byte
	err  chan error
	mu   sync.Mutex
	dl   time.Time
	kick chan struct{} // the deadline changed
}

func newSingleConn(c Conn) *singleConn {
	s := &singleConn{Conn: c, in: make(chan []byte, 1024), err: make(chan error, 1), kick: make(chan struct{}, 1)}
	go s.pump()
	return s
}

func (s *singleConn) pump() {
	for {
		b := make([]byte, frameBufSize)
		n, err := s.ReadFrame(b)
		if err != nil {
			s.err <- err
			return
		}
		s.in <- b[:n]
	}
}

func (s *singleConn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.dl = t
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

func (s *singleConn) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	for {
		s.mu.Lock()
		dl := s.dl
		s.mu.Unlock()
		var timeout <-chan time.Time
		var t *time.Timer
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			timeout = t.C
		}
		n, err := s.wait(bufs, sizes, timeout)
		if t != nil {
			t.Stop()
		}
		if n > 0 || err != nil {
			return n, err
		}
		// The deadline changed: look at it again.
	}
}

// wait returns a batch, an error, or (0, nil) when the deadline changed.
func (s *singleConn) wait(bufs [][]byte, sizes []int, timeout <-chan time.Time) (int, error) {
	var f []byte
	select {
	case f = <-s.in:
	case err := <-s.err:
		s.err <- err // every later call fails the same way
		return 0, err
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	case <-s.kick:
		return 0, nil
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n], f)
		if len(f) > len(bufs[n]) {
			sizes[n] = 0
		}
		if n++; n == len(bufs) {
			return n, nil
		}
		select {
		case f = <-s.in:
		default:
			return n, nil
		}
	}
}

func (s *singleConn) WriteBatch(frames [][]byte) (int, error) {
	for i, f := range frames {
		if err := s.WriteFrame(f); err != nil {
			return i, err
		}
	}
	return len(frames), nil
}

// txQueue is the loop's transmit batch: DATA frames (in the send windows'
// replay buffers) and PROGRESS (in its own arena), sent with one
// WriteBatch. A queued frame must stay untouched until the flush; the loop
// flushes before it reads, so no PROGRESS can release a queued buffer.
type txQueue struct {
	conn   BatchConn
	iface  string
	frames [][]byte
	arena  []byte // PROGRESS buffers, progressLen each
	nprog  int
	// down is told when a send finds the link down (ENETDOWN): those
	// frames are lost like any other, and retransmitted once it is up.
	down func()
}

// progressLen is the largest PROGRESS frame.
const progressLen = parser.EthLen + parser.CWLen + parser.ProgressHdrLen + parser.MaxHoles*parser.HoleLen

func newTxQueue(conn BatchConn, iface string) txQueue {
	return txQueue{conn: conn, iface: iface, frames: make([][]byte, 0, txBatch), arena: make([]byte, txBatch*progressLen)}
}

// add queues f, flushing first when the queue is full.
func (q *txQueue) add(f []byte) error {
	if len(q.frames) == cap(q.frames) {
		if err := q.flush(); err != nil {
			return err
		}
	}
	q.frames = append(q.frames, f)
	return nil
}

// progressBuf returns a free PROGRESS buffer, flushing first when none is.
func (q *txQueue) progressBuf() ([]byte, error) {
	if len(q.frames) == cap(q.frames) {
		if err := q.flush(); err != nil {
			return nil, err
		}
	}
	b := q.arena[q.nprog*progressLen : (q.nprog+1)*progressLen]
	q.nprog++
	return b, nil
}

// flush sends the queue. A closed socket or an interface that is gone
// (ENXIO, ENODEV) is an error; a frame the kernel refused (e.g. ENOBUFS, or
// ENETDOWN while the link is down) is lost like any other frame and the
// stream windows recover it.
func (q *txQueue) flush() error {
	if len(q.frames) == 0 {
		return nil
	}
	_, err := q.conn.WriteBatch(q.frames)
	clear(q.frames) // no references to replay buffers outlive the send
	q.frames, q.nprog = q.frames[:0], 0
	switch {
	case err == nil:
		return nil
	case errors.Is(err, net.ErrClosed):
		return ErrClosed
	case errors.Is(err, syscall.ENETDOWN):
		if q.down != nil {
			q.down()
		}
		return nil
	case errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV):
		return &ifaceError{q.iface, err}
	}
	return nil
}

// ifaceError is a send on a dead interface.
type ifaceError struct {
	iface string
	err   error
}

func (e *ifaceError) Error() string {
	return ErrInterfaceDown.Error() + ": send on " + e.iface + ": " + e.err.Error()
}
func (e *ifaceError) Unwrap() []error { return []error{ErrInterfaceDown, e.err} }

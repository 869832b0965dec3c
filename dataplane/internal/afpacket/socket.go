package afpacket

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// ethPAll is ETH_P_ALL: the socket sees every EtherType, because the bridge
// forwards everything, not only PRISM.
const ethPAll = 0x0003

// DefaultSocketBuffer is the SO_RCVBUF/SO_SNDBUF size: 4 MiB holds ~2800
// full-size frames, enough to ride out a scheduler hiccup of a few ms at
// line rate on a 10G port without kernel drops.
const DefaultSocketBuffer = 4 << 20

// Options configure Open. The zero value means defaults.
type Options struct {
	// SocketBuffer is SO_RCVBUF and SO_SNDBUF in bytes; 0 means DefaultSocketBuffer.
	SocketBuffer int
	// MaxBatch is the largest batch RecvBatch/SendBatch handle; 0 means 64.
	MaxBatch int
}

// Socket is an AF_PACKET SOCK_RAW socket bound to one interface.
// RecvBatch must be called from one goroutine at a time; SendBatch and
// KernelDrops are safe for concurrent use.
type Socket struct {
	conn   *packet.Conn
	rc     syscall.RawConn
	ifi    *net.Interface
	max    int
	closed chan struct{}

	rx rxState

	txPool sync.Pool // of *txState

	statsMu     sync.Mutex
	kernelDrops uint64
}

// Open opens and configures the socket on interface name.
func Open(name string, opts Options) (*Socket, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("afpacket: interface %q: %w", name, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, ethPAll, nil)
	if err != nil {
		return nil, fmt.Errorf("afpacket: open %q: %w", name, err)
	}
	s := &Socket{conn: conn, ifi: ifi, max: opts.MaxBatch, closed: make(chan struct{})}
	if s.max <= 0 {
		s.max = 64
	}
	fail := func(err error) (*Socket, error) {
		_ = conn.Close()
		return nil, fmt.Errorf("afpacket: configure %q: %w", name, err)
	}
	if err := conn.SetPromiscuous(true); err != nil {
		return fail(err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return fail(err)
	}
	s.rc = rc
	bufSize := opts.SocketBuffer
	if bufSize <= 0 {
		bufSize = DefaultSocketBuffer
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		// Without PACKET_IGNORE_OUTGOING the socket reads back every frame the
		// forwarder (or the host stack) transmits on this interface and the
		// bridge would forward it again: a loop.
		if e := unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); e != nil {
			serr = os.NewSyscallError("setsockopt PACKET_IGNORE_OUTGOING", e)
			return
		}
		// *BUFFORCE ignores net.core.[rw]mem_max but needs CAP_NET_ADMIN; fall
		// back to the capped variant so an unprivileged test still runs.
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bufSize); e != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bufSize)
		}
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bufSize); e != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, bufSize)
		}
	})
	if cerr != nil {
		return fail(cerr)
	}
	if serr != nil {
		return fail(serr)
	}
	s.rx.init(s.max)
	s.txPool.New = func() any { return newTxState(s.max) }
	// Reset the kernel counters so frames seen before the dataplane started
	// are not reported as drops.
	_, _ = conn.Stats()
	return s, nil
}

// Name returns the interface name.
func (s *Socket) Name() string { return s.ifi.Name }

// MAC returns the interface hardware address (zero if it has none).
func (s *Socket) MAC() [6]byte {
	var m [6]byte
	copy(m[:], s.ifi.HardwareAddr)
	return m
}

// MTU returns the interface MTU as seen at Open.
func (s *Socket) MTU() int { return s.ifi.MTU }

// RecvBatch blocks until at least one frame is available and reads up to
// len(bufs) frames. sizes[i] is the frame length; a frame longer than its
// buffer is reported with sizes[i] = 0 and counted in truncated.
// After Close it returns net.ErrClosed.
func (s *Socket) RecvBatch(bufs [][]byte, sizes []int) (n, truncated int, err error) {
	r := &s.rx
	if len(bufs) > len(r.msgs) {
		bufs = bufs[:len(r.msgs)]
	}
	for i, b := range bufs {
		r.iovs[i].Base = &b[0]
		r.iovs[i].SetLen(len(b))
		r.msgs[i].Len = 0
	}
	r.want = len(bufs)
	r.n, r.errno = 0, 0
	if err := s.rc.Read(r.fn); err != nil {
		if s.isClosed() {
			return 0, 0, net.ErrClosed
		}
		return 0, 0, err
	}
	if r.errno != 0 {
		if s.isClosed() {
			return 0, 0, net.ErrClosed
		}
		return 0, 0, os.NewSyscallError("recvmmsg", r.errno)
	}
	for i := 0; i < r.n; i++ {
		l := int(r.msgs[i].Len)
		if l > len(bufs[i]) || r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
			sizes[i] = 0
			truncated++
			continue
		}
		sizes[i] = l
	}
	return r.n, truncated, nil
}

// SendBatch transmits bufs in order and returns how many were sent; a frame
// the kernel rejects is skipped (and the first such error returned) so one bad
// frame does not cost the rest of the batch. It blocks while the socket send
// buffer is full.
func (s *Socket) SendBatch(bufs [][]byte) (int, error) {
	t := s.txPool.Get().(*txState)
	defer s.txPool.Put(t)
	sent, failed := 0, 0
	var firstErr error
	for sent < len(bufs) {
		chunk := bufs[sent:]
		if len(chunk) > len(t.msgs) {
			chunk = chunk[:len(t.msgs)]
		}
		for i, b := range chunk {
			t.iovs[i].Base = &b[0]
			t.iovs[i].SetLen(len(b))
		}
		t.want, t.n, t.errno = len(chunk), 0, 0
		if err := s.rc.Write(t.fn); err != nil {
			if s.isClosed() {
				return sent, net.ErrClosed
			}
			return sent, err
		}
		sent += t.n
		if t.errno != 0 {
			// sendmmsg stops at the first frame the kernel rejects (e.g.
			// EMSGSIZE); skip that one frame so the rest of the batch still goes.
			if firstErr == nil {
				firstErr = os.NewSyscallError("sendmmsg", t.errno)
			}
			failed++
			sent++
		}
	}
	return sent - failed, firstErr
}

// KernelDrops returns the cumulative number of frames the kernel dropped
// because the receive buffer was full. PACKET_STATISTICS resets on every read,
// so the socket accumulates.
func (s *Socket) KernelDrops() (uint64, error) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.isClosed() {
		return s.kernelDrops, nil
	}
	st, err := s.conn.Stats()
	if err != nil {
		return s.kernelDrops, err
	}
	s.kernelDrops += uint64(st.Drops)
	return s.kernelDrops, nil
}

// Close closes the socket; a blocked RecvBatch returns net.ErrClosed.
func (s *Socket) Close() error {
	s.statsMu.Lock()
	select {
	case <-s.closed:
		s.statsMu.Unlock()
		return net.ErrClosed
	default:
		close(s.closed)
	}
	s.statsMu.Unlock()
	return s.conn.Close()
}

func (s *Socket) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

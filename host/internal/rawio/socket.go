// This file owns opening, configuring and closing the two sockets and the
// batch calls' error handling.

package rawio

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/internal/mmsg"
	"github.com/prismd/prismd/internal/netif"
)

// DefaultSocketBuffer is SO_RCVBUF and SO_SNDBUF: 8 MiB holds about 500
// jumbo frames (a 9000-byte frame costs ~16 KiB of socket memory), two
// windows of 256 frames, so a rank descheduled for tens of milliseconds
// loses nothing.
const DefaultSocketBuffer = 8 << 20

// DefaultBatch is the largest batch of one system call: a window of frames
// released by one PROGRESS burst goes out in one or two calls.
const DefaultBatch = 128

// txTimeout bounds how long a send blocks on a full send buffer, so Close
// and a dead interface are noticed.
const txTimeout = 100 * time.Millisecond

// Options configure Open; the zero value means defaults.
type Options struct {
	// EtherType the receive socket is bound to (0 = 0x88B5, PRISM).
	EtherType uint16
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes (0 = DefaultSocketBuffer).
	SocketBuffer int
	// Batch is the largest number of frames one RecvBatch or SendBatch
	// call moves per system call (0 = DefaultBatch).
	Batch int
}

// ErrDown is wrapped by Open when the interface is administratively down.
var ErrDown = errors.New("interface is down")

// Socket is a rank's raw socket pair on one interface. RecvBatch must be
// called from one goroutine at a time; SendBatch is safe for concurrent use.
type Socket struct {
	// file is the receive socket in the Go netpoller. It is an os.File,
	// not a net.Conn wrapper, so a read deadline returns the poller's own
	// error value instead of allocating a wrapped one per timeout.
	file   *os.File
	rc     syscall.RawConn
	ifi    *net.Interface
	closed chan struct{}
	once   sync.Once

	rx *mmsg.Recv

	// tx is the transmit-only socket (mmsg.TxSocket: out of the netpoller);
	// txPool holds the pre-built message arrays of each sender.
	tx     *mmsg.TxSocket
	txPool sync.Pool
	batch  int

	statsMu sync.Mutex
	drops   uint64
}

// Open opens the sockets on interface name.
func Open(name string, opts Options) (*Socket, error) {
	ifi, err := netif.Ethernet(name)
	if err != nil {
		return nil, fmt.Errorf("rawio: %w", err)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("rawio: interface %q: %w; bring it up with 'ip link set %s up'", name, ErrDown, name)
	}
	et := opts.EtherType
	if et == 0 {
		et = 0x88B5
	}
	bufSize := opts.SocketBuffer
	if bufSize <= 0 {
		bufSize = DefaultSocketBuffer
	}
	batch := opts.Batch
	if batch <= 0 {
		batch = DefaultBatch
	}
	fd, err := openRx(ifi.Index, et, bufSize)
	if err != nil {
		return nil, fmt.Errorf("rawio: open AF_PACKET socket on %q (needs CAP_NET_RAW): %w", name, err)
	}
	// A non-blocking descriptor makes os.NewFile register it with the
	// netpoller.
	file := os.NewFile(uintptr(fd), "packet:"+name)
	s := &Socket{file: file, ifi: ifi, closed: make(chan struct{}), batch: batch}
	fail := func(err error) (*Socket, error) {
		_ = file.Close()
		return nil, fmt.Errorf("rawio: configure %q: %w", name, err)
	}
	if s.rc, err = file.SyscallConn(); err != nil {
		return fail(err)
	}
	if s.tx, err = mmsg.OpenTx(ifi.Index, bufSize, txTimeout, false); err != nil {
		return fail(err)
	}
	s.rx = mmsg.NewRecv(batch)
	s.txPool.New = func() any { return mmsg.NewSend(batch) }
	// PACKET_STATISTICS resets on read: start counting drops from now.
	_ = s.readDrops()
	return s, nil
}

// openRx opens the receive socket: AF_PACKET, raw, non-blocking, bound to
// one EtherType on one interface, with a receive buffer of bufSize.
func openRx(ifindex int, etherType uint16, bufSize int) (int, error) {
	proto := int(htons(etherType))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	// *BUFFORCE ignores net.core.rmem_max but needs CAP_NET_ADMIN; the
	// capped variant is the fallback. Set before bind, so no frame is
	// queued against the default size.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, bufSize)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifindex}); err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	return fd, nil
}

// htons converts a 16-bit value to network byte order (the layout
// AF_PACKET protocol numbers are given in).
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// readDrops reads (and so resets) the kernel's drop counter.
func (s *Socket) readDrops() uint64 {
	var st *unix.TpacketStats
	var err error
	cerr := s.rc.Control(func(fd uintptr) {
		st, err = unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS)
	})
	if cerr != nil || err != nil {
		return 0
	}
	return uint64(st.Drops)
}

// MAC returns the interface's hardware address.
func (s *Socket) MAC() net.HardwareAddr { return s.ifi.HardwareAddr }

// Name returns the interface name.
func (s *Socket) Name() string { return s.ifi.Name }

// Batch returns the most frames one system call moves.
func (s *Socket) Batch() int { return s.batch }

// RecvBatch blocks until at least one frame is available and reads up to
// len(bufs) frames (at most Batch()) into bufs; sizes[i] is frame i's
// length. A frame longer than its buffer is reported with sizes[i] = 0.
// After Close it returns net.ErrClosed.
func (s *Socket) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	r := s.rx
	if len(bufs) > r.Max() {
		bufs = bufs[:r.Max()]
	}
	r.Prepare(bufs)
	if err := s.rc.Read(r.ReadFunc()); err != nil {
		if s.isClosed() {
			return 0, net.ErrClosed
		}
		return 0, err
	}
	n, errno := r.Result()
	if errno != 0 {
		if s.isClosed() {
			return 0, net.ErrClosed
		}
		return 0, os.NewSyscallError("recvmmsg", errno)
	}
	for i := 0; i < n; i++ {
		sizes[i] = r.Size(i, len(bufs[i]))
	}
	return n, nil
}

// SendBatch transmits frames in order and returns how many were sent. A
// frame the kernel rejects is skipped (and the first error returned), so one
// bad frame does not cost the rest; it blocks while the send buffer is full.
// After Close it returns net.ErrClosed.
func (s *Socket) SendBatch(frames [][]byte) (int, error) {
	t := s.txPool.Get().(*mmsg.Send)
	defer s.txPool.Put(t)
	return mmsg.SendAll(s.tx, t, frames, mmsg.LinkGone)
}

// Running reports whether the interface is up and has carrier (IFF_UP and
// IFF_RUNNING). A rank's frames to a link without carrier vanish without an
// error (the veth or NIC drops them), so this is how a rank learns that its
// cable, or the switch port at its far end, is down.
func (s *Socket) Running() (bool, error) { return s.tx.Running(s.ifi.Name) }

// KernelDrops returns how many frames the kernel dropped on the receive
// socket since Open because its buffer was full.
func (s *Socket) KernelDrops() uint64 {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if !s.isClosed() {
		s.drops += s.readDrops()
	}
	return s.drops
}

// Close closes both sockets; a blocked RecvBatch returns net.ErrClosed.
func (s *Socket) Close() error {
	err := net.ErrClosed
	s.once.Do(func() {
		s.statsMu.Lock()
		close(s.closed)
		s.statsMu.Unlock()
		err = s.file.Close()
		_ = s.tx.Close()
	})
	return err
}

func (s *Socket) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// SetReadDeadline makes a blocked or later RecvBatch return
// os.ErrDeadlineExceeded at t (zero: no deadline). It may be called while
// another goroutine is in RecvBatch.
func (s *Socket) SetReadDeadline(t time.Time) error { return s.file.SetReadDeadline(t) }

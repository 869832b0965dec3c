package afpacket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/internal/mmsg"
	"github.com/prismd/prismd/internal/netif"
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
	// RxRing receives through a TPACKET_V3 mmap ring of about SocketBuffer
	// bytes instead of recvmmsg: one wakeup per ring block instead of one per
	// frame, no skb queueing. Frames wait in a partly filled block at most
	// RingTimeout.
	RxRing bool
	// RingTimeout is the block retire timeout (rounded to ms, at least 1 ms);
	// 0 means DefaultRingTimeout.
	RingTimeout time.Duration
	// QdiscBypass sets PACKET_QDISC_BYPASS: transmitted frames go straight to
	// the driver, skipping the qdisc layer and packet taps on this
	// interface (a capture on the port no longer sees the switch's egress).
	QdiscBypass bool
	// Lane, with RxRing, receives PRISM CONTROL frames on a second socket
	// (RecvLane) that returns each one at once instead of after the ring's
	// block timeout (lane.go).
	Lane bool
	// LazyRing, with a lane, maps the ring only when SetLaneAll(false)
	// first asks for it; until then every frame takes the lane. An idle
	// ring is not free: its block retire timer fires every RingTimeout,
	// and on a VM each of those interrupts is expensive (a 1M FP32
	// collective on the spine-leaf-jumbo lab, 7 ports, took about 20%
	// longer with idle rings than with none). Without a fanout lane the
	// ring is mapped at Open as without LazyRing.
	LazyRing bool
	// LaneClasses adds PRISM classes to the lane (bit c for class c, up to
	// 15): an end host puts PROGRESS there, whose frames are too few to
	// fill ring blocks and pace its send window. With RxRing, a non-zero
	// mask opens a lane as Lane does.
	LaneClasses uint16
}

// laneMask is the set of classes the lane takes (0: no lane).
func (o Options) laneMask() uint16 {
	if !o.RxRing {
		return 0
	}
	m := o.LaneClasses & (1<<(maxLaneClass+1) - 1)
	if o.Lane {
		m |= 1 << classControl
	}
	return m
}

// Socket is an AF_PACKET SOCK_RAW socket bound to one interface.
// RecvBatch must be called from one goroutine at a time; SendBatch and
// KernelDrops are safe for concurrent use.
type Socket struct {
	conn   *packet.Conn
	rc     syscall.RawConn
	ifi    *net.Interface
	mac    [6]byte // ifi.HardwareAddr, copied once (MAC)
	max    int
	closed chan struct{}

	rx *mmsg.Recv

	// ringMu is held by RecvBatch while it walks the mapped ring, so Close can
	// unmap it only once no reader is inside (unmapping under a reader would
	// fault). Uncontended except at Close.
	ringMu   sync.Mutex
	ring     *ring
	ringWait func(fd uintptr) bool
	// lent is set while frames RecvLent returned are in use: ringMu stays
	// held from that return to the next RecvLent or Release, so Close
	// cannot unmap the ring under them. Reader only.
	lent bool

	// tx is a second AF_PACKET socket, used only to transmit, kept out of
	// the Go netpoller (mmsg.TxSocket says why).
	tx     *mmsg.TxSocket
	txPool sync.Pool // of *mmsg.Send

	// lane is the control lane (Options.Lane), nil without one.
	lane *lane
	// fanout: the lane and this socket share a fanout group (lane.go), so
	// SetLaneAll can widen the lane; laneMask is the lane's own classes.
	fanout   bool
	laneMask uint16
	wideMu   sync.Mutex
	wide     bool // the lane takes every frame (SetLaneAll)
	// A lazy ring (Options.LazyRing) is made by the reading goroutine
	// once ringWant is set; until then the socket is read with recvmmsg.
	// Making it moves the socket to the end of the fanout group, so the
	// lane's index there (laneIdx, under wideMu) becomes 0.
	lazy       bool
	ringWant   atomic.Bool
	ringReady  atomic.Bool
	ringFailed bool // under wideMu
	laneIdx    uint32
	ringBytes  int
	ringTov    time.Duration
	preSizes   []int

	statsMu     sync.Mutex
	kernelDrops uint64

	// csum counts the received frames with a partial checksum
	// (checksum.go), on every receive path.
	csum Checksums
	// held counts the ring's blocks and frames that waited for a block
	// timeout (Held).
	held Held
}

// Held counts the blocks with frames a receive ring handed out (Blocks),
// those of them the kernel retired on its timer (RingTimeout) before they
// were full (Timed), and the frames in those (Frames): frames that waited
// in a partly filled block.
type Held struct {
	Blocks, Timed, Frames atomic.Uint64
}

// Open opens and configures the socket on interface name.
func Open(name string, opts Options) (*Socket, error) {
	ifi, err := netif.Ethernet(name)
	if err != nil {
		return nil, fmt.Errorf("afpacket: %w", err)
	}
	var cfg *packet.Config
	mask := opts.laneMask()
	if mask != 0 {
		cfg = &packet.Config{Filter: ringFilter(mask)} // the lane takes those classes
	}
	conn, err := packet.Listen(ifi, packet.Raw, ethPAll, cfg)
	if err != nil {
		return nil, fmt.Errorf("afpacket: open %q: %w", name, err)
	}
	s := &Socket{conn: conn, ifi: ifi, max: opts.MaxBatch, closed: make(chan struct{})}
	copy(s.mac[:], ifi.HardwareAddr)
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
	tov := opts.RingTimeout
	if tov <= 0 {
		tov = DefaultRingTimeout
	}
	lazy := opts.RxRing && opts.LazyRing && mask != 0
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		if serr = setRecvOpts(fd, bufSize); serr != nil {
			return
		}
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bufSize); e != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, bufSize)
		}
		if opts.RxRing && !lazy {
			s.ring, serr = setupRing(int(fd), bufSize, tov, ifi.MTU, &s.csum, &s.held)
		}
	})
	if cerr != nil {
		return fail(cerr)
	}
	if serr != nil {
		return fail(serr)
	}
	if s.tx, err = mmsg.OpenTx(ifi.Index, bufSize, txTimeout, opts.QdiscBypass); err != nil {
		if s.ring != nil {
			s.ring.unmap()
		}
		return fail(err)
	}
	s.rx = mmsg.NewRecvAux(s.max) // PACKET_AUXDATA (setRecvOpts)
	if opts.RxRing && mask != 0 {
		if s.lane, s.fanout, err = openLane(ifi, rc, mask, bufSize, s.max, lazy); err != nil {
			if s.ring != nil {
				s.ring.unmap()
			}
			_ = s.tx.Close()
			return fail(fmt.Errorf("control lane: %w", err))
		}
		if lazy && !s.fanout {
			// No fanout group to hand frames to the lane meanwhile: the
			// ring now, as without LazyRing.
			lazy = false
			if err := control(rc, func(fd int) (e error) { s.ring, e = setupRing(fd, bufSize, tov, ifi.MTU, &s.csum, &s.held); return }); err != nil {
				_ = s.lane.conn.Close()
				_ = s.tx.Close()
				return fail(err)
			}
		}
		s.laneMask, s.laneIdx = mask, 1
		s.lazy, s.wide = lazy, lazy
		s.ringBytes, s.ringTov = bufSize, tov
		s.preSizes = make([]int, s.max)
		if s.fanout {
			// The group's program sorts frames now; the ring's own
			// filter would only cost a second program run per frame.
			_ = control(rc, detachFilter)
		}
	}
	if s.ring != nil {
		r := s.ring
		s.ringWait = func(uintptr) bool { return r.ready() }
	}
	s.txPool.New = func() any { return mmsg.NewSend(s.max) }
	// Reset the kernel counters so frames seen before the dataplane started
	// are not reported as drops.
	_, _ = conn.Stats()
	return s, nil
}

// Name returns the interface name.
func (s *Socket) Name() string { return s.ifi.Name }

// MAC returns the interface hardware address (zero if it has none), as
// read at Open. It is kept as an array: the engine asks for it for every
// RESULT and PROGRESS it sends (dataplane.Sender.PortMAC).
func (s *Socket) MAC() [6]byte { return s.mac }

// MTU returns the interface MTU as seen at Open.
func (s *Socket) MTU() int { return s.ifi.MTU }

// RecvBatch blocks until at least one frame is available and reads up to
// len(bufs) frames. sizes[i] is the frame length; a frame longer than its
// buffer is reported with sizes[i] = 0 and counted in truncated.
// After Close it returns net.ErrClosed.
func (s *Socket) RecvBatch(bufs [][]byte, sizes []int) (n, truncated int, err error) {
	if s.ringWait != nil || s.lazy {
		return s.recvRing(bufs, sizes)
	}
	return s.recvmmsg(s.rc, s.rx, bufs, sizes)
}

// setRecvOpts sets what every receive socket needs on fd. Without
// PACKET_IGNORE_OUTGOING a socket reads back every frame the forwarder (or
// the host stack) transmits on the interface, and the bridge would forward
// it again: a loop. PACKET_AUXDATA makes recvmmsg say which frames carry a
// partial checksum (checksum.go); the ring says so without it. *BUFFORCE
// ignores net.core.rmem_max but needs CAP_NET_ADMIN; the capped variant is
// the fallback, so an unprivileged test still runs.
func setRecvOpts(fd uintptr, bufSize int) error {
	if e := unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); e != nil {
		return os.NewSyscallError("setsockopt PACKET_IGNORE_OUTGOING", e)
	}
	if e := unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); e != nil {
		return os.NewSyscallError("setsockopt PACKET_AUXDATA", e)
	}
	if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, bufSize); e != nil {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, bufSize)
	}
	return nil
}

// recvmmsg reads a batch from the socket behind rc with r (the main socket
// without a ring, or the lane).
func (s *Socket) recvmmsg(rc syscall.RawConn, r *mmsg.Recv, bufs [][]byte, sizes []int) (n, truncated int, err error) {
	if len(bufs) > r.Max() {
		bufs = bufs[:r.Max()]
	}
	r.Prepare(bufs)
	if err := rc.Read(r.ReadFunc()); err != nil {
		if s.isClosed() {
			return 0, 0, net.ErrClosed
		}
		return 0, 0, err
	}
	n, errno := r.Result()
	if errno != 0 {
		if s.isClosed() {
			return 0, 0, net.ErrClosed
		}
		return 0, 0, os.NewSyscallError("recvmmsg", errno)
	}
	for i := 0; i < n; i++ {
		if sizes[i] = r.Size(i, len(bufs[i])); sizes[i] == 0 {
			truncated++
		}
	}
	truncated += s.csum.completeAux(r, bufs, sizes, n)
	return n, truncated, nil
}

func (s *Socket) recvRing(bufs [][]byte, sizes []int) (n, truncated int, err error) {
	s.Release()
	s.ringMu.Lock()
	defer s.ringMu.Unlock()
	for {
		if s.isClosed() || s.ring == nil && !s.lazy {
			return 0, 0, net.ErrClosed
		}
		if s.ring == nil {
			if done, n, truncated, err := s.preRing(bufs, sizes); done {
				return n, truncated, err
			}
			continue
		}
		if n, truncated = s.ring.recv(bufs, sizes); n > 0 {
			return n, truncated, nil
		}
		// The socket becomes readable when the kernel retires a block;
		// ringWait re-checks after the netpoller arms, so none is missed.
		if err := s.rc.Read(s.ringWait); err != nil {
			if s.isClosed() {
				return 0, 0, net.ErrClosed
			}
			return 0, 0, err
		}
	}
}

// Lends reports whether RecvLent lends frames in place (the socket has a
// ring); without one it has nothing to lend and RecvBatch is the way to
// read.
func (s *Socket) Lends() bool { return s.ringWait != nil || s.lazy }

// RecvLent is RecvBatch without the copy out of the ring: frames[i] is set
// to the i-th frame in place in the mapped ring, or to bufs[i] holding it
// when its VLAN tag has to be put back, or to nil for a frame longer than
// len(bufs[i]) or truncated by the ring (counted in truncated). The frames
// stay valid, and writable, until the next RecvLent, RecvBatch or Release
// call from the same goroutine: the ring blocks that hold them are handed
// back to the kernel only then, and Close waits for it. A reader that
// stops must call Release. Without a ring (Lends false) it returns
// net.ErrClosed.
func (s *Socket) RecvLent(bufs, frames [][]byte) (n, truncated int, err error) {
	if s.lent {
		s.lent = false // ringMu is still held since the last return
	} else {
		s.ringMu.Lock()
	}
	if len(bufs) < len(frames) {
		frames = frames[:len(bufs)]
	}
	for {
		if s.isClosed() || s.ring == nil && !s.lazy {
			if s.ring != nil {
				s.ring.giveBack()
			}
			s.ringMu.Unlock()
			return 0, 0, net.ErrClosed
		}
		if s.ring == nil {
			// No ring yet: frames are copied into bufs, nothing is lent.
			bufs = bufs[:min(len(bufs), s.max)]
			sizes := s.preSizes[:len(bufs)]
			done, n, truncated, err := s.preRing(bufs, sizes)
			if !done {
				continue
			}
			for i := 0; i < n; i++ {
				frames[i] = bufs[i][:sizes[i]]
				if sizes[i] == 0 {
					frames[i] = nil
				}
			}
			s.ringMu.Unlock()
			return n, truncated, err
		}
		s.ring.giveBack()
		if n, truncated = s.ring.lend(bufs, frames); n > 0 {
			s.lent = true
			return n, truncated, nil
		}
		// As in recvRing: readable once the kernel retires a block.
		if err := s.rc.Read(s.ringWait); err != nil {
			s.ringMu.Unlock()
			if s.isClosed() {
				return 0, 0, net.ErrClosed
			}
			return 0, 0, err
		}
	}
}

// Release hands back the frames the last RecvLent lent. It is a no-op when
// none are lent; it must be called from the reading goroutine.
func (s *Socket) Release() {
	if !s.lent {
		return
	}
	s.lent = false
	if s.ring != nil {
		s.ring.giveBack()
	}
	s.ringMu.Unlock()
}

// ErrLinkDown is what SendBatch returns when the frames it did not send met
// a link that is down, gone or without carrier: the rest of the batch was
// dropped without a system call per frame (mmsg.ErrDeviceRefuses).
var ErrLinkDown = errors.New("link down or without carrier")

// SendBatch transmits bufs in order and returns how many were sent; a frame
// the kernel rejects is skipped (and the first such error returned) so one bad
// frame does not cost the rest of the batch. A link that is down, gone or
// without carrier ends the batch at once (ErrLinkDown). It blocks while the
// socket send buffer is full.
func (s *Socket) SendBatch(bufs [][]byte) (int, error) {
	t := s.txPool.Get().(*mmsg.Send)
	defer s.txPool.Put(t)
	n, err := mmsg.SendAll(s.tx, t, bufs, mmsg.LinkGone)
	if err == nil {
		return n, nil
	}
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno) && mmsg.LinkGone(errno):
		return n, &linkDownError{err}
	case errors.Is(err, mmsg.ErrDeviceRefuses) || errors.Is(err, unix.ENOBUFS):
		// No carrier, or a backlog full for a moment: the link's state
		// tells (a batch of one frame is refused only once).
		if up, e := s.tx.Running(s.ifi.Name); e == nil && !up {
			return n, &linkDownError{err}
		}
	}
	return n, err
}

// linkDownError is a send error that is also ErrLinkDown, so a caller can
// still ask for the errno (ENODEV: the interface is gone for good).
type linkDownError struct{ err error }

func (e *linkDownError) Error() string   { return ErrLinkDown.Error() + ": " + e.err.Error() }
func (e *linkDownError) Unwrap() []error { return []error{ErrLinkDown, e.err} }

// txTimeout bounds how long a send blocks on a full send buffer, so Close
// (which waits for senders) and a closed port are noticed.
const txTimeout = 100 * time.Millisecond

// Held returns how many blocks with frames the receive ring handed out,
// how many of them the kernel retired on its timer, and the frames in
// those. Traffic that comes in bursts, each waiting for the last, pays
// the timer's wait on every burst, and the lane serves it better
// (dataplane's sparse tuner reads this).
func (s *Socket) Held() (blocks, timed, frames uint64) {
	return s.held.Blocks.Load(), s.held.Timed.Load(), s.held.Frames.Load()
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
	if s.lane != nil {
		if st, err = s.lane.conn.Stats(); err != nil {
			return s.kernelDrops, err
		}
		s.kernelDrops += uint64(st.Drops)
	}
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
	err := s.conn.Close()
	_ = s.tx.Close()
	if s.lane != nil {
		_ = s.lane.conn.Close() // wakes a blocked RecvLane
	}
	// Closing the fd woke a blocked reader; once it has left, unmap.
	s.ringMu.Lock()
	if s.ring != nil {
		s.ring.unmap()
		s.ring = nil
	}
	s.ringMu.Unlock()
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

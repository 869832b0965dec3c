package xdp

// This file owns Socket: every receive queue of one interface, the program
// that feeds them, blocking reads and batched writes across them.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	// DefaultRingSize is the fill and RX ring size (and RX chunk count) of
	// each queue: 2048 frames ride out a scheduling hiccup of ~1.5 ms at
	// 1.4 Mframe/s, about what the 4 MiB AF_PACKET buffer holds at 1500 bytes.
	DefaultRingSize = 2048
	// pageChunk is the largest UMEM chunk the kernel accepts without huge
	// pages (PAGE_SIZE on x86-64 and arm64 with 4 KiB pages).
	pageChunk = 4096
	// smallChunk holds a 1500-byte-MTU frame (1518 + 4 bytes with a VLAN
	// tag) after the 256-byte copy-mode headroom, at half the memory.
	smallChunk = 2048
)

var (
	// ErrFrameSize is returned (wrapped) for a frame that is empty or
	// longer than the socket's largest frame; that frame is skipped.
	ErrFrameSize = errors.New("xdp: frame size out of range")
	// ErrTxFull means every TX chunk was still in the kernel's hands after a
	// kick; the rest of the batch was dropped, as a full NIC queue would.
	ErrTxFull = errors.New("xdp: transmit ring full")
)

// Options configure Open.
type Options struct {
	// MaxFrame is the longest frame, Ethernet header (and one VLAN tag)
	// included, the socket must receive and send. It picks the UMEM chunk
	// size: 2048 bytes up to 1792, 4096 up to 3840 and, above that, 4096-byte
	// chunks with multi-buffer frames (XDP_USE_SG, Linux 6.6+).
	MaxFrame int
	// Queues is how many receive queues (0..Queues-1) get a socket; 0 means
	// every active queue (ETHTOOL_GCHANNELS; 1 if the driver does not say).
	Queues int
	// Native attaches in driver mode instead of generic (SKB) mode.
	Native bool
	// RingSize is the RX/fill ring size per queue, a power of two
	// (64..16384); 0 means DefaultRingSize for up to 4 queues, less per
	// queue beyond (at least 256). TX rings get half of it.
	RingSize int
}

// Socket is the AF_XDP side of one interface: one XSK per receive queue and
// the XDP program steering frames to them. RecvBatch must be called from one
// goroutine at a time; SendBatch, Stats and Close are safe for
// concurrent use.
type Socket struct {
	name    string
	ifindex int
	mac     [6]byte
	mtu     int
	mode    string
	chunk   int
	sg      bool

	qs   []*xsk
	prog *program

	// efd is an eventfd polled with the sockets: Close makes it readable so
	// a reader blocked in ppoll returns.
	efd    int
	closed atomic.Bool

	// rxMu is held by RecvBatch for the whole call (one reader, so never
	// contended except by Close, which takes it to wait for the reader
	// before unmapping the rings).
	rxMu   sync.Mutex
	pfds   []unix.PollFd
	rxNext int

	txNext atomic.Uint32

	statsMu sync.Mutex
	last    Stats // the last successful read; what Stats reports after Close
}

// Open attaches the program to interface name and binds one socket per
// receive queue (needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF or root).
func Open(name string, opts Options) (s *Socket, err error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("xdp: interface %q: %w", name, err)
	}
	s = &Socket{name: name, ifindex: ifi.Index, mtu: ifi.MTU, efd: -1, mode: "generic"}
	copy(s.mac[:], ifi.HardwareAddr)
	if opts.Native {
		s.mode = "native"
	}
	fail := func(what string, err error) (*Socket, error) {
		s.teardown()
		return nil, fmt.Errorf("xdp: %s on %q: %w", what, name, err)
	}
	ringSize := opts.RingSize
	if ringSize != 0 && (ringSize < 64 || ringSize > 16384 || ringSize&(ringSize-1) != 0) {
		return nil, fmt.Errorf("xdp: %q: ring size %d is not a power of two in 64..16384", name, ringSize)
	}
	if opts.MaxFrame < 64 || opts.MaxFrame > 65535 {
		return nil, fmt.Errorf("xdp: %q: largest frame %d out of range 64..65535", name, opts.MaxFrame)
	}
	switch {
	case opts.MaxFrame <= smallChunk-xdpPacketHeadroom:
		s.chunk = smallChunk
	case opts.MaxFrame <= pageChunk-xdpPacketHeadroom:
		s.chunk = pageChunk
	default:
		s.chunk, s.sg = pageChunk, true
	}
	queues := 1
	if n, ok, err := rxQueues(name); err != nil {
		return nil, fmt.Errorf("xdp: %q: %w", name, err)
	} else if ok && n > 0 {
		queues = n
	}
	switch {
	case opts.Queues < 0:
		return nil, fmt.Errorf("xdp: %q: negative queue count %d", name, opts.Queues)
	case opts.Queues > queues:
		return nil, fmt.Errorf("xdp: %q has %d receive queues, %d requested", name, queues, opts.Queues)
	case opts.Queues > 0:
		queues = opts.Queues
	}
	if ringSize == 0 {
		ringSize = DefaultRingSize
		// A NIC with many queues spreads its traffic over them: keep the
		// port's total at about 4 queues' worth of memory, at least 256
		// frames per queue.
		for ringSize > 256 && queues*ringSize > 4*DefaultRingSize {
			ringSize /= 2
		}
	}
	if s.prog, err = loadProgram(queues, s.mac, s.sg); err != nil {
		return fail("XDP program", err)
	}
	for q := 0; q < queues; q++ {
		x, err := openXSK(xskConfig{ifindex: s.ifindex, queue: q, chunk: uint32(s.chunk),
			rxSize: uint32(ringSize), txSize: uint32(ringSize / 2), sg: s.sg, maxFrame: opts.MaxFrame,
			txBudget: uint32(ringSize / 2)})
		if err != nil {
			if errors.Is(err, errNoMultiBuffer) {
				return fail("AF_XDP socket", fmt.Errorf("%w; frames of %d bytes need more than one %d-byte UMEM chunk, so lower the MTU to %d or less",
					err, opts.MaxFrame, s.chunk, pageChunk-xdpPacketHeadroom-18))
			}
			return fail("AF_XDP socket", err)
		}
		s.qs = append(s.qs, x)
		if err := s.prog.register(q, x.fd); err != nil {
			return fail("AF_XDP socket", err)
		}
	}
	if err := s.prog.attach(s.ifindex, opts.Native); err != nil {
		return fail("attach XDP program ("+s.mode+" mode)", err)
	}
	if s.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail("eventfd", os.NewSyscallError("eventfd", err))
	}
	for _, q := range s.qs {
		s.pfds = append(s.pfds, unix.PollFd{Fd: int32(q.fd), Events: unix.POLLIN})
	}
	s.pfds = append(s.pfds, unix.PollFd{Fd: int32(s.efd), Events: unix.POLLIN})
	return s, nil
}

// Name returns the interface name.
func (s *Socket) Name() string { return s.name }

// MAC returns the interface hardware address as seen at Open.
func (s *Socket) MAC() [6]byte { return s.mac }

// MTU returns the interface MTU as seen at Open.
func (s *Socket) MTU() int { return s.mtu }

// Queues returns the number of bound receive queues.
func (s *Socket) Queues() int { return len(s.qs) }

// Mode returns "generic" or "native".
func (s *Socket) Mode() string { return s.mode }

// ChunkSize returns the UMEM chunk size.
func (s *Socket) ChunkSize() int { return s.chunk }

// MultiBuffer reports whether the sockets are bound with XDP_USE_SG.
func (s *Socket) MultiBuffer() bool { return s.sg }

// RecvBatch blocks until at least one frame arrived on any queue and copies
// up to len(bufs) frames into bufs, setting sizes. A frame longer than its
// buffer gets size 0 and is counted in oversize. It waits in ppoll (no
// spinning) when every RX ring is empty. After Close it returns
// net.ErrClosed.
func (s *Socket) RecvBatch(bufs [][]byte, sizes []int) (n, oversize int, err error) {
	if len(bufs) == 0 {
		return 0, 0, nil
	}
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	for {
		if s.closed.Load() {
			return 0, 0, net.ErrClosed
		}
		for i := range s.qs {
			// Start at a different queue each call so one busy queue
			// cannot starve the others.
			q := s.qs[(s.rxNext+i)%len(s.qs)]
			k, o := q.recv(bufs[n:], sizes[n:])
			n += k
			oversize += o
			if n == len(bufs) {
				break
			}
		}
		if s.rxNext++; s.rxNext >= len(s.qs) {
			s.rxNext = 0
		}
		if n > 0 {
			return n, oversize, nil
		}
		if _, err := unix.Ppoll(s.pfds, nil, nil); err != nil && err != unix.EINTR {
			return 0, 0, os.NewSyscallError("ppoll", err)
		}
	}
}

// SendBatch transmits bufs in order through one queue's TX ring with one
// producer update and (normally) one sendto, and returns how many frames
// were queued. A frame the socket cannot take (empty, too long) is skipped
// and the first such error returned; if the ring stays full the rest of the
// batch is dropped with ErrTxFull.
func (s *Socket) SendBatch(bufs [][]byte) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	q := s.txQueue()
	defer q.txMu.Unlock()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	return q.send(bufs)
}

// txQueue returns a queue with its txMu held: any free one, starting at a
// rotating index, so concurrent writers spread over the queues instead of
// waiting for each other; with every one busy it waits for the first.
func (s *Socket) txQueue() *xsk {
	start := int(s.txNext.Add(1))
	for i := range s.qs {
		q := s.qs[(start+i)%len(s.qs)]
		if q.txMu.TryLock() {
			return q
		}
	}
	q := s.qs[start%len(s.qs)]
	q.txMu.Lock()
	return q
}

// Stats are the losses of a Socket, summed over its queues' sockets.
//
// What XDP_STATISTICS offers and why only these: rx_fill_ring_empty_descs
// counts the times the kernel found the fill ring empty, and in copy mode
// each of those frames is also in rx_dropped, so adding it would count them
// twice; tx_ring_empty_descs counts the times the kernel found nothing to
// send, which loses nothing.
type Stats struct {
	// RxDropped counts frames the kernel dropped on their way to a socket:
	// rx_dropped (no fill ring chunk, or a frame too long for a chunk),
	// rx_ring_full (the RX ring was full) and rx_invalid_descs. With the
	// full-size struct passed to XDP_STATISTICS the kernel keeps
	// rx_ring_full out of rx_dropped, so the sum counts each frame once.
	RxDropped uint64
	// TxInvalid counts TX descriptors the kernel refused as invalid
	// (tx_invalid_descs): one per frame, several for a multi-buffer frame.
	// The socket never publishes one it knows to be invalid, so anything
	// here is a bug or a kernel that disagrees about a frame's validity.
	TxInvalid uint64
	// TxDriverDrops counts frames the kernel took from a TX ring and the
	// device then dropped (sendto EBUSY, NET_XMIT_DROP: no carrier, or a
	// veth peer's backlog full). SendBatch had reported them as queued.
	TxDriverDrops uint64
}

// Stats returns the cumulative losses. The kernel counters are cumulative
// per socket (XDP_STATISTICS does not reset on read, unlike
// PACKET_STATISTICS), so each call sums the current values of the queues'
// sockets; reads are never added up, which would count a frame again on
// every scrape. If a socket cannot be read the previous total is returned
// with the error, so the totals never go backwards.
func (s *Socket) Stats() (Stats, error) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if s.closed.Load() {
		return s.last, nil
	}
	return s.stats()
}

// stats reads every queue's socket; under statsMu, before teardown.
func (s *Socket) stats() (Stats, error) {
	var t Stats
	for _, q := range s.qs {
		st, err := statistics(q.fd)
		if err != nil {
			return s.last, fmt.Errorf("xdp: %s queue %d: %w", s.name, q.queue, err)
		}
		t.RxDropped += st.Rx_dropped + st.Rx_ring_full + st.Rx_invalid_descs
		t.TxInvalid += st.Tx_invalid_descs
		t.TxDriverDrops += q.txDrops.Load()
	}
	s.last = t
	return t, nil
}

// Close detaches the program, wakes a blocked RecvBatch (which returns
// net.ErrClosed), waits for readers and writers to leave and releases the
// sockets and their memory.
func (s *Socket) Close() error {
	s.statsMu.Lock()
	if s.closed.Swap(true) {
		s.statsMu.Unlock()
		return net.ErrClosed
	}
	_, _ = s.stats() // the sockets go away below; keep their final counts
	s.statsMu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(s.efd, one[:])
	s.rxMu.Lock()
	for _, q := range s.qs {
		q.txMu.Lock()
	}
	s.teardown()
	for _, q := range s.qs {
		q.txMu.Unlock()
	}
	s.rxMu.Unlock()
	return nil
}

// teardown releases everything Open acquired, in reverse order.
func (s *Socket) teardown() {
	if s.prog != nil {
		s.prog.close() // detach first: no more frames are steered to the sockets
	}
	for _, q := range s.qs {
		q.close()
	}
	if s.efd >= 0 {
		_ = unix.Close(s.efd)
		s.efd = -1
	}
}

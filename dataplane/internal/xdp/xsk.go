package xdp

// This file owns one XSK socket: its UMEM, its four rings and the per-frame
// copy in and out of the UMEM. The UMEM is split once: the first rxChunks
// chunks circulate between the fill ring and the RX ring, the rest between a
// private free stack, the TX ring and the completion ring. Each side owns
// exactly as many chunks as its rings hold, so a chunk always finds a free
// slot when it is handed back (fill, completion) and neither side can starve
// the other.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: in copy mode the kernel writes a
// received frame that far into its chunk, so a chunk holds chunk-256 bytes
// of a frame (the kernel's rx frame size); a transmitted frame may use the
// whole chunk.
const xdpPacketHeadroom = unix.XDP_PACKET_HEADROOM

// txSendBuffer is SO_SNDBUF: 4 MiB, as the AF_PACKET backend uses, holds a
// whole TX ring (1024 frames) of 1500-byte skbs (truesize ~2.3 KiB) on a
// NIC that completes late; jumbo frames are held back after ~300.
const txSendBuffer = 4 << 20

// errNoMultiBuffer: the kernel refused XDP_USE_SG.
var errNoMultiBuffer = errors.New("the kernel refused multi-buffer AF_XDP (XDP_USE_SG, Linux 6.6+)")

// xskConfig is the geometry of one socket.
type xskConfig struct {
	ifindex, queue int
	chunk          uint32 // bytes per UMEM chunk, a power of two
	rxSize         uint32 // fill and RX ring entries = RX chunks
	txSize         uint32 // TX and completion ring entries = TX chunks
	sg             bool   // bind with XDP_USE_SG: frames may span chunks
	maxFrame       int    // longest frame sendable, bytes
	txBudget       uint32 // XDP_MAX_TX_SKB_BUDGET, 0 to leave the default
}

type xsk struct {
	fd    int
	queue int
	umem  []byte
	chunk uint32
	maps  [][]byte

	// RX side: used only by the reading goroutine (Socket.rxMu).
	fill, rx  ring
	fillAddrs []uint64
	rxDescs   []unix.XDPDesc

	// TX side, under txMu: held once per batch, never per frame.
	txMu      sync.Mutex
	tx, comp  ring
	txDescs   []unix.XDPDesc
	compAddrs []uint64
	txFree    []uint64 // chunk addresses not in the kernel's hands
	maxFrame  int
	// txDrops counts frames the kernel consumed but reported unsent
	// (EBUSY). Written under txMu; atomic so Stats need not wait for a
	// batch in progress.
	txDrops atomic.Uint64
}

func openXSK(c xskConfig) (q *xsk, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket AF_XDP", err)
	}
	q = &xsk{fd: fd, queue: c.queue, chunk: c.chunk, maxFrame: c.maxFrame}
	defer func() {
		if err != nil {
			q.close()
			q = nil
		}
	}()
	nChunks := c.rxSize + c.txSize
	q.umem, err = unix.Mmap(-1, 0, int(nChunks*c.chunk), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return q, os.NewSyscallError("mmap UMEM", err)
	}
	if err = registerUMEM(fd, q.umem, c.chunk); err != nil {
		return q, err
	}
	for _, r := range []struct {
		opt  int
		n    uint32
		name string
	}{
		{unix.XDP_UMEM_FILL_RING, c.rxSize, "XDP_UMEM_FILL_RING"},
		{unix.XDP_UMEM_COMPLETION_RING, c.txSize, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, c.rxSize, "XDP_RX_RING"},
		{unix.XDP_TX_RING, c.txSize, "XDP_TX_RING"},
	} {
		if err = setRingSize(fd, r.opt, r.n, r.name); err != nil {
			return q, err
		}
	}
	off, err := mmapOffsets(fd)
	if err != nil {
		return q, err
	}
	m, r, p, err := mapRing(fd, off.Fr, c.rxSize, addrSize, unix.XDP_UMEM_PGOFF_FILL_RING, "fill ring")
	if err != nil {
		return q, err
	}
	q.maps, q.fill, q.fillAddrs = append(q.maps, m), r, addrSlice(p, c.rxSize)
	if m, r, p, err = mapRing(fd, off.Cr, c.txSize, addrSize, unix.XDP_UMEM_PGOFF_COMPLETION_RING, "completion ring"); err != nil {
		return q, err
	}
	q.maps, q.comp, q.compAddrs = append(q.maps, m), r, addrSlice(p, c.txSize)
	if m, r, p, err = mapRing(fd, off.Rx, c.rxSize, descSize, unix.XDP_PGOFF_RX_RING, "RX ring"); err != nil {
		return q, err
	}
	q.maps, q.rx, q.rxDescs = append(q.maps, m), r, descSlice(p, c.rxSize)
	if m, r, p, err = mapRing(fd, off.Tx, c.txSize, descSize, unix.XDP_PGOFF_TX_RING, "TX ring"); err != nil {
		return q, err
	}
	q.maps, q.tx, q.txDescs = append(q.maps, m), r, descSlice(p, c.txSize)

	// Every RX chunk starts in the fill ring, every TX chunk on the free stack.
	start := q.fill.reserve(c.rxSize)
	for i := uint32(0); i < c.rxSize; i++ {
		q.fillAddrs[q.fill.slot(start+i)] = uint64(i * c.chunk)
	}
	q.fill.publish()
	q.txFree = make([]uint64, 0, c.txSize)
	for i := c.rxSize; i < nChunks; i++ {
		q.txFree = append(q.txFree, uint64(i*c.chunk))
	}

	// Copy mode always: it works on every driver (veth has no zero-copy),
	// and the Port contract copies into caller buffers anyway.
	flags := uint16(unix.XDP_COPY)
	if c.sg {
		flags |= unix.XDP_USE_SG
	}
	if err = bindRetry(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(c.ifindex), QueueID: uint32(c.queue)}); err != nil {
		if c.sg && (err == unix.EINVAL || err == unix.EOPNOTSUPP) {
			return q, fmt.Errorf("bind queue %d: %w: %w", c.queue, errNoMultiBuffer, os.NewSyscallError("bind", err))
		}
		if err == unix.EBUSY {
			return q, fmt.Errorf("bind queue %d: %w (the queue already has an AF_XDP socket: is another prismd or XDP application using this interface?)", c.queue, os.NewSyscallError("bind", err))
		}
		return q, fmt.Errorf("bind queue %d: %w", c.queue, os.NewSyscallError("bind", err))
	}
	// Copy-mode TX charges every skb in flight to the socket's send buffer
	// and returns EAGAIN past it; on a NIC that completes frames by
	// interrupt the 208 KiB default holds fewer frames than one TX ring.
	if e := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, txSendBuffer); e != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, txSendBuffer)
	}
	if c.txBudget > 0 {
		// Copy mode transmits at most this many descriptors per sendto
		// (kernel default 32); raising it to the ring size makes one kick
		// per batch enough. Older kernels lack the option: the kick loop
		// then simply runs once per 32 frames.
		_ = setU32(fd, unix.XDP_MAX_TX_SKB_BUDGET, c.txBudget)
	}
	return q, nil
}

// recv copies whole received frames into bufs and hands their chunks back
// to the fill ring. A frame that does not fit its buffer gets size 0 and is
// counted in oversize. Frames spanning several descriptors (XDP_PKT_CONTD,
// multi-buffer) are reassembled; a frame whose last descriptor the kernel
// has not published yet is left for the next call.
func (q *xsk) recv(bufs [][]byte, sizes []int) (n, oversize int) {
	avail := q.rx.avail(q.rx.size)
	if avail == 0 {
		return 0, 0
	}
	base := q.rx.cachedCons
	// The fill ring has room for every chunk the RX side holds (see the
	// file comment), so no free() check is needed before writing it.
	fp := q.fill.cachedProd
	mask := uint64(q.chunk - 1)
	umemLen := uint64(len(q.umem))
	var used uint32
	for n < len(bufs) && used < avail {
		end := used
		for q.rxDescs[q.rx.slot(base+end)].Options&unix.XDP_PKT_CONTD != 0 {
			if end++; end == avail {
				goto done
			}
		}
		end++
		dst := bufs[n]
		off, ok := 0, true
		for ; used < end; used++ {
			d := &q.rxDescs[q.rx.slot(base+used)]
			a, l := d.Addr, uint64(d.Len)
			if ok && off+int(l) <= len(dst) && a+l <= umemLen {
				copy(dst[off:], q.umem[a:a+l])
				off += int(l)
			} else {
				ok = false
			}
			q.fillAddrs[q.fill.slot(fp)] = a &^ mask
			fp++
		}
		if ok {
			sizes[n] = off
		} else {
			sizes[n] = 0
			oversize++
		}
		n++
	}
done:
	if used > 0 {
		q.fill.reserve(fp - q.fill.cachedProd)
		q.fill.publish()
		q.rx.release(used)
	}
	return n, oversize
}

// reap moves completed TX chunks back to the free stack. Under txMu.
func (q *xsk) reap() {
	n := q.comp.avail(q.comp.size)
	if n == 0 {
		return
	}
	base := q.comp.cachedCons
	for i := uint32(0); i < n; i++ {
		q.txFree = append(q.txFree, q.compAddrs[q.comp.slot(base+i)]&^uint64(q.chunk-1))
	}
	q.comp.release(n)
}

// send copies bufs into TX chunks, publishes them with one producer store
// and kicks the kernel once (more only if it stops early). It returns how
// many frames were queued; a frame longer than maxFrame or empty is skipped
// with an error, and when no chunk is free even after a kick the rest of the
// batch is dropped with ErrTxFull. Under txMu.
func (q *xsk) send(bufs [][]byte) (sent int, err error) {
	q.reap()
	chunk := int(q.chunk)
	for i, b := range bufs {
		l := len(b)
		if l == 0 || l > q.maxFrame {
			if err == nil {
				err = fmt.Errorf("%w: frame %d is %d bytes, the port takes 1..%d", ErrFrameSize, i, l, q.maxFrame)
			}
			continue
		}
		need := uint32((l + chunk - 1) / chunk)
		if uint32(len(q.txFree)) < need || q.tx.free(need) < need {
			// Everything is in flight: let the kernel send what is queued
			// (copy mode completes on the spot for most drivers), then
			// collect the completions.
			q.tx.publish()
			if kerr := q.kick(); kerr != nil {
				return sent, kerr
			}
			q.reap()
			if uint32(len(q.txFree)) < need || q.tx.free(need) < need {
				if err == nil {
					err = ErrTxFull
				}
				break
			}
		}
		start := q.tx.reserve(need)
		off := 0
		for k := uint32(0); k < need; k++ {
			a := q.txFree[len(q.txFree)-1]
			q.txFree = q.txFree[:len(q.txFree)-1]
			m := min(chunk, l-off)
			copy(q.umem[a:a+uint64(m)], b[off:off+m])
			d := &q.txDescs[q.tx.slot(start+k)]
			d.Addr, d.Len, d.Options = a, uint32(m), 0
			if k+1 < need {
				d.Options = unix.XDP_PKT_CONTD
			}
			off += m
		}
		sent++
	}
	q.tx.publish()
	if kerr := q.kick(); kerr != nil && err == nil {
		err = kerr
	}
	return sent, err
}

// maxStalls bounds kicks that move nothing (the driver queue is stopped):
// the descriptors then stay queued and go out with the next kick, which the
// next send or the reader's poll (poll drives TX in copy mode) makes.
const maxStalls = 2

// kick runs sendto until the kernel has consumed the whole TX ring. With the
// raised TX budget that is one call per batch; EAGAIN (budget exhausted,
// or the driver queue busy) and EBUSY (the driver dropped one frame, which
// the kernel completes anyway) mean "call again".
func (q *xsk) kick() error {
	stalls := 0
	for !q.tx.drained() {
		before := q.tx.cachedCons
		switch e := sendtoKick(q.fd); e {
		case 0, unix.EAGAIN, unix.EINTR, unix.ENOBUFS:
		case unix.EBUSY:
			q.txDrops.Add(1)
		default:
			return os.NewSyscallError("sendto", e)
		}
		if q.tx.drained() {
			break
		}
		if q.tx.cachedCons == before {
			if stalls++; stalls >= maxStalls {
				return nil
			}
		}
	}
	return nil
}

func (q *xsk) close() {
	if q.fd >= 0 {
		_ = unix.Close(q.fd)
		q.fd = -1
	}
	// The kernel pinned the UMEM pages at registration and holds them until
	// the socket is released, so unmapping our view here is safe even if
	// the socket outlives this call briefly.
	for _, m := range q.maps {
		_ = unix.Munmap(m)
	}
	q.maps = nil
	if q.umem != nil {
		_ = unix.Munmap(q.umem)
		q.umem = nil
	}
}

// bindBusyWait bounds how long bind waits for a queue to come free.
const bindBusyWait = 2 * time.Second

// bindRetry binds, retrying EBUSY for up to bindBusyWait. The kernel frees
// a closed AF_XDP socket's hold on its queue from a work queue (the buffer
// pool is released after the last reference, not in close), so a port
// reopened right after Close (a reload, a restart, a test) found the queue
// still taken about one time in five. A queue held by a live application
// stays busy and still fails, after the wait.
func bindRetry(fd int, sa *unix.SockaddrXDP) error {
	deadline := time.Now().Add(bindBusyWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := unix.Bind(fd, sa)
		if err != unix.EBUSY || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
	}
}

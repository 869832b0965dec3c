package afpacket

// This file owns the TPACKET_V3 mmap RX ring: its geometry, the mapping and
// the walk over retired blocks. The ring saves, per frame, the skb
// queueing, the recvmmsg header copies and, above all, the socket wakeup:
// a V3 socket signals readability once per block (when it is full or its
// timeout expires), not once per frame. recv copies frames out into the
// caller's buffers (the Port contract); lend hands them out in place and
// keeps their blocks from the kernel until giveBack, which saves that copy
// too.

import (
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/internal/prefetch"
)

const (
	// minBlockSize is the smallest ring block (see blockSizeFor).
	minBlockSize = 32 << 10
	// framesPerBlock is how many full-size frames a block holds at least.
	framesPerBlock = 12
	// frameOverhead bounds what a frame takes in a block beyond its MTU:
	// Ethernet header, VLAN tag, tpacket3_hdr, sockaddr_ll and alignment.
	frameOverhead = 128
	// ringFrameSize only sets the frame_nr bookkeeping value the kernel checks;
	// V3 packs frames of any size into a block.
	ringFrameSize = 2048
	// DefaultRingTimeout bounds how long a frame can sit in a partly filled
	// block before the kernel hands the block over: 1 ms is the smallest
	// value the kernel accepts and matches the engine's tick.
	DefaultRingTimeout = time.Millisecond
	// blockStatusOff is the offset of tpacket_hdr_v1.block_status inside a
	// block (after tpacket_block_desc.version and offset_to_priv).
	blockStatusOff = 8
)

// blockSizeFor returns the ring block size for an interface MTU: the
// smallest power of two of at least minBlockSize that holds framesPerBlock
// full-size frames, so 32 KiB up to MTU 2600 and 128 KiB for jumbo frames.
//
// A block is handed over when full or after the retire timeout (1 ms at
// least), so at the tens of thousands of frames/s a rank offers, a block
// larger than needed mostly waits for its timeout and each hop of a
// collective adds up to 1 ms; a block of too few frames costs a wakeup
// every few frames. Measured (16M FP32 ALLREDUCE, same machine, A/B):
// MTU 1500 SINGLE lab, 128 KiB 206-209 ms, 32 KiB 154-157 ms, 16 KiB
// 165-205 ms with forwarding vs a bridge falling to 0.97 / 0.67 (64 B /
// 1500 B; 32 KiB stayed within run-to-run noise of 128 KiB); MTU 9000
// spine-leaf, 128 KiB (14 jumbo frames) 992-1040 ms, 32 KiB (3) 1186-1283 ms.
func blockSizeFor(mtu int) int {
	bs := minBlockSize
	for bs < framesPerBlock*(mtu+frameOverhead) {
		bs *= 2
	}
	return bs
}

// ring is the mapped RX ring. It is used by the one reading goroutine only.
type ring struct {
	mem     []byte
	bs      int // block size
	nblocks int
	cur     int    // block the reader is at
	owned   bool   // cur has been handed to user space and is being walked
	left    uint32 // frames left in cur
	off     uint32 // offset of the next frame in cur
	// lent counts the walked blocks behind cur that lend has not handed
	// back to the kernel yet: frames in them are still lent out.
	lent int
	// csum counts the partial checksums the walk finished (the socket's).
	csum *Checksums
	// held counts the blocks with frames the walk entered, those of them
	// the kernel retired on its timer rather than full, and their frames
	// (the socket's, Socket.Held): each of those waited in the ring for up
	// to the block timeout.
	held *Held
}

// setupRing switches fd to TPACKET_V3 and maps an RX ring of about total
// bytes, in blocks sized for the interface MTU (blockSizeFor), whose walks
// count into csum and held.
func setupRing(fd int, total int, timeout time.Duration, mtu int, csum *Checksums, held *Held) (*ring, error) {
	ringBlockSize := blockSizeFor(mtu)
	if e := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); e != nil {
		return nil, os.NewSyscallError("setsockopt PACKET_VERSION", e)
	}
	nb := total / ringBlockSize
	if nb < 4 {
		nb = 4
	}
	tov := uint32(timeout / time.Millisecond)
	if tov < 1 {
		tov = 1
	}
	req := unix.TpacketReq3{
		Block_size:     uint32(ringBlockSize),
		Block_nr:       uint32(nb),
		Frame_size:     ringFrameSize,
		Frame_nr:       uint32(nb * ringBlockSize / ringFrameSize),
		Retire_blk_tov: tov,
	}
	if e := unix.SetsockoptTpacketReq3(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); e != nil {
		return nil, os.NewSyscallError("setsockopt PACKET_RX_RING", e)
	}
	mem, e := unix.Mmap(fd, 0, nb*ringBlockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if e != nil {
		return nil, os.NewSyscallError("mmap rx ring", e)
	}
	return &ring{mem: mem, bs: ringBlockSize, nblocks: nb, csum: csum, held: held}, nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

func (r *ring) status(b int) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.mem[b*r.bs+blockStatusOff]))
}

// ready reports whether a frame can be read without waiting.
func (r *ring) ready() bool {
	return r.owned || atomic.LoadUint32(r.status(r.cur))&unix.TP_STATUS_USER != 0
}

// release gives the current block back to the kernel and moves on.
func (r *ring) release() {
	atomic.StoreUint32(r.status(r.cur), unix.TP_STATUS_KERNEL)
	r.owned = false
	r.cur++
	if r.cur == r.nblocks {
		r.cur = 0
	}
}

// enter makes the first retired block with frames the current one, moving
// past empty ones (kept from the kernel with the lent blocks when lending,
// so that those stay the run of blocks behind cur); false if no block is
// retired yet.
func (r *ring) enter(lending bool) bool {
	for {
		st := atomic.LoadUint32(r.status(r.cur))
		if st&unix.TP_STATUS_USER == 0 {
			return false
		}
		bh := (*unix.TpacketHdrV1)(unsafe.Pointer(&r.mem[r.cur*r.bs+blockStatusOff]))
		r.owned, r.left, r.off = true, bh.Num_pkts, bh.Offset_to_first_pkt
		if r.left > 0 {
			if r.held != nil {
				r.held.Blocks.Add(1)
				if st&unix.TP_STATUS_BLK_TMO != 0 {
					r.held.Timed.Add(1)
					r.held.Frames.Add(uint64(r.left))
				}
			}
			if lending {
				// Load the whole retired block now: the walk of its
				// frame headers is a chain of dependent cache misses
				// (each header names the next), and the bodies are
				// read next, by the engine or by the kernel copying
				// a forwarded frame out (SINGLE lab, 3 interleaved
				// pairs: forwarding 632-696k against 591-658k
				// frames/s, the engine's user time per DATA frame
				// 351-365 against 366-391 ns).
				b := r.cur * r.bs
				prefetch.Bytes(r.mem[b : b+min(int(bh.Blk_len), r.bs)])
			}
			return true
		}
		if lending {
			r.passLent()
			if r.lent >= r.nblocks-1 {
				return false
			}
		} else {
			r.release()
		}
	}
}

// giveBack hands the kernel the blocks whose frames lend lent out.
func (r *ring) giveBack() {
	for ; r.lent > 0; r.lent-- {
		b := r.cur - r.lent
		if b < 0 {
			b += r.nblocks
		}
		atomic.StoreUint32(r.status(b), unix.TP_STATUS_KERNEL)
	}
}

// lend is recv without the copy: frames[i] is the i-th frame in place in
// the ring (capacity limited to the frame), or bufs[i] holding a copy when
// its VLAN tag must be put back, or nil for a frame the ring truncated or
// longer than len(bufs[i]) (counted in trunc). A walked block is not
// handed back to the kernel until giveBack, so the frames stay valid until
// then. The walk stops one block short of the oldest lent block: beyond
// it, the ring would read a lent block again as new.
func (r *ring) lend(bufs, frames [][]byte) (n, trunc int) {
	var ck csumTally
	for n < len(frames) {
		if !r.owned && (r.lent >= r.nblocks-1 || !r.enter(true)) {
			break
		}
		h, start := r.frame()
		snap, length := int(h.Snaplen), int(h.Len)
		switch {
		case h.Status&unix.TP_STATUS_VLAN_VALID != 0 && snap >= 12:
			var size int
			size, trunc = copyFrame(bufs[n], r.mem[start:start+snap], length, h.Status, h.Hv1.Vlan_tpid, uint16(h.Hv1.Vlan_tci), trunc)
			frames[n] = bufs[n][:size]
			if size == 0 {
				frames[n] = nil
			}
		case snap < length || length > len(bufs[n]):
			frames[n] = nil
			trunc++
		default:
			frames[n] = r.mem[start : start+snap : start+snap]
		}
		if h.Status&unix.TP_STATUS_CSUMNOTREADY != 0 && frames[n] != nil {
			ck.complete(frames[n]) // in place: the ring is mapped writable
		}
		n++
		r.step(h, true)
	}
	r.csum.add(ck)
	return n, trunc
}

// frame returns the current frame's header and the offset in mem of its
// first byte.
func (r *ring) frame() (*unix.Tpacket3Hdr, int) {
	at := r.cur*r.bs + int(r.off)
	h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&r.mem[at]))
	return h, at + int(h.Mac)
}

// step moves past the current frame h and, after a block's last frame,
// past the block: handed back to the kernel, or kept with the lent ones.
func (r *ring) step(h *unix.Tpacket3Hdr, lending bool) {
	r.off += h.Next_offset
	if r.left--; r.left > 0 {
		return
	}
	if lending {
		r.passLent()
	} else {
		r.release()
	}
}

// passLent moves past the current block, keeping it from the kernel.
func (r *ring) passLent() {
	r.owned = false
	r.lent++
	if r.cur++; r.cur == r.nblocks {
		r.cur = 0
	}
}

// recv copies up to len(bufs) frames out of retired blocks, without
// waiting. sizes[i] = 0 marks a frame that did not fit its buffer (or that
// the ring truncated), counted in trunc. A block is returned to the kernel as
// soon as its last frame is copied.
func (r *ring) recv(bufs [][]byte, sizes []int) (n, trunc int) {
	var ck csumTally
	for n < len(bufs) {
		if !r.owned && !r.enter(false) {
			break
		}
		h, start := r.frame()
		sizes[n], trunc = copyFrame(bufs[n], r.mem[start:start+int(h.Snaplen)], int(h.Len), h.Status, h.Hv1.Vlan_tpid, uint16(h.Hv1.Vlan_tci), trunc)
		if h.Status&unix.TP_STATUS_CSUMNOTREADY != 0 && sizes[n] != 0 {
			ck.complete(bufs[n][:sizes[n]])
		}
		n++
		r.step(h, false)
	}
	r.csum.add(ck)
	return n, trunc
}

// copyFrame copies a ring frame (its captured bytes data, its wire length
// length) into buf and returns its size, or 0 and trunc+1 for a frame the
// ring truncated or buf cannot hold.
func copyFrame(buf, data []byte, length int, status uint32, tpid, tci uint16, trunc int) (int, int) {
	snap := len(data)
	// The kernel moves an 802.1Q tag into the metadata (skb_vlan_untag
	// runs before packet taps); put it back so tagged frames are bridged
	// unchanged, as they are by the Linux bridge.
	vlan := status&unix.TP_STATUS_VLAN_VALID != 0 && snap >= 12
	extra := 0
	if vlan {
		extra = 4
	}
	switch {
	case snap < length || length+extra > len(buf):
		return 0, trunc + 1
	case vlan:
		copy(buf[:12], data[:12])
		if status&unix.TP_STATUS_VLAN_TPID_VALID == 0 {
			tpid = unix.ETH_P_8021Q
		}
		buf[12], buf[13], buf[14], buf[15] = byte(tpid>>8), byte(tpid), byte(tci>>8), byte(tci)
		copy(buf[16:], data[12:snap])
		return snap + 4, trunc
	default:
		return copy(buf, data), trunc
	}
}

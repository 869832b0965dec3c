package afpacket

// This file owns the TPACKET_V3 mmap RX ring: its geometry, the mapping and
// the walk over retired blocks. Frames are copied out of the ring into the
// caller's buffers (the Port contract has caller-owned buffers), which costs
// one memcpy per frame but saves, per frame, the skb queueing, the
// recvmmsg header copies and, above all, the socket wakeup: a V3 socket
// signals readability once per block (when it is full or its timeout
// expires), not once per frame.

import (
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
}

// setupRing switches fd to TPACKET_V3 and maps an RX ring of about total
// bytes, in blocks sized for the interface MTU (blockSizeFor).
func setupRing(fd int, total int, timeout time.Duration, mtu int) (*ring, error) {
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
	return &ring{mem: mem, bs: ringBlockSize, nblocks: nb}, nil
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

// recv copies up to len(bufs) frames out of retired blocks, without
// waiting. sizes[i] = 0 marks a frame that did not fit its buffer (or that
// the ring truncated), counted in trunc. A block is returned to the kernel as
// soon as its last frame is copied.
func (r *ring) recv(bufs [][]byte, sizes []int) (n, trunc int) {
	for n < len(bufs) {
		if !r.owned {
			st := r.status(r.cur)
			if atomic.LoadUint32(st)&unix.TP_STATUS_USER == 0 {
				break
			}
			bh := (*unix.TpacketHdrV1)(unsafe.Pointer(&r.mem[r.cur*r.bs+blockStatusOff]))
			r.owned, r.left, r.off = true, bh.Num_pkts, bh.Offset_to_first_pkt
			if r.left == 0 {
				r.release()
				continue
			}
		}
		base := r.cur * r.bs
		h := (*unix.Tpacket3Hdr)(unsafe.Pointer(&r.mem[base+int(r.off)]))
		data := r.mem[base+int(r.off)+int(h.Mac):]
		snap, length := int(h.Snaplen), int(h.Len)
		buf := bufs[n]
		// The kernel moves an 802.1Q tag into the metadata (skb_vlan_untag
		// runs before packet taps); put it back so tagged frames are bridged
		// unchanged, as they are by the Linux bridge.
		vlan := h.Status&unix.TP_STATUS_VLAN_VALID != 0 && snap >= 12
		extra := 0
		if vlan {
			extra = 4
		}
		switch {
		case snap < length || length+extra > len(buf):
			sizes[n] = 0
			trunc++
		case vlan:
			copy(buf[:12], data[:12])
			tpid := uint16(unix.ETH_P_8021Q)
			if h.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
				tpid = h.Hv1.Vlan_tpid
			}
			tci := uint16(h.Hv1.Vlan_tci)
			buf[12], buf[13], buf[14], buf[15] = byte(tpid>>8), byte(tpid), byte(tci>>8), byte(tci)
			copy(buf[16:], data[12:snap])
			sizes[n] = snap + 4
		default:
			sizes[n] = copy(buf, data[:snap])
		}
		n++
		r.off += h.Next_offset
		r.left--
		if r.left == 0 {
			r.release()
		}
	}
	return n, trunc
}

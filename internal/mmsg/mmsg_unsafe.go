// This file owns the mmsghdr/iovec arrays and the raw system calls.

package mmsg

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Recv is a receive batch of up to Max frames.
type Recv struct {
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	want  int
	n     int
	errno unix.Errno
	fn    func(fd uintptr) bool
	// ctl holds one PACKET_AUXDATA control message per frame (NewRecvAux),
	// auxSpace bytes each; nil without.
	ctl []byte
}

// auxSpace is the control buffer of one frame: a cmsghdr and its
// tpacket_auxdata, aligned.
var (
	auxLen   = unix.CmsgLen(int(unsafe.Sizeof(unix.TpacketAuxdata{})))
	auxSpace = unix.CmsgSpace(int(unsafe.Sizeof(unix.TpacketAuxdata{})))
)

// NewRecv returns a receive batch of up to max frames.
func NewRecv(max int) *Recv {
	r := &Recv{msgs: make([]unix.Mmsghdr, max), iovs: make([]unix.Iovec, max)}
	for i := range r.msgs {
		r.msgs[i].Hdr.Iov = &r.iovs[i]
		r.msgs[i].Hdr.Iovlen = 1
	}
	r.fn = r.readFunc()
	return r
}

// NewRecvAux is NewRecv with room for each frame's PACKET_AUXDATA control
// message, for a packet socket with that option set: Status reads it. The
// buffers are made here, once, so a batch still allocates nothing.
func NewRecvAux(max int) *Recv {
	r := NewRecv(max)
	r.ctl = make([]byte, max*auxSpace)
	for i := range r.msgs {
		r.msgs[i].Hdr.Control = &r.ctl[i*auxSpace]
	}
	return r
}

func (r *Recv) readFunc() func(fd uintptr) bool {
	return func(fd uintptr) bool {
		// MSG_TRUNC makes msg_len the real frame length, so an oversized
		// frame is detected instead of silently cut. The call never
		// blocks (MSG_DONTWAIT; the netpoller does the waiting), so it is
		// a raw system call: the scheduler is not told, and does not hand
		// this P to another thread while it runs.
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(r.want),
			unix.MSG_TRUNC|unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.n = int(n)
			return true
		case unix.EAGAIN, unix.EINTR:
			return false // wait in the netpoller
		default:
			r.errno = e
			return true
		}
	}
}

// Max is the most frames one batch reads.
func (r *Recv) Max() int { return len(r.msgs) }

// Prepare points the batch at bufs (at most Max of them) and clears the
// previous result.
func (r *Recv) Prepare(bufs [][]byte) {
	for i, b := range bufs {
		r.iovs[i].Base = unsafe.SliceData(b)
		r.iovs[i].SetLen(len(b))
		r.msgs[i].Len = 0
		r.msgs[i].Hdr.Flags = 0
		if r.ctl != nil {
			// The kernel leaves the length it used here.
			r.msgs[i].Hdr.SetControllen(auxSpace)
		}
	}
	r.want = len(bufs)
	r.n, r.errno = 0, 0
}

// Read is the function for syscall.RawConn.Read: one non-blocking
// recvmmsg; it asks to wait in the netpoller when nothing is queued.
func (r *Recv) Read(fd uintptr) bool { return r.fn(fd) }

// ReadFunc returns Read as a value built once, so passing it to
// RawConn.Read allocates nothing.
func (r *Recv) ReadFunc() func(fd uintptr) bool { return r.fn }

// Result returns how many frames the last Read got, or its error.
func (r *Recv) Result() (int, unix.Errno) { return r.n, r.errno }

// Size returns frame i's length, 0 if it did not fit in capacity bytes.
func (r *Recv) Size(i, capacity int) int {
	l := int(r.msgs[i].Len)
	if l > capacity || r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
		return 0
	}
	return l
}

// Status returns tpacket_auxdata.tp_status of frame i of the last Read
// (TP_STATUS_* bits), or 0 when the frame came without one (a Recv made by
// NewRecv, or a socket without PACKET_AUXDATA).
func (r *Recv) Status(i int) uint32 {
	st, _, _ := r.Aux(i)
	return st
}

// Aux returns frame i's tpacket_auxdata: its status (TP_STATUS_* bits) and
// the 802.1Q tag the kernel took out of the frame (tci, and tpid when
// TP_STATUS_VLAN_TPID_VALID), valid when TP_STATUS_VLAN_VALID is set; all
// 0 when the frame came without auxdata.
func (r *Recv) Aux(i int) (status uint32, tci, tpid uint16) {
	h := &r.msgs[i].Hdr
	if r.ctl == nil || int(h.Controllen) < auxLen {
		return 0, 0, 0
	}
	// The kernel puts PACKET_AUXDATA first (packet_recvmsg), and the
	// buffer holds only one.
	c := (*unix.Cmsghdr)(unsafe.Pointer(h.Control))
	if c.Level != unix.SOL_PACKET || c.Type != unix.PACKET_AUXDATA {
		return 0, 0, 0
	}
	a := (*unix.TpacketAuxdata)(unsafe.Add(unsafe.Pointer(h.Control), unix.CmsgLen(0)))
	return a.Status, a.Vlan_tci, a.Vlan_tpid
}

// Send is a transmit batch of up to Max frames.
type Send struct {
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
}

// NewSend returns a transmit batch of up to max frames.
func NewSend(max int) *Send {
	t := &Send{msgs: make([]unix.Mmsghdr, max), iovs: make([]unix.Iovec, max)}
	for i := range t.msgs {
		t.msgs[i].Hdr.Iov = &t.iovs[i]
		t.msgs[i].Hdr.Iovlen = 1
	}
	return t
}

// Max is the most frames one sendmmsg moves.
func (t *Send) Max() int { return len(t.msgs) }

// Prepare points the first len(frames) messages (at most Max) at frames.
func (t *Send) Prepare(frames [][]byte) {
	for i, b := range frames {
		t.iovs[i].Base = unsafe.SliceData(b)
		t.iovs[i].SetLen(len(b))
	}
}

// Sendmmsg sends the first want prepared messages on the blocking socket fd.
//
// The first attempt is a raw non-blocking call, which does not tell the Go
// scheduler it is in a system call, so sysmon does not hand this P to
// another thread when a large batch takes longer than its 20 us threshold
// (that hand-off, a thread wakeup and a P reacquisition per batch, cost
// ~12% of prismd's CPU in the forwarding profile). Only a full send buffer
// falls back to a blocking call, bounded by the socket's SO_SNDTIMEO.
// gVisor's fdbased endpoint does the same.
func (t *Send) Sendmmsg(fd, want int) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(want),
		unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		n, _, e = unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(want), 0, 0, 0)
	}
	if e != 0 {
		return 0, e // sendmmsg reports an error only when it sent nothing
	}
	return int(n), 0
}

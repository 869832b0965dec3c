// This file owns the pre-built mmsghdr/iovec arrays and the raw recvmmsg and
// sendmmsg system calls. The receive closure handed to RawConn.Read is
// built once and transmit states are pooled, so a batch allocates nothing.

package rawio

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

type rxState struct {
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	want  int
	n     int
	errno unix.Errno
	fn    func(fd uintptr) bool
}

func (r *rxState) init(max int) {
	r.msgs = make([]unix.Mmsghdr, max)
	r.iovs = make([]unix.Iovec, max)
	for i := range r.msgs {
		r.msgs[i].Hdr.Iov = &r.iovs[i]
		r.msgs[i].Hdr.Iovlen = 1
	}
	r.fn = func(fd uintptr) bool {
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

// set points the first len(bufs) messages at bufs.
func (r *rxState) set(bufs [][]byte) {
	for i, b := range bufs {
		r.iovs[i].Base = unsafe.SliceData(b)
		r.iovs[i].SetLen(len(b))
		r.msgs[i].Len = 0
		r.msgs[i].Hdr.Flags = 0
	}
	r.want = len(bufs)
	r.n, r.errno = 0, 0
}

// size returns message i's frame length, 0 if it did not fit in capacity.
func (r *rxState) size(i, capacity int) int {
	l := int(r.msgs[i].Len)
	if l > capacity || r.msgs[i].Hdr.Flags&unix.MSG_TRUNC != 0 {
		return 0
	}
	return l
}

type txState struct {
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
}

func newTxState(max int) *txState {
	t := &txState{msgs: make([]unix.Mmsghdr, max), iovs: make([]unix.Iovec, max)}
	for i := range t.msgs {
		t.msgs[i].Hdr.Iov = &t.iovs[i]
		t.msgs[i].Hdr.Iovlen = 1
	}
	return t
}

func (t *txState) set(frames [][]byte) {
	for i, b := range frames {
		t.iovs[i].Base = unsafe.SliceData(b)
		t.iovs[i].SetLen(len(b))
	}
}

// sendmmsg sends the first want prepared messages on the blocking TX socket.
// The first attempt is a raw non-blocking call, which does not tell the
// scheduler it is in a system call (so a long batch does not hand this P to
// another thread); only a full send buffer falls back to a blocking call,
// bounded by SO_SNDTIMEO.
func (t *txState) sendmmsg(fd, want int) (int, unix.Errno) {
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

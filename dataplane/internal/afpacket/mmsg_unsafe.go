package afpacket

// This file owns the pre-built mmsghdr/iovec arrays and the raw
// recvmmsg/sendmmsg system calls. The RX closure passed to RawConn.Read is
// built once per socket and TX states are pooled, so the per-batch path
// allocates nothing.

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
		// frame is detected instead of being silently cut.
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(r.want),
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

// sendmmsg sends the first want prepared messages on the blocking TX socket fd.
//
// The first attempt is a non-blocking raw system call: it does not tell the Go
// scheduler it is in a system call, so sysmon does not hand this P to another
// thread when a large batch takes longer than its 20 us threshold (that hand-off,
// a thread wakeup and a P reacquisition per batch, cost ~12% of prismd's CPU in
// the forwarding profile). Only if the send buffer is full does it block, as
// an ordinary system call, bounded by SO_SNDTIMEO. gVisor's fdbased endpoint
// does the same.
func (t *txState) sendmmsg(fd, want int) (int, unix.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd),
		uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(want), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		n, _, e = unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd),
			uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(want), 0, 0, 0)
	}
	if e != 0 {
		return 0, e // nothing was sent: sendmmsg reports an error only then
	}
	return int(n), 0
}

package afpacket

// This file owns the pre-built mmsghdr/iovec arrays and the raw
// recvmmsg/sendmmsg system calls. The closures passed to RawConn.Read/Write
// are built once per socket (RX) or per pooled TX state, so the per-batch path
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
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	want  int
	n     int
	errno unix.Errno
	fn    func(fd uintptr) bool
}

func newTxState(max int) *txState {
	t := &txState{msgs: make([]unix.Mmsghdr, max), iovs: make([]unix.Iovec, max)}
	for i := range t.msgs {
		t.msgs[i].Hdr.Iov = &t.iovs[i]
		t.msgs[i].Hdr.Iovlen = 1
	}
	t.fn = func(fd uintptr) bool {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&t.msgs[0])), uintptr(t.want),
			unix.MSG_DONTWAIT, 0, 0)
		t.n = 0
		switch e {
		case 0:
			t.n = int(n)
			return true
		case unix.EAGAIN, unix.EINTR:
			return false
		default:
			t.errno = e
			return true
		}
	}
	return t
}

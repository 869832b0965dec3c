// This file owns the transmit-only AF_PACKET socket both raw-socket users
// open next to their receive socket.

package mmsg

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// TxSocket is a transmit-only AF_PACKET socket bound to one interface.
// Protocol 0 registers no receive hook, so nothing is ever queued on it, and
// it is never registered with the Go netpoller, which would otherwise be
// woken (EPOLLOUT) each time the kernel frees one of its sent frames: a
// goroutine wakeup (and often a context switch of an idle thread) per frame.
// A send blocks on a full buffer at most the timeout given to OpenTx, so a
// closed socket is noticed. Safe for concurrent use; Close waits for senders.
type TxSocket struct {
	mu sync.RWMutex // read-held while sending, so Close never closes fd under a sender
	fd int
}

// OpenTx opens the transmit socket of interface ifindex with send buffer
// bufSize (SO_SNDBUFFORCE, falling back to the capped SO_SNDBUF without
// CAP_NET_ADMIN), send timeout timeout, and PACKET_QDISC_BYPASS if bypass.
func OpenTx(ifindex, bufSize int, timeout time.Duration, bypass bool) (*TxSocket, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (*TxSocket, error) {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError(op, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		return fail("bind", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, bufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, bufSize)
	}
	tv := unix.NsecToTimeval(int64(timeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return fail("setsockopt SO_SNDTIMEO", err)
	}
	if bypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fail("setsockopt PACKET_QDISC_BYPASS", err)
		}
	}
	return &TxSocket{fd: fd}, nil
}

// Sendmmsg sends t's first want prepared messages; n < 0 means the socket is
// closed. It implements Sender.
func (s *TxSocket) Sendmmsg(t *Send, want int) (int, unix.Errno) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return -1, 0
	}
	return t.Sendmmsg(s.fd, want)
}

// Running reports whether interface name (the one the socket is bound to)
// is up and operationally running, which a link without carrier is not
// (SIOCGIFFLAGS: IFF_UP and IFF_RUNNING; IFF_LOWER_UP does not fit its
// 16 bits). It is asked only after the device refused a batch.
func (s *TxSocket) Running(name string) (bool, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return false, os.ErrClosed
	}
	if err := unix.IoctlIfreq(s.fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return false, os.NewSyscallError("ioctl SIOCGIFFLAGS", err)
	}
	f := ifr.Uint16()
	return f&unix.IFF_UP != 0 && f&unix.IFF_RUNNING != 0, nil
}

// Closed implements Sender.
func (s *TxSocket) Closed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fd < 0
}

// Close closes the socket once no send is in progress; later sends report
// it closed. Closing twice is harmless.
func (s *TxSocket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

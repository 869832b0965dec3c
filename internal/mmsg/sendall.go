// This file owns the transmit loop over a Send batch.

package mmsg

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Sender is what SendAll needs from a socket: send the first want prepared
// messages of t (n < 0: the socket is closed), and whether it was closed.
type Sender interface {
	Sendmmsg(t *Send, want int) (n int, errno unix.Errno)
	Closed() bool
}

// SendAll transmits frames in order through t and returns how many were
// sent. sendmmsg stops at the first frame the kernel rejects (EMSGSIZE, or
// ENOBUFS when a peer's backlog is full): that one frame is skipped and the
// first such error returned, so one bad frame does not cost the rest of the
// batch. EAGAIN (a send buffer still full after the socket's timeout) and
// EINTR retry until the socket is closed (net.ErrClosed). An errno for which
// fatal returns true (an interface gone) ends the call at once.
func SendAll(s Sender, t *Send, frames [][]byte, fatal func(unix.Errno) bool) (int, error) {
	sent, failed := 0, 0
	var firstErr error
	for sent < len(frames) {
		chunk := frames[sent:]
		if len(chunk) > t.Max() {
			chunk = chunk[:t.Max()]
		}
		t.Prepare(chunk)
		n, errno := s.Sendmmsg(t, len(chunk))
		if n < 0 {
			return sent - failed, net.ErrClosed
		}
		sent += n
		switch {
		case errno == 0:
		case errno == unix.EAGAIN || errno == unix.EINTR:
			if s.Closed() {
				return sent - failed, net.ErrClosed
			}
		case fatal != nil && fatal(errno):
			return sent - failed, os.NewSyscallError("sendmmsg", errno)
		default:
			if firstErr == nil {
				firstErr = os.NewSyscallError("sendmmsg", errno)
			}
			failed++
			sent++
		}
	}
	return sent - failed, firstErr
}

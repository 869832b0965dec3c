// This file owns the transmit loop over a Send batch.

package mmsg

import (
	"errors"
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

// ErrDeviceRefuses is what SendAll returns when the device refused two
// frames in a row with ENOBUFS and SendAll gave up on the rest of the
// batch. That is how the kernel answers every frame sent to a link without
// carrier (a veth whose peer is down, a NIC whose cable is out: the driver
// path drops it, NET_XMIT_DROP), and going on frame by frame cost a system
// call per frame: on a 2-core VM a switch flooding to such a port made
// over a million failing sendmmsg calls a second. A full backlog refuses
// the same way for a moment; the frames of that batch are then lost, as on
// any congested link. The caller can tell the two apart by the link's
// state.
var ErrDeviceRefuses = errors.New("the device refused two frames in a row (ENOBUFS); the rest of the batch was not sent")

// LinkGone is SendAll's fatal for a socket bound to one interface: the
// interface is down or gone (ENETDOWN, ENXIO, ENODEV), so no frame of the
// batch can go and retrying frame by frame cannot help.
func LinkGone(e unix.Errno) bool { return e == unix.ENETDOWN || e == unix.ENXIO || e == unix.ENODEV }

// SendAll transmits frames in order through t and returns how many were
// sent. sendmmsg stops at the first frame the kernel rejects (EMSGSIZE, or
// ENOBUFS when a peer's backlog is full): that one frame is skipped and the
// first such error returned, so one bad frame does not cost the rest of the
// batch; a second ENOBUFS right after the first ends the call
// (ErrDeviceRefuses). EAGAIN (a send buffer still full after the socket's
// timeout) and EINTR retry until the socket is closed (net.ErrClosed). An
// errno for which fatal returns true (an interface gone) ends the call at
// once.
func SendAll(s Sender, t *Send, frames [][]byte, fatal func(unix.Errno) bool) (int, error) {
	sent, failed := 0, 0
	refusedRun := 0 // frames refused since the last one the kernel took
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
		if n > 0 {
			refusedRun = 0
		}
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
			if refusedRun++; errno == unix.ENOBUFS && refusedRun >= 2 {
				return sent - failed, ErrDeviceRefuses
			}
		}
	}
	return sent - failed, firstErr
}

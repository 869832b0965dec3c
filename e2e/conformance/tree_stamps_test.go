package conformance

// Kernel receive timestamps (SO_TIMESTAMPNS) of the PRISM frames reaching a
// lab host, on a second raw socket beside the nic of lab_test.go: the
// spacing rules of section 7 (failure announcements 10 ms apart) are
// checked on these, not on the user-space times a busy reader goroutine
// takes late.

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/deploy"
)

type trStamps struct {
	name string
	fd   int
	mu   sync.Mutex
	log  []rxFrame // At = kernel receive time
	stop bool
	done chan struct{}
}

func openTrStamps(t *testing.T, lab *deploy.Lab, node, iface string) *trStamps {
	t.Helper()
	s := &trStamps{name: node + ":" + iface, done: make(chan struct{})}
	err := lab.Do(node, func() error {
		fd, _, err := openRaw(iface)
		if err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			unix.Close(fd)
			return err
		}
		s.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("open timestamping socket on %s: %v", s.name, err)
	}
	go s.loop()
	t.Cleanup(func() {
		s.mu.Lock()
		s.stop = true
		s.mu.Unlock()
		<-s.done
		unix.Close(s.fd)
	})
	return s
}

// kernelStamp is the SCM_TIMESTAMPNS receive time in oob (zero if none).
func kernelStamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return time.Unix(sec, nsec)
		}
	}
	return time.Time{}
}

func (s *trStamps) loop() {
	defer close(s.done)
	buf := make([]byte, 1<<16)
	oob := make([]byte, 256)
	for {
		s.mu.Lock()
		stop := s.stop
		s.mu.Unlock()
		if stop {
			return
		}
		n, oobn, _, from, err := unix.Recvmsg(s.fd, buf, oob, 0)
		if err != nil {
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		at := kernelStamp(oob[:oobn])
		if at.IsZero() {
			continue
		}
		eh, payload, err := splitEth(buf[:n])
		if err != nil || eh.Type != etherType {
			continue
		}
		s.mu.Lock()
		s.log = append(s.log, rxFrame{At: at, Eth: eh, Payload: append([]byte(nil), payload...)})
		s.mu.Unlock()
	}
}

// match returns the kernel receive times of the logged frames satisfying
// pred, received at or after since (user-space time, which is later than
// the kernel's for the same frame, so since is moved back by 50 ms).
func (s *trStamps) match(since time.Time, pred func(rxFrame) bool) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r []time.Time
	for _, f := range s.log {
		if f.At.After(since.Add(-50*time.Millisecond)) && pred(f) {
			r = append(r, f.At)
		}
	}
	return r
}

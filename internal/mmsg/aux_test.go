package mmsg

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/internal/alloctest"
	"github.com/prismd/prismd/internal/netnstest"
)

// A batch with PACKET_AUXDATA buffers prepares without allocating.
func TestPrepareAuxAllocs(t *testing.T) {
	r := NewRecvAux(16)
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 64)
	}
	if a := alloctest.PerRun(100, func() { r.Prepare(bufs); _ = r.Status(3) }); a != 0 {
		t.Fatalf("%v allocations per batch", a)
	}
}

// Status reads tp_status from each frame's PACKET_AUXDATA: a UDP datagram
// sent on lo (TX checksum offload on) is marked TP_STATUS_CSUMNOTREADY.
// A Recv made by NewRecv has no control buffers and reports 0.
func TestRecvAuxStatus(t *testing.T) {
	env := netnstest.New(t, "mm")
	ns := env.Namespace("x")
	var fd, ufd int
	var err error
	env.Do(ns, func() {
		var lo *net.Interface
		if lo, err = net.InterfaceByName("lo"); err != nil {
			return
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IP))); err != nil {
			return
		}
		if err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo.Index}); err != nil {
			return
		}
		if err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return
		}
		// Not connected: the port unreachable each datagram earns
		// would fail the next write.
		ufd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	defer unix.Close(ufd)
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	// read sends a datagram and returns the status of the first frame
	// carrying it (outgoing or incoming: both are marked).
	read := func(r *Recv) uint32 {
		t.Helper()
		if err := unix.Sendto(ufd, []byte("partial checksum"), 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			r.Prepare(bufs)
			r.Read(uintptr(fd))
			n, errno := r.Result()
			if errno != 0 {
				t.Fatal(errno)
			}
			for i := 0; i < n; i++ {
				if sz := r.Size(i, len(bufs[i])); sz >= 14+20+8 && bufs[i][14+9] == unix.IPPROTO_UDP {
					return r.Status(i)
				}
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("the datagram never reached the packet socket")
		return 0
	}
	if st := read(NewRecvAux(4)); st&unix.TP_STATUS_CSUMNOTREADY == 0 || st&unix.TP_STATUS_USER == 0 {
		t.Fatalf("aux status %#x, want TP_STATUS_USER|TP_STATUS_CSUMNOTREADY", st)
	}
	if st := read(NewRecv(4)); st != 0 {
		t.Fatalf("status %#x without aux buffers, want 0", st)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

package dataplane_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestVLANTagsKept: tagged frames cross the dataplane tagged, on every
// receive path. The kernel takes an 802.1Q tag out of a frame before a
// packet socket sees it (into the ring's frame header, or PACKET_AUXDATA);
// the ring walk put it back, but the recvmmsg paths, the lane among them
// (where sparse traffic goes by default), forwarded tagged frames
// untagged. h1 sends tagged frames; h2 reads them on a packet socket of
// its own with plain recvmsg and PACKET_AUXDATA (the kernel strips the tag
// on h2 too): the tag and the payload must be the sent ones.
func TestVLANTagsKept(t *testing.T) {
	for _, path := range receivePaths {
		t.Run(path.name, func(t *testing.T) {
			env, h1, h2, _ := checksumTopo(t, path.opts)
			h1If, h2If := env.ID()+"v0a", env.ID()+"v1a" // checksumTopo's host ends
			payload := []byte("tagged frame through prismd, padded to a minimum size......")
			frame := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x11,
				0x81, 0x00, 0x20, 0x0a, // 802.1Q, PCP 1, VID 10
				0x88, 0xb6}, payload...)
			var got struct {
				tci, tpid uint16
				vlan      bool
				data      []byte
			}
			var rerr error
			done := make(chan struct{})
			ready := make(chan struct{})
			go env.Do(h2, func() {
				defer close(done)
				fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
				if err != nil {
					rerr = err
					close(ready)
					return
				}
				defer unix.Close(fd)
				ifi, err := net.InterfaceByName(h2If)
				if err == nil {
					err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
				}
				if err == nil {
					err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1)
				}
				if err == nil {
					err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
				}
				close(ready)
				if err != nil {
					rerr = err
					return
				}
				buf, oob := make([]byte, 2048), make([]byte, 256)
				for {
					n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
					if err != nil {
						rerr = err
						return
					}
					if n < 14 || !bytes.Contains(buf[:n], payload) {
						continue // ARP, IPv6 router solicitations...
					}
					got.data = append([]byte(nil), buf[:n]...)
					msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
					for _, m := range msgs {
						if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
							a := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
							got.vlan, got.tci, got.tpid = a.Status&unix.TP_STATUS_VLAN_VALID != 0, a.Vlan_tci, a.Vlan_tpid
						}
					}
					return
				}
			})
			<-ready
			env.Do(h1, func() {
				fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
				if err != nil {
					rerr = err
					return
				}
				defer unix.Close(fd)
				ifi, err := net.InterfaceByName(h1If)
				if err != nil {
					rerr = err
					return
				}
				for i := 0; i < 3; i++ {
					if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}); err != nil {
						rerr = err
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
			<-done
			if rerr != nil {
				t.Fatalf("no tagged frame at h2: %v", rerr)
			}
			if !got.vlan || got.tci != 0x200a || (got.tpid != 0 && got.tpid != unix.ETH_P_8021Q) {
				t.Fatalf("h2 got the frame with vlan %v tci %#x tpid %#x, want VID 10 PCP 1 (tci 0x200a), 802.1Q", got.vlan, got.tci, got.tpid)
			}
			if want := append(append([]byte(nil), frame[:12]...), frame[16:]...); !bytes.Equal(got.data[:len(want)], want) {
				t.Fatalf("h2 got %x, want %x (the tag in the metadata)", got.data, want)
			}
		})
	}
}

func htons(v uint16) uint16 { return binary.BigEndian.Uint16([]byte{byte(v), byte(v >> 8)}) }

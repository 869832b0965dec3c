package afpacket

// This file owns the completion of partial checksums in received frames.
//
// A frame the sending host left CHECKSUM_PARTIAL (TX checksum offload,
// on by default on every veth) reaches a packet socket with only the
// pseudo-header sum in its TCP or UDP checksum field: the kernel would
// have finished it in the driver, or never checked it on a receiver it
// hands the skb to directly, as a Linux bridge does. Forwarded as read,
// the frame is dropped by its receiver for a bad checksum: ping works and
// TCP hangs. The kernel says which frames these are, in the ring's frame
// header and in PACKET_AUXDATA (TP_STATUS_CSUMNOTREADY), so every receive
// path tests that one bit per frame and finishes only those (package
// csum).

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/prismd/prismd/dataplane/internal/csum"
	"github.com/prismd/prismd/internal/mmsg"
)

// Checksums counts the frames a socket received with a partial checksum.
type Checksums struct {
	// Completed: the TCP or UDP checksum was finished before the frame
	// was handed out.
	Completed atomic.Uint64
	// Unfinished: marked, but not TCP or UDP over IPv4 or IPv6 without
	// extension headers where csum could find the partial sum (another
	// L3 or L4, an encapsulated inner checksum): handed out unchanged,
	// and its receiver will most likely drop it.
	Unfinished atomic.Uint64
}

// csumTally counts one read's frames, added to Checksums once per read.
type csumTally struct{ done, left uint64 }

// complete finishes frame f, which the kernel marked.
func (t *csumTally) complete(f []byte) {
	if csum.Complete(f) {
		t.done++
	} else {
		t.left++
	}
}

// add adds a read's tally; nothing when the read had no marked frame.
func (c *Checksums) add(t csumTally) {
	if t.done != 0 {
		c.Completed.Add(t.done)
	}
	if t.left != 0 {
		c.Unfinished.Add(t.left)
	}
}

// completeAux mends the frames of a recvmmsg batch, bufs[i][:sizes[i]] for
// i < n, read with r, by their PACKET_AUXDATA, as the ring walk does by its
// frame headers (copyFrame): the 802.1Q tag the kernel took out of a
// frame is put back (the recvmmsg paths, the lane among them, forwarded
// tagged frames untagged), and a partial checksum is finished. A frame the
// tag no longer fits in its buffer becomes size 0 and is counted in the
// returned truncations, as the ring counts it.
func (c *Checksums) completeAux(r *mmsg.Recv, bufs [][]byte, sizes []int, n int) (truncated int) {
	var t csumTally
	for i := 0; i < n; i++ {
		st, tci, tpid := r.Aux(i)
		if st&(unix.TP_STATUS_VLAN_VALID|unix.TP_STATUS_CSUMNOTREADY) == 0 || sizes[i] == 0 {
			continue
		}
		if st&unix.TP_STATUS_VLAN_VALID != 0 && sizes[i] >= 12 {
			if sizes[i]+4 > len(bufs[i]) {
				sizes[i] = 0
				truncated++
				continue
			}
			if st&unix.TP_STATUS_VLAN_TPID_VALID == 0 {
				tpid = unix.ETH_P_8021Q
			}
			b := bufs[i]
			copy(b[16:sizes[i]+4], b[12:sizes[i]])
			b[12], b[13], b[14], b[15] = byte(tpid>>8), byte(tpid), byte(tci>>8), byte(tci)
			sizes[i] += 4
		}
		if st&unix.TP_STATUS_CSUMNOTREADY != 0 {
			t.complete(bufs[i][:sizes[i]])
		}
	}
	c.add(t)
	return truncated
}

// Checksums returns the socket's counts of partial checksums (every receive
// path: ring, recvmmsg and lane).
func (s *Socket) Checksums() (completed, unfinished uint64) {
	return s.csum.Completed.Load(), s.csum.Unfinished.Load()
}

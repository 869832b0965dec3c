// This file owns the Port abstraction (batch I/O in the style of
// wireguard-go's conn.Bind, free of AF_PACKET details so an AF_XDP backend can
// be added) and the typed buffer pools.

package dataplane

import (
	"errors"
	"sync"

	"github.com/prismd/prismd/dataplane/internal/afpacket"
)

// Port is one switch port. ReadBatch is called from one goroutine only;
// WriteBatch, Stats and the getters must be safe for concurrent use.
type Port interface {
	// Name is the interface name, used as the metrics label.
	Name() string
	// MAC is the port hardware address; it is a local MAC for PRISM.
	MAC() [6]byte
	// MTU is the largest frame payload after the 14-byte Ethernet header.
	MTU() int
	// ReadBatch blocks until at least one frame arrived and fills bufs[:n],
	// setting sizes[:n]. A size of 0 marks a slot to skip (e.g. a frame larger
	// than its buffer, which the port counts in Stats().Oversize). After
	// Close it returns an error wrapping net.ErrClosed.
	ReadBatch(bufs [][]byte, sizes []int) (n int, err error)
	// WriteBatch transmits whole Ethernet frames and returns how many were
	// sent. The dataplane counts the frames not sent as drops, reason
	// tx_ring_full when err wraps ErrTxFull, tx_link_down when it wraps
	// ErrLinkDown, and tx_error otherwise.
	WriteBatch(bufs [][]byte) (n int, err error)
	// Stats returns cumulative counters kept below the dataplane.
	Stats() PortStats
	// Close releases the port; a blocked ReadBatch returns.
	Close() error
}

// ErrTxFull is returned (possibly wrapped) by WriteBatch when the port's
// transmit ring or queue had no room for the rest of the batch, so the
// dataplane counts those frames as drop reason tx_ring_full, not tx_error.
var ErrTxFull = errors.New("dataplane: transmit ring full")

// ErrLinkDown is returned (possibly wrapped) by WriteBatch when the port's
// link is down, gone or without carrier, so the frames not sent count as
// drop reason tx_link_down: a port whose peer went away says so, and the
// batch costs a system call or two, not one per frame.
var ErrLinkDown = afpacket.ErrLinkDown

// PortStats are counters a Port keeps itself. All are cumulative.
type PortStats struct {
	// KernelDrops counts frames the kernel dropped before the port read them
	// (AF_PACKET: receive buffer or ring full; AF_XDP: RX ring full, no fill
	// ring chunk, frame too long for a chunk, invalid descriptor).
	KernelDrops uint64
	// Oversize counts frames longer than the read buffer (MTU + header), dropped.
	Oversize uint64
	// Drops counts frames the port lost after WriteBatch had accepted them,
	// by reason (index DropReason): tx_invalid_desc and tx_driver_drop on
	// AF_XDP, and, behind an egress fault, whatever the wrapped port then
	// failed to send. The dataplane adds them to its own counts of the
	// same reasons; those frames are also in the transmitted counters.
	Drops [numDropReasons]uint64
	// Fault counts what WithFault did on purpose.
	Fault FaultStats
	// LaneTuned: the port moves its frames between lane and ring by its
	// rate (PortOptions.SparseFPS). LaneAll: every frame is read on the
	// lane now, traffic being sparse; LaneSwitches counts the moves.
	LaneTuned    bool
	LaneAll      bool
	LaneSwitches uint64
	// RingHeld counts the frames the receive ring handed out from blocks
	// the kernel retired on its timer, partly filled: each waited up to
	// the ring timeout (afpacket ports with a ring).
	RingHeld uint64
	// Checksum counts the received frames the sending host left with a
	// partial TCP/UDP checksum (TX checksum offload).
	Checksum ChecksumStats
}

// ChecksumStats count received frames whose TCP or UDP checksum the sending
// host left partial (CHECKSUM_PARTIAL: TX checksum offload, the default on
// a veth). Forwarded as read, such a frame would be dropped by its
// receiver for a bad checksum, so an AF_PACKET port finishes the checksum
// before the dataplane sees the frame. An AF_XDP port is not told which
// frames these are and counts nothing.
type ChecksumStats struct {
	// Completed frames had their checksum finished.
	Completed uint64
	// Unfinished frames were marked but not TCP or UDP over IPv4 or over
	// IPv6 without extension headers (or their partial checksum was an
	// encapsulated one): forwarded unchanged, they will most likely be
	// dropped by their receiver.
	Unfinished uint64
}

// FaultStats counts the impairments WithFault applied to one port (tests
// and labs), kept apart from drops by prismd or the kernel: see package
// metrics for why.
type FaultStats struct {
	// IngressDrops counts received frames the ingress fault lost
	// (drop_percent). The dataplane never saw them: they are in no receive
	// counter.
	IngressDrops uint64
	// IngressDuplicates counts the extra copies the ingress fault
	// delivered (duplicate_percent); each copy is a received frame.
	IngressDuplicates uint64
	// EgressDrops counts frames the egress fault could not take because
	// its queue (faultQueue frames delayed or held) was full; they are in
	// no transmit counter.
	EgressDrops uint64
	// IngressReordered and EgressReordered count the frames a fault held
	// back (reorder_percent) for later ones to overtake: what a lab's
	// reordering really did, not only what it was configured to do.
	IngressReordered, EgressReordered uint64
}

// FrameSize returns the buffer length for a port MTU: the Ethernet header
// plus one 802.1Q tag, because tagged frames are bridged unchanged.
func FrameSize(mtu int) int { return mtu + 14 + 4 }

// Two fixed size classes keep the pools typed (no []byte header churn) and
// cover the defined PRISM MTUs: 576 and 1500 fit the small class, 9000 the
// jumbo one. 64 bytes of slack leave room for headers written in front later.
const (
	smallBufSize = 2048
	jumboBufSize = 9216 + 64
)

type (
	smallBuf [smallBufSize]byte
	jumboBuf [jumboBufSize]byte
)

var (
	smallPool = sync.Pool{New: func() any { return new(smallBuf) }}
	jumboPool = sync.Pool{New: func() any { return new(jumboBuf) }}
)

// getBuffer returns a pooled buffer of exactly n bytes (n <= jumboBufSize).
func getBuffer(n int) []byte {
	if n <= smallBufSize {
		return smallPool.Get().(*smallBuf)[:n]
	}
	if n > jumboBufSize {
		return make([]byte, n)
	}
	return jumboPool.Get().(*jumboBuf)[:n]
}

// putBuffer clears b and returns it to its pool.
func putBuffer(b []byte) {
	switch cap(b) {
	case smallBufSize:
		a := (*smallBuf)(b[:smallBufSize])
		clear(a[:])
		smallPool.Put(a)
	case jumboBufSize:
		a := (*jumboBuf)(b[:jumboBufSize])
		clear(a[:])
		jumboPool.Put(a)
	}
}

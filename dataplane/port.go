// This file owns the Port abstraction (batch I/O in the style of
// wireguard-go's conn.Bind, free of AF_PACKET details so an AF_XDP backend can
// be added) and the typed buffer pools.

package dataplane

import "sync"

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
	// WriteBatch transmits whole Ethernet frames and returns how many were sent.
	WriteBatch(bufs [][]byte) (n int, err error)
	// Stats returns cumulative counters kept below the dataplane.
	Stats() PortStats
	// Close releases the port; a blocked ReadBatch returns.
	Close() error
}

// PortStats are counters a Port keeps itself.
type PortStats struct {
	// KernelDrops counts frames the kernel dropped before the port read them
	// (receive buffer full).
	KernelDrops uint64
	// Oversize counts frames longer than the read buffer (MTU + header), dropped.
	Oversize uint64
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

// This file owns the AF_PACKET backend of Port.

package dataplane

import (
	"fmt"
	"time"

	"github.com/prismd/prismd/dataplane/internal/afpacket"
	"github.com/prismd/prismd/parser"
)

// PortOptions configure OpenAFPacket. Zero fields mean defaults.
type PortOptions struct {
	// MTU overrides the interface MTU (bytes after the Ethernet header);
	// 0 uses the interface MTU. Frames longer than MTU+18 are dropped as oversize.
	MTU int
	// SocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes; 0 means 4 MiB.
	SocketBuffer int
	// Batch is the largest recvmmsg/sendmmsg batch; 0 means DefaultBatch.
	Batch int
	// NoRxRing receives with recvmmsg instead of the default TPACKET_V3 mmap
	// ring (config "rx_ring: false"). The ring costs one wakeup per block
	// instead of one per frame (see scripts/bench-forward.sh for the
	// numbers) but holds a frame up to RingTimeout when traffic is sparse.
	NoRxRing bool
	// RingTimeout bounds how long a received frame waits in a partly filled
	// ring block (whole milliseconds, at least 1); 0 means 1 ms.
	RingTimeout time.Duration
	// NoQdiscBypass keeps transmitted frames on the qdisc path and visible
	// to packet captures on the port; by default they bypass it
	// (PACKET_QDISC_BYPASS), which is cheaper per frame.
	NoQdiscBypass bool
	// Lane, with the ring, receives PRISM CONTROL frames on a second
	// socket, read through the port's Laner methods, so that a CONTROL
	// request is not held for the ring's block timeout at every switch on
	// its way (config "rx_lane"). Whoever opens a port with a lane must
	// read it: the ring no longer returns those frames.
	Lane bool
	// LaneProgress, with the ring, puts PRISM PROGRESS frames on the lane
	// too (and opens one without Lane). It is for end hosts such as
	// prismd-blast contribute: the PROGRESS that paces a rank's send window
	// is too sparse to fill ring blocks, so on the ring each one waited for
	// the block timeout, while the RESULT stream still fills blocks and
	// keeps the ring's one wakeup per block.
	LaneProgress bool
}

// laneClasses is afpacket's class mask for PortOptions.LaneProgress.
func laneClasses(progress bool) uint16 {
	if progress {
		return 1 << parser.ClassProgress
	}
	return 0
}

type afPort struct {
	s   *afpacket.Socket
	mtu int
	// oversize is written by the RX goroutine and the lane goroutine.
	oversize atomicCounter
}

// OpenAFPacket opens an AF_PACKET port on interface name (needs CAP_NET_RAW).
func OpenAFPacket(name string, o PortOptions) (Port, error) {
	if o.MTU < 0 || o.MTU > 9216 {
		return nil, fmt.Errorf("dataplane: port %q: mtu %d out of range 68..9216", name, o.MTU)
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	s, err := afpacket.Open(name, afpacket.Options{SocketBuffer: o.SocketBuffer, MaxBatch: o.Batch,
		RxRing: !o.NoRxRing, RingTimeout: o.RingTimeout, QdiscBypass: !o.NoQdiscBypass, Lane: o.Lane,
		LaneClasses: laneClasses(o.LaneProgress)})
	if err != nil {
		return nil, err
	}
	p := &afPort{s: s, mtu: o.MTU}
	if p.mtu == 0 {
		p.mtu = s.MTU()
	}
	return p, nil
}

func (p *afPort) Name() string   { return p.s.Name() }
func (p *afPort) MAC() [6]byte   { return p.s.MAC() }
func (p *afPort) MTU() int       { return p.mtu }
func (p *afPort) Close() error   { return p.s.Close() }
func (p *afPort) String() string { return "afpacket:" + p.s.Name() }

func (p *afPort) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n, trunc, err := p.s.RecvBatch(bufs, sizes)
	if trunc > 0 {
		p.oversize.Add(uint64(trunc))
	}
	return n, err
}

func (p *afPort) WriteBatch(bufs [][]byte) (int, error) { return p.s.SendBatch(bufs) }

// Lends implements Lender.
func (p *afPort) Lends() bool { return p.s.Lends() }

// ReadLent implements Lender.
func (p *afPort) ReadLent(bufs, frames [][]byte) (int, error) {
	n, trunc, err := p.s.RecvLent(bufs, frames)
	if trunc > 0 {
		p.oversize.Add(uint64(trunc))
	}
	return n, err
}

// ReleaseLent implements Lender.
func (p *afPort) ReleaseLent() { p.s.Release() }

// HasLane implements Laner.
func (p *afPort) HasLane() bool { return p.s.HasLane() }

// ReadLane implements Laner.
func (p *afPort) ReadLane(bufs [][]byte, sizes []int) (int, error) {
	n, trunc, err := p.s.RecvLane(bufs, sizes)
	if trunc > 0 {
		p.oversize.Add(uint64(trunc))
	}
	return n, err
}

func (p *afPort) Stats() PortStats {
	kd, _ := p.s.KernelDrops()
	return PortStats{KernelDrops: kd, Oversize: p.oversize.Load()}
}

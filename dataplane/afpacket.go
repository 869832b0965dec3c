// This file owns the AF_PACKET backend of Port.

package dataplane

import (
	"fmt"
	"sync"
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
	// SparseFPS, with a lane, lets every frame (of any EtherType: the
	// ranks' TCP to the AM crosses switches too) take the lane while the
	// port receives fewer than SparseFPS frames a second, and only the
	// lane's own PRISM classes once it receives more than twice that
	// (config "rx_sparse_fps"; 0 keeps the lane to its own classes). On the ring a
	// frame waits for its block to fill or time out, up to a millisecond
	// at every hop: that wait set the time of a small collective (15 ms for
	// 2 values on a spine-leaf lab; 8 ms without rings) and held back
	// window-paced streams at jumbo MTU. The ring's one wakeup per block
	// wins only at high frame rates (plain forwarding, DATA at MTU 1500).
	// The ring itself is mapped only when the port first needs it: an idle
	// ring's retire timer still fires every millisecond.
	SparseFPS int
}

// DefaultSparseFPS is prismd's rx_sparse_fps when the config gives none
// (measured in docs/architecture.md: below it the lane was faster).
const DefaultSparseFPS = 50000

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
	// sparse decides where frames are read (PortOptions.SparseFPS); nil
	// without a lane that can widen. stopMover ends its mover goroutine.
	sparse    *sparseTuner
	stopMover chan struct{}
	closeOnce sync.Once
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
		LaneClasses: laneClasses(o.LaneProgress), LazyRing: o.SparseFPS > 0})
	if err != nil {
		return nil, err
	}
	p := &afPort{s: s, mtu: o.MTU}
	if p.mtu == 0 {
		p.mtu = s.MTU()
	}
	if o.SparseFPS > 0 && s.CanWidenLane() {
		if p.sparse, err = newSparseTuner(o.SparseFPS, s.SetLaneAll, func() (blocks, timed uint64) { blocks, timed, _ = s.Held(); return }); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("dataplane: port %q: %w", name, err)
		}
		p.stopMover = make(chan struct{})
		p.sparse.startMover(p.stopMover)
	}
	return p, nil
}

// laneNarrower is a port whose lane can be kept to its own classes for good
// (an ingress fault wrapper impairs the ring's frames only).
type laneNarrower interface{ keepLaneNarrow() }

// keepLaneNarrow turns PortOptions.SparseFPS off; call it before the port
// is read.
func (p *afPort) keepLaneNarrow() {
	if p.sparse != nil {
		_ = p.s.MapRing() // now: nothing reads the port yet
		_ = p.s.SetLaneAll(false)
		p.sparse = nil
	}
}

func (p *afPort) Name() string { return p.s.Name() }
func (p *afPort) MAC() [6]byte { return p.s.MAC() }
func (p *afPort) MTU() int     { return p.mtu }

// Close closes the socket and ends the lane mover, if any.
func (p *afPort) Close() error {
	p.closeOnce.Do(func() {
		if p.stopMover != nil {
			close(p.stopMover)
		}
	})
	return p.s.Close()
}

func (p *afPort) String() string { return "afpacket:" + p.s.Name() }

func (p *afPort) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	return p.counted(p.s.RecvBatch(bufs, sizes))
}

// counted accounts one read of either receive path: frames too long for
// their buffer, and the frames the lane policy counts.
func (p *afPort) counted(n, trunc int, err error) (int, error) {
	if trunc > 0 {
		p.oversize.Add(uint64(trunc))
	}
	if p.sparse != nil {
		p.sparse.read(n)
	}
	return n, err
}

func (p *afPort) WriteBatch(bufs [][]byte) (int, error) { return p.s.SendBatch(bufs) }

// Lends implements Lender.
func (p *afPort) Lends() bool { return p.s.Lends() }

// ReadLent implements Lender.
func (p *afPort) ReadLent(bufs, frames [][]byte) (int, error) {
	return p.counted(p.s.RecvLent(bufs, frames))
}

// ReleaseLent implements Lender.
func (p *afPort) ReleaseLent() { p.s.Release() }

// HasLane implements Laner.
func (p *afPort) HasLane() bool { return p.s.HasLane() }

// ReadLane implements Laner.
func (p *afPort) ReadLane(bufs [][]byte, sizes []int) (int, error) {
	return p.counted(p.s.RecvLane(bufs, sizes))
}

func (p *afPort) Stats() PortStats {
	kd, _ := p.s.KernelDrops()
	st := PortStats{KernelDrops: kd, Oversize: p.oversize.Load()}
	st.Checksum.Completed, st.Checksum.Unfinished = p.s.Checksums()
	_, _, st.RingHeld = p.s.Held()
	if t := p.sparse; t != nil {
		st.LaneTuned, st.LaneAll, st.LaneSwitches = true, t.wide.Load(), t.switches.Load()
	}
	return st
}

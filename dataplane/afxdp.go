// This file owns the AF_XDP backend of Port.
//
// Unlike an AF_PACKET port it does not complete partial checksums: an
// AF_XDP descriptor carries no TP_STATUS_CSUMNOTREADY, so a frame whose
// sender left its TCP/UDP checksum to TX offload is forwarded unfinished
// and dropped by its receiver (ping works, TCP hangs). Peers of an afxdp
// port must send with TX checksum offload off (docs/lab-hardware.md);
// PortStats.Checksum stays zero.

package dataplane

import (
	"errors"
	"fmt"

	"github.com/prismd/prismd/dataplane/internal/xdp"
	"github.com/prismd/prismd/internal/netif"
)

// XDPOptions configure OpenAFXDP. Zero fields mean defaults.
type XDPOptions struct {
	// MTU overrides the interface MTU (bytes after the Ethernet header);
	// 0 uses the interface MTU. Frames longer than MTU+18 are dropped as
	// oversize. Above MTU 3822 a frame no longer fits one 4 KiB UMEM chunk
	// and the port uses multi-buffer AF_XDP (Linux 6.6+); a kernel without
	// it refuses the port with an error that says so.
	MTU int
	// Native attaches the XDP program in driver mode instead of generic
	// (SKB) mode. Sockets are bound in copy mode either way.
	Native bool
	// Queues is how many receive queues get a socket (0 .. Queues-1);
	// 0 means all active queues of the interface.
	Queues int
	// RingSize is the RX and fill ring size of each queue (power of two,
	// 64..16384); 0 means 2048 (less per queue on an interface with more
	// than 4 queues). TX rings are half as large. Each queue's UMEM holds
	// 1.5 x RingSize chunks of 2 KiB (4 KiB above MTU 1774).
	RingSize int
}

type xdpPort struct {
	s   *xdp.Socket
	mtu int
	// oversize is written by the RX goroutine only.
	oversize atomicCounter
}

// OpenAFXDP opens an AF_XDP port on interface name: it attaches a small XDP
// program that steers every received frame (except non-PRISM frames for the
// port's own MAC, which stay with the host stack) to one copy-mode XSK
// socket per receive queue. It needs root (CAP_NET_ADMIN, CAP_NET_RAW,
// CAP_BPF). The program is detached on Close, or when the process exits.
func OpenAFXDP(name string, o XDPOptions) (Port, error) {
	if o.MTU < 0 || o.MTU > 9216 {
		return nil, fmt.Errorf("dataplane: port %q: mtu %d out of range 68..9216", name, o.MTU)
	}
	mtu := o.MTU
	if mtu == 0 {
		// The frame size depends on the MTU, so look it up before opening.
		ifMTU, err := interfaceMTU(name)
		if err != nil {
			return nil, err
		}
		mtu = ifMTU
	}
	s, err := xdp.Open(name, xdp.Options{MaxFrame: FrameSize(mtu), Queues: o.Queues, Native: o.Native,
		RingSize: o.RingSize})
	if err != nil {
		return nil, err
	}
	return &xdpPort{s: s, mtu: mtu}, nil
}

func (p *xdpPort) Name() string { return p.s.Name() }
func (p *xdpPort) MAC() [6]byte { return p.s.MAC() }
func (p *xdpPort) MTU() int     { return p.mtu }
func (p *xdpPort) Close() error { return p.s.Close() }
func (p *xdpPort) String() string {
	return fmt.Sprintf("afxdp:%s (%s, %d queues, %d-byte chunks, multi-buffer %v)",
		p.s.Name(), p.s.Mode(), p.s.Queues(), p.s.ChunkSize(), p.s.MultiBuffer())
}

func (p *xdpPort) ReadBatch(bufs [][]byte, sizes []int) (int, error) {
	n, over, err := p.s.RecvBatch(bufs, sizes)
	if over > 0 {
		p.oversize.Add(uint64(over))
	}
	return n, err
}

func (p *xdpPort) WriteBatch(bufs [][]byte) (int, error) {
	n, err := p.s.SendBatch(bufs)
	if err != nil && errors.Is(err, xdp.ErrTxFull) {
		err = ErrTxFull // the frames not sent count as tx_ring_full
	}
	return n, err
}

// Stats reports the sockets' kernel counters: receive-side losses as
// KernelDrops (as AF_PACKET's), transmit-side ones as drops by reason. On a
// read error the socket returns its previous totals, so a scrape never sees
// a counter go backwards.
func (p *xdpPort) Stats() PortStats {
	st, _ := p.s.Stats()
	ps := PortStats{KernelDrops: st.RxDropped, Oversize: p.oversize.Load()}
	ps.Drops[DropTxInvalidDesc] = st.TxInvalid
	ps.Drops[DropTxDriverDrop] = st.TxDriverDrops
	return ps
}

func interfaceMTU(name string) (int, error) {
	ifi, err := netif.Ethernet(name)
	if err != nil {
		return 0, fmt.Errorf("dataplane: port %q: %w", name, err)
	}
	return ifi.MTU, nil
}

// This file owns the host's AF_PACKET socket for bitmap jobs. It is
// am.PacketConn with one difference that matters on real links: a receive
// buffer sized for the bursts bitmap jobs produce. A MoE dispatch of 64
// tokens from every host lands on each expert host as a few thousand frames
// within milliseconds (every source sends at once and the switches replicate),
// and a multicast window arrives at line rate; the kernel's default
// SO_RCVBUF (net.core.rmem_default, 208 KiB: about a hundred frames on a
// veth) overflowed there and every overflow became a loss the protocols
// had to repair end to end, one timeout at a time.

package bitmap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/mdlayher/packet"

	"github.com/prismd/prismd/internal/netif"
	"github.com/prismd/prismd/parser"
)

// SocketBuffer is the SO_RCVBUF/SO_SNDBUF a Port asks for: 8 MiB holds
// about 2000 MTU-1500 frames (a veth skb takes about 4 KiB of buffer), more
// than a MoE dispatch of every host or an in-flight multicast window sends
// to one host at once. As root SO_RCVBUFFORCE ignores net.core.rmem_max;
// without CAP_NET_ADMIN the kernel caps it at rmem_max.
const SocketBuffer = 8 << 20

// packetConn is the Port's Conn on a real interface: AF_PACKET, EtherType
// 0x88B5 only.
type packetConn struct {
	c      *packet.Conn
	ifi    *net.Interface
	closed atomic.Bool
}

// openConn opens the socket on iface with SocketBuffer-sized buffers.
func openConn(iface string) (*packetConn, error) {
	ifi, err := netif.Ethernet(iface)
	if err != nil {
		return nil, err
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("interface %q is down; bring it up with 'ip link set %s up'", iface, iface)
	}
	c, err := packet.Listen(ifi, packet.Raw, parser.EtherType, nil)
	if err != nil {
		return nil, fmt.Errorf("open AF_PACKET socket on %q (needs CAP_NET_RAW): %w", iface, err)
	}
	rc, err := c.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			for _, o := range [][2]int{{syscall.SO_RCVBUFFORCE, syscall.SO_RCVBUF}, {syscall.SO_SNDBUFFORCE, syscall.SO_SNDBUF}} {
				if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[0], SocketBuffer) != nil {
					_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[1], SocketBuffer)
				}
			}
		})
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("socket buffers on %q: %w", iface, err)
	}
	return &packetConn{c: c, ifi: ifi}, nil
}

// ReadFrame implements Conn; after Close it returns net.ErrClosed.
func (p *packetConn) ReadFrame(b []byte) (int, error) {
	n, _, err := p.c.ReadFrom(b)
	if err != nil && (p.closed.Load() || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EBADF)) {
		err = fmt.Errorf("%w: %v", net.ErrClosed, err)
	}
	return n, err
}

// WriteFrame implements Conn.
func (p *packetConn) WriteFrame(b []byte) error {
	_, err := p.c.WriteTo(b, &packet.Addr{HardwareAddr: net.HardwareAddr(b[0:6])})
	return err
}

// MAC implements Conn.
func (p *packetConn) MAC() net.HardwareAddr { return p.ifi.HardwareAddr }

// Close implements Conn.
func (p *packetConn) Close() error {
	p.closed.Store(true)
	return p.c.Close()
}

// drops is how many frames the kernel dropped because the receive buffer
// was full (PACKET_STATISTICS; reading resets the kernel's counter).
func (p *packetConn) drops() (uint64, error) {
	st, err := p.c.Stats()
	if err != nil {
		return 0, err
	}
	return uint64(st.Drops), nil
}

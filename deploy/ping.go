// This file owns an ICMP echo from inside a node, so tests can check
// reachability without depending on the ping binary being installed.

package deploy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
)

// ErrNoReply is returned by Ping when an echo request got no reply in time.
var ErrNoReply = errors.New("no echo reply")

// Ping sends count ICMP echo requests from node to dst, one at a time, and
// waits up to timeout for each reply. It succeeds only if every request is
// answered. It uses a raw socket opened inside node's namespace.
func (l *Lab) Ping(ctx context.Context, node string, dst netip.Addr, count int, timeout time.Duration) error {
	var c net.PacketConn
	err := l.Do(node, func() error {
		var err error
		c, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	})
	if err != nil {
		return fmt.Errorf("deploy: icmp socket in %s: %w", node, err)
	}
	defer c.Close()
	// The ID tells our replies from those to a concurrent Ping in the same
	// namespace; the kernel does not demultiplex raw ICMP by ID.
	id := uint16(os.Getpid()) ^ uint16(time.Now().UnixNano())
	to := &net.IPAddr{IP: dst.AsSlice()}
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		req := echo(id, uint16(seq))
		if _, err := c.WriteTo(req, to); err != nil {
			return fmt.Errorf("deploy: ping %v from %s: %w", dst, node, err)
		}
		deadline := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		c.SetReadDeadline(deadline)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return fmt.Errorf("deploy: ping %v from %s, seq %d: %w within %v", dst, node, seq, ErrNoReply, timeout)
				}
				return err
			}
			// Replies come without the IP header on an ip4:icmp socket.
			if n >= 8 && buf[0] == 0 && buf[1] == 0 &&
				binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == uint16(seq) &&
				from.(*net.IPAddr).IP.Equal(to.IP) {
				break
			}
		}
	}
	return nil
}

// echo builds an ICMP echo request with a 56-byte payload, as ping sends.
func echo(id, seq uint16) []byte {
	b := make([]byte, 8+56)
	b[0] = 8 // echo request
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	for i := 8; i < len(b); i++ {
		b[i] = byte(i)
	}
	binary.BigEndian.PutUint16(b[2:], checksum(b))
	return b
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// HostAddr returns host's IPv4 address (without prefix length).
func (t *Topology) HostAddr(host string) (netip.Addr, bool) {
	n, ok := t.Nodes[host]
	if !ok || !n.IPv4.IsValid() {
		return netip.Addr{}, false
	}
	return n.IPv4.Addr(), true
}

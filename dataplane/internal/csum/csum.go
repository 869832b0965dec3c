// Package csum completes the TCP and UDP checksums the kernel left
// partial in frames a packet socket reads.
//
// A host whose interface has TX checksum offload on (every veth by default)
// hands the interface TCP and UDP with CHECKSUM_PARTIAL: the checksum field
// holds only the folded pseudo-header sum and whoever transmits the frame
// last is to finish it. A Linux bridge passes the skb on still marked, so
// the receiving stack never checks it; a switch that reads the frame
// through AF_PACKET and writes the bytes out again makes a new skb that
// claims nothing, and the receiver drops the frame for its checksum. The
// kernel marks such frames (TP_STATUS_CSUMNOTREADY, in the ring's frame
// header and in PACKET_AUXDATA); Complete does what skb_checksum_help
// would have done before transmission.
//
// It parses bytes only (no unsafe, no allocation) and knows nothing of
// ports or PRISM.
package csum

import (
	"encoding/binary"
	"math/bits"
)

// Ethernet, IP and L4 constants Complete parses.
const (
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86DD
	etherTypeVLAN  = 0x8100 // 802.1Q
	etherTypeQinQ  = 0x88A8 // 802.1ad
	protoTCP       = 6
	protoUDP       = 17
	tcpCsumOff     = 16
	udpCsumOff     = 6
	maxVLANTags    = 2
	ipv6HeaderSize = 40
)

// Complete finishes, in place, the L4 checksum of Ethernet frame f, which
// the kernel marked CHECKSUM_PARTIAL: TCP or UDP over IPv4, or over IPv6
// without extension headers, behind at most two VLAN tags. It reports
// whether it did; on false f is unchanged (another L3 or L4, an IPv6
// extension header, a fragment, a truncated frame, or a checksum field
// that does not hold the pseudo-header sum of that L4, as when the partial
// checksum is a tunnel's inner one).
//
// The field of a partial checksum holds the folded pseudo-header sum, not
// complemented (tcp_v4_send_check, udp4_hwcsum and their IPv6 twins store
// ~csum_tcpudp_magic(..., 0)), so, as skb_checksum_help does, the final
// value is the complement of the folded sum of the L4 header and payload
// with the field as it is, and a result of 0 is sent as 0xFFFF (the two are
// the same number in ones' complement; for UDP 0 would mean "no
// checksum").
func Complete(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	off := 12
	et := binary.BigEndian.Uint16(f[off:])
	for i := 0; i < maxVLANTags && (et == etherTypeVLAN || et == etherTypeQinQ); i++ {
		off += 4
		if len(f) < off+2 {
			return false
		}
		et = binary.BigEndian.Uint16(f[off:])
	}
	l3 := off + 2
	var (
		pseudo uint64 // pseudo-header sum, without the L4 length and protocol
		l4, n  int    // L4 offset and length
		proto  byte
	)
	switch et {
	case etherTypeIPv4:
		if len(f) < l3+20 || f[l3]>>4 != 4 {
			return false
		}
		ihl := int(f[l3]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(f[l3+2:]))
		if ihl < 20 || total < ihl || l3+total > len(f) {
			return false
		}
		if binary.BigEndian.Uint16(f[l3+6:])&0x3fff != 0 {
			return false // a fragment: never partial, and its L4 is not all here
		}
		proto = f[l3+9]
		l4, n = l3+ihl, total-ihl
		pseudo = sum(f[l3+12:l3+20], 0) // source and destination
	case etherTypeIPv6:
		if len(f) < l3+ipv6HeaderSize || f[l3]>>4 != 6 {
			return false
		}
		n = int(binary.BigEndian.Uint16(f[l3+4:]))
		l4 = l3 + ipv6HeaderSize
		if l4+n > len(f) {
			return false
		}
		proto = f[l3+6]                // an extension header here is neither TCP nor UDP
		pseudo = sum(f[l3+8:l3+40], 0) // source and destination
	default:
		return false
	}
	var at int
	switch proto {
	case protoTCP:
		if n < 20 {
			return false
		}
		at = l4 + tcpCsumOff
	case protoUDP:
		if n < 8 {
			return false
		}
		at = l4 + udpCsumOff
	default:
		return false
	}
	// Both pseudo-headers sum the same 16-bit words for an L4 shorter than
	// 64 KiB: IPv6's 32-bit length and next header have zero high halves.
	pseudo += uint64(n) + uint64(proto)
	if binary.BigEndian.Uint16(f[at:]) != fold(pseudo) {
		// Not this L4's partial checksum: the kernel's csum_start is
		// elsewhere (an encapsulated inner header) and summing here would
		// break a field that may well be complete.
		return false
	}
	c := ^fold(sum(f[l4:l4+n], 0))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(f[at:], c)
	return true
}

// fold reduces a ones' complement sum of 16-bit words to 16 bits.
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s)
}

// sum adds b to s as big-endian 16-bit words (an odd last byte padded with
// a zero), in ones' complement. It adds 8 bytes at a time with the carry
// folded back in: the sum of 64-bit words, folded, is the sum of the
// 16-bit words (RFC 1071, section 2(B)).
func sum(b []byte, s uint64) uint64 {
	var c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), c)
		b = b[8:]
	}
	s, c = bits.Add64(s, c, 0)
	s += c
	// Fewer than 8 bytes left: 16-bit words into a 64-bit sum cannot carry
	// out once it is folded below 2^48.
	s = s>>48 + s&0xffffffffffff
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

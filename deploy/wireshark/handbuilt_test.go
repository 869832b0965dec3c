// This file owns hand-built frames written straight from docs/protocol.md,
// independent of package parser: malformed frames the encoder refuses to make,
// and byte patterns the test wants exactly (FP16 bit patterns, Kulisch states).

package wireshark

import "encoding/binary"

var be = binary.BigEndian

// ethHdr is an Ethernet II header to a locally administered MAC with EtherType
// 0x88B5.
func ethHdr() []byte {
	return []byte{0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02, 0x88, 0xB5}
}

// opIdent is the 18-byte operation identity.
func opIdent(job uint64, group, groupGen, op uint16, opGen uint32) []byte {
	b := make([]byte, 18)
	be.PutUint64(b[0:], job)
	be.PutUint16(b[8:], group)
	be.PutUint16(b[10:], groupGen)
	be.PutUint16(b[12:], op)
	be.PutUint32(b[14:], opGen)
	return b
}

// handControl builds a CONTROL frame with the given Body Length field (which
// need not match len(body)).
func handControl(cmd, status uint8, bodyLen uint16, fragIdx, fragCnt uint8, body []byte) []byte {
	f := append(ethHdr(), 0x10, 1)
	f = append(f, opIdent(0x1122334455667788, 7, 1, 3, 9)...)
	h := make([]byte, 14)
	be.PutUint32(h[0:], 0xABCD0001)
	be.PutUint16(h[4:], 1)
	be.PutUint16(h[6:], 2)
	h[8], h[9] = cmd, status
	be.PutUint16(h[10:], bodyLen)
	h[12], h[13] = fragIdx, fragCnt
	f = append(f, h...)
	return append(f, body...)
}

// handDataHdr builds the control word and the 40-byte DATA/RESULT header.
func handDataHdr(class uint8, first uint32, count uint16, groups, flags uint8, bodyLen, stream uint16) []byte {
	f := append(ethHdr(), 0x10, class)
	f = append(f, opIdent(0x42, 7, 1, 3, 9)...)
	h := make([]byte, 22)
	be.PutUint16(h[0:], 10)
	be.PutUint16(h[2:], 20)
	be.PutUint32(h[4:], 77)
	be.PutUint32(h[8:], first)
	be.PutUint16(h[12:], count)
	h[14], h[15] = groups, flags
	be.PutUint16(h[16:], bodyLen)
	be.PutUint16(h[18:], stream)
	return append(f, h...)
}

// group builds a NumberGroup: descriptor, values, zero padding to 4.
func group(count uint16, format uint8, kbytes uint16, values []byte) []byte {
	g := make([]byte, 4)
	be.PutUint16(g[0:], count)
	be.PutUint16(g[2:], uint16(format)<<12|kbytes)
	g = append(g, values...)
	for len(g)%4 != 0 {
		g = append(g, 0)
	}
	return g
}

// handProgress builds a PROGRESS frame with the given Hole Count field and holes.
func handProgress(committed uint32, holeCount uint16, holes ...[2]uint32) []byte {
	f := append(ethHdr(), 0x10, 4)
	f = append(f, opIdent(0x42, 7, 1, 3, 9)...)
	h := make([]byte, 26)
	be.PutUint16(h[0:], 20)
	be.PutUint16(h[2:], 10)
	be.PutUint16(h[4:], 5)
	be.PutUint32(h[6:], 77)
	be.PutUint32(h[10:], committed)
	be.PutUint16(h[14:], 8)
	be.PutUint32(h[16:], 65536)
	h[20], h[21] = 0, 0
	be.PutUint16(h[22:], holeCount)
	f = append(f, h...)
	for _, hl := range holes {
		f = be.AppendUint32(f, hl[0])
		f = be.AppendUint32(f, hl[1])
	}
	return f
}

// Package afpacket owns the raw AF_PACKET sockets of one interface: opening
// the receive socket with github.com/mdlayher/packet (promiscuous,
// PACKET_IGNORE_OUTGOING, large socket buffers), its TPACKET_V3 mmap RX ring
// (frames copied out with RecvBatch, or lent in place with RecvLent until
// the next read; or batched recvmmsg), and a second, transmit-only socket kept out of the
// Go netpoller for batched sendmmsg (optionally PACKET_QDISC_BYPASS).
//
// With the ring it can add a lane (lane.go): a third socket that takes PRISM
// frames of chosen classes (CONTROL in a switch, PROGRESS in an end host),
// by a BPF filter on EtherType and class byte, so they are not held for the
// ring's block timeout.
//
// The batched system calls come from internal/mmsg, shared with the host
// library's sockets; unsafe here is confined to the ring (ring_unsafe.go).
// It knows nothing about bridging or the PRISM protocol: it moves byte
// slices, and of a frame reads only the EtherType and class byte the lane's
// filters select on, and, of a frame the kernel marks as carrying a
// partial checksum, the headers package csum needs to complete it
// (checksum.go).
package afpacket

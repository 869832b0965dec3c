// Package afpacket owns the raw AF_PACKET sockets of one interface: opening
// the receive socket with github.com/mdlayher/packet (promiscuous,
// PACKET_IGNORE_OUTGOING, large socket buffers), its TPACKET_V3 mmap RX ring
// (or batched recvmmsg), and a second, transmit-only socket kept out of the
// Go netpoller for batched sendmmsg (optionally PACKET_QDISC_BYPASS).
//
// The batched system calls come from internal/mmsg, shared with the host
// library's sockets; unsafe here is confined to the ring (ring_unsafe.go).
// It knows nothing about frames, bridging or PRISM: it moves byte slices.
package afpacket

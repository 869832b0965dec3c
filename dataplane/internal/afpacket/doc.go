// Package afpacket owns the raw AF_PACKET sockets of one interface: opening
// the receive socket with github.com/mdlayher/packet (promiscuous,
// PACKET_IGNORE_OUTGOING, large socket buffers), its TPACKET_V3 mmap RX ring
// (or batched recvmmsg), and a second, transmit-only socket kept out of the
// Go netpoller for batched sendmmsg (optionally PACKET_QDISC_BYPASS).
//
// It is the only dataplane package that uses golang.org/x/sys/unix and unsafe.
// It knows nothing about frames, bridging or PRISM: it moves byte slices.
package afpacket

// Package afpacket owns the raw AF_PACKET socket of one interface: opening it
// with github.com/mdlayher/packet (promiscuous, PACKET_IGNORE_OUTGOING, large
// socket buffers) and the batched recvmmsg/sendmmsg calls of the per-frame path.
//
// It is the only dataplane package that uses golang.org/x/sys/unix and unsafe.
// It knows nothing about frames, bridging or PRISM: it moves byte slices.
package afpacket

// Package rawio owns a rank's raw Ethernet I/O: one AF_PACKET socket that
// receives PRISM frames (EtherType 0x88B5) in batches with recvmmsg into the
// caller's buffers, and a second, transmit-only AF_PACKET socket kept out of
// the Go netpoller that sends batches with one sendmmsg.
//
// It is the host library's counterpart of dataplane/internal/afpacket (which
// package host may not import): both run their batches through
// internal/mmsg, sized here for an end host rather than a switch port. The receive buffer is large (8 MiB by default)
// because a rank receives RESULT in bursts of a whole send window from its
// leaf while its process may be descheduled; with the kernel's default
// 208 KiB, about fifteen 9000-byte frames fit and the rest are dropped and
// must be retransmitted.
//
// It is the only host package that opens raw sockets; the batched system
// calls and their unsafe pointer work live in internal/mmsg. It knows
// nothing about PRISM beyond the EtherType: it moves byte slices.
package rawio

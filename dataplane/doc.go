// Package dataplane owns ports and frames: it reads batches of Ethernet frames
// from each Port, runs the L2 learning bridge (MAC table with aging, flooding,
// no hairpin), and hands locally addressed PRISM frames (EtherType 0x88B5)
// to per-worker Handlers through lock-free SPSC rings. A Handler runs on
// one goroutine at a time: its worker's, or (unless Options.NoInline) the
// RX goroutine that just gave it frames while nobody ran it, which saves
// a thread wakeup per batch (worker.go, runInline). A port that can
// (Lender: AF_PACKET with its ring) lends each batch in place, so frames
// are read where the kernel wrote them; a Handler must not keep a frame
// past its Handle call (the SPSC rings copy).
//
// It must not decode PRISM class headers (package parser knows bytes; the
// Handler, i.e. package engine, knows operations), parse configuration files
// (cmd/prismd does) or touch Prometheus (package metrics reads the counters
// this package exposes through Stats). Raw syscalls and unsafe live only in
// dataplane/internal/afpacket and dataplane/internal/xdp.
//
// Ports have two backends behind the same Port interface. OpenAFPacket
// (afpacket.go) uses AF_PACKET sockets with a TPACKET_V3 receive ring and,
// with PortOptions.Lane, a lane: a port implementing Laner hands
// CONTROL frames to a second receive loop (laneLoop) as soon as they arrive,
// instead of after the ring's block timeout, and with PortOptions.SparseFPS
// every frame while the port's traffic is sparse (the lane and the ring
// share a PACKET_FANOUT group, so a frame reaches exactly one of them).
// The two loops take turns as producers of the port's SPSC rings.
// Frames whose sender left the TCP/UDP checksum partial (TX checksum
// offload, the default on a veth) come out of an AF_PACKET port completed:
// the kernel marks them, and the socket finishes them in place
// (internal/afpacket/checksum.go; PortStats.Checksum counts them).
// PortOptions.LaneProgress puts PROGRESS on such a lane too, for end hosts
// (prismd-blast contribute) whose send windows it paces.
// OpenAFXDP (afxdp.go) attaches a small XDP program (built in Go with
// cilium/ebpf/asm, generic mode by default, native by option) through a BPF
// link and reads and writes through one copy-mode AF_XDP socket per receive
// queue: frames are copied between the UMEM and the caller's buffers, one
// producer update and one sendto per transmitted batch, ppoll when idle. It
// forwards faster (see scripts/bench-forward.sh) but the host stack on an
// AF_XDP port only sees unicast non-PRISM frames for the port's own MAC,
// and AF_XDP does not say which frames carry a partial checksum, so an
// AF_XDP port forwards those unfinished: its peers must send with TX
// checksum offload off (docs/lab-hardware.md).
package dataplane

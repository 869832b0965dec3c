// Package host is the rank library of prismd: what an application process
// links to run REDUCE and ALLREDUCE through PRISM switches, in the shape MPI
// and NCCL users know.
//
//	comm, err := host.NewComm(ctx, host.Config{Rank: 0, Size: 4, Iface: "eth0",
//		Job: 7, Coordinator: "http://10.0.0.1:7000", Node: "h1"})
//	err = comm.AllReduce(ctx, send, recv, nil)       // []float32, []int8, []host.Float16, []host.BFloat16
//	req := comm.AllReduceAsync(ctx, send, recv, nil) // ... req.Wait()
//
// It owns the rank side of one collective: the barrier request to the Host
// Coordinator over the runtime channel (package control/am's Client), DATA
// sent through a stream.SendWindow with retransmission driven by PROGRESS,
// RESULT received through a stream.RecvWindow and answered with PROGRESS,
// the completion report to the coordinator and the errors that say what
// failed (which contributor, which element range, timeout, coordinator
// unreachable, interface down, ACCUMULATION_INEXACT).
//
// It must not touch: switch-side state (packages engine, control), wire
// layouts beyond calling package parser, arithmetic beyond converting an
// AUTO-encoded RESULT with package kulisch, or flags (cmd/prismctl parses
// those; ConfigFromEnv and LoadConfig read the environment and files).
//
// Frames go through an AF_PACKET socket on the rank's interface (package
// control/am's PacketConn, EtherType 0x88B5 only). Element values are sent
// in host memory order, which is the wire's little-endian on every platform
// prismd supports (amd64, arm64); NewComm refuses a big-endian host.
package host

// Package bitmap is the host side of prismd's bitmap framework
// (docs/protocol.md section 8, bitmap-framework.txt): what ranks and
// applications link to run
//
//   - bitmap AllReduce (AllReduce): every worker sends its chunks as
//     DATA + EXT with P-BM = its own endpoint and Token = the chunk sequence;
//     switches aggregate against their A-BMs; the root host (parameter server
//     role) adds its own endpoints, detects a PARTIAL contribution (P-BM not
//     equal to its A-BM), names the missing endpoints exactly and asks only
//     them to retransmit (a zero-group RESULT whose D-BM is the miss set),
//     then multicasts the RESULT (D-BM = the workers) that every worker
//     assembles;
//   - MoE dispatch/combine (MoE, Handle, Dispatch/Receive/Return/Combine),
//     shaped like DeepEP: each token goes out once as RESULT + EXT + INSTALL
//     with D-BM = its top-K experts and its gating weights, experts
//     pre-multiply, switches merge the returns against the self-installed
//     C-BMs, the source gets one combined vector per token; ReferenceMoE is
//     the unicast implementation used as the oracle. A source keeps a window
//     of tokens in flight, and re-dispatches each chunk (each its own
//     Token) only to the experts that chunk misses: re-dispatching every
//     chunk to the union let the switches merge contributions the source
//     already held with ones it lacked, which it could never use;
//   - reliable multicast of files (SendFile/ReceiveFile): windows of RESULT +
//     EXT (D-BM = receivers, Token = window), zero-group ACKs aggregated in
//     the network (one per window at the source), PARTIAL ACKs repaired by a
//     multicast to the miss set that self-installs its own ACK tree, a
//     window that a later-sent window overtook repaired at once (FIFO paths
//     make that proof of a loss), an AIMD window of windows in flight, a
//     SHA-256-verified manifest window first.
//
// Hosts open their socket with SocketBuffer-sized buffers (conn.go): with
// the kernel's default receive buffer, a MoE dispatch burst overflowed the
// experts' sockets.
//
// It owns host-side protocol state only: tokens, windows, retransmission,
// duplicate suppression, exact accumulation of what arrives at a root
// (package kulisch), and the errors that name missing endpoints. Reliability
// is end to end by Token (bitmap-framework sections 3-5): hosts neither send
// nor expect PROGRESS for BITMAP operations, and ignore any they receive.
//
// It must not touch: switch state (engine/bitmap), registration and trees
// (control/bitmapam computes the plan every participant reads; nothing here
// sends CONTROL), wire layouts beyond calling parser, set algebra beyond
// calling bitmapfwd, or flags (cmd/prismctl).
//
// Per-job authentication (protocol 8.6) is a Port's: Port.SetKey gives it a
// job's key, and from then on every DATA/RESULT frame of that job it builds
// carries the AUTH tag (signed once when built, again only when a
// retransmission sets RETRANSMIT), and every DATA/RESULT frame of the job it
// receives is verified in the read loop, before it is copied for an
// operation: a missing or wrong tag is dropped and counted (AuthDrops). One
// HMAC state per key, reset per frame, so neither side allocates.
//
// Values are sent in host memory order, the wire's little-endian on every
// platform prismd supports. Per-frame host code allocates (frames are built
// with parser.AppendData); the zero-allocation rule applies to the switch,
// and to the tag paths above.
package bitmap

// Package bitmapam is the control-plane side of bitmap-framework jobs
// (docs/protocol.md section 5.1 with Collective 3 = BITMAP, and section 8):
// from a topology and a job's endpoint assignment it plans, for every switch
// that takes part, the STAGE context (role, bindings, tenant), the node's
// A-BM (set record with Binding Index 0xFF) and the BIFT mask of every
// RESULT_OUT binding, and it registers them with STAGE and COMMIT (ABORT on
// failure, RELEASE at the end) over CONTROL.
//
// It owns:
//   - the trees of the three use cases: the AllReduce virtual aggregation tree
//     (VAT) on any switches, whose dissemination tree is computed separately
//     from the physical topology and may differ from it; and the source-rooted
//     trees of reliable multicast and MoE dispatch, whose aggregation direction
//     is the reverse of the multicast (pre-configured A-BMs, or none so that
//     INSTALL self-installs C-BMs);
//   - endpoint IDs (bit positions) and the job's encoding, chosen once per job
//     by bitmapfwd.Choose and written into every set record;
//   - the host view of each plan (HostPlan: which stream, endpoints and MACs a
//     host uses to send and to receive), which package host/bitmap consumes;
//   - a small CONTROL transaction client (retransmission with the same
//     Transaction ID and identical bytes) over an am.Conn;
//   - the plan-time size check: a switch's merged partial (or merged ACK)
//     carries its A-BM as P-BM, so a plan in which that frame exceeds the
//     job's MTU (a dense job of tens of thousands of endpoints) is refused
//     with the job size, the MTU and the remedies (domain boundaries,
//     docs/protocol.md 8.10, or MTU 9000 when that suffices). Placing
//     boundaries itself is not done yet.
//
// It must not touch: switch-side state (engine/bitmap, control), the data
// path of hosts (host/bitmap), set algebra beyond calling bitmapfwd, or wire
// layouts beyond calling parser. It reuses am.Conn / am.OpenConn for the
// socket; package am's CONTROL client is unexported, so this package keeps its
// own (about a hundred lines) rather than editing am.
//
// Planning is pure and deterministic: every participant (the registering
// host, each rank, each receiver) computes the same plan from the same
// JobSpec and topology, which is how ranks learn their bindings without a
// coordinator round trip.
package bitmapam

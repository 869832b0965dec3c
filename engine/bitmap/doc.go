// Package bitmap is the switch side of the bitmap framework
// (docs/protocol.md section 8): BITMAP contexts (STAGE Collective 3) served
// per dataplane worker by a Shard, next to package engine's REDUCE and
// ALLREDUCE contexts.
//
// It owns, per worker (one Shard per worker, no locks on the frame path):
//   - the BITMAP context table: the node's A-BM (set record 0xFF), the BIFT
//     masks of its RESULT_OUT bindings (set records naming a binding), its
//     bindings, tenant and arithmetic tuple, and the lifecycle calls package
//     control makes (Stage, Commit, State, Status, Release, Abort);
//   - the multicast direction (RESULT + EXT, the set is a D-BM): BIER-style
//     replication to every RESULT_OUT whose mask meets the D-BM, each copy
//     carrying D-BM AND mask re-encoded in the frame's own encoding
//     (FLAT/HIER/LIST, same parameters), never back out the ingress binding,
//     no empty copy, unrouted bits counted; with INSTALL, on a node that
//     sends two or more copies, C-BM soft state keyed by (operation, tenant,
//     token) with the context Timeout as lifetime, at most Window Intervals
//     entries (no room: forwarded without installing, counted);
//   - the aggregation direction (DATA + EXT, the set is a P-BM): against an
//     installed C-BM first, else the A-BM; P-BM bits outside it are dropped
//     (bad_endpoint); an already covered P-BM is a duplicate and is not
//     applied again; a partly covered one is rejected (overlap) unless the
//     frame has zero groups (an ACK has no values to count twice, so only its
//     new bits are ORed); values are added by position into exact
//     accumulators (package kulisch, KULISCH_FIXED or FP32_ARRIVAL per the
//     tuple); when the OR equals the target one DATA goes to PARENT with
//     P-BM = the OR in the partial policy's format, or, at the root (no
//     PARENT), the sum is rounded once to the output format and multicast
//     through the BIFT with D-BM = the OR; nodes with no state for the token
//     forward the DATA unchanged on PARENT (new MACs, endpoints, stream);
//   - completion timeouts: an aggregation not complete within the context
//     Timeout (counted from its first contribution for A-BM, from INSTALL
//     for C-BM) is emitted with XFlag PARTIAL and P-BM = the incomplete OR
//     (at the root: multicast to exactly the contributors it holds), and the
//     missing endpoints are logged and kept in the snapshot; an aggregate
//     that merged a PARTIAL contribution is PARTIAL too, and so is the
//     root's RESULT made from it;
//   - domain boundaries (set record 0xFE, see below);
//   - per-job isolation: the extension Tenant must equal the context's
//     before any state is touched; with a key in the Keyring the AUTH tag is
//     verified on every frame and every derived frame is signed;
//   - counters (counters.go, a prometheus.Collector) and the introspection
//     snapshot (snapshot.go).
//
// It must not touch: sockets and ports (package dataplane; a Shard only calls
// dataplane.Sender), CONTROL bytes, transactions and generations (package
// control validates STAGE and calls Stage/Commit/... here), REDUCE/ALLREDUCE
// contexts (package engine), wire layouts (package parser), arithmetic
// (package kulisch) and set algebra (package bitmapfwd).
//
// # Reliability: no hop-by-hop PROGRESS for BITMAP contexts
//
// Section 8 does not ask for hop-by-hop delivery feedback on bitmap frames
// and this package sends none: no receive windows, no replay buffers, no
// retransmission by the switch. The design relies on end-to-end recovery by
// the hosts, driven by the framework's own information: a PARTIAL (or a
// missing result) names exactly whose contributions are missing, and the
// source retransmits to D-BM AND NOT P-BM with the same token. That is safe
// because every merge is an OR: a duplicate contribution is recognised
// (covered bits, or a recently completed token's bits) and not applied
// again, so retransmissions, replays and duplicated frames never
// over-complete an aggregation or count a value twice. Packet IDs on derived
// frames are still numbered 1, 2, 3... per binding, so captures read
// normally. A PROGRESS for a BITMAP context is dropped (the node routes
// PROGRESS to package engine, which knows no such operation).
//
// # Aggregation unit
//
// One Token is one aggregation: every contribution of a token covers the
// same element range (its First Element and Element Count; a different
// range is dropped as bad_range), and the merged value is emitted as one
// frame in the partial (or, at the root, output) format. MaxTokenElements
// says how large a token may be for that: at MTU 1500 with a one-word FLAT
// set, 38 elements with KULISCH-288 (or AUTO under KULISCH_FIXED) partials,
// 356 with FP32. A contribution larger than that is not merged: it is
// forwarded unmerged on PARENT (counted pass_through), so the next merge
// point or the root host still adds it exactly; only the in-network
// reduction is lost for that token. A root that cannot fit its output drops
// it (over_mtu). A merged value that cannot be represented (Kulisch
// overflow, INT8 output out of range) is sent as ACCUMULATION_INEXACT with
// its P-BM.
//
// A recently completed (or timed-out) token is remembered with the bits it
// covered (a cache of about Window Intervals tokens), so a late contribution
// never opens an aggregation that could only time out and is never merged
// twice. One whose P-BM meets what already went up is forwarded unmerged on
// PARENT (counted late_forward): the merged frame may have been lost above,
// and the hosts' retransmissions are then the only way those bits reach the
// root; a merge point above that still waits merges it, one that has the
// bits counts it duplicate, a root host ORs P-BMs. Within lateGuardNs (1 ms)
// of the emission it is dropped as a duplicate instead, so a network copy
// cannot overtake the merged frame and make it an overlap above; a switch
// root (no PARENT) always drops it as a duplicate. A
// repair round for such a token (the hosts retransmit the miss set with the
// same Token) aggregates at an A-BM node against only what is still missing
// (A-BM minus what already went up) and is emitted as soon as that arrived,
// carrying only the new bits; a node above that is still waiting merges it
// into the full result. A switch root that already disseminated a partial
// result cannot add late contributions to it (it would multicast them alone
// to their own endpoints): jobs that repair put the root on a host (the AM's
// plans do), or retry with a new Token. Tokens are not reused for new data
// while they are in that cache.
//
// # Domain boundaries
//
// A node staged with a boundary set (set record 0xFE, docs/protocol.md
// 8.10) is the root of an aggregation domain: its A-BM names the endpoints
// below it, its boundary set the identity (typically one endpoint) it has in
// the enclosing domain. What it aggregates against its A-BM goes up with
// P-BM = the boundary set, the record's own bytes (complete, PARTIAL on
// timeout, or ACCUMULATION_INEXACT), so no frame above it carries its A-BM
// (and a P-BM from below that names the boundary set is bad_endpoint):
// a dense job of 65536 endpoints becomes 16 blocks of 4096 whose upper root
// has a one-word A-BM (boundary_test.go). A RESULT without INSTALL whose
// D-BM holds a boundary endpoint is replicated as if this node were the
// root: D-BM = its A-BM, in the A-BM's encoding, split by its masks (other
// D-BM bits are counted unrouted); INSTALL frames carry global sets and are
// replicated as they are.
//
// Above a boundary only the PARTIAL flag says that a block's sum lacks
// contributions: the frames know missing endpoints at block granularity,
// the boundary's snapshot (Partials) names them exactly. For the same
// reason repairs do not cross a boundary: a contribution for a token the
// boundary already sent up is a duplicate if its bits went up, else late
// (dropped, "late"); one it has no room or frame for is dropped rather
// than forwarded, since its endpoints mean nothing above.
//
// # Timeouts along the tree
//
// Every node times out on its own clock. A parent whose Timeout equals its
// children's can fire before a child's PARTIAL arrives; then the parent emits
// its own PARTIAL and the child's arrives later as a separate (still exact)
// contribution upstream. The AM should therefore give parents a longer
// Timeout than their children (the tests use twice as long).
//
// Per-frame paths (Shard.HandleData) do not allocate and do not lock
// (alloc_test.go); allocation happens in Stage, on key changes, and in Tick
// (snapshot, PARTIAL log lines).
package bitmap

// Package engine knows operations: the per-operation contexts of the PRISM
// in-switch aggregation engine (roles SINGLE, LEAF, INTERNAL, ROOT;
// collectives REDUCE and ALLREDUCE).
//
// It owns, per dataplane worker (one Engine per worker, no locks):
//   - the operation table (STAGED, ACTIVE, COMPLETE, FAILED contexts) keyed by
//     the full operation identity including generations;
//   - admission of DATA, RESULT and PROGRESS frames against the bindings of an
//     active context (ingress port, source MAC, endpoints, stream);
//   - one stream.RecvWindow per inbound binding (contributors, RESULT_IN) and
//     one stream.SendWindow per outbound binding (PARENT, RESULT_OUT), with
//     PROGRESS generation and hop-by-hop retransmission;
//   - the ring of accumulators covering the active element window, joined by
//     global element position, the completion frontier (minimum committed
//     watermark over contributors), partial emission to the parent (KULISCH
//     and AUTO partials under KULISCH_FIXED as KULISCH_F64 frames where
//     binary64 holds the values, else compact KULISCH_SCALED groups where
//     smaller; Config.CompactKulischPartials and PlainKulischPartials turn
//     those off), the single final rounding at the root and RESULT
//     replication;
//   - inactivity timeouts, ACCUMULATION_INEXACT, counters (metrics.go) and
//     introspection snapshots (snapshot.go);
//   - failure: a context that FAILS records why (TIMEOUT, PEER_FAILED,
//     INTERNAL) and on which stream, for COMPLETE's ACK, and announces it
//     to the peer of every stream it receives (PROGRESS status FAILED,
//     three times), so one silent rank fails the whole tree and reaches
//     every rank within milliseconds of its leaf's timeout. Switch peers
//     get a quarter more time than ranks, so the node nearest a silent
//     rank is the one that times out and names it.
//
// It must not touch: sockets, ports and MAC learning (package dataplane; the
// engine only calls dataplane.Sender), CONTROL bytes, transactions and
// generation retirement (package control: it validates STAGE and calls
// Stage/Commit/Release/Abort here), wire layouts (package parser) and
// arithmetic (package kulisch).
//
// Per-frame paths (HandleData, HandleProgress) do not allocate and do not
// lock; allocation happens in Stage, and in the Ticks that rebuild the
// introspection snapshot (SnapshotInterval). Stage reuses the accumulator bank of a removed operation of the
// same shape (takeBank: at most 2 per shape, and a quarter of MaxRingBytes
// but at least 64 MiB per engine, wait for reuse, outside MaxRingBytes;
// both pools are dropped after 30 s without a Stage): a job's back-to-back
// operations would
// otherwise fault in and zero their rings every time (13 MB and 9 ms for a
// KULISCH_FIXED ring of 64 jumbo frames; 0.4 ms reused). Likewise the
// replay buffers of its outgoing windows (stream.BufferPool: at most 16 per size,
// 32 MiB per engine): 1.7 MB of fresh memory per operation at a jumbo-MTU
// leaf otherwise.
//
// Under KULISCH_FIXED a LEAF or INTERNAL node first checks whether
// binary64 holds every value of the next frame (kulisch.Vector.F64Run:
// the element's exact sum is its float64 lane, as sums of a few similar
// FP32 values are) and sends it as one KULISCH_F64 group, a copy of the
// lanes: planning and encoding KULISCH_SCALED groups was three quarters of
// a leaf's CPU on gradient-like data (under AUTO, values FP32 holds still
// go as FP32, half the bytes). Otherwise it plans the frame as AUTO groups
// or KULISCH_SCALED groups, whichever carries more. Once AUTO
// has won a few frames in a row the scaled plan is made for one frame in
// 16, then ever fewer up to one in 128 (scaledProbe, backoff), unless AUTO
// needs KULISCH groups: on sums AUTO holds in FP32 the discarded scaled
// plans were a quarter of a leaf's CPU. Once AUTO's plan has been one FP32
// group a few frames in a row, the frames in between two plans go out as
// FP32 after checking only that FP32 holds each value (fp32Fast): the AUTO
// sets and plan of such sums were a fifth of a leaf's CPU.
//
// BITMAP contexts (STAGE Collective 3, the bitmap framework) are not here:
// package engine/bitmap serves them per worker next to this engine, and
// package control routes each operation to the one that owns it. The
// REDUCE/ALLREDUCE structures were kept compatible with that split: the
// contributors of an operation are an indexed slice (a contributor set is a
// bitmap over it), and emission replicates one encoded frame to a list of
// outgoing bindings (a destination set), so a bitmap-driven completion test
// or BIFT-driven replication can replace those two points without touching
// windows or arithmetic.
package engine

// Package bitmapfwd knows endpoint sets: the bitmaps of the bitmap framework
// (A-BM, P-BM, C-BM, D-BM), their three wire encodings, BIER-style stateless
// replication and the completion state an aggregating node keeps.
//
// What it owns:
//
//   - Set: the internal, canonical form of an endpoint set. A flat bitmap of
//     64-bit words with a fixed capacity per job (the job's bit space, 65536
//     endpoints and more). AND, OR, AND-NOT, Equal, Count, membership and
//     iteration never allocate once the destination exists.
//   - The endpoint-set BODY encodings of docs/protocol.md section 8: FLAT
//     (Set ID + bitmap), HIER (upper bitmap over blocks + one lower bitmap per
//     selected block) and LIST (strictly ascending 32-bit endpoint IDs, capped
//     per job). Decode validates every length and field and reports a typed
//     *DecodeError naming the field; Append encodes; every encoding converts
//     losslessly to and from Set. Choose applies the trade-off of
//     bitmap-framework section 7 (a bitmap is the default; a list only for a
//     very large domain with a very small K). Translator converts a host's
//     global node list into a domain's local bitmap at a domain boundary.
//   - BIFT: the bit index forwarding table of one switch for one job (one
//     mask per neighbour port), computed from a Topology by ComputeBIFT, and
//     Replicate, which emits one copy per neighbour carrying only that
//     neighbour's bits.
//   - Completion and SoftTable: the aggregation-side state. A Completion holds
//     a target (A-BM or C-BM) and the OR of the admitted P-BMs; SoftTable is
//     the MoE / reliable-multicast C-BM soft state keyed by (job, token) with
//     per-job quotas and a completion timeout.
//
// What it must not touch: no I/O, no clock (callers pass "now"), no frames.
// It imports neither dataplane, engine, control nor parser: parser knows the
// bytes around the body (extension header, lengths, auth tag); this package
// starts at the body. Arrows point one way: engine -> bitmapfwd.
//
// Bit numbering. The wire numbers bitmap bits most significant first, as the
// figures print them: bitmap bit b is bit (7 - b%8) of byte b/8, so the
// figures' "11000000" is endpoints 0 and 1 (w1 and w2; the figures count from
// 1, endpoint IDs count from 0). Set stores endpoint e in word e/64 at bit
// (63 - e%64), also most significant first, so a word written big-endian is
// exactly the wire bytes and encoding a bitmap is a byte swap per word, never
// a per-bit loop.
//
// Direction semantics (docs/protocol.md section 8). The class is the
// direction: a DATA frame travels in the aggregation direction and its set is
// a provenance set (P-BM: whose contributions the payload carries); a RESULT
// frame travels in the multicast direction and its set is a destination set
// (D-BM: where copies must go). Replicate is only for destination sets;
// Completion.Admit only for provenance sets. A P-BM must never be fed to
// Replicate: that is the misreading bitmap-framework section 6 warns about.
//
// Isolation. Bit positions are per job. Sets of different capacities are
// never combined: a binary operation on sets of unequal capacity panics, as a
// programming error, instead of silently truncating a set.
//
// Amplification (bitmap-framework section 8). Replicate sends at most one
// copy per port however many bits are set; bounding the set-bit count per
// packet is the engine's job (ReplicateResult.Bits and Set.Count give it),
// as is checking that a source only sets bits of its job.
//
// Test vectors. testdata/endpoint_sets.txt holds hand-built bodies (the
// figures' bitmaps among them) that other implementations can share.
//
// Concurrency. Set, Completion and SoftTable are not safe for concurrent
// mutation; the engine shards operations to workers. A BIFT is read-only once
// built, so many workers may Replicate through one BIFT concurrently, each
// with its own scratch Set.
package bitmapfwd

// Package conformance is an independent conformance test of prismd against
// docs/protocol.md, the byte-exact PRISM wire specification.
//
// Independence rule: the frame encoders and decoders, state expectations and
// ACK/PROGRESS checks in this package are written ONLY from docs/protocol.md.
// Nothing here imports or was derived from prismd's protocol packages
// (parser, engine, control, stream, kulisch, bitmapfwd, host, dataplane,
// metrics, cmd); the only module imports are deploy and deploy/labtest, for
// lab plumbing (namespaces, veth pairs, MAC derivation, /metrics). Where the
// specification is ambiguous the tests say which reading they assume.
//
// TestWorkedExamples (no root) rebuilds every worked example of section 12
// from its field values and compares it byte for byte with the printed hex,
// and decodes the printed hex back into fields. TestLab (root) acts as the
// Aggregation Manager and as two ranks over raw AF_PACKET sockets inside the
// namespaces of deploy/lab/single.yaml, against a real prismd.
//
// The package has no non-test code besides this file.
package conformance

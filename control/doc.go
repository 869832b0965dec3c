// Package control knows setup. Its node side (this package's node*.go,
// caps.go, introspect.go) turns a worker of the dataplane into a PRISM node:
// it implements dataplane.Handler, answers CONTROL transactions from the
// Aggregation Manager (STAGE, COMMIT, COMPLETE, RELEASE, ABORT, CAPS_QUERY)
// and hands DATA, RESULT and PROGRESS to the worker's engine shard. Its AM
// side lives in control/am (another owner).
//
// It owns: the trust check on CONTROL sources (configured AM MACs), the
// transaction record (a retried transaction with identical bytes gets its
// recorded ACK; the same Transaction ID with other bytes is a CONFLICT), the
// generation rules (an Operation ID is reusable after ABORT or RELEASE only
// with a strictly newer generation), node-level STAGE validation against the
// advertised capability records, CAPS_RESPONSE paging, and the HTTP
// introspection handler the daemon mounts.
//
// It must not touch: wire layouts (package parser validates every CONTROL
// frame), arithmetic (package kulisch validates tuples), operation data paths
// and windows (package engine), sockets (package dataplane) or flags and
// files (cmd/prismd).
//
// Sharding: the dataplane hashes (job, group, op) to a worker, so every
// CONTROL frame of one Operation ID, whatever its generation, reaches the
// same worker, which keeps that ID's generations and transactions without
// locks. CAPS_QUERY is answered by whichever worker receives it.
package control

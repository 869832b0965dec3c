// Package dataplane owns ports and frames: it reads batches of Ethernet frames
// from each Port, runs the L2 learning bridge (MAC table with aging, flooding,
// no hairpin), and hands locally addressed PRISM frames (EtherType 0x88B5)
// to per-worker Handlers through lock-free SPSC rings.
//
// It must not decode PRISM class headers (package parser knows bytes; the
// Handler, i.e. package engine, knows operations), parse configuration files
// (cmd/prismd does) or touch Prometheus (package metrics reads the counters
// this package exposes through Stats). Raw syscalls and unsafe live only in
// dataplane/internal/afpacket.
package dataplane

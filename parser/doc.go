// Package parser knows the bytes of the PRISM wire protocol (EtherType 0x88B5,
// docs/protocol.md) and nothing else.
//
// It owns:
//   - byte views over every header (ControlHeader, DataHeader, ProgressHeader,
//     ExtHeader, GroupDescriptor, ContextRecordView, BindingView, ...), in the
//     style of gvisor's pkg/tcpip/header: offset constants under an ASCII
//     diagram, getters and setters, no validation inside accessors;
//   - value structs (Control, Data, Progress, Ext) whose Decode validates a whole
//     frame once, up front, and aliases the frame instead of copying, so the
//     per-frame path allocates nothing;
//   - encoders that write into caller-owned buffers (DataBuilder for the hot
//     path, Encode methods and Append helpers for control traffic and tests);
//   - typed errors (FieldError wrapping a sentinel) whose Reason is a stable
//     drop-reason label for metrics. Rejecting a frame allocates nothing
//     either: each decoder value (Control, Data, Progress, Ext; likewise
//     DataBuilder and Authenticator) owns one FieldError, fills it on
//     rejection and returns a pointer to it, valid until the next call on
//     the same value (copy *fe to keep it longer); Classify returns shared,
//     read-only package-level errors. A decoder value is therefore meant to
//     live as long as its worker: a short-lived local whose error escapes
//     (to Reason, a logger, a return) is moved to the heap by the compiler,
//     one allocation per decode. Encoders, Append helpers and ValidateSet,
//     off the receive path, return fresh errors;
//   - the optional per-job authentication tag (HMAC-SHA256/128, Authenticator).
//
// It must not touch: arithmetic on values (package kulisch), set algebra on
// endpoint sets (package bitmapfwd; this package only validates their byte
// layout and can enumerate endpoint IDs), operation state, windows and
// generations (package engine), sockets and ports (package dataplane). It
// imports nothing from prismd and nothing outside the standard library, so the
// hot path never pulls in gopacket: the gopacket layer lives in parser/layer.
//
// Conventions: every Decode takes a whole Ethernet frame (or, for the
// DecodePRISM variants, the bytes after the 14-byte Ethernet header); bytes
// after the length the PRISM headers declare are Ethernet padding and are
// ignored. Every FieldError Offset counts from the first byte of the Ethernet
// frame, whichever variant was called.
package parser

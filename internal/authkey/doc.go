// Package authkey owns the job keys of docs/protocol.md section 8.6 as
// operators handle them: their text form (hex), their files, their
// fingerprints and the length rule, so that prismd (which takes keys over its
// control socket), prismctl (which generates, installs and reads them) and
// the hosts agree on what a valid key is.
//
// It never prints, logs or formats a key: its errors name a file, a length
// or an offset, never key bytes, so an error message can be shown anywhere.
// What a key is used for (HMAC-SHA256 tags) belongs to package parser;
// which node holds which key to engine/bitmap (the switch) and host/bitmap
// (the hosts).
package authkey

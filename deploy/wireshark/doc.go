// Package wireshark holds the Wireshark dissector for prismd frames (prismd.lua,
// EtherType 0x88B5, protocol name "prismd", display-filter prefix "prismd.") and
// the tests that prove it decodes what the project's encoder writes.
//
// It owns: prismd.lua (the dissector), README.md (install, filters, the full
// field reference) and the tests. dissector_test.go writes a pcap with one frame
// of every kind built by package parser's encoders plus hand-corrupted frames
// (handbuilt_test.go), runs Debian's tshark with the dissector loaded
// (tshark_test.go) and compares every decoded field with the value the test
// encoded: the test's own inputs, FP16 tables and math/big are the oracle, never
// a decoder. robust_test.go feeds every prefix and thousands of random
// corruptions and requires expert info exactly where package parser rejects a
// frame, and no Lua error ever. fields_test.go keeps README.md's field list equal
// to the fields the dissector registers. The tests fail (not skip) without
// tshark: `make deps` installs it.
//
// It must not touch: anything outside deploy/wireshark. It has no non-test Go
// code; nothing in prismd imports it, and it imports package parser only from
// its tests.
package wireshark

// Package asmcheck reads the module's Go assembly files for one mistake a
// compiler would not catch: a legacy (non-VEX) SSE instruction in a
// function that also uses 256-bit AVX registers. Once a 256-bit
// instruction has dirtied the upper halves of the vector registers, a
// legacy SSE instruction costs a state transition: about 150 ns on the
// 2-core VMs prismd is measured on, where kulisch's lane kernel spent 77%
// of its time in three such moves in its prologue. The VEX forms (VMOVQ,
// VMOVD, VBROADCASTSD from memory, ...) cost nothing extra.
//
// The tests of the packages that have assembly (kulisch, stream) call
// Check on their files. It imports only the standard library (testing
// for Check's t).
package asmcheck

// Package kulisch knows numbers: the element formats of PRISM NumberGroups,
// the exact (Kulisch) accumulator, the rounded FP32_ARRIVAL accumulator, the
// single final rounding, the AUTO choice of a lossless per-group format and
// the (input, accumulator, partial, output) policy tuple rules.
//
// It owns arithmetic only. It does no I/O, keeps no global state and imports
// nothing from the project. It must not touch frames, headers, group
// descriptors or padding bytes (package parser), operations, windows and
// contributor bookkeeping (package engine), or ports (package dataplane).
// The engine hands it packed value bytes of one group and asks for values
// back; the parser writes the 4-byte descriptor and the zero padding.
//
// # Formats
//
// Format codes are those of docs/protocol.md section 6: INT8=1 (two's
// complement), FP16=2 (IEEE binary16), BF16=3, FP32=4 (IEEE binary32),
// KULISCH=5, AUTO=6 (a policy, never in a descriptor), KULISCH_SCALED=7 (a
// descriptor format of partials only, never a policy). All value bytes are
// little endian.
//
// A Kulisch value of width W bits (a multiple of 8, 64..4096) is one state
// byte (0 FINITE nonzero, 1 +0, 2 -0, 3 +inf, 4 -inf, 5 NaN) followed by a
// W-bit signed two's-complement little-endian integer in units of 2^-149,
// the FP32 subnormal quantum. Every INT8, FP16, BF16 and FP32 value is an
// integer multiple of 2^-149, so each converts into the accumulator exactly;
// the integer is zero for states 1..5 and nonzero for FINITE.
//
// A KULISCH_SCALED value is the same state byte followed by a B-byte signed
// integer; the group's Shift (in the Scale Word the parser writes) scales
// it: value = integer x 2^Shift units. Shift + 8B <= W keeps every value in
// the W-bit range, so merging one can never wrap. Spans gives each value's
// extent (lowest set bit, signed width), ScaledPlanner cuts a run into
// groups (ScaleFor picks Shift and B; a greedy pass with a short
// lookahead decides where groups end, within a few percent of the
// byte-optimal cut; plain KULISCH where that is no larger),
// PutScaled encodes and
// MergeScaled adds exactly, straight into the carry-save digits. A partial
// of exact sums of a few FP32 values spans a few dozen bits, so it costs
// about 5-6 bytes per value instead of 1 + W/8.
//
// # Width rule
//
// The largest FP32 magnitude is (2^24-1)*2^104 < 2^277 units, so one term
// needs 277 magnitude bits plus a sign bit, and N terms add ceil(log2 N)
// bits: W >= 278 + ceil(log2 N) (RequiredBits, RequiredWidth rounds up to a
// multiple of 8). INT8 and FP16 inputs need less (MinWidthFor). N counts
// original rank contributions over the whole tree, not one node's children.
//
// Overflow is a property of the exact value, not of the order in which it
// was built: the accumulator keeps enough internal headroom that no
// intermediate sum ever wraps, and every export (wire value, rounding, AUTO
// set) checks that the finite value fits W and returns ErrOverflow if it
// does not. A value that does not fit is never wrapped or saturated. This
// keeps the error itself order independent, which a sticky "some
// intermediate exceeded W" flag would not be.
//
// # Special values
//
// NaN is the canonical quiet NaN (0x7FC00000 in FP32, 0x7E00 FP16, 0x7FC0
// BF16); a NaN input or +inf together with -inf gives NaN; otherwise any
// infinity wins over the finite part. An exact zero is -0 only when every
// input was -0: -0 is the additive identity, so an accumulator with no input
// yet also reads as -0 and merges as a no-op.
//
// # Final rounding
//
// KULISCH_FIXED rounds once, at final output, to FP32, FP16 or BF16 with
// round-to-nearest ties-to-even; subnormals are kept and magnitudes past the
// largest finite value become infinity as in IEEE 754. INT8 output requires an
// integral value in -128..127 and is otherwise an error (ErrNotInt8), never a
// clamp.
//
// # FP32_ARRIVAL is order dependent
//
// FP32_ARRIVAL (ArrivalVector) keeps one FP32 state per element and adds each
// contribution with round-to-nearest ties-to-even in the order the engine
// admits it. FP16, BF16 and INT8 inputs are first converted exactly to FP32.
// Because every addition rounds, the result depends on arrival order and on
// the tree shape: (a+b)+c and a+(b+c) can differ in the last bit, and with
// cancellation by far more (1e8 + 1 - 1e8 is 0 in one order and 1 in
// another). Only KULISCH_FIXED gives a result independent of order and tree.
// AUTO under FP32_ARRIVAL only re-encodes the already rounded value.
//
// # AUTO
//
// PlanAuto chooses, for a run of consecutive positions, concrete groups
// whose format is lossless for every value in the group (FormatSet says
// which formats are lossless for one value; FP16 and BF16 are incomparable).
// It uses a deterministic eight-element lookahead over value widths,
// descriptors, padding and the packet budget, and falls back to a single
// group of the policy's base format whenever that would carry more values or
// the same values in fewer bytes, so AUTO never does worse than the base.
//
// # Engine interface
//
// Bank is what the engine drives for either policy: NewBank returns a
// *Vector (KULISCH_FIXED) or an *ArrivalVector (FP32_ARRIVAL). Add takes one
// NumberGroup's packed values (an input, or a child's partial in KULISCH or
// an AUTO-chosen format), PutValues writes a run in one concrete format, and
// AutoSet plus PlanAuto choose AUTO groups; a *Vector also encodes and
// merges KULISCH_SCALED groups (Spans, ScaledPlanner, PutScaled, MergeScaled),
// which need the group's Shift and so are not Bank.Add. Accumulator wraps one exact
// accumulator for simple uses. Nothing here is safe for concurrent use: the
// engine owns each bank from one goroutine.
//
// # Performance
//
// Vector stores N accumulators in one flat slice of 32-bit digits held in
// int64 words (carry-save): an FP32 term m*2^e touches exactly two words
// with no carry propagation and no data-dependent branch; carries are
// resolved only when a value is read, and in bulk before any word could
// overflow (every 2^29 batches). In front of the digits each element has a
// float64 lane: an FP32 or BF16 term goes there while the TwoSum error of
// the addition is zero, so the lane always holds an exact part of the
// value, and to the digits otherwise. A few contributors of similar
// magnitude never touch the digits. PutValues to FP32 rounds such an
// element with one conversion, and AutoSet, Spans and PutScaled read its
// float64 directly (lane.go); MergeScaled adds a partial of at most 8
// integer bytes to the lane under the same exactness test, so a parent
// keeps lanes too. Every other reader folds the lane into the digits
// first. In a KULISCH_FIXED switch reducing FP32 this halved prismd's CPU
// per DATA frame (12.2 to 6.5 us; the AVX2 kernels then took it to about
// 3.6): the digit rows of the accumulator ring, not the arithmetic, were
// the cost. On a spine-leaf tree with gradient-like data (16M FP32, 4
// ranks) the lane readers, and skipping AUTO's plan where scaled groups
// already carry more, took an ALLREDUCE from 11.6 to 4.4 s. The per-value loops live in add_unsafe.go,
// the package's one unsafe concern: bounds are checked once per batch. Adds,
// merges, rounding, wire encoding, AUTO and KULISCH_SCALED planning do not
// allocate.
package kulisch

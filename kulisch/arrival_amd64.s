#include "textflag.h"

// The lane-row kernels (laneOutAVX2, laneExactAVX2, laneCopyAVX2) walk
// four elements at a time with the same registers: SI lanes, BX flags,
// R10 nlo, R11 hi, CX elements left, R9 elements done, DX the flags that
// stop, Y7 zero. LANEROWS loads the four lanes into Y0 and jumps to done
// unless every lane is nonzero, no flag in DX is set and every digit row
// is empty; LANENEXT steps past the four.
#define LANEROWS(done) \
	VMOVUPD   (SI), Y0; \
	VCMPPD    $4, Y7, Y0, Y1; \
	VMOVMSKPD Y1, AX; \
	CMPL      AX, $15; \
	JNE       done; \
	MOVL      (BX), AX; \
	TESTL     DX, AX; \
	JNZ       done; \
	MOVL      (R10), AX; \
	ORL       (R11), AX; \
	JNZ       done

#define LANENEXT \
	ADDQ $32, SI; \
	ADDQ $4, BX; \
	ADDQ $4, R10; \
	ADDQ $4, R11; \
	ADDQ $4, R9; \
	SUBQ $4, CX

// func addFP32AVX2(s *float32, v *byte, n int)
// s[i] += v[i] for i < n; n is a multiple of 8. VADDPS rounds by MXCSR
// (nearest even, no FTZ/DAZ: Go never changes it), as the scalar ADDSS
// does; only a NaN's payload may differ, and outputs make NaN canonical.
TEXT ·addFP32AVX2(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX

loop32:
	CMPQ CX, $32
	JB   loop8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VADDPS  (SI), Y0, Y0
	VADDPS  32(SI), Y1, Y1
	VADDPS  64(SI), Y2, Y2
	VADDPS  96(SI), Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     loop32

loop8:
	CMPQ CX, $8
	JB   done
	VMOVUPS (DI), Y0
	VADDPS  (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     loop8

done:
	VZEROUPPER
	RET

// func putFP32AVX2(dst *byte, s *float32, n int)
// dst[i] = s[i] with every NaN replaced by the canonical 0x7FC00000;
// n is a multiple of 8.
TEXT ·putFP32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7FFFFFFF, AX
	VMOVD AX, X4
	VPBROADCASTD X4, Y4
	MOVL $0x7F800000, AX
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	MOVL $0x7FC00000, AX
	VMOVD AX, X6
	VPBROADCASTD X6, Y6

ploop:
	CMPQ CX, $8
	JB   pdone
	VMOVDQU   (SI), Y0
	VPAND     Y4, Y0, Y1
	VPCMPGTD  Y5, Y1, Y1   // |x| > +Inf: NaN
	VPBLENDVB Y1, Y6, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $32, DI
	ADDQ      $32, SI
	SUBQ      $8, CX
	JMP       ploop

pdone:
	VZEROUPPER
	RET

// func fillAVX2(s *float32, n int, bits uint32)
// s[i] = bits for i < n; n is a multiple of 8.
TEXT ·fillAVX2(SB), NOSPLIT, $0-20
	MOVQ s+0(FP), DI
	MOVQ n+8(FP), CX
	MOVL bits+16(FP), AX
	VMOVD AX, X0
	VPBROADCASTD X0, Y0

floop32:
	CMPQ CX, $32
	JB   floop8
	VMOVDQU Y0, (DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     floop32

floop8:
	CMPQ CX, $8
	JB   fdone
	VMOVDQU Y0, (DI)
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     floop8

fdone:
	VZEROUPPER
	RET

// func laneAddAVX2(lane *float64, vals *byte, flags *uint8, n int, lim float64) int
// Four binary32 terms at a time: x widened exactly to float64, s = lane+x,
// and the TwoSum error (lane-(s-(s-lane)))+(x-(s-lane)). The group is
// stored only if every error is zero and every |s| < lim (an infinity or
// NaN fails one of the two); otherwise the kernel stops there and returns
// how many it stored. flags[i] |= 1 (fNonNegZero) unless the term is -0.
// n is a multiple of 4.
TEXT ·laneAddAVX2(SB), NOSPLIT, $0-48
	MOVQ   lane+0(FP), DI
	MOVQ   vals+8(FP), SI
	MOVQ   flags+16(FP), BX
	MOVQ   n+24(FP), CX
	VBROADCASTSD lim+32(FP), Y9
	MOVQ   $0x7FFFFFFFFFFFFFFF, AX
	VMOVQ  AX, X10
	VPBROADCASTQ X10, Y10
	MOVL   $0x80000000, AX
	VMOVD  AX, X11
	VPBROADCASTD X11, X11
	MOVL   $1, AX
	VMOVD  AX, X12
	VPBROADCASTD X12, X12
	VXORPD Y7, Y7, Y7
	XORQ   R9, R9

lloop:
	CMPQ      CX, $4
	JB        ldone
	VMOVDQU   (SI), X0
	VCVTPS2PD X0, Y1          // x
	VMOVUPD   (DI), Y2        // a
	VADDPD    Y1, Y2, Y3      // s = a + x
	VSUBPD    Y2, Y3, Y4      // bb = s - a
	VSUBPD    Y4, Y3, Y5      // s - bb
	VSUBPD    Y5, Y2, Y5      // a - (s - bb)
	VSUBPD    Y4, Y1, Y6      // x - bb
	VADDPD    Y6, Y5, Y5      // err
	VCMPPD    $0, Y7, Y5, Y5  // err == 0 (ordered)
	VANDPD    Y10, Y3, Y6     // |s|
	VCMPPD    $1, Y9, Y6, Y6  // |s| < lim (ordered)
	VANDPD    Y6, Y5, Y5
	VMOVMSKPD Y5, AX
	CMPL      AX, $15
	JNE       ldone
	VMOVUPD   Y3, (DI)
	VPCMPEQD  X11, X0, X8     // -0
	VPANDN    X12, X8, X8     // 1 where not -0
	VPACKUSDW X8, X8, X8
	VPACKUSWB X8, X8, X8
	VMOVD     X8, AX
	ORL       AX, (BX)
	ADDQ      $16, SI
	ADDQ      $32, DI
	ADDQ      $4, BX
	ADDQ      $4, R9
	SUBQ      $4, CX
	JMP       lloop

ldone:
	VZEROUPPER
	MOVQ R9, ret+40(FP)
	RET

// func laneOutAVX2(dst *byte, lane *float64, flags *uint8, nlo *uint8, hi *uint8, n int, special uint32) int
// Rounds Vector elements that are lane-only to FP32 four at a time: all
// four lanes nonzero, no flag of special (four copies of the byte mask of
// the infinity, NaN and overflow flags), no digits (bounds bytes zero) and
// no result rounding to infinity. Stops at the first group that is not
// such and returns how many it wrote (a multiple of 4); n is a multiple of 4.
TEXT ·laneOutAVX2(SB), NOSPLIT, $0-64
	MOVQ   dst+0(FP), DI
	MOVQ   lane+8(FP), SI
	MOVQ   flags+16(FP), BX
	MOVQ   nlo+24(FP), R10
	MOVQ   hi+32(FP), R11
	MOVQ   n+40(FP), CX
	MOVL   special+48(FP), DX
	MOVL   $0x7FFFFFFF, AX
	VMOVD  AX, X10
	VPBROADCASTD X10, X10
	MOVL   $0x7F800000, AX
	VMOVD  AX, X11
	VPBROADCASTD X11, X11
	VXORPD Y7, Y7, Y7
	XORQ   R9, R9

oloop:
	CMPQ       CX, $4
	JB         odone
	LANEROWS(odone)
	VCVTPD2PSY Y0, X2
	VPAND      X10, X2, X3
	VPCMPEQD   X11, X3, X3 // rounded to infinity
	VMOVMSKPS  X3, AX
	TESTL      AX, AX
	JNZ        odone
	VMOVUPS    X2, (DI)
	ADDQ       $16, DI
	LANENEXT
	JMP        oloop

odone:
	VZEROUPPER
	MOVQ R9, ret+56(FP)
	RET

// func laneExactAVX2(lane *float64, flags, nlo, hi *uint8, n int, special uint32) int
// laneOutAVX2's tests without its stores, plus exactness: FP32 must hold
// each value (float64 -> float32 -> float64 gives it back).
TEXT ·laneExactAVX2(SB), NOSPLIT, $0-56
	MOVQ   lane+0(FP), SI
	MOVQ   flags+8(FP), BX
	MOVQ   nlo+16(FP), R10
	MOVQ   hi+24(FP), R11
	MOVQ   n+32(FP), CX
	MOVL   special+40(FP), DX
	VXORPD Y7, Y7, Y7
	XORQ   R9, R9

xloop:
	CMPQ       CX, $4
	JB         xdone
	LANEROWS(xdone)
	VCVTPD2PSY Y0, X2
	VCVTPS2PD  X2, Y3
	VCMPPD     $0, Y0, Y3, Y4 // back to the same value: FP32 holds it
	VMOVMSKPD  Y4, AX
	CMPL       AX, $15
	JNE        xdone
	LANENEXT
	JMP        xloop

xdone:
	VZEROUPPER
	MOVQ R9, ret+48(FP)
	RET

// func laneAdd64AVX2(lane *float64, vals *byte, flags *uint8, n int, lim float64) int
// laneAddAVX2 for binary64 terms (checked KULISCH_F64 values), four at a
// time: the group is added only if every term is finite and nonzero, every
// TwoSum error zero and every |s| < lim; flags[i] |= 1 (fNonNegZero) for
// each. Zeros, infinities and NaN stop it like a spill. Returns how many
// it added, a multiple of 4; n is a multiple of 4.
TEXT ·laneAdd64AVX2(SB), NOSPLIT, $0-48
	MOVQ   lane+0(FP), DI
	MOVQ   vals+8(FP), SI
	MOVQ   flags+16(FP), BX
	MOVQ   n+24(FP), CX
	VBROADCASTSD lim+32(FP), Y9
	MOVQ   $0x7FFFFFFFFFFFFFFF, AX
	VMOVQ  AX, X10
	VPBROADCASTQ X10, Y10
	VXORPD Y7, Y7, Y7
	XORQ   R9, R9

dloop:
	CMPQ      CX, $4
	JB        ddone
	VMOVUPD   (SI), Y1          // x
	VANDPD    Y10, Y1, Y8       // |x|
	VCMPPD    $0x0E, Y7, Y8, Y8 // |x| > 0 (ordered: NaN fails)
	VMOVUPD   (DI), Y2          // a
	VADDPD    Y1, Y2, Y3        // s = a + x
	VSUBPD    Y2, Y3, Y4        // bb = s - a
	VSUBPD    Y4, Y3, Y5        // s - bb
	VSUBPD    Y5, Y2, Y5        // a - (s - bb)
	VSUBPD    Y4, Y1, Y6        // x - bb
	VADDPD    Y6, Y5, Y5        // err
	VCMPPD    $0, Y7, Y5, Y5    // err == 0 (ordered)
	VANDPD    Y10, Y3, Y6       // |s|
	VCMPPD    $1, Y9, Y6, Y6    // |s| < lim (ordered: infinities fail)
	VANDPD    Y6, Y5, Y5
	VANDPD    Y8, Y5, Y5
	VMOVMSKPD Y5, AX
	CMPL      AX, $15
	JNE       ddone
	VMOVUPD   Y3, (DI)
	ORL       $0x01010101, (BX)
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $4, BX
	ADDQ      $4, R9
	SUBQ      $4, CX
	JMP       dloop

ddone:
	VZEROUPPER
	MOVQ R9, ret+40(FP)
	RET

// func laneCopyAVX2(dst *byte, lane *float64, flags *uint8, nlo *uint8, hi *uint8, n int, special uint32) int
// laneOutAVX2 without the rounding: copies the lanes of elements that are
// lane-only (all four lanes nonzero, no flag of special, bounds bytes
// zero) to dst as binary64, four at a time. Stops at the first group that
// is not such and returns how many it wrote (a multiple of 4); n is a
// multiple of 4.
TEXT ·laneCopyAVX2(SB), NOSPLIT, $0-64
	MOVQ   dst+0(FP), DI
	MOVQ   lane+8(FP), SI
	MOVQ   flags+16(FP), BX
	MOVQ   nlo+24(FP), R10
	MOVQ   hi+32(FP), R11
	MOVQ   n+40(FP), CX
	MOVL   special+48(FP), DX
	VXORPD Y7, Y7, Y7
	XORQ   R9, R9

cloop:
	CMPQ      CX, $4
	JB        cdone
	LANEROWS(cdone)
	VMOVUPD   Y0, (DI)
	ADDQ      $32, DI
	LANENEXT
	JMP       cloop

cdone:
	VZEROUPPER
	MOVQ R9, ret+56(FP)
	RET

// func laneAddAVX512(lane *float64, vals *byte, flags *uint8, n int, lim float64) int
// laneAddAVX2 eight terms at a time (AVX-512F/DQ/VL and BMI2): the same
// tests, the group stored only if all eight pass; the not--0 flags are
// an eight-bit mask spread to bytes with PDEP. n is a multiple of 8.
TEXT ·laneAddAVX512(SB), NOSPLIT, $0-48
	MOVQ   lane+0(FP), DI
	MOVQ   vals+8(FP), SI
	MOVQ   flags+16(FP), BX
	MOVQ   n+24(FP), CX
	VBROADCASTSD lim+32(FP), Z9
	MOVQ   $0x7FFFFFFFFFFFFFFF, AX
	VPBROADCASTQ AX, Z10
	MOVL   $0x80000000, AX
	VPBROADCASTD AX, Y11
	MOVQ   $0x0101010101010101, R11
	VPXORQ Z7, Z7, Z7
	XORQ   R9, R9

eloop:
	CMPQ      CX, $8
	JB        edone
	VMOVDQU   (SI), Y0         // eight binary32 terms
	VCVTPS2PD Y0, Z1           // x
	VMOVUPD   (DI), Z2         // a
	VADDPD    Z1, Z2, Z3       // s = a + x
	VSUBPD    Z2, Z3, Z4       // bb = s - a
	VSUBPD    Z4, Z3, Z5       // s - bb
	VSUBPD    Z5, Z2, Z5       // a - (s - bb)
	VSUBPD    Z4, Z1, Z6       // x - bb
	VADDPD    Z6, Z5, Z5       // err
	VCMPPD    $0, Z7, Z5, K1   // err == 0 (ordered)
	VANDPD    Z10, Z3, Z6      // |s|
	VCMPPD    $1, Z9, Z6, K1, K2 // and |s| < lim (ordered)
	KMOVB     K2, AX
	CMPB      AL, $0xFF
	JNE       edone
	VMOVUPD   Z3, (DI)
	VPCMPD    $4, Y11, Y0, K3  // the term is not -0
	KMOVB     K3, AX
	PDEPQ     R11, AX, AX      // bit i -> byte i (0 or 1)
	ORQ       AX, (BX)
	ADDQ      $32, SI
	ADDQ      $64, DI
	ADDQ      $8, BX
	ADDQ      $8, R9
	SUBQ      $8, CX
	JMP       eloop

edone:
	VZEROUPPER
	MOVQ R9, ret+40(FP)
	RET

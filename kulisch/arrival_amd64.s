#include "textflag.h"

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

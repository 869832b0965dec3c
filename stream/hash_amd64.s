#include "textflag.h"

// func nhAVX2(b *byte, key *uint32, blocks int) uint64
// NH over blocks of 32 bytes: per block, s = words + key (eight 32-bit
// adds), then the four products s[2j] * s[2j+1] (VPMULUDQ multiplies the
// low words of 64-bit lanes; the shift brings each odd word down) summed
// in 64-bit lanes. Two blocks per round on two accumulators. Only VEX
// instructions: a legacy SSE one after a 256-bit instruction costs a
// state transition (see kulisch's laneAddAVX2).
TEXT ·nhAVX2(SB), NOSPLIT, $0-32
	MOVQ   b+0(FP), SI
	MOVQ   key+8(FP), DI
	MOVQ   blocks+16(FP), CX
	VPXOR  Y0, Y0, Y0
	VPXOR  Y1, Y1, Y1

loop2:
	CMPQ     CX, $2
	JB       loop1
	VMOVDQU  (SI), Y2
	VMOVDQU  32(SI), Y3
	VPADDD   (DI), Y2, Y2
	VPADDD   32(DI), Y3, Y3
	VPSRLQ   $32, Y2, Y4
	VPSRLQ   $32, Y3, Y5
	VPMULUDQ Y4, Y2, Y2
	VPMULUDQ Y5, Y3, Y3
	VPADDQ   Y2, Y0, Y0
	VPADDQ   Y3, Y1, Y1
	ADDQ     $64, SI
	ADDQ     $64, DI
	SUBQ     $2, CX
	JMP      loop2

loop1:
	CMPQ     CX, $1
	JB       done
	VMOVDQU  (SI), Y2
	VPADDD   (DI), Y2, Y2
	VPSRLQ   $32, Y2, Y4
	VPMULUDQ Y4, Y2, Y2
	VPADDQ   Y2, Y0, Y0

done:
	VPADDQ       Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4E, X0, X1
	VPADDQ       X1, X0, X0
	VMOVQ        X0, AX
	VZEROUPPER
	MOVQ         AX, ret+24(FP)
	RET

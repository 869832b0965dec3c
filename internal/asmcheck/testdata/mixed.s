#include "textflag.h"

// bad: a 256-bit add and legacy moves, one before it, one after.
TEXT ·bad(SB), NOSPLIT, $0-16
	MOVSD  x+0(FP), X1   // legacy: reported
	VBROADCASTSD X1, Y1
	MOVQ   AX, X2        // legacy: reported
	VADDPD Y1, Y1, Y1
	MOVQ   AX, BX        // no vector register
	VZEROUPPER
	RET

// sseonly: legacy SSE with no Y register anywhere is fine.
TEXT ·sseonly(SB), NOSPLIT, $0-16
	MOVSD x+0(FP), X1
	ADDSD X1, X1
	MOVSD X1, ret+8(FP)
	RET

// good: 256-bit code with VEX moves only.
TEXT ·good(SB), NOSPLIT, $0-16
	VBROADCASTSD x+0(FP), Y1
	VMOVQ  AX, X2
	VPBROADCASTQ X2, Y2
	VMOVD  X2, AX        // X2 in a VEX move
	VZEROUPPER
	RET

#include "textflag.h"

// func Bytes(b []byte)
TEXT ·Bytes(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	ADDQ SI, CX

loop:
	CMPQ       SI, CX
	JAE        done
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	JMP        loop

done:
	RET

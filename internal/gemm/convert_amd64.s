//go:build amd64 && !purego

#include "textflag.h"

DATA bf16c<>+0(SB)/4, $0x00007FFF  // half an ulp less one
DATA bf16c<>+4(SB)/4, $0x00000001  // the kept part's lowest bit
DATA bf16c<>+8(SB)/4, $0x7FFFFFFF  // |x|
DATA bf16c<>+12(SB)/4, $0x7F800000 // infinity: NaN above it
DATA bf16c<>+16(SB)/4, $0x00400000 // a NaN's quiet bit
GLOBL bf16c<>(SB), RODATA|NOPTR, $20

// ROUND8 rounds the 8 floats of register in to bfloat16 in the low halves
// of register out (roundBF16): (u + 0x7FFF + (u>>16)&1) >> 16, or
// for a NaN (u | 0x00400000) >> 16. Uses Y2 and Y3.
#define ROUND8(in, out) \
	VPSRLD $16, in, out; \
	VPAND Y14, out, out; \
	VPADDD Y15, out, out; \
	VPADDD in, out, out; \
	VPAND Y13, in, Y2; \
	VPCMPGTD Y12, Y2, Y2; \
	VPOR Y11, in, Y3; \
	VPBLENDVB Y2, Y3, out, out; \
	VPSRLD $16, out, out

// func toBF16AVX2(d *uint16, s *float32, n int)
TEXT ·toBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD bf16c<>+0(SB), Y15
	VPBROADCASTD bf16c<>+4(SB), Y14
	VPBROADCASTD bf16c<>+8(SB), Y13
	VPBROADCASTD bf16c<>+12(SB), Y12
	VPBROADCASTD bf16c<>+16(SB), Y11
	SHRQ $4, CX
	JZ to_done
to_loop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	ROUND8(Y0, Y4)
	ROUND8(Y1, Y5)
	// Pack the 16 words (per 128-bit lane, then put the quarters in order).
	VPACKUSDW Y5, Y4, Y6
	VPERMQ $0xD8, Y6, Y6
	VMOVDQU Y6, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ to_loop
to_done:
	VZEROUPPER
	RET

// func fromBF16AVX2(d *float32, s *uint16, n int)
TEXT ·fromBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ from_done
from_loop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ from_loop
from_done:
	VZEROUPPER
	RET

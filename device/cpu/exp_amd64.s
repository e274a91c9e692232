//go:build amd64 && !purego

#include "textflag.h"

// e^x for the lanes of R0 (Y or Z register x, overwritten by the result),
// with temporaries R1, R2, R3; RHI and RLO hold the clamp (89, -104).
// Constants at R8 + 64·index (expConst in exp.go); memory operands read 32
// or 64 bytes by the register width. Go's operand order: VOP b, a, dst
// computes dst = a OP b, and VMINPS/VMAXPS return b (here x) when either
// operand is NaN, so NaN passes the clamp; the arithmetic then keeps it.
// ROUND is VROUNDPS (AVX2) or VRNDSCALEPS (AVX-512), both with immediate 0:
// to nearest, ties to even.
#define EXP(ROUND, R0, R1, R2, R3, RHI, RLO) \
	VMINPS R0, RHI, R0; \
	VMAXPS R0, RLO, R0; \
	VMULPS 128(R8), R0, R1; \
	ROUND $0, R1, R1; \
	VMULPS 192(R8), R1, R2; \
	VSUBPS R2, R0, R0; \
	VMULPS 256(R8), R1, R2; \
	VSUBPS R2, R0, R0; \
	VMULPS R0, R0, R3; \
	VMULPS 320(R8), R0, R2; \
	VADDPS 384(R8), R2, R2; \
	VMULPS R0, R2, R2; \
	VADDPS 448(R8), R2, R2; \
	VMULPS R0, R2, R2; \
	VADDPS 512(R8), R2, R2; \
	VMULPS R0, R2, R2; \
	VADDPS 576(R8), R2, R2; \
	VMULPS R0, R2, R2; \
	VADDPS 640(R8), R2, R2; \
	VMULPS R3, R2, R2; \
	VADDPS R0, R2, R2; \
	VADDPS 704(R8), R2, R2; \
	VCVTPS2DQ R1, R1; \
	VPSRAD $1, R1, R3; \
	VPSUBD R3, R1, R1; \
	VPADDD 768(R8), R3, R3; \
	VPSLLD $23, R3, R3; \
	VPADDD 768(R8), R1, R1; \
	VPSLLD $23, R1, R1; \
	VMULPS R3, R2, R2; \
	VMULPS R1, R2, R0

// func expSumAVX2(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32)
TEXT ·expSumAVX2(SB), NOSPLIT, $0-48
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y15
	MOVQ acc+32(FP), DX
	MOVQ c+40(FP), R8
	VMOVUPS 0(R8), Y11
	VMOVUPS 64(R8), Y12
	VMOVUPD 0(DX), Y13
	VMOVUPD 32(DX), Y14
	XORQ AX, AX
exp2_loop:
	CMPQ AX, CX
	JGE exp2_done
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS Y15, Y0, Y0
	EXP(VROUNDPS, Y0, Y1, Y2, Y3, Y11, Y12)
	VMOVUPS Y0, (DI)(AX*4)
	VCVTPS2PD X0, Y1
	VADDPD Y1, Y13, Y13
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y2, Y14, Y14
	ADDQ $8, AX
	JMP exp2_loop
exp2_done:
	VMOVUPD Y13, 0(DX)
	VMOVUPD Y14, 32(DX)
	VZEROUPPER
	RET

// func expSumAVX512(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32)
TEXT ·expSumAVX512(SB), NOSPLIT, $0-48
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z15
	MOVQ acc+32(FP), DX
	MOVQ c+40(FP), R8
	VMOVUPS 0(R8), Z11
	VMOVUPS 64(R8), Z12
	VMOVUPD 0(DX), Z13
	XORQ AX, AX
exp16_loop:
	CMPQ AX, CX
	JGE exp16_done
	VMOVUPS (SI)(AX*4), Z0
	VSUBPS Z15, Z0, Z0
	EXP(VRNDSCALEPS, Z0, Z1, Z2, Z3, Z11, Z12)
	VMOVUPS Z0, (DI)(AX*4)
	VCVTPS2PD Y0, Z1
	VADDPD Z1, Z13, Z13
	VEXTRACTF64X4 $1, Z0, Y2
	VCVTPS2PD Y2, Z2
	VADDPD Z2, Z13, Z13
	ADDQ $16, AX
	JMP exp16_loop
exp16_done:
	VMOVUPD Z13, 0(DX)
	VZEROUPPER
	RET

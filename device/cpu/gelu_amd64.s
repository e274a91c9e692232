//go:build amd64 && !purego

#include "textflag.h"

// The exponential part shared by both loops: from x in Y0 it leaves x² in
// Y1, e = e^{-z} in Y4 (z = x·(c1 + c2·x²)) and in Y9 the mask of lanes
// where -z is not ≥ 80 (NaN included: VCMPPS predicate 9, NGE_US), using
// Y2, Y3 and Y5. Lanes outside the mask (x below about -10) take x·0 as
// GELU and |x|·0 as GELU' (zero, or NaN at -Inf, as the tanh form gives):
// there the clamp would make them wrong and they round to zero anyway.
// Constants are at R8 + 32·index (see geluConst in gelu.go). Operand order
// is Go's: VOP b, a, dst computes dst = a OP b.
#define GELU_EXP \
	VMULPS Y0, Y0, Y1; \
	VMULPS 32(R8), Y1, Y3; \
	VADDPS 0(R8), Y3, Y3; \
	VMULPS Y0, Y3, Y3; \
	VXORPS 448(R8), Y3, Y3; \
	VCMPPS $9, 96(R8), Y3, Y9; \
	VMAXPS 64(R8), Y3, Y3; \
	VMINPS 96(R8), Y3, Y3; \
	VMULPS 128(R8), Y3, Y2; \
	VROUNDPS $0, Y2, Y2; \
	VMULPS 160(R8), Y2, Y5; \
	VSUBPS Y5, Y3, Y3; \
	VMULPS 192(R8), Y2, Y5; \
	VSUBPS Y5, Y3, Y3; \
	VMULPS 256(R8), Y3, Y4; \
	VADDPS 288(R8), Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VADDPS 320(R8), Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VADDPS 352(R8), Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VADDPS 384(R8), Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VADDPS 224(R8), Y4, Y4; \
	VMULPS Y3, Y4, Y4; \
	VADDPS 224(R8), Y4, Y4; \
	VCVTPS2DQ Y2, Y5; \
	VPADDD 480(R8), Y5, Y5; \
	VPSLLD $23, Y5, Y5; \
	VMULPS Y5, Y4, Y4

// func geluAVX2(d, s *float32, n int, c *[16][8]float32)
TEXT ·geluAVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R8
	VXORPS Y10, Y10, Y10
	XORQ AX, AX
gelu_loop:
	CMPQ AX, CX
	JGE gelu_done
	VMOVUPS (SI)(AX*4), Y0
	GELU_EXP
	VADDPS 224(R8), Y4, Y4
	VDIVPS Y4, Y0, Y4
	VMULPS Y10, Y0, Y11
	VBLENDVPS Y9, Y4, Y11, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP gelu_loop
gelu_done:
	VZEROUPPER
	RET

// func geluGradAVX2(d, gr, x *float32, n int, c *[16][8]float32)
TEXT ·geluGradAVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ gr+8(FP), BX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ c+32(FP), R8
	VMOVUPS 224(R8), Y7
	VXORPS Y10, Y10, Y10
	XORQ AX, AX
gelugrad_loop:
	CMPQ AX, CX
	JGE gelugrad_done
	VMOVUPS (SI)(AX*4), Y0
	GELU_EXP
	VADDPS Y7, Y4, Y4
	VDIVPS Y4, Y7, Y4
	VSUBPS Y4, Y7, Y5
	VMULPS Y4, Y5, Y5
	VMULPS 416(R8), Y1, Y3
	VADDPS 0(R8), Y3, Y3
	VMULPS Y3, Y5, Y5
	VMULPS Y0, Y5, Y5
	VADDPS Y5, Y4, Y4
	VMOVUPS 448(R8), Y12
	VANDNPS Y0, Y12, Y12
	VMULPS Y10, Y12, Y12
	VBLENDVPS Y9, Y4, Y12, Y4
	VMOVUPS (BX)(AX*4), Y6
	VMULPS Y6, Y4, Y4
	VMOVUPS Y4, (DI)(AX*4)
	ADDQ $8, AX
	JMP gelugrad_loop
gelugrad_done:
	VZEROUPPER
	RET

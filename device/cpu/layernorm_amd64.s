//go:build amd64 && !purego

#include "textflag.h"

// AVX2 loops of layer norm (layernorm.go). Each works on n floats, n a
// multiple of 8, and adds element i's float64 term to lane i%8 of its
// accumulators, in order of i, as the Go loops do, so both give the same
// bits. No fused multiply-adds: every product and sum is rounded as in Go.

// WIDEN_ADD adds the 8 floats of src (xsrc: its low half), widened to
// float64, to lo (lanes 0-3) and hi (4-7), using Y2, Y3 and X3.
#define WIDEN_ADD(src, xsrc, lo, hi) \
	VCVTPS2PD xsrc, Y2 \
	VADDPD Y2, lo, lo \
	VEXTRACTF128 $1, src, X3 \
	VCVTPS2PD X3, Y3 \
	VADDPD Y3, hi, hi

// func lnSumAVX2(x *float32, n int, acc *[8]float64)
// acc[i%8] += float64(x[i]).
TEXT ·lnSumAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ acc+16(FP), DX
	VMOVUPD 0(DX), Y13
	VMOVUPD 32(DX), Y14
	XORQ AX, AX
lnsum_loop:
	CMPQ AX, CX
	JGE lnsum_done
	VCVTPS2PD (SI)(AX*4), Y1
	VADDPD Y1, Y13, Y13
	VCVTPS2PD 16(SI)(AX*4), Y2
	VADDPD Y2, Y14, Y14
	ADDQ $8, AX
	JMP lnsum_loop
lnsum_done:
	VMOVUPD Y13, 0(DX)
	VMOVUPD Y14, 32(DX)
	VZEROUPPER
	RET

// func lnSqDevAVX2(x *float32, n int, m float64, acc *[8]float64)
// e = float64(x[i]) - m; acc[i%8] += e*e.
TEXT ·lnSqDevAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD m+16(FP), Y15
	MOVQ acc+24(FP), DX
	VMOVUPD 0(DX), Y13
	VMOVUPD 32(DX), Y14
	XORQ AX, AX
lnsq_loop:
	CMPQ AX, CX
	JGE lnsq_done
	VCVTPS2PD (SI)(AX*4), Y1
	VSUBPD Y15, Y1, Y1
	VMULPD Y1, Y1, Y1
	VADDPD Y1, Y13, Y13
	VCVTPS2PD 16(SI)(AX*4), Y2
	VSUBPD Y15, Y2, Y2
	VMULPD Y2, Y2, Y2
	VADDPD Y2, Y14, Y14
	ADDQ $8, AX
	JMP lnsq_loop
lnsq_done:
	VMOVUPD Y13, 0(DX)
	VMOVUPD Y14, 32(DX)
	VZEROUPPER
	RET

// func lnApplyAVX2(out, x, w, b *float32, n int, m, inv float32)
// out[i] = (x[i]-m)·inv, then ·w[i] if w is not nil, then +b[i] if b is
// not nil.
TEXT ·lnApplyAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), R9
	MOVQ b+24(FP), R10
	MOVQ n+32(FP), CX
	VBROADCASTSS m+40(FP), Y14
	VBROADCASTSS inv+44(FP), Y15
	XORQ AX, AX
lnapp_loop:
	CMPQ AX, CX
	JGE lnapp_done
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS Y14, Y0, Y0
	VMULPS Y15, Y0, Y0
	TESTQ R9, R9
	JZ lnapp_now
	VMULPS (R9)(AX*4), Y0, Y0
lnapp_now:
	TESTQ R10, R10
	JZ lnapp_nob
	VADDPS (R10)(AX*4), Y0, Y0
lnapp_nob:
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP lnapp_loop
lnapp_done:
	VZEROUPPER
	RET

// func lnBwdSumsAVX2(x, grad, w *float32, n int, m, inv float32, acc1, acc2 *[8]float64)
// dy = g[i] (·w[i] if w is not nil), xh = (x[i]-m)·inv;
// acc1[i%8] += float64(dy), acc2[i%8] += float64(dy·xh).
TEXT ·lnBwdSumsAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ grad+8(FP), BX
	MOVQ w+16(FP), R9
	MOVQ n+24(FP), CX
	VBROADCASTSS m+32(FP), Y14
	VBROADCASTSS inv+36(FP), Y15
	MOVQ acc1+40(FP), DX
	MOVQ acc2+48(FP), R8
	VMOVUPD 0(DX), Y10
	VMOVUPD 32(DX), Y11
	VMOVUPD 0(R8), Y12
	VMOVUPD 32(R8), Y13
	XORQ AX, AX
lnbs_loop:
	CMPQ AX, CX
	JGE lnbs_done
	VMOVUPS (BX)(AX*4), Y0 // dy
	TESTQ R9, R9
	JZ lnbs_now
	VMULPS (R9)(AX*4), Y0, Y0
lnbs_now:
	VMOVUPS (SI)(AX*4), Y1
	VSUBPS Y14, Y1, Y1
	VMULPS Y15, Y1, Y1 // xh
	VMULPS Y1, Y0, Y1 // dy·xh
	WIDEN_ADD(Y0, X0, Y10, Y11)
	WIDEN_ADD(Y1, X1, Y12, Y13)
	ADDQ $8, AX
	JMP lnbs_loop
lnbs_done:
	VMOVUPD Y10, 0(DX)
	VMOVUPD Y11, 32(DX)
	VMOVUPD Y12, 0(R8)
	VMOVUPD Y13, 32(R8)
	VZEROUPPER
	RET

// func lnBwdDxAVX2(out, x, grad, w *float32, n int, m, inv, a, b float32)
// out[i] = inv·((dy - a) - xh·b), dy and xh as in lnBwdSumsAVX2.
TEXT ·lnBwdDxAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ grad+16(FP), BX
	MOVQ w+24(FP), R9
	MOVQ n+32(FP), CX
	VBROADCASTSS m+40(FP), Y12
	VBROADCASTSS inv+44(FP), Y13
	VBROADCASTSS a+48(FP), Y14
	VBROADCASTSS b+52(FP), Y15
	XORQ AX, AX
lnbd_loop:
	CMPQ AX, CX
	JGE lnbd_done
	VMOVUPS (BX)(AX*4), Y0 // dy
	TESTQ R9, R9
	JZ lnbd_now
	VMULPS (R9)(AX*4), Y0, Y0
lnbd_now:
	VMOVUPS (SI)(AX*4), Y1
	VSUBPS Y12, Y1, Y1
	VMULPS Y13, Y1, Y1 // xh
	VMULPS Y15, Y1, Y1 // xh·b
	VSUBPS Y14, Y0, Y0 // dy - a
	VSUBPS Y1, Y0, Y0 // (dy - a) - xh·b
	VMULPS Y13, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ $8, AX
	JMP lnbd_loop
lnbd_done:
	VZEROUPPER
	RET

// func lnColSumsAVX2(x, grad *float32, ld, rows int, mean, rstd *float32, aw, ab *float64)
// For the 8 columns at x and grad (row stride ld floats) and r < rows, in
// order of r: xh = (x[r][j]-mean[r])·rstd[r]; aw[j] += float64(grad[r][j]·xh),
// ab[j] += float64(grad[r][j]).
TEXT ·lnColSumsAVX2(SB), NOSPLIT, $0-64
	MOVQ x+0(FP), SI
	MOVQ grad+8(FP), BX
	MOVQ ld+16(FP), DX
	SHLQ $2, DX
	MOVQ rows+24(FP), CX
	MOVQ mean+32(FP), R8
	MOVQ rstd+40(FP), R9
	MOVQ aw+48(FP), R10
	MOVQ ab+56(FP), R11
	VMOVUPD 0(R10), Y10
	VMOVUPD 32(R10), Y11
	VMOVUPD 0(R11), Y12
	VMOVUPD 32(R11), Y13
	XORQ AX, AX
lncs_loop:
	CMPQ AX, CX
	JGE lncs_done
	VBROADCASTSS (R8)(AX*4), Y14
	VBROADCASTSS (R9)(AX*4), Y15
	VMOVUPS (SI), Y0
	VMOVUPS (BX), Y1 // g
	VSUBPS Y14, Y0, Y0
	VMULPS Y15, Y0, Y0 // xh
	VMULPS Y0, Y1, Y0 // g·xh
	WIDEN_ADD(Y0, X0, Y10, Y11)
	WIDEN_ADD(Y1, X1, Y12, Y13)
	ADDQ DX, SI
	ADDQ DX, BX
	INCQ AX
	JMP lncs_loop
lncs_done:
	VMOVUPD Y10, 0(R10)
	VMOVUPD Y11, 32(R10)
	VMOVUPD Y12, 0(R11)
	VMOVUPD Y13, 32(R11)
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// AVX2 packing primitives for the AVX2 kernel's panels (pack_avx2_amd64.go).
// Strides are in bytes. None reads or writes outside the rows it is given.

// func copyPanels64(dp, sp unsafe.Pointer, rows, panels int, ds, ss, dps uintptr)
// For r < rows and p < panels, copies the 64 bytes (16 floats) at
// sp + r·ss + 64p to dp + r·ds + p·dps: a strip of rows across whole
// panels, each source row read left to right.
TEXT ·copyPanels64(SB), NOSPLIT, $0-56
	MOVQ dp+0(FP), DI
	MOVQ sp+8(FP), SI
	MOVQ rows+16(FP), CX
	MOVQ panels+24(FP), R8
	MOVQ ds+32(FP), DX
	MOVQ ss+40(FP), BX
	MOVQ dps+48(FP), R9
	TESTQ CX, CX
	JLE c64_done
	TESTQ R8, R8
	JLE c64_done
c64_row:
	MOVQ SI, R10
	MOVQ DI, R11
	MOVQ R8, R12
c64_panel:
	VMOVUPS (R10), Y0
	VMOVUPS 32(R10), Y1
	VMOVUPS Y0, (R11)
	VMOVUPS Y1, 32(R11)
	ADDQ $64, R10
	ADDQ R9, R11
	DECQ R12
	JNZ c64_panel
	ADDQ BX, SI
	ADDQ DX, DI
	DECQ CX
	JNZ c64_row
	VZEROUPPER
c64_done:
	RET

// func copyPanels24(dp, sp unsafe.Pointer, rows, panels int, ds, ss, dps uintptr)
// copyPanels64 for runs of 24 bytes (6 floats).
TEXT ·copyPanels24(SB), NOSPLIT, $0-56
	MOVQ dp+0(FP), DI
	MOVQ sp+8(FP), SI
	MOVQ rows+16(FP), CX
	MOVQ panels+24(FP), R8
	MOVQ ds+32(FP), DX
	MOVQ ss+40(FP), BX
	MOVQ dps+48(FP), R9
	TESTQ CX, CX
	JLE c24_done
	TESTQ R8, R8
	JLE c24_done
c24_row:
	MOVQ SI, R10
	MOVQ DI, R11
	MOVQ R8, R12
c24_panel:
	VMOVUPS (R10), X0
	MOVQ 16(R10), AX
	VMOVUPS X0, (R11)
	MOVQ AX, 16(R11)
	ADDQ $24, R10
	ADDQ R9, R11
	DECQ R12
	JNZ c24_panel
	ADDQ BX, SI
	ADDQ DX, DI
	DECQ CX
	JNZ c24_row
c24_done:
	RET

// TRANSPOSE8 transposes the 8×8 floats of Y0..Y7 (row i in Yi) into
// Y8..Y15 (column q in Y(8+q)), using Y0..Y7 as scratch.
#define TRANSPOSE8 \
	VUNPCKLPS Y1, Y0, Y8 \
	VUNPCKHPS Y1, Y0, Y9 \
	VUNPCKLPS Y3, Y2, Y10 \
	VUNPCKHPS Y3, Y2, Y11 \
	VUNPCKLPS Y5, Y4, Y12 \
	VUNPCKHPS Y5, Y4, Y13 \
	VUNPCKLPS Y7, Y6, Y14 \
	VUNPCKHPS Y7, Y6, Y15 \
	VSHUFPS $0x44, Y10, Y8, Y0 \
	VSHUFPS $0xEE, Y10, Y8, Y1 \
	VSHUFPS $0x44, Y11, Y9, Y2 \
	VSHUFPS $0xEE, Y11, Y9, Y3 \
	VSHUFPS $0x44, Y14, Y12, Y4 \
	VSHUFPS $0xEE, Y14, Y12, Y5 \
	VSHUFPS $0x44, Y15, Y13, Y6 \
	VSHUFPS $0xEE, Y15, Y13, Y7 \
	VPERM2F128 $0x20, Y4, Y0, Y8 \
	VPERM2F128 $0x20, Y5, Y1, Y9 \
	VPERM2F128 $0x20, Y6, Y2, Y10 \
	VPERM2F128 $0x20, Y7, Y3, Y11 \
	VPERM2F128 $0x31, Y4, Y0, Y12 \
	VPERM2F128 $0x31, Y5, Y1, Y13 \
	VPERM2F128 $0x31, Y6, Y2, Y14 \
	VPERM2F128 $0x31, Y7, Y3, Y15

// LOAD6ROWS loads 8 floats from each of the rows SI + i·BX, i < 6, into
// Y0..Y5, leaving R9 = SI + 4·BX.
#define LOAD6ROWS \
	LEAQ (SI)(BX*4), R9 \
	VMOVUPS (SI), Y0 \
	VMOVUPS (SI)(BX*1), Y1 \
	VMOVUPS (SI)(BX*2), Y2 \
	VMOVUPS (SI)(R8*1), Y3 \
	VMOVUPS (R9), Y4 \
	VMOVUPS (R9)(BX*1), Y5

// func gather8x8(dp, sp unsafe.Pointer, ss, ds uintptr, groups int)
// For q < 8·groups, writes the 8 floats at sp + i·ss + 4q (i < 8) to
// dp + q·ds: eight source rows interleaved, 8 k-steps per transpose.
TEXT ·gather8x8(SB), NOSPLIT, $0-40
	MOVQ dp+0(FP), DI
	MOVQ sp+8(FP), SI
	MOVQ ss+16(FP), BX
	MOVQ ds+24(FP), DX
	MOVQ groups+32(FP), CX
	TESTQ CX, CX
	JLE g8_done
	LEAQ (BX)(BX*2), R8 // 3·ss
	LEAQ (DX)(DX*2), R10 // 3·ds
g8_loop:
	LOAD6ROWS
	VMOVUPS (R9)(BX*2), Y6
	VMOVUPS (R9)(R8*1), Y7
	TRANSPOSE8
	LEAQ (DI)(DX*4), R11
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(DX*1)
	VMOVUPS Y10, (DI)(DX*2)
	VMOVUPS Y11, (DI)(R10*1)
	VMOVUPS Y12, (R11)
	VMOVUPS Y13, (R11)(DX*1)
	VMOVUPS Y14, (R11)(DX*2)
	VMOVUPS Y15, (R11)(R10*1)
	ADDQ $32, SI
	LEAQ (DI)(DX*8), DI
	DECQ CX
	JNZ g8_loop
	VZEROUPPER
g8_done:
	RET

// STORE6 stores the first 6 floats of src (xsrc: its low half) at the
// address addr, using R12 and X0 as scratch.
#define STORE6(src, xsrc, addr) \
	LEAQ addr, R12 \
	VMOVUPS xsrc, (R12) \
	VEXTRACTF128 $1, src, X0 \
	VMOVSD X0, 16(R12)

// func gather6x8(dp, sp unsafe.Pointer, ss, ds uintptr, groups int)
// gather8x8 for 6 source rows: writes 6 floats (24 bytes) per k-step.
TEXT ·gather6x8(SB), NOSPLIT, $0-40
	MOVQ dp+0(FP), DI
	MOVQ sp+8(FP), SI
	MOVQ ss+16(FP), BX
	MOVQ ds+24(FP), DX
	MOVQ groups+32(FP), CX
	TESTQ CX, CX
	JLE g6_done
	LEAQ (BX)(BX*2), R8 // 3·ss
	LEAQ (DX)(DX*2), R10 // 3·ds
g6_loop:
	LOAD6ROWS
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TRANSPOSE8
	LEAQ (DI)(DX*4), R11
	STORE6(Y8, X8, (DI))
	STORE6(Y9, X9, (DI)(DX*1))
	STORE6(Y10, X10, (DI)(DX*2))
	STORE6(Y11, X11, (DI)(R10*1))
	STORE6(Y12, X12, (R11))
	STORE6(Y13, X13, (R11)(DX*1))
	STORE6(Y14, X14, (R11)(DX*2))
	STORE6(Y15, X15, (R11)(R10*1))
	ADDQ $32, SI
	LEAQ (DI)(DX*8), DI
	DECQ CX
	JNZ g6_loop
	VZEROUPPER
g6_done:
	RET

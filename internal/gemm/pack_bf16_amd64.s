//go:build amd64 && !purego

#include "textflag.h"

// func pairRows512(dst *uint32, src *uint16, ld, pairs, nfull int, mask uint16, nzero int)
// For q < pairs, interleaves rows 2q and 2q+1 of src (row stride ld 2-byte
// elements) into 32-bit slots, the even row in the low half: nfull chunks
// of 16 columns, then 16 columns of which mask's are read (if mask is not
// 0; the others are zero), then nzero chunks of zeros, all stored one
// after the other from dst. Requires AVX-512F.
TEXT ·pairRows512(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), DX
	SHLQ $1, DX
	MOVQ pairs+24(FP), CX
	MOVQ nfull+32(FP), R9
	KMOVW mask+40(FP), K1
	MOVWQZX mask+40(FP), R11
	MOVQ nzero+48(FP), R10
	VPXORD Z3, Z3, Z3
	TESTQ CX, CX
	JZ done
loop:
	MOVQ SI, AX
	LEAQ (SI)(DX*1), BX
	MOVQ R9, R12
	TESTQ R12, R12
	JZ partial
full:
	VPMOVZXWD (AX), Z0
	VPMOVZXWD (BX), Z1
	VPSLLD $16, Z1, Z1
	VPORD Z1, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $64, DI
	DECQ R12
	JNZ full
partial:
	TESTQ R11, R11
	JZ zeros
	VPMOVZXWD.Z (AX), K1, Z0
	VPMOVZXWD.Z (BX), K1, Z1
	VPSLLD $16, Z1, Z1
	VPORD Z1, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ $64, DI
zeros:
	MOVQ R10, R12
	TESTQ R12, R12
	JZ next
zloop:
	VMOVDQU32 Z3, (DI)
	ADDQ $64, DI
	DECQ R12
	JNZ zloop
next:
	LEAQ (SI)(DX*2), SI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET

// func pairRowsNarrow(dst *uint32, w int, src *uint16, ld, pairs int, lmask, smask uint16)
// pairRows512 for panels of w < 16 slots: for q < pairs, the columns of
// lmask of rows 2q and 2q+1 (others zero) interleaved into the lanes of
// smask at dst + q*w slots. Requires AVX-512F.
TEXT ·pairRowsNarrow(SB), NOSPLIT, $0-44
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ ld+24(FP), DX
	SHLQ $1, DX
	MOVQ pairs+32(FP), CX
	KMOVW lmask+40(FP), K1
	KMOVW smask+42(FP), K2
	TESTQ CX, CX
	JZ ndone
nloop:
	LEAQ (SI)(DX*1), BX
	VPMOVZXWD.Z (SI), K1, Z0
	VPMOVZXWD.Z (BX), K1, Z1
	VPSLLD $16, Z1, Z1
	VPORD Z1, Z0, Z0
	VMOVDQU32 Z0, K2, (DI)
	ADDQ R8, DI
	LEAQ (SI)(DX*2), SI
	DECQ CX
	JNZ nloop
ndone:
	VZEROUPPER
	RET

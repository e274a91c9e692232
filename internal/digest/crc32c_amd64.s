//go:build amd64 && !purego

#include "textflag.h"

// The CRC32 instruction with a 0x1EDC6F41 polynomial built in: CRC-32C,
// least significant bit first, on a register that it neither inverts at
// the start nor at the end (UpdateCRC32C does). Go's operand order:
// "CRC32Q (SI), AX" feeds the eight bytes at SI into the register AX.

// func crc32cSSE42Serial(r uint32, b []byte) uint32
// One chain: eight bytes per instruction, then what is left.
TEXT ·crc32cSSE42Serial(SB), NOSPLIT, $0-36
	MOVL r+0(FP), AX
	MOVQ b_base+8(FP), SI
	MOVQ b_len+16(FP), CX
	CMPQ CX, $8
	JB   tail

words:
	CRC32Q (SI), AX
	ADDQ   $8, SI
	SUBQ   $8, CX
	CMPQ   CX, $8
	JAE    words

tail: // under 8 bytes: 4, 2, then 1 as CX's bits say
	TESTQ $4, CX
	JZ    two
	CRC32L (SI), AX
	ADDQ   $4, SI

two:
	TESTQ $2, CX
	JZ    one
	CRC32W (SI), AX
	ADDQ   $2, SI

one:
	TESTQ $1, CX
	JZ    done
	CRC32B (SI), AX

done:
	MOVL AX, ret+32(FP)
	RET

// func crc32cSSE42x3(r uint32, p []byte, k int) (a, b, c uint32)
// Three independent chains, eight bytes of each stream per turn.
TEXT ·crc32cSSE42x3(SB), NOSPLIT, $0-52
	MOVL r+0(FP), AX      // stream 1's register
	XORL BX, BX           // stream 2's
	XORL CX, CX           // stream 3's
	MOVQ p_base+8(FP), SI // stream 1
	MOVQ k+32(FP), DX     // k: the loop's end offset
	LEAQ (SI)(DX*1), DI   // stream 2
	LEAQ (DI)(DX*1), R8   // stream 3
	XORQ R9, R9           // offset into each stream

loop:
	CRC32Q (SI)(R9*1), AX
	CRC32Q (DI)(R9*1), BX
	CRC32Q (R8)(R9*1), CX
	ADDQ   $8, R9
	CMPQ   R9, DX
	JB     loop

	MOVL AX, a+40(FP)
	MOVL BX, b+44(FP)
	MOVL CX, c+48(FP)
	RET

//go:build amd64 && !purego

#include "textflag.h"

// SHA-256's compression function with the SHA extensions, for
// sha256BlockSHANI (sha256block_amd64.go). Operands are in Go's order,
// sources first and the destination last: "SHA256MSG1 X4, X3" is the
// manuals' SHA256MSG1 xmm3, xmm4, and "SHA256RNDS2 X0, X1, X2" is
// SHA256RNDS2 xmm2, xmm1, <XMM0>, XMM0 being the instruction's implicit
// third operand.
//
// The instructions keep the eight working variables a..h of FIPS 180-4 in
// two registers, with the first named in the highest lane:
//
//	X1 = ABEF: lanes 3..0 hold a, b, e, f
//	X2 = CDGH: lanes 3..0 hold c, d, g, h
//
// SHA256RNDS2 X0, X1, X2 runs two rounds, with W(t)+K(t) and
// W(t+1)+K(t+1) from X0's lanes 0 and 1, on ABEF in X1 and CDGH in X2,
// and leaves the new ABEF in X2; X1 then holds the new CDGH (two rounds
// shift a, b, e, f into c, d, g, h). So a pair of calls with X1 and X2
// swapped runs four rounds and leaves ABEF in X1 and CDGH in X2 again.
//
// The message schedule is kept as four quads of words, W(t..t+3) in lanes
// 0..3 of one register, X3 to X6 in turn.

// QUAD runs the four rounds 4*i .. 4*i+3 with the message quad in w.
// k256 is 16-byte aligned (the linker aligns a 256-byte symbol to 32 on
// amd64), as PADDD's memory operand must be.
#define QUAD(w, i) \
	MOVO        w, X0; \
	PADDD       (i*16)(AX), X0; \
	SHA256RNDS2 X0, X1, X2; \
	PSHUFD      $0x0e, X0, X0; \
	SHA256RNDS2 X0, X2, X1

// NEXT replaces the quad in a, W(t-16..t-13), by W(t..t+3), given
// b = W(t-12..t-9), c = W(t-8..t-5) and d = W(t-4..t-1):
// W(t) = σ1(W(t-2)) + W(t-7) + σ0(W(t-15)) + W(t-16).
#define NEXT(a, b, c, d) \
	SHA256MSG1 b, a; \ // a = W(t-16..t-13) + σ0(W(t-15..t-12))
	MOVO       d, X7; \
	PALIGNR    $4, c, X7; \ // X7 = W(t-7..t-4): d:c shifted down a word
	PADDD      X7, a; \
	SHA256MSG2 d, a // adds σ1(W(t-2..t+1)), W(t..t+1) computed on the way

// LOAD puts the big-endian words of block bytes off..off+15 in w.
#define LOAD(off, w) \
	MOVOU  off(SI), w; \
	PSHUFB X8, w

// func sha256BlockSHANI(h *[8]uint32, p []byte)
// Compresses each whole 64-byte block of p into h; needs SHA, SSSE3
// (PSHUFB, PALIGNR) and SSE2.
TEXT ·sha256BlockSHANI(SB), NOSPLIT, $0-32
	MOVQ h+0(FP), DI
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), DX
	ANDQ $-64, DX        // whole blocks only
	JZ   done
	ADDQ SI, DX          // DX: the end of the last block
	LEAQ k256<>(SB), AX
	MOVOU bswap<>(SB), X8

	// h[0..3] = a b c d and h[4..7] = e f g h, lane 0 first, into ABEF
	// and CDGH.
	MOVOU      (DI), X1   // lanes 0..3: a b c d
	MOVOU      16(DI), X2 // e f g h
	MOVO       X1, X7
	PUNPCKLQDQ X2, X1     // a b e f
	PUNPCKHQDQ X2, X7     // c d g h
	PSHUFD     $0x1b, X1, X1 // f e b a: ABEF
	PSHUFD     $0x1b, X7, X2 // h g d c: CDGH

block:
	MOVO X1, X9  // H(i-1), added back at the end of the block
	MOVO X2, X10

	LOAD(0, X3)
	LOAD(16, X4)
	LOAD(32, X5)
	LOAD(48, X6)
	QUAD(X3, 0)
	QUAD(X4, 1)
	QUAD(X5, 2)
	QUAD(X6, 3)

	NEXT(X3, X4, X5, X6)
	QUAD(X3, 4)
	NEXT(X4, X5, X6, X3)
	QUAD(X4, 5)
	NEXT(X5, X6, X3, X4)
	QUAD(X5, 6)
	NEXT(X6, X3, X4, X5)
	QUAD(X6, 7)

	NEXT(X3, X4, X5, X6)
	QUAD(X3, 8)
	NEXT(X4, X5, X6, X3)
	QUAD(X4, 9)
	NEXT(X5, X6, X3, X4)
	QUAD(X5, 10)
	NEXT(X6, X3, X4, X5)
	QUAD(X6, 11)

	NEXT(X3, X4, X5, X6)
	QUAD(X3, 12)
	NEXT(X4, X5, X6, X3)
	QUAD(X4, 13)
	NEXT(X5, X6, X3, X4)
	QUAD(X5, 14)
	NEXT(X6, X3, X4, X5)
	QUAD(X6, 15)

	PADDD X9, X1
	PADDD X10, X2
	ADDQ  $64, SI
	CMPQ  SI, DX
	JB    block

	// Back from ABEF and CDGH to a..h in memory order.
	PSHUFD     $0x1b, X1, X1 // a b e f
	PSHUFD     $0x1b, X2, X2 // c d g h
	MOVO       X1, X7
	PUNPCKLQDQ X2, X1        // a b c d
	PUNPCKHQDQ X2, X7        // e f g h
	MOVOU      X1, (DI)
	MOVOU      X7, 16(DI)

done:
	RET

// bswap is PSHUFB's mask reversing the bytes of each 32-bit lane: the
// message words are big-endian.
DATA bswap<>+0(SB)/8, $0x0405060700010203
DATA bswap<>+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL bswap<>(SB), RODATA|NOPTR, $16

// k256 is K(0)..K(63) (sha256K in sha256.go), four words per 16 bytes.
DATA k256<>+0(SB)/8, $0x71374491428a2f98
DATA k256<>+8(SB)/8, $0xe9b5dba5b5c0fbcf
DATA k256<>+16(SB)/8, $0x59f111f13956c25b
DATA k256<>+24(SB)/8, $0xab1c5ed5923f82a4
DATA k256<>+32(SB)/8, $0x12835b01d807aa98
DATA k256<>+40(SB)/8, $0x550c7dc3243185be
DATA k256<>+48(SB)/8, $0x80deb1fe72be5d74
DATA k256<>+56(SB)/8, $0xc19bf1749bdc06a7
DATA k256<>+64(SB)/8, $0xefbe4786e49b69c1
DATA k256<>+72(SB)/8, $0x240ca1cc0fc19dc6
DATA k256<>+80(SB)/8, $0x4a7484aa2de92c6f
DATA k256<>+88(SB)/8, $0x76f988da5cb0a9dc
DATA k256<>+96(SB)/8, $0xa831c66d983e5152
DATA k256<>+104(SB)/8, $0xbf597fc7b00327c8
DATA k256<>+112(SB)/8, $0xd5a79147c6e00bf3
DATA k256<>+120(SB)/8, $0x1429296706ca6351
DATA k256<>+128(SB)/8, $0x2e1b213827b70a85
DATA k256<>+136(SB)/8, $0x53380d134d2c6dfc
DATA k256<>+144(SB)/8, $0x766a0abb650a7354
DATA k256<>+152(SB)/8, $0x92722c8581c2c92e
DATA k256<>+160(SB)/8, $0xa81a664ba2bfe8a1
DATA k256<>+168(SB)/8, $0xc76c51a3c24b8b70
DATA k256<>+176(SB)/8, $0xd6990624d192e819
DATA k256<>+184(SB)/8, $0x106aa070f40e3585
DATA k256<>+192(SB)/8, $0x1e376c0819a4c116
DATA k256<>+200(SB)/8, $0x34b0bcb52748774c
DATA k256<>+208(SB)/8, $0x4ed8aa4a391c0cb3
DATA k256<>+216(SB)/8, $0x682e6ff35b9cca4f
DATA k256<>+224(SB)/8, $0x78a5636f748f82ee
DATA k256<>+232(SB)/8, $0x8cc7020884c87814
DATA k256<>+240(SB)/8, $0xa4506ceb90befffa
DATA k256<>+248(SB)/8, $0xc67178f2bef9a3f7
GLOBL k256<>(SB), RODATA|NOPTR, $256

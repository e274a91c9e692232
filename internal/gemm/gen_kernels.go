//go:build ignore

// gen_kernels generates gemm_amd64.s, the AVX-512 and AVX2/FMA
// micro-kernels. Run `go generate` (or `go run gen_kernels.go`) in this
// directory after editing.
//
// Every kernel has the Go signature
//
//	func name(kc int, a, b, c *float32, ldc int, alpha, beta float32)
//
// and computes, for the MR×NR tile at c (row stride ldc elements),
//
//	acc[i][j] = Σ_p a[p*MR+i] * b[p*NR+j]     (p = 0..kc-1, in order, one FMA chain per element)
//	c[i][j]   = alpha*acc[i][j] + beta*c[i][j] (products rounded separately, then added;
//	                                            c is not read when beta's bits are all zero)
//
// a and b are packed panels (see pack.go). The bfloat16 kernels
// (kernBF16*, AVX512_BF16) take panels of bfloat16 pairs instead, one pair
// of k-steps in each 32-bit slot (pack_bf16.go), kc counting pairs, and
// accumulate with VDPBF16PS (Note [VDPBF16PS] in bf16.go):
//
//	acc[i][j] = dp(acc[i][j], a[p*MR+i], b[p*NR+j])    (p = 0..kc-1, in order)
//
// The store rounds alpha*acc and
// beta*c separately (no FMA) so that the scalar edge path in Go produces
// bitwise-identical values.
package main

import (
	"bytes"
	"fmt"
	"os"
)

type gen struct{ bytes.Buffer }

func (g *gen) f(format string, args ...any) { fmt.Fprintf(&g.Buffer, format+"\n", args...) }

type kernelSpec struct {
	name   string
	mr     int    // rows (broadcast from packed A)
	nv     int    // vectors per row
	width  int    // floats per vector: 16 (zmm) or 8 (ymm)
	reg    string // "Z" or "Y"
	unroll int
	dot    bool // bfloat16 pairs and VDPBF16PS (zmm only)
}

func (s kernelSpec) nr() int { return s.nv * s.width }

func (s kernelSpec) r(i int) string { return fmt.Sprintf("%s%d", s.reg, i) }

// Register plan: B vectors in 0..nv-1, two broadcast temporaries, then
// accumulators.
func (s kernelSpec) bReg(v int) string   { return s.r(v) }
func (s kernelSpec) tReg(i int) string   { return s.r(s.nv + i%2) }
func (s kernelSpec) acc(i, v int) string { return s.r(s.nv + 2 + i*s.nv + v) }

func (g *gen) step(s kernelSpec, u int) {
	vb := s.width * 4
	for v := 0; v < s.nv; v++ {
		g.f("\tVMOVUPS %d(BX), %s", u*s.nr()*4+v*vb, s.bReg(v))
	}
	for i := 0; i < s.mr; i++ {
		t := s.tReg(i)
		g.f("\tVBROADCASTSS %d(AX), %s", (u*s.mr+i)*4, t)
		for v := 0; v < s.nv; v++ {
			if s.dot {
				g.f("\t%s // VDPBF16PS %s, %s, %s", vdpbf16ps(s.acc(i, v), s.bReg(v), t), s.acc(i, v), s.bReg(v), t)
				continue
			}
			g.f("\tVFMADD231PS %s, %s, %s", s.bReg(v), t, s.acc(i, v))
		}
	}
}

func (g *gen) kernel(s kernelSpec) {
	nacc := s.mr * s.nv
	if s.nv+2+nacc > map[string]int{"Z": 32, "Y": 16}[s.reg] {
		panic("too many registers for " + s.name)
	}
	vb := s.width * 4
	g.f("// func %s(kc int, a, b, c *float32, ldc int, alpha, beta float32)", s.name)
	g.f("// %d×%d tile, %d %s-vectors per row.", s.mr, s.nr(), s.nv, s.reg)
	g.f("TEXT ·%s(SB), NOSPLIT, $0-48", s.name)
	g.f("\tMOVQ kc+0(FP), CX")
	g.f("\tMOVQ a+8(FP), AX")
	g.f("\tMOVQ b+16(FP), BX")
	g.f("\tMOVQ c+24(FP), DI")
	g.f("\tMOVQ ldc+32(FP), DX")
	g.f("\tSHLQ $2, DX")
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.nv; v++ {
			a := s.acc(i, v)
			if s.reg == "Z" {
				g.f("\tVPXORD %s, %s, %s", a, a, a)
			} else {
				g.f("\tVXORPS %s, %s, %s", a, a, a)
			}
		}
	}
	// Prefetch the C tile.
	g.f("\tMOVQ DI, R8")
	for i := 0; i < s.mr; i++ {
		lines := (s.nr()*4 + 63) / 64
		for l := 0; l < lines; l++ {
			g.f("\tPREFETCHT0 %d(R8)", l*64)
		}
		if i < s.mr-1 {
			g.f("\tADDQ DX, R8")
		}
	}
	g.f("\tMOVQ CX, R9")
	g.f("\tSHRQ $%d, R9", log2(s.unroll))
	g.f("\tJZ %s_tail", s.name)
	g.f("%s_loop:", s.name)
	for u := 0; u < s.unroll; u++ {
		g.step(s, u)
	}
	g.f("\tADDQ $%d, AX", s.unroll*s.mr*4)
	g.f("\tADDQ $%d, BX", s.unroll*s.nr()*4)
	g.f("\tDECQ R9")
	g.f("\tJNZ %s_loop", s.name)
	g.f("%s_tail:", s.name)
	g.f("\tANDQ $%d, CX", s.unroll-1)
	g.f("\tJZ %s_store", s.name)
	g.f("%s_loop1:", s.name)
	g.step(s, 0)
	g.f("\tADDQ $%d, AX", s.mr*4)
	g.f("\tADDQ $%d, BX", s.nr()*4)
	g.f("\tDECQ CX")
	g.f("\tJNZ %s_loop1", s.name)
	g.f("%s_store:", s.name)
	alpha, beta := s.r(0), s.r(1)
	g.f("\tVBROADCASTSS alpha+40(FP), %s", alpha)
	g.f("\tMOVL beta+44(FP), R10")
	g.f("\tTESTL R10, R10")
	g.f("\tJZ %s_store0", s.name)
	g.f("\tVBROADCASTSS beta+44(FP), %s", beta)
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.nv; v++ {
			t := s.tReg(v)
			a := s.acc(i, v)
			g.f("\tVMULPS %d(DI), %s, %s", v*vb, beta, t)
			g.f("\tVMULPS %s, %s, %s", alpha, a, a)
			g.f("\tVADDPS %s, %s, %s", t, a, a)
			g.f("\tVMOVUPS %s, %d(DI)", a, v*vb)
		}
		if i < s.mr-1 {
			g.f("\tADDQ DX, DI")
		}
	}
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("%s_store0:", s.name)
	for i := 0; i < s.mr; i++ {
		for v := 0; v < s.nv; v++ {
			a := s.acc(i, v)
			g.f("\tVMULPS %s, %s, %s", alpha, a, a)
			g.f("\tVMOVUPS %s, %d(DI)", a, v*vb)
		}
		if i < s.mr-1 {
			g.f("\tADDQ DX, DI")
		}
	}
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("")
}

// vdpbf16ps encodes VDPBF16PS zmm(dst), zmm(src1), zmm(src2) (Intel's
// operand order: dst += src1·src2 pairwise), which Go's assembler does not
// know: EVEX.512.F3.0F38.W0 52 /r, no mask, registers only. The EVEX
// prefix is 62 P0 P1 P2 with P0 = R̄ X̄ B̄ R̄' 0 mmm (mmm = 010, map 0F38;
// R, R' extend ModRM.reg to dst, B, X ModRM.rm to src2), P1 = W v̄v̄v̄v̄ 1 pp
// (W 0, vvvv src1, pp = 10 for F3), P2 = z L'L b V̄' aaa (L'L = 10, 512
// bits; V' src1's fifth bit); then the opcode and ModRM (mod 11).
func vdpbf16ps(dst, src1, src2 string) string {
	d, s1, s2 := zreg(dst), zreg(src1), zreg(src2)
	inv := func(x int) int { return ^x & 1 }
	p0 := inv(d>>3)<<7 | inv(s2>>4)<<6 | inv(s2>>3)<<5 | inv(d>>4)<<4 | 0x02
	p1 := (^s1&15)<<3 | 1<<2 | 0x02
	p2 := 0x40 | inv(s1>>4)<<3
	modrm := 0xC0 | (d&7)<<3 | s2&7
	return fmt.Sprintf("BYTE $0x62; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x%02X; BYTE $0x52; BYTE $0x%02X", p0, p1, p2, modrm)
}

func zreg(r string) int {
	var n int
	if _, err := fmt.Sscanf(r, "Z%d", &n); err != nil || n > 31 {
		panic("not a zmm register: " + r)
	}
	return n
}

func log2(n int) int {
	r := 0
	for 1<<r < n {
		r++
	}
	if 1<<r != n {
		panic("unroll must be a power of two")
	}
	return r
}

var kernels = []kernelSpec{
	{name: "kernAVX512x14x32", mr: 14, nv: 2, width: 16, reg: "Z", unroll: 4},
	{name: "kernAVX512x6x64", mr: 6, nv: 4, width: 16, reg: "Z", unroll: 4},
	{name: "kernAVX2x6x16", mr: 6, nv: 2, width: 8, reg: "Y", unroll: 4},
	{name: "kernBF16x14x32", mr: 14, nv: 2, width: 16, reg: "Z", unroll: 4, dot: true},
	{name: "kernBF16x6x64", mr: 6, nv: 4, width: 16, reg: "Z", unroll: 4, dot: true},
}

// transpose emits tr16x16 (and its variants): elem is the Go type of the
// source, shift log2 of its size (the row stride's unit).
func (g *gen) transpose(name, elem string, shift int) {
	g.f("// func %s(src *%s, lds, nrows int, dst *float32, ldd int, mask uint16)", name, elem)
	g.f("// Loads nrows (0..16) rows of 16 32-bit elements from src (row stride lds")
	g.f("// %ss; missing rows read as zero), transposes the 16×16 block and stores", elem)
	g.f("// column t at dst + t*ldd elements, lanes selected by mask.")
	g.f("TEXT ·%s(SB), NOSPLIT, $0-42", name)
	g.f("\tMOVQ src+0(FP), SI")
	g.f("\tMOVQ lds+8(FP), DX")
	g.f("\tSHLQ $%d, DX", shift)

	g.f("\tMOVQ nrows+16(FP), CX")
	g.f("\tMOVQ dst+24(FP), DI")
	g.f("\tMOVQ ldd+32(FP), R8")
	g.f("\tSHLQ $2, R8")
	g.f("\tKMOVW mask+40(FP), K1")
	for i := 0; i < 16; i++ {
		g.f("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	for i := 0; i < 16; i++ {
		g.f("\tCMPQ CX, $%d", i+1)
		g.f("\tJLT %s_loaded", name)
		g.f("\tVMOVUPS (SI), Z%d", i)
		if i < 15 {
			g.f("\tADDQ DX, SI")
		}
	}
	g.f("%s_loaded:", name)
	// r = Z0..Z15, t = Z16..Z31. Go operand order: op src2, src1, dst.
	r := func(i int) string { return fmt.Sprintf("Z%d", i) }
	t := func(i int) string { return fmt.Sprintf("Z%d", 16+i) }
	for i := 0; i < 16; i += 2 {
		g.f("\tVUNPCKLPS %s, %s, %s", r(i+1), r(i), t(i))
		g.f("\tVUNPCKHPS %s, %s, %s", r(i+1), r(i), t(i+1))
	}
	for blk := 0; blk < 16; blk += 4 {
		g.f("\tVSHUFPS $0x44, %s, %s, %s", t(blk+2), t(blk), r(blk))
		g.f("\tVSHUFPS $0xEE, %s, %s, %s", t(blk+2), t(blk), r(blk+1))
		g.f("\tVSHUFPS $0x44, %s, %s, %s", t(blk+3), t(blk+1), r(blk+2))
		g.f("\tVSHUFPS $0xEE, %s, %s, %s", t(blk+3), t(blk+1), r(blk+3))
	}
	for h := 0; h < 16; h += 8 {
		for i := 0; i < 4; i++ {
			g.f("\tVSHUFF32X4 $0x88, %s, %s, %s", r(h+i+4), r(h+i), t(h+i))
			g.f("\tVSHUFF32X4 $0xDD, %s, %s, %s", r(h+i+4), r(h+i), t(h+i+4))
		}
	}
	for i := 0; i < 8; i++ {
		g.f("\tVSHUFF32X4 $0x88, %s, %s, %s", t(i+8), t(i), r(i))
		g.f("\tVSHUFF32X4 $0xDD, %s, %s, %s", t(i+8), t(i), r(i+8))
	}
	for i := 0; i < 16; i++ {
		g.f("\tVMOVUPS Z%d, K1, (DI)", i)
		if i < 15 {
			g.f("\tADDQ R8, DI")
		}
	}
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("")

}

// packHelpers emits the AVX-512 packing helpers.
func (g *gen) packHelpers() {
	g.transpose("tr16x16", "float32", 2)
	// The bfloat16 pairs of pack_bf16.go: 32-bit elements on rows whose
	// stride is in 2-byte elements.
	g.transpose("tr16x16h", "uint16", 1)
	g.f("// func copy16(src *float32, lds, nrows int, dst *float32, ldd int, lmask, smask uint16)")
	g.f("// For each of nrows rows: loads the lanes of lmask from src (others zero) and")
	g.f("// stores the lanes of smask at dst; src advances by lds, dst by ldd elements.")
	g.f("TEXT ·copy16(SB), NOSPLIT, $0-44")
	g.f("\tMOVQ src+0(FP), SI")
	g.f("\tMOVQ lds+8(FP), DX")
	g.f("\tSHLQ $2, DX")
	g.f("\tMOVQ nrows+16(FP), CX")
	g.f("\tMOVQ dst+24(FP), DI")
	g.f("\tMOVQ ldd+32(FP), R8")
	g.f("\tSHLQ $2, R8")
	g.f("\tKMOVW lmask+40(FP), K1")
	g.f("\tKMOVW smask+42(FP), K2")
	g.f("\tTESTQ CX, CX")
	g.f("\tJZ copy16_done")
	g.f("\tCMPW smask+42(FP), $0xFFFF")
	g.f("\tJEQ copy16_full")
	g.f("copy16_loop:")
	g.f("\tVMOVUPS.Z (SI), K1, Z0")
	g.f("\tVMOVUPS Z0, K2, (DI)")
	g.f("\tADDQ DX, SI")
	g.f("\tADDQ R8, DI")
	g.f("\tDECQ CX")
	g.f("\tJNZ copy16_loop")
	g.f("\tJMP copy16_done")
	g.f("copy16_full:")
	g.f("\tVMOVUPS.Z (SI), K1, Z0")
	g.f("\tVMOVUPS Z0, (DI)")
	g.f("\tADDQ DX, SI")
	g.f("\tADDQ R8, DI")
	g.f("\tDECQ CX")
	g.f("\tJNZ copy16_full")
	g.f("copy16_done:")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("")
}

func main() {
	g := &gen{}
	g.f("// Code generated by gen_kernels.go; DO NOT EDIT.")
	g.f("")
	g.f("//go:build amd64 && !purego")
	g.f("")
	g.f("#include \"textflag.h\"")
	g.f("")
	for _, k := range kernels {
		g.kernel(k)
	}
	g.packHelpers()
	if err := os.WriteFile("gemm_amd64.s", g.Bytes(), 0o644); err != nil {
		panic(err)
	}
}

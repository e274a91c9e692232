//go:build ignore

// gen writes kernel_amd64.s, the vector loops behind
// AdamW and SGD (kernel.go):
//
//	go run gen.go   (or go generate ./internal/optkernel)
//
// Each loop body, written once, is emitted for AVX-512 (16 lanes, Z
// registers) and AVX2 (8 lanes, Y registers). Each instruction is one
// rounded float32 operation of adamwGo or sgdGo, in its order: no fused
// multiply-adds, except in the FMA variants, which fuse those Go fuses
// under GOAMD64=v3 (Note [host bits]). The operands are in the order the Go compiler puts them for the CPU
// device's loop (first source first): when both are NaN, x86 returns the
// first, so even NaN payloads come out the same.
package main

import (
	"fmt"
	"os"
	"strings"
)

var b strings.Builder

func w(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

// isa describes one instruction set: its register prefix and lanes per
// register. Each loop keeps its working values in registers 0-5 and its
// constants in 8-15.
type isa struct {
	name  string
	reg   string // "Z" or "Y"
	lanes int
	// fma: the loops fuse the multiply-adds that Go fuses in the CPU
	// device's loops under GOAMD64=v3 (Note [host bits]), with
	// VFMADD231PS in the roles the compiler gives VFMADD231SS there.
	fma bool
}

// The AdamW constants, in adamConsts's order (4 bytes each).
const (
	cDecay = iota
	cBeta1
	cOmb1
	cBeta2
	cOmb2
	cBc2Sqrt
	cEps
	cNegStep
)

// The SGD constants, in sgdConsts's order, and its flags (sgdWD...).
const (
	cNegLR = iota
	cWD
	cMom
	cOmd
)

const (
	fWD = 1 << iota
	fMomentum
	fFirst
	fNesterov
)

func (s isa) r(i int) string { return fmt.Sprintf("%s%d", s.reg, i) }
func (s isa) k(c int) string { return s.r(8 + c) }
func mem(base string) string { return fmt.Sprintf("(%s)(AX*4)", base) }

// op writes "ins b, a, d": d = a ins b, a the first source (the NaN x86
// returns when both are NaN).
func op(ins, b, a, d string) string { return fmt.Sprintf("%s %s, %s, %s", ins, b, a, d) }

// adamBody is one vector of adamwGo: w, g, m, v and two temporaries in
// registers 0-5.
func (s isa) adamBody(string) []string {
	W, G, M, V, T, U := s.r(0), s.r(1), s.r(2), s.r(3), s.r(4), s.r(5)
	ins := []string{
		fmt.Sprintf("VMOVUPS %s, %s", mem("DI"), W),
		fmt.Sprintf("VMOVUPS %s, %s", mem("SI"), G),
		fmt.Sprintf("VMOVUPS %s, %s", mem("R8"), M),
		fmt.Sprintf("VMOVUPS %s, %s", mem("R9"), V),
		op("VMULPS", s.k(cDecay), W, W), // w *= decay
	}
	if s.fma {
		ins = append(ins,
			op("VMULPS", G, s.k(cOmb1), T),       // g*(1-beta1)
			op("VFMADD231PS", s.k(cBeta1), M, T), // m = m*beta1 + g*(1-beta1), fused
			op("VMULPS", s.k(cBeta2), V, V),      // v*beta2
			op("VMULPS", G, s.k(cOmb2), U),       // (1-beta2)*g
			op("VFMADD231PS", G, U, V),           // v = (1-beta2)*g*g + v*beta2, fused
		)
		M, T = T, M // the new m is in T's register
	} else {
		ins = append(ins,
			op("VMULPS", s.k(cBeta1), M, M), // m*beta1
			op("VMULPS", G, s.k(cOmb1), T),  // g*(1-beta1)
			op("VADDPS", T, M, M),           // m = m*beta1 + g*(1-beta1)
			op("VMULPS", s.k(cBeta2), V, V), // v*beta2
			op("VMULPS", G, s.k(cOmb2), U),  // (1-beta2)*g
			op("VMULPS", U, G, U),           // (1-beta2)*g*g
			op("VADDPS", V, U, V),           // v = v*beta2 + (1-beta2)*g*g
		)
	}
	return append(ins,
		fmt.Sprintf("VSQRTPS %s, %s", V, T),
		op("VDIVPS", s.k(cBc2Sqrt), T, T), // sqrt(v)/bc2Sqrt
		op("VADDPS", s.k(cEps), T, T),     // denom
		op("VMULPS", M, s.k(cNegStep), U), // -stepSize*m
		op("VDIVPS", T, U, U),             // -stepSize*m/denom
		op("VADDPS", W, U, W),             // w += ...
		fmt.Sprintf("VMOVUPS %s, %s", W, mem("DI")),
		fmt.Sprintf("VMOVUPS %s, %s", M, mem("R8")),
		fmt.Sprintf("VMOVUPS %s, %s", V, mem("R9")),
	)
}

// sgdBody is one vector of sgdGo (the CPU device's SGD loop), the flags
// in R10 choosing the branches as the Go loop's tests of the
// hyper-parameters do: w, g, buf, d and a temporary in registers 0-4.
func (s isa) sgdBody(name string) []string {
	W, B, D, T := s.r(0), s.r(2), s.r(3), s.r(4)
	l := func(x string) string { return name + "_" + x }
	decay := []string{
		op("VMULPS", s.k(cWD), W, T), // w*wd
		op("VADDPS", T, D, D),        // d += wd*w
	}
	momentum := []string{
		op("VMULPS", s.k(cMom), B, B), // buf*momentum
		op("VMULPS", D, s.k(cOmd), T), // (1-dampening)*d
		op("VADDPS", T, B, B),         // buf = buf*momentum + (1-dampening)*d
	}
	if s.fma {
		decay = []string{op("VFMADD231PS", s.k(cWD), W, D)} // d = w*wd + d, fused
		momentum = []string{
			op("VMULPS", D, s.k(cOmd), T),       // (1-dampening)*d
			op("VFMADD231PS", s.k(cMom), B, T),  // buf*momentum + (1-dampening)*d, fused
			fmt.Sprintf("VMOVUPS %s, %s", T, B), // (the momentum*buf of Nesterov is not fused)
		}
	}
	ins := []string{
		fmt.Sprintf("VMOVUPS %s, %s", mem("SI"), D), // d = g
		fmt.Sprintf("TESTQ $%d, R10", fWD),
		"JZ " + l("nowd"),
		fmt.Sprintf("VMOVUPS %s, %s", mem("DI"), W),
	}
	ins = append(ins, decay...)
	ins = append(ins,
		l("nowd")+":",
		fmt.Sprintf("TESTQ $%d, R10", fMomentum),
		"JZ "+l("update"),
		fmt.Sprintf("TESTQ $%d, R10", fFirst),
		"JZ "+l("notfirst"),
		fmt.Sprintf("VMOVUPS %s, %s", D, B), // buf = d
		"JMP "+l("stored"),
		l("notfirst")+":",
		fmt.Sprintf("VMOVUPS %s, %s", mem("R8"), B),
	)
	ins = append(ins, momentum...)
	return append(ins,
		l("stored")+":",
		fmt.Sprintf("VMOVUPS %s, %s", B, mem("R8")),
		fmt.Sprintf("TESTQ $%d, R10", fNesterov),
		"JZ "+l("plain"),
		op("VMULPS", B, s.k(cMom), T), // momentum*buf
		op("VADDPS", T, D, D),         // d += momentum*buf
		"JMP "+l("update"),
		l("plain")+":",
		fmt.Sprintf("VMOVUPS %s, %s", B, D), // d = buf
		l("update")+":",
		op("VMULPS", s.k(cNegLR), D, T), // -lr*d (d first, as Go puts it)
		op("VADDPS", mem("DI"), T, W),   // w += -lr*d (not fused by Go either)
		fmt.Sprintf("VMOVUPS %s, %s", W, mem("DI")),
	)
}

// loop writes one function over n elements (a multiple of lanes): args
// are loaded in order into DI, SI, R8, R9, ... as listed, consts (the
// pointer in DX) are broadcast into registers 8 on, and body is one
// vector's instructions.
func (s isa) loop(base, sig string, args []string, consts int, body func(name string) []string) {
	name := base + s.name
	regs := map[string]string{"w": "DI", "gr": "SI", "m": "R8", "buf": "R8", "v": "R9", "n": "CX", "c": "DX", "flags": "R10"}
	w("// func %s%s", name, sig)
	w("TEXT ·%s(SB), NOSPLIT, $0-%d", name, 8*len(args))
	for i, a := range args {
		w("	MOVQ %s+%d(FP), %s", a, 8*i, regs[a])
	}
	for c := 0; c < consts; c++ {
		w("	VBROADCASTSS %d(DX), %s", 4*c, s.k(c))
	}
	w("	XORQ AX, AX")
	w("%s_loop:", name)
	w("	CMPQ AX, CX")
	w("	JGE %s_done", name)
	for _, l := range body(name) {
		if strings.HasSuffix(l, ":") {
			w("%s", l)
		} else {
			w("	%s", l)
		}
	}
	w("	ADDQ $%d, AX", s.lanes)
	w("	JMP %s_loop", name)
	w("%s_done:", name)
	w("	VZEROUPPER")
	w("	RET")
	w("")
}

func main() {
	w("// Code generated by gen.go; DO NOT EDIT.")
	w("")
	w("//go:build amd64 && !purego")
	w("")
	w(`#include "textflag.h"`)
	w("")
	// AVX-512 keeps to Z0-Z15: VZEROUPPER does not clean Z16-Z31, and
	// Go's SSE and AVX2 code (memmove) would run beside a dirty upper state.
	for _, s := range []isa{{"AVX512", "Z", 16, false}, {"AVX2", "Y", 8, false}, {"FMAAVX512", "Z", 16, true}, {"FMAAVX2", "Y", 8, true}} {
		s.loop("adamw", "(w, gr, m, v *float32, n int, c *adamConsts)",
			[]string{"w", "gr", "m", "v", "n", "c"}, 8, s.adamBody)
		s.loop("sgd", "(w, gr, buf *float32, n int, c *sgdConsts, flags int)",
			[]string{"w", "gr", "buf", "n", "c", "flags"}, 4, s.sgdBody)
	}
	if err := os.WriteFile("kernel_amd64.s", []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

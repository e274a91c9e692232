//go:build amd64 && !purego

package cpu

import "ferry/internal/isa"

//go:generate go run simd_gen.go

// hasAVX2 selects the assembly loops of simd_amd64.s, gelu_amd64.s and
// exp_amd64.s; hasAVX512 the AVX-512 loop of exp_amd64.s. FERRY_CPU caps
// both (package isa).
var hasAVX2, hasAVX512 = isa.AVX2, isa.AVX512

//go:noescape
func reluAVX2(d, s *float32, n int)

//go:noescape
func reluGradAVX2(d, gr, out *float32, n int)

//go:noescape
func addAVX2(d, a, b *float32, n int)

//go:noescape
func addReLUAVX2(d, a, b *float32, n int)

//go:noescape
func scaleAVX2(d, s *float32, n int, alpha float32)

//go:noescape
func axpyAVX2(d, s *float32, n int, alpha float32)

//go:noescape
func acc64AVX2(acc *float64, s *float32, n int)

//go:noescape
func reluGradAcc64AVX2(d, gr, out *float32, acc *float64, n int)

//go:noescape
func addF64AVX2(d, s *float64, n int)

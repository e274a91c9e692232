//go:build !amd64 || purego

package cpu

// Without assembly every loop of simd.go runs in Go.
var hasAVX2, hasAVX512 = false, false

func reluAVX2(d, s *float32, n int)                              { panic("unreachable") }
func reluGradAVX2(d, gr, out *float32, n int)                    { panic("unreachable") }
func addAVX2(d, a, b *float32, n int)                            { panic("unreachable") }
func addReLUAVX2(d, a, b *float32, n int)                        { panic("unreachable") }
func scaleAVX2(d, s *float32, n int, alpha float32)              { panic("unreachable") }
func axpyAVX2(d, s *float32, n int, alpha float32)               { panic("unreachable") }
func acc64AVX2(acc *float64, s *float32, n int)                  { panic("unreachable") }
func reluGradAcc64AVX2(d, gr, out *float32, acc *float64, n int) { panic("unreachable") }
func addF64AVX2(d, s *float64, n int)                            { panic("unreachable") }

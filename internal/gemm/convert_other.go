//go:build !amd64 || purego

package gemm

const haveAVX2 = false

func toBF16AVX2(d *uint16, s *float32, n int)   { panic("unreachable") }
func fromBF16AVX2(d *float32, s *uint16, n int) { panic("unreachable") }

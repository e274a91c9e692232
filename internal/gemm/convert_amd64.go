//go:build amd64 && !purego

package gemm

import "ferry/internal/isa"

var haveAVX2 = isa.AVX2

// toBF16AVX2 rounds n (a multiple of 16) floats at s to bfloat16 at d,
// with roundBF16's bits.
//
//go:noescape
func toBF16AVX2(d *uint16, s *float32, n int)

// fromBF16AVX2 widens n (a multiple of 16) bfloat16 at s to floats at d.
//
//go:noescape
func fromBF16AVX2(d *float32, s *uint16, n int)

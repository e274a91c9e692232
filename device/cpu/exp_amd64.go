//go:build amd64 && !purego

package cpu

// expSumAVX2 is vecExpSub on n (a multiple of 8) elements; c is expConst.
// Requires AVX2.
//
//go:noescape
func expSumAVX2(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32)

// expSumAVX512 is vecExpSub on n (a multiple of 16) elements. Requires
// AVX-512F.
//
//go:noescape
func expSumAVX512(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32)

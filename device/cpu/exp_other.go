//go:build !amd64 || purego

package cpu

func expSumAVX2(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32) {
	panic("unreachable")
}

func expSumAVX512(d, s *float32, n int, m float32, acc *[8]float64, c *[13][16]float32) {
	panic("unreachable")
}

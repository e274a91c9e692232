//go:build !amd64 || purego

package cpu

func geluAVX2(d, s *float32, n int, c *[16][8]float32)         { panic("unreachable") }
func geluGradAVX2(d, gr, x *float32, n int, c *[16][8]float32) { panic("unreachable") }

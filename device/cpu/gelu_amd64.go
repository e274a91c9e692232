//go:build amd64 && !purego

package cpu

// geluAVX2 sets d[i] = GELU(s[i]) for n (a multiple of 8) elements; c is
// geluConst.
//
//go:noescape
func geluAVX2(d, s *float32, n int, c *[16][8]float32)

// geluGradAVX2 sets d[i] = g[i]·GELU'(x[i]) for n (a multiple of 8)
// elements.
//
//go:noescape
func geluGradAVX2(d, gr, x *float32, n int, c *[16][8]float32)

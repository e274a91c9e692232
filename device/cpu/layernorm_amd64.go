//go:build amd64 && !purego

package cpu

// The AVX2 loops of layernorm.go, on n floats (a multiple of 8). Require
// AVX2. A nil w or b is skipped.

//go:noescape
func lnSumAVX2(x *float32, n int, acc *[8]float64)

//go:noescape
func lnSqDevAVX2(x *float32, n int, m float64, acc *[8]float64)

//go:noescape
func lnApplyAVX2(out, x, w, b *float32, n int, m, inv float32)

//go:noescape
func lnBwdSumsAVX2(x, grad, w *float32, n int, m, inv float32, acc1, acc2 *[8]float64)

//go:noescape
func lnBwdDxAVX2(out, x, grad, w *float32, n int, m, inv, a, b float32)

//go:noescape
func lnColSumsAVX2(x, grad *float32, ld, rows int, mean, rstd *float32, aw, ab *float64)

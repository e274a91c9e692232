//go:build !amd64 || purego

package cpu

// hasAVX2 is false here: these are never called.

func lnSumAVX2(x *float32, n int, acc *[8]float64)              { panic("unreachable") }
func lnSqDevAVX2(x *float32, n int, m float64, acc *[8]float64) { panic("unreachable") }
func lnApplyAVX2(out, x, w, b *float32, n int, m, inv float32)  { panic("unreachable") }
func lnBwdSumsAVX2(x, grad, w *float32, n int, m, inv float32, acc1, acc2 *[8]float64) {
	panic("unreachable")
}
func lnBwdDxAVX2(out, x, grad, w *float32, n int, m, inv, a, b float32) { panic("unreachable") }

func lnColSumsAVX2(x, grad *float32, ld, rows int, mean, rstd *float32, aw, ab *float64) {
	panic("unreachable")
}

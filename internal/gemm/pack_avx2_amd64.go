//go:build amd64 && !purego

package gemm

import "unsafe"

// The AVX2 kernel's packing (its panels are 6 rows of A and 16 columns of
// B): the bulk in assembly, the rest in Go. The Go versions move a panel
// row per call of memmove (copies) or one float at a time (gathers); these
// move 24 or 64 bytes per row with vector moves, and gather 8 k-steps of
// 6 or 8 source rows with one 8×8 register transpose.

//go:noescape
func copyPanels64(dp, sp unsafe.Pointer, rows, panels int, ds, ss, dps uintptr)

//go:noescape
func copyPanels24(dp, sp unsafe.Pointer, rows, panels int, ds, ss, dps uintptr)

//go:noescape
func gather8x8(dp, sp unsafe.Pointer, ss, ds uintptr, groups int)

//go:noescape
func gather6x8(dp, sp unsafe.Pointer, ss, ds uintptr, groups int)

// copyRunsAVX2 is copyRunsGo with the AVX2 kernel's widths in assembly.
func copyRunsAVX2(w, panels int, dp, sp unsafe.Pointer, rows int, ds, ss, dps uintptr) bool {
	switch w {
	case 16:
		copyPanels64(dp, sp, rows, panels, ds, ss, dps)
	case 6:
		copyPanels24(dp, sp, rows, panels, ds, ss, dps)
	default:
		return copyRunsGo(w, panels, dp, sp, rows, ds, ss, dps)
	}
	return true
}

// gather6AVX2 is gather6 with whole groups of 8 k-steps in assembly.
func gather6AVX2(dp, sp unsafe.Pointer, ss, ds uintptr, kc int) {
	g := kc / 8
	gather6x8(dp, sp, ss, ds, g)
	if r := kc - 8*g; r > 0 {
		gather6(unsafe.Add(dp, uintptr(8*g)*ds), unsafe.Add(sp, 32*g), ss, ds, r)
	}
}

// gather8AVX2 is gather8 with whole groups of 8 k-steps in assembly.
func gather8AVX2(dp, sp unsafe.Pointer, ss, ds uintptr, kc int) {
	g := kc / 8
	gather8x8(dp, sp, ss, ds, g)
	if r := kc - 8*g; r > 0 {
		gather8(unsafe.Add(dp, uintptr(8*g)*ds), unsafe.Add(sp, 32*g), ss, ds, r)
	}
}

func packCopyAVX2(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	packCopyRuns(dst, w, src, ld, r0, c0, kc, cnt, copyRunsAVX2)
}

func packGatherAVX2(dst []float32, w int, src []float32, ld, r0, c0, kc, cnt int) {
	packGatherRows(dst, w, src, ld, r0, c0, kc, cnt, gather6AVX2, gather8AVX2)
}

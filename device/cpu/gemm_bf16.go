package cpu

import (
	"ferry/device"
	"ferry/internal/gemm"
)

// gemmBF16 runs a product of bfloat16 A and B through package gemm: with
// VDPBF16PS where the CPU has AVX512_BF16, by widening A and B while they
// are packed elsewhere (never through OpenBLAS, whose bfloat16 product
// Debian's 0.3.21 lacks). A bfloat16 C receives Alpha·AB + Beta·C
// computed in float32 and rounded once, the bits of a float32 C followed
// by Convert.
func gemmBF16(p device.GemmParams) {
	a, b := uint16s(device.View{Block: p.A, Off: p.OffA}), uint16s(device.View{Block: p.B, Off: p.OffB})
	if p.TypeC == device.Float32 {
		c := floats(device.View{Block: p.C, Off: p.OffC})
		for i := 0; i < p.Batch; i++ {
			gemm.GemmBF16(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, a[i*p.StrideA:], p.LDA, b[i*p.StrideB:], p.LDB, p.Beta, c[i*p.StrideC:], p.LDC)
		}
		return
	}
	c := uint16s(device.View{Block: p.C, Off: p.OffC})
	for i := 0; i < p.Batch; i++ {
		gemm.GemmBF16To16(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, a[i*p.StrideA:], p.LDA, b[i*p.StrideB:], p.LDB, p.Beta, c[i*p.StrideC:], p.LDC)
	}
}

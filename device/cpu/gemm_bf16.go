package cpu

import (
	"sync"

	"ferry/device"
	"ferry/internal/gemm"
)

// gemmBF16 runs a product of bfloat16 A and B through gemm.GemmBF16: with
// VDPBF16PS where the CPU has AVX512_BF16, by widening A and B while they
// are packed elsewhere (never through OpenBLAS, whose bfloat16 product
// Debian's 0.3.21 lacks). A bfloat16 C is computed in a float32 scratch
// matrix (C widened into it when Beta ≠ 0) and rounded into C once, so
// that it receives Alpha·AB + Beta·C rounded to nearest even, as a
// float32 C followed by Convert would.
func gemmBF16(p device.GemmParams) {
	a, b := uint16s(device.View{Block: p.A, Off: p.OffA}), uint16s(device.View{Block: p.B, Off: p.OffB})
	if p.TypeC == device.Float32 {
		c := floats(device.View{Block: p.C, Off: p.OffC})
		for i := 0; i < p.Batch; i++ {
			gemm.GemmBF16(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, a[i*p.StrideA:], p.LDA, b[i*p.StrideB:], p.LDB, p.Beta, c[i*p.StrideC:], p.LDC)
		}
		return
	}
	if p.M == 0 || p.N == 0 {
		return
	}
	c := uint16s(device.View{Block: p.C, Off: p.OffC})
	tp := scratch.Get().(*[]float32)
	defer scratch.Put(tp)
	if cap(*tp) < p.M*p.N {
		*tp = make([]float32, p.M*p.N)
	}
	t := (*tp)[:p.M*p.N]
	n := p.N
	rowGrain := max(1, elementGrain/n)
	for i := 0; i < p.Batch; i++ {
		ci := c[i*p.StrideC:]
		if p.Beta != 0 {
			parallelFor(p.M, rowGrain, func(lo, hi int) {
				for r := lo; r < hi; r++ {
					fromBF16s(t[r*n:(r+1)*n], ci[r*p.LDC:r*p.LDC+n])
				}
			})
		}
		gemm.GemmBF16(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, a[i*p.StrideA:], p.LDA, b[i*p.StrideB:], p.LDB, p.Beta, t, n)
		parallelFor(p.M, rowGrain, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				toBF16s(ci[r*p.LDC:r*p.LDC+n], t[r*n:(r+1)*n])
			}
		})
	}
}

// scratch holds the float32 results of bfloat16 products between calls.
var scratch = sync.Pool{New: func() any { return new([]float32) }}

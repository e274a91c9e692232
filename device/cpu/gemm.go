package cpu

import (
	"unsafe"

	"ferry/device"
	"ferry/internal/blas"
	"ferry/internal/gemm"
)

// Gemm runs each matrix product of the batch through OpenBLAS when it was
// loaded (FERRY_BLAS=off forbids it), and through the pure-Go kernel of
// package gemm otherwise.
func (k *kernels) Gemm(p device.GemmParams) error {
	a, b, c := floats(device.View{Block: p.A, Off: p.OffA}), floats(device.View{Block: p.B, Off: p.OffB}), floats(device.View{Block: p.C, Off: p.OffC})
	for i := 0; i < p.Batch; i++ {
		ai, bi, ci := a[i*p.StrideA:], b[i*p.StrideB:], c[i*p.StrideC:]
		if useBLAS() {
			blas.Sgemm(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha,
				unsafe.Pointer(&ai[0]), p.LDA, unsafe.Pointer(&bi[0]), p.LDB, p.Beta, unsafe.Pointer(&ci[0]), p.LDC)
			blasCalled()
		} else {
			gemm.Sgemm(p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, ai, p.LDA, bi, p.LDB, p.Beta, ci, p.LDC)
		}
	}
	return nil
}

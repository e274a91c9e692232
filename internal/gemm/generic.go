package gemm

import "unsafe"

// Portable micro-kernel: 4×4 tile, plain Go. The sixteen accumulators are
// separate local variables so that the compiler can keep them in registers
// (arrays are not register-allocated); with 32 FP registers (arm64) they
// all fit, on amd64 a few spill.
const (
	genericMR = 4
	genericNR = 4
)

func registerGeneric() {
	register("generic", &kernelInfo{name: "generic/4x4", fn: kernGeneric, mr: genericMR, nr: genericNR,
		mc: 128, kc: 256, nc: 2048})
}

// kernGeneric implements the microKernel contract for a 4×4 tile.
func kernGeneric(kc int, a, b, c *float32, ldc int, alpha, beta float32) {
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	ap, bp := unsafe.Pointer(a), unsafe.Pointer(b)
	for p := range uintptr(kc) {
		av := (*[genericMR]float32)(unsafe.Add(ap, p*genericMR*4))
		bv := (*[genericNR]float32)(unsafe.Add(bp, p*genericNR*4))
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		a0 := av[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := av[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := av[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := av[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	acc := [genericMR][genericNR]float32{
		{c00, c01, c02, c03},
		{c10, c11, c12, c13},
		{c20, c21, c22, c23},
		{c30, c31, c32, c33},
	}
	cs := unsafe.Slice(c, (genericMR-1)*ldc+genericNR)
	for i := 0; i < genericMR; i++ {
		row := (*[genericNR]float32)(cs[i*ldc:])
		if beta == 0 {
			for j := range row {
				row[j] = alpha * acc[i][j]
			}
		} else {
			for j := range row {
				row[j] = float32(alpha*acc[i][j]) + float32(beta*row[j])
			}
		}
	}
}

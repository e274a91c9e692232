package gemm

// GemmBF16 is Sgemm with A and B in bfloat16 (their bits, as uint16) and C
// in float32: the products are exact in float32 and summed in float32.
// Where the CPU has AVX512_BF16 (and FERRY_CPU, FERRY_GEMM_KERNEL allow
// AVX-512) the micro-kernel multiplies pairs of bfloat16 with VDPBF16PS
// (Note [VDPBF16PS]); elsewhere A and B are widened to float32 while they
// are packed and the float32 kernel runs, giving Sgemm's bits on the
// widened operands. Either way the result depends only on the shapes and
// the kernel, not on the number of goroutines. Leading dimensions are in
// elements; the other conventions are Sgemm's.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	gemmBF16(pickBF16(m, n), numWorkers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmBF16Serial is GemmBF16 on the calling goroutine alone, with the
// same bits.
func GemmBF16Serial(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	gemmBF16(pickBF16(m, n), 1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func gemmBF16(kern *kernelInfo, nw int, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	solve(args{
		k: kern, transA: transA, transB: transB, m: m, n: n, kk: k,
		alpha: alpha, beta: beta, a16: a, b16: b, c: c, lda: lda, ldb: ldb, ldc: ldc,
	}, nw)
}

// bf16Dot holds the VDPBF16PS kernels where the CPU has them (registerArch).
var bf16Dot *family

// pickBF16 is the kernel for a bfloat16 product: a VDPBF16PS kernel when
// the float32 kernels in use are AVX-512 ones, the float32 kernel
// otherwise.
func pickBF16(m, n int) *kernelInfo {
	if bf16Dot != nil && active.name == "avx512" {
		return bf16Dot.pick(m, n)
	}
	return active.pick(m, n)
}

// KernelBF16 reports which micro-kernel GemmBF16 uses: "avx512bf16", or
// Kernel()'s float32 kernel on widened operands.
func KernelBF16() string {
	if bf16Dot != nil && active.name == "avx512" {
		return bf16Dot.name
	}
	return active.name
}

// Note [VDPBF16PS]. VDPBF16PS acc, a, b adds to each float32 lane i of acc
// the products of the lane's two bfloat16 pairs, the odd (high) one
// first, as two fused multiply-adds, each rounded to nearest even:
//
//	acc = FMA(a.hi, b.hi, acc); acc = FMA(a.lo, b.lo, acc)
//
// with denormal inputs (the bfloat16 and acc) read as zero of their sign
// and a denormal result of either step flushed to zero of its sign,
// whatever MXCSR says (Intel's pseudo-code; checked bit for bit on AMD Zen
// 5, 192,000 random lanes over all exponents, and NaN for NaN with
// infinities and NaNs: TestDotStep, dpStep in bf16_test.go emulates it).
// So a bfloat16 product on the VDPBF16PS kernels differs from the widened
// float32 one in the last bits (the float32 kernels add one product at a
// time with FMA and keep denormals), and flushes sums below 2^-126 to
// zero: PyTorch's bfloat16 GEMM on oneDNN does the same with these
// instructions. Zeros padding a k-pair or a tile add nothing (x + 0·0 is
// x, except -0 + 0 = +0, and the kernels start from +0).

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
// whatever MXCSR says. That is Intel's pseudo-code; on AMD Zen 5 a probe of
// 192,000 random lanes over all exponents agreed with it bit for bit (and
// NaN for NaN with infinities and NaNs), and TestDotKernels checks the
// kernels against dpStep, its emulation in bf16_test.go, on every run
// where the CPU has the instruction. So a bfloat16 product on the
// VDPBF16PS kernels differs from the widened float32 one in the last bits
// (the float32 kernels add one product at a time and keep denormals) and
// flushes sums below 2^-126 to zero, as oneDNN's bfloat16 kernels using
// the same instruction do. Zeros padding a k-pair or a tile add nothing
// (x + 0·0 is x, except that -0 becomes +0, and the kernels start from
// +0).

// GemmBF16To16 is GemmBF16 with C in bfloat16 too: each element of C
// receives alpha·AB + beta·C computed in float32 (C widened, not read when
// beta is 0) and rounded to nearest even once, as RoundBF16s rounds
// GemmBF16's float32 result; each block of C is computed in a float32
// scratch tile and rounded while it is in the caches.
func GemmBF16To16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []uint16, ldc int) {
	gemmBF16To16(pickBF16(m, n), numWorkers(), transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func gemmBF16To16(kern *kernelInfo, nw int, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []uint16, ldc int) {
	checkArgs(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	solve(args{
		k: kern, transA: transA, transB: transB, m: m, n: n, kk: k,
		alpha: alpha, beta: beta, a16: a, b16: b, c16: c, lda: lda, ldb: ldb, ldc: ldc,
	}, nw)
}

// runC16 computes the block C[m0:m1, n0:n1] of a bfloat16 C, in bands of
// rows: each in a float32 scratch tile of at most c16Scratch elements (C
// widened into it unless beta is 0), by run on the problem moved to the
// band's origin, then rounded into C. Bands start on tile boundaries, so
// their tiles and sums are those of a float32 C.
func (p *problem) runC16(m0, m1, n0, n1 int) {
	nB := n1 - n0
	band := max(p.k.mr, c16Scratch/nB/p.k.mr*p.k.mr)
	buf := getBuffers()
	defer putBuffers(buf)
	t := aligned(&buf.rawC, min(band, m1-m0)*nB)
	c, ldc := p.c16, p.ldc
	for r0 := m0; r0 < m1; r0 += band {
		mB := min(band, m1-r0)
		if p.beta != 0 {
			for i := range mB {
				WidenBF16s(t[i*nB:(i+1)*nB], c[(r0+i)*ldc+n0:][:nB])
			}
		}
		a := p.args
		a.c16, a.c, a.ldc, a.m, a.n = nil, t, nB, mB, nB
		if a.transA {
			a.a16 = a.a16[r0:]
		} else {
			a.a16 = a.a16[r0*a.lda:]
		}
		if a.transB {
			a.b16 = a.b16[n0*a.ldb:]
		} else {
			a.b16 = a.b16[n0:]
		}
		sub := problem{args: a}
		sub.run(0, mB, 0, nB)
		for i := range mB {
			RoundBF16s(c[(r0+i)*ldc+n0:][:nB], t[i*nB:(i+1)*nB])
		}
	}
}

// c16Scratch bounds runC16's float32 tile (elements): 4 MiB.
var c16Scratch = 1 << 20

// scaleC16 sets a bfloat16 C to beta·C (to 0 without reading it when beta
// is 0), rounding as GemmBF16To16 does.
func scaleC16(m, n int, beta float32, c []uint16, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j, v := range row {
				row[j] = roundBF16(beta * widen(v))
			}
		}
	}
}

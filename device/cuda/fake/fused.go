package fake

import (
	"ferry/device"
	"ferry/internal/optkernel"
)

// The launches of device/cuda/kernels/fused.cu, optim.cu and gemm.cu on
// the CPU device's kernels and optimizer loops (Note [one source per
// kernel]).

func init() {
	register(map[string]kernelFunc{
		"ferry_bias_gelu_tanh":         biasGELUTanh,
		"ferry_gelu_tanh_backward_sum": geluTanhBackwardSum,
		"ferry_add_layer_norm":         addLayerNorm,
		"ferry_sgd_step":               sgdStep,
		"ferry_adamw_step":             adamwStep,
		"ferry_adamw_multi":            adamwMulti,
		"ferry_gemm":                   func(k *launch) { gemm(k, false) },
		"ferry_gemm_bf16":              func(k *launch) { gemm(k, true) },
	})
}

// biasGELUTanh is ferry_bias_gelu_tanh(dst, z, bias, rows, cols).
func biasGELUTanh(k *launch) {
	k.requireBlock(block, 1)
	rows, cols := int(k.i64(3)), int(k.i64(4))
	k.must(host.(device.FusedGELUKernels).BiasGELUTanh(k.contig(0, device.Float32, rows, cols),
		k.contig(1, device.Float32, rows, cols), k.contig(2, device.Float32, cols)))
}

// geluTanhBackwardSum is ferry_gelu_tanh_backward_sum(dst, sum, partial,
// grad, z, rows, cols, chunk); split over the rows, it writes the sums
// itself, and the ferry_sum_finish after it does nothing.
func geluTanhBackwardSum(k *launch) {
	k.requireBlock(block, 1)
	rows, cols := int(k.i64(5)), int(k.i64(6))
	k.must(host.(device.FusedGELUKernels).GELUTanhBackwardSum(k.contig(0, device.Float32, rows, cols), k.contig(1, device.Float32, cols),
		k.contig(3, device.Float32, rows, cols), k.contig(4, device.Float32, rows, cols)))
}

// addLayerNorm is ferry_add_layer_norm(sum, dst, mean, rstd, x, r, w, b,
// rows, C, eps).
func addLayerNorm(k *launch) {
	k.requireBlock(block, 1)
	rows, C, eps := int(k.i64(8)), int(k.i64(9)), k.f32(10)
	m := func(i int) device.View { return k.contig(i, device.Float32, rows, C) }
	k.must(host.(device.FusedAddLayerNormKernels).AddLayerNorm(m(0), m(1), k.contig(2, device.Float32, rows), k.contig(3, device.Float32, rows),
		m(4), m(5), k.contig(6, device.Float32, C), k.contig(7, device.Float32, C), eps))
}

// sgdStep is ferry_sgd_step(w, g, buf, n, lr, momentum, dampening,
// weight_decay, nesterov, first): package optkernel's SGD, as the CPU
// device's.
func sgdStep(k *launch) {
	n := k.i64(3)
	k.oneD(n, false, 0)
	p := device.SGDParams{LR: k.f32(4), Momentum: k.f32(5), Dampening: k.f32(6), WeightDecay: k.f32(7), Nesterov: k.i32(8) != 0, First: k.i32(9) != 0}
	var buf []float32
	if p.Momentum != 0 {
		buf = k.floats(2, int(n))
	}
	optkernel.SGD(k.floats(0, int(n)), k.floats(1, int(n)), buf, p)
}

// adamwStep is ferry_adamw_step(w, g, m, v, n, decay, beta1, beta2, eps,
// step_size, bc2_sqrt): package optkernel's AdamW, as the CPU device's.
func adamwStep(k *launch) {
	n := int(k.i64(4))
	k.oneD(int64(n), false, 0)
	optkernel.AdamWScalars(k.floats(0, n), k.floats(1, n), k.floats(2, n), k.floats(3, n), k.f32(5), k.f32(6), k.f32(7), k.f32(8), k.f32(9), k.f32(10))
}

// adamwTable is ADAMW_TABLE: struct AdamWTable is count, chunk, then
// w, g, m, v and n of adamwTable entries each, then first[adamwTable+1].
const adamwTable = 40

// adamwMulti is ferry_adamw_multi(table, decay, beta1, beta2, eps,
// step_size, bc2_sqrt): adamwStep for each tensor of the table.
func adamwMulti(k *launch) {
	k.oneD(0, false, 0)
	count := int(k.field(0, 0))
	if count < 1 || count > adamwTable {
		k.fail("table of %d tensors", count)
	}
	for t := range count {
		col := func(c int) int64 { return k.field(0, 2+c*adamwTable+t) }
		n := int(col(4))
		f := func(c int) []float32 { return k.floatsAt("table", uint64(col(c)), n) }
		optkernel.AdamWScalars(f(0), f(1), f(2), f(3), k.f32(1), k.f32(2), k.f32(3), k.f32(4), k.f32(5), k.f32(6))
	}
}

// gemm is ferry_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, stride_a,
// B, ldb, stride_b, beta, C, ldc, stride_c, batch) and ferry_gemm_bf16
// (c_bf16 first, A and B bfloat16): one 16×16 block per tile of C, the
// grid covering C.
func gemm(k *launch, bf16 bool) {
	const tile = 16
	k.requireBlock(tile, tile)
	o, ta, tc := 0, device.Float32, device.Float32
	if bf16 {
		o, ta = 1, device.BFloat16
		if k.i32(0) != 0 {
			tc = device.BFloat16
		}
	}
	p := device.GemmParams{TransA: k.i32(o) != 0, TransB: k.i32(o+1) != 0, M: int(k.i64(o + 2)), N: int(k.i64(o + 3)), K: int(k.i64(o + 4)),
		Alpha: k.f32(o + 5), LDA: int(k.i64(o + 7)), StrideA: int(k.i64(o + 8)), LDB: int(k.i64(o + 10)), StrideB: int(k.i64(o + 11)),
		Beta: k.f32(o + 12), LDC: int(k.i64(o + 14)), StrideC: int(k.i64(o + 15)), Batch: int(k.i64(o + 16)),
		TypeA: ta, TypeB: ta, TypeC: tc}
	if int64(k.grid.X)*tile < int64(p.N) || int64(k.grid.Y)*tile < int64(p.M) {
		k.fail("grid %v leaves part of a %dx%d C uncomputed", k.grid, p.M, p.N)
	}
	k.gemmOperands(&p, k.u64(o+6), k.u64(o+9), k.u64(o+13))
	k.must(host.Gemm(p))
}

// gemmOperands sets p's blocks to the memory at a, b and c, each checked
// to hold every element p reaches, and returns how many elements of A and
// B that is.
func (k *launch) gemmOperands(p *device.GemmParams, a, b, c uint64) (na, nb int) {
	stored := func(trans bool, rows, cols int) (int, int) {
		if trans {
			return cols, rows
		}
		return rows, cols
	}
	ar, ac := stored(p.TransA, p.M, p.K)
	br, bc := stored(p.TransB, p.K, p.N)
	p.A = k.viewAt("A", a, p.TypeA, []int{p.Batch, ar, ac}, []int{p.StrideA, p.LDA, 1}).Block
	p.B = k.viewAt("B", b, p.TypeB, []int{p.Batch, br, bc}, []int{p.StrideB, p.LDB, 1}).Block
	p.C = k.viewAt("C", c, p.TypeC, []int{p.Batch, p.M, p.N}, []int{p.StrideC, p.LDC, 1}).Block
	extent := func(rows, cols, ld, stride int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (p.Batch-1)*stride + (rows-1)*ld + cols
	}
	return extent(ar, ac, p.LDA, p.StrideA), extent(br, bc, p.LDB, p.StrideB)
}

package fake

import (
	"ferry/device"
)

// The launches of device/cuda/kernels/reduce.cu (sums, softmax, NLL and
// the fused cross-entropy) on the CPU device's kernels (Note [one source
// per kernel]).

func init() {
	register(map[string]kernelFunc{
		"ferry_sum_blocks":             func(k *launch) { sum(k, false) },
		"ferry_sum_threads":            func(k *launch) { sum(k, false) },
		"ferry_sum_blocks_mixed":       func(k *launch) { sum(k, true) },
		"ferry_sum_threads_mixed":      func(k *launch) { sum(k, true) },
		"ferry_sum_finish":             finished,
		"ferry_sum_finish_mixed":       finished,
		"ferry_softmax":                softmax,
		"ferry_softmax_backward":       softmaxBackward,
		"ferry_nll":                    nll,
		"ferry_nll_grad_scale":         nllGradScale,
		"ferry_nll_backward":           nllBackward,
		"ferry_cross_entropy_stats":    crossEntropyStats,
		"ferry_cross_entropy_loss":     crossEntropyLoss,
		"ferry_cross_entropy_backward": crossEntropyBackward,
	})
}

// reduction is struct Reduce: out_rank, out_shape[8], out_stride[8],
// red_rank, red_shape[8], red_stride[8], as views of the source (its
// output axes, then its reduced ones) and of the contiguous output.
func (k *launch) reduction(i int, dst, src int, dt, st device.DType, nOut, nRed int64) (device.View, device.View) {
	outRank, redRank := int(k.field(i, 0)), int(k.field(i, 17))
	if outRank < 1 || outRank > 8 || redRank < 0 || redRank > 8 {
		k.fail("reduction of rank %d over %d axes", outRank, redRank)
	}
	var shape, strides, kept []int
	for d := 0; d < outRank; d++ {
		shape = append(shape, int(k.field(i, 1+d)))
		strides = append(strides, int(k.field(i, 9+d)))
		kept = append(kept, shape[d])
	}
	for d := 0; d < redRank; d++ {
		shape = append(shape, int(k.field(i, 18+d)))
		strides = append(strides, int(k.field(i, 26+d)))
		kept = append(kept, 1)
	}
	if int64(device.Numel(kept)) != nOut || int64(device.Numel(shape)) != nOut*nRed {
		k.fail("%d outputs of %d elements each in a reduction of shape %v", nOut, nRed, shape)
	}
	return k.view(dst, dt, kept, device.Contiguous(kept)), k.view(src, st, shape, strides)
}

// sum is ferry_sum_blocks and ferry_sum_threads (dst, partial, src, alpha,
// n_out, n_red, chunk, Reduce), and their _mixed variants (types first,
// dst and src of its bits 0 and 1). Where the grid splits the reduction
// (gridDim.y > 1) the GPU leaves partial sums for ferry_sum_finish; here
// this launch writes the result.
//
// A mixed sum is the float32 sum of the widened source, rounded: the bits
// of Convert, the float32 launch and Convert (Note [bfloat16 elementwise
// on the GPU] in device/cuda), which the order of a sum (a NaN's sign and
// payload depend on it) would not give if the CPU's bfloat16 Sum saw the
// reduction's axes, output axes first, in another layout than the float32
// one does.
func sum(k *launch, mixed bool) {
	k.requireBlock(block, 1)
	o, dt, st := 0, device.Float32, device.Float32
	if mixed {
		o = 1
		dt, st = typeOf(k.i32(0), 0), typeOf(k.i32(0), 1)
	}
	alpha, nOut, nRed := k.f32(o+3), k.i64(o+4), k.i64(o+5)
	dst, src := k.reduction(o+7, o, o+2, dt, st, nOut, nRed)
	if st == device.BFloat16 {
		src = widened(k, src)
	}
	if dt == device.Float32 {
		k.must(host.Sum(dst, src, alpha))
		return
	}
	out := scratch(dst.Shape...)
	k.must(host.Sum(out, src, alpha))
	k.must(host.(device.ConvertKernels).Convert(dst, out))
}

// widened is a bfloat16 view as float32: every element from its first to
// its last converted into host memory, in the view's layout.
func widened(k *launch, v device.View) device.View {
	n := 1
	for d, s := range v.Shape {
		if s == 0 {
			return scratch(v.Shape...)
		}
		n += (s - 1) * v.Strides[d]
	}
	w := scratch(n)
	k.must(host.(device.ConvertKernels).Convert(w, device.View{Block: v.Block, Shape: []int{n}, Strides: []int{1}, DType: device.BFloat16}))
	w.Shape, w.Strides = v.Shape, v.Strides
	return w
}

// finished is a launch that finishes a split reduction: the launch before
// it on the stream wrote the result.
func finished(k *launch) { k.oneD(0, false, 0) }

// softmax is ferry_softmax(dst, src, rows, cols, log).
func softmax(k *launch) {
	k.requireBlock(block, 1)
	rows, cols, log := int(k.i64(2)), int(k.i64(3)), k.i32(4) != 0
	k.must(host.Softmax(k.contig(0, device.Float32, rows, cols), k.contig(1, device.Float32, rows, cols), log))
}

// softmaxBackward is ferry_softmax_backward(dst, grad, out, rows, cols, log).
func softmaxBackward(k *launch) {
	k.requireBlock(block, 1)
	rows, cols, log := int(k.i64(3)), int(k.i64(4)), k.i32(5) != 0
	k.must(host.SoftmaxBackward(k.contig(0, device.Float32, rows, cols), k.contig(1, device.Float32, rows, cols),
		k.contig(2, device.Float32, rows, cols), log))
}

// nll is ferry_nll(dst, logp, target, rows, cols).
func nll(k *launch) {
	k.oneBlock()
	rows, cols := int(k.i64(3)), int(k.i64(4))
	k.must(host.NLL(k.contig(0, device.Float32, 1), k.contig(1, device.Float32, rows, cols), k.contig(2, device.Int32, rows)))
}

// nllGradScale is ferry_nll_grad_scale(scale, grad, target, rows), which
// on a GPU writes -grad/count; here it keeps grad, which the launch after
// it hands to the CPU kernel that divides.
func nllGradScale(k *launch) {
	k.oneBlock()
	k.must(host.Copy(k.contig(0, device.Int32, 1), k.contig(1, device.Int32, 1)))
}

// nllBackward is ferry_nll_backward(dst, scale, target, rows, cols).
func nllBackward(k *launch) {
	rows, cols := int(k.i64(3)), int(k.i64(4))
	k.oneD(int64(rows*cols), false, 0)
	k.must(host.NLLBackward(k.contig(0, device.Float32, rows, cols), k.contig(1, device.Float32, 1), k.contig(2, device.Int32, rows)))
}

var crossEntropy = host.(device.CrossEntropyKernels)

// crossEntropyStats is ferry_cross_entropy_stats(stats, src, rows, cols):
// the CPU's CrossEntropy with every row ignored, its loss dropped.
func crossEntropyStats(k *launch) {
	k.requireBlock(block, 1)
	rows, cols := int(k.i64(2)), int(k.i64(3))
	ignored := scratch(rows)
	k.must(host.Fill(ignored, -1)) // float32 -1's bits are a negative int32: every row ignored
	ignored.DType = device.Int32
	k.must(crossEntropy.CrossEntropy(scratch(1), k.contig(0, device.Float32, rows, 2), k.contig(1, device.Float32, rows, cols), ignored))
}

// crossEntropyLoss is ferry_cross_entropy_loss(dst, stats, x, target,
// rows, cols): the CPU's CrossEntropy, which writes the stats again (the
// same values).
func crossEntropyLoss(k *launch) {
	k.oneBlock()
	rows, cols := int(k.i64(4)), int(k.i64(5))
	k.must(crossEntropy.CrossEntropy(k.contig(0, device.Float32, 1), k.contig(1, device.Float32, rows, 2),
		k.contig(2, device.Float32, rows, cols), k.contig(3, device.Int32, rows)))
}

// crossEntropyBackward is ferry_cross_entropy_backward(dst, scale, x,
// stats, target, rows, cols), scale holding the output gradient
// (nllGradScale).
func crossEntropyBackward(k *launch) {
	rows, cols := int(k.i64(5)), int(k.i64(6))
	k.oneD(int64(rows*cols), false, 0)
	k.must(crossEntropy.CrossEntropyBackward(k.contig(0, device.Float32, rows, cols), k.contig(1, device.Float32, 1),
		k.contig(2, device.Float32, rows, cols), k.contig(3, device.Float32, rows, 2), k.contig(4, device.Int32, rows)))
}

package ferry

import (
	"math"
	"slices"

	"ferry/device"
)

// Losses, each reduced to a mean (PyTorch's default reduction).

// MSELoss returns the mean of (x - target)² over all elements (PyTorch:
// nn.functional.mse_loss). It saves x and target for backward.
func MSELoss(x, target *Tensor) *Tensor {
	if isBF16(x, target) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return MSELoss(w[0], w[1]) }, x, target)
	}
	tp := tapeOf("mse_loss", x, target)
	dev := sameDevice("mse_loss", x, target)
	floats32("mse_loss", x, target)
	if !slices.Equal(x.shape, target.shape) {
		panicf("mse_loss", "input %v and target %v differ in shape", x.shape, target.shape)
	}
	n := x.Numel()
	out := newOutput(tp, dev, nil)
	if out.st.block != nil && x.st.block == nil { // the mean of no elements, as PyTorch
		check("mse_loss", dev.Kernels().Fill(out.view(), float32(math.NaN())))
	} else if out.st.block != nil {
		d := temporary(dev, x.shape)
		k := dev.Kernels()
		check("mse_loss", k.Binary(device.Sub, d.view(), x.view(), target.view()))
		check("mse_loss", k.Unary(device.Square, d.view(), d.view(), 0))
		ov := out.view()
		ov.Shape, ov.Strides = onesLike(x.shape), onesLike(x.shape)
		check("mse_loss", k.Sum(ov, d.view(), 1/float32(n)))
		d.Release()
	}
	record(tp, "mse_loss", out, []*Tensor{x, target}, []*Tensor{x, target}, func(bk *backward) {
		// d/dx = 2(x - t)·g/n; d/dt = -d/dx.
		g := bk.Grad()
		diff, _ := binary("mse_loss_backward", device.Sub, bk.Saved(0), bk.Saved(1))
		dx, _ := binary("mse_loss_backward", device.Mul, diff, g)
		diff.Release()
		if dx.st.block != nil {
			check("mse_loss_backward", kernels(dx).Unary(device.Scale, dx.view(), dx.view(), 2/float32(n)))
		}
		if bk.Needs(1) {
			bk.Accumulate(1, Neg(dx))
		}
		bk.Accumulate(0, dx)
	})
	return out
}

func onesLike(shape []int) []int {
	s := make([]int, len(shape))
	for i := range s {
		s[i] = 1
	}
	return s
}

// NLLLoss returns the mean over rows of -logp[r, target[r]] for logp
// [rows, classes] (log-probabilities) and int32 target [rows]; rows whose
// target is IgnoreIndex (-100, PyTorch's default ignore_index) are skipped,
// and any other target outside [0, classes) is an *Error. It saves the
// target.
func NLLLoss(logp, target *Tensor) *Tensor {
	if isBF16(logp, target) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return NLLLoss(w[0], w[1]) }, logp, target)
	}
	tp := tapeOf("nll_loss", logp, target)
	dev := sameDevice("nll_loss", logp, target)
	floats32("nll_loss", logp)
	if target.dtype != device.Int32 {
		panicf("nll_loss", "target is %s; class indices are int32 (FromInt32s)", target.dtype)
	}
	if logp.Rank() != 2 || target.Rank() != 1 || target.shape[0] != logp.shape[0] {
		panicf("nll_loss", "want logp [rows, classes] and target [rows], got %v and %v", logp.shape, target.shape)
	}
	if device.HasData(dev) {
		classes := logp.shape[1]
		for _, c := range target.Int32s() {
			if c != IgnoreIndex && (c < 0 || c >= int32(classes)) {
				panicf("nll_loss", "target class %d out of range for %d classes (only %d, the ignore index, may lie outside)", c, classes, IgnoreIndex)
			}
		}
	}
	src := logp
	if !logp.IsContiguous() {
		src = logp.contiguousCopy(nil)
		defer src.Release()
	}
	out := newOutput(tp, dev, nil)
	if out.st.block != nil && logp.st.block == nil { // no rows: the mean of nothing
		check("nll_loss", dev.Kernels().Fill(out.view(), float32(math.NaN())))
	} else if out.st.block != nil {
		check("nll_loss", dev.Kernels().NLL(out.view(), src.view(), target.view()))
	}
	shape := logp.shape
	record(tp, "nll_loss", out, []*Tensor{logp, target}, []*Tensor{target}, func(bk *backward) {
		tg := bk.Saved(0)
		if !tg.IsContiguous() {
			tg = tg.contiguousCopy(nil)
			defer tg.Release()
		}
		dx := newOutput(bk.tape, dev, shape)
		if dx.st.block != nil {
			check("nll_loss_backward", dev.Kernels().NLLBackward(dx.view(), bk.Grad().view(), tg.view()))
		}
		bk.Accumulate(0, dx)
	})
	return out
}

// CrossEntropy returns the mean cross-entropy of logits [..., classes]
// against int32 class targets [...]: NLLLoss(LogSoftmax(logits)) over the
// flattened leading axes, as PyTorch computes nn.functional.cross_entropy
// of logits.view(-1, V) and targets.view(-1). Rows whose target is
// IgnoreIndex (-100) are left out of the mean; any other target outside
// [0, classes) is an *Error. The log-probabilities are freed when the loss
// is computed, except for the reference log-softmax saved for backward.
func CrossEntropy(logits, target *Tensor) *Tensor {
	if isBF16(logits, target) {
		// The widened logits are reshaped below, and the reshape does not
		// carry widenedFrom: the op saves them in float32, not bfloat16.
		// Kept so: saving the bfloat16 logits would free the float32 ones
		// after the loss, but backward would widen them again beside the
		// float32 gradient, and GPT-2's step peak would rise by the
		// bfloat16 logits' 823 MB (docs/precision.md, What autograd saves).
		return inFloat32(false, func(w []*Tensor) *Tensor { return CrossEntropy(w[0], w[1]) }, logits, target)
	}
	if logits.Rank() > 2 || (logits.Rank() == 2 && target.Rank() != 1) {
		V := logits.shape[logits.Rank()-1]
		if device.Numel(target.shape)*V != logits.Numel() || !slices.Equal(target.shape, logits.shape[:logits.Rank()-1]) {
			panicf("cross_entropy", "want logits [..., classes] and target [...] with the same leading axes, got %v and %v", logits.shape, target.shape)
		}
		l2 := logits.Reshape(-1, V)
		t1 := target.Reshape(-1)
		loss := CrossEntropy(l2, t1)
		l2.Release()
		t1.Release()
		return loss
	}
	if ck, ok := logits.st.dev.Kernels().(device.CrossEntropyKernels); ok && logits.Rank() == 2 {
		return crossEntropyFused(ck, logits, target)
	}
	logp := LogSoftmax(logits)
	loss := NLLLoss(logp, target)
	logp.Release()
	return loss
}

// crossEntropyFused is CrossEntropy on a device with CrossEntropyKernels:
// one op that saves the logits, each row's maximum and log-sum (8 bytes a
// row) and the target, where LogSoftmax and NLLLoss save the
// log-probabilities (as large as the logits, which they make beside them)
// and the target. Loss and gradient have the two ops' bits.
func crossEntropyFused(ck device.CrossEntropyKernels, logits, target *Tensor) *Tensor {
	const op = "cross_entropy"
	tp := tapeOf(op, logits, target)
	dev := sameDevice(op, logits, target)
	floats32(op, logits)
	if target.dtype != device.Int32 {
		panicf(op, "target is %s; class indices are int32 (FromInt32s)", target.dtype)
	}
	if target.Rank() != 1 || target.shape[0] != logits.shape[0] {
		panicf(op, "want logits [rows, classes] and target [rows], got %v and %v", logits.shape, target.shape)
	}
	rows, classes := logits.shape[0], logits.shape[1]
	if device.HasData(dev) {
		for _, c := range target.Int32s() {
			if c != IgnoreIndex && (c < 0 || c >= int32(classes)) {
				panicf(op, "target class %d out of range for %d classes (only %d, the ignore index, may lie outside)", c, classes, IgnoreIndex)
			}
		}
	}
	x, rx := contiguousInput(logits)
	defer rx()
	tg, rt := contiguousInput(target)
	defer rt()
	out := newOutput(tp, dev, nil)
	stats := newOutput(tp, dev, []int{rows, 2})
	if out.st.block != nil && x.st.block == nil { // no rows: the mean of nothing
		check(op, dev.Kernels().Fill(out.view(), float32(math.NaN())))
	} else if out.st.block != nil {
		check(op, ck.CrossEntropy(out.view(), stats.view(), x.view(), tg.view()))
	}
	shape := logits.shape
	record(tp, op, out, []*Tensor{logits, target}, []*Tensor{logits, stats, target}, func(bk *backward) {
		g, rg := contiguousInput(bk.Grad())
		defer rg()
		xs, rxs := contiguousInput(bk.Saved(0))
		defer rxs()
		st, rst := contiguousInput(bk.Saved(1))
		defer rst()
		ts, rts := contiguousInput(bk.Saved(2))
		defer rts()
		dx := newOutput(bk.tape, dev, shape)
		if dx.st.block != nil && xs.st.block != nil {
			check(op+"_backward", ck.CrossEntropyBackward(dx.view(), g.view(), xs.view(), st.view(), ts.view()))
		}
		bk.Accumulate(0, dx)
	})
	stats.Release() // lives on only as a saved tensor
	return out
}

package meta

import "ferry/device"

// The fused families on the meta device: nothing computed, each fused
// kernel priced as one launch over the bytes it moves, so that a profile
// of a device that fuses (CUDA) predicts its launches. The tensor layer
// allocates alike with or without them, so memory is unchanged.

var (
	_ device.FusedGELUKernels         = kernels{}
	_ device.FusedAddLayerNormKernels = kernels{}
	_ device.MultiTensorOptimKernels  = kernels{}
)

// BiasGELUTanh reads z and writes z and dst.
func (k kernels) BiasGELUTanh(dst, z, bias device.View) error {
	k.elementwise(z.Numel(), 1, 2)
	return nil
}

// GELUTanhBackwardSum reads grad and z and writes dst (and the column
// sums, small beside it).
func (k kernels) GELUTanhBackwardSum(dst, sum, grad, z device.View) error {
	k.elementwise(grad.Numel(), 2, 1)
	return nil
}

// AddLayerNorm reads x and r and writes the sum and its norm.
func (k kernels) AddLayerNorm(sum, dst, mean, rstd, x, r, weight, bias device.View, eps float32) error {
	k.elementwise(x.Numel(), 2, 2)
	return nil
}

// AdamWSteps is one launch over every tensor: AdamWStep's bytes, one
// kernel's fixed cost.
func (k kernels) AdamWSteps(ts []device.AdamWTensors, p device.AdamWParams) error {
	var n int
	for _, t := range ts {
		n += t.Param.Numel()
	}
	k.elementwise(n, 4, 3)
	return nil
}

var _ device.CrossEntropyKernels = kernels{}

// CrossEntropy reads the logits once.
func (k kernels) CrossEntropy(loss, stats, logits, target device.View) error {
	k.elementwise(logits.Numel(), 1, 0)
	return nil
}

// CrossEntropyBackward reads the logits and writes their gradient.
func (k kernels) CrossEntropyBackward(dlogits, grad, logits, stats, target device.View) error {
	k.elementwise(logits.Numel(), 1, 1)
	return nil
}

var _ device.HostLoopKernels = kernels{}

// HostLoop computes nothing and charges one kernel moving bytes.
func (k kernels) HostLoop(n, grain int, views []device.View, bytes int64, body func(mem [][]byte, lo, hi int)) error {
	k.cost(0, float64(bytes))
	return nil
}

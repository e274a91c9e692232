package cuda

import (
	"ferry/device"
	"ferry/device/cuda/cu"
)

// The fused cross-entropy (device.CrossEntropyKernels; kernels/reduce.cu).

var _ device.CrossEntropyKernels = (*kernels)(nil)

func (k *kernels) CrossEntropy(loss, stats, logits, target device.View) error {
	cols := int64(logits.Shape[len(logits.Shape)-1])
	rows := int64(0)
	if cols > 0 {
		rows = int64(logits.Numel()) / cols
	}
	p, err := k.ptrs(loss, stats, logits, target)
	if err != nil {
		return err
	}
	if rows > 0 {
		grid := cu.Dim3{X: uint32(min(rows, int64(max(k.d.props.SMs, 1))*32)), Y: 1, Z: 1}
		if err := k.launch("ferry_cross_entropy_stats", grid, block1, newArgs().Ptr(p[1]).Ptr(p[2]).I64(rows).I64(cols)); err != nil {
			return err
		}
	}
	return k.launch("ferry_cross_entropy_loss", cu.Dim3{X: 1, Y: 1, Z: 1}, block1,
		newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).I64(rows).I64(cols))
}

func (k *kernels) CrossEntropyBackward(dlogits, grad, logits, stats, target device.View) error {
	n := int64(dlogits.Numel())
	if n == 0 {
		return nil
	}
	cols := int64(dlogits.Shape[len(dlogits.Shape)-1])
	rows := n / cols
	p, err := k.ptrs(dlogits, grad, logits, stats, target)
	if err != nil {
		return err
	}
	return k.withGradScale(p[1], p[4], rows, func(sp cu.DevicePtr) error {
		return k.launch("ferry_cross_entropy_backward", k.grid1(n), block1,
			newArgs().Ptr(p[0]).Ptr(sp).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).I64(rows).I64(cols))
	})
}

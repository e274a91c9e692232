package meta

import "ferry/device"

// kernels compute nothing; with a profile they advance the compute clock
// by what the kernel would cost: FLOPs at the matmul rate for products
// (the bfloat16 rate for bfloat16 ones), bytes moved at the memory rate
// for the rest.
type kernels struct{ d *Device }

func (k kernels) cost(flops, bytes float64) { k.costAt(false, flops, bytes) }

// costAt is cost with the products at the bfloat16 rate when bf16 is set.
func (k kernels) costAt(bf16 bool, flops, bytes float64) {
	p := k.d.sim.profile
	if p == nil {
		return
	}
	rate := p.MatmulFLOPS
	if bf16 && p.MatmulBF16FLOPS != 0 {
		rate = p.MatmulBF16FLOPS
	}
	k.d.comp.run(p.KernelSeconds + flops/rate + bytes/p.MemoryBytesPerSec)
}

// elementwise accounts a kernel that reads in tensors of n elements and
// writes out.
func (k kernels) elementwise(n int, in, out int) { k.cost(0, float64(n*4*(in+out))) }

// ElementwiseBF16 follows the profile (device.ElementwiseBF16Kernels):
// true without one, so that the meta device allocates as the CPU device.
func (k kernels) ElementwiseBF16() bool {
	p := k.d.sim.profile
	return p == nil || p.ElementwiseBF16
}

// Gemm accounts a product's FLOPs, at the bfloat16 rate when its operands
// are bfloat16, and its operands' bytes, each at its element's size.
func (k kernels) Gemm(p device.GemmParams) error {
	if err := device.CheckGemmTypes("meta", p); err != nil {
		return err
	}
	k.costAt(p.Mixed(), 2*float64(p.M)*float64(p.N)*float64(p.K)*float64(p.Batch),
		float64(p.Batch)*float64(p.M*p.K*p.TypeA.Size()+p.K*p.N*p.TypeB.Size()+p.M*p.N*p.TypeC.Size()))
	return nil
}

var _ device.ConvertKernels = kernels{}

// Convert accounts a copy that reads src's elements and writes dst's, each
// at its element's size.
func (k kernels) Convert(dst, src device.View) error {
	if err := device.CheckConvertTypes("meta", dst.DType, src.DType); err != nil {
		return err
	}
	k.cost(0, float64(dst.Numel()*(src.DType.Size()+dst.DType.Size())))
	return nil
}

func (k kernels) Copy(dst, src device.View) error { k.elementwise(dst.Numel(), 1, 1); return nil }
func (k kernels) CopyStrided(dst, src device.View) error {
	k.elementwise(dst.Numel(), 1, 1)
	return nil
}
func (k kernels) Fill(dst device.View, v float32) error {
	k.elementwise(dst.Numel(), 0, 1)
	return nil
}
func (k kernels) Unary(op device.UnaryOp, dst, src device.View, alpha float32) error {
	k.elementwise(dst.Numel(), 1, 1)
	return nil
}
func (k kernels) Binary(op device.BinaryOp, dst, a, b device.View) error {
	k.elementwise(dst.Numel(), 2, 1)
	return nil
}
func (k kernels) Sum(dst, src device.View, alpha float32) error {
	k.cost(0, float64(4*(src.Numel()+dst.Numel())))
	return nil
}
func (k kernels) Softmax(dst, src device.View, log bool) error {
	k.elementwise(dst.Numel(), 2, 1)
	return nil
}
func (k kernels) SoftmaxBackward(dst, grad, out device.View, log bool) error {
	k.elementwise(dst.Numel(), 2, 1)
	return nil
}
func (k kernels) NLL(dst, logp, target device.View) error {
	k.cost(0, float64(4*2*target.Numel()))
	return nil
}
func (k kernels) NLLBackward(dst, grad, target device.View) error {
	k.elementwise(dst.Numel(), 0, 1)
	return nil
}
func (k kernels) SGDStep(param, grad, momentum device.View, p device.SGDParams) error {
	n := 2
	if p.Momentum != 0 {
		n = 3
	}
	k.elementwise(param.Numel(), n, n-1)
	return nil
}
func (k kernels) AdamWStep(param, grad, expAvg, expAvgSq device.View, p device.AdamWParams) error {
	k.elementwise(param.Numel(), 4, 3)
	return nil
}
func (k kernels) Upload(dst device.View, src []byte) error   { return nil }
func (k kernels) Download(dst []byte, src device.View) error { return nil }

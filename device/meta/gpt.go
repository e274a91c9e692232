package meta

import "ferry/device"

// The transformer kernel families on the meta device: nothing computed,
// costs advanced as for the core kernels, so that the tensor layer takes
// the same (fused) path, and allocates the same memory, as on the CPU.

var (
	_ device.EmbeddingKernels = kernels{}
	_ device.LayerNormKernels = kernels{}
	_ device.AttentionKernels = kernels{}
	_ device.DropoutKernels   = kernels{}
)

func (k kernels) Gather(dst, table, idx device.View) error {
	k.elementwise(dst.Numel(), 1, 1)
	return nil
}

func (k kernels) ScatterAdd(dst, src, idx device.View) error {
	k.elementwise(src.Numel(), 2, 1)
	return nil
}

func (k kernels) LayerNorm(dst, mean, rstd, x, weight, bias device.View, eps float32) error {
	k.elementwise(x.Numel(), 2, 1)
	return nil
}

func (k kernels) LayerNormBackward(dx, dweight, dbias, grad, x, mean, rstd, weight device.View) error {
	k.elementwise(x.Numel(), 4, 1)
	return nil
}

// attentionFLOPs counts the products of one pass: q·kᵀ and weights·v.
func attentionFLOPs(q device.View) float64 {
	B, H, T, D := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	return 2 * 2 * float64(B*H) * float64(T) * float64(T) * float64(D)
}

func (k kernels) Attention(out, lse, q, kk, v device.View, p device.AttentionParams) error {
	k.cost(attentionFLOPs(q), float64(4*4*q.Numel()))
	return nil
}

func (k kernels) AttentionBackward(dq, dk, dv, grad, q, kk, v, out, lse device.View, p device.AttentionParams) error {
	// Recomputing the scores plus four products.
	k.cost(2.5*attentionFLOPs(q), float64(4*8*q.Numel()))
	return nil
}

func (k kernels) Dropout(dst, src device.View, p float32, key device.DropoutKey) error {
	k.elementwise(src.Numel(), 1, 1)
	return nil
}

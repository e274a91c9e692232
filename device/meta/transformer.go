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

// attentionTile is the query and key tile of ferry's CUDA attention
// kernels: with AttentionCausalSkip, a causal pass computes the tiles on
// and below the diagonal only.
const attentionTile = 32

// attentionFLOPs counts the products of one forward pass, q·kᵀ and
// weights·v, over the scores the kernels compute: every one, or, when they
// skip the tiles above a causal diagonal, nt(nt+1)/2 of the nt² tiles.
func (k kernels) attentionFLOPs(q device.View, causal bool) float64 {
	B, H, T, D := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	f := 2 * 2 * float64(B*H) * float64(T) * float64(T) * float64(D)
	if p := k.d.sim.profile; causal && p != nil && p.AttentionCausalSkip {
		nt := float64((T + attentionTile - 1) / attentionTile)
		f *= (nt + 1) / (2 * nt)
	}
	return f
}

// attentionCost advances the clock by one attention kernel's time: its
// products at the attention rate, its bytes at the memory rate.
func (k kernels) attentionCost(flops, bytes float64) {
	p := k.d.sim.profile
	if p == nil {
		return
	}
	rate := p.AttentionFLOPS
	if rate == 0 {
		rate = p.MatmulFLOPS
	}
	k.d.comp.run(p.KernelSeconds + flops/rate + bytes/p.MemoryBytesPerSec)
}

func (k kernels) Attention(out, lse, q, kk, v device.View, p device.AttentionParams) error {
	// q, k and v read, the output written.
	k.attentionCost(k.attentionFLOPs(q, p.Causal), float64(4*4*q.Numel()))
	return nil
}

func (k kernels) AttentionBackward(dq, dk, dv, grad, q, kk, v, out, lse device.View, p device.AttentionParams) error {
	// Recomputing the scores plus four products; q, k, v, out, grad read
	// and dq, dk, dv written.
	k.attentionCost(2.5*k.attentionFLOPs(q, p.Causal), float64(4*8*q.Numel()))
	return nil
}

func (k kernels) Dropout(dst, src device.View, p float32, key device.DropoutKey) error {
	k.elementwise(src.Numel(), 1, 1)
	return nil
}

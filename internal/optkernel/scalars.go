package optkernel

// AdamWScalars is AdamW with one step's scalars already derived, as a GPU
// kernel takes them (ferry_adamw_step and ferry_adamw_multi,
// device/cuda/kernels): decay = 1 - lr·weight_decay, stepSize =
// lr/(1-β1^t), bc2Sqrt = √(1-β2^t), each rounded to float32 as the CUDA
// device derives them (which is as AdamW derives them, so the bits are
// AdamW's). The fake CUDA driver runs those launches through it.
func AdamWScalars(w, g, m, v []float32, decay, beta1, beta2, eps, stepSize, bc2Sqrt float32) {
	c := adamConsts{decay: decay, beta1: beta1, omb1: 1 - beta1, beta2: beta2, omb2: 1 - beta2,
		bc2Sqrt: bc2Sqrt, eps: eps, negStep: -stepSize}
	n := len(g)
	w, m, v = w[:n], m[:n], v[:n]
	hostParallel(n, func(lo, hi int) { adamwRange(w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], &c) })
}

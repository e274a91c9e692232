package cpu

import (
	"ferry/device"
	"ferry/internal/optkernel"
)

// Optimizer steps, elementwise, following PyTorch 1.13's single-tensor
// update rules operation by operation (float32 throughout), so parameters
// agree with PyTorch's to rounding. The momentum/decay SGD and AdamW
// loops are package optkernel's, which the host optimizer runs too.

func (k *kernels) SGDStep(param, grad, momentum device.View, p device.SGDParams) error {
	n := param.Numel()
	w, g := floats(param)[:n], floats(grad)[:n]
	var buf []float32
	if p.Momentum != 0 {
		buf = floats(momentum)[:n]
	}
	if p.Momentum == 0 && p.WeightDecay == 0 { // plain SGD: w += -lr·g
		parallelFor(n, elementGrain, func(lo, hi int) { vecAxpy(w[lo:hi], g[lo:hi], -p.LR) })
		return nil
	}
	parallelFor(n, elementGrain, func(lo, hi int) {
		var b []float32
		if buf != nil {
			b = buf[lo:hi]
		}
		optkernel.SGDSerial(w[lo:hi], g[lo:hi], b, p)
	})
	return nil
}

// AdamWStep runs package optkernel's loops (vector ones where the CPU has
// them) on the pool's chunks: the host optimizer's bits (Note [host bits]).
func (k *kernels) AdamWStep(param, grad, expAvg, expAvgSq device.View, p device.AdamWParams) error {
	n := param.Numel()
	w, g, m, v := floats(param)[:n], floats(grad)[:n], floats(expAvg)[:n], floats(expAvgSq)[:n]
	parallelFor(n, elementGrain, func(lo, hi int) {
		optkernel.AdamWSerial(w[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], p)
	})
	return nil
}

var _ device.HostLoopKernels = (*kernels)(nil)

// loopGrain is the fewest elements of a HostLoop a core is given.
const loopGrain = elementGrain / 8

// HostLoop runs body on the pool's chunks, each a whole number of grain
// elements (the last excepted): the CPU's memory is the host's, so an
// optimizer's Go loop updates it in place.
func (k *kernels) HostLoop(n, grain int, views []device.View, bytes int64, body func(mem [][]byte, lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	grain = max(grain, 1)
	mem := make([][]byte, len(views))
	for i, v := range views {
		if v.Block != nil {
			mem[i] = Bytes(v.Block)[v.Off*v.DType.Size():]
		}
	}
	// An update costs several elementwise ops an element: pieces of
	// loopGrain elements, an eighth of elementGrain, so that a parameter
	// of 64 Ki elements spreads over the cores.
	units := (n + grain - 1) / grain
	parallelFor(units, max(1, loopGrain/grain), func(lo, hi int) {
		body(mem, lo*grain, min(hi*grain, n))
	})
	return nil
}

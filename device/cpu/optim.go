package cpu

import (
	"math"

	"ferry/device"
)

// Optimizer steps, elementwise, following PyTorch 1.13's single-tensor
// update rules operation by operation (float32 throughout), so parameters
// agree with PyTorch's to rounding.

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
		for i := lo; i < hi; i++ {
			d := g[i]
			if p.WeightDecay != 0 {
				d += p.WeightDecay * w[i]
			}
			if p.Momentum != 0 {
				if p.First {
					buf[i] = d
				} else {
					buf[i] = buf[i]*p.Momentum + (1-p.Dampening)*d
				}
				if p.Nesterov {
					d += p.Momentum * buf[i]
				} else {
					d = buf[i]
				}
			}
			w[i] += -p.LR * d
		}
	})
	return nil
}

func (k *kernels) AdamWStep(param, grad, expAvg, expAvgSq device.View, p device.AdamWParams) error {
	n := param.Numel()
	w, g, m, v := floats(param)[:n], floats(grad)[:n], floats(expAvg)[:n], floats(expAvgSq)[:n]
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	stepSize := float32(float64(p.LR) / bc1)
	bc2Sqrt := float32(math.Sqrt(bc2))
	decay := 1 - p.LR*p.WeightDecay
	parallelFor(n, elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			w[i] *= decay
			m[i] = m[i]*p.Beta1 + g[i]*(1-p.Beta1)
			v[i] = v[i]*p.Beta2 + (1-p.Beta2)*g[i]*g[i]
			denom := float32(math.Sqrt(float64(v[i])))/bc2Sqrt + p.Eps
			w[i] += -stepSize * m[i] / denom
		}
	})
	return nil
}

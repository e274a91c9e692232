package cpu

import (
	"math"

	"ferry/device"
)

// The fused cross-entropy (device.CrossEntropyKernels): Softmax(log)'s
// row statistics and NLL's sum, and their backward, written as those
// kernels compute them, so that the fused loss and gradient have their
// bits.

var _ device.CrossEntropyKernels = (*kernels)(nil)

func (k *kernels) CrossEntropy(loss, stats, logits, target device.View) error {
	cols := logits.Shape[len(logits.Shape)-1]
	rows := logits.Numel() / cols
	x, st, t := floats(logits), floats(stats), int32s(target)
	parallelFor(rows, max(1, elementGrain/(2*cols)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			m, ls := logSoftmaxStats(x[r*cols : (r+1)*cols])
			st[2*r], st[2*r+1] = m, ls
		}
	})
	var sum float64
	count := 0
	for r := 0; r < rows; r++ {
		c := t[r]
		if c < 0 {
			continue
		}
		sum -= float64(x[r*cols+int(c)] - st[2*r] - st[2*r+1]) // NLL of log-softmax's value
		count++
	}
	floats(loss)[0] = float32(sum / float64(count)) // 0/0 is NaN, as NLL gives
	return nil
}

// logSoftmaxStats is Softmax's row maximum and the log of the row's sum
// of exp(x - maximum), as Softmax(log) computes them.
func logSoftmaxStats(x []float32) (m, ls float32) {
	m = float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v - m))
	}
	return m, float32(math.Log(sum))
}

func (k *kernels) CrossEntropyBackward(dlogits, grad, logits, stats, target device.View) error {
	cols := logits.Shape[len(logits.Shape)-1]
	rows := logits.Numel() / cols
	d, x, st, t := floats(dlogits), floats(logits), floats(stats), int32s(target)
	count := 0
	for r := 0; r < rows; r++ {
		if t[r] >= 0 {
			count++
		}
	}
	g := -floats(grad)[0] / float32(count) // NLLBackward's one value
	parallelFor(rows, max(1, elementGrain/(2*cols)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dr := x[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			m, ls := st[2*r], st[2*r+1]
			c := int(t[r])
			// SoftmaxBackward(log) of NLLBackward's row: Σg is the one
			// value at the target, or 0 on an ignored row.
			var dot float64
			if c >= 0 {
				dot += float64(g) // a sum from 0, as SoftmaxBackward's: -0 becomes 0
			}
			for i, v := range xr {
				var gi float32
				if i == c {
					gi = g
				}
				dr[i] = gi - float32(math.Exp(float64(v-m-ls))*dot)
			}
		}
	})
	return nil
}

package cpu

import "ferry/device"

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
			// exp(y) of the log-probabilities y = x - m - ls, through the
			// vectorised exp as SoftmaxBackward takes it (of y - 0).
			var ys, e [expChunk]float32
			var acc [8]float64 // unused
			for i0 := 0; i0 < len(xr); i0 += expChunk {
				n := min(expChunk, len(xr)-i0)
				for i, v := range xr[i0 : i0+n] {
					ys[i] = v - m - ls
				}
				vecExpSub(e[:n], ys[:n], 0, &acc)
				for i := range n {
					var gi float32
					if i0+i == c {
						gi = g
					}
					dr[i0+i] = gi - float32(float64(e[i])*dot)
				}
			}
		}
	})
	return nil
}

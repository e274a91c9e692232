package fake

import "math"

// The Go versions of the fused cross-entropy kernels of
// device/cuda/kernels/reduce.cu.

func init() {
	for name, f := range map[string]kernelFunc{
		"ferry_cross_entropy_stats":    crossEntropyStats,
		"ferry_cross_entropy_loss":     crossEntropyLoss,
		"ferry_cross_entropy_backward": crossEntropyBackward,
	} {
		kernelsByName[name] = f
	}
}

func crossEntropyStats(k *launch) {
	stats, src, rows, cols := mem[float32](k, 0), mem[float32](k, 1), k.i64(2), k.i64(3)
	rowsOf(k, rows, func(row int64) {
		m, sum := rowMaxSum(src[row*cols:], cols)
		stats[2*row], stats[2*row+1] = m, float32(math.Log(sum))
	})
}

func crossEntropyLoss(k *launch) {
	oneBlock(k)
	dst, stats, x, target, rows, cols := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[int32](k, 3), k.i64(4), k.i64(5)
	dst[0] = nllMean(target, rows, func(r, t int64) float32 { return x[r*cols+t] - stats[2*r] - stats[2*r+1] })
}

func crossEntropyBackward(k *launch) {
	dst, scale, x, stats, target := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), mem[int32](k, 4)
	rows, cols := k.i64(5), k.i64(6)
	gridStride(k, rows*cols, func(i int64) {
		r, c := i/cols, i%cols
		t := int64(target[r])
		var g float32
		var dot float64
		if t >= 0 {
			if c == t {
				g = scale[0]
			}
			dot += float64(scale[0])
		}
		y := x[i] - stats[2*r] - stats[2*r+1]
		dst[i] = g - float32(math.Exp(float64(y))*dot)
	})
}

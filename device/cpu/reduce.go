package cpu

import (
	"math"

	"ferry/device"
)

// Sum reduces src over the axes where dst has size 1. Sums accumulate in
// float64, and no sum is split across goroutines except a whole-tensor sum,
// which adds fixed-size partial sums in a fixed order: results do not depend
// on the number of threads.
func (k *kernels) Sum(dst, src device.View, alpha float32) error {
	d, s := floats(dst), floats(src)
	rank := len(src.Shape)
	reduced := func(i int) bool { return dst.Shape[i] == 1 && src.Shape[i] != 1 }
	// Find the reduced axes, ignoring size-1 axes; fast path when they form
	// one run and src is contiguous.
	first, last, runs := -1, -1, 0
	for i := 0; i < rank; i++ {
		if src.Shape[i] == 1 {
			continue
		}
		if reduced(i) {
			if last == -1 || !reducedBetween(src.Shape, dst.Shape, last, i) {
				runs++
			}
			if first == -1 {
				first = i
			}
			last = i
		}
	}
	if runs == 0 { // nothing to reduce: a scaled copy
		return k.Unary(device.Scale, dst, src, alpha)
	}
	if runs > 1 || !src.IsContiguous() {
		sumGeneral(d, s, dst, src, alpha)
		return nil
	}
	outer, red, inner := 1, 1, 1
	for i := 0; i < rank; i++ {
		switch {
		case i < first:
			outer *= src.Shape[i]
		case i <= last:
			red *= src.Shape[i]
		default:
			inner *= src.Shape[i]
		}
	}
	s = s[:outer*red*inner]
	a := float64(alpha)
	switch {
	case inner == 1 && outer == 1:
		d[0] = float32(a * sumBlocked(s))
	case inner == 1:
		parallelFor(outer, max(1, elementGrain/red), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				d[o] = float32(a * sum64(s[o*red:(o+1)*red]))
			}
		})
	default:
		const chunk = 256
		chunks := (inner + chunk - 1) / chunk
		parallelFor(outer*chunks, max(1, elementGrain/(red*chunk)), func(lo, hi int) {
			var acc [chunk]float64
			for w := lo; w < hi; w++ {
				o, c := w/chunks, w%chunks
				j0 := c * chunk
				n := min(chunk, inner-j0)
				acc := acc[:n]
				clear(acc)
				base := o*red*inner + j0
				for r := 0; r < red; r++ {
					row := s[base+r*inner : base+r*inner+n]
					for j, v := range row {
						acc[j] += float64(v)
					}
				}
				out := d[o*inner+j0 : o*inner+j0+n]
				for j := range out {
					out[j] = float32(a * acc[j])
				}
			}
		})
	}
	return nil
}

// reducedBetween reports whether every axis strictly between i and j is
// reduced or of size 1 (so i and j belong to one run).
func reducedBetween(src, dst []int, i, j int) bool {
	for k := i + 1; k < j; k++ {
		if src[k] != 1 && dst[k] != 1 {
			return false
		}
	}
	return true
}

func sum64(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// sumBlocked sums x in fixed blocks, in parallel, adding the block sums in
// order.
func sumBlocked(x []float32) float64 {
	const block = 1 << 14
	nb := (len(x) + block - 1) / block
	if nb <= 1 {
		return sum64(x)
	}
	parts := make([]float64, nb)
	parallelFor(nb, 2, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			parts[b] = sum64(x[b*block : min((b+1)*block, len(x))])
		}
	})
	var t float64
	for _, p := range parts {
		t += p
	}
	return t
}

// sumGeneral handles any layout: it walks src in index order and adds each
// element into the output element it reduces to.
func sumGeneral(d, s []float32, dst, src device.View, alpha float32) {
	n := dst.Numel()
	acc := make([]float64, n)
	dstStrides := device.Contiguous(dst.Shape)
	accStrides := make([]int, len(src.Shape))
	for i := range accStrides {
		if dst.Shape[i] != 1 {
			accStrides[i] = dstStrides[i]
		}
	}
	l := collapse(src.Shape, src.Strides, accStrides)
	last := len(l.shape) - 1
	l.rows(0, src.Numel(), func(offs []int, m int) {
		ss, as := l.strides[0][last], l.strides[1][last]
		for i := 0; i < m; i++ {
			acc[offs[1]+i*as] += float64(s[offs[0]+i*ss])
		}
	})
	for i := range acc {
		d[i] = float32(float64(alpha) * acc[i])
	}
}

// Softmax over the last axis, one row per task.
func (k *kernels) Softmax(dst, src device.View, log bool) error {
	cols := src.Shape[len(src.Shape)-1]
	rows := src.Numel() / cols
	d, s := floats(dst), floats(src)
	parallelFor(rows, max(1, elementGrain/(4*cols)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x, y := s[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			m := float32(math.Inf(-1))
			for _, v := range x {
				if v > m {
					m = v
				}
			}
			var sum float64
			for _, v := range x {
				sum += math.Exp(float64(v - m))
			}
			if log {
				ls := float32(math.Log(sum))
				for i, v := range x {
					y[i] = v - m - ls
				}
			} else {
				inv := 1 / sum
				for i, v := range x {
					y[i] = float32(math.Exp(float64(v-m)) * inv)
				}
			}
		}
	})
	return nil
}

func (k *kernels) SoftmaxBackward(dst, grad, out device.View, log bool) error {
	cols := out.Shape[len(out.Shape)-1]
	rows := out.Numel() / cols
	d, g, y := floats(dst), floats(grad), floats(out)
	parallelFor(rows, max(1, elementGrain/(4*cols)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			gr, yr, dr := g[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			var dot float64
			if log { // dx = g - exp(y)·Σg
				for _, v := range gr {
					dot += float64(v)
				}
				for i := range dr {
					dr[i] = gr[i] - float32(math.Exp(float64(yr[i]))*dot)
				}
			} else { // dx = y·(g - Σ g·y)
				for i := range gr {
					dot += float64(gr[i]) * float64(yr[i])
				}
				for i := range dr {
					dr[i] = yr[i] * (gr[i] - float32(dot))
				}
			}
		}
	})
	return nil
}

func (k *kernels) NLL(dst, logp, target device.View) error {
	cols := logp.Shape[len(logp.Shape)-1]
	rows := logp.Numel() / cols
	lp, t := floats(logp), int32s(target)
	var sum float64
	count := 0
	for r := 0; r < rows; r++ {
		c := t[r]
		if c < 0 {
			continue
		}
		sum -= float64(lp[r*cols+int(c)])
		count++
	}
	floats(dst)[0] = float32(sum / float64(count)) // 0/0 is NaN, as PyTorch gives
	return nil
}

func (k *kernels) NLLBackward(dst, grad, target device.View) error {
	cols := dst.Shape[len(dst.Shape)-1]
	rows := dst.Numel() / cols
	d, t := floats(dst)[:rows*cols], int32s(target)
	clear(d)
	count := 0
	for r := 0; r < rows; r++ {
		if t[r] >= 0 {
			count++
		}
	}
	g := -floats(grad)[0] / float32(count)
	for r := 0; r < rows; r++ {
		if c := t[r]; c >= 0 {
			d[r*cols+int(c)] = g
		}
	}
	return nil
}

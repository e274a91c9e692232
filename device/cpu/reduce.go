package cpu

import (
	"math"
	"sync"

	"ferry/device"
)

// Sum reduces src over the axes where dst has size 1. Sums accumulate in
// float64, and no sum is split across goroutines except a whole-tensor sum,
// which adds fixed-size partial sums in a fixed order: results do not depend
// on the number of threads.
func (k *kernels) Sum(dst, src device.View, alpha float32) error {
	if hasBF16(dst, src) {
		return k.sumBF16(dst, src, alpha)
	}
	p := planSum(dst, src)
	if p.runs == 0 { // nothing to reduce: a scaled copy
		return k.Unary(device.Scale, dst, src, alpha)
	}
	sumFloat32(floats(dst), floats(src), dst, src, alpha, p)
	return nil
}

// sumPlan is the shape of a reduction: the number of runs of reduced
// axes (size-1 axes ignored) and, for one run, the product of the axes
// before it, in it and after it.
type sumPlan struct {
	runs, outer, red, inner int
}

func planSum(dst, src device.View) sumPlan {
	rank := len(src.Shape)
	reduced := func(i int) bool { return dst.Shape[i] == 1 && src.Shape[i] != 1 }
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
	p := sumPlan{runs: runs, outer: 1, red: 1, inner: 1}
	for i := 0; i < rank; i++ {
		switch {
		case i < first:
			p.outer *= src.Shape[i]
		case i <= last:
			p.red *= src.Shape[i]
		default:
			p.inner *= src.Shape[i]
		}
	}
	return p
}

// sumFloat32 is Sum on float32 elements d and s (from the views'
// offsets) laid out as dst and src say (their Blocks are not read), with
// something to reduce (p.runs > 0). A single run over a contiguous src
// has loops of its own; any other layout goes through sumGeneral.
func sumFloat32(d, s []float32, dst, src device.View, alpha float32, p sumPlan) {
	if p.runs > 1 || !src.IsContiguous() {
		sumGeneral(d, s, dst, src, alpha)
		return
	}
	outer, red, inner := p.outer, p.red, p.inner
	s = s[:outer*red*inner]
	a := float64(alpha)
	switch {
	case inner == 1 && outer == 1:
		d[0] = float32(a * sumBlocked(s))
	case outer == 1: // column sums of a red × inner matrix (a bias gradient)
		colSums(d[:inner], red, inner, a, func(r, c0 int, acc []float64) {
			o := r*inner + c0
			vecAcc64(acc, s[o:o+len(acc)])
		})
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
					vecAcc64(acc, s[base+r*inner:base+r*inner+n])
				}
				out := d[o*inner+j0 : o*inner+j0+n]
				for j := range out {
					out[j] = float32(a * acc[j])
				}
			}
		})
	}
}

// Note [column sums]. The sums over the rows of a rows × cols matrix (a
// bias gradient) are computed in blocks of rows that depend only on the
// matrix's shape: each block adds its rows, in order, into float64
// partial sums, the blocks in parallel, and the partial sums are then
// added in block order. Every pass over memory is then a pass along rows
// (contiguous), which matters: walking bands of 256 columns down the rows,
// each row a page apart, ran several times slower, and slower still on two
// cores than on one. Very wide matrices go in bands of sumBand columns
// (one after another), so that the partial sums stay small (at most
// maxSumBlocks × sumBand float64). Sum and the fused ReLUBackwardSum share
// this blocking, so they give the same bits.

const (
	sumBand      = 8192 // columns per pass
	maxSumBlocks = 16   // blocks of rows per pass, at most
)

// colSums writes into sum (cols long) alpha times the column sums of a
// rows × cols matrix; addRow(r, c0, acc) adds columns c0 to c0+len(acc)
// of row r into acc, and may do more with them (write them, say). addRow
// runs concurrently for rows of different blocks.
func colSums(sum []float32, rows, cols int, alpha float64, addRow func(r, c0 int, acc []float64)) {
	band := min(cols, sumBand)
	per := max(1, (elementGrain+band-1)/band) // rows per block
	if (rows+per-1)/per > maxSumBlocks {
		per = (rows + maxSumBlocks - 1) / maxSumBlocks
	}
	blocks := (rows + per - 1) / per
	bufp := partials.Get().(*[]float64)
	if cap(*bufp) < blocks*band {
		*bufp = make([]float64, blocks*band)
	}
	for c0 := 0; c0 < cols; c0 += band {
		w := min(band, cols-c0)
		part := (*bufp)[:blocks*w]
		parallelFor(blocks, 1, func(lo, hi int) {
			for b := lo; b < hi; b++ {
				acc := part[b*w : (b+1)*w]
				clear(acc)
				for r := b * per; r < min((b+1)*per, rows); r++ {
					addRow(r, c0, acc)
				}
			}
		})
		total := part[:w]
		for b := 1; b < blocks; b++ {
			vecAddF64(total, part[b*w:(b+1)*w])
		}
		for j, v := range total {
			sum[c0+j] = float32(alpha * v)
		}
	}
	partials.Put(bufp)
}

// partials recycles colSums' scratch, so that steady training makes no
// garbage.
var partials = sync.Pool{New: func() any { return new([]float64) }}

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
			if log {
				m, ls := logSoftmaxStats(x) // before y is written: y may be x
				for i, v := range x {
					y[i] = v - m - ls
				}
				continue
			}
			var acc [8]float64
			vecExpSub(y, x, rowMax(x), &acc)
			vecScale(y, y, float32(1/sum8(&acc)))
		}
	})
	return nil
}

// rowMax is the maximum of x (-Inf for none; a NaN is passed over, as
// `>` passes over it).
func rowMax(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	return m
}

// logSoftmaxStats is log-softmax's row maximum m and log Σ exp(x - m),
// the exponentials summed by the vectorised exp in its lanes' order:
// Softmax(log) and the fused cross-entropy share it, and so their bits.
func logSoftmaxStats(x []float32) (m, ls float32) {
	m = rowMax(x)
	var acc [8]float64
	var buf [expChunk]float32
	for i := 0; i < len(x); i += expChunk {
		xs := x[i:min(i+expChunk, len(x))]
		vecExpSub(buf[:len(xs)], xs, m, &acc)
	}
	return m, float32(math.Log(sum8(&acc)))
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
				var buf [expChunk]float32
				var acc [8]float64 // unused
				for i0 := 0; i0 < len(dr); i0 += expChunk {
					n := min(expChunk, len(dr)-i0)
					vecExpSub(buf[:n], yr[i0:i0+n], 0, &acc)
					for i, e := range buf[:n] {
						dr[i0+i] = gr[i0+i] - float32(float64(e)*dot)
					}
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

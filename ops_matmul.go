package ferry

import (
	"ferry/device"
)

// Matrix products. Transposed operands are views (x.T()), which the GEMM
// reads through its transpose flags without a copy.

// MatMul returns the matrix product of a [..., M, K] and b [..., K, N]:
// [..., M, N], with the leading (batch) axes broadcast. Either operand may
// be a transposed view.
func MatMul(a, b *Tensor) *Tensor {
	tp := tapeOf("matmul", a, b)
	dev := sameDevice("matmul", a, b)
	floats32("matmul", a, b)
	if a.Rank() < 2 || b.Rank() < 2 {
		panicf("matmul", "operands need two axes or more, got %v and %v", a.shape, b.shape)
	}
	m, k := a.shape[a.Rank()-2], a.shape[a.Rank()-1]
	k2, n := b.shape[b.Rank()-2], b.shape[b.Rank()-1]
	if k != k2 {
		panicf("matmul", "inner dimensions differ: %v @ %v", a.shape, b.shape)
	}
	batch := broadcastShapes("matmul", a.shape[:a.Rank()-2], b.shape[:b.Rank()-2])
	out := newOutput(tp, dev, append(cloneShape(batch), m, n))
	matmulInto("matmul", out, a, b, 0)
	record(tp, "matmul", out, []*Tensor{a, b}, []*Tensor{a, b}, func(bk *backward) {
		g, x, y := bk.Grad(), bk.Saved(0), bk.Saved(1)
		if bk.Needs(0) { // dA = g·Bᵀ
			yt := y.T()
			bk.Accumulate(0, MatMul(g, yt))
			yt.Release()
		}
		if bk.Needs(1) { // dB = Aᵀ·g
			if y.Rank() == 2 && x.Rank() > 2 && x.IsContiguous() && g.IsContiguous() && k > 0 && n > 0 {
				// B was shared by the whole batch: one product over the
				// flattened batch instead of a batch of products and a sum.
				x2, g2 := x.Reshape(-1, k), g.Reshape(-1, n)
				x2t := x2.T()
				bk.Accumulate(1, MatMul(x2t, g2))
				x2t.Release()
				x2.Release()
				g2.Release()
			} else {
				xt := x.T()
				bk.Accumulate(1, MatMul(xt, g))
				xt.Release()
			}
		}
	})
	return out
}

// matmulInto computes out = a·b + beta·out, out contiguous with the
// broadcast batch shape.
func matmulInto(op string, out, a, b *Tensor, beta float32) {
	if out.st.block == nil {
		return
	}
	a, releaseA := asMatrix(a)
	defer releaseA()
	b, releaseB := asMatrix(b)
	defer releaseB()
	ra, rb := a.Rank(), b.Rank()
	m, k, n := a.shape[ra-2], a.shape[ra-1], b.shape[rb-1]
	p := device.GemmParams{
		M: m, N: n, K: k, Alpha: 1, Beta: beta,
		A: a.st.block, B: b.st.block, C: out.st.block,
		LDC: n, Batch: 1,
	}
	p.TransA, p.LDA = matrixLayout(a)
	p.TransB, p.LDB = matrixLayout(b)
	if k == 0 { // an empty sum: C = beta·C
		if beta == 0 {
			check(op, kernels(out).Fill(out.view(), 0))
		} else if beta != 1 {
			check(op, kernels(out).Unary(device.Scale, out.view(), out.view(), beta))
		}
		return
	}
	batch := out.shape[:out.Rank()-2]
	sa := batchStrides(a, batch)
	sb := batchStrides(b, batch)
	sc := device.Contiguous(batch)
	for i := range sc {
		sc[i] *= m * n
	}
	nb := device.Numel(batch)
	if strideA, okA := uniformStride(sa, batch); okA {
		if strideB, okB := uniformStride(sb, batch); okB {
			p.Batch, p.StrideA, p.StrideB, p.StrideC = nb, strideA, strideB, m*n
			p.OffA, p.OffB, p.OffC = a.offset, b.offset, out.offset
			check(op, kernels(out).Gemm(p))
			return
		}
	}
	// Batch axes that do not flatten to one stride: one product each.
	idx := make([]int, len(batch))
	for i := 0; i < nb; i++ {
		p.OffA, p.OffB, p.OffC = a.offset, b.offset, out.offset
		for d, v := range idx {
			p.OffA += v * sa[d]
			p.OffB += v * sb[d]
			p.OffC += v * sc[d]
		}
		check(op, kernels(out).Gemm(p))
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// matrixLayout reads the last two axes of t as a row-major GEMM operand:
// not transposed with leading dimension ld (rows ld elements apart), or
// transposed (columns ld apart). asMatrix guarantees one fits.
func matrixLayout(t *Tensor) (trans bool, ld int) {
	r := t.Rank()
	rows, cols := t.shape[r-2], t.shape[r-1]
	s0, s1 := t.strides[r-2], t.strides[r-1]
	switch {
	case (s1 == 1 || cols == 1) && (rows == 1 || s0 >= max(cols, 1)):
		return false, max(s0, cols, 1)
	case (s0 == 1 || rows == 1) && (cols == 1 || s1 >= max(rows, 1)):
		return true, max(s1, rows, 1)
	}
	return false, 0
}

// asMatrix returns t, or a contiguous copy when its last two axes are not
// a GEMM operand, with the function that releases the copy.
func asMatrix(t *Tensor) (*Tensor, func()) {
	if _, ld := matrixLayout(t); ld > 0 {
		return t, func() {}
	}
	c := t.contiguousCopy(nil)
	return c, c.Release
}

// batchStrides gives t's strides over the broadcast batch axes (0 where t
// is broadcast).
func batchStrides(t *Tensor, batch []int) []int {
	s := make([]int, len(batch))
	lead := len(batch) - (t.Rank() - 2)
	for i := range batch {
		j := i - lead
		if j >= 0 && t.shape[j] != 1 {
			s[i] = t.strides[j]
		}
	}
	return s
}

// uniformStride reports whether batch axes with strides s flatten to one
// axis, and its stride.
func uniformStride(s, batch []int) (int, bool) {
	stride, set := 0, false
	for i := len(batch) - 1; i >= 0; i-- {
		if batch[i] == 1 {
			continue
		}
		if !set {
			stride, set = s[i], true
			continue
		}
		// Axis i must step over all of the axes inside it.
		inner := 1
		for j := i + 1; j < len(batch); j++ {
			inner *= batch[j]
		}
		if s[i] != stride*inner {
			return 0, false
		}
	}
	return stride, true
}

// Linear returns x·weightᵀ + bias for x [..., in], weight [out, in] and
// bias [out] (or nil): PyTorch's nn.functional.linear. The bias is written
// into the output first and the product added to it, as addmm does, so no
// temporary is made. It saves x and weight for backward.
func Linear(x, weight, bias *Tensor) *Tensor {
	tp := tapeOf("linear", x, weight, bias)
	dev := sameDevice("linear", x, weight, bias)
	floats32("linear", x, weight, bias)
	if weight.Rank() != 2 || x.Rank() < 1 || x.shape[x.Rank()-1] != weight.shape[1] {
		panicf("linear", "input %v does not fit weight %v (want [..., %d])", x.shape, weight.shape, weight.shape[min(1, weight.Rank()-1)])
	}
	in, outF := weight.shape[1], weight.shape[0]
	if bias != nil && (bias.Rank() != 1 || bias.shape[0] != outF) {
		panicf("linear", "bias %v does not fit weight %v (want [%d])", bias.shape, weight.shape, outF)
	}
	outShape := append(cloneShape(x.shape[:x.Rank()-1]), outF)
	rows := x.Numel() / max(in, 1)
	out := newOutput(tp, dev, outShape)
	if out.st.block != nil {
		x2 := x.flatView(rows, in)
		o2 := out.flatView(rows, outF)
		w := weight.handle(nil) // wᵀ as an unrecorded view
		w.shape = []int{in, outF}
		w.strides = []int{weight.strides[1], weight.strides[0]}
		beta := float32(0)
		if bias != nil {
			check("linear", dev.Kernels().Copy(o2.view(), bias.broadcastView(o2.shape)))
			beta = 1
		}
		matmulInto("linear", o2, x2, w, beta)
		w.Release()
		x2.Release()
		o2.Release()
	}
	record(tp, "linear", out, []*Tensor{x, weight, bias}, []*Tensor{x, weight}, func(bk *backward) {
		g := bk.Grad()
		g2 := g.flatView(rows, outF)
		defer g2.Release()
		if bk.Needs(0) { // dx = g·W
			dx := newOutput(bk.tape, dev, []int{rows, in})
			matmulInto("linear_backward", dx, g2, bk.Saved(1), 0)
			dx.shape, dx.strides = cloneShape(bk.Saved(0).shape), device.Contiguous(bk.Saved(0).shape)
			bk.Accumulate(0, dx)
		}
		if bk.Needs(1) { // dW = gᵀ·x
			x2 := bk.Saved(0).flatView(rows, in)
			gt := g2.T()
			dw := newOutput(bk.tape, dev, []int{outF, in})
			matmulInto("linear_backward", dw, gt, x2, 0)
			gt.Release()
			x2.Release()
			bk.Accumulate(1, dw)
		}
		if bk.Needs(2) { // db = Σ_rows g
			bk.Accumulate(2, sumTo(g2, []int{outF}))
		}
	})
	return out
}

// flatView returns an unrecorded handle of t as a rows×cols matrix: a view
// when t's layout allows, a contiguous copy otherwise. The caller releases
// it.
func (t *Tensor) flatView(rows, cols int) *Tensor {
	if t.Rank() == 2 {
		return t.handle(nil)
	}
	var h *Tensor
	if t.IsContiguous() {
		h = t.handle(nil)
	} else {
		h = t.contiguousCopy(nil)
	}
	h.shape, h.strides = []int{rows, cols}, []int{cols, 1}
	return h
}

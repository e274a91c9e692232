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
	tp := tapeOfAutocast("matmul", []*Tensor{a, b})
	dev := sameDevice("matmul", a, b)
	floatType("matmul", a, b)
	if a.Rank() < 2 || b.Rank() < 2 {
		panicf("matmul", "operands need two axes or more, got %v and %v", a.shape, b.shape)
	}
	if tp.lowPrecision() && !allBF16(a, b) {
		return tp.inBF16(func(bs []*Tensor) *Tensor { return MatMul(bs[0], bs[1]) }, a, b)
	}
	if isBF16(a, b) && !allBF16(a, b) { // mixed operands: float32
		return inFloat32(false, func(w []*Tensor) *Tensor { return MatMul(w[0], w[1]) }, a, b)
	}
	m, k := a.shape[a.Rank()-2], a.shape[a.Rank()-1]
	k2, n := b.shape[b.Rank()-2], b.shape[b.Rank()-1]
	if k != k2 {
		panicf("matmul", "inner dimensions differ: %v @ %v", a.shape, b.shape)
	}
	batch := broadcastShapes("matmul", a.shape[:a.Rank()-2], b.shape[:b.Rank()-2])
	out := newOutputOf(tp, dev, a.dtype, append(cloneShape(batch), m, n))
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
		TypeA: a.dtype, TypeB: b.dtype, TypeC: out.dtype,
	}
	p.TransA, p.LDA = matrixLayout(a)
	p.TransB, p.LDB = matrixLayout(b)
	if k == 0 { // an empty sum: C = beta·C
		scaleView(op, out.st.dev, out.view(), beta)
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
	return layoutOf(t.shape[r-2], t.shape[r-1], t.strides[r-2], t.strides[r-1])
}

// layoutOf is matrixLayout for rows × cols elements with strides s0, s1;
// ld 0 means neither layout fits.
func layoutOf(rows, cols, s0, s1 int) (trans bool, ld int) {
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
	tp, dev, rows, in, outF := linearArgs("linear", x, weight, bias)
	if y, ok := linearInPrecision(tp, x, weight, bias, Linear); ok {
		return y
	}
	out := newOutputOf(tp, dev, x.dtype, append(cloneShape(x.shape[:x.Rank()-1]), outF))
	linearForward(dev, out, x, weight, bias, rows, in, outF, true)
	record(tp, "linear", out, []*Tensor{x, weight, bias}, []*Tensor{x, weight}, linearBackward(dev, rows, in, outF, weight.dtype, nil))
	return out
}

// LinearReLU returns ReLU(Linear(x, weight, bias)) with the bias added and
// the ReLU applied in one pass over the matrix product. It allocates,
// frees and saves exactly what Linear followed by ReLU does (the
// pre-activation is a transient, freed before it returns; x and weight
// are saved by a "linear" op, the output by a "relu" op, both recorded as
// the two functions record them), so memory, saved-tensor hooks and
// gradients see no difference. In backward, the ReLU's gradient mask and
// the bias gradient (a sum over rows) take one pass too.
func LinearReLU(x, weight, bias *Tensor) *Tensor { return linearReLU(x, weight, bias, "") }

// Epilogue is an elementwise function that an op applies to its output
// in the same pass over memory (cuBLASLt's epilogues). The op layer
// decides which ops have a fused form with which epilogue; a caller asks
// (LinearEpilogue) and falls back to the two ops when there is none.
type Epilogue uint8

const (
	EpilogueNone     Epilogue = iota // the op alone
	EpilogueReLU                     // ReLU, recorded as its own relu op (LinearReLU)
	EpilogueGELUTanh                 // GELUTanh, recorded as its own gelu_tanh op
)

// EpilogueParentScope, as LinearEpilogue's epilogueScope, records the
// epilogue's op in the parent of the current innermost scope: for a module
// that runs its Linear in a child scope and the activation in its own
// (nn.MLP: "mlp.c_fc" then GELU in "mlp").
const EpilogueParentScope = ".."

// LinearEpilogue returns e(Linear(x, weight, bias)) as one fused op and
// true, or nil and false, having done nothing, when the op layer has no
// fused form of Linear and e. The fused op computes, records, saves and
// allocates what the two ops do one after the other (see LinearReLU).
// epilogueScope is the module scope the epilogue's op is recorded in, a
// sibling of the current innermost scope (nn.Sequential runs a Linear at
// index 3 in scope "3" and the ReLU after it in "4"); "" records it in
// the current scope, and EpilogueParentScope the innermost scope's parent.
func LinearEpilogue(x, weight, bias *Tensor, e Epilogue, epilogueScope string) (*Tensor, bool) {
	switch e {
	case EpilogueNone:
		return Linear(x, weight, bias), true
	case EpilogueReLU:
		return linearReLU(x, weight, bias, epilogueScope), true
	case EpilogueGELUTanh:
		return linearGELUTanh(x, weight, bias, epilogueScope), true
	}
	return nil, false
}

// linearReLU is LinearReLU with the relu op recorded in sibling scope
// reluModule (see LinearEpilogue).
func linearReLU(x, weight, bias *Tensor, reluModule string) *Tensor {
	tp, dev, rows, in, outF := linearArgs("linear", x, weight, bias)
	if y, ok := linearInPrecision(tp, x, weight, bias, func(x, w, b *Tensor) *Tensor { return linearReLU(x, w, b, reluModule) }); ok {
		return y
	}
	if x.dtype == device.BFloat16 {
		return linearThen(tp, x, weight, bias, reluModule, ReLU)
	}
	shape := append(cloneShape(x.shape[:x.Rank()-1]), outF)
	z := newOutput(tp, dev, shape) // the pre-activation, without the bias yet
	linearForward(dev, z, x, weight, bias, rows, in, outF, false)
	// Backward of the pair: the relu op computes the bias gradient with
	// its mask when it can and leaves it here for the linear op.
	var db *Tensor
	wantDb := bias != nil && bias.requiresGrad
	record(tp, "linear", z, []*Tensor{x, weight, bias}, []*Tensor{x, weight}, linearBackward(dev, rows, in, outF, weight.dtype, &db))
	y := newOutput(tp, dev, shape)
	if y.st.block != nil {
		k := dev.Kernels()
		zv, yv := matView(z, rows, outF), matView(y, rows, outF)
		fk, fused := k.(device.FusedKernels)
		switch {
		case bias == nil:
			check("relu", k.Unary(device.ReLU, yv, zv, 0))
		case fused && bias.IsContiguous():
			check("relu", fk.BiasReLU(yv, zv, bias.view()))
		default:
			check("linear", k.Binary(device.Add, zv, zv, bias.broadcastView(zv.Shape)))
			check("relu", k.Unary(device.ReLU, yv, zv, 0))
		}
	}
	defer enterEpilogueScope(tp, reluModule)()
	record(tp, "relu", y, []*Tensor{z}, []*Tensor{y}, func(bk *backward) {
		g, out := bk.Grad(), bk.Saved(0)
		fk, fused := dev.Kernels().(device.FusedKernels)
		if !fused || !g.IsContiguous() || !out.IsContiguous() {
			bk.Accumulate(0, binaryNoBroadcast("relu_backward", device.ReLUGrad, g, out))
			return
		}
		dz := newOutput(bk.tape, dev, g.shape)
		var sum device.View
		if wantDb && bk.Needs(0) {
			db = newOutput(bk.tape, dev, []int{outF})
			sum = db.view()
		}
		if dz.st.block != nil || sum.Block != nil {
			gv, ov, dv := matView(g, rows, outF), matView(out, rows, outF), matView(dz, rows, outF)
			check("relu_backward", fk.ReLUBackwardSum(dv, sum, gv, ov))
		}
		bk.Accumulate(0, dz)
	})
	z.Release()
	return y
}

// linearThen is act(Linear(x, weight, bias)) as the two ops, act recorded
// in epilogueScope (see LinearEpilogue): the fused forms for a bfloat16 x,
// whose epilogue kernels take float32 only.
func linearThen(tp *Tape, x, weight, bias *Tensor, epilogueScope string, act func(*Tensor) *Tensor) *Tensor {
	z := Linear(x, weight, bias)
	restore := enterEpilogueScope(tp, epilogueScope)
	y := act(z)
	restore()
	z.Release()
	return y
}

// enterEpilogueScope makes the innermost module scope the one an
// epilogue's op is recorded in (see LinearEpilogue) and returns the
// function that restores it.
func enterEpilogueScope(tp *Tape, epilogueScope string) func() {
	if tp == nil || !tp.recording() || epilogueScope == "" {
		return func() {}
	}
	n := len(tp.modules)
	var scope string
	switch {
	case epilogueScope == EpilogueParentScope:
		if n < 2 {
			return func() {}
		}
		scope = tp.modules[n-2]
	case n > 1 && tp.modules[n-2] != "":
		// A sibling scope: the innermost one's parent, joined as
		// PushModule joins.
		scope = tp.modules[n-2] + "." + epilogueScope
	default:
		scope = epilogueScope
	}
	tp.modules = append(tp.modules, scope)
	return func() { tp.modules = tp.modules[:n] }
}

// LinearGELUTanh returns GELUTanh(Linear(x, weight, bias)) with the bias
// added and the GELU applied in one pass over the matrix product (on a
// device with device.FusedGELUKernels). It records and saves what Linear
// followed by GELUTanh does (x and weight saved by a "linear" op; its
// output, the pre-activation, by a "gelu_tanh" op) and allocates and frees
// the same blocks in forward; in backward the GELU's derivative and the
// bias gradient take one pass, so the bias gradient is allocated with
// the derivative rather than after it (on every device alike).
// With the fused kernels the bias is added after the product rather than
// before it (as LinearReLU does), so values may differ from the two ops
// by rounding; without them they are the two ops' bits.
func LinearGELUTanh(x, weight, bias *Tensor) *Tensor { return linearGELUTanh(x, weight, bias, "") }

// linearGELUTanh is LinearGELUTanh with the gelu_tanh op recorded in
// scope geluScope (see LinearEpilogue).
func linearGELUTanh(x, weight, bias *Tensor, geluScope string) *Tensor {
	tp, dev, rows, in, outF := linearArgs("linear", x, weight, bias)
	if y, ok := linearInPrecision(tp, x, weight, bias, func(x, w, b *Tensor) *Tensor { return linearGELUTanh(x, w, b, geluScope) }); ok {
		return y
	}
	if x.dtype == device.BFloat16 {
		return linearThen(tp, x, weight, bias, geluScope, GELUTanh)
	}
	shape := append(cloneShape(x.shape[:x.Rank()-1]), outF)
	fk, fused := dev.Kernels().(device.FusedGELUKernels)
	fuseBias := fused && bias != nil && bias.IsContiguous()
	z := newOutput(tp, dev, shape) // the pre-activation (without the bias yet when fuseBias)
	linearForward(dev, z, x, weight, bias, rows, in, outF, !fuseBias)
	// Backward of the pair: the gelu_tanh op computes the bias gradient
	// with its derivative and leaves it here for the linear op.
	var db *Tensor
	wantDb := bias != nil && bias.requiresGrad
	record(tp, "linear", z, []*Tensor{x, weight, bias}, []*Tensor{x, weight}, linearBackward(dev, rows, in, outF, weight.dtype, &db))
	y := newOutput(tp, dev, shape)
	if y.st.block != nil {
		zv, yv := matView(z, rows, outF), matView(y, rows, outF)
		if fuseBias {
			check("gelu_tanh", fk.BiasGELUTanh(yv, zv, bias.view()))
		} else {
			check("gelu_tanh", dev.Kernels().Unary(device.GELUTanh, yv, zv, 0))
		}
	}
	restore := enterEpilogueScope(tp, geluScope)
	record(tp, "gelu_tanh", y, []*Tensor{z}, []*Tensor{z}, func(bk *backward) {
		g, zs := bk.Grad(), bk.Saved(0)
		if !g.IsContiguous() || !zs.IsContiguous() {
			bk.Accumulate(0, binaryNoBroadcast("gelu_tanh_backward", device.GELUTanhGrad, g, zs))
			return
		}
		// The same allocations whether the device fuses or not (the meta
		// device, which plans memory, does not).
		dz := newOutput(bk.tape, dev, g.shape)
		var sum device.View
		if wantDb && bk.Needs(0) {
			db = newOutput(bk.tape, dev, []int{outF})
			sum = db.view()
		}
		if dz.st.block != nil || sum.Block != nil {
			k := dev.Kernels()
			gv, zv, dv := matView(g, rows, outF), matView(zs, rows, outF), matView(dz, rows, outF)
			fk, fused := k.(device.FusedGELUKernels)
			switch {
			case fused:
				check("gelu_tanh_backward", fk.GELUTanhBackwardSum(dv, sum, gv, zv))
			case rows*outF == 0:
				if sum.Block != nil {
					check("gelu_tanh_backward", k.Fill(sum, 0))
				}
			default:
				check("gelu_tanh_backward", k.Binary(device.GELUTanhGrad, dv, gv, zv))
				if sum.Block != nil {
					sum.Shape, sum.Strides = []int{1, outF}, []int{outF, 1}
					check("gelu_tanh_backward", k.Sum(sum, dv, 1))
				}
			}
		}
		bk.Accumulate(0, dz)
	})
	restore()
	z.Release()
	return y
}

// linearArgs checks Linear's operands and returns the tape, the device and
// the product's sizes: x read as rows × in, weight out × in.
func linearArgs(op string, x, weight, bias *Tensor) (tp *Tape, dev device.Device, rows, in, outF int) {
	tp = tapeOfAutocast(op, []*Tensor{x, weight}, bias)
	dev = sameDevice(op, x, weight, bias)
	floatType(op, x, weight, bias)
	if weight.Rank() != 2 || x.Rank() < 1 || x.shape[x.Rank()-1] != weight.shape[1] {
		panicf(op, "input %v does not fit weight %v (want [..., %d])", x.shape, weight.shape, weight.shape[min(1, weight.Rank()-1)])
	}
	in, outF = weight.shape[1], weight.shape[0]
	if bias != nil && (bias.Rank() != 1 || bias.shape[0] != outF) {
		panicf(op, "bias %v does not fit weight %v (want [%d])", bias.shape, weight.shape, outF)
	}
	return tp, dev, device.Numel(x.shape[:x.Rank()-1]), in, outF
}

// linearForward writes x·weightᵀ into out (contiguous, rows × outF), plus
// the bias when withBias.
func linearForward(dev device.Device, out, x, weight, bias *Tensor, rows, in, outF int, withBias bool) {
	if out.st.block == nil {
		return
	}
	xm, releaseX := flatMatrix(x, rows, in)
	defer releaseX()
	w, releaseW := flatMatrix(weight, outF, in)
	defer releaseW()
	o := matrix{block: out.st.block, off: out.offset, rows: rows, cols: outF, rs: outF, cs: 1, dtype: out.dtype}
	beta := float32(0)
	if withBias && bias != nil {
		ov := matView(out, rows, outF)
		copyInto("linear", dev, ov, bias.broadcastView(ov.Shape))
		beta = 1
	}
	gemm("linear", dev, o, xm, w.t(), beta)
}

// linearBackward is the backward of Linear (and of the linear op of
// LinearReLU, whose relu op may leave the bias gradient in *db).
func linearBackward(dev device.Device, rows, in, outF int, wType device.DType, db **Tensor) func(*backward) {
	return func(bk *backward) {
		g := bk.Grad()
		gm, releaseG := flatMatrix(g, rows, outF)
		defer releaseG()
		if bk.Needs(0) { // dx = g·W
			dx := newOutputOf(bk.tape, dev, bk.Saved(0).dtype, bk.Saved(0).shape)
			if dx.st.block != nil {
				wm, releaseW := flatMatrix(bk.Saved(1), outF, in)
				d := matrix{block: dx.st.block, off: dx.offset, rows: rows, cols: in, rs: in, cs: 1, dtype: dx.dtype}
				gemm("linear_backward", dev, d, gm, wm, 0)
				releaseW()
			}
			bk.Accumulate(0, dx)
		}
		if bk.Needs(1) { // dW = gᵀ·x
			xm, releaseX := flatMatrix(bk.Saved(0), rows, in)
			dw := newOutputOf(bk.tape, dev, wType, []int{outF, in}) // (the weight itself is not needed: not unpacked)
			if dw.st.block != nil {
				d := matrix{block: dw.st.block, off: dw.offset, rows: outF, cols: in, rs: in, cs: 1, dtype: dw.dtype}
				gemm("linear_backward", dev, d, gm.t(), xm, 0)
			}
			releaseX()
			bk.Accumulate(1, dw)
		}
		if bk.Needs(2) { // db = Σ_rows g
			if db != nil && *db != nil {
				bk.Accumulate(2, *db)
				*db = nil
				return
			}
			bk.Accumulate(2, sumTo(g, []int{outF})) // float32 for a bfloat16 g (sumTo)
		}
	}
}

// matView is the view of contiguous t as a rows × cols matrix.
func matView(t *Tensor, rows, cols int) device.View {
	v := t.view()
	if len(v.Shape) != 2 {
		v.Shape, v.Strides = []int{rows, cols}, []int{cols, 1}
	}
	return v
}

// matrix is a GEMM operand without a tensor handle: rows × cols elements
// of a block from element off, rows rs and columns cs elements apart.
type matrix struct {
	block      *device.Block
	off        int
	rows, cols int
	rs, cs     int
	dtype      device.DType
}

// t is the transpose, a view.
func (m matrix) t() matrix {
	return matrix{block: m.block, off: m.off, rows: m.cols, cols: m.rows, rs: m.cs, cs: m.rs, dtype: m.dtype}
}

// flatMatrix reads t as a rows × cols matrix (its last axis the columns):
// t's own layout when it is a matrix or contiguous, else a contiguous copy,
// which the returned function releases.
func flatMatrix(t *Tensor, rows, cols int) (matrix, func()) {
	m := matrix{block: t.st.block, off: t.offset, rows: rows, cols: cols, rs: cols, cs: 1, dtype: t.dtype}
	switch {
	case t.Rank() == 2:
		m.rs, m.cs = t.strides[0], t.strides[1]
	case t.IsContiguous():
	default:
		c := t.contiguousCopy(nil)
		m.block, m.off = c.st.block, c.offset
		return m, c.Release
	}
	if _, ld := layoutOf(m.rows, m.cols, m.rs, m.cs); ld == 0 {
		c := t.contiguousCopy(nil)
		m.block, m.off, m.rs, m.cs = c.st.block, c.offset, cols, 1
		return m, c.Release
	}
	return m, func() {}
}

// gemm computes c = a·b + beta·c for 2-D operands, c contiguous.
func gemm(op string, dev device.Device, c, a, b matrix, beta float32) {
	if c.rows == 0 || c.cols == 0 {
		return
	}
	if a.cols == 0 { // an empty sum: C = beta·C
		v := device.View{Block: c.block, Off: c.off, Shape: []int{c.rows, c.cols}, Strides: []int{c.cols, 1}, DType: c.dtype}
		scaleView(op, dev, v, beta)
		return
	}
	p := device.GemmParams{
		M: c.rows, N: c.cols, K: a.cols, Alpha: 1, Beta: beta,
		A: a.block, B: b.block, C: c.block, OffA: a.off, OffB: b.off, OffC: c.off,
		LDC: c.cols, Batch: 1,
		TypeA: a.dtype, TypeB: b.dtype, TypeC: c.dtype,
	}
	p.TransA, p.LDA = layoutOf(a.rows, a.cols, a.rs, a.cs)
	p.TransB, p.LDB = layoutOf(b.rows, b.cols, b.rs, b.cs)
	if p.LDA == 0 || p.LDB == 0 {
		panicf(op, "operand layout is not a matrix (internal error)")
	}
	check(op, dev.Kernels().Gemm(p))
}

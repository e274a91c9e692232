package ferry

import (
	"math"
	"slices"
	"unsafe"

	"ferry/device"
)

// AttentionOptions configure ScaledDotProductAttention.
type AttentionOptions struct {
	// Causal masks out keys after the query's position (GPT's mask).
	Causal bool
	// Dropout is the probability of zeroing an attention weight (training
	// only); Key draws its mask, as for Dropout.
	Dropout float32
	Key     DropoutKey
	// Scale multiplies q·k; 0 means 1/√D.
	Scale float32
}

// ScaledDotProductAttention returns softmax(scale·q·kᵀ + mask)·v for q, k,
// v of shape [B, H, T, D] (views allowed: the heads split off a [B, T, C]
// tensor need no copy), with dropout on the attention weights: [B, H, T, D]
// (PyTorch: nn.functional.scaled_dot_product_attention).
//
// # Memory
//
// On a device with device.AttentionKernels (the CPU, CUDA, meta) it is one fused
// op in the FlashAttention scheme: it saves q, k, v, the output and each
// row's log-sum-exp, and backward recomputes the attention weights from
// them. Per GPT block that is 4·B·T·C + 4·B·H·T bytes of which q, k, v
// are views of c_attn's output (saved once), against PyTorch 1.13 eager's
// q, k, v plus the T×T weights before and after softmax and dropout:
// 3·4·B·H·T² more. Without the kernels it is composed from MatMul, a mask
// and Softmax, which saves the T×T weights as eager PyTorch does.
func ScaledDotProductAttention(q, k, v *Tensor, opts AttentionOptions) *Tensor {
	if tp := tapeOf("attention", q, k, v); tp.lowPrecision() && !allBF16(q, k, v) {
		return tp.inBF16(func(b []*Tensor) *Tensor { return ScaledDotProductAttention(b[0], b[1], b[2], opts) }, q, k, v)
	}
	if isBF16(q, k, v) {
		_, fused := sameDevice("attention", q, k, v).Kernels().(device.AttentionKernels)
		if !allBF16(q, k, v) || !fused {
			return inFloat32(allBF16(q, k, v), func(w []*Tensor) *Tensor { return ScaledDotProductAttention(w[0], w[1], w[2], opts) }, q, k, v)
		}
	}
	const op = "attention"
	tp := tapeOf(op, q, k, v)
	dev := sameDevice(op, q, k, v)
	floatType(op, q, k, v)
	if q.Rank() != 4 || !slices.Equal(q.shape, k.shape) || !slices.Equal(q.shape, v.shape) {
		panicf(op, "q, k and v must be [batch, heads, seq, head_dim] of one shape, got %v, %v, %v", q.shape, k.shape, v.shape)
	}
	if !(opts.Dropout >= 0 && opts.Dropout < 1) {
		panicf(op, "dropout must be in [0, 1), got %v", opts.Dropout)
	}
	if math.IsNaN(float64(opts.Scale)) || math.IsInf(float64(opts.Scale), 0) {
		panicf(op, "scale must be finite, got %v", opts.Scale)
	}
	D := q.shape[3]
	if opts.Scale == 0 && D > 0 {
		opts.Scale = float32(1 / math.Sqrt(float64(D)))
	}
	ak, ok := dev.Kernels().(device.AttentionKernels)
	if !ok {
		return attentionComposite(q, k, v, opts)
	}
	p := device.AttentionParams{Causal: opts.Causal, Scale: opts.Scale, Dropout: opts.Dropout, Key: opts.Key}
	if q.dtype == device.BFloat16 {
		return attentionBF16(tp, dev, ak, q, k, v, p)
	}
	out := newOutput(tp, dev, q.shape)
	lse := newOutput(tp, dev, q.shape[:3])
	if out.st.block != nil {
		qs, rq := rowMajorLast(q)
		ks, rk := rowMajorLast(k)
		vs, rv := rowMajorLast(v)
		check(op, ak.Attention(out.view(), lse.view(), qs.view(), ks.view(), vs.view(), p))
		rq()
		rk()
		rv()
	}
	shape := q.shape
	record(tp, op, out, []*Tensor{q, k, v}, []*Tensor{q, k, v, out, lse}, func(bk *backward) {
		g, rg := rowMajorLast(bk.Grad())
		defer rg()
		qs, rq := rowMajorLast(bk.Saved(0))
		defer rq()
		ks, rk := rowMajorLast(bk.Saved(1))
		defer rk()
		vs, rv := rowMajorLast(bk.Saved(2))
		defer rv()
		o, ro := contiguousInput(bk.Saved(3))
		defer ro()
		l := bk.Saved(4)
		dq := newOutput(bk.tape, dev, shape)
		dk := newOutput(bk.tape, dev, shape)
		dv := newOutput(bk.tape, dev, shape)
		if dq.st.block != nil {
			check(op+"_backward", ak.AttentionBackward(dq.view(), dk.view(), dv.view(), g.view(), qs.view(), ks.view(), vs.view(), o.view(), l.view(), p))
		}
		bk.Accumulate(0, dq)
		bk.Accumulate(1, dk)
		bk.Accumulate(2, dv)
	})
	lse.Release() // lives on only as a saved tensor
	return out
}

// rowMajorLast returns t when its last axis has stride 1 (what the
// attention kernels read without a copy), or a contiguous copy.
func rowMajorLast(t *Tensor) (*Tensor, func()) {
	r := t.Rank()
	if r == 0 || t.strides[r-1] == 1 || t.shape[r-1] <= 1 {
		if r >= 2 && t.strides[r-2] < t.shape[r-1] && t.shape[r-2] > 1 {
			return contiguousInput(t)
		}
		return t, func() {}
	}
	return contiguousInput(t)
}

// attentionComposite is attention from MatMul, a mask, Softmax and
// Dropout, for devices without the fused kernels.
func attentionComposite(q, k, v *Tensor, opts AttentionOptions) *Tensor {
	kt := k.T()
	s := MatMul(q, kt)
	kt.Release()
	if opts.Scale != 1 {
		ss := Scale(s, opts.Scale)
		s.Release()
		s = ss
	}
	if opts.Causal {
		T := q.shape[2]
		mask := causalMask(q.st.dev, T)
		sm := Add(s, mask)
		mask.Release()
		s.Release()
		s = sm
	}
	w := Softmax(s)
	s.Release()
	if opts.Dropout > 0 {
		wd := Dropout(w, opts.Dropout, opts.Key)
		w.Release()
		w = wd
	}
	out := MatMul(w, v)
	w.Release()
	return out
}

// causalMask is [T, T] with 0 on and below the diagonal and -Inf above.
func causalMask(dev device.Device, T int) *Tensor {
	m := allocate(dev, device.Float32, device.Temporary, []int{T, T})
	if m.st.block == nil || !device.HasData(dev) {
		return m
	}
	vals := make([]float32, T*T)
	for i := 0; i < T; i++ {
		for j := i + 1; j < T; j++ {
			vals[i*T+j] = float32(math.Inf(-1))
		}
	}
	m.upload(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), 4*len(vals)))
	return m
}

// attentionBF16 is the fused attention of bfloat16 q, k and v: the
// kernels run in float32 on widened copies, the output is rounded to
// bfloat16, and what is saved (q, k, v and the output) stays bfloat16, as
// in FlashAttention's bfloat16 kernels, whose backward reads the rounded
// output too. The log-sum-exp stays float32.
func attentionBF16(tp *Tape, dev device.Device, ak device.AttentionKernels, q, k, v *Tensor, p device.AttentionParams) *Tensor {
	const op = "attention"
	shape := q.shape
	out := newOutputOf(tp, dev, device.BFloat16, shape)
	lse := newOutput(tp, dev, shape[:3])
	if out.st.block != nil {
		qs, ks, vs := widenTemp(q), widenTemp(k), widenTemp(v)
		o := temporary(dev, shape)
		check(op, ak.Attention(o.view(), lse.view(), qs.view(), ks.view(), vs.view(), p))
		qs.Release()
		ks.Release()
		vs.Release()
		convertInto(op, out.view(), o.view(), dev)
		o.Release()
	}
	record(tp, op, out, []*Tensor{q, k, v}, []*Tensor{q, k, v, out, lse}, func(bk *backward) {
		dq := newOutputOf(bk.tape, dev, device.BFloat16, shape)
		dk := newOutputOf(bk.tape, dev, device.BFloat16, shape)
		dv := newOutputOf(bk.tape, dev, device.BFloat16, shape)
		if dq.st.block != nil {
			g := widenTemp(bk.Grad())
			qs, ks, vs, o := widenTemp(bk.Saved(0)), widenTemp(bk.Saved(1)), widenTemp(bk.Saved(2)), widenTemp(bk.Saved(3))
			dq32, dk32, dv32 := temporary(dev, shape), temporary(dev, shape), temporary(dev, shape)
			check(op+"_backward", ak.AttentionBackward(dq32.view(), dk32.view(), dv32.view(), g.view(), qs.view(), ks.view(), vs.view(), o.view(), bk.Saved(4).view(), p))
			for _, t := range []*Tensor{g, qs, ks, vs, o} {
				t.Release()
			}
			convertInto(op+"_backward", dq.view(), dq32.view(), dev)
			convertInto(op+"_backward", dk.view(), dk32.view(), dev)
			convertInto(op+"_backward", dv.view(), dv32.view(), dev)
			dq32.Release()
			dk32.Release()
			dv32.Release()
		}
		bk.Accumulate(0, dq)
		bk.Accumulate(1, dk)
		bk.Accumulate(2, dv)
	})
	lse.Release() // lives on only as a saved tensor
	return out
}

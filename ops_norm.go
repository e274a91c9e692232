package ferry

import (
	"ferry/device"
	"slices"
)

// LayerNorm normalises x over its last axis: (x - mean)/√(var + eps)·weight
// + bias, with the biased variance (PyTorch: nn.functional.layer_norm over
// the last dimension). weight and bias are [C], or nil.
//
// On a device with device.LayerNormKernels it is one fused op that saves x
// and each row's mean and 1/√(var + eps) — 4·(rows·C + 2·rows) bytes — and
// never the normalised tensor, as PyTorch and llm.c do. Elsewhere it is
// composed from elementwise ops and reductions (which save more).
func LayerNorm(x, weight, bias *Tensor, eps float32) *Tensor {
	if isBF16(x, weight, bias) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return LayerNorm(w[0], w[1], w[2], eps) }, x, weight, bias)
	}
	return layerNorm(x, weight, bias, eps, nil)
}

// layerNorm is LayerNorm; a non-nil fill writes the output, mean and rstd
// in place of the LayerNorm kernel (on a device with LayerNormKernels).
func layerNorm(x, weight, bias *Tensor, eps float32, fill func(out, mean, rstd device.View)) *Tensor {
	const op = "layer_norm"
	tp := tapeOf(op, x, weight, bias)
	dev := sameDevice(op, x, weight, bias)
	floats32(op, x, weight, bias)
	if x.Rank() == 0 {
		panicf(op, "needs at least one axis")
	}
	C := x.shape[x.Rank()-1]
	for _, p := range []*Tensor{weight, bias} {
		if p != nil && (p.Rank() != 1 || p.shape[0] != C) {
			panicf(op, "weight and bias must be [%d] for input %v, got %v", C, x.shape, p.shape)
		}
	}
	if !(eps >= 0) {
		panicf(op, "eps must be a non-negative number, got %v", eps)
	}
	lk, ok := dev.Kernels().(device.LayerNormKernels)
	if !ok {
		return layerNormComposite(x, weight, bias, eps)
	}
	rows := 1
	if C > 0 {
		rows = x.Numel() / C
	}
	out := newOutput(tp, dev, x.shape)
	mean := newOutput(tp, dev, []int{rows})
	rstd := newOutput(tp, dev, []int{rows})
	switch {
	case out.st.block == nil:
	case fill != nil:
		fill(out.view(), mean.view(), rstd.view())
	default:
		xc, rx := contiguousInput(x)
		check(op, lk.LayerNorm(out.view(), mean.view(), rstd.view(), xc.view(), optView(weight), optView(bias), eps))
		rx()
	}
	shape := x.shape
	save := []*Tensor{x, mean, rstd}
	if weight != nil {
		save = append(save, weight)
	}
	record(tp, op, out, []*Tensor{x, weight, bias}, save, func(bk *backward) {
		g, rg := contiguousInput(bk.Grad())
		defer rg()
		xs, rx := contiguousInput(bk.Saved(0))
		defer rx()
		m, r := bk.Saved(1), bk.Saved(2)
		var w *Tensor
		if weight != nil {
			w = bk.Saved(3)
		}
		dx := newOutput(bk.tape, dev, shape)
		var dw, db *Tensor
		if weight != nil && bk.Needs(1) {
			dw = newOutput(bk.tape, dev, []int{C})
		}
		if bias != nil && bk.Needs(2) {
			db = newOutput(bk.tape, dev, []int{C})
		}
		if dx.st.block != nil {
			check(op+"_backward", lk.LayerNormBackward(dx.view(), optView(dw), optView(db), g.view(), xs.view(), m.view(), r.view(), optView(w)))
		} else {
			for _, t := range []*Tensor{dw, db} {
				if t != nil && t.st.block != nil {
					check(op+"_backward", dev.Kernels().Fill(t.view(), 0))
				}
			}
		}
		bk.Accumulate(0, dx)
		if dw != nil {
			bk.Accumulate(1, dw)
		}
		if db != nil {
			bk.Accumulate(2, db)
		}
	})
	// The statistics live on only as saved tensors.
	mean.Release()
	rstd.Release()
	return out
}

// optView is t's view, or a View with no block for a nil t.
func optView(t *Tensor) device.View {
	if t == nil || t.st.block == nil {
		return device.View{}
	}
	return t.view()
}

// layerNormComposite is LayerNorm from elementwise ops and reductions, for
// devices without the fused kernels.
func layerNormComposite(x, weight, bias *Tensor, eps float32) *Tensor {
	last := x.Rank() - 1
	mean := MeanKeepDim(x, last)
	xc := Sub(x, mean)
	mean.Release()
	sq := Square(xc)
	v := MeanKeepDim(sq, last)
	sq.Release()
	ve := AddScalar(v, eps)
	v.Release()
	sd := Sqrt(ve)
	ve.Release()
	y := Div(xc, sd)
	xc.Release()
	sd.Release()
	if weight != nil {
		yw := Mul(y, weight)
		y.Release()
		y = yw
	}
	if bias != nil {
		yb := Add(y, bias)
		y.Release()
		y = yb
	}
	return y
}

// RMSNorm returns x/√(mean(x²) + eps)·weight over the last axis (PyTorch:
// the LlamaRMSNorm of Hugging Face's transformers, in float32). weight is
// [C], or nil for none. It saves x and each row's √(mean(x²) + eps): as
// LayerNorm's fused kernel does, never the normalised tensor (PyTorch
// 1.13's eager LlamaRMSNorm saves x, its rsqrt per row and the normalised
// x). It has no kernel of its own: it is composed of elementwise ops and
// reductions (so it runs on every device, meta included), run with
// recording off (composite) and recorded as one op with the backward
// written beside it.
func RMSNorm(x, weight *Tensor, eps float32) *Tensor {
	if isBF16(x, weight) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return RMSNorm(w[0], w[1], eps) }, x, weight)
	}
	const op = "rms_norm"
	tp := tapeOf(op, x, weight)
	sameDevice(op, x, weight)
	floats32(op, x, weight)
	if x.Rank() == 0 {
		panicf(op, "needs at least one axis")
	}
	last := x.Rank() - 1
	C := x.shape[last]
	if weight != nil && (weight.Rank() != 1 || weight.shape[0] != C) {
		panicf(op, "weight must be [%d] for input %v, got %v", C, x.shape, weight.shape)
	}
	if !(eps >= 0) {
		panicf(op, "eps must be a non-negative number, got %v", eps)
	}
	var sd *Tensor // √(mean x² + eps), [..., 1]
	out := composite(tp, func() *Tensor {
		sq := Square(x)
		ms := MeanKeepDim(sq, last)
		sq.Release()
		mse := AddScalar(ms, eps)
		ms.Release()
		sd = Sqrt(mse)
		mse.Release()
		y := Div(x, sd)
		if weight == nil {
			return y
		}
		defer y.Release()
		return Mul(y, weight)
	})
	save := []*Tensor{x, sd}
	if weight != nil {
		save = append(save, weight)
	}
	record(tp, op, out, []*Tensor{x, weight}, save, func(bk *backward) {
		// y = x·w/s, s = √(mean x² + eps). With h = g·w:
		//   dx = (h - x·mean(h·x)/s²)/s,  dw = Σ_rows g·x/s.
		g, x, s := bk.Grad(), bk.Saved(0), bk.Saved(1)
		h := g
		if weight != nil {
			h = Mul(g, bk.Saved(2))
			defer h.Release()
		}
		if bk.Needs(0) {
			hx := Mul(h, x)
			m := MeanKeepDim(hx, last)
			s2 := Square(s)
			c := Div(m, s2)
			xc := Mul(x, c)
			diff := Sub(h, xc)
			releaseAll(hx, m, s2, c, xc)
			bk.Accumulate(0, Div(diff, s))
			diff.Release()
		}
		if weight != nil && bk.Needs(1) {
			n := Div(x, s)
			bk.Accumulate(1, Mul(g, n)) // summed to [C] by Accumulate
			n.Release()
		}
	})
	sd.Release() // lives on only as a saved tensor
	return out
}

// AddLayerNorm returns sum = x + r and LayerNorm(sum, weight, bias, eps),
// as Add and then LayerNorm return them, in one pass over memory on a
// device with device.FusedAddLayerNormKernels (a pre-LN block's residual
// and the norm after it) and otherwise as the two ops. It records the
// same two ops ("add", then "layer_norm" in the child module scope
// lnScope, or the current scope for ""), saves and allocates what they
// do, in the same order, and gives their bits. x and r must have one
// shape; r must stay alive until both are computed (the fused pass reads
// it), so a caller that releases r after Add and before LayerNorm would
// free its memory earlier than this can.
func AddLayerNorm(x, r, weight, bias *Tensor, eps float32, lnScope string) (sum, out *Tensor) {
	dev := sameDevice("add", x, r)
	fk, fused := dev.Kernels().(device.FusedAddLayerNormKernels)
	_, ln := dev.Kernels().(device.LayerNormKernels)
	if !fused || !ln || !slices.Equal(x.shape, r.shape) || x.Rank() == 0 || !x.IsContiguous() || !r.IsContiguous() ||
		x.dtype != device.Float32 || r.dtype != device.Float32 {
		sum = Add(x, r)
		defer enterChildScope(sum.Tape(), lnScope)()
		return sum, LayerNorm(sum, weight, bias, eps)
	}
	tp := tapeOf("add", x, r)
	sum = newOutput(tp, dev, x.shape)
	record(tp, "add", sum, []*Tensor{x, r}, nil, func(bk *backward) {
		bk.Pass(0, bk.Grad())
		bk.Pass(1, bk.Grad())
	})
	defer enterChildScope(tp, lnScope)()
	out = layerNorm(sum, weight, bias, eps, func(o, mean, rstd device.View) {
		check("layer_norm", fk.AddLayerNorm(sum.view(), o, mean, rstd, x.view(), r.view(), optView(weight), optView(bias), eps))
	})
	return sum, out
}

// enterChildScope pushes module scope name (none for "") and returns the
// function that pops it.
func enterChildScope(tp *Tape, name string) func() {
	if tp == nil || name == "" {
		return func() {}
	}
	tp.PushModule(name)
	return tp.PopModule
}

package ferry

import (
	"ferry/device"
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
	if out.st.block != nil {
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

package ferry

import (
	"slices"

	"ferry/device"
)

// Elementwise arithmetic with NumPy broadcasting, and the in-place ops
// optimizers and hand-written updates need.

func floats32(op string, ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && t.dtype != device.Float32 {
			panicf(op, "%s is %s; this op takes float32", t.describe(), t.dtype)
		}
	}
}

// binary computes kop(a, b) broadcast, on a's tape, without recording.
func binary(op string, kop device.BinaryOp, a, b *Tensor) (*Tensor, *Tape) {
	tp := tapeOf(op, a, b)
	dev := sameDevice(op, a, b)
	floatType(op, a, b)
	dt := device.Float32 // bfloat16 when both are (callers widen otherwise, unless the device takes both)
	if a.dtype == b.dtype {
		dt = a.dtype
	}
	if slices.Equal(a.shape, b.shape) { // no broadcast: the operands' own views
		out := newOutputOf(tp, dev, dt, a.shape)
		if out.st.block != nil {
			check(op, dev.Kernels().Binary(kop, out.view(), a.view(), b.view()))
		}
		return out, tp
	}
	shape := broadcastShapes(op, a.shape, b.shape)
	out := newOutputOf(tp, dev, dt, shape)
	if out.st.block != nil {
		check(op, dev.Kernels().Binary(kop, out.view(), a.broadcastView(shape), b.broadcastView(shape)))
	}
	return out, tp
}

// Add returns a + b.
func Add(a, b *Tensor) *Tensor {
	if isBF16(a, b) && !nativeBF16(a, b) {
		return inFloat32(allBF16(a, b), func(w []*Tensor) *Tensor { return Add(w[0], w[1]) }, a, b)
	}
	out, tp := binary("add", device.Add, a, b)
	record(tp, "add", out, []*Tensor{a, b}, nil, func(bk *backward) {
		bk.Pass(0, bk.Grad())
		bk.Pass(1, bk.Grad())
	})
	return out
}

// Sub returns a - b.
func Sub(a, b *Tensor) *Tensor {
	if isBF16(a, b) && !nativeBF16(a, b) {
		return inFloat32(allBF16(a, b), func(w []*Tensor) *Tensor { return Sub(w[0], w[1]) }, a, b)
	}
	out, tp := binary("sub", device.Sub, a, b)
	record(tp, "sub", out, []*Tensor{a, b}, nil, func(bk *backward) {
		bk.Pass(0, bk.Grad())
		if bk.Needs(1) {
			bk.Accumulate(1, Neg(bk.Grad()))
		}
	})
	return out
}

// Mul returns a · b, elementwise.
func Mul(a, b *Tensor) *Tensor {
	if isBF16(a, b) && !nativeBF16(a, b) {
		return inFloat32(allBF16(a, b), func(w []*Tensor) *Tensor { return Mul(w[0], w[1]) }, a, b)
	}
	out, tp := binary("mul", device.Mul, a, b)
	record(tp, "mul", out, []*Tensor{a, b}, []*Tensor{a, b}, func(bk *backward) {
		g := bk.Grad()
		if bk.Needs(0) {
			bk.Accumulate(0, Mul(g, bk.Saved(1)))
		}
		if bk.Needs(1) {
			bk.Accumulate(1, Mul(g, bk.Saved(0)))
		}
	})
	return out
}

// Div returns a / b, elementwise.
func Div(a, b *Tensor) *Tensor {
	if isBF16(a, b) && !nativeBF16(a, b) {
		return inFloat32(allBF16(a, b), func(w []*Tensor) *Tensor { return Div(w[0], w[1]) }, a, b)
	}
	out, tp := binary("div", device.Div, a, b)
	record(tp, "div", out, []*Tensor{a, b}, []*Tensor{a, b}, func(bk *backward) {
		g, x, y := bk.Grad(), bk.Saved(0), bk.Saved(1)
		if bk.Needs(0) {
			bk.Accumulate(0, Div(g, y))
		}
		if bk.Needs(1) { // -g·a/b²
			ga := Mul(g, x)
			q := Div(ga, y)
			ga.Release()
			r := Div(q, y)
			q.Release()
			neg := Neg(r)
			r.Release()
			bk.Accumulate(1, neg)
		}
	})
	return out
}

// unary computes kop(x) on x's tape, without recording.
func unary(op string, kop device.UnaryOp, x *Tensor, alpha float32) (*Tensor, *Tape) {
	tp := tapeOf(op, x)
	floatType(op, x)
	out := newOutputOf(tp, x.st.dev, x.dtype, x.shape)
	if out.st.block != nil {
		check(op, kernels(x).Unary(kop, out.view(), x.view(), alpha))
	}
	return out, tp
}

// Scale returns alpha · x.
func Scale(x *Tensor, alpha float32) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Scale(w[0], alpha) }, x)
	}
	out, tp := unary("scale", device.Scale, x, alpha)
	record(tp, "scale", out, []*Tensor{x}, nil, func(bk *backward) {
		bk.Accumulate(0, Scale(bk.Grad(), alpha))
	})
	return out
}

// Neg returns -x.
func Neg(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Neg(w[0]) }, x)
	}
	out, tp := unary("neg", device.Neg, x, 0)
	record(tp, "neg", out, []*Tensor{x}, nil, func(bk *backward) {
		bk.Accumulate(0, Neg(bk.Grad()))
	})
	return out
}

// AddScalar returns x + c.
func AddScalar(x *Tensor, c float32) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return AddScalar(w[0], c) }, x)
	}
	out, tp := unary("add_scalar", device.AddScalar, x, c)
	record(tp, "add_scalar", out, []*Tensor{x}, nil, func(bk *backward) { bk.Pass(0, bk.Grad()) })
	return out
}

// Exp returns eˣ.
func Exp(x *Tensor) *Tensor {
	if isBF16(x) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return Exp(w[0]) }, x)
	}
	out, tp := unary("exp", device.Exp, x, 0)
	record(tp, "exp", out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		bk.Accumulate(0, Mul(bk.Grad(), bk.Saved(0)))
	})
	return out
}

// Log returns ln x.
func Log(x *Tensor) *Tensor {
	if isBF16(x) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return Log(w[0]) }, x)
	}
	out, tp := unary("log", device.Log, x, 0)
	record(tp, "log", out, []*Tensor{x}, []*Tensor{x}, func(bk *backward) {
		bk.Accumulate(0, Div(bk.Grad(), bk.Saved(0)))
	})
	return out
}

// Sqrt returns √x.
func Sqrt(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Sqrt(w[0]) }, x)
	}
	out, tp := unary("sqrt", device.Sqrt, x, 0)
	record(tp, "sqrt", out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		q := Div(bk.Grad(), bk.Saved(0))
		bk.Accumulate(0, Scale(q, 0.5))
		q.Release()
	})
	return out
}

// Square returns x².
func Square(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Square(w[0]) }, x)
	}
	out, tp := unary("square", device.Square, x, 0)
	record(tp, "square", out, []*Tensor{x}, []*Tensor{x}, func(bk *backward) {
		p := Mul(bk.Grad(), bk.Saved(0))
		bk.Accumulate(0, Scale(p, 2))
		p.Release()
	})
	return out
}

// inPlace checks that t may be changed in place: autograd cannot
// differentiate through in-place changes, so a tensor that requires grad on
// a recording tape may not be; and kernels write contiguous outputs only,
// so a strided view (x.T()) may not be either.
func inPlace(op string, t *Tensor) {
	t.use(op)
	floats32(op, t)
	if t.requiresGrad && t.tape != nil && t.tape.recording() {
		panicf(op, "%s requires grad on a recording tape; in-place ops are not differentiable. Use the out-of-place op, or run under NoGrad", t.describe())
	}
	if !t.IsContiguous() {
		panicf(op, "%s is not contiguous (a transposed view?); in-place ops change contiguous tensors only. Use the out-of-place op", t.describe())
	}
}

func inPlaceBinary(op string, kop device.BinaryOp, dst, src *Tensor) {
	inPlace(op, dst)
	src.use(op)
	sameDevice(op, dst, src)
	floats32(op, src)
	if !slices.Equal(broadcastShapes(op, dst.shape, src.shape), dst.shape) {
		panicf(op, "%v cannot be broadcast into %v", src.shape, dst.shape)
	}
	if dst.st.block != nil {
		check(op, kernels(dst).Binary(kop, dst.view(), dst.view(), src.broadcastView(dst.shape)))
	}
	dst.st.bumpVersion(op)
}

// AddInPlace sets dst += src (src broadcast to dst's shape). dst must be
// contiguous, as for every in-place op.
func (t *Tensor) AddInPlace(src *Tensor) { inPlaceBinary("add_", device.Add, t, src) }

// SubInPlace sets dst -= src.
func (t *Tensor) SubInPlace(src *Tensor) { inPlaceBinary("sub_", device.Sub, t, src) }

// MulInPlace sets dst *= src.
func (t *Tensor) MulInPlace(src *Tensor) { inPlaceBinary("mul_", device.Mul, t, src) }

// ScaleInPlace sets t *= alpha.
func (t *Tensor) ScaleInPlace(alpha float32) {
	inPlace("mul_", t)
	if t.st.block != nil {
		check("mul_", kernels(t).Unary(device.Scale, t.view(), t.view(), alpha))
	}
	t.st.bumpVersion("mul_")
}

// FillInPlace sets every element of t (contiguous) to v.
func (t *Tensor) FillInPlace(v float32) {
	inPlace("fill_", t)
	if !t.IsContiguous() {
		panicf("fill_", "%s is not contiguous", t.describe())
	}
	if t.st.block != nil {
		check("fill_", kernels(t).Fill(t.view(), v))
	}
	t.st.bumpVersion("fill_")
}

// CopyFrom sets t's elements to src's (same shape; t contiguous).
func (t *Tensor) CopyFrom(src *Tensor) {
	inPlace("copy_", t)
	src.use("copy_")
	sameDevice("copy_", t, src)
	if !slices.Equal(t.shape, src.shape) || !t.IsContiguous() {
		panicf("copy_", "copy of %v into %v (must be the same shape, destination contiguous)", src.shape, t.shape)
	}
	if t.st.block != nil {
		copyInto("copy_", t.st.dev, t.view(), src.view())
	}
	t.st.bumpVersion("copy_")
}

package ferry

import (
	"slices"

	"ferry/device"
)

// Activations and softmax. Each saves what its derivative needs: ReLU,
// Tanh, Sigmoid and the softmaxes their output (as PyTorch does, so that a
// following Linear and the activation share one saved tensor), the GELUs
// and SiLU their input.

// ReLU returns max(x, 0).
func ReLU(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return ReLU(w[0]) }, x)
	}
	out, tp := unary("relu", device.ReLU, x, 0)
	record(tp, "relu", out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		bk.Accumulate(0, binaryNoBroadcast("relu_backward", device.ReLUGrad, bk.Grad(), bk.Saved(0)))
	})
	return out
}

// GELU returns x·Φ(x) with the exact normal CDF (PyTorch: gelu(x)).
func GELU(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return GELU(w[0]) }, x)
	}
	out, tp := unary("gelu", device.GELU, x, 0)
	record(tp, "gelu", out, []*Tensor{x}, []*Tensor{x}, func(bk *backward) {
		bk.Accumulate(0, binaryNoBroadcast("gelu_backward", device.GELUGrad, bk.Grad(), bk.Saved(0)))
	})
	return out
}

// GELUTanh returns GELU with the tanh approximation (PyTorch:
// gelu(x, approximate="tanh")).
func GELUTanh(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return GELUTanh(w[0]) }, x)
	}
	out, tp := unary("gelu_tanh", device.GELUTanh, x, 0)
	record(tp, "gelu_tanh", out, []*Tensor{x}, []*Tensor{x}, func(bk *backward) {
		bk.Accumulate(0, binaryNoBroadcast("gelu_tanh_backward", device.GELUTanhGrad, bk.Grad(), bk.Saved(0)))
	})
	return out
}

// Tanh returns tanh x.
func Tanh(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Tanh(w[0]) }, x)
	}
	out, tp := unary("tanh", device.Tanh, x, 0)
	record(tp, "tanh", out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		y2 := Square(bk.Saved(0))
		gy2 := Mul(bk.Grad(), y2)
		y2.Release()
		d := Sub(bk.Grad(), gy2) // g - g·y²
		gy2.Release()
		bk.Accumulate(0, d)
	})
	return out
}

// Sigmoid returns 1/(1+e⁻ˣ).
func Sigmoid(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Sigmoid(w[0]) }, x)
	}
	out, tp := unary("sigmoid", device.Sigmoid, x, 0)
	record(tp, "sigmoid", out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		y := bk.Saved(0)
		gy := Mul(bk.Grad(), y)
		gyy := Mul(gy, y)
		d := Sub(gy, gyy) // g·y - g·y² = g·y·(1-y)
		gy.Release()
		gyy.Release()
		bk.Accumulate(0, d)
	})
	return out
}

// SiLU returns x·σ(x) (PyTorch: nn.functional.silu), saving x. Its
// forward is one elementwise kernel (device.SiLU), like the other
// activations'; its backward is composed of public ops, σ(x) computed
// again from the saved x.
func SiLU(x *Tensor) *Tensor {
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return SiLU(w[0]) }, x)
	}
	const op = "silu"
	out, tp := unary(op, device.SiLU, x, 0)
	record(tp, op, out, []*Tensor{x}, []*Tensor{x}, func(bk *backward) {
		d := siluDerivative(bk.Saved(0))
		dx := Mul(bk.Grad(), d)
		d.Release()
		bk.Accumulate(0, dx)
	})
	return out
}

// siluDerivative is d/dx x·σ(x) = σ(x)·(1 + x·(1 - σ(x))) = σ + x·σ -
// x·σ², composed of public ops in x's element type: SiLU's backward
// multiplies the gradient by it.
func siluDerivative(x *Tensor) *Tensor {
	s := Sigmoid(x)
	xs := Mul(x, s)
	a := Add(s, xs)
	xss := Mul(xs, s)
	releaseAll(s, xs) // (four temporaries alive at most, not five)
	d := Sub(a, xss)
	releaseAll(a, xss)
	return d
}

// SwiGLU returns SiLU(g)·u, the gated product of a Llama MLP (PyTorch:
// silu(gate_proj(x)) * up_proj(x)), saving g and u only. Written as two
// ops, SiLU saves g and the product saves SiLU(g) and u: a third tensor
// of the MLP's hidden width a layer, for an elementwise kernel. Here
// backward computes SiLU(g) again from the saved g, as Liger's and
// llm.c's fused SwiGLU do, so forward saves a quarter less of the MLP's
// hidden activations (which the planner then need not offload, keep or
// recompute).
//
// Every value is bitwise that of SiLU then Mul, in both directions and
// in bfloat16 (widened or not; g and u of two types run as those ops): forward runs those two ops, unrecorded;
// backward runs Mul's and SiLU's backward ops in the same element types
// (TestSwiGLUIsSiLUThenMul).
func SwiGLU(g, u *Tensor) *Tensor {
	const op = "swiglu"
	if !slices.Equal(g.Shape(), u.Shape()) {
		panicf(op, "gate %v and up %v differ in shape", g.Shape(), u.Shape())
	}
	if g.DType() != u.DType() { // (their types' mix rounds SiLU's gradient where the ops would)
		s := SiLU(g)
		defer s.Release()
		return Mul(s, u)
	}
	tp := tapeOf(op, g, u)
	out := composite(tp, func() *Tensor {
		s := SiLU(g)
		defer s.Release()
		return Mul(s, u)
	})
	widened := isBF16(g) && !nativeBF16(g)
	record(tp, op, out, []*Tensor{g, u}, []*Tensor{g, u}, func(bk *backward) {
		gy, g, u := bk.Grad(), bk.Saved(0), bk.Saved(1)
		if bk.Needs(0) {
			var dg *Tensor
			if widened { // SiLU's backward ran in float32, rounded once
				gs := Mul(gy, u) // the product's gradient for SiLU(g), in its type
				dg = inFloat32(true, func(w []*Tensor) *Tensor {
					d := siluDerivative(w[1])
					defer d.Release()
					return Mul(w[0], d)
				}, gs, g)
				gs.Release()
			} else {
				// The derivative first, then the product's gradient:
				// no more of the hidden width alive at once than the two
				// ops' backward had.
				d := siluDerivative(g)
				gs := Mul(gy, u)
				dg = Mul(gs, d)
				releaseAll(d, gs)
			}
			bk.Accumulate(0, dg)
		}
		if bk.Needs(1) {
			s := SiLU(g) // rounded to g's type, as forward's product saw it
			bk.Accumulate(1, Mul(gy, s))
			s.Release()
		}
	})
	return out
}

// Softmax returns the softmax of x over its last axis.
func Softmax(x *Tensor) *Tensor { return softmax("softmax", x, false) }

// LogSoftmax returns the log of the softmax of x over its last axis,
// computed stably.
func LogSoftmax(x *Tensor) *Tensor { return softmax("log_softmax", x, true) }

func softmax(op string, x *Tensor, log bool) *Tensor {
	if isBF16(x) {
		return inFloat32(false, func(w []*Tensor) *Tensor { return softmax(op, w[0], log) }, x)
	}
	tp := tapeOf(op, x)
	floats32(op, x)
	if x.Rank() == 0 {
		panicf(op, "needs at least one dimension")
	}
	src := x
	if !x.IsContiguous() {
		src = x.contiguousCopy(nil)
		defer src.Release()
	}
	out := newOutput(tp, x.st.dev, x.shape)
	if out.st.block != nil {
		check(op, kernels(x).Softmax(out.view(), src.view(), log))
	}
	record(tp, op, out, []*Tensor{x}, []*Tensor{out}, func(bk *backward) {
		g := bk.Grad()
		if !g.IsContiguous() {
			g = g.contiguousCopy(bk.tape)
			defer g.Release()
		}
		y := bk.Saved(0)
		if !y.IsContiguous() { // a hook may bring it back with other strides
			y = y.contiguousCopy(nil)
			defer y.Release()
		}
		dx := newOutput(bk.tape, g.st.dev, g.shape)
		if dx.st.block != nil {
			check(op+"_backward", kernels(g).SoftmaxBackward(dx.view(), g.view(), y.view(), log))
		}
		bk.Accumulate(0, dx)
	})
	return out
}

// binaryNoBroadcast computes kop(a, b) for two tensors of one shape,
// without recording (for backward functions).
func binaryNoBroadcast(op string, kop device.BinaryOp, a, b *Tensor) *Tensor {
	if !slices.Equal(a.shape, b.shape) {
		panicf(op, "shapes %v and %v differ", a.shape, b.shape)
	}
	out, _ := binary(op, kop, a, b)
	return out
}

package ferry

import (
	"ferry/device"
)

// Element types and mixed precision.
//
// # bfloat16 in the tensor layer
//
// A tensor is float32, int32 or bfloat16. Matrix products take bfloat16
// operands on the device (float32 accumulation); every other op computes
// in float32 (Note [bfloat16] in package device). An op given a bfloat16
// input widens it into a float32 tensor, runs, and, where its rule says
// the result is bfloat16, rounds the result back: the bits of a kernel
// that loads bfloat16, computes in float32 and rounds its store, which is
// what PyTorch's bfloat16 kernels do.
//
// What autograd saves stays bfloat16: the widened float32 tensor knows
// the bfloat16 tensor it was widened from (widenedFrom), and saving it
// saves that tensor instead (Tape.pack); backward widens it again when the
// op asks for it (backward.Saved). So an op on a bfloat16 activation keeps
// half the bytes a float32 one would, whether it is written for bfloat16
// or not, and the float32 copies live only while the op runs. A view made
// of the widened tensor (a reshape) does not carry the link and is saved
// in float32: CrossEntropy's logits are, on purpose (see there).
//
// # The rules (PyTorch autocast's, with these choices)
//
//   - Matrix products (MatMul, Linear and its fused forms, attention) run
//     in bfloat16 inside Tape.Autocast: float32 operands are cast first —
//     parameters once per tape (Tape.castOf), activations at each use —
//     and the result is bfloat16. A Linear's bias is rounded to bfloat16
//     and added in float32 before the result's one rounding, as a bfloat16
//     addmm does; its gradient is float32 (the bias's own type).
//   - Layer and RMS norms, softmax, log-softmax, the losses, sums, means,
//     exp and log compute in float32 and return float32, whatever their
//     input (autocast's float32 list).
//   - Any other op returns bfloat16 when its floating inputs are all
//     bfloat16, and float32 when they mix (type promotion): the residual
//     stream x + dropout(proj(a)) is float32.
//   - A gradient has its tensor's type: a bfloat16 parameter copy's
//     gradient is bfloat16 and its cast's backward widens it into the
//     float32 parameter's gradient, as in PyTorch.

// Cast returns x converted to element type dt (PyTorch: x.to(dtype)):
// float32 to bfloat16 rounds to nearest, ties to even (NaN stays NaN);
// bfloat16 to float32 is exact. Casting to x's own type returns a new
// handle on x. Its gradient is the output's gradient cast back to x's type.
// A device without bfloat16 tensors panics with an *Error wrapping a
// *device.UnsupportedError.
func Cast(x *Tensor, dt device.DType) *Tensor {
	const op = "cast"
	tp := tapeOf(op, x)
	if x.dtype == dt {
		return x.Contiguous()
	}
	return castOn(tp, x, dt)
}

// floatType panics unless every non-nil t is float32 or bfloat16.
func floatType(op string, ts ...*Tensor) {
	for _, t := range ts {
		if t != nil && t.dtype != device.Float32 && t.dtype != device.BFloat16 {
			panicf(op, "%s is %s; this op takes float32 or bfloat16", t.describe(), t.dtype)
		}
	}
}

// checkDType panics unless dev holds tensors of type dt.
func checkDType(op string, dev device.Device, dt device.DType) {
	switch dt {
	case device.Float32, device.Int32:
		return
	case device.BFloat16:
		if _, ok := dev.Kernels().(device.ConvertKernels); ok {
			return
		}
	}
	panic(&Error{Op: op, Msg: "element type " + dt.String(),
		Err: &device.UnsupportedError{Op: op, DType: dt.String(), Device: dev.Name()}})
}

// convertInto writes src into dst (same shape, dst's elements distinct)
// with the device's Convert; a device without ConvertKernels holds no
// bfloat16 and panics with an *Error wrapping a *device.UnsupportedError.
func convertInto(op string, dst, src device.View, dev device.Device) {
	if dst.Numel() == 0 {
		return
	}
	ck, ok := dev.Kernels().(device.ConvertKernels)
	if !ok {
		panic(&Error{Op: op, Msg: src.DType.String() + " to " + dst.DType.String(),
			Err: &device.UnsupportedError{Op: "convert", DType: src.DType.String() + "→" + dst.DType.String(), Device: dev.Name()}})
	}
	check(op, ck.Convert(dst, src))
}

// plainCopy reports whether views of type dt copy with Copy (4-byte
// elements) rather than Convert.
func plainCopy(dt device.DType) bool { return dt == device.Float32 || dt == device.Int32 }

// widen returns a float32 copy of bfloat16 x on x's tape, recorded as a
// cast, that remembers x: saving it for backward saves x (Tape.pack).
// The caller releases it once the op that uses it has run.
func widen(x *Tensor) *Tensor {
	w := Cast(x, device.Float32)
	w.widenedFrom = x
	return w
}

// widenTemp returns a float32 copy of bfloat16 x with no autograd history
// on no tape, which the caller releases.
func widenTemp(x *Tensor) *Tensor {
	w := allocate(x.st.dev, device.Float32, device.Temporary, x.shape)
	convertInto("widen", w.view(), x.view(), x.st.dev)
	return w
}

// isBF16 reports whether some non-nil t is bfloat16.
func isBF16(ts ...*Tensor) bool {
	for _, t := range ts {
		if t != nil && t.dtype == device.BFloat16 {
			return true
		}
	}
	return false
}

// allBF16 reports whether every non-nil t is bfloat16 (and one is).
func allBF16(ts ...*Tensor) bool {
	seen := false
	for _, t := range ts {
		if t == nil {
			continue
		}
		if t.dtype != device.BFloat16 {
			return false
		}
		seen = true
	}
	return seen
}

// inFloat32 runs f on float32 versions of ts (bfloat16 ones widened, the
// others as they are) and returns its result, rounded to bfloat16 when
// narrow. Callers use it at the top of an op written for float32:
//
//	if isBF16(x) {
//		return inFloat32(narrow, func(w []*Tensor) *Tensor { return Op(w[0]) }, x)
//	}
func inFloat32(narrow bool, f func(ws []*Tensor) *Tensor, ts ...*Tensor) *Tensor {
	ws := make([]*Tensor, len(ts))
	var widened []*Tensor
	for i, t := range ts {
		if t != nil && t.dtype == device.BFloat16 {
			ws[i] = widen(t)
			widened = append(widened, ws[i])
			continue
		}
		ws[i] = t
	}
	y := f(ws)
	for _, w := range widened {
		w.widenedFrom = nil
		w.Release()
	}
	if !narrow || y.dtype != device.Float32 {
		return y
	}
	n := Cast(y, device.BFloat16)
	y.Release()
	return n
}

// Autocast runs f with matrix products in element type dt (PyTorch:
// torch.autocast(dtype=dt)): device.BFloat16 turns it on, device.Float32
// off; the rules are in this file's comment. Autocast regions nest; each
// restores the type around it when f returns. Backward runs each op in the
// types of its forward whatever the setting. Float16 is not supported.
func (tp *Tape) Autocast(dt device.DType, f func()) {
	const op = "autocast"
	tp.usable(op)
	switch dt {
	case device.Float32, device.BFloat16:
	default:
		panicf(op, "%s is not supported: mixed precision is bfloat16 (device.BFloat16) or off (device.Float32)", dt)
	}
	prev := tp.autocast
	tp.autocast = dt
	defer func() { tp.autocast = prev }()
	f()
}

// AutocastType is the element type matrix products run in on this tape
// (device.Float32 outside Autocast).
func (tp *Tape) AutocastType() device.DType { return tp.autocast }

// lowPrecision reports whether matrix products on tp run in bfloat16 now.
func (tp *Tape) lowPrecision() bool {
	return tp != nil && tp.autocast == device.BFloat16 && !tp.inBackward
}

// inBF16 runs f on ts as bfloat16 operands of an op on autocast's list,
// the counterpart of inFloat32: each is itself when bfloat16, the tape's
// cached copy for a parameter (a tensor on no tape, cast once per tape:
// castOf), or a new cast, released once f returns.
func (tp *Tape) inBF16(f func(bs []*Tensor) *Tensor, ts ...*Tensor) *Tensor {
	bs := make([]*Tensor, len(ts))
	for i, t := range ts {
		switch {
		case t == nil || t.dtype == device.BFloat16:
			bs[i] = t
		case t.tape == nil && t.node == nil:
			bs[i] = tp.castOf(t)
		default:
			bs[i] = Cast(t, device.BFloat16)
			defer bs[i].Release()
		}
	}
	return f(bs)
}

// castOf returns the tape's bfloat16 copy of parameter p, making it (a
// recorded cast, owned by the tape) on first use: the weights are cast
// once per tape (a step's forward and backward), not once per use, and the
// copies are freed with the tape. A parameter changed in place since is
// cast again.
func (tp *Tape) castOf(p *Tensor) *Tensor {
	key := castKey{st: p.st, offset: p.offset, shape: shapeKey(p.shape), strides: shapeKey(p.strides),
		recorded: tp.recording() && p.requiresGrad}
	if e, ok := tp.casts[key]; ok && !e.t.released && e.version == p.st.version {
		return e.t
	}
	if tp.casts == nil {
		tp.casts = map[castKey]castEntry{}
	}
	var c *Tensor
	if tp.castSource != nil {
		if low := tp.castSource(p); low != nil {
			c = castFrom(tp, p, low)
		}
	}
	if c == nil {
		c = castOn(tp, p, device.BFloat16)
	}
	tp.casts[key] = castEntry{t: c, version: p.st.version}
	return c
}

// castOn is Cast with the output on tape tp even when x is on none (a
// parameter), recorded there.
func castOn(tp *Tape, x *Tensor, dt device.DType) *Tensor {
	const op = "cast"
	x.use(op)
	floatType(op, x)
	checkDType(op, x.st.dev, dt)
	out := newOutputOf(tp, x.st.dev, dt, x.shape)
	convertInto(op, out.view(), x.view(), x.st.dev)
	from := x.dtype
	record(tp, op, out, []*Tensor{x}, nil, func(bk *backward) {
		bk.Accumulate(0, Cast(bk.Grad(), from))
	})
	return out
}

// castFrom records low, the bfloat16 copy of p's storage that the
// tape's cast source handed out, as p's cast on tp: a handle on low's
// storage with p's layout (offsets and strides count elements, so the
// view picks the same elements), owned by the tape.
func castFrom(tp *Tape, p, low *Tensor) *Tensor {
	const op = "cast"
	p.live(op)
	low.live(op)
	end := p.offset + 1 // one past the last element p's view reaches
	for i, d := range p.shape {
		if d == 0 {
			end = 0
			break
		}
		end += (d - 1) * p.strides[i]
	}
	switch {
	case low.dtype != device.BFloat16 || low.st.dev != p.st.dev || low.tape != nil ||
		!low.IsContiguous() || low.offset != 0 || low.Numel() < end:
		panicf(op, "the cast source gave %s for %s: want a bfloat16 tensor of at least %d elements on %s, contiguous, on no tape",
			low.describe(), p.describe(), end, p.st.dev.Name())
	}
	out := low.handle(tp)
	out.shape, out.strides, out.offset = cloneShape(p.shape), cloneShape(p.strides), p.offset
	from := p.dtype
	record(tp, op, out, []*Tensor{p}, nil, func(bk *backward) {
		bk.Accumulate(0, Cast(bk.Grad(), from))
	})
	return out
}

// castKey names a parameter view for the cast cache; recorded tells a
// copy made where autograd records (its gradient reaches the parameter)
// from one made under NoGrad.
type castKey struct {
	st             *storage
	offset         int
	shape, strides string
	recorded       bool
}

type castEntry struct {
	t       *Tensor
	version uint32
}

func shapeKey(s []int) string {
	b := make([]byte, 0, 8*len(s))
	for _, v := range s {
		for i := 0; i < 64; i += 8 {
			b = append(b, byte(v>>i))
		}
	}
	return string(b)
}

// copyInto writes src into dst (contiguous, same shape), converting
// between element types where they differ.
func copyInto(op string, dev device.Device, dst, src device.View) {
	if plainCopy(dst.DType) && dst.DType == src.DType {
		check(op, dev.Kernels().Copy(dst, src))
		return
	}
	convertInto(op, dst, src, dev)
}

// scaleView sets v = beta·v (beta 0: zeros, never reading v), for a
// float32 or bfloat16 view.
func scaleView(op string, dev device.Device, v device.View, beta float32) {
	k := dev.Kernels()
	if v.DType == device.Float32 {
		if beta == 0 {
			check(op, k.Fill(v, 0))
		} else if beta != 1 {
			check(op, k.Unary(device.Scale, v, v, beta))
		}
		return
	}
	if beta == 1 {
		return
	}
	w := allocate(dev, device.Float32, device.Temporary, v.Shape)
	defer w.Release()
	wv := w.view()
	if beta == 0 {
		check(op, k.Fill(wv, 0))
	} else {
		convertInto(op, wv, v, dev)
		check(op, k.Unary(device.Scale, wv, wv, beta))
	}
	convertInto(op, v, wv, dev)
}

// linearInPrecision runs Linear (or its fused form f) in the precision
// its operands and the tape call for, and reports whether it did:
// under autocast with bfloat16 x and weight (the weight a parameter's
// cached copy, the bias left float32: Linear rounds it into the output);
// in float32 when x and weight are of two types.
func linearInPrecision(tp *Tape, x, weight, bias *Tensor, f func(x, w, b *Tensor) *Tensor) (*Tensor, bool) {
	if tp.lowPrecision() && !allBF16(x, weight) {
		return tp.inBF16(func(b []*Tensor) *Tensor { return f(b[0], b[1], bias) }, x, weight), true
	}
	if x.dtype != weight.dtype {
		return inFloat32(false, func(w []*Tensor) *Tensor { return f(w[0], w[1], bias) }, x, weight), true
	}
	return nil, false
}

// nativeBF16 reports whether the device of ts (the first non-nil one)
// computes elementwise ops on bfloat16 views in one pass
// (device.ElementwiseBF16Kernels), so that an op need not widen.
func nativeBF16(ts ...*Tensor) bool {
	if widenAlways {
		return false
	}
	for _, t := range ts {
		if t != nil {
			return device.TakesElementwiseBF16(t.st.dev.Kernels())
		}
	}
	return false
}

// widenAlways makes every op widen its bfloat16 inputs, as on a device
// without ElementwiseBF16, for tests that check the two ways give the
// same bits (set through export_test.go).
var widenAlways bool

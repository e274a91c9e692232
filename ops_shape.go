package ferry

import (
	"ferry/device"
)

// Views and copies: Reshape and Transpose share storage where they can;
// Contiguous, Clone and To copy.

// Reshape returns x with a new shape of the same number of elements; one
// dimension may be -1 and is then inferred. The result is a view (shared
// storage) when x is contiguous, a copy otherwise.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	tp := tapeOf("reshape", t)
	shape = inferShape(t, shape)
	var out *Tensor
	if t.IsContiguous() {
		out = t.handle(tp)
		out.shape, out.strides = shape, device.Contiguous(shape)
	} else if st, ok := viewStrides(t.shape, t.strides, shape); ok {
		// A view after all (splitting the last axis of a narrowed tensor,
		// as nanoGPT's q.view(B, T, H, D) does): no copy.
		out = t.handle(tp)
		out.shape, out.strides = shape, st
	} else {
		out = t.contiguousCopy(tp)
		out.shape, out.strides = shape, device.Contiguous(shape)
	}
	inShape := t.shape
	record(tp, "reshape", out, []*Tensor{t}, nil, func(bk *backward) {
		bk.Accumulate(0, bk.Grad().Reshape(inShape...))
	})
	return out
}

func inferShape(t *Tensor, shape []int) []int {
	shape = cloneShape(shape)
	infer, known := -1, 1
	for i, d := range shape {
		switch {
		case d == -1 && infer == -1:
			infer = i
		case d < 0:
			panicf("reshape", "bad shape %v for %s", shape, t.describe())
		default:
			known *= d
		}
	}
	n := t.Numel()
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			panicf("reshape", "cannot reshape %s into %v", t.describe(), shape)
		}
		shape[infer] = n / known
	}
	if m, _, err := device.ShapeBytes(shape, 1); err != nil || m != n { // checked: a product may wrap around to n
		panicf("reshape", "cannot reshape %s (%d elements) into %v", t.describe(), n, shape)
	}
	return shape
}

// Transpose returns a view of x with axes a and b swapped.
func (t *Tensor) Transpose(a, b int) *Tensor {
	tp := tapeOf("transpose", t)
	a, b = t.axis("transpose", a), t.axis("transpose", b)
	out := t.handle(tp)
	out.shape, out.strides = cloneShape(t.shape), cloneShape(t.strides)
	out.shape[a], out.shape[b] = out.shape[b], out.shape[a]
	out.strides[a], out.strides[b] = out.strides[b], out.strides[a]
	record(tp, "transpose", out, []*Tensor{t}, nil, func(bk *backward) {
		bk.Accumulate(0, bk.Grad().Transpose(a, b))
	})
	return out
}

// T returns a view of x with its last two axes swapped.
func (t *Tensor) T() *Tensor {
	if t.Rank() < 2 {
		panicf("t", "%s has fewer than two axes", t.describe())
	}
	return t.Transpose(-2, -1)
}

// Contiguous returns x laid out row-major: a new handle on the same storage
// when it already is, a copy otherwise.
func (t *Tensor) Contiguous() *Tensor {
	tp := tapeOf("contiguous", t)
	if t.IsContiguous() {
		out := t.handle(tp)
		record(tp, "contiguous", out, []*Tensor{t}, nil, func(bk *backward) { bk.Pass(0, bk.Grad()) })
		return out
	}
	return t.Clone()
}

// Clone returns a contiguous copy of x.
func (t *Tensor) Clone() *Tensor {
	tp := tapeOf("clone", t)
	out := t.contiguousCopy(tp)
	record(tp, "clone", out, []*Tensor{t}, nil, func(bk *backward) { bk.Pass(0, bk.Grad()) })
	return out
}

// To returns a copy of x on dev: the device's host, a device whose host x
// is on, or any device through host memory. On x's own device it returns a
// new handle, as PyTorch's .to() returns the tensor itself. The copy is
// synchronous and recorded, so gradients flow back to x's device.
func (t *Tensor) To(dev device.Device) *Tensor {
	tp := tapeOf("to", t)
	src := t.st.dev
	if dev == src {
		out := t.handle(tp)
		record(tp, "to", out, []*Tensor{t}, nil, func(bk *backward) { bk.Pass(0, bk.Grad()) })
		return out
	}
	c := t
	if !t.IsContiguous() {
		c = t.contiguousCopy(nil)
		defer c.Release()
	}
	out := newOutputOf(tp, dev, t.dtype, t.shape)
	if out.st.block != nil {
		copyAcross(c, out)
	}
	record(tp, "to", out, []*Tensor{t}, nil, func(bk *backward) {
		bk.Accumulate(0, bk.Grad().To(src))
	})
	return out
}

// copyAcross copies contiguous src into dst on another device and waits.
func copyAcross(src, dst *Tensor) {
	n := src.Bytes()
	sd, dd := src.st.dev, dst.st.dev
	sspan := device.Span{Block: src.st.block, Off: int64(src.offset * src.dtype.Size()), Len: n}
	dspan := device.Span{Block: dst.st.block, Off: int64(dst.offset * dst.dtype.Size()), Len: n}
	var owner device.Device
	switch {
	case sd.Host() == dd:
		owner = sd
	case dd.Host() == sd:
		owner = dd
	}
	if owner != nil {
		s := owner.Compute()
		check("to", owner.Copy(s, dspan, sspan))
		check("to", s.Synchronize())
		return
	}
	// Unrelated devices: through a Go buffer.
	buf := make([]byte, n)
	src.download(buf)
	dst.upload(buf)
}

// viewStrides gives the strides under which newShape views the elements of
// a tensor of shape and strides in the same row-major order, if any exist
// (PyTorch's computeStride): each run of axes that is contiguous in memory
// may be split or merged freely.
func viewStrides(shape, strides, newShape []int) ([]int, bool) {
	n := device.Numel(shape)
	if n == 0 || len(shape) == 0 {
		return device.Contiguous(newShape), true
	}
	out := make([]int, len(newShape))
	viewD := len(newShape) - 1
	chunkBase := strides[len(shape)-1]
	tensorNumel, viewNumel := 1, 1
	for d := len(shape) - 1; d >= 0; d-- {
		tensorNumel *= shape[d]
		if d == 0 || (shape[d-1] != 1 && strides[d-1] != tensorNumel*chunkBase) {
			for viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] == 1) {
				out[viewD] = viewNumel * chunkBase
				viewNumel *= newShape[viewD]
				viewD--
			}
			if viewNumel != tensorNumel {
				return nil, false
			}
			if d > 0 {
				chunkBase, tensorNumel, viewNumel = strides[d-1], 1, 1
			}
		}
	}
	return out, viewD == -1
}

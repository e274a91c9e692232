package ferry

import (
	"ferry/device"
)

// Slicing and joining: Narrow, Split and Permute are views of their input
// (no copy); Cat copies into one new tensor.

// Narrow returns a view of length elements of t along dim, starting at
// start (PyTorch: Tensor.narrow; wpe[:T] is Narrow(0, 0, T)). Backward
// places the gradient into a zero tensor of t's shape.
func (t *Tensor) Narrow(dim, start, length int) *Tensor {
	const op = "narrow"
	tp := tapeOf(op, t)
	dim = t.axis(op, dim)
	if start < 0 || length < 0 || start > t.shape[dim]-length {
		panicf(op, "[%d, %d+%d) is outside axis %d of %s (size %d)", start, start, length, dim, t.describe(), t.shape[dim])
	}
	out := t.handle(tp)
	out.shape, out.strides = cloneShape(t.shape), cloneShape(t.strides)
	out.shape[dim] = length
	if length > 0 {
		out.offset += start * t.strides[dim]
	}
	inShape, dev := t.shape, t.st.dev
	record(tp, op, out, []*Tensor{t}, nil, func(bk *backward) {
		dx := newOutput(bk.tape, dev, inShape)
		if dx.st.block != nil {
			check(op+"_backward", dev.Kernels().Fill(dx.view(), 0))
			region := dx.view()
			region.Shape = cloneShape(inShape)
			region.Shape[dim] = length
			region.Off += start * region.Strides[dim]
			copyRegion(op+"_backward", dev, region, bk.Grad().view())
		}
		bk.Accumulate(0, dx)
	})
	return out
}

// Split cuts t along dim into pieces of size elements (the last may be
// shorter), as views (PyTorch: Tensor.split with an int). nanoGPT's
// q, k, v = c_attn(x).split(C, dim=2) is Split(C, 2).
func (t *Tensor) Split(size, dim int) []*Tensor {
	const op = "split"
	d := t.axis(op, dim)
	if size <= 0 {
		panicf(op, "piece size must be positive, got %d", size)
	}
	n := t.shape[d]
	var pieces []*Tensor
	for s := 0; s < n || (n == 0 && s == 0); s += size {
		pieces = append(pieces, t.Narrow(d, s, min(size, n-s)))
		if n == 0 {
			break
		}
	}
	return pieces
}

// Permute returns a view of t with its axes reordered: axis i of the
// result is axis dims[i] of t (PyTorch: Tensor.permute).
func (t *Tensor) Permute(dims ...int) *Tensor {
	const op = "permute"
	tp := tapeOf(op, t)
	if len(dims) != t.Rank() {
		panicf(op, "%d axes given for %s", len(dims), t.describe())
	}
	seen := make([]bool, t.Rank())
	perm := make([]int, len(dims))
	for i, d := range dims {
		d = t.axis(op, d)
		if seen[d] {
			panicf(op, "axis %d repeated in %v", d, dims)
		}
		seen[d], perm[i] = true, d
	}
	out := t.handle(tp)
	out.shape, out.strides = make([]int, len(perm)), make([]int, len(perm))
	for i, d := range perm {
		out.shape[i], out.strides[i] = t.shape[d], t.strides[d]
	}
	record(tp, op, out, []*Tensor{t}, nil, func(bk *backward) {
		inv := make([]int, len(perm))
		for i, d := range perm {
			inv[d] = i
		}
		bk.Accumulate(0, bk.Grad().Permute(inv...))
	})
	return out
}

// Cat joins tensors of one shape except along dim into a new contiguous
// tensor (PyTorch: torch.cat). Backward hands each input its slice of the
// gradient, as a view.
func Cat(dim int, ts ...*Tensor) *Tensor {
	const op = "cat"
	if len(ts) == 0 {
		panicf(op, "no tensors to join")
	}
	tp := tapeOf(op, ts...)
	dev := sameDevice(op, ts...)
	first := ts[0]
	d := first.axis(op, dim)
	shape := cloneShape(first.shape)
	shape[d] = 0
	for _, t := range ts {
		if t.Rank() != first.Rank() || t.dtype != first.dtype {
			panicf(op, "cannot join %s and %s", first.describe(), t.describe())
		}
		for i := range shape {
			if i != d && t.shape[i] != first.shape[i] {
				panicf(op, "shapes %v and %v differ outside axis %d", first.shape, t.shape, d)
			}
		}
		shape[d] += t.shape[d]
	}
	out := newOutputOf(tp, dev, first.dtype, shape)
	starts := make([]int, len(ts))
	if out.st.block != nil {
		at := 0
		for i, t := range ts {
			starts[i] = at
			if t.Numel() > 0 {
				region := out.view()
				region.Shape = cloneShape(t.shape)
				region.Off += at * region.Strides[d]
				copyRegion(op, dev, region, t.view())
			}
			at += t.shape[d]
		}
	} else {
		at := 0
		for i, t := range ts {
			starts[i], at = at, at+t.shape[d]
		}
	}
	record(tp, op, out, ts, nil, func(bk *backward) {
		g := bk.Grad()
		for i, t := range ts {
			if bk.Needs(i) {
				bk.Accumulate(i, g.Narrow(d, starts[i], t.shape[d]))
			}
		}
	})
	return out
}

// copyRegion copies src into dst, a view of a contiguous block with any
// strides: in one call where the device copies into strided views
// (device.StridedCopyKernels), else as a few contiguous copies: the largest trailing run of axes
// that is contiguous in dst goes in one Copy call per index of the axes
// before it.
func copyRegion(op string, dev device.Device, dst, src device.View) {
	if dst.Numel() == 0 {
		return
	}
	if !plainCopy(dst.DType) || dst.DType != src.DType {
		convertInto(op, dst, src, dev)
		return
	}
	if sk, ok := dev.Kernels().(device.StridedCopyKernels); ok {
		check(op, sk.CopyStrided(dst, src))
		return
	}
	r := len(dst.Shape)
	// k: the first axis of the contiguous trailing run.
	k, s := r, 1
	for k > 0 && (dst.Shape[k-1] == 1 || dst.Strides[k-1] == s) {
		s *= dst.Shape[k-1]
		k--
	}
	inner := device.View{Block: dst.Block, Shape: dst.Shape[k:], Strides: device.Contiguous(dst.Shape[k:])}
	sub := device.View{Block: src.Block, Shape: src.Shape[k:], Strides: src.Strides[k:]}
	idx := make([]int, k)
	for {
		inner.Off, sub.Off = dst.Off, src.Off
		for i, v := range idx {
			inner.Off += v * dst.Strides[i]
			sub.Off += v * src.Strides[i]
		}
		check(op, dev.Kernels().Copy(inner, sub))
		i := k - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < dst.Shape[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

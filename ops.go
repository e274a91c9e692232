package ferry

import (
	"ferry/device"
)

// Helpers shared by the op families (ops_*.go). Each op follows one shape:
//
//	tp := tapeOf(op, inputs...)        // the tape, checks the inputs are usable
//	out := newOutput(tp, dev, shape)    // allocate; the tape owns it if there is one
//	kernels...                          // compute
//	record(tp, op, out, inputs, saved, func(b *backward) {...})
//
// with the backward function written right there, beside the forward.

// newOutput allocates an op's float32 output. On a tape, the tape owns it
// and, during backward, its bytes count as gradient.
func newOutput(tp *Tape, dev device.Device, shape []int) *Tensor {
	return newOutputOf(tp, dev, device.Float32, shape)
}

func newOutputOf(tp *Tape, dev device.Device, dtype device.DType, shape []int) *Tensor {
	cat := device.Activation
	if tp != nil && tp.inBackward {
		cat = device.Gradient
	}
	t := allocate(dev, dtype, cat, shape)
	if tp != nil {
		tp.own(t)
	}
	return t
}

// temporary allocates scratch the caller releases before returning.
func temporary(dev device.Device, shape []int) *Tensor {
	return allocate(dev, device.Float32, device.Temporary, shape)
}

// record records op on tp when tp is recording (see Tape.record).
func record(tp *Tape, op string, out *Tensor, inputs []*Tensor, save []*Tensor, bw func(*backward)) {
	if tp == nil {
		return
	}
	if tp.recording() {
		tp.record(op, out, inputs, save, bw)
	} else if tp.recordHook != nil && !tp.inBackward {
		tp.recordHook(op, inputs) // under NoGrad too: the op is done with its inputs
	}
}

func kernels(t *Tensor) device.Kernels { return t.st.dev.Kernels() }

// composite runs f with recording off on tp (if any): its ops save nothing
// and their outputs carry no history; the caller records the result.
func composite(tp *Tape, f func() *Tensor) *Tensor {
	if tp == nil {
		return f()
	}
	var out *Tensor
	tp.NoGrad(func() { out = f() })
	return out
}

// contiguousCopy returns a contiguous copy of t owned by tp (nil: the
// caller), with no autograd history.
func (t *Tensor) contiguousCopy(tp *Tape) *Tensor {
	c := newOutputOf(tp, t.st.dev, t.dtype, t.shape)
	if c.st.block != nil {
		copyInto("copy", t.st.dev, c.view(), t.view())
	}
	return c
}

// broadcastShapes returns the shape a and b broadcast to, NumPy style.
func broadcastShapes(op string, a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			panicf(op, "shapes %v and %v do not broadcast (dimension %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return out
}

// broadcastView returns t's view stretched to shape: leading dimensions
// added and size-1 dimensions given stride 0.
func (t *Tensor) broadcastView(shape []int) device.View {
	v := device.View{Block: t.st.block, Off: t.offset, Shape: shape, Strides: make([]int, len(shape)), DType: t.dtype}
	lead := len(shape) - len(t.shape)
	for i := range t.shape {
		if t.shape[i] != 1 {
			v.Strides[lead+i] = t.strides[i]
		}
	}
	return v
}

// sumTo sums g down to shape (the shape of an input that was broadcast to
// g's), returning a new float32 tensor on g's tape (a bfloat16 g is summed
// in float32).
func sumTo(g *Tensor, shape []int) *Tensor {
	tp := g.tape
	if g.dtype == device.BFloat16 && !nativeBF16(g) {
		w := widenTemp(g)
		defer w.Release()
		g = w
	}
	lead := len(g.shape) - len(shape)
	keep := make([]int, len(g.shape)) // g's rank, 1 where summed
	for i := range g.shape {
		if i < lead || shape[i-lead] == 1 {
			keep[i] = 1
		} else {
			keep[i] = g.shape[i]
		}
	}
	out := newOutput(tp, g.st.dev, shape)
	switch {
	case out.st.block == nil:
	case g.st.block == nil: // broadcast over an empty axis: nothing to add
		check("sum_to", kernels(g).Fill(out.view(), 0))
	default:
		v := out.view()
		v.Shape, v.Strides = keep, device.Contiguous(keep)
		check("sum_to", kernels(g).Sum(v, g.view(), 1))
	}
	return out
}

// releaseAll releases each tensor of ts that is not nil.
func releaseAll(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Release()
		}
	}
}

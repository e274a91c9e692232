package ferry

import (
	"fmt"

	"ferry/device"
)

// IgnoreIndex is the target class that CrossEntropy and NLLLoss skip, as
// PyTorch's default ignore_index.
const IgnoreIndex = -100

// family returns dev's kernels as the optional family F, or panics with an
// *Error wrapping device.ErrNotSupported that names the family.
func family[F any](op, name string, dev device.Device) F {
	f, ok := dev.Kernels().(F)
	if !ok {
		panic(&Error{Op: op, Msg: fmt.Sprintf("device %s has no %s kernels yet", dev.Name(), name), Err: device.ErrNotSupported})
	}
	return f
}

// contiguousInput returns t, or a contiguous copy of it (off any tape) with
// the function that releases the copy.
func contiguousInput(t *Tensor) (*Tensor, func()) {
	if t.IsContiguous() {
		return t, func() {}
	}
	c := t.contiguousCopy(nil)
	return c, c.Release
}

// Embedding returns the rows of weight [V, C] picked by int32 indices of
// any shape: [..., C] (PyTorch: nn.functional.embedding). An index outside
// [0, V) is an *Error naming it. It saves the indices; backward adds each
// output row's gradient into its weight row, in index order, so repeated
// indices sum deterministically.
func Embedding(weight, indices *Tensor) *Tensor {
	if isBF16(weight, indices) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Embedding(w[0], w[1]) }, weight, indices)
	}
	const op = "embedding"
	tp := tapeOf(op, weight, indices)
	dev := sameDevice(op, weight, indices)
	floats32(op, weight)
	if indices.dtype != device.Int32 {
		panicf(op, "indices are %s; token indices are int32 (FromInt32s)", indices.dtype)
	}
	if weight.Rank() != 2 {
		panicf(op, "weight must be [num_embeddings, dim], got %v", weight.shape)
	}
	V, C := weight.shape[0], weight.shape[1]
	out := newOutput(tp, dev, append(cloneShape(indices.shape), C))
	if out.st.block != nil {
		ek := family[device.EmbeddingKernels](op, "embedding", dev)
		w, rw := contiguousInput(weight)
		idx, ri := contiguousInput(indices)
		check(op, ek.Gather(out.view(), w.view(), idx.view()))
		rw()
		ri()
	}
	record(tp, op, out, []*Tensor{weight, indices}, []*Tensor{indices}, func(bk *backward) {
		if !bk.Needs(0) {
			return
		}
		g, rg := contiguousInput(bk.Grad())
		defer rg()
		idx, ri := contiguousInput(bk.Saved(0))
		defer ri()
		dw := newOutput(bk.tape, dev, []int{V, C})
		if dw.st.block != nil {
			check(op+"_backward", dev.Kernels().Fill(dw.view(), 0))
			if g.st.block != nil {
				check(op+"_backward", family[device.EmbeddingKernels](op, "embedding", dev).ScatterAdd(dw.view(), g.view(), idx.view()))
			}
		}
		bk.Accumulate(0, dw)
	})
	return out
}

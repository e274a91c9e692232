package ferry

import (
	"unsafe"

	"ferry/device"
)

// DropoutKey names one draw of dropout masks: the seed of the run, a
// stable id of the op that draws (nn derives it from the module path) and
// the training step. The mask is a pure function of the key and the
// element's index (Philox-4×32-10, see device.DropoutKeep), so a forward
// replayed with the same key — activation recomputation — draws the same
// mask, on every device.
type DropoutKey = device.DropoutKey

// Dropout zeroes each element of x with probability p and scales the
// others by 1/(1-p) (inverted dropout, PyTorch's nn.functional.dropout in
// training). It saves nothing: backward draws the same mask again from the
// key. p = 0 returns a new handle to x's values; p = 1 returns zeros.
func Dropout(x *Tensor, p float32, key DropoutKey) *Tensor {
	if p == 0 {
		return x.Contiguous()
	}
	if isBF16(x) && !nativeBF16(x) {
		return inFloat32(true, func(w []*Tensor) *Tensor { return Dropout(w[0], p, key) }, x)
	}
	const op = "dropout"
	tp := tapeOf(op, x)
	floatType(op, x)
	if !(p >= 0 && p <= 1) {
		panicf(op, "probability must be in [0, 1], got %v", p)
	}
	dev := x.st.dev
	out := newOutputOf(tp, dev, x.dtype, x.shape)
	if out.st.block != nil {
		xc, rx := contiguousInput(x)
		dropoutInto(op, out, xc, p, key)
		rx()
	}
	record(tp, op, out, []*Tensor{x}, nil, func(bk *backward) {
		g, rg := contiguousInput(bk.Grad())
		defer rg()
		dx := newOutputOf(bk.tape, dev, g.dtype, g.shape)
		if dx.st.block != nil {
			dropoutInto(op+"_backward", dx, g, p, key)
		}
		bk.Accumulate(0, dx)
	})
	return out
}

// dropoutInto writes dropout of src (contiguous) into dst, through the
// device's DropoutKernels or, without them, a mask drawn on the host.
func dropoutInto(op string, dst, src *Tensor, p float32, key DropoutKey) {
	dev := dst.st.dev
	if dk, ok := dev.Kernels().(device.DropoutKernels); ok {
		check(op, dk.Dropout(dst.view(), src.view(), p, key))
		return
	}
	mask := dropoutMask(dev, src.shape, p, key)
	defer mask.Release()
	check(op, dev.Kernels().Binary(device.Mul, dst.view(), src.view(), mask.view()))
}

// dropoutMask is the mask of keep/(1-p) factors drawn on the host and
// uploaded, for devices without DropoutKernels.
func dropoutMask(dev device.Device, shape []int, p float32, key DropoutKey) *Tensor {
	m := allocate(dev, device.Float32, device.Temporary, shape)
	if m.st.block == nil || !device.HasData(dev) {
		return m
	}
	n := m.Numel()
	vals := make([]float32, n)
	scale := 1 / (1 - p)
	for i := range vals {
		if device.DropoutKeep(key, p, uint64(i)) {
			vals[i] = scale
		}
	}
	m.upload(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), 4*n))
	return m
}

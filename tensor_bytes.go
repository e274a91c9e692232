package ferry

import "ferry/device"

// Tensors of other element types than float32 made from host data, and
// zeroed tensors of any type: an optimizer's quantised state is uint8
// codes beside float32 scales (package optim). A uint8 tensor is moved by
// the device's Upload and Download only; no op computes on it.

// ZerosOf returns a tensor of zeros of dtype, its memory counted as cat.
// Float32 zeros are the device's Fill; other types go up from the host in
// pieces of at most 4 MiB. On a device that holds no data nothing moves.
func ZerosOf(dev device.Device, dtype device.DType, cat device.Category, shape ...int) *Tensor {
	if dtype == device.Float32 {
		return fullAs(dev, cat, 0, shape)
	}
	t := allocate(dev, dtype, cat, shape)
	if t.st.block == nil || !device.HasData(dev) {
		return t
	}
	size := dtype.Size()
	n := t.Numel()
	piece := min(n, 4*stagingElems/size)
	zeros := make([]byte, piece*size)
	for off := 0; off < n; off += piece {
		m := min(piece, n-off)
		v := device.View{Block: t.st.block, Off: off, Shape: []int{m}, Strides: []int{1}, DType: dtype}
		if err := dev.Kernels().Upload(v, zeros[:m*size]); err != nil {
			t.Release()
			check("zeros", err)
		}
	}
	return t
}

// EmptyOf returns an uninitialised tensor of dtype, its memory counted as
// cat, for a caller that fills every element (a copy's destination).
func EmptyOf(dev device.Device, dtype device.DType, cat device.Category, shape ...int) *Tensor {
	return allocate(dev, dtype, cat, shape)
}

// FromUint8s copies data into a new uint8 tensor of the given shape (a
// vector of len(data) when shape is empty), counted as cat.
func FromUint8s(dev device.Device, cat device.Category, data []uint8, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	if n := checkedNumel("from_uint8s", shape, 1); n != len(data) {
		panicf("from_uint8s", "%d values for shape %v (%d elements)", len(data), shape, n)
	}
	t := allocate(dev, device.Uint8, cat, shape)
	t.upload(data)
	return t
}

// Uint8s copies a contiguous uint8 tensor's elements to a new slice.
func (t *Tensor) Uint8s() []uint8 {
	t.use("uint8s")
	if t.dtype != device.Uint8 {
		panicf("uint8s", "%s is %s", t.describe(), t.dtype)
	}
	if !device.HasData(t.st.dev) {
		panicf("uint8s", "%s is on %s, which holds no values", t.describe(), t.st.dev.Name())
	}
	if !t.IsContiguous() {
		panicf("uint8s", "%s is not contiguous", t.describe())
	}
	out := make([]uint8, t.Numel())
	t.download(out)
	return out
}

// RawBytes copies a contiguous tensor's memory, of any element type, to a
// new slice (little-endian, as the device holds it).
func (t *Tensor) RawBytes() []byte {
	t.use("raw_bytes")
	if !device.HasData(t.st.dev) {
		panicf("raw_bytes", "%s is on %s, which holds no values", t.describe(), t.st.dev.Name())
	}
	if !t.IsContiguous() {
		panicf("raw_bytes", "%s is not contiguous", t.describe())
	}
	out := make([]byte, t.Bytes())
	t.download(out)
	return out
}

// SetRawBytes overwrites a contiguous tensor's memory with b, which holds
// exactly its bytes (as RawBytes gives them), and counts an in-place
// change.
func (t *Tensor) SetRawBytes(b []byte) {
	t.use("set_raw_bytes")
	if t.requiresGrad && t.tape != nil && t.tape.recording() {
		panicf("set_raw_bytes", "%s requires grad on a recording tape; in-place changes are not differentiable", t.describe())
	}
	if !t.IsContiguous() || int64(len(b)) != t.Bytes() {
		panicf("set_raw_bytes", "%d bytes into %s (want %d, contiguous)", len(b), t.describe(), t.Bytes())
	}
	t.upload(b)
	t.st.bumpVersion("set_raw_bytes")
}

package standin_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"ferry/device"
)

// The kernels that take bfloat16 views (device.ElementwiseBF16Kernels),
// from source: each launch with bfloat16 operands must give the bits of
// its definition on the same device (Convert the bfloat16 inputs into
// float32, run the float32 kernel, Convert the result into a bfloat16
// dst), as devicetest's ElementwiseBF16 asks; the float32 kernels are
// compared with the CPU device by their own cases.

// bf16Mixes are the operand types of a kernel with nops operands, each a
// bit of TYPE_BF16 (0: dst): every combination with a bfloat16 operand.
func bf16Mixes(nops int) [][]device.DType {
	var out [][]device.DType
	for m := 1; m < 1<<nops; m++ {
		ts := make([]device.DType, nops)
		for i := range ts {
			ts[i] = device.Float32
			if m>>i&1 != 0 {
				ts[i] = device.BFloat16
			}
		}
		out = append(out, ts)
	}
	return out
}

// typed is a storage of size elements of dt on the CUDA device, from vals
// (rounded when dt is bfloat16), viewed with shape and strides.
func (p *kpair) typed(dt device.DType, vals []float32, shape, strides []int) device.View {
	p.Helper()
	raw := make([]byte, dt.Size()*max(len(vals), 1))
	for i, v := range vals {
		if dt == device.BFloat16 {
			binary.LittleEndian.PutUint16(raw[2*i:], device.ToBFloat16(v))
		} else {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	}
	b, err := p.dev.Allocator().Alloc(int64(len(raw)), device.Activation)
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { p.dev.Allocator().Free(b) })
	v := device.View{Block: b, DType: dt, Shape: shape, Strides: strides}
	if err := p.dev.Kernels().Upload(device.View{Block: b}, raw); err != nil {
		p.Fatal(err)
	}
	return v
}

// widened is v when float32, else a contiguous float32 copy by Convert.
func (p *kpair) widened(v device.View) device.View {
	p.Helper()
	if v.DType != device.BFloat16 {
		return v
	}
	w := p.typed(device.Float32, make([]float32, v.Numel()), v.Shape, device.Contiguous(v.Shape))
	if err := p.dev.Kernels().(device.ConvertKernels).Convert(w, v); err != nil {
		p.Fatal(err)
	}
	return w
}

func (p *kpair) bytesOf(v device.View) []byte {
	p.Helper()
	raw := make([]byte, v.Numel()*v.DType.Size())
	if err := p.dev.Kernels().Download(raw, v); err != nil {
		p.Fatal(err)
	}
	return raw
}

// checkBF16 runs kernel into a dst of type dt and the reference (the float32
// kernel on widened inputs) into a float32 temporary, rounds that by
// Convert where dt is bfloat16, and compares the bits.
func (p *kpair) checkBF16(what string, dt device.DType, shape []int, ref, kernel func(d device.View) error) {
	p.Helper()
	n := device.Numel(shape)
	dst := p.typed(dt, p.randoms(n, -9, 9), shape, device.Contiguous(shape))
	t := p.typed(device.Float32, make([]float32, n), shape, device.Contiguous(shape))
	if err := ref(t); err != nil {
		p.Fatalf("%s: the float32 reference: %v", what, err)
	}
	want := t
	if dt == device.BFloat16 {
		want = p.typed(device.BFloat16, make([]float32, n), shape, device.Contiguous(shape))
		if err := p.dev.Kernels().(device.ConvertKernels).Convert(want, t); err != nil {
			p.Fatal(err)
		}
	}
	if err := kernel(dst); err != nil {
		p.Fatalf("%s: %v", what, err)
	}
	got, exp := p.bytesOf(dst), p.bytesOf(want)
	for i, sz := 0, dt.Size(); i < n; i++ {
		if g, w := got[i*sz:(i+1)*sz], exp[i*sz:(i+1)*sz]; !slices.Equal(g, w) {
			p.Fatalf("%s: element %d is %x, want %x (%s, little-endian)", what, i, g, w, dt)
		}
	}
	p.worstOp = "no CPU comparison: bit for bit against Convert, the float32 kernel and Convert"
}

// unaryMixedDriver: every op over a transposed and a contiguous source
// (collapsed to rank 1: the same kernel), each pair of types in turn.
func unaryMixedDriver(p *kpair) {
	mixes := bf16Mixes(2)
	for i, op := range unaryOps {
		lo := float32(-4)
		if positive(op) {
			lo = 0.01
		}
		ts := mixes[i%len(mixes)]
		vals := p.randoms(nElems, lo, 4)
		for _, tr := range []bool{true, false} {
			shape, strides := []int{nElems}, []int{1}
			if tr {
				shape, strides = []int{nElems / 200, 200}, []int{1, nElems / 200}
			}
			src := p.typed(ts[1], vals, shape, strides)
			p.checkBF16(fmt.Sprintf("%s %s→%s (transposed %v)", op, ts[1], ts[0], tr), ts[0], shape,
				func(d device.View) error { return p.dev.Kernels().Unary(op, d, p.widened(src), 1.5) },
				func(d device.View) error { return p.dev.Kernels().Unary(op, d, src, 1.5) })
		}
	}
}

// binaryMixedDriver: every op, a transposed and b broadcast along rows,
// each triple of types in turn.
func binaryMixedDriver(p *kpair) {
	mixes := bf16Mixes(3)
	rows, cols := nElems/200, 200
	shape := []int{rows, cols}
	for i, op := range binaryOps {
		ts := mixes[i%len(mixes)]
		a := p.typed(ts[1], p.randoms(nElems, -3, 3), shape, []int{1, rows})
		b := p.typed(ts[2], p.randoms(cols, 0.25, 3), shape, []int{0, 1})
		p.checkBF16(fmt.Sprintf("%s %s,%s→%s", op, ts[1], ts[2], ts[0]), ts[0], shape,
			func(d device.View) error { return p.dev.Kernels().Binary(op, d, p.widened(a), p.widened(b)) },
			func(d device.View) error { return p.dev.Kernels().Binary(op, d, a, b) })
	}
}

// sumMixedCase sums a contiguous source of shape into dstShape, each pair
// of types.
func (p *kpair) sumMixedCase(what string, shape, dstShape []int) {
	vals := p.randoms(device.Numel(shape), -1, 1)
	for _, ts := range bf16Mixes(2) {
		src := p.typed(ts[1], vals, shape, device.Contiguous(shape))
		p.checkBF16(fmt.Sprintf("%s %s→%s", what, ts[1], ts[0]), ts[0], dstShape,
			func(d device.View) error { return p.dev.Kernels().Sum(d, p.widened(src), 0.5) },
			func(d device.View) error { return p.dev.Kernels().Sum(d, src, 0.5) })
	}
}

// dropoutBF16Driver: an odd length at an odd mask offset; p = 1 too.
func dropoutBF16Driver(p *kpair) {
	n := nElems*4 + 3
	key := dropKey
	key.Offset = 5
	src := p.typed(device.BFloat16, p.randoms(n, -1, 1), []int{n}, []int{1})
	for _, pr := range []float32{0.3, 1} {
		p.checkBF16(fmt.Sprintf("dropout p %v", pr), device.BFloat16, []int{n},
			func(d device.View) error {
				return p.dev.Kernels().(device.DropoutKernels).Dropout(d, p.widened(src), pr, key)
			},
			func(d device.View) error { return p.dev.Kernels().(device.DropoutKernels).Dropout(d, src, pr, key) })
	}
}

package devicetest

import (
	"fmt"
	"testing"

	"ferry/device"
)

// ElementwiseBF16 runs where device.TakesElementwiseBF16 says the
// device's Unary, Binary, Sum and Dropout take bfloat16 views, and skips
// elsewhere. Each op on each mix of float32 and bfloat16 operands, read
// through strided and broadcast layouts, must give the bits of its
// definition on the same device: Convert each bfloat16 input into a
// float32 temporary, run the float32 kernel, Convert the result into the
// bfloat16 dst. On a device without data the calls must succeed and
// nothing is compared.

func init() {
	kernelTests = append(kernelTests, test{name: "ElementwiseBF16", fn: testElementwiseBF16})
}

// bf16Case allocates one case's storages and frees them.
type bf16Case struct {
	e      *env
	ck     device.ConvertKernels
	blocks []device.View
	// anyNaN takes any NaN where the reference has a NaN: for binary ops,
	// whose two inputs may both be NaNs. IEEE 754 leaves open which
	// payload the result keeps, and the reference (reading contiguous
	// widened copies) may reach another float32 kernel than the bfloat16
	// layout does, compiled with the other operand order: the CUDA
	// kernels run from source on x86 keep one payload or the other (a GPU
	// returns the canonical NaN either way).
	anyNaN bool
}

// isNaN reports whether bits x of type dt are a NaN.
func isNaN(dt device.DType, x uint32) bool {
	if dt == device.BFloat16 {
		return x&0x7fff > 0x7f80
	}
	return x&0x7fffffff > 0x7f800000
}

func (c *bf16Case) typed(dt device.DType, n int, bits []uint32) device.View {
	v := c.e.typed(dt, n, bits)
	c.blocks = append(c.blocks, v)
	return v
}

func (c *bf16Case) free() {
	for _, v := range c.blocks {
		c.e.dev.Allocator().Free(v.Block)
	}
	c.blocks = nil
}

// input is a view of type dt with layout l over values from the pool.
func (c *bf16Case) input(dt device.DType, l layout) device.View {
	v := c.typed(dt, l.size, bitsOf(dt, bf16Pool(l.size)))
	v.Off, v.Shape, v.Strides = l.off, l.shape, l.strides
	return v
}

// output is a contiguous dst of type dt and shape, filled with garbage.
func (c *bf16Case) output(dt device.DType, shape []int) device.View {
	n := device.Numel(shape)
	v := c.typed(dt, n, bitsOf(dt, bf16Pool(n + 5)[5:]))
	v.Shape, v.Strides = shape, device.Contiguous(shape)
	return v
}

// widened is v when float32, else a contiguous float32 copy by Convert.
func (c *bf16Case) widened(v device.View) device.View {
	if v.DType != device.BFloat16 {
		return v
	}
	w := c.typed(device.Float32, v.Numel(), nil)
	w.Shape, w.Strides = v.Shape, device.Contiguous(v.Shape)
	c.e.ok(c.ck.Convert(w, v), "Convert of a %v bfloat16 input", v.Shape)
	return w
}

// check runs kernel into dst and into a float32 temporary (the inputs
// widened by the caller), rounds the temporary by Convert where dst is
// bfloat16, and compares the bits.
func (c *bf16Case) check(name string, dst device.View, ref, kernel func(d device.View) error) {
	c.e.Helper()
	n := dst.Numel()
	t := c.typed(device.Float32, n, nil)
	t.Shape, t.Strides = dst.Shape, dst.Strides
	c.e.ok(ref(t), "%s: the float32 reference", name)
	want := t
	if dst.DType == device.BFloat16 {
		want = c.typed(device.BFloat16, n, nil)
		want.Shape, want.Strides = dst.Shape, dst.Strides
		c.e.ok(c.ck.Convert(want, t), "%s: Convert of the reference", name)
	}
	c.e.ok(kernel(dst), "%s", name)
	got, exp := c.e.readTyped(dst.DType, dst.Block, n), c.e.readTyped(dst.DType, want.Block, n)
	if c.anyNaN && got != nil {
		for i := range exp {
			if isNaN(dst.DType, exp[i]) && isNaN(dst.DType, got[i]) {
				got[i] = exp[i]
			}
		}
	}
	c.e.sameBits(name, dst.DType, got, exp)
}

var bf16Mixes = []device.DType{device.Float32, device.BFloat16}

// contiguousLayout is a contiguous layout of shape.
func contiguousLayout(shape []int) layout {
	return layout{name: "contiguous", size: device.Numel(shape), shape: shape, strides: device.Contiguous(shape)}
}

func testElementwiseBF16(e *env) {
	if !device.TakesElementwiseBF16(e.k) {
		e.Skipf("%s's elementwise kernels take float32 only (the tensor layer widens bfloat16 inputs)", e.dev.Name())
	}
	ck, ok := e.k.(device.ConvertKernels)
	if !ok {
		e.Fatalf("%s takes bfloat16 elementwise views but has no ConvertKernels", e.dev.Name())
	}
	c := &bf16Case{e: e, ck: ck}
	// The large layouts split across workers and run past a block of a
	// one-pass kernel. Not under -short (without Caps.Large), where the
	// race detector's pass and the stand-in running the sources would
	// take minutes over them: the small ones keep every layout kind.
	full := !testing.Short() || e.caps.Large
	var layouts []layout
	for _, l := range copyLayouts {
		if full || device.Numel(l.shape) <= 1000 {
			layouts = append(layouts, l)
		}
	}
	if full {
		layouts = append(layouts, contiguousLayout([]int{large}), layout{"offset", large + 3, 3, []int{large}, []int{1}})
	}

	for op := range device.UnaryOp(device.NumUnaryOps) {
		alpha := float32(0)
		switch op {
		case device.Scale:
			alpha = -0.37
		case device.AddScalar:
			alpha = 1.5
		case device.PowScalar:
			alpha = 2.5
		}
		for _, l := range layouts {
			for _, dt := range bf16Mixes {
				for _, st := range bf16Mixes {
					name := fmt.Sprintf("Unary %s %s→%s from %s", op, st, dt, l.name)
					src, dst := c.input(st, l), c.output(dt, l.shape)
					c.check(name, dst,
						func(d device.View) error { return e.k.Unary(op, d, c.widened(src), alpha) },
						func(d device.View) error { return e.k.Unary(op, d, src, alpha) })
					c.free()
				}
			}
		}
	}

	c.anyNaN = true
	for op := range device.BinaryOp(device.NumBinaryOps) {
		for _, l := range layouts {
			for _, aFirst := range []bool{true, false} {
				la, lb := l, contiguousLayout(l.shape)
				if !aFirst {
					la, lb = lb, la
				}
				for _, dt := range bf16Mixes {
					for _, at := range bf16Mixes {
						for _, bt := range bf16Mixes {
							name := fmt.Sprintf("Binary %s %s,%s→%s from %s,%s", op, at, bt, dt, la.name, lb.name)
							a, b, dst := c.input(at, la), c.input(bt, lb), c.output(dt, l.shape)
							c.check(name, dst,
								func(d device.View) error { return e.k.Binary(op, d, c.widened(a), c.widened(b)) },
								func(d device.View) error { return e.k.Binary(op, d, a, b) })
							c.free()
						}
					}
				}
			}
		}
	}

	c.anyNaN = false

	sums := []struct {
		src      layout
		dstShape []int
	}{
		{contiguousLayout([]int{300, 70}), []int{1, 70}}, // a bias gradient
		{contiguousLayout([]int{300, 70}), []int{300, 1}},
		{contiguousLayout([]int{300, 70}), []int{1, 1}},
		{contiguousLayout([]int{5, 6, 7}), []int{5, 1, 7}},
		{contiguousLayout([]int{5, 6, 7}), []int{1, 6, 1}},
		{contiguousLayout([]int{4, 9}), []int{4, 9}}, // nothing reduced
		{layout{"transposed", 300 * 70, 0, []int{300, 70}, []int{1, 300}}, []int{1, 70}},
		{layout{"row broadcast", 70, 0, []int{300, 70}, []int{0, 1}}, []int{1, 70}},
	}
	for _, s := range sums {
		for _, dt := range bf16Mixes {
			for _, st := range bf16Mixes {
				name := fmt.Sprintf("Sum %s→%s %s %v→%v", st, dt, s.src.name, s.src.shape, s.dstShape)
				src, dst := c.input(st, s.src), c.output(dt, s.dstShape)
				c.check(name, dst,
					func(d device.View) error { return e.k.Sum(d, c.widened(src), 0.75) },
					func(d device.View) error { return e.k.Sum(d, src, 0.75) })
				c.free()
			}
		}
	}

	dk, ok := e.k.(device.DropoutKernels)
	if !ok {
		return
	}
	for _, n := range []int{1, 7, 2049, large} {
		for _, off := range []uint64{0, 1, 3, 5} {
			for _, p := range []float32{0, 0.3, 1} {
				name := fmt.Sprintf("Dropout bfloat16 n %d offset %d p %v", n, off, p)
				key := device.DropoutKey{Seed: 9, Op: 4, Step: 6, Offset: off}
				src, dst := c.input(device.BFloat16, contiguousLayout([]int{n})), c.output(device.BFloat16, []int{n})
				c.check(name, dst,
					func(d device.View) error { return dk.Dropout(d, c.widened(src), p, key) },
					func(d device.View) error { return dk.Dropout(d, src, p, key) })
				// In place: src is dst.
				want := c.e.readTyped(device.BFloat16, dst.Block, n)
				e.ok(dk.Dropout(src, src, p, key), "%s in place", name)
				e.sameBits(name+" in place", device.BFloat16, e.readTyped(device.BFloat16, src.Block, n), want)
				c.free()
			}
		}
	}
}

package cpu_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// The bfloat16 elementwise kernels (Note [bfloat16 elementwise]) are
// checked bit for bit against their definition on the same device:
// Convert each bfloat16 input into a float32 temporary, run the float32
// kernel, Convert the result into a bfloat16 dst.

// ewCase allocates the storages of one case and frees them.
type ewCase struct {
	f      *fixture
	blocks []*device.Block
}

func (c *ewCase) alloc(dt device.DType, n int) device.View {
	v := c.f.typed(dt, n)
	c.blocks = append(c.blocks, v.Block)
	return v
}

func (c *ewCase) free() {
	for _, b := range c.blocks {
		c.f.dev.Allocator().Free(b)
	}
	c.blocks = nil
}

// ewLayout is an input's layout over a [rows, cols] output: its offset,
// strides and the elements its storage needs.
type ewLayout struct {
	name string
	make func(rows, cols int) (off int, strides []int, size int)
}

var ewLayouts = []ewLayout{
	{"contiguous", func(r, c int) (int, []int, int) { return 1, []int{c, 1}, r*c + 1 }}, // an odd offset
	{"transposed", func(r, c int) (int, []int, int) { return 0, []int{1, r}, r * c }},
	{"row broadcast", func(r, c int) (int, []int, int) { return 0, []int{0, 1}, c }},        // a bias
	{"column broadcast", func(r, c int) (int, []int, int) { return 2, []int{1, 0}, r + 2 }}, // one value per row
}

// ewShapes are [rows, cols] outputs: single elements, SIMD tails, rows
// longer than a block (2048) and outputs large enough to be split over
// goroutines in several blocks each.
var ewShapes = [][2]int{{1, 1}, {1, 7}, {3, 5}, {2, 2049}, {7, 4099}, {33, 257}, {401, 499}}

// testShapes is ewShapes, without the two largest under -short (which the
// race detector's pass runs): the block boundary (2049) and the goroutine
// split (SetParallelMin(1)) stay covered.
func testShapes() [][2]int {
	if testing.Short() {
		return [][2]int{{1, 1}, {1, 7}, {3, 5}, {2, 2049}, {33, 257}}
	}
	return ewShapes
}

var bothTypes = []device.DType{device.Float32, device.BFloat16}

// randomBits fills v's storage (n elements of v.DType from its block's
// start) with values worth rounding: the specials (NaNs, infinities,
// denormals, ties), exact bfloat16 rounding ties, random bits and normal
// values of several magnitudes.
func (f *fixture) randomBits(v device.View, n int) {
	pick := func() uint32 {
		switch k := f.r.IntN(16); {
		case k < 3:
			return bf16Specials[f.r.IntN(len(bf16Specials))]
		case k < 5: // a tie: a bfloat16 value and half its ulp
			return uint32(f.r.Uint32()&0x3FFF0000+0x20000000) | 0x8000
		case k < 6:
			return f.r.Uint32()
		default:
			return math.Float32bits(float32(f.r.NormFloat64() * math.Pow(4, float64(f.r.IntN(7)-3))))
		}
	}
	if v.DType == device.BFloat16 {
		h := halves(device.View{Block: v.Block})[:n]
		for i := range h {
			h[i] = device.ToBFloat16(math.Float32frombits(pick()))
		}
		return
	}
	w := words(device.View{Block: v.Block})[:n]
	for i := range w {
		w[i] = pick()
	}
}

// input allocates and fills an input of type dt and layout l over a
// [rows, cols] output.
func (c *ewCase) input(dt device.DType, l ewLayout, rows, cols int) device.View {
	off, strides, size := l.make(rows, cols)
	v := c.alloc(dt, size)
	c.f.randomBits(v, size)
	v.Off, v.Shape, v.Strides = off, []int{rows, cols}, strides
	return v
}

// widened is v itself when float32, else a contiguous float32 copy.
func (c *ewCase) widened(v device.View) device.View {
	if v.DType != device.BFloat16 {
		return v
	}
	w := c.alloc(device.Float32, v.Numel())
	w.Shape, w.Strides = v.Shape, device.Contiguous(v.Shape)
	c.f.ok(c.f.k.(device.ConvertKernels).Convert(w, v))
	return w
}

// reference runs kernel into a float32 temporary of dst's shape and
// returns its bits as dst's type would hold them (rounded by Convert for
// bfloat16).
func (c *ewCase) reference(dst device.View, kernel func(d device.View) error) []uint32 {
	d := c.alloc(device.Float32, dst.Numel())
	d.Shape, d.Strides = dst.Shape, device.Contiguous(dst.Shape)
	c.f.ok(kernel(d))
	if dst.DType != device.BFloat16 {
		return append([]uint32(nil), words(d)[:dst.Numel()]...)
	}
	r := c.alloc(device.BFloat16, dst.Numel())
	r.Shape, r.Strides = dst.Shape, d.Strides
	c.f.ok(c.f.k.(device.ConvertKernels).Convert(r, d))
	return bitsOfView(r)
}

// bitsOfView returns the bits of v's elements (contiguous).
func bitsOfView(v device.View) []uint32 {
	n := v.Numel()
	out := make([]uint32, n)
	if v.DType == device.BFloat16 {
		for i, h := range halves(v)[:n] {
			out[i] = uint32(h)
		}
		return out
	}
	copy(out, words(v)[:n])
	return out
}

func (c *ewCase) sameBits(what string, dst device.View, want []uint32) {
	c.f.t.Helper()
	got := bitsOfView(dst)
	for i := range want {
		if got[i] != want[i] {
			c.f.t.Fatalf("%s: element %d of %v is %#x, want %#x (%s)", what, i, dst.Shape, got[i], want[i], dst.DType)
		}
	}
}

// output allocates a contiguous [rows, cols] dst of type dt at an odd
// offset, filled with garbage.
func (c *ewCase) output(dt device.DType, rows, cols int) device.View {
	v := c.alloc(dt, rows*cols+1)
	c.f.randomBits(v, rows*cols+1)
	v.Off, v.Shape, v.Strides = 1, []int{rows, cols}, []int{cols, 1}
	return v
}

func unaryAlpha(op device.UnaryOp) float32 {
	switch op {
	case device.Scale:
		return -0.37
	case device.AddScalar:
		return 1.5
	case device.PowScalar:
		return 2.5
	}
	return 0
}

func TestUnaryBF16(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	if !device.TakesElementwiseBF16(f.k) {
		t.Fatal("the CPU kernels do not report ElementwiseBF16")
	}
	c := &ewCase{f: f}
	for op := range device.UnaryOp(device.NumUnaryOps) {
		alpha := unaryAlpha(op)
		for _, sh := range testShapes() {
			rows, cols := sh[0], sh[1]
			for _, l := range ewLayouts {
				if rows*cols > 100_000 && l.name != "contiguous" && l.name != "row broadcast" {
					continue
				}
				for _, dt := range bothTypes {
					for _, st := range bothTypes {
						name := fmt.Sprintf("%s %s→%s %s %v", op, st, dt, l.name, sh)
						src := c.input(st, l, rows, cols)
						dst := c.output(dt, rows, cols)
						want := c.reference(dst, func(d device.View) error {
							return f.k.Unary(op, d, c.widened(src), alpha)
						})
						f.ok(f.k.Unary(op, dst, src, alpha))
						c.sameBits(name, dst, want)
						if l.name == "contiguous" && dt == st { // in place
							want = c.reference(dst, func(d device.View) error {
								return f.k.Unary(op, d, c.widened(src), alpha)
							})
							f.ok(f.k.Unary(op, src, src, alpha))
							c.sameBits(name+" in place", src, want)
						}
						c.free()
					}
				}
			}
		}
	}
}

// binaryLayouts are pairs of input layouts.
var binaryLayouts = [][2]int{{0, 0}, {0, 2}, {2, 0}, {1, 0}, {3, 1}, {0, 3}}

func TestBinaryBF16(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	c := &ewCase{f: f}
	for op := range device.BinaryOp(device.NumBinaryOps) {
		for _, sh := range testShapes() {
			rows, cols := sh[0], sh[1]
			for _, lp := range binaryLayouts {
				la, lb := ewLayouts[lp[0]], ewLayouts[lp[1]]
				if rows*cols > 100_000 && lp[0] != 0 {
					continue
				}
				for _, dt := range bothTypes {
					for _, at := range bothTypes {
						for _, bt := range bothTypes {
							name := fmt.Sprintf("%s %s,%s→%s %s,%s %v", op, at, bt, dt, la.name, lb.name, sh)
							a, b := c.input(at, la, rows, cols), c.input(bt, lb, rows, cols)
							dst := c.output(dt, rows, cols)
							want := c.reference(dst, func(d device.View) error {
								return f.k.Binary(op, d, c.widened(a), c.widened(b))
							})
							f.ok(f.k.Binary(op, dst, a, b))
							c.sameBits(name, dst, want)
							if lp[0] == 0 && dt == at { // dst is a
								f.ok(f.k.Binary(op, a, a, b))
								c.sameBits(name+" in place", a, want) // a was not written since

							}
							c.free()
						}
					}
				}
			}
		}
	}
}

func TestSumBF16(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	c := &ewCase{f: f}
	cases := []struct{ src, dst []int }{
		{[]int{1, 1}, []int{1, 1}},
		{[]int{7, 5}, []int{1, 5}},
		{[]int{3, 2049}, []int{1, 2049}},
		{[]int{1000, 37}, []int{1, 37}}, // many blocks of rows
		{[]int{3, 20000}, []int{1, 20000}},
		{[]int{401, 499}, []int{1, 499}},
		{[]int{401, 499}, []int{401, 1}},
		{[]int{401, 499}, []int{1, 1}},
		{[]int{40, 499}, []int{40, 499}}, // nothing reduced
		{[]int{5, 6, 7}, []int{5, 1, 7}},
		{[]int{5, 6, 7}, []int{1, 6, 1}},
		{[]int{1, 30, 70}, []int{1, 1, 70}},
	}
	for _, cs := range cases {
		for _, transposed := range []bool{false, true} {
			if transposed && len(cs.src) != 2 {
				continue
			}
			for _, dt := range bothTypes {
				for _, st := range bothTypes {
					name := fmt.Sprintf("sum %s→%s %v→%v", st, dt, cs.src, cs.dst)
					n := device.Numel(cs.src)
					src := c.alloc(st, n+1)
					f.randomBits(src, n+1)
					src.Off, src.Shape, src.Strides = 1, cs.src, device.Contiguous(cs.src)
					if transposed {
						name += " transposed"
						src.Off, src.Strides = 0, []int{1, cs.src[0]}
					}
					m := device.Numel(cs.dst)
					dst := c.alloc(dt, m)
					f.randomBits(dst, m)
					dst.Shape, dst.Strides = cs.dst, device.Contiguous(cs.dst)
					want := c.reference(dst, func(d device.View) error { return f.k.Sum(d, c.widened(src), 0.75) })
					f.ok(f.k.Sum(dst, src, 0.75))
					c.sameBits(name, dst, want)
					c.free()
				}
			}
		}
	}
}

func TestDropoutBF16(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	f := newFixture(t)
	c := &ewCase{f: f}
	dk := f.k.(device.DropoutKernels)
	for _, n := range []int{1, 3, 7, 2049, 200_003} {
		for _, off := range []uint64{0, 1, 2, 3, 5, 1<<33 + 7} {
			for _, p := range []float32{0, 0.1, 0.5, 1} {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("dropout n %d offset %d p %v in place %v", n, off, p, inPlace)
					key := device.DropoutKey{Seed: 11, Op: 3, Step: 2, Offset: off}
					src := c.alloc(device.BFloat16, n+1)
					f.randomBits(src, n+1)
					src.Off, src.Shape, src.Strides = 1, []int{n}, []int{1}
					dst := c.output(device.BFloat16, 1, n)
					dst.Shape, dst.Strides = src.Shape, src.Strides
					want := c.reference(dst, func(d device.View) error { return dk.Dropout(d, c.widened(src), p, key) })
					if inPlace {
						dst = src
					}
					f.ok(dk.Dropout(dst, src, p, key))
					c.sameBits(name, dst, want)
					c.free()
				}
			}
		}
	}
	// Types that differ are refused.
	a, b := c.alloc(device.Float32, 4), c.alloc(device.BFloat16, 4)
	var u *device.UnsupportedError
	if err := dk.Dropout(a, b, 0.5, device.DropoutKey{}); !errors.As(err, &u) {
		t.Errorf("Dropout bfloat16→float32: %v, want an *UnsupportedError", err)
	}
	c.free()
}

// TestElementwiseBF16Refuses: other element types are refused.
func TestElementwiseBF16Refuses(t *testing.T) {
	f := newFixture(t)
	c := &ewCase{f: f}
	defer c.free()
	bf, h := c.alloc(device.BFloat16, 4), c.alloc(device.Float16, 4)
	var u *device.UnsupportedError
	for name, err := range map[string]error{
		"unary":  f.k.Unary(device.Neg, bf, h, 0),
		"binary": f.k.Binary(device.Add, bf, bf, h),
		"sum":    f.k.Sum(device.View{Block: bf.Block, Shape: []int{1}, Strides: []int{1}, DType: device.BFloat16}, h, 1),
	} {
		if !errors.As(err, &u) {
			t.Errorf("%s with a float16 input: %v, want an *UnsupportedError", name, err)
		}
	}
}

package cpu

import (
	"sync"

	"ferry/device"
	"ferry/internal/gemm"
)

// Note [bfloat16 elementwise]. Unary, Binary, Sum and Dropout take
// bfloat16 views (device.ElementwiseBF16Kernels) without new arithmetic:
// a kernel with a bfloat16 operand walks the collapsed layout as the
// float32 kernel does and cuts each row into blocks of bf16Block
// elements. Each bfloat16 input block is widened (exactly) into a small
// float32 scratch buffer of the goroutine's, the float32 row loop the
// float32 kernel runs on contiguous rows computes the block (the
// vectorised loops and the scalar functions give the same bits, see
// gelu.go and simd.go), and a bfloat16 destination receives the block
// rounded by gemm.RoundBF16s (device.ToBFloat16's bits). Every element
// is thus computed from the same float32 values by the same float32
// operations as Convert, the float32 kernel and Convert would compute it,
// in one pass over memory and without temporaries the size of the tensor.
// A bfloat16 destination that is also a bfloat16 input is read a block at
// a time before the block is written.

// ElementwiseBF16 implements device.ElementwiseBF16Kernels.
func (k *kernels) ElementwiseBF16() bool { return true }

var _ device.ElementwiseBF16Kernels = (*kernels)(nil)

// bf16Block is the elements per block of a kernel with bfloat16
// operands: three blocks of float32 scratch stay in the L1 cache.
const bf16Block = 2048

// ewScratch is one goroutine's scratch: the destination's block and one
// block per input.
type ewScratch [3][bf16Block]float32

// ewScratchPool recycles scratch, so that steady training makes no
// garbage.
var ewScratchPool = sync.Pool{New: func() any { return new(ewScratch) }}

// hasBF16 reports whether any of vs is bfloat16.
func hasBF16(vs ...device.View) bool {
	for _, v := range vs {
		if v.DType == device.BFloat16 {
			return true
		}
	}
	return false
}

// checkEW returns an *UnsupportedError unless every view is float32 or
// bfloat16.
func checkEW(op string, vs ...device.View) error {
	for _, v := range vs {
		if v.DType != device.Float32 && v.DType != device.BFloat16 {
			return &device.UnsupportedError{Op: op, DType: v.DType.String(), Device: "cpu"}
		}
	}
	return nil
}

// ewIn is an input of either type: f for float32, h for bfloat16 (the
// elements from the view's offset).
type ewIn struct {
	f []float32
	h []uint16
}

func ewInput(v device.View) ewIn {
	if v.DType == device.BFloat16 {
		return ewIn{h: uint16s(v)}
	}
	return ewIn{f: floats(v)}
}

// block returns the n elements from off step st as float32: the input's
// own memory when it is float32 with step 1, else copied or widened into
// buf.
func (in ewIn) block(off, st, n int, buf []float32) []float32 {
	buf = buf[:n]
	switch {
	case in.h == nil && st == 1:
		return in.f[off : off+n]
	case in.h == nil:
		for i := range buf {
			buf[i] = in.f[off+i*st]
		}
	case st == 1:
		gemm.WidenBF16s(buf, in.h[off:off+n])
	case st == 0:
		x := device.FromBFloat16(in.h[off])
		for i := range buf {
			buf[i] = x
		}
	default:
		for i := range buf {
			buf[i] = device.FromBFloat16(in.h[off+i*st])
		}
	}
	return buf
}

// ewMixed writes row(d, x, y) over dst (contiguous, float32 or bfloat16)
// block by block, x from a and y from b (nil when nin is 1), each input of
// either type and any strides (Note [bfloat16 elementwise]). row takes
// slices of one length and allows d to be x or y.
func ewMixed(dst, a, b device.View, nin int, row func(d, x, y []float32)) {
	n := dst.Numel()
	if n == 0 {
		return
	}
	strides := [][]int{dst.Strides, a.Strides}
	if nin == 2 {
		strides = append(strides, b.Strides)
	}
	l := collapse(dst.Shape, strides...)
	last := len(l.shape) - 1
	ia, ib := ewInput(a), ewIn{}
	if nin == 2 {
		ib = ewInput(b)
	}
	var df []float32
	var dh []uint16
	if dst.DType == device.BFloat16 {
		dh = uint16s(dst)
	} else {
		df = floats(dst)
	}
	// dst is contiguous: its step along a collapsed row is 1.
	parallelFor(n, elementGrain, func(lo, hi int) {
		s := ewScratchPool.Get().(*ewScratch)
		defer ewScratchPool.Put(s)
		l.rows(lo, hi, func(offs []int, m int) {
			sa, sb := l.strides[1][last], 0
			if nin == 2 {
				sb = l.strides[2][last]
			}
			for c := 0; c < m; c += bf16Block {
				k := min(bf16Block, m-c)
				x := ia.block(offs[1]+c*sa, sa, k, s[1][:])
				var y []float32
				if nin == 2 {
					y = ib.block(offs[2]+c*sb, sb, k, s[2][:])
				}
				o := offs[0] + c
				if dh == nil {
					row(df[o:o+k], x, y)
					continue
				}
				d := s[0][:k]
				row(d, x, y)
				gemm.RoundBF16s(dh[o:o+k], d)
			}
		})
	})
}

// unaryRow is Unary's loop over contiguous rows: the loops the float32
// kernel runs, so the same bits.
func unaryRow(op device.UnaryOp, alpha float32) func(d, x, _ []float32) {
	switch op {
	case device.ReLU:
		return func(d, x, _ []float32) { vecReLU(d, x) }
	case device.GELUTanh:
		return func(d, x, _ []float32) { vecGELUTanh(d, x) }
	case device.Scale:
		return func(d, x, _ []float32) { vecScale(d, x, alpha) }
	}
	f := unaryFunc(op, alpha)
	return func(d, x, _ []float32) {
		x = x[:len(d)]
		for i, v := range x {
			d[i] = f(v)
		}
	}
}

// binaryRow is Binary's loop over contiguous rows.
func binaryRow(op device.BinaryOp) func(d, x, y []float32) {
	switch op {
	case device.Add:
		return vecAdd
	case device.ReLUGrad:
		return vecReLUGrad
	case device.GELUTanhGrad:
		return vecGELUTanhGrad
	case device.Sub:
		return func(d, x, y []float32) {
			x, y = x[:len(d)], y[:len(d)]
			for i := range d {
				d[i] = x[i] - y[i]
			}
		}
	case device.Mul:
		return func(d, x, y []float32) {
			x, y = x[:len(d)], y[:len(d)]
			for i := range d {
				d[i] = x[i] * y[i]
			}
		}
	}
	f := binaryFunc(op)
	return func(d, x, y []float32) {
		x, y = x[:len(d)], y[:len(d)]
		for i := range d {
			d[i] = f(x[i], y[i])
		}
	}
}

// sumBF16 is Sum with a bfloat16 dst or src. A bias gradient (the column
// sums of a contiguous matrix) widens its rows a block at a time as
// colSums adds them; other reductions widen src into a float32 temporary
// first. A bfloat16 dst receives the float32 sums rounded.
func (k *kernels) sumBF16(dst, src device.View, alpha float32) error {
	if err := checkEW("sum", dst, src); err != nil {
		return err
	}
	p := planSum(dst, src)
	if p.runs == 0 { // a scaled copy
		return k.Unary(device.Scale, dst, src, alpha)
	}
	var d []float32
	if dst.DType == device.BFloat16 { // the float32 sums, then rounded
		tp := sumTemps.Get().(*[]float32)
		defer sumTemps.Put(tp)
		if cap(*tp) < dst.Numel() {
			*tp = make([]float32, dst.Numel())
		}
		d = (*tp)[:dst.Numel()]
	} else {
		d = floats(dst)
	}
	dm := device.View{Shape: dst.Shape, Strides: dst.Strides}
	if src.DType == device.BFloat16 && src.IsContiguous() && p.runs == 1 && p.outer == 1 && p.inner > 1 {
		h, inner := uint16s(src), p.inner
		colSums(d[:inner], p.red, inner, float64(alpha), func(r, c0 int, acc []float64) {
			s := ewScratchPool.Get().(*ewScratch)
			o := r*inner + c0
			for j := 0; j < len(acc); j += bf16Block {
				n := min(bf16Block, len(acc)-j)
				gemm.WidenBF16s(s[0][:n], h[o+j:o+j+n])
				vecAcc64(acc[j:j+n], s[0][:n])
			}
			ewScratchPool.Put(s)
		})
	} else {
		s := floats32Of(src)
		sm := device.View{Shape: src.Shape, Strides: src.Strides}
		if src.DType == device.BFloat16 {
			sm.Strides = device.Contiguous(src.Shape)
		}
		sumFloat32(d, s, dm, sm, alpha, p)
	}
	if dst.DType == device.BFloat16 {
		gemm.RoundBF16s(uint16s(dst)[:len(d)], d)
	}
	return nil
}

// sumTemps recycles the float32 sums of a bfloat16 Sum.
var sumTemps = sync.Pool{New: func() any { return new([]float32) }}

// floats32Of returns v's float32 elements from its offset, or, for a
// bfloat16 view, its elements widened into a new contiguous slice in
// row-major order.
func floats32Of(v device.View) []float32 {
	if v.DType != device.BFloat16 {
		return floats(v)
	}
	n := v.Numel()
	out := make([]float32, n)
	if n == 0 {
		return out
	}
	in := ewInput(v)
	l := collapse(v.Shape, device.Contiguous(v.Shape), v.Strides)
	last := len(l.shape) - 1
	parallelFor(n, elementGrain, func(lo, hi int) {
		l.rows(lo, hi, func(offs []int, m int) {
			ss := l.strides[1][last]
			in.block(offs[1], ss, m, out[offs[0]:offs[0]+m])
		})
	})
	return out
}

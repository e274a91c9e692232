package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// kernels implements device.Kernels by launching the embedded kernels (and
// cuBLAS) on the compute stream. Methods return launch errors; errors of
// the work itself surface at the next synchronisation.
type kernels struct{ d *Device }

// threads is the block size of every one-dimensional launch; the
// reductions in kernels/reduce.cu assume it (BLOCK).
const threads = 256

var argsPool = sync.Pool{New: func() any { return new(cu.Args) }}

// launch runs kernel name on the compute stream with args, which it
// returns to the pool.
func (k *kernels) launch(name string, grid, block cu.Dim3, args *cu.Args) error {
	defer argsPool.Put(args)
	d := k.d
	f, ok := d.funcs[name]
	if !ok {
		return fmt.Errorf("%s: kernel %s is not loaded", d.name, name)
	}
	if err := d.ctx.LaunchKernel(f, grid, block, 0, d.compute.h, args); err != nil {
		return fmt.Errorf("%s: %s: %w", d.name, name, err)
	}
	return nil
}

func newArgs() *cu.Args { return argsPool.Get().(*cu.Args).Reset() }

// grid1 is the grid for a grid-stride loop over n elements: enough blocks
// to cover them, at most 32 per multiprocessor.
func (k *kernels) grid1(n int64) cu.Dim3 {
	blocks := (n + threads - 1) / threads
	limit := int64(max(k.d.props.SMs, 1)) * 32
	return cu.Dim3{X: uint32(max(1, min(blocks, limit))), Y: 1, Z: 1}
}

var block1 = cu.Dim3{X: threads, Y: 1, Z: 1}

// ptrs resolves the views' device addresses.
func (k *kernels) ptrs(vs ...device.View) ([]cu.DevicePtr, error) {
	out := make([]cu.DevicePtr, len(vs))
	for i, v := range vs {
		p, err := k.d.ptr(v)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// Copy copies 4-byte elements (float32, int32); a bfloat16 view, which
// Copy does not take (device.Kernels), goes through Convert rather than
// be copied as 4-byte words past its end.
func (k *kernels) Copy(dst, src device.View) error {
	if dst.DType.Size() != 4 || src.DType.Size() != 4 {
		return k.Convert(dst, src)
	}
	return k.copy32(dst, src)
}

// copy32 copies src into dst, 4-byte elements of any strides.
func (k *kernels) copy32(dst, src device.View) error {
	return k.stridedCopy("copy", "ferry_copy_strided", dst, src, 4)
}

// stridedCopy writes src into dst, of one shape and any strides, element
// by element: a memcpy of memcpyBytes-byte elements where both collapse to
// one contiguous run (0: never), else kernel's 32- or 64-bit index variant
// (kernel + "32" or "64") with the int32 arguments lead, then dst, src,
// the element count and the layout.
func (k *kernels) stridedCopy(op, kernel string, dst, src device.View, memcpyBytes int64, lead ...int32) error {
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	p, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	l, err := collapse(dst.Shape, dst.Strides, src.Strides)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.name, op, err)
	}
	if memcpyBytes > 0 && l.contiguous(2) {
		if err := k.d.ctx.MemcpyDtoDAsync(p[0], p[1], n*memcpyBytes, k.d.compute.h); err != nil {
			return fmt.Errorf("%s: %s: %w", k.d.name, op, err)
		}
		return nil
	}
	name := kernel + "64"
	if l.fits32(n, 2) && !k.d.index64 {
		name = kernel + "32"
	}
	args := newArgs()
	for _, v := range lead {
		args.I32(v)
	}
	return k.launch(name, k.grid1(n), block1, args.Ptr(p[0]).Ptr(p[1]).I64(n).Int64s(l.encode()...))
}

// CopyStrided is Copy: its strided kernels already place each element by
// dst's strides as well as src's (device.StridedCopyKernels).
func (k *kernels) CopyStrided(dst, src device.View) error { return k.Copy(dst, src) }

// Fill writes v's bits into every 32-bit word of dst (cuMemsetD32Async).
func (k *kernels) Fill(dst device.View, v float32) error {
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	p, err := k.d.ptr(dst)
	if err != nil {
		return err
	}
	if err := k.d.ctx.MemsetD32Async(p, math.Float32bits(v), n, k.d.compute.h); err != nil {
		return fmt.Errorf("%s: fill: %w", k.d.name, err)
	}
	return nil
}

func (k *kernels) Unary(op device.UnaryOp, dst, src device.View, alpha float32) error {
	if op >= device.NumUnaryOps {
		return fmt.Errorf("%s: unknown unary op %d", k.d.name, op)
	}
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	p, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	l, err := collapse(dst.Shape, dst.Strides, src.Strides)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.name, op, err)
	}
	if types, mixed, err := k.mixedTypes(op.String(), dst, src); err != nil || mixed {
		if err != nil {
			return err
		}
		name := "ferry_unary_mixed64" // Note [bfloat16 elementwise on the GPU]
		if l.fits32(n, 2) && !k.d.index64 {
			name = "ferry_unary_mixed32"
		}
		return k.launch(name, k.grid1(n), block1,
			newArgs().I32(int32(op)).F32(alpha).I32(types).Ptr(p[0]).Ptr(p[1]).I64(n).Int64s(l.encode()...))
	}
	a := newArgs().I32(int32(op)).F32(alpha).Ptr(p[0]).Ptr(p[1]).I64(n)
	if l.contiguous(2) {
		return k.launch("ferry_unary_contig", k.grid1(n), block1, a)
	}
	name := "ferry_unary_strided64"
	if l.fits32(n, 2) && !k.d.index64 {
		name = "ferry_unary_strided32"
	}
	return k.launch(name, k.grid1(n), block1, a.Int64s(l.encode()...))
}

func (k *kernels) Binary(op device.BinaryOp, dst, a, b device.View) error {
	if op >= device.NumBinaryOps {
		return fmt.Errorf("%s: unknown binary op %d", k.d.name, op)
	}
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	p, err := k.ptrs(dst, a, b)
	if err != nil {
		return err
	}
	l, err := collapse(dst.Shape, dst.Strides, a.Strides, b.Strides)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.name, op, err)
	}
	if types, mixed, err := k.mixedTypes(op.String(), dst, a, b); err != nil || mixed {
		if err != nil {
			return err
		}
		name := "ferry_binary_mixed64" // Note [bfloat16 elementwise on the GPU]
		if l.fits32(n, 3) && !k.d.index64 {
			name = "ferry_binary_mixed32"
		}
		return k.launch(name, k.grid1(n), block1,
			newArgs().I32(int32(op)).I32(types).Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I64(n).Int64s(l.encode()...))
	}
	args := newArgs().I32(int32(op)).Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I64(n)
	if l.contiguous(3) {
		return k.launch("ferry_binary_contig", k.grid1(n), block1, args)
	}
	name := "ferry_binary_strided64"
	if l.fits32(n, 3) && !k.d.index64 {
		name = "ferry_binary_strided32"
	}
	return k.launch(name, k.grid1(n), block1, args.Int64s(l.encode()...))
}

func (k *kernels) Softmax(dst, src device.View, log bool) error {
	return k.rows("ferry_softmax", src.Shape, log, dst, src)
}

func (k *kernels) SoftmaxBackward(dst, grad, out device.View, log bool) error {
	return k.rows("ferry_softmax_backward", out.Shape, log, dst, grad, out)
}

// rows launches a row kernel (one block per row, grid-stride over rows)
// over the last axis of shape.
func (k *kernels) rows(name string, shape []int, log bool, vs ...device.View) error {
	cols := int64(1)
	if len(shape) > 0 {
		cols = int64(shape[len(shape)-1])
	}
	total := int64(device.Numel(shape))
	if total == 0 {
		return nil
	}
	rows := total / cols
	p, err := k.ptrs(vs...)
	if err != nil {
		return err
	}
	a := newArgs()
	for _, x := range p {
		a.Ptr(x)
	}
	a.I64(rows).I64(cols).I32(b2i(log))
	grid := cu.Dim3{X: uint32(min(rows, int64(max(k.d.props.SMs, 1))*32)), Y: 1, Z: 1}
	return k.launch(name, grid, block1, a)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

func (k *kernels) NLL(dst, logp, target device.View) error {
	cols := int64(1)
	if len(logp.Shape) > 0 {
		cols = int64(logp.Shape[len(logp.Shape)-1])
	}
	rows := int64(0)
	if cols > 0 {
		rows = int64(logp.Numel()) / cols
	}
	p, err := k.ptrs(dst, logp, target)
	if err != nil {
		return err
	}
	return k.launch("ferry_nll", cu.Dim3{X: 1, Y: 1, Z: 1}, block1,
		newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I64(rows).I64(cols))
}

func (k *kernels) NLLBackward(dst, grad, target device.View) error {
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	cols := int64(1)
	if len(dst.Shape) > 0 {
		cols = int64(dst.Shape[len(dst.Shape)-1])
	}
	rows := n / cols
	p, err := k.ptrs(dst, grad, target)
	if err != nil {
		return err
	}
	return k.withGradScale(p[1], p[2], rows, func(sp cu.DevicePtr) error {
		return k.launch("ferry_nll_backward", k.grid1(n), block1,
			newArgs().Ptr(p[0]).Ptr(sp).Ptr(p[2]).I64(rows).I64(cols))
	})
}

// withGradScale computes NLL's gradient scale -grad/count (count: the rows
// of target not ignored) on the GPU into scratch, runs f with its address,
// and frees the scratch: later users of the block come after on this
// stream.
func (k *kernels) withGradScale(grad, target cu.DevicePtr, rows int64, f func(scale cu.DevicePtr) error) error {
	scratch, err := k.d.alloc.Alloc(4, device.Temporary)
	if err != nil {
		return err
	}
	defer k.d.alloc.Free(scratch)
	sp, err := k.d.ptr(device.View{Block: scratch})
	if err != nil {
		return err
	}
	if err := k.launch("ferry_nll_grad_scale", cu.Dim3{X: 1, Y: 1, Z: 1}, block1,
		newArgs().Ptr(sp).Ptr(grad).Ptr(target).I64(rows)); err != nil {
		return err
	}
	return f(sp)
}

func (k *kernels) SGDStep(param, grad, momentum device.View, p device.SGDParams) error {
	n := int64(param.Numel())
	if n == 0 {
		return nil
	}
	ptr, err := k.ptrs(param, grad)
	if err != nil {
		return err
	}
	var buf cu.DevicePtr
	if p.Momentum != 0 {
		if buf, err = k.d.ptr(momentum); err != nil {
			return err
		}
	}
	return k.launch("ferry_sgd_step", k.grid1(n), block1, newArgs().Ptr(ptr[0]).Ptr(ptr[1]).Ptr(buf).I64(n).
		F32(p.LR).F32(p.Momentum).F32(p.Dampening).F32(p.WeightDecay).I32(b2i(p.Nesterov)).I32(b2i(p.First)))
}

func (k *kernels) AdamWStep(param, grad, expAvg, expAvgSq device.View, p device.AdamWParams) error {
	n := int64(param.Numel())
	if n == 0 {
		return nil
	}
	ptr, err := k.ptrs(param, grad, expAvg, expAvgSq)
	if err != nil {
		return err
	}
	decay, stepSize, bc2Sqrt := adamwScalars(p)
	return k.launch("ferry_adamw_step", k.grid1(n), block1, newArgs().Ptr(ptr[0]).Ptr(ptr[1]).Ptr(ptr[2]).Ptr(ptr[3]).I64(n).
		F32(decay).F32(p.Beta1).F32(p.Beta2).F32(p.Eps).F32(stepSize).F32(bc2Sqrt))
}

// adamwScalars are an AdamW step's scalars, computed as device/cpu
// computes them: decay = 1 - lr·weight_decay, step_size = lr/(1-beta1^t)
// and bc2_sqrt = √(1-beta2^t).
func adamwScalars(p device.AdamWParams) (decay, stepSize, bc2Sqrt float32) {
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	return 1 - p.LR*p.WeightDecay, float32(float64(p.LR) / bc1), float32(math.Sqrt(bc2))
}

// Upload copies host bytes into dst on the compute stream (after the work
// already queued there, which may still use dst's block) and waits.
func (k *kernels) Upload(dst device.View, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	p, err := k.transfer(dst, len(src), "upload")
	if err != nil {
		return err
	}
	err = k.d.ctx.MemcpyHtoDAsync(p, unsafe.Pointer(&src[0]), int64(len(src)), k.d.compute.h)
	if err == nil {
		err = k.d.compute.Synchronize()
	}
	runtime.KeepAlive(src)
	if err != nil {
		return fmt.Errorf("%s: upload: %w", k.d.name, err)
	}
	return nil
}

// Download copies src into host bytes once the work queued on the compute
// stream has finished.
func (k *kernels) Download(dst []byte, src device.View) error {
	if len(dst) == 0 {
		return nil
	}
	p, err := k.transfer(src, len(dst), "download")
	if err != nil {
		return err
	}
	err = k.d.ctx.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), p, int64(len(dst)), k.d.compute.h)
	if err == nil {
		err = k.d.compute.Synchronize()
	}
	runtime.KeepAlive(dst)
	if err != nil {
		return fmt.Errorf("%s: download: %w", k.d.name, err)
	}
	return nil
}

// transfer checks that n bytes fit in v's block from v's offset on.
func (k *kernels) transfer(v device.View, n int, what string) (cu.DevicePtr, error) {
	p, err := k.d.ptr(v)
	if err != nil {
		return 0, err
	}
	if v.Block == nil {
		return 0, fmt.Errorf("%s: %s of %d bytes into no memory", k.d.name, what, n)
	}
	if room := v.Block.Size() - int64(v.Off)*int64(v.DType.Size()); int64(n) > room {
		return 0, fmt.Errorf("%s: %s of %d bytes into %d", k.d.name, what, n, room)
	}
	return p, nil
}

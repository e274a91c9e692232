package cuda

import (
	"fmt"
	"math"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// Sum reduces src over the axes where dst has size 1 (dst contiguous, with
// src's rank). Two kernels share the work, by layout:
//
//   - ferry_sum_blocks, one block per output, its threads striding over
//     the reduced index: reductions over the innermost axis, and
//     whole-tensor sums;
//   - ferry_sum_threads, one thread per output, neighbouring threads on
//     neighbouring outputs: reductions over outer axes (a bias gradient
//     sums a [batch, features] gradient over batch), and short reductions.
//
// When that leaves the GPU mostly idle (few outputs, long reductions), the
// reduced index is split into chunks summed by separate blocks into double
// partial sums, which ferry_sum_finish adds in chunk order. No atomics: the
// result depends only on the shapes and the number of multiprocessors.
func (k *kernels) Sum(dst, src device.View, alpha float32) error {
	if dst.Numel() == 0 {
		return nil
	}
	types, mixed, err := k.mixedTypes("sum", dst, src)
	if err != nil {
		return err
	}
	if src.Numel() == 0 { // sums of nothing
		if mixed {
			return k.zero(dst)
		}
		return k.Fill(dst, 0)
	}
	if src.DType == device.BFloat16 && !src.IsContiguous() {
		return k.sumWidened(dst, src, alpha)
	}
	r, err := reduceLayout(dst.Shape, src.Shape, src.Strides)
	if err != nil {
		return fmt.Errorf("%s: sum: %w", k.d.name, err)
	}
	if r.redRank == 0 { // nothing to reduce: a scaled copy, as device/cpu does it
		return k.Unary(device.Scale, dst, src, alpha)
	}
	if r.nOut > math.MaxInt32 {
		return fmt.Errorf("%s: sum into %d elements: %w", k.d.name, r.nOut, device.ErrNotSupported)
	}
	p, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	plan := planSum(r, max(k.d.props.SMs, 1))
	var partial *device.Block
	var pp cu.DevicePtr
	if plan.splits > 1 {
		partial, err = k.d.alloc.Alloc(plan.splits*r.nOut*8, device.Temporary)
		if err != nil {
			return err
		}
		// Freed at once: whoever gets the block next runs after us on
		// the compute stream.
		defer k.d.alloc.Free(partial)
		if pp, err = k.d.ptr(device.View{Block: partial}); err != nil {
			return err
		}
	}
	if mixed { // the same plan, the kernels that take bfloat16 (Note [bfloat16 elementwise on the GPU])
		a := newArgs().I32(types).Ptr(p[0]).Ptr(pp).Ptr(p[1]).F32(alpha).I64(r.nOut).I64(r.nRed).I64(plan.chunk).Int64s(r.encode()...)
		if err := k.launch(plan.kernel+"_mixed", plan.grid, block1, a); err != nil {
			return err
		}
		if plan.splits > 1 {
			return k.launch("ferry_sum_finish_mixed", k.grid1(r.nOut), block1,
				newArgs().I32(types).Ptr(p[0]).Ptr(pp).F32(alpha).I64(r.nOut).I64(plan.splits))
		}
		return nil
	}
	a := newArgs().Ptr(p[0]).Ptr(pp).Ptr(p[1]).F32(alpha).I64(r.nOut).I64(r.nRed).I64(plan.chunk).Int64s(r.encode()...)
	if err := k.launch(plan.kernel, plan.grid, block1, a); err != nil {
		return err
	}
	if plan.splits > 1 {
		return k.launch("ferry_sum_finish", k.grid1(r.nOut), block1,
			newArgs().Ptr(p[0]).Ptr(pp).F32(alpha).I64(r.nOut).I64(plan.splits))
	}
	return nil
}

// sumPlan is how a reduction is launched.
type sumPlan struct {
	kernel string
	grid   cu.Dim3
	splits int64 // chunks of the reduced index (gridDim.y)
	chunk  int64 // reduced elements per chunk
}

// planSum picks the kernel and the split for r on a GPU with sms
// multiprocessors: about four blocks per multiprocessor in all, each chunk
// long enough to be worth a block (2048 elements) or a thread (32).
func planSum(r reduction, sms int) sumPlan {
	target := int64(4 * sms)
	coalescedOut := r.outStride[r.outRank-1] == 1
	var p sumPlan
	var base, minChunk int64
	if r.nOut > 1 && (coalescedOut || r.nRed < 128) {
		p.kernel = "ferry_sum_threads"
		base = (r.nOut + threads - 1) / threads
		minChunk = 32
	} else {
		p.kernel = "ferry_sum_blocks"
		base = r.nOut
		minChunk = 2048
	}
	p.splits = 1
	if base < target {
		p.splits = min((target+base-1)/base, (r.nRed+minChunk-1)/minChunk, 65535)
		p.splits = max(p.splits, 1)
	}
	p.chunk = (r.nRed + p.splits - 1) / p.splits
	p.splits = (r.nRed + p.chunk - 1) / p.chunk
	p.grid = cu.Dim3{X: uint32(base), Y: uint32(p.splits), Z: 1}
	return p
}

package cuda

import (
	"fmt"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// The fused kernels of kernels/fused.cu: Linear's bias with GPT-2's GELU
// (device.FusedGELUKernels) and multi-tensor AdamW
// (device.MultiTensorOptimKernels).

// BiasGELUTanh adds bias to z in place and writes GELUTanh(z) into dst in
// one launch (Binary's Add and Unary's GELUTanh: their operations, so
// their bits).
func (k *kernels) BiasGELUTanh(dst, z, bias device.View) error {
	cols, n := lastDim(dst.Shape), int64(dst.Numel())
	if n == 0 {
		return nil
	}
	rows := n / cols
	p, err := k.ptrs(dst, z, bias)
	if err != nil {
		return err
	}
	return k.launch("ferry_bias_gelu_tanh", k.rowGrid(rows), block1, newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I64(rows).I64(cols))
}

// GELUTanhBackwardSum writes grad·GELUTanh'(z) and its column sums in one
// pass (ferry_gelu_tanh_backward_sum), split over the rows as Sum would
// split them, so with Sum's bits; where Sum would not use
// ferry_sum_threads (one row, one column) it is Binary(GELUTanhGrad) and
// Sum.
func (k *kernels) GELUTanhBackwardSum(dst, sum, grad, z device.View) error {
	rows, cols := 1, 1
	if len(dst.Shape) > 0 {
		cols = dst.Shape[len(dst.Shape)-1]
		rows = 0
		if cols > 0 {
			rows = dst.Numel() / cols
		}
	}
	if sum.Block != nil && rows > 1 && cols > 1 {
		s := []int{1, cols}
		r, err := reduceLayout(s, []int{rows, cols}, []int{cols, 1})
		if err != nil {
			return fmt.Errorf("%s: gelu_tanh backward sum: %w", k.d.name, err)
		}
		plan := planSum(r, max(k.d.props.SMs, 1))
		if plan.kernel == "ferry_sum_threads" && r.nOut <= 1<<31-1 {
			return k.geluTanhBackwardSum(dst, sum, grad, z, int64(rows), int64(cols), plan)
		}
	}
	if err := k.Binary(device.GELUTanhGrad, dst, grad, z); err != nil {
		return err
	}
	if sum.Block == nil || cols == 0 {
		return nil
	}
	s := device.View{Block: sum.Block, Off: sum.Off, Shape: []int{1, cols}, Strides: []int{cols, 1}}
	src := device.View{Block: dst.Block, Off: dst.Off, Shape: []int{rows, cols}, Strides: []int{cols, 1}}
	return k.Sum(s, src, 1)
}

// geluTanhBackwardSum launches ferry_gelu_tanh_backward_sum on Sum's plan
// and, when that splits the rows, ferry_sum_finish.
func (k *kernels) geluTanhBackwardSum(dst, sum, grad, z device.View, rows, cols int64, plan sumPlan) error {
	p, err := k.ptrs(dst, sum, grad, z)
	if err != nil {
		return err
	}
	var pp cu.DevicePtr
	if plan.splits > 1 {
		partial, err := k.d.alloc.Alloc(plan.splits*cols*8, device.Temporary)
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
	a := newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(pp).Ptr(p[2]).Ptr(p[3]).I64(rows).I64(cols).I64(plan.chunk)
	if err := k.launch("ferry_gelu_tanh_backward_sum", plan.grid, block1, a); err != nil {
		return err
	}
	if plan.splits > 1 {
		return k.launch("ferry_sum_finish", k.grid1(cols), block1,
			newArgs().Ptr(p[1]).Ptr(pp).F32(1).I64(cols).I64(plan.splits))
	}
	return nil
}

// adamwTable is ADAMW_TABLE in kernels/fused.cu: the tensors one launch
// of ferry_adamw_multi updates at most (struct AdamWTable stays within
// the 4 KiB of kernel parameters).
const adamwTable = 40

// adamwChunk is the elements a block updates per chunk.
const adamwChunk = 16384

// AdamWSteps updates the tensors of ts with ferry_adamw_multi, up to
// adamwTable of them a launch, the table passed as a kernel parameter.
func (k *kernels) AdamWSteps(ts []device.AdamWTensors, p device.AdamWParams) error {
	decay, stepSize, bc2Sqrt := adamwScalars(p)
	for len(ts) > 0 {
		// struct AdamWTable: count, chunk, w, g, m, v, n, first[count+1].
		var w, g, m, v, n, first [adamwTable]int64
		var total int64
		count := 0
		for len(ts) > 0 && count < adamwTable {
			t := ts[0]
			ts = ts[1:]
			size := int64(t.Param.Numel())
			if size == 0 {
				continue
			}
			ptr, err := k.ptrs(t.Param, t.Grad, t.ExpAvg, t.ExpAvgSq)
			if err != nil {
				return err
			}
			w[count], g[count], m[count], v[count], n[count] = int64(ptr[0]), int64(ptr[1]), int64(ptr[2]), int64(ptr[3]), size
			first[count] = total
			total += (size + adamwChunk - 1) / adamwChunk
			count++
		}
		if count == 0 {
			continue
		}
		table := make([]int64, 0, 2+6*adamwTable+1)
		table = append(table, int64(count), adamwChunk)
		for _, col := range [][adamwTable]int64{w, g, m, v, n} {
			table = append(table, col[:]...)
		}
		table = append(table, first[:count]...)
		table = append(table, total)
		table = append(table, make([]int64, adamwTable-count)...)
		if total > 1<<31-1 {
			return fmt.Errorf("%s: adamw over %d chunks: %w", k.d.name, total, device.ErrNotSupported)
		}
		grid := k.grid1(total * threads) // a block per chunk, at most 32 per multiprocessor
		err := k.launch("ferry_adamw_multi", grid, block1, newArgs().Int64s(table...).
			F32(decay).F32(p.Beta1).F32(p.Beta2).F32(p.Eps).F32(stepSize).F32(bc2Sqrt))
		if err != nil {
			return err
		}
	}
	return nil
}

var (
	_ device.FusedGELUKernels        = (*kernels)(nil)
	_ device.MultiTensorOptimKernels = (*kernels)(nil)
)

// AddLayerNorm writes x + r into sum and LayerNorm(sum) into dst, mean and
// rstd in one launch (ferry_add_layer_norm: ferry_layer_norm's operations
// on the sum, so Binary's and LayerNorm's bits).
func (k *kernels) AddLayerNorm(sum, dst, mean, rstd, x, r, weight, bias device.View, eps float32) error {
	C, total := lastDim(x.Shape), int64(x.Numel())
	if total == 0 {
		return nil
	}
	rows := total / C
	p, err := k.ptrs(sum, dst, mean, rstd, x, r, weight, bias)
	if err != nil {
		return err
	}
	return k.launch("ferry_add_layer_norm", k.rowGrid(rows), block1,
		newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).Ptr(p[5]).Ptr(p[6]).Ptr(p[7]).I64(rows).I64(C).F32(eps))
}

var _ device.FusedAddLayerNormKernels = (*kernels)(nil)

package cuda

import (
	"fmt"

	"ferry/device"
)

// The fused kernels of kernels/fused.cu: Linear's bias with GPT-2's GELU
// (device.FusedGELUKernels) and multi-tensor AdamW
// (device.MultiTensorOptimKernels).

// BiasGELUTanh adds bias to z in place and writes GELUTanh(z) into dst in
// one launch (Binary's Add and Unary's GELUTanh: their operations, so
// their bits).
func (k *kernels) BiasGELUTanh(dst, z, bias device.View) error {
	n := int64(dst.Numel())
	if n == 0 {
		return nil
	}
	cols := int64(dst.Shape[len(dst.Shape)-1])
	p, err := k.ptrs(dst, z, bias)
	if err != nil {
		return err
	}
	return k.launch("ferry_bias_gelu_tanh", k.grid1(n), block1, newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).I64(n).I64(cols))
}

// GELUTanhBackwardSum is Binary(GELUTanhGrad) and, for the bias gradient,
// Sum over the rows: two launches, the unfused kernels' bits. (A fused
// pass would have to reproduce Sum's split over the GPU to give its bits.)
func (k *kernels) GELUTanhBackwardSum(dst, sum, grad, z device.View) error {
	if err := k.Binary(device.GELUTanhGrad, dst, grad, z); err != nil {
		return err
	}
	if sum.Block == nil {
		return nil
	}
	rows, cols := 1, 1
	if len(dst.Shape) > 0 {
		cols = dst.Shape[len(dst.Shape)-1]
		if cols > 0 {
			rows = dst.Numel() / cols
		} else {
			rows = 0
		}
	}
	if cols == 0 {
		return nil
	}
	s := device.View{Block: sum.Block, Off: sum.Off, Shape: []int{1, cols}, Strides: []int{cols, 1}}
	src := device.View{Block: dst.Block, Off: dst.Off, Shape: []int{rows, cols}, Strides: []int{cols, 1}}
	return k.Sum(s, src, 1)
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

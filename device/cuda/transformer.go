package cuda

import (
	"encoding/binary"
	"fmt"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// The transformer kernel families (device.EmbeddingKernels,
// LayerNormKernels, AttentionKernels, DropoutKernels) on the GPU, launching
// kernels/transformer.cu. Like the CPU device's, every sum runs in an order fixed
// by the shapes: no float atomics, results repeat bit for bit.

var (
	_ device.EmbeddingKernels = (*kernels)(nil)
	_ device.LayerNormKernels = (*kernels)(nil)
	_ device.AttentionKernels = (*kernels)(nil)
	_ device.DropoutKernels   = (*kernels)(nil)
)

// rowGrid is the grid of a block-per-row kernel (grid-stride over rows):
// one block per row, at most 32 per multiprocessor.
func (k *kernels) rowGrid(rows int64) cu.Dim3 {
	limit := int64(max(k.d.props.SMs, 1)) * 32
	return cu.Dim3{X: uint32(max(1, min(rows, limit))), Y: 1, Z: 1}
}

// scratch allocates n bytes for the duration of one call. The caller
// frees it as soon as its last launch is queued: whoever gets the block
// next runs after that launch on the compute stream.
func (k *kernels) scratch(n int64) (*device.Block, cu.DevicePtr, error) {
	b, err := k.d.alloc.Alloc(n, device.Temporary)
	if err != nil {
		return nil, 0, err
	}
	p, err := k.d.ptr(device.View{Block: b})
	if err != nil {
		k.d.alloc.Free(b)
		return nil, 0, err
	}
	return b, p, nil
}

func lastDim(shape []int) int64 {
	if len(shape) == 0 {
		return 1
	}
	return int64(shape[len(shape)-1])
}

func (k *kernels) Gather(dst, table, idx device.View) error {
	return k.embedding("embedding", "ferry_embedding_gather", dst, table, idx, lastDim(table.Shape))
}

func (k *kernels) ScatterAdd(dst, src, idx device.View) error {
	return k.embedding("embedding_backward", "ferry_embedding_scatter_add", dst, src, idx, lastDim(dst.Shape))
}

// embedding runs the gather or the scatter-add and reports an index
// outside [0, V) as the CPU device does, naming it.
//
// Note [index check]: the kernels skip such an index and keep the smallest
// position holding one in a word of scratch (kernels/transformer.cu, Note [bad
// indices]), which this reads back: one synchronisation of the compute
// stream per call. That is the price of a bad index being an error of the
// call, as on the CPU, rather than a fault of the whole context at some
// later synchronisation.
func (k *kernels) embedding(op, name string, a, b, idx device.View, C int64) error {
	n := int64(idx.Numel())
	if n == 0 {
		return nil
	}
	V := int64(b.Shape[0])
	if name == "ferry_embedding_scatter_add" {
		V = int64(a.Shape[0])
	}
	p, err := k.ptrs(a, b, idx)
	if err != nil {
		return err
	}
	// Scratch, all ones: the bad-index word and, for the scatter-add, the
	// position links next[n], prev[n] and last[V] (kernels/transformer.cu).
	words := int64(1)
	if name == "ferry_embedding_scatter_add" {
		words += 2*n + V
	}
	bad, bp, err := k.scratch(8 * words)
	if err != nil {
		return err
	}
	defer k.d.alloc.Free(bad)
	if err := k.d.ctx.MemsetD32Async(bp, ^uint32(0), 2*words, k.d.compute.h); err != nil {
		return fmt.Errorf("%s: %s: %w", k.d.name, op, err)
	}
	if name == "ferry_embedding_gather" {
		if err := k.launch(name, k.grid1(n*C), block1, newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(bp).I64(n).I64(V).I64(C)); err != nil {
			return err
		}
	} else {
		next, prev, last := bp+8, bp+8+cu.DevicePtr(8*n), bp+8+cu.DevicePtr(16*n)
		if err := k.launch("ferry_embedding_links", cu.Dim3{X: 1, Y: 1, Z: 1}, block1,
			newArgs().Ptr(next).Ptr(prev).Ptr(last).Ptr(p[2]).I64(n).I64(V)); err != nil {
			return err
		}
		if err := k.launch(name, k.rowGrid(n), block1,
			newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(next).Ptr(prev).Ptr(bp).I64(n).I64(V).I64(C)); err != nil {
			return err
		}
	}
	var word [8]byte
	if err := k.Download(word[:], device.View{Block: bad}); err != nil {
		return err
	}
	pos := binary.LittleEndian.Uint64(word[:])
	if pos == ^uint64(0) {
		return nil
	}
	var v [4]byte
	if err := k.Download(v[:], device.View{Block: idx.Block, Off: idx.Off + int(pos)}); err != nil {
		return err
	}
	return fmt.Errorf("%s: %s: index %d (position %d) is outside [0, %d)", k.d.name, op, int32(binary.LittleEndian.Uint32(v[:])), pos, V)
}

func (k *kernels) LayerNorm(dst, mean, rstd, x, weight, bias device.View, eps float32) error {
	C, total := lastDim(x.Shape), int64(x.Numel())
	if total == 0 {
		return nil
	}
	rows := total / C
	p, err := k.ptrs(dst, mean, rstd, x, weight, bias)
	if err != nil {
		return err
	}
	return k.launch("ferry_layer_norm", k.rowGrid(rows), block1,
		newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).Ptr(p[5]).I64(rows).I64(C).F32(eps))
}

func (k *kernels) LayerNormBackward(dx, dweight, dbias, grad, x, mean, rstd, weight device.View) error {
	C, total := lastDim(x.Shape), int64(x.Numel())
	if total == 0 {
		return nil
	}
	rows := total / C
	p, err := k.ptrs(dx, grad, x, mean, rstd, weight, dweight, dbias)
	if err != nil {
		return err
	}
	if err := k.launch("ferry_layer_norm_backward", k.rowGrid(rows), block1,
		newArgs().Ptr(p[0]).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).Ptr(p[5]).I64(rows).I64(C)); err != nil {
		return err
	}
	if dweight.Block == nil && dbias.Block == nil {
		return nil
	}
	// Column sums: a thread per column, the rows split into chunks when
	// the columns alone leave the GPU idle (as Sum splits).
	base := (C + threads - 1) / threads
	splits := int64(1)
	if target := int64(4 * max(k.d.props.SMs, 1)); base < target {
		splits = max(1, min((target+base-1)/base, (rows+31)/32, 65535))
	}
	chunk := (rows + splits - 1) / splits
	splits = (rows + chunk - 1) / chunk
	var pp cu.DevicePtr
	if splits > 1 {
		partial, ptr, err := k.scratch(2 * splits * C * 8)
		if err != nil {
			return err
		}
		defer k.d.alloc.Free(partial)
		pp = ptr
	}
	grid := cu.Dim3{X: uint32(base), Y: uint32(splits), Z: 1}
	if err := k.launch("ferry_layer_norm_params", grid, block1,
		newArgs().Ptr(p[6]).Ptr(p[7]).Ptr(pp).Ptr(p[1]).Ptr(p[2]).Ptr(p[3]).Ptr(p[4]).I64(rows).I64(C).I64(chunk)); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	return k.launch("ferry_layer_norm_params_finish", k.grid1(C), block1,
		newArgs().Ptr(p[6]).Ptr(p[7]).Ptr(pp).I64(C).I64(splits))
}

// dropoutArgs appends a dropout's threshold, scale, Philox key and mask
// offset, as
// kernels/transformer.cu takes them.
func dropoutArgs(a *cu.Args, p float32, key device.DropoutKey) *cu.Args {
	kk, step := key.PhiloxKey()
	return a.I32(int32(device.DropoutThreshold(p))).F32(1 / (1 - p)).
		I32(int32(kk[0])).I32(int32(kk[1])).I32(int32(step[0])).I32(int32(step[1])).I64(int64(key.Offset))
}

func (k *kernels) Dropout(dst, src device.View, p float32, key device.DropoutKey) error {
	n := int64(src.Numel())
	if n == 0 {
		return nil
	}
	if dst.DType == device.BFloat16 || src.DType == device.BFloat16 {
		return k.dropoutBF16(dst, src, n, p, key)
	}
	if p >= 1 {
		return k.Fill(dst, 0)
	}
	ptr, err := k.ptrs(dst, src)
	if err != nil {
		return err
	}
	return k.launch("ferry_dropout", k.grid1((n+3)/4), block1, dropoutArgs(newArgs().Ptr(ptr[0]).Ptr(ptr[1]).I64(n), p, key))
}

// heads encodes struct Heads (kernels/transformer.cu): B, H, T, D, then the batch,
// head and row strides of q, k, v and grad (zeros where absent).
func heads(q, k, v, g device.View) []int64 {
	out := make([]int64, 0, 16)
	for _, d := range q.Shape[:4] {
		out = append(out, int64(d))
	}
	for _, x := range []device.View{q, k, v, g} {
		if x.Block == nil {
			out = append(out, 0, 0, 0)
			continue
		}
		out = append(out, int64(x.Strides[0]), int64(x.Strides[1]), int64(x.Strides[2]))
	}
	return out
}

// attnArgs appends what every attention kernel takes after its pointers.
func attnArgs(a *cu.Args, L []int64, p device.AttentionParams) *cu.Args {
	a.Int64s(L...).F32(p.Scale).I32(b2i(p.Causal)).I32(b2i(p.Dropout > 0))
	return dropoutArgs(a, p.Dropout, p.Key)
}

func (k *kernels) Attention(out, lse, q, kk, v device.View, p device.AttentionParams) error {
	B, H, T, D := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	if T == 0 || D == 0 || B*H == 0 {
		return nil
	}
	ptr, err := k.ptrs(out, lse, q, kk, v)
	if err != nil {
		return err
	}
	a := newArgs().Ptr(ptr[0]).Ptr(ptr[1]).Ptr(ptr[2]).Ptr(ptr[3]).Ptr(ptr[4])
	return k.launch("ferry_attention", k.tileGrid(B*H, T), block1, attnArgs(a, heads(q, kk, v, device.View{}), p))
}

// attnTile is the rows (queries or keys) of one block's tile in the
// attention kernels (ATT in kernels/transformer.cu).
const attnTile = 32

// tileGrid is the grid of an attention kernel: a block per tile of
// attnTile rows of each of the BH heads (grid-stride past rowGrid's
// limit).
func (k *kernels) tileGrid(BH, T int) cu.Dim3 {
	return k.rowGrid(int64(BH) * int64((T+attnTile-1)/attnTile))
}

// AttentionBackward runs three kernels, as FlashAttention-2: each row's
// Σ dO·O into scratch, then dq with a block per tile of query rows and dk,
// dv with a block per tile of keys, each recomputing the weights from lse
// tile by tile (no atomics, so results repeat bit for bit, at the price
// of computing the scores twice).
func (k *kernels) AttentionBackward(dq, dk, dv, grad, q, kk, v, out, lse device.View, p device.AttentionParams) error {
	B, H, T, D := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	if T == 0 || D == 0 || B*H == 0 {
		return nil
	}
	rows := int64(B * H * T)
	ptr, err := k.ptrs(dq, dk, dv, grad, q, kk, v, out, lse)
	if err != nil {
		return err
	}
	delta, dp, err := k.scratch(4 * rows)
	if err != nil {
		return err
	}
	defer k.d.alloc.Free(delta)
	L := heads(q, kk, v, grad)
	if err := k.launch("ferry_attention_delta", k.grid1(rows), block1,
		newArgs().Ptr(dp).Ptr(ptr[3]).Ptr(ptr[7]).Int64s(L...)); err != nil {
		return err
	}
	a := newArgs().Ptr(ptr[0]).Ptr(ptr[3]).Ptr(ptr[4]).Ptr(ptr[5]).Ptr(ptr[6]).Ptr(ptr[8]).Ptr(dp)
	if err := k.launch("ferry_attention_backward_q", k.tileGrid(B*H, T), block1, attnArgs(a, L, p)); err != nil {
		return err
	}
	a = newArgs().Ptr(ptr[1]).Ptr(ptr[2]).Ptr(ptr[3]).Ptr(ptr[4]).Ptr(ptr[5]).Ptr(ptr[6]).Ptr(ptr[8]).Ptr(dp)
	return k.launch("ferry_attention_backward_kv", k.tileGrid(B*H, T), block1, attnArgs(a, L, p))
}

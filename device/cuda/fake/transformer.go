package fake

import (
	"math"

	"ferry/device"
	"ferry/device/cpu"
)

// The launches of device/cuda/kernels/transformer.cu (the transformer kernels:
// dropout, embedding, layer norm, attention) on the CPU device's kernels
// (Note [one source per kernel]).

func init() {
	register(map[string]kernelFunc{
		"ferry_dropout":                  func(k *launch) { dropout(k, false) },
		"ferry_dropout_bf16":             func(k *launch) { dropout(k, true) },
		"ferry_embedding_gather":         embeddingGather,
		"ferry_embedding_links":          func(k *launch) { k.requireBlock(block, 1) },
		"ferry_embedding_scatter_add":    embeddingScatterAdd,
		"ferry_layer_norm":               layerNorm,
		"ferry_layer_norm_backward":      layerNormBackward,
		"ferry_layer_norm_params":        layerNormParams,
		"ferry_layer_norm_params_finish": finished,
		"ferry_attention":                attention,
		"ferry_attention_delta":          attentionDelta,
		"ferry_attention_backward_q":     func(k *launch) { attentionBackward(k, true) },
		"ferry_attention_backward_kv":    func(k *launch) { attentionBackward(k, false) },
	})
}

func (k *launch) u32(i int) uint32 { return uint32(k.i32(i)) }

// drop reads a dropout's parameters from parameter i on (struct AttnDrop,
// and ferry_dropout's: threshold, scale, Philox key words k0 k1, counter
// words s0 s1, mask offset) and returns a probability and a key that give
// them, which is what the CPU device's kernels take.
func (k *launch) drop(i int) (float32, device.DropoutKey) {
	thr, scale := k.u32(i), k.f32(i+1)
	// PhiloxKey's key is Seed xor a mix of Op: with Op 0, Seed is the key
	// words xor the key of the zero DropoutKey.
	zero, _ := device.DropoutKey{}.PhiloxKey()
	key := device.DropoutKey{
		Seed:   uint64(k.u32(i+2)^zero[0]) | uint64(k.u32(i+3)^zero[1])<<32,
		Step:   uint64(k.u32(i+4)) | uint64(k.u32(i+5))<<32,
		Offset: uint64(k.i64(i + 6)),
	}
	p, ok := dropProbability(thr, scale)
	if !ok {
		k.fail("dropout threshold %#x and scale %v do not come from one probability", thr, scale)
	}
	return p, key
}

// dropProbability finds a p whose threshold (device.DropoutThreshold) and
// scale 1/(1-p), in float32, are thr and scale: the CUDA device computes
// both from the p it was given. Several p may give them (the threshold
// drops bits of a small p); each gives the same mask and scale.
func dropProbability(thr uint32, scale float32) (float32, bool) {
	p := float32(float64(thr) / (1 << 32))
	for p > 0 && device.DropoutThreshold(p) >= thr {
		p = math.Nextafter32(p, 0)
	}
	for range 1 << 20 {
		switch t := device.DropoutThreshold(p); {
		case t == thr && 1/(1-p) == scale:
			return p, true
		case t > thr:
			return 0, false
		}
		p = math.Nextafter32(p, 2)
	}
	return 0, false
}

// dropout is ferry_dropout(dst, src, n, drop) and ferry_dropout_bf16
// (dst, src, n, drop, zero), whose zero says p ≥ 1.
func dropout(k *launch, bf16 bool) {
	n := int(k.i64(2))
	k.oneD(int64(n), false, 0)
	dt := device.Float32
	p, key := k.drop(3)
	if bf16 {
		dt = device.BFloat16
		if k.i32(10) != 0 {
			p = 1
		}
	}
	k.must(host.(device.DropoutKernels).Dropout(k.contig(0, dt, n), k.contig(1, dt, n), p, key))
}

// badIndex is the embedding kernels' index check (Note [bad indices] in
// transformer.cu): the smallest position holding an index outside [0, V) goes
// into the word at parameter bad, and the launch does nothing else.
func (k *launch) badIndex(idx []int32, bad int, V int64) bool {
	for r, v := range idx {
		if v < 0 || int64(v) >= V {
			w := mem[uint64](k, bad)
			w[0] = min(w[0], uint64(r))
			return true
		}
	}
	return false
}

func (k *launch) int32s(i, n int) []int32 {
	k.contig(i, device.Int32, n)
	return mem[int32](k, i)[:n]
}

// embeddingGather is ferry_embedding_gather(dst, table, idx, bad, n, V, C).
func embeddingGather(k *launch) {
	n, V, C := int(k.i64(4)), int(k.i64(5)), int(k.i64(6))
	k.oneD(int64(n*C), false, 0)
	if k.badIndex(k.int32s(2, n), 3, int64(V)) {
		return
	}
	k.must(host.(device.EmbeddingKernels).Gather(k.contig(0, device.Float32, n, C), k.contig(1, device.Float32, V, C), k.contig(2, device.Int32, n)))
}

// embeddingScatterAdd is ferry_embedding_scatter_add(dst, src, idx, next,
// prev, bad, n, V, C); the links ferry_embedding_links made for it are
// not needed, the CPU's ScatterAdd adding repeated indices in order.
func embeddingScatterAdd(k *launch) {
	k.requireBlock(block, 1)
	n, V, C := int(k.i64(6)), int(k.i64(7)), int(k.i64(8))
	if k.badIndex(k.int32s(2, n), 5, int64(V)) {
		return
	}
	k.must(host.(device.EmbeddingKernels).ScatterAdd(k.contig(0, device.Float32, V, C), k.contig(1, device.Float32, n, C), k.contig(2, device.Int32, n)))
}

var layerNorms = host.(device.LayerNormKernels)

// layerNorm is ferry_layer_norm(dst, mean, rstd, x, w, b, rows, C, eps).
func layerNorm(k *launch) {
	k.requireBlock(block, 1)
	rows, C := int(k.i64(6)), int(k.i64(7))
	k.must(layerNorms.LayerNorm(k.contig(0, device.Float32, rows, C), k.contig(1, device.Float32, rows), k.contig(2, device.Float32, rows),
		k.contig(3, device.Float32, rows, C), k.contig(4, device.Float32, C), k.contig(5, device.Float32, C), k.f32(8)))
}

// layerNormBackward is ferry_layer_norm_backward(dx, grad, x, mean, rstd,
// w, rows, C).
func layerNormBackward(k *launch) {
	k.requireBlock(block, 1)
	rows, C := int(k.i64(6)), int(k.i64(7))
	k.must(layerNorms.LayerNormBackward(k.contig(0, device.Float32, rows, C), device.View{}, device.View{},
		k.contig(1, device.Float32, rows, C), k.contig(2, device.Float32, rows, C), k.contig(3, device.Float32, rows),
		k.contig(4, device.Float32, rows), k.contig(5, device.Float32, C)))
}

// layerNormParams is ferry_layer_norm_params(dw, db, partial, grad, x,
// mean, rstd, rows, C, chunk): the CPU's LayerNormBackward, its dx
// dropped (dw and db do not depend on the weight); split over the rows,
// it writes the sums itself and ferry_layer_norm_params_finish does
// nothing.
func layerNormParams(k *launch) {
	k.requireBlock(block, 1)
	rows, C := int(k.i64(7)), int(k.i64(8))
	k.must(layerNorms.LayerNormBackward(scratch(rows, C), k.contig(0, device.Float32, C), k.contig(1, device.Float32, C),
		k.contig(3, device.Float32, rows, C), k.contig(4, device.Float32, rows, C), k.contig(5, device.Float32, rows),
		k.contig(6, device.Float32, rows), device.View{}))
}

// heads is struct Heads: B, H, T, D, then the (batch, head, row) strides
// of q, k, v and g.
type heads struct {
	B, H, T, D int
	st         [4][3]int
}

func (k *launch) heads(i int) heads {
	L := heads{B: int(k.field(i, 0)), H: int(k.field(i, 1)), T: int(k.field(i, 2)), D: int(k.field(i, 3))}
	for op := range 4 {
		for a := range 3 {
			L.st[op][a] = int(k.field(i, 4+3*op+a))
		}
	}
	return L
}

// operand is pointer parameter i as operand op (0 q, 1 k, 2 v, 3 grad)
// of L: a [B, H, T, D] view whose last axis has stride 1.
func (L heads) operand(k *launch, i, op int) device.View {
	return k.view(i, device.Float32, []int{L.B, L.H, L.T, L.D}, []int{L.st[op][0], L.st[op][1], L.st[op][2], 1})
}

func (L heads) contig(k *launch, i int) device.View {
	return k.contig(i, device.Float32, L.B, L.H, L.T, L.D)
}
func (L heads) rows(k *launch, i int) device.View { return k.contig(i, device.Float32, L.B, L.H, L.T) }

// attnParams are the attention parameters from parameter i on: scale, causal,
// whether dropout is on, its parameters.
func (k *launch) attnParams(i int) device.AttentionParams {
	a := device.AttentionParams{Scale: k.f32(i), Causal: k.i32(i+1) != 0}
	if k.i32(i+2) != 0 {
		a.Dropout, a.Key = k.drop(i + 3)
	}
	return a
}

var attentions = host.(device.AttentionKernels)

// attention is ferry_attention(out, lse, q, k, v, L, scale, causal,
// dropout on, drop).
func attention(k *launch) {
	k.requireBlock(block, 1)
	L := k.heads(5)
	k.must(attentions.Attention(L.contig(k, 0), L.rows(k, 1), L.operand(k, 2, 0), L.operand(k, 3, 1), L.operand(k, 4, 2), k.attnParams(6)))
}

// attentionDelta is ferry_attention_delta(delta, grad, out, L): each
// row's Σ_d dO·O, by the CPU's Binary and Sum.
func attentionDelta(k *launch) {
	L := k.heads(3)
	k.oneD(int64(L.B*L.H*L.T), false, 0)
	prod := scratch(L.B, L.H, L.T, L.D)
	k.must(host.Binary(device.Mul, prod, L.operand(k, 1, 3), L.contig(k, 2)))
	k.must(host.Sum(k.contig(0, device.Float32, L.B, L.H, L.T, 1), prod, 1))
}

// attentionBackward is ferry_attention_backward_q(dq, grad, q, k, v, lse,
// delta, L, scale, causal, dropout on, drop), or (q false)
// ferry_attention_backward_kv(dk, dv, grad, q, k, v, lse, delta, L, …):
// the CPU's whole backward from delta, keeping the gradients launched
// for.
func attentionBackward(k *launch, q bool) {
	k.requireBlock(block, 1)
	o := 1 // the parameters after dq, or after dk and dv
	if !q {
		o = 2
	}
	L := k.heads(o + 6)
	var dq, dk, dv device.View
	if q {
		dq, dk, dv = L.contig(k, 0), scratch(L.B, L.H, L.T, L.D), scratch(L.B, L.H, L.T, L.D)
	} else {
		dq, dk, dv = scratch(L.B, L.H, L.T, L.D), L.contig(k, 0), L.contig(k, 1)
	}
	k.must(cpu.AttentionBackwardFromDelta(dq, dk, dv, L.operand(k, o, 3), L.operand(k, o+1, 0), L.operand(k, o+2, 1), L.operand(k, o+3, 2),
		L.rows(k, o+4), L.rows(k, o+5), k.attnParams(o+7)))
}

package ferry

import (
	"math"

	"ferry/device"
)

// Rotary position embeddings, as Llama applies them to queries and keys.
// RotaryEmbedding is a composite of existing ops (so it runs on every
// device, meta included) recorded as one op with its own backward, so that
// it saves only what its derivative needs: the tables cos and sin, as
// PyTorch 1.13's eager apply_rotary_pos_emb does. The forward runs its
// parts with recording off (composite) and records the result; the
// backward is written beside it from the same public ops.

// RotaryEmbedding applies rotary position embeddings to x [..., T, D] (D
// even) with cos and sin [T, D], in the "rotate_half" convention of
// Hugging Face's LlamaRotaryEmbedding and apply_rotary_pos_emb:
//
//	x·cos + rotate_half(x)·sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
//
// where cos and sin repeat their D/2 frequencies twice (RotaryTables
// makes them). The pairs rotated together are (i, i + D/2), not Meta's
// interleaved (2i, 2i + 1); Hugging Face's checkpoints are permuted for
// this convention. cos and sin are constants: no gradient flows to them.
// It saves cos and sin only.
func RotaryEmbedding(x, cos, sin *Tensor) *Tensor {
	if isBF16(x, cos, sin) {
		return inFloat32(x.dtype == device.BFloat16, func(w []*Tensor) *Tensor { return RotaryEmbedding(w[0], w[1], w[2]) }, x, cos, sin)
	}
	const op = "rotary_embedding"
	tp := tapeOf(op, x, cos, sin)
	sameDevice(op, x, cos, sin)
	floats32(op, x, cos, sin)
	r := x.Rank()
	if r < 2 || x.shape[r-1]%2 != 0 {
		panicf(op, "x must be [..., seq, head_dim] with an even head_dim, got %v", x.shape)
	}
	T, D := x.shape[r-2], x.shape[r-1]
	for _, c := range []*Tensor{cos, sin} {
		if c.Rank() != 2 || c.shape[0] != T || c.shape[1] != D {
			panicf(op, "cos and sin must be [%d, %d] for x %v, got %v", T, D, x.shape, c.shape)
		}
	}
	out := composite(tp, func() *Tensor {
		a := Mul(x, cos)
		rh := rotateHalf(x, false)
		b := Mul(rh, sin)
		rh.Release()
		defer releaseAll(a, b)
		return Add(a, b)
	})
	record(tp, op, out, []*Tensor{x}, []*Tensor{cos, sin}, func(bk *backward) {
		// dx = g·cos + rotate_halfᵀ(g·sin), rotate_halfᵀ(u) = cat(u[D/2:], -u[:D/2]).
		g := bk.Grad()
		a := Mul(g, bk.Saved(0))
		u := Mul(g, bk.Saved(1))
		b := rotateHalf(u, true)
		bk.Accumulate(0, Add(a, b))
		releaseAll(a, u, b)
	})
	return out
}

// rotateHalf returns cat(-x2, x1) (or, transposed, cat(x2, -x1)) of the
// halves x1, x2 of x's last axis.
func rotateHalf(x *Tensor, transposed bool) *Tensor {
	D := x.shape[x.Rank()-1]
	x1 := x.Narrow(-1, 0, D/2)
	x2 := x.Narrow(-1, D/2, D/2)
	defer releaseAll(x1, x2)
	if transposed {
		n := Neg(x1)
		defer n.Release()
		return Cat(-1, x2, n)
	}
	n := Neg(x2)
	defer n.Release()
	return Cat(-1, n, x1)
}

// RotaryTables returns the cos and sin tables [T, D] of rotary position
// embeddings for positions 0..T-1 and head width D (even), base theta, on
// dev, as Hugging Face's LlamaRotaryEmbedding computes them:
// inv_freq[i] = 1/theta^(2i/D), angle[t, i] = angle[t, i + D/2] = t·inv_freq[i].
// The angles are computed in float32 as PyTorch does (an outer product of
// float32 positions and float32 frequencies), their cos and sin in float64
// and rounded once. The caller owns the tables.
func RotaryTables(dev device.Device, T, D int, theta float64) (cos, sin *Tensor) {
	if T < 0 || D < 2 || D%2 != 0 || !(theta > 0) {
		panicf("rotary_tables", "need T >= 0, an even D >= 2 and theta > 0, got T %d, D %d, theta %v", T, D, theta)
	}
	if !device.HasData(dev) {
		// No values to compute or upload (the meta device, where the
		// planner replays a Llama's step many times: the tables of 4096
		// positions took a quarter of its planning time).
		return Empty(dev, T, D), Empty(dev, T, D)
	}
	c := make([]float32, T*D)
	s := make([]float32, T*D)
	half := D / 2
	inv := make([]float32, half)
	for i := range inv {
		// PyTorch: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)),
		// the exponent in float32, the power and quotient in float32.
		e := float32(2*i) / float32(D)
		inv[i] = float32(1 / float32(math.Pow(theta, float64(e))))
	}
	for t := 0; t < T; t++ {
		for i := 0; i < half; i++ {
			a := float64(float32(t) * inv[i])
			cv, sv := float32(math.Cos(a)), float32(math.Sin(a))
			c[t*D+i], c[t*D+i+half] = cv, cv
			s[t*D+i], s[t*D+i+half] = sv, sv
		}
	}
	return FromFloat32s(dev, c, T, D), FromFloat32s(dev, s, T, D)
}

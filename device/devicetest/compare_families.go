package devicetest

import (
	"math"

	"ferry/device"
)

// compareFamilies runs the transformer families (embedding, layer norm,
// dropout, attention) on the device and the reference with the same random
// inputs, where both have them. Gather, the scatter-add (float32 additions
// in position order on both) and dropout (one Philox stream) must agree bit
// for bit.
func compareFamilies(e *env) {
	p := e.pair()
	for _, d := range []device.Device{p.dev, p.ref} {
		k := d.Kernels()
		_, emb := k.(device.EmbeddingKernels)
		_, ln := k.(device.LayerNormKernels)
		_, dr := k.(device.DropoutKernels)
		_, at := k.(device.AttentionKernels)
		if !emb || !ln || !dr || !at {
			e.Skipf("%s lacks a transformer kernel family (the root package composes them there)", d.Name())
		}
	}
	rows, cols := p.sz.rows, p.sz.cols
	key := device.DropoutKey{Seed: p.rng.Uint64(), Op: 3, Step: 7}

	// Embedding: V rows, n positions with repeats.
	V, n := 50, 4*rows
	idx := make([]float32, n)
	for i := range idx {
		idx[i] = math.Float32frombits(uint32(p.rng.IntN(V)))
	}
	ix := p.tensor([]int{n}, idx)
	table := p.rand([]int{V, cols}, -1, 1)
	out := p.tensor([]int{n, cols}, nil)
	p.run("embedding", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.EmbeddingKernels).Gather(pick(out), pick(table), pick(ix))
	})
	p.check("embedding", out, 0)
	grad := p.rand([]int{n, cols}, -1, 1)
	p.run("embedding backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.EmbeddingKernels).ScatterAdd(pick(table), pick(grad), pick(ix))
	})
	p.check("embedding backward", table, 0)

	// Layer norm.
	x, w, b := p.rand([]int{rows, cols}, -3, 5), p.rand([]int{cols}, 0.5, 1.5), p.rand([]int{cols}, -1, 1)
	y, mean, rstd := p.tensor([]int{rows, cols}, nil), p.tensor([]int{rows}, nil), p.tensor([]int{rows}, nil)
	p.run("layer_norm", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.LayerNormKernels).LayerNorm(pick(y), pick(mean), pick(rstd), pick(x), pick(w), pick(b), 1e-5)
	})
	p.check("layer_norm", y, p.tol)
	p.check("layer_norm mean", mean, p.tol)
	p.check("layer_norm rstd", rstd, p.tol)
	g := p.rand([]int{rows, cols}, -1, 1)
	dx, dw, db := p.tensor([]int{rows, cols}, nil), p.tensor([]int{cols}, nil), p.tensor([]int{cols}, nil)
	p.run("layer_norm backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.LayerNormKernels).LayerNormBackward(pick(dx), pick(dw), pick(db), pick(g), pick(x), pick(mean), pick(rstd), pick(w))
	})
	p.check("layer_norm dx", dx, p.tol)
	p.check("layer_norm dweight", dw, p.tol)
	p.check("layer_norm dbias", db, p.tol)

	// Dropout.
	d := p.tensor([]int{rows, cols}, nil)
	p.run("dropout", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.DropoutKernels).Dropout(pick(d), pick(x), 0.3, key)
	})
	p.check("dropout", d, 0)

	// Causal attention with dropout on the weights.
	B, H, T, D := 2, 3, rows, 64
	shape := []int{B, H, T, D}
	q, kk, v, gOut := p.rand(shape, -1, 1), p.rand(shape, -1, 1), p.rand(shape, -1, 1), p.rand(shape, -1, 1)
	for _, causal := range []bool{true, false} {
		ap := device.AttentionParams{Causal: causal, Scale: 0.125, Dropout: 0.1, Key: key}
		o, lse := p.tensor(shape, nil), p.tensor(shape[:3], nil)
		p.run("attention", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.AttentionKernels).Attention(pick(o), pick(lse), pick(q), pick(kk), pick(v), ap)
		})
		p.check("attention", o, p.tol)
		p.check("attention lse", lse, p.tol)
		dq, dk, dv := p.tensor(shape, nil), p.tensor(shape, nil), p.tensor(shape, nil)
		p.run("attention backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.AttentionKernels).AttentionBackward(pick(dq), pick(dk), pick(dv), pick(gOut), pick(q), pick(kk), pick(v), pick(o), pick(lse), ap)
		})
		p.check("attention dq", dq, p.tol)
		p.check("attention dk", dk, p.tol)
		p.check("attention dv", dv, p.tol)
	}
}

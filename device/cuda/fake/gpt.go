package fake

import (
	"math"
	"math/bits"
)

// The Go versions of device/cuda/kernels/gpt.cu (the transformer kernels),
// walking blocks and threads as the CUDA code does wherever the order of a
// sum depends on it.

func init() {
	for name, f := range map[string]kernelFunc{
		"ferry_dropout":                  dropout,
		"ferry_embedding_gather":         embeddingGather,
		"ferry_embedding_links":          embeddingLinks,
		"ferry_embedding_scatter_add":    embeddingScatterAdd,
		"ferry_layer_norm":               layerNorm,
		"ferry_layer_norm_backward":      layerNormBackward,
		"ferry_layer_norm_params":        layerNormParams,
		"ferry_layer_norm_params_finish": layerNormParamsFinish,
		"ferry_attention":                attention,
		"ferry_attention_delta":          attentionDelta,
		"ferry_attention_backward_q":     attentionBackwardQ,
		"ferry_attention_backward_kv":    attentionBackwardKV,
	} {
		kernelsByName[name] = f
	}
}

func (k *launch) u32(i int) uint32 { return uint32(k.i32(i)) }

// ---- dropout ----

// philox is device.Philox4x32, written again as gpt.cu writes it.
func philox(c [4]uint32, k0, k1 uint32) [4]uint32 {
	for i := 0; i < 10; i++ {
		hi0, lo0 := bits.Mul32(0xD2511F53, c[0])
		hi1, lo1 := bits.Mul32(0xCD9E8D57, c[2])
		c = [4]uint32{hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0}
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return c
}

// drop is struct AttnDrop, and ferry_dropout's key: parameters i … i+7
// are on (attention only), thr, scale, k0, k1, s0, s1, off.
type drop struct {
	on             bool
	thr            uint32
	scale          float32
	k0, k1, s0, s1 uint32
	off            int64
}

func (k *launch) drop(i int, on bool) drop {
	return drop{on, k.u32(i), k.f32(i + 1), k.u32(i + 2), k.u32(i + 3), k.u32(i + 4), k.u32(i + 5), k.i64(i + 6)}
}

func (d drop) bits(b uint64) [4]uint32 {
	return philox([4]uint32{uint32(b), uint32(b >> 32), d.s0, d.s1}, d.k0, d.k1)
}

// apply is AttnDrop::apply: e is the weight's index, off+e its mask
// element.
func (d drop) apply(p float32, e int64) float32 {
	if !d.on {
		return p
	}
	e += d.off
	if d.bits(uint64(e) >> 2)[e&3] >= d.thr {
		return p * d.scale
	}
	return 0
}

func dropout(k *launch) {
	dst, src, n, d := mem[float32](k, 0), mem[float32](k, 1), k.i64(2), k.drop(3, true)
	first, skew := d.off>>2, d.off&3
	gridStride(k, (skew+n+3)/4, func(b int64) {
		r := d.bits(uint64(first + b))
		for lane := int64(0); lane < 4; lane++ {
			if i := 4*b + lane - skew; i >= 0 && i < n {
				if r[lane] >= d.thr {
					dst[i] = src[i] * d.scale
				} else {
					dst[i] = 0
				}
			}
		}
	})
}

// ---- embedding ----

func embeddingGather(k *launch) {
	dst, table, idx, bad := mem[float32](k, 0), mem[float32](k, 1), mem[int32](k, 2), mem[uint64](k, 3)
	n, V, C := k.i64(4), k.i64(5), k.i64(6)
	gridStride(k, n*C, func(i int64) {
		r, c := i/C, i%C
		v := int64(idx[r])
		if v < 0 || v >= V {
			if c == 0 {
				bad[0] = min(bad[0], uint64(r))
			}
			return
		}
		dst[i] = table[v*C+c]
	})
}

// embeddingLinks chains the positions of each index in order (prev and
// next, -1 where there is none), as kernels/gpt.cu's tiles do.
func embeddingLinks(k *launch) {
	k.requireBlock(block, 1)
	next, prev, last, idx := mem[int64](k, 0), mem[int64](k, 1), mem[int64](k, 2), mem[int32](k, 3)
	n, V := k.i64(4), k.i64(5)
	for r := int64(0); r < n; r++ {
		v := int64(idx[r])
		if v < 0 || v >= V {
			continue
		}
		p := last[v]
		prev[r] = p
		if p >= 0 {
			next[p] = r
		}
		last[v] = r
	}
}

func embeddingScatterAdd(k *launch) {
	dst, src, idx := mem[float32](k, 0), mem[float32](k, 1), mem[int32](k, 2)
	next, prev, bad := mem[int64](k, 3), mem[int64](k, 4), mem[uint64](k, 5)
	n, V, C := k.i64(6), k.i64(7), k.i64(8)
	rowsOf(k, n, func(r int64) {
		v := idx[r]
		if v < 0 || int64(v) >= V {
			bad[0] = min(bad[0], uint64(r))
			return
		}
		if prev[r] >= 0 {
			return // not the first position of v: another block owns the row
		}
		row := dst[int64(v)*C : (int64(v)+1)*C]
		for j := r; j >= 0; j = next[j] {
			for c := range row {
				row[c] += src[j*C+int64(c)]
			}
		}
	})
}

// ---- layer norm ----

// threadSums is the per-thread partial sums of f over the block-strided
// columns [0, C), added by the block's tree (tree_sum).
func threadSums(C int64, f func(c int64) float64) float64 {
	var s [block]float64
	for t := int64(0); t < block; t++ {
		var acc float64
		for c := t; c < C; c += block {
			acc += f(c)
		}
		s[t] = acc
	}
	return treeSum(&s)
}

func layerNorm(k *launch) {
	dst, mean, rstd, x := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3)
	w, b, rows, C, eps := mem[float32](k, 4), mem[float32](k, 5), k.i64(6), k.i64(7), k.f32(8)
	rowsOf(k, rows, func(r int64) {
		mean[r], rstd[r] = layerNormRow(dst[r*C:(r+1)*C], x[r*C:(r+1)*C], w, b, eps)
	})
}

// layerNormRow is one row of ferry_layer_norm: y = (x - mean)·rstd·w + b
// with the row's mean and rstd (returned) summed as a block's threads
// sum them; w and b may be nil.
func layerNormRow(y, xr, w, b []float32, eps float32) (mean, rstd float32) {
	C := int64(len(xr))
	m := threadSums(C, func(c int64) float64 { return float64(xr[c]) }) / float64(C)
	ss := threadSums(C, func(c int64) float64 { e := float64(xr[c]) - m; return e * e })
	inv := 1 / math.Sqrt(ss/float64(C)+float64(eps))
	mf, invf := float32(m), float32(inv)
	for c, v := range xr {
		v = (v - mf) * invf
		if w != nil {
			v *= w[c]
		}
		if b != nil {
			v += b[c]
		}
		y[c] = v
	}
	return mf, invf
}

func layerNormBackward(k *launch) {
	dx, grad, x, mean, rstd := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), mem[float32](k, 4)
	w, rows, C := mem[float32](k, 5), k.i64(6), k.i64(7)
	rowsOf(k, rows, func(r int64) {
		xr, g, out := x[r*C:(r+1)*C], grad[r*C:(r+1)*C], dx[r*C:(r+1)*C]
		m, inv := mean[r], rstd[r]
		dy := func(c int64) float32 {
			if w != nil {
				return g[c] * w[c]
			}
			return g[c]
		}
		xh := func(c int64) float32 { return (xr[c] - m) * inv }
		a := float32(threadSums(C, func(c int64) float64 { return float64(dy(c)) }) / float64(C))
		bb := float32(threadSums(C, func(c int64) float64 { return float64(dy(c) * xh(c)) }) / float64(C))
		for c := range out {
			out[c] = inv * (dy(int64(c)) - a - xh(int64(c))*bb)
		}
	})
}

func layerNormParams(k *launch) {
	k.requireBlock(block, 1)
	dw, db, partial := mem[float32](k, 0), mem[float32](k, 1), mem[float64](k, 2)
	grad, x, mean, rstd := mem[float32](k, 3), mem[float32](k, 4), mem[float32](k, 5), mem[float32](k, 6)
	rows, C, chunk := k.i64(7), k.i64(8), k.i64(9)
	for by := int64(0); by < int64(k.grid.Y); by++ {
		for c := int64(0); c < min(int64(k.grid.X)*block, C); c++ {
			lo := by * chunk
			hi := min(lo+chunk, rows)
			var aw, ab float64
			for r := lo; r < hi; r++ {
				gv := grad[r*C+c]
				aw += float64(gv * ((x[r*C+c] - mean[r]) * rstd[r]))
				ab += float64(gv)
			}
			if k.grid.Y == 1 {
				if dw != nil {
					dw[c] = float32(aw)
				}
				if db != nil {
					db[c] = float32(ab)
				}
			} else {
				partial[2*by*C+c] = aw
				partial[(2*by+1)*C+c] = ab
			}
		}
	}
}

func layerNormParamsFinish(k *launch) {
	dw, db, partial, C, splits := mem[float32](k, 0), mem[float32](k, 1), mem[float64](k, 2), k.i64(3), k.i64(4)
	gridStride(k, C, func(c int64) {
		var aw, ab float64
		for s := int64(0); s < splits; s++ {
			aw += partial[2*s*C+c]
			ab += partial[(2*s+1)*C+c]
		}
		if dw != nil {
			dw[c] = float32(aw)
		}
		if db != nil {
			db[c] = float32(ab)
		}
	})
}

// ---- attention ----

// headsL is struct Heads: B, H, T, D, then the (batch, head, row) strides
// of q, k, v and g.
type headsL struct {
	B, H, T, D int64
	st         [4][3]int64
}

func (k *launch) heads(i int) headsL {
	L := headsL{B: k.field(i, 0), H: k.field(i, 1), T: k.field(i, 2), D: k.field(i, 3)}
	for op := 0; op < 4; op++ {
		for a := 0; a < 3; a++ {
			L.st[op][a] = k.field(i, 4+3*op+a)
		}
	}
	return L
}

// row returns row i of head bh of operand op (0 q, 1 k, 2 v, 3 g) in m.
func (L headsL) row(m []float32, op int, bh, i int64) []float32 {
	st := L.st[op]
	off := (bh/L.H)*st[0] + (bh%L.H)*st[1] + i*max(st[2], L.D, 1)
	return m[off : off+L.D]
}

func dot(a, b []float32) float32 {
	var s float32
	for d := range a {
		s += a[d] * b[d]
	}
	return s
}

// attnTile is ATT of kernels/gpt.cu: the rows (queries or keys) of a
// block's tile and the keys (queries) of each tile it walks.
const attnTile = 32

// attnTiles runs body for each block's tiles: head bh, first row r0.
func attnTiles(k *launch, L headsL, body func(bh, r0 int64)) {
	nt := (L.T + attnTile - 1) / attnTile
	rowsOf(k, L.B*L.H*nt, func(tile int64) { body(tile/nt, tile%nt*attnTile) })
}

// expf and logf are CUDA's in float32 (whose results may differ from
// these by an ulp or two: the fake is not bit for bit the GPU here).
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// fmaxf is CUDA's: a NaN operand is dropped.
func fmaxf(a, b float32) float32 {
	if a != a || b > a {
		return b
	}
	return a
}

// rowSum8 is row8_sum: the eight threads' partial sums through the xor
// butterfly.
func rowSum8(v [8]float32) float32 {
	for m := 4; m > 0; m >>= 1 {
		var w [8]float32
		for c := range w {
			w[c] = v[c] + v[c^m]
		}
		v = w
	}
	return v[0]
}

// attention is ferry_attention row by row: the rows of a tile, and the
// columns of a row, are independent, and each follows the kernel's order
// (key tiles of attnTile, thread t%8 of the row summing its keys t%8+8k).
func attention(k *launch) {
	out, lse, q, kk, v := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), mem[float32](k, 4)
	L, scale, causal := k.heads(5), k.f32(6), k.i32(7) != 0
	dr := k.drop(9, k.i32(8) != 0)
	T, D := L.T, L.D
	inf := float32(math.Inf(-1))
	attnTiles(k, L, func(bh, i0 int64) {
		nkeys := T
		if causal {
			nkeys = min(T, i0+attnTile)
		}
		for i := i0; i < min(i0+attnTile, T); i++ {
			qi := L.row(q, 0, bh, i)
			n := T
			if causal {
				n = i + 1
			}
			m, l := inf, float32(0)
			o := out[(bh*T+i)*D : (bh*T+i+1)*D]
			clear(o)
			var x, pd [attnTile]float32
			for j0 := int64(0); j0 < nkeys; j0 += attnTile {
				mt := inf
				for t := range int64(attnTile) {
					if j := j0 + t; j < n {
						x[t] = scale * dot(qi, L.row(kk, 1, bh, j))
						mt = fmaxf(mt, x[t])
					}
				}
				mn := fmaxf(m, mt)
				alpha := float32(1)
				if mn != inf {
					alpha = expf(m - mn)
				}
				var ps [8]float32
				for t := range int64(attnTile) {
					var p float32
					pd[t] = 0
					if j := j0 + t; j < n {
						p = expf(x[t] - mn)
						pd[t] = dr.apply(p, (bh*T+i)*T+j)
					}
					ps[t%8] += p
				}
				l = l*alpha + rowSum8(ps)
				m = mn
				for d := range o {
					o[d] *= alpha
				}
				for t := range min(attnTile, T-j0) {
					vj := L.row(v, 2, bh, j0+t)
					for d := range o {
						o[d] += pd[t] * vj[d]
					}
				}
			}
			for d := range o {
				o[d] /= l
			}
			lse[bh*T+i] = m + logf(l)
		}
	})
}

func attentionDelta(k *launch) {
	delta, grad, out, L := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), k.heads(3)
	gridStride(k, L.B*L.H*L.T, func(row int64) {
		delta[row] = dot(L.row(grad, 3, row/L.T, row%L.T), out[row*L.D:(row+1)*L.D])
	})
}

// attnDS is att_ds: from the recomputed score x and dP = dp, the weight
// after dropout and dS for element e.
func attnDS(x, dp, lse, delta float32, dr drop, e int64) (pd, ds float32) {
	p := expf(x - lse)
	return dr.apply(p, e), p * (dr.apply(dp, e) - delta)
}

// attentionBackwardQ is ferry_attention_backward_q row by row, each dq
// element summed over the keys in order.
func attentionBackwardQ(k *launch) {
	dq, grad, q, kk, v := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), mem[float32](k, 4)
	lse, delta, L, scale, causal := mem[float32](k, 5), mem[float32](k, 6), k.heads(7), k.f32(8), k.i32(9) != 0
	dr := k.drop(11, k.i32(10) != 0)
	T, D := L.T, L.D
	attnTiles(k, L, func(bh, i0 int64) {
		nkeys := T
		if causal {
			nkeys = min(T, i0+attnTile)
		}
		for i := i0; i < min(i0+attnTile, T); i++ {
			qi, gi := L.row(q, 0, bh, i), L.row(grad, 3, bh, i)
			n := T
			if causal {
				n = i + 1
			}
			o := dq[(bh*T+i)*D : (bh*T+i+1)*D]
			clear(o)
			var ds [attnTile]float32
			for j0 := int64(0); j0 < nkeys; j0 += attnTile {
				for t := range int64(attnTile) {
					ds[t] = 0
					if j := j0 + t; j < n {
						x := scale * dot(qi, L.row(kk, 1, bh, j))
						_, ds[t] = attnDS(x, dot(gi, L.row(v, 2, bh, j)), lse[bh*T+i], delta[bh*T+i], dr, (bh*T+i)*T+j)
					}
				}
				for t := range min(attnTile, T-j0) {
					kj := L.row(kk, 1, bh, j0+t)
					for d := range o {
						o[d] += ds[t] * kj[d]
					}
				}
			}
			for d := range o {
				o[d] *= scale
			}
		}
	})
}

// attentionBackwardKV is ferry_attention_backward_kv key by key, each
// element summed over the queries in order (causal: from the key tile's
// first row).
func attentionBackwardKV(k *launch) {
	dk, dv, grad, q, kk, v := mem[float32](k, 0), mem[float32](k, 1), mem[float32](k, 2), mem[float32](k, 3), mem[float32](k, 4), mem[float32](k, 5)
	lse, delta, L, scale, causal := mem[float32](k, 6), mem[float32](k, 7), k.heads(8), k.f32(9), k.i32(10) != 0
	dr := k.drop(12, k.i32(11) != 0)
	T, D := L.T, L.D
	attnTiles(k, L, func(bh, j0 int64) {
		first := int64(0)
		if causal {
			first = j0
		}
		for j := j0; j < min(j0+attnTile, T); j++ {
			kj, vj := L.row(kk, 1, bh, j), L.row(v, 2, bh, j)
			ok, ov := dk[(bh*T+j)*D:(bh*T+j+1)*D], dv[(bh*T+j)*D:(bh*T+j+1)*D]
			clear(ok)
			clear(ov)
			for i := first; i < T; i++ {
				var pd, ds float32
				if !causal || j <= i {
					qi, gi := L.row(q, 0, bh, i), L.row(grad, 3, bh, i)
					x := scale * dot(qi, kj)
					pd, ds = attnDS(x, dot(gi, vj), lse[bh*T+i], delta[bh*T+i], dr, (bh*T+i)*T+j)
				}
				qi, gi := L.row(q, 0, bh, i), L.row(grad, 3, bh, i)
				for d := range ok {
					ov[d] += pd * gi[d]
					ok[d] += ds * qi[d]
				}
			}
			for d := range ok {
				ok[d] *= scale
			}
		}
	})
}

package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"ferry/device"
)

// The transformer kernel families (device.EmbeddingKernels,
// LayerNormKernels, AttentionKernels, DropoutKernels) on the CPU. Every
// reduction runs in a fixed order, independent of the number of threads, so
// results are bitwise repeatable.

var (
	_ device.EmbeddingKernels = (*kernels)(nil)
	_ device.LayerNormKernels = (*kernels)(nil)
	_ device.AttentionKernels = (*kernels)(nil)
	_ device.DropoutKernels   = (*kernels)(nil)
)

func (k *kernels) Gather(dst, table, idx device.View) error {
	C := table.Shape[len(table.Shape)-1]
	V := table.Shape[0]
	n := idx.Numel()
	d, t, ix := floats(dst)[:n*C], floats(table)[:V*C], int32s(idx)[:n]
	if err := checkIndices("embedding", ix, V); err != nil {
		return err
	}
	parallelFor(n, max(1, elementGrain/max(C, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			i := int(ix[r])
			copy(d[r*C:(r+1)*C], t[i*C:(i+1)*C])
		}
	})
	return nil
}

// checkIndices reports the first index outside [0, V).
func checkIndices(op string, ix []int32, V int) error {
	for r, i := range ix {
		if i < 0 || int(i) >= V {
			return fmt.Errorf("%s: index %d (position %d) is outside [0, %d)", op, i, r, V)
		}
	}
	return nil
}

func (k *kernels) ScatterAdd(dst, src, idx device.View) error {
	C := dst.Shape[len(dst.Shape)-1]
	V := dst.Shape[0]
	n := idx.Numel()
	d, s, ix := floats(dst)[:V*C], floats(src)[:n*C], int32s(idx)[:n]
	if err := checkIndices("embedding_backward", ix, V); err != nil {
		return err
	}
	// Columns split across goroutines; within a column, rows in index
	// order: the sums do not depend on the thread count.
	const chunk = 64
	chunks := (C + chunk - 1) / chunk
	parallelFor(chunks, max(1, elementGrain/max(1, n*chunk)), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			c0, c1 := c*chunk, min(C, (c+1)*chunk)
			for r, i := range ix {
				row := d[int(i)*C+c0 : int(i)*C+c1]
				vecAdd(row, row, s[r*C+c0:r*C+c1])
			}
		}
	})
	return nil
}

func (k *kernels) LayerNorm(dst, mean, rstd, x, weight, bias device.View, eps float32) error {
	C := x.Shape[len(x.Shape)-1]
	rows := x.Numel() / max(C, 1)
	xs, d, mu, rs := floats(x)[:rows*C], floats(dst)[:rows*C], floats(mean)[:rows], floats(rstd)[:rows]
	var w, b []float32
	if weight.Block != nil {
		w = floats(weight)[:C]
	}
	if bias.Block != nil {
		b = floats(bias)[:C]
	}
	parallelFor(rows, max(1, elementGrain/(4*max(C, 1))), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			mu[r], rs[r] = layerNormRow(d[r*C:(r+1)*C], xs[r*C:(r+1)*C], w, b, eps)
		}
	})
	return nil
}

// layerNormRow normalises one row into out and returns its mean and rstd.
func layerNormRow(out, row, w, b []float32, eps float32) (mean, rstd float32) {
	C := len(row)
	var acc [8]float64
	lnSum(row, &acc)
	m := sum8(&acc) / float64(C)
	acc = [8]float64{}
	lnSqDev(row, m, &acc)
	inv := 1 / math.Sqrt(sum8(&acc)/float64(C)+float64(eps))
	mf, invf := float32(m), float32(inv)
	lnApply(out, row, w, b, mf, invf)
	return mf, invf
}

func (k *kernels) LayerNormBackward(dx, dweight, dbias, grad, x, mean, rstd, weight device.View) error {
	C := x.Shape[len(x.Shape)-1]
	rows := x.Numel() / max(C, 1)
	xs, g, dxs := floats(x)[:rows*C], floats(grad)[:rows*C], floats(dx)[:rows*C]
	mu, rs := floats(mean)[:rows], floats(rstd)[:rows]
	var w []float32
	if weight.Block != nil {
		w = floats(weight)[:C]
	}
	parallelFor(rows, max(1, elementGrain/(4*max(C, 1))), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, gr, out := xs[r*C:(r+1)*C], g[r*C:(r+1)*C], dxs[r*C:(r+1)*C]
			m, inv := mu[r], rs[r]
			// dx = rstd·(dŷ - mean(dŷ) - ŷ·mean(dŷ·ŷ)), dŷ = g·w.
			var s1, s2 [8]float64
			lnBwdSums(row, gr, w, m, inv, &s1, &s2)
			a, b := float32(sum8(&s1)/float64(C)), float32(sum8(&s2)/float64(C))
			lnBwdDx(out, row, gr, w, m, inv, a, b)
		}
	})
	if dweight.Block == nil && dbias.Block == nil {
		return nil
	}
	var dw, db []float32
	if dweight.Block != nil {
		dw = floats(dweight)[:C]
	}
	if dbias.Block != nil {
		db = floats(dbias)[:C]
	}
	// Column sums over rows in row order, columns split across goroutines.
	const chunk = 64
	chunks := (C + chunk - 1) / chunk
	parallelFor(chunks, max(1, elementGrain/max(1, rows*chunk)), func(lo, hi int) {
		var aw, ab [chunk]float64
		for ch := lo; ch < hi; ch++ {
			c0, c1 := ch*chunk, min(C, (ch+1)*chunk)
			clear(aw[:])
			clear(ab[:])
			lnColSums(xs, g, C, rows, c0, c1, mu, rs, aw[:], ab[:])
			for c := c0; c < c1; c++ {
				if dw != nil {
					dw[c] = float32(aw[c-c0])
				}
				if db != nil {
					db[c] = float32(ab[c-c0])
				}
			}
		}
	})
	return nil
}

func (k *kernels) Dropout(dst, src device.View, p float32, key device.DropoutKey) error {
	if err := checkEW("dropout", dst, src); err != nil {
		return err
	}
	if dst.DType != src.DType {
		return &device.UnsupportedError{Op: "dropout", DType: fmt.Sprintf("%s→%s", src.DType, dst.DType), Device: "cpu"}
	}
	n := src.Numel()
	// bfloat16 (Note [bfloat16 elementwise]): a kept element is widened,
	// scaled in float32 and rounded, a dropped one is +0 as in float32.
	bf := src.DType == device.BFloat16
	var d, s []float32
	var dh, sh []uint16
	if bf {
		dh, sh = uint16s(dst)[:n], uint16s(src)[:n]
	} else {
		d, s = floats(dst)[:n], floats(src)[:n]
	}
	if p >= 1 {
		clear(d)
		clear(dh)
		return nil
	}
	scale := 1 / (1 - p)
	thr := device.DropoutThreshold(p)
	grain := max(4, elementGrain&^3)
	// Element i is mask element key.Offset+i: walk the mask's blocks of
	// four that the tensor overlaps.
	first := key.Offset / 4
	skew := int(key.Offset % 4)
	parallelFor((skew+n+3)/4, grain/4, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			bits := key.DropoutBits(first + uint64(blk))
			for lane := 0; lane < 4; lane++ {
				i := blk*4 + lane - skew
				if i < 0 {
					continue
				}
				if i >= n {
					break
				}
				keep := bits[lane] >= thr
				switch {
				case bf && keep:
					dh[i] = device.ToBFloat16(device.FromBFloat16(sh[i]) * scale)
				case bf:
					dh[i] = 0
				case keep:
					d[i] = s[i] * scale
				default:
					d[i] = 0
				}
			}
		}
	})
	return nil
}

// headGeometry reads a [B, H, T, D] view: the offset of head (b, h) and
// the stride between its rows (the last axis has stride 1).
type headGeometry struct {
	B, H, T, D int
	v          device.View
}

func geometry(v device.View) headGeometry {
	return headGeometry{v.Shape[0], v.Shape[1], v.Shape[2], v.Shape[3], v}
}

// head returns head (b, h) as a slice starting at its first element and
// its row stride.
func (g headGeometry) head(b, h int) ([]float32, int) {
	off := b*g.v.Strides[0] + h*g.v.Strides[1]
	return floats(g.v)[off:], max(g.v.Strides[2], g.D, 1)
}

func (k *kernels) Attention(out, lse, q, kk, v device.View, p device.AttentionParams) error {
	gq, gk, gv := geometry(q), geometry(kk), geometry(v)
	B, H, T, D := gq.B, gq.H, gq.T, gq.D
	if T == 0 || D == 0 {
		return nil
	}
	o, l := floats(out)[:B*H*T*D], floats(lse)[:B*H*T]
	thr, scale := device.DropoutThreshold(p.Dropout), 1/(1-p.Dropout)
	mm, rows := headsRun(B * H)
	head := func(bh int, s []float32) {
		qh, ldq := gq.head(bh/H, bh%H)
		kh, ldk := gk.head(bh/H, bh%H)
		vh, ldv := gv.head(bh/H, bh%H)
		mm(false, true, T, T, D, p.Scale, qh, ldq, kh, ldk, 0, s, T)
		lh := l[bh*T : (bh+1)*T]
		rows(T, max(1, elementGrain/(8*T)), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				softmaxRow(s[i*T:(i+1)*T], attended(p.Causal, i, T), &lh[i])
				if p.Dropout > 0 {
					dropRow(s[i*T:(i+1)*T], p.Key, uint64((bh*T+i)*T), thr, scale)
				}
			}
		})
		mm(false, false, T, D, T, 1, s, T, vh, ldv, 0, o[bh*T*D:], D)
	}
	forHeads(B*H, T*T, func(bh int, buf []float32) { head(bh, buf) })
	return nil
}

// Note [attention heads]. An attention runs B·H independent heads, each
// a few small products (T×T×D: 256×256×64 in the baby GPT) and a softmax
// over T rows. Split inside each product, two cores meet twice per
// product; OpenBLAS's own threads then spend most of the time handing
// the work over (1-22 GFLOP/s against 80-117 per thread on one, forced
// AVX2, docs/perf.md "AVX2"). So heads run on separate goroutines instead
// (parallelEach, claimed one at a time) — with the pure-Go kernel once
// there are two heads per core, with OpenBLAS on one thread whenever there
// are two heads — each head's products on its goroutine alone
// (gemm.SgemmSerial, or one OpenBLAS call) and its rows in order. A head computes the same bits either
// way: the pure-Go products do not depend on how they are split, OpenBLAS's
// are never split in an attention, and rows are independent.

// headsRun returns the product and row loops for an attention of bh
// heads: serial ones when heads run in parallel (forHeads), else the
// parallel ones.
func headsRun(bh int) (mm func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int),
	rows func(n, grain int, body func(lo, hi int))) {
	serialRows := func(n, _ int, body func(lo, hi int)) { body(0, n) }
	switch {
	case headsInParallel(bh):
		return sgemmSerial, serialRows
	case useBLAS() && !blasOwnThreads():
		// One call per product whatever the number of cores: OpenBLAS's
		// bits change with the blocks blasSplit cuts.
		return sgemmSerial, parallelFor
	}
	return sgemm, parallelFor
}

// headsInParallel reports whether an attention of bh heads runs them on
// parallel goroutines: with at least two heads per core, or with OpenBLAS
// on one thread and two heads or more.
func headsInParallel(bh int) bool {
	w := runtime.GOMAXPROCS(0)
	if w <= 1 || bh <= 1 {
		return false
	}
	if useBLAS() {
		return !blasOwnThreads()
	}
	return bh >= 2*w
}

// forHeads runs head(bh, buf) for every head with a scratch buf of n
// floats: on parallel goroutines when headsInParallel, each with its own
// buf, else in order with one.
func forHeads(bh, n int, head func(bh int, buf []float32)) {
	if !headsInParallel(bh) {
		buf := make([]float32, n)
		for i := range bh {
			head(i, buf)
		}
		return
	}
	parallelEach(bh, func(i int) {
		buf := getScratch(n)
		head(i, *buf)
		scratchPool.Put(buf)
	})
}

var scratchPool sync.Pool

func getScratch(n int) *[]float32 {
	b, _ := scratchPool.Get().(*[]float32)
	if b == nil || cap(*b) < n {
		s := make([]float32, n)
		return &s
	}
	*b = (*b)[:n]
	return b
}

// attended is how many leading positions row i attends to.
func attended(causal bool, i, T int) int {
	if causal {
		return i + 1
	}
	return T
}

// softmaxRow turns row[:n] into softmax weights, zeroes row[n:], and
// stores the log-sum-exp of row[:n] in lse.
func softmaxRow(row []float32, n int, lse *float32) {
	m := float32(math.Inf(-1))
	for _, x := range row[:n] {
		m = max(m, x)
	}
	var acc [8]float64
	vecExpSub(row[:n], row[:n], m, &acc)
	sum := sum8(&acc)
	vecScale(row[:n], row[:n], float32(1/sum))
	clear(row[n:])
	*lse = m + float32(math.Log(sum))
}

// dropRow applies dropout to one row of attention weights whose elements
// have indices base, base+1, … in the [B, H, T, T] matrix.
func dropRow(row []float32, key device.DropoutKey, base uint64, thr uint32, scale float32) {
	for j := range row {
		i := key.Offset + base + uint64(j)
		if key.DropoutBits(i / 4)[i%4] >= thr {
			row[j] *= scale
		} else {
			row[j] = 0
		}
	}
}

func (k *kernels) AttentionBackward(dq, dk, dv, grad, q, kk, v, out, lse device.View, p device.AttentionParams) error {
	return attentionBackward(dq, dk, dv, grad, q, kk, v, out, device.View{}, lse, p)
}

// AttentionBackwardFromDelta is AttentionBackward given, instead of the
// forward's output, each row's Σ_d dO·O (delta, contiguous [B, H, T]):
// for a driver that computes those first and passes them on, as a GPU's
// FlashAttention-2 backward does (the fake CUDA driver runs its
// ferry_attention_backward_q and _kv launches through it). Blocks are as
// for Kernels.
func AttentionBackwardFromDelta(dq, dk, dv, grad, q, k, v, lse, delta device.View, p device.AttentionParams) error {
	return attentionBackward(dq, dk, dv, grad, q, k, v, device.View{}, delta, lse, p)
}

// attentionBackward is AttentionBackward with the rows' Σ_d dO·O computed
// from out, or read from delta where out has no Block.
func attentionBackward(dq, dk, dv, grad, q, kk, v, out, delta, lse device.View, p device.AttentionParams) error {
	gq, gk, gv, gg := geometry(q), geometry(kk), geometry(v), geometry(grad)
	B, H, T, D := gq.B, gq.H, gq.T, gq.D
	if T == 0 || D == 0 {
		return nil
	}
	var o, dl []float32
	if out.Block != nil {
		o = floats(out)[:B*H*T*D]
	} else {
		dl = floats(delta)[:B*H*T]
	}
	l := floats(lse)[:B*H*T]
	dQ, dK, dV := floats(dq)[:B*H*T*D], floats(dk)[:B*H*T*D], floats(dv)[:B*H*T*D]
	thr, scale := device.DropoutThreshold(p.Dropout), 1/(1-p.Dropout)
	mm, rows := headsRun(B * H)
	head := func(bh int, buf []float32) {
		P := buf[:T*T]         // attention weights (before dropout)
		dP := buf[T*T : 2*T*T] // gradient of the weights after dropout, then of the scores
		rowDot := buf[2*T*T:][:T]
		b, h := bh/H, bh%H
		qh, ldq := gq.head(b, h)
		kh, ldk := gk.head(b, h)
		vh, ldv := gv.head(b, h)
		gh, ldg := gg.head(b, h)
		lh := l[bh*T : (bh+1)*T]
		// P = exp(scale·q·kᵀ - lse), masked.
		mm(false, true, T, T, D, p.Scale, qh, ldq, kh, ldk, 0, P, T)
		rows(T, max(1, elementGrain/(8*T)), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row, n := P[i*T:(i+1)*T], attended(p.Causal, i, T)
				var acc [8]float64 // unused
				vecExpSub(row[:n], row[:n], lh[i], &acc)
				clear(row[n:])
				// D_i = Σ_d dO·O, which equals Σ_j dP'·P' with dropout too.
				if o == nil {
					rowDot[i] = dl[bh*T+i]
					continue
				}
				oh := o[bh*T*D:]
				var s float32
				for d := 0; d < D; d++ {
					s += gh[i*ldg+d] * oh[i*D+d]
				}
				rowDot[i] = s
			}
		})
		// dV = P'ᵀ·dO, with P' the weights after dropout (built in dP
		// for the moment).
		src := P
		if p.Dropout > 0 {
			copy(dP, P)
			rows(T, max(1, elementGrain/(8*T)), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					dropRow(dP[i*T:(i+1)*T], p.Key, uint64((bh*T+i)*T), thr, scale)
				}
			})
			src = dP
		}
		mm(true, false, T, D, T, 1, src, T, gh, ldg, 0, dV[bh*T*D:], D)
		// dP' = dO·vᵀ; through dropout; dS = P∘(dP - D_i).
		mm(false, true, T, T, D, 1, gh, ldg, vh, ldv, 0, dP, T)
		rows(T, max(1, elementGrain/(8*T)), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row, pr := dP[i*T:(i+1)*T], P[i*T:(i+1)*T]
				if p.Dropout > 0 {
					dropRow(row, p.Key, uint64((bh*T+i)*T), thr, scale)
				}
				for j := range row {
					row[j] = pr[j] * (row[j] - rowDot[i])
				}
			}
		})
		// dQ = scale·dS·k, dK = scale·dSᵀ·q.
		mm(false, false, T, D, T, p.Scale, dP, T, kh, ldk, 0, dQ[bh*T*D:], D)
		mm(true, false, T, D, T, p.Scale, dP, T, qh, ldq, 0, dK[bh*T*D:], D)
	}
	forHeads(B*H, 2*T*T+T, head)
	return nil
}

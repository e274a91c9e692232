package devicetest

import (
	"fmt"
	"math"

	"ferry/device"
)

// The optional families again on shapes that cross a GPU kernel's seams:
// more rows, columns and keys than one block of 256 threads covers, many
// repeated indices, heads that are strided views of a [B, T, H, D] tensor,
// and dropout inside attention (its backward checked against an analytic
// float64 gradient under the same mask).

func init() {
	kernelTests = append(kernelTests,
		test{name: "EmbeddingWide", fn: testEmbeddingWide},
		test{name: "LayerNormWide", fn: testLayerNormWide},
		test{name: "AttentionDropoutStrided", fn: testAttentionDropoutStrided},
		test{name: "DropoutInPlace", fn: testDropoutInPlace},
		test{name: "DropoutOffset", fn: testDropoutOffset},
		test{name: "CopyStrided", fn: testCopyStrided},
		test{name: "CrossEntropy", fn: testCrossEntropy},
	)
}

func testEmbeddingWide(e *env) {
	ek := family[device.EmbeddingKernels](e, "embedding")
	const V, C, n = 7, 300, 600
	idx := make([]int32, n)
	for r := range idx {
		idx[r] = int32((r * r) % V) // every row repeated, unevenly
	}
	ix := e.tensor([]int{n}, int32s(idx))
	table := seq64(V*C, -1, 1)
	out := e.tensor([]int{n, C}, fill(n*C, float32(math.NaN())))
	e.ok(ek.Gather(out, e.tensor([]int{V, C}, toFloat32(table)), ix), "Gather")
	var want []float64
	for _, i := range idx {
		want = append(want, table[int(i)*C:int(i+1)*C]...)
	}
	e.near("Gather", e.read(out), want)

	src := seq64(n*C, -0.5, 2)
	dst := e.tensor([]int{V, C}, fill(V*C, 1))
	e.ok(ek.ScatterAdd(dst, e.tensor([]int{n, C}, toFloat32(src)), ix), "ScatterAdd")
	sum := make([]float64, V*C)
	for i := range sum {
		sum[i] = 1
	}
	for r, i := range idx {
		for c := 0; c < C; c++ {
			sum[int(i)*C+c] += src[r*C+c]
		}
	}
	e.nearTol("ScatterAdd", e.read(dst), sum, 1e-4)

	if e.caps.HasData {
		bad := e.tensor([]int{3}, int32s([]int32{0, -1, V}))
		if err := ek.Gather(e.tensor([]int{3, C}, nil), e.tensor([]int{V, C}, nil), bad); err == nil {
			e.Errorf("Gather with index -1 succeeded")
		}
		if err := ek.ScatterAdd(e.tensor([]int{V, C}, fill(V*C, 0)), e.tensor([]int{3, C}, fill(3*C, 1)), bad); err == nil {
			e.Errorf("ScatterAdd with index -1 succeeded")
		}
		// The device is still usable after a refused index.
		e.ok(ek.Gather(out, e.tensor([]int{V, C}, toFloat32(table)), ix), "Gather after a bad index")
		e.near("Gather after a bad index", e.read(out), want)
	}
}

func testLayerNormWide(e *env) {
	lk := family[device.LayerNormKernels](e, "layer norm")
	const rows, C, eps = 70, 300, 1e-5
	x, g := seq64(rows*C, -2, 3), seq64(rows*C, -1, 1)
	w, b := seq64(C, 0.5, 1.5), seq64(C, -0.2, 0.2)
	xv, gv := e.tensor([]int{rows, C}, toFloat32(x)), e.tensor([]int{rows, C}, toFloat32(g))
	wv, bv := e.tensor([]int{C}, toFloat32(w)), e.tensor([]int{C}, toFloat32(b))
	out, mean, rstd := e.tensor([]int{rows, C}, nil), e.tensor([]int{rows}, nil), e.tensor([]int{rows}, nil)
	e.ok(lk.LayerNorm(out, mean, rstd, xv, wv, bv, eps), "LayerNorm")
	want, xh := make([]float64, rows*C), make([]float64, rows*C)
	wantDx, wantDw, wantDb := make([]float64, rows*C), make([]float64, C), make([]float64, C)
	for r := 0; r < rows; r++ {
		var m, v, s1, s2 float64
		for c := 0; c < C; c++ {
			m += x[r*C+c]
		}
		m /= C
		for c := 0; c < C; c++ {
			v += (x[r*C+c] - m) * (x[r*C+c] - m)
		}
		inv := 1 / math.Sqrt(v/C+eps)
		for c := 0; c < C; c++ {
			xh[r*C+c] = (x[r*C+c] - m) * inv
			want[r*C+c] = xh[r*C+c]*w[c] + b[c]
			s1 += g[r*C+c] * w[c]
			s2 += g[r*C+c] * w[c] * xh[r*C+c]
			wantDw[c] += g[r*C+c] * xh[r*C+c]
			wantDb[c] += g[r*C+c]
		}
		for c := 0; c < C; c++ {
			wantDx[r*C+c] = inv * (g[r*C+c]*w[c] - s1/C - xh[r*C+c]*s2/C)
		}
	}
	e.nearTol("LayerNorm", e.read(out), want, 1e-5)
	dx, dw, db := e.tensor([]int{rows, C}, nil), e.tensor([]int{C}, nil), e.tensor([]int{C}, nil)
	e.ok(lk.LayerNormBackward(dx, dw, db, gv, xv, mean, rstd, wv), "LayerNormBackward")
	e.nearTol("LayerNormBackward dx", e.read(dx), wantDx, 1e-4)
	e.nearTol("LayerNormBackward dweight", e.read(dw), wantDw, 1e-4)
	e.nearTol("LayerNormBackward dbias", e.read(db), wantDb, 1e-4)
	// Without weight and bias: y = x̂, and only dbias asked for.
	e.ok(lk.LayerNorm(out, mean, rstd, xv, device.View{}, device.View{}, eps), "LayerNorm without affine")
	e.nearTol("LayerNorm without affine", e.read(out), xh, 1e-5)
	e.ok(lk.LayerNormBackward(dx, device.View{}, db, gv, xv, mean, rstd, device.View{}), "LayerNormBackward without weight")
	e.nearTol("LayerNormBackward without weight: dbias", e.read(db), wantDb, 1e-4)
}

// refAttentionGrad is attention with dropout and its gradients given the
// output's gradient g, in float64, for contiguous [BH, T, D] operands.
func refAttentionGrad(q, k, v, g []float64, BH, T, D int, scale float64, causal bool, p float32, key device.DropoutKey) (out, lse, dq, dk, dv []float64) {
	n := BH * T * D
	out, lse, dq, dk, dv = make([]float64, n), make([]float64, BH*T), make([]float64, n), make([]float64, n), make([]float64, n)
	for h := 0; h < BH; h++ {
		for i := 0; i < T; i++ {
			cnt := T
			if causal {
				cnt = i + 1
			}
			row := func(x []float64, r int) []float64 { return x[(h*T+r)*D : (h*T+r+1)*D] }
			P, mask := make([]float64, cnt), make([]float64, cnt)
			m := math.Inf(-1)
			for j := range P {
				for d := 0; d < D; d++ {
					P[j] += row(q, i)[d] * row(k, j)[d]
				}
				P[j] *= scale
				m = math.Max(m, P[j])
			}
			var z float64
			for j := range P {
				P[j] = math.Exp(P[j] - m)
				z += P[j]
			}
			lse[h*T+i] = m + math.Log(z)
			var dot float64 // Σ_j P_j·dP_j
			dP := make([]float64, cnt)
			for j := range P {
				P[j] /= z
				if device.DropoutKeep(key, p, uint64((h*T+i)*T+j)) {
					mask[j] = 1 / float64(1-p)
				}
				for d := 0; d < D; d++ {
					row(out, i)[d] += P[j] * mask[j] * row(v, j)[d]
					row(dv, j)[d] += P[j] * mask[j] * row(g, i)[d]
					dP[j] += row(g, i)[d] * row(v, j)[d]
				}
				dP[j] *= mask[j]
				dot += P[j] * dP[j]
			}
			for j := range P {
				ds := P[j] * (dP[j] - dot) * scale
				for d := 0; d < D; d++ {
					row(dq, i)[d] += ds * row(k, j)[d]
					row(dk, j)[d] += ds * row(q, i)[d]
				}
			}
		}
	}
	return out, lse, dq, dk, dv
}

func testAttentionDropoutStrided(e *env) {
	ak := family[device.AttentionKernels](e, "attention")
	key := device.DropoutKey{Seed: 11, Op: 2, Step: 3}
	for _, c := range []struct {
		B, H, T, D int
		causal     bool
		p          float32
		offset     uint64 // DropoutKey.Offset: a rank's place in a larger batch
	}{
		{1, 2, 260, 5, true, 0.2, 0},  // more keys than a block's tile
		{2, 1, 3, 260, false, 0.5, 0}, // more columns than threads
		{1, 3, 33, 8, false, 0, 0},
		{2, 2, 19, 4, true, 0.3, 2 * 2 * 19 * 19}, // rank 1 of two at batch 2
		{1, 1, 7, 3, false, 0.4, 5},
	} {
		key := key
		key.Offset = c.offset
		B, H, T, D := c.B, c.H, c.T, c.D
		n := B * H * T * D
		q, k, v, g := seq64(n, -1, 1), seq64(n, 1, -0.5), seq64(n, -0.3, 0.7), seq64(n, 0.3, -0.9)
		for i := range q {
			q[i] = float64(float32(q[i] * math.Cos(float64(i))))
			k[i] = float64(float32(k[i] * math.Sin(float64(i)+1)))
		}
		// q, k, v and g as heads of [B, T, H, D] storage, as a GPT splits them.
		strided := func(vals []float64) device.View {
			st := make([]float32, n)
			for b := 0; b < B; b++ {
				for h := 0; h < H; h++ {
					for t := 0; t < T; t++ {
						for d := 0; d < D; d++ {
							st[((b*T+t)*H+h)*D+d] = float32(vals[((b*H+h)*T+t)*D+d])
						}
					}
				}
			}
			return e.storage(st, 0, []int{B, H, T, D}, []int{T * H * D, D, H * D, 1})
		}
		qv, kv, vv, gv := strided(q), strided(k), strided(v), strided(g)
		scale := float32(1 / math.Sqrt(float64(D)))
		p := device.AttentionParams{Causal: c.causal, Scale: scale, Dropout: c.p, Key: key}
		out, lse := e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T}, nil)
		e.ok(ak.Attention(out, lse, qv, kv, vv, p), "Attention %v", c)
		dq, dk, dv := e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T, D}, nil)
		e.ok(ak.AttentionBackward(dq, dk, dv, gv, qv, kv, vv, out, lse, p), "AttentionBackward %v", c)
		wo, wl, wq, wk, wv := refAttentionGrad(q, k, v, g, B*H, T, D, float64(scale), c.causal, c.p, key)
		e.nearTol("Attention", e.read(out), wo, 1e-4)
		e.nearTol("Attention log-sum-exp", e.read(lse), wl, 1e-5)
		e.nearTol("dq", e.read(dq), wq, 1e-4)
		e.nearTol("dk", e.read(dk), wk, 1e-4)
		e.nearTol("dv", e.read(dv), wv, 1e-4)
	}
}

// The fused cross-entropy gives, on the same device, the bits of
// Softmax(log) then NLL, and of their backward kernels: rows and classes
// past a block of threads, ignored rows, every row ignored (NaN).
func testCrossEntropy(e *env) {
	ck := family[device.CrossEntropyKernels](e, "cross-entropy")
	for _, c := range []struct {
		rows, cols, ignoreEach int
	}{{3, 5, 0}, {300, 7, 4}, {5, 1031, 2}, {2, 3, 1}} {
		n := c.rows * c.cols
		vals := seq(n, -9, 7)
		for i := range vals {
			vals[i] *= float32(math.Sin(float64(i)*1.7) + 1.2)
		}
		tg := make([]int32, c.rows)
		for r := range tg {
			tg[r] = int32((r * 7) % c.cols)
			if c.ignoreEach > 0 && r%c.ignoreEach == c.ignoreEach-1 {
				tg[r] = -100
			}
		}
		shape := []int{c.rows, c.cols}
		x, t := e.tensor(shape, vals), e.tensor([]int{c.rows}, int32s(tg))
		loss, stats := e.tensor([]int{}, nil), e.tensor([]int{c.rows, 2}, nil)
		e.ok(ck.CrossEntropy(loss, stats, x, t), "CrossEntropy %v", c)
		logp, want := e.tensor(shape, nil), e.tensor([]int{}, nil)
		e.ok(e.k.Softmax(logp, x, true), "Softmax")
		e.ok(e.k.NLL(want, logp, t), "NLL")
		grad := e.tensor([]int{}, []float32{1.5})
		dx := e.tensor(shape, nil)
		e.ok(ck.CrossEntropyBackward(dx, grad, x, stats, t), "CrossEntropyBackward %v", c)
		dlogp, wantDx := e.tensor(shape, nil), e.tensor(shape, nil)
		e.ok(e.k.NLLBackward(dlogp, grad, t), "NLLBackward")
		e.ok(e.k.SoftmaxBackward(wantDx, dlogp, logp, true), "SoftmaxBackward")
		for _, pair := range []struct {
			what      string
			got, want device.View
		}{{"loss", loss, want}, {"gradient", dx, wantDx}} {
			got, w := e.read(pair.got), e.read(pair.want)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(w[i]) {
					e.Errorf("cross-entropy %v: %s element %d is %v, Softmax and NLL give %v", c, pair.what, i, got[i], w[i])
					break
				}
			}
		}
		if l := e.read(loss); l != nil && c.ignoreEach == 1 && !math.IsNaN(float64(l[0])) {
			e.Errorf("every row ignored: loss %v, want NaN", l[0])
		}
	}
}

// CopyStrided writes into strided destinations: a region of a wider
// tensor (Cat and Split's backward), a transposed one, one whose innermost
// stride is not 1, from contiguous, strided and broadcast sources, every
// element outside the region left as it was.
func testCopyStrided(e *env) {
	sk := family[device.StridedCopyKernels](e, "strided copy")
	const big = 4 * 5 * 9
	for _, c := range []struct {
		name               string
		shape              []int
		dOff               int
		dStrides, sStrides []int
	}{
		{"region of a wider tensor", []int{4, 5, 3}, 3, []int{45, 9, 1}, []int{15, 3, 1}},
		{"transposed destination", []int{5, 4}, 0, []int{1, 5}, []int{4, 1}},
		{"inner stride 2", []int{3, 7}, 1, []int{14, 2}, []int{7, 1}},
		{"strided source too", []int{4, 5}, 2, []int{9, 1}, []int{1, 4}},
		{"broadcast source row", []int{6, 4}, 0, []int{8, 2}, []int{0, 1}},
		{"one row", []int{1, 37}, 50, []int{1, 1}, []int{37, 1}},
		{"contiguous", []int{3, 6}, 0, []int{6, 1}, []int{6, 1}},
		{"empty", []int{0, 4}, 0, []int{4, 1}, []int{4, 1}},
	} {
		n := 1
		for _, d := range c.shape {
			n *= d
		}
		srcVals := seq(big, -3, 3)
		dstVals := seq(big, 10, 20)
		src := e.storage(srcVals, 0, c.shape, c.sStrides)
		dst := e.storage(dstVals, c.dOff, c.shape, c.dStrides)
		e.ok(sk.CopyStrided(dst, src), "CopyStrided %s", c.name)
		want := make([]float64, big)
		for i, v := range dstVals {
			want[i] = float64(v)
		}
		idx := make([]int, len(c.shape))
		for i := 0; i < n; i++ {
			so, do := 0, c.dOff
			for a := range idx {
				so += idx[a] * c.sStrides[a]
				do += idx[a] * c.dStrides[a]
			}
			want[do] = float64(srcVals[so])
			for a := len(idx) - 1; a >= 0; a-- {
				if idx[a]++; idx[a] < c.shape[a] {
					break
				}
				idx[a] = 0
			}
		}
		whole := device.View{Block: dst.Block, Shape: []int{big}, Strides: []int{1}}
		e.nearTol("CopyStrided "+c.name, e.read(whole), want, 0)
	}
}

// A tensor with DropoutKey.Offset o draws elements o, o+1, … of the mask
// the same key draws from 0: a rank's rows get the masks a single process
// drew for them, whatever o is modulo four.
func testDropoutOffset(e *env) {
	dk := family[device.DropoutKernels](e, "dropout")
	key := device.DropoutKey{Seed: 5, Op: 9, Step: 2}
	const n = 1030
	for _, off := range []uint64{0, 1, 2, 3, 4, 7, 4097, 1<<33 + 1} {
		k := key
		k.Offset = off
		x := e.tensor([]int{n}, seq(n, -1, 1))
		e.ok(dk.Dropout(x, x, 0.5, k), "Dropout at offset %d", off)
		src := seq64(n, -1, 1)
		want := make([]float64, n)
		for i := range want {
			// The mask element off+i, drawn with no offset.
			if device.DropoutKeep(key, 0.5, off+uint64(i)) {
				want[i] = float64(float32(src[i]) * 2)
			}
		}
		e.nearTol(fmt.Sprintf("Dropout at offset %d", off), e.read(x), want, 0)
	}
	// The two halves of a tensor, each with its offset, are the whole.
	whole := e.tensor([]int{2 * n}, seq(2*n, -1, 1))
	e.ok(dk.Dropout(whole, whole, 0.3, key), "Dropout whole")
	all := seq(2*n, -1, 1)
	var halves []float32
	for h := range 2 {
		k := key
		k.Offset = uint64(h * n)
		x := e.tensor([]int{n}, all[h*n:(h+1)*n])
		e.ok(dk.Dropout(x, x, 0.3, k), "Dropout half %d", h)
		halves = append(halves, e.read(x)...)
	}
	w := e.read(whole)
	want := make([]float64, len(w))
	for i, v := range w {
		want[i] = float64(v)
	}
	if halves != nil { // nil where the device keeps no data (meta)
		e.nearTol("Dropout halves", halves, want, 0)
	}
}

func testDropoutInPlace(e *env) {
	dk := family[device.DropoutKernels](e, "dropout")
	const n = 4099
	key := device.DropoutKey{Seed: 1 << 40, Op: 77, Step: 1<<33 + 5} // high words of seed and step in use
	x := e.tensor([]int{n}, seq(n, -1, 1))
	src := seq64(n, -1, 1)
	e.ok(dk.Dropout(x, x, 0.25, key), "Dropout in place")
	want := make([]float64, n)
	for i := range want {
		if device.DropoutKeep(key, 0.25, uint64(i)) {
			want[i] = float64(float32(src[i]) * (1 / (1 - float32(0.25))))
		}
	}
	e.nearTol("Dropout in place", e.read(x), want, 0)
	e.ok(dk.Dropout(x, x, 1, key), "Dropout p=1")
	e.nearTol("Dropout p=1", e.read(x), make([]float64, n), 0)
}

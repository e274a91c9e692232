package devicetest

import (
	"math"

	"ferry/device"
)

// The optional kernel families (device.EmbeddingKernels, LayerNormKernels,
// AttentionKernels, DropoutKernels, FusedKernels, FusedGELUKernels): each test runs when the device
// implements the family and skips, saying so, when it does not (the tensor
// layer then composes the op, or reports the family missing).

var familyTests = []test{
	{name: "Embedding", fn: testEmbedding},
	{name: "LayerNorm", fn: testLayerNorm},
	{name: "Attention", fn: testAttention},
	{name: "Dropout", fn: testDropout},
	{name: "Fused", fn: testFused},
	{name: "FusedGELU", fn: testFusedGELU},
}

func init() { kernelTests = append(kernelTests, familyTests...) }

func family[F any](e *env, name string) F {
	f, ok := e.k.(F)
	if !ok {
		e.Skipf("%s has no %s kernels (optional family; the tensor layer composes or refuses the op)", e.dev.Name(), name)
	}
	return f
}

func testEmbedding(e *env) {
	ek := family[device.EmbeddingKernels](e, "embedding")
	const V, C = 5, 3
	table := seq64(V*C, -1, 1)
	idx := []int32{4, 0, 4, 2}
	tb := e.tensor([]int{V, C}, toFloat32(table))
	ix := e.tensor([]int{len(idx)}, int32s(idx))
	out := e.tensor([]int{len(idx), C}, fill(len(idx)*C, float32(math.NaN())))
	e.ok(ek.Gather(out, tb, ix), "Gather")
	var want []float64
	for _, i := range idx {
		want = append(want, table[int(i)*C:int(i+1)*C]...)
	}
	e.near("Gather", e.read(out), want)

	src := seq64(len(idx)*C, 0.5, 2)
	sv := e.tensor([]int{len(idx), C}, toFloat32(src))
	dst := e.tensor([]int{V, C}, fill(V*C, 1))
	e.ok(ek.ScatterAdd(dst, sv, ix), "ScatterAdd")
	sum := make([]float64, V*C)
	for i := range sum {
		sum[i] = 1
	}
	for r, i := range idx { // repeated index 4: both rows added
		for c := 0; c < C; c++ {
			sum[int(i)*C+c] += float64(float32(src[r*C+c]))
		}
	}
	e.near("ScatterAdd", e.read(dst), sum)

	if e.caps.HasData {
		bad := e.tensor([]int{1}, int32s([]int32{V}))
		if err := ek.Gather(e.tensor([]int{1, C}, nil), tb, bad); err == nil {
			e.Errorf("Gather with index %d of %d rows succeeded", V, V)
		}
	}
}

func testLayerNorm(e *env) {
	lk := family[device.LayerNormKernels](e, "layer norm")
	const rows, C = 3, 7
	x := seq64(rows*C, -2, 3)
	w, b := seq64(C, 0.5, 1.5), seq64(C, -0.2, 0.2)
	xv := e.tensor([]int{rows, C}, toFloat32(x))
	wv, bv := e.tensor([]int{C}, toFloat32(w)), e.tensor([]int{C}, toFloat32(b))
	out, mean, rstd := e.tensor([]int{rows, C}, nil), e.tensor([]int{rows}, nil), e.tensor([]int{rows}, nil)
	const eps = 1e-5
	e.ok(lk.LayerNorm(out, mean, rstd, xv, wv, bv, eps), "LayerNorm")
	want := make([]float64, rows*C)
	wm, wr := make([]float64, rows), make([]float64, rows)
	xh := make([]float64, rows*C)
	for r := 0; r < rows; r++ {
		var m, v float64
		for c := 0; c < C; c++ {
			m += float64(float32(x[r*C+c]))
		}
		m /= C
		for c := 0; c < C; c++ {
			d := float64(float32(x[r*C+c])) - m
			v += d * d
		}
		inv := 1 / math.Sqrt(v/C+eps)
		wm[r], wr[r] = m, inv
		for c := 0; c < C; c++ {
			xh[r*C+c] = (float64(float32(x[r*C+c])) - m) * inv
			want[r*C+c] = xh[r*C+c]*float64(float32(w[c])) + float64(float32(b[c]))
		}
	}
	e.near("LayerNorm", e.read(out), want)
	e.near("LayerNorm mean", e.read(mean), wm)
	e.near("LayerNorm rstd", e.read(rstd), wr)

	g := seq64(rows*C, -1, 1)
	gv := e.tensor([]int{rows, C}, toFloat32(g))
	dx, dw, db := e.tensor([]int{rows, C}, nil), e.tensor([]int{C}, nil), e.tensor([]int{C}, nil)
	e.ok(lk.LayerNormBackward(dx, dw, db, gv, xv, mean, rstd, wv), "LayerNormBackward")
	wantDx, wantDw, wantDb := make([]float64, rows*C), make([]float64, C), make([]float64, C)
	for r := 0; r < rows; r++ {
		var s1, s2 float64
		for c := 0; c < C; c++ {
			dy := float64(float32(g[r*C+c])) * float64(float32(w[c]))
			s1 += dy
			s2 += dy * xh[r*C+c]
			wantDw[c] += float64(float32(g[r*C+c])) * xh[r*C+c]
			wantDb[c] += float64(float32(g[r*C+c]))
		}
		for c := 0; c < C; c++ {
			dy := float64(float32(g[r*C+c])) * float64(float32(w[c]))
			wantDx[r*C+c] = wr[r] * (dy - s1/C - xh[r*C+c]*s2/C)
		}
	}
	e.nearTol("LayerNormBackward dx", e.read(dx), wantDx, 1e-4)
	e.nearTol("LayerNormBackward dweight", e.read(dw), wantDw, 1e-4)
	e.nearTol("LayerNormBackward dbias", e.read(db), wantDb, 1e-4)
}

// refAttention is softmax(scale·q·kᵀ, causal)·v per head, in float64,
// with the weights' log-sum-exp per row.
func refAttention(q, k, v []float64, BH, T, D int, scale float64, causal bool) (out, lse []float64) {
	out, lse = make([]float64, BH*T*D), make([]float64, BH*T)
	for h := 0; h < BH; h++ {
		for i := 0; i < T; i++ {
			n := T
			if causal {
				n = i + 1
			}
			s := make([]float64, n)
			m := math.Inf(-1)
			for j := 0; j < n; j++ {
				for d := 0; d < D; d++ {
					s[j] += q[(h*T+i)*D+d] * k[(h*T+j)*D+d]
				}
				s[j] *= scale
				m = math.Max(m, s[j])
			}
			var z float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				z += s[j]
			}
			lse[h*T+i] = m + math.Log(z)
			for j := range s {
				for d := 0; d < D; d++ {
					out[(h*T+i)*D+d] += s[j] / z * v[(h*T+j)*D+d]
				}
			}
		}
	}
	return out, lse
}

func testAttention(e *env) {
	ak := family[device.AttentionKernels](e, "attention")
	const B, H, T, D = 2, 2, 5, 3
	n := B * H * T * D
	q, k, v := seq64(n, -1, 1), seq64(n, 1, -0.5), seq64(n, -0.3, 0.7)
	for i := range q { // not monotone, so rows differ
		q[i] = float64(float32(q[i] * math.Cos(float64(i))))
		k[i] = float64(float32(k[i] * math.Sin(float64(i)+1)))
		v[i] = float64(float32(v[i]))
	}
	qv, kv, vv := e.tensor([]int{B, H, T, D}, toFloat32(q)), e.tensor([]int{B, H, T, D}, toFloat32(k)), e.tensor([]int{B, H, T, D}, toFloat32(v))
	for _, causal := range []bool{true, false} {
		out, lse := e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T}, nil)
		p := device.AttentionParams{Causal: causal, Scale: 0.5}
		e.ok(ak.Attention(out, lse, qv, kv, vv, p), "Attention")
		wo, wl := refAttention(q, k, v, B*H, T, D, 0.5, causal)
		e.nearTol("Attention", e.read(out), wo, 1e-5)
		e.nearTol("Attention log-sum-exp", e.read(lse), wl, 1e-5)
		// Backward against finite differences of Σ out·G in float64.
		g := seq64(n, 0.3, -0.9)
		gv := e.tensor([]int{B, H, T, D}, toFloat32(g))
		dq, dk, dv := e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T, D}, nil), e.tensor([]int{B, H, T, D}, nil)
		e.ok(ak.AttentionBackward(dq, dk, dv, gv, qv, kv, vv, out, lse, p), "AttentionBackward")
		if !e.caps.HasData {
			continue
		}
		loss := func(q, k, v []float64) float64 {
			o, _ := refAttention(q, k, v, B*H, T, D, 0.5, causal)
			var s float64
			for i := range o {
				s += o[i] * float64(float32(g[i]))
			}
			return s
		}
		for which, dst := range []device.View{dq, dk, dv} {
			want := make([]float64, n)
			for i := 0; i < n; i++ {
				args := [3][]float64{append([]float64(nil), q...), append([]float64(nil), k...), append([]float64(nil), v...)}
				const h = 1e-6
				args[which][i] += h
				up := loss(args[0], args[1], args[2])
				args[which][i] -= 2 * h
				down := loss(args[0], args[1], args[2])
				want[i] = (up - down) / (2 * h)
			}
			e.nearTol([]string{"dq", "dk", "dv"}[which], e.read(dst), want, 1e-4)
		}
	}
}

func testDropout(e *env) {
	dk := family[device.DropoutKernels](e, "dropout")
	const n = 1001
	src := e.tensor([]int{n}, fill(n, 2))
	dst := e.tensor([]int{n}, nil)
	key := device.DropoutKey{Seed: 3, Op: 5, Step: 8}
	e.ok(dk.Dropout(dst, src, 0.3, key), "Dropout")
	want := make([]float64, n)
	for i := range want {
		if device.DropoutKeep(key, 0.3, uint64(i)) {
			want[i] = 2 / 0.7
		}
	}
	e.nearTol("Dropout", e.read(dst), want, 1e-6)
}

// testFused: BiasReLU against max(src + bias, 0), in place too, NaN
// propagated; ReLUBackwardSum against grad where out > 0 or is NaN (as
// torch's threshold_backward), else 0, its row sum with the
// bits the device's own Binary(ReLUGrad) and Sum give. A small case and
// one large enough to be split across workers.
func testFused(e *env) {
	fk := family[device.FusedKernels](e, "fused Linear+ReLU")
	for _, sh := range [][2]int{{5, 7}, {50, 1001}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		src, bias := seq(n, -2, 2), seq(cols, -0.5, 0.5)
		src[3] = float32(math.NaN())
		sv, bv := e.tensor([]int{rows, cols}, src), e.tensor([]int{cols}, bias)
		dst := e.tensor([]int{rows, cols}, nil)
		e.ok(fk.BiasReLU(dst, sv, bv), "BiasReLU %dx%d", rows, cols)
		want := make([]float64, n)
		for i := range want {
			x := float64(src[i] + bias[i%cols])
			if math.IsNaN(x) {
				want[i] = x
			} else {
				want[i] = math.Max(x, 0)
			}
		}
		e.near("BiasReLU", e.read(dst), want)
		e.ok(fk.BiasReLU(sv, sv, bv), "BiasReLU in place")
		e.near("BiasReLU in place", e.read(sv), want)

		src[3] = float32(math.NaN())            // passes its gradient
		out := e.tensor([]int{rows, cols}, src) // some zero, some negative: masked
		grad := seq(n, -1, 1)
		gv := e.tensor([]int{rows, cols}, grad)
		dx, sum := e.tensor([]int{rows, cols}, nil), e.tensor([]int{cols}, nil)
		e.ok(fk.ReLUBackwardSum(dx, sum, gv, out), "ReLUBackwardSum %dx%d", rows, cols)
		wantDx, wantSum := make([]float64, n), make([]float64, cols)
		for i := range wantDx {
			if !(src[i] <= 0) {
				wantDx[i] = float64(grad[i])
			}
			wantSum[i%cols] += wantDx[i]
		}
		e.near("ReLUBackwardSum dst", e.read(dx), wantDx)
		e.nearTol("ReLUBackwardSum sum", e.read(sum), wantSum, 1e-5*float64(rows))
		// The same bits as the unfused kernels.
		dx2, sum2 := e.tensor([]int{rows, cols}, nil), e.tensor([]int{1, cols}, nil)
		e.ok(e.k.Binary(device.ReLUGrad, dx2, gv, out), "Binary ReLUGrad")
		e.ok(e.k.Sum(sum2, dx2, 1), "Sum")
		if got, ref := e.read(sum), e.read(sum2); got != nil {
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					e.Errorf("ReLUBackwardSum sum[%d] = %v, Binary+Sum give %v: not the same bits", i, got[i], ref[i])
					break
				}
			}
		}
		// Without a sum.
		e.ok(fk.ReLUBackwardSum(gv, device.View{}, gv, out), "ReLUBackwardSum in place, no sum")
		e.near("ReLUBackwardSum in place", e.read(gv), wantDx)
	}
}

// testFusedGELU: BiasGELUTanh against the device's own Binary(Add) then
// Unary(GELUTanh), bit for bit (z left holding the sum), and against the
// float64 tanh form; GELUTanhBackwardSum against Binary(GELUTanhGrad) and
// Sum over the rows, bit for bit, in place and without a sum too. NaN
// propagates. A small case, one split across workers, one row, no rows.
func testFusedGELU(e *env) {
	fk := family[device.FusedGELUKernels](e, "fused Linear+GELUTanh")
	gelu := func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))) }
	geluGrad := func(x float64) float64 {
		u := math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
		t := math.Tanh(u)
		return 0.5*(1+t) + 0.5*x*(1-t*t)*math.Sqrt(2/math.Pi)*(1+3*0.044715*x*x)
	}
	same := func(what string, got, ref []float32) {
		e.Helper()
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(ref[i]) && !(got[i] != got[i] && ref[i] != ref[i]) {
				e.Errorf("%s[%d] = %v, the unfused kernels give %v: not the same bits", what, i, got[i], ref[i])
				return
			}
		}
	}
	for _, sh := range [][2]int{{5, 7}, {50, 1001}, {1, 9}, {0, 4}} {
		rows, cols := sh[0], sh[1]
		n := rows * cols
		src, bias := seq(n, -6, 4), seq(cols, -0.5, 0.5)
		if n > 3 {
			src[3] = float32(math.NaN())
		}
		zv, bv := e.tensor([]int{rows, cols}, src), e.tensor([]int{cols}, bias)
		dst := e.tensor([]int{rows, cols}, nil)
		e.ok(fk.BiasGELUTanh(dst, zv, bv), "BiasGELUTanh %dx%d", rows, cols)
		wantZ, want := make([]float64, n), make([]float64, n)
		for i := range want {
			wantZ[i] = float64(src[i] + bias[i%cols])
			want[i] = gelu(wantZ[i])
		}
		e.nearTol("BiasGELUTanh z", e.read(zv), wantZ, 0)
		e.nearTol("BiasGELUTanh", e.read(dst), want, 1e-5)
		ref := e.tensor([]int{rows, cols}, src)
		refOut := e.tensor([]int{rows, cols}, nil)
		if n > 0 {
			e.ok(e.k.Binary(device.Add, ref, ref, device.View{Block: bv.Block, Off: bv.Off, Shape: []int{rows, cols}, Strides: []int{0, 1}}), "Binary Add")
			e.ok(e.k.Unary(device.GELUTanh, refOut, ref, 0), "Unary GELUTanh")
			same("BiasGELUTanh z", e.read(zv), e.read(ref))
			same("BiasGELUTanh", e.read(dst), e.read(refOut))
		}

		if n > 3 {
			src[3] = 1
		}
		z := e.tensor([]int{rows, cols}, src)
		grad := seq(n, -1, 1)
		gv := e.tensor([]int{rows, cols}, grad)
		dx, sum := e.tensor([]int{rows, cols}, nil), e.tensor([]int{cols}, fill(cols, float32(math.NaN())))
		e.ok(fk.GELUTanhBackwardSum(dx, sum, gv, z), "GELUTanhBackwardSum %dx%d", rows, cols)
		wantDx, wantSum := make([]float64, n), make([]float64, cols)
		for i := range wantDx {
			wantDx[i] = float64(grad[i]) * geluGrad(float64(src[i]))
			wantSum[i%cols] += float64(float32(wantDx[i]))
		}
		e.nearTol("GELUTanhBackwardSum dst", e.read(dx), wantDx, 1e-5)
		e.nearTol("GELUTanhBackwardSum sum", e.read(sum), wantSum, 1e-5*float64(rows+1))
		dx2, sum2 := e.tensor([]int{rows, cols}, nil), e.tensor([]int{1, cols}, nil)
		if n > 0 {
			e.ok(e.k.Binary(device.GELUTanhGrad, dx2, gv, z), "Binary GELUTanhGrad")
			e.ok(e.k.Sum(sum2, dx2, 1), "Sum")
			same("GELUTanhBackwardSum dst", e.read(dx), e.read(dx2))
			same("GELUTanhBackwardSum sum", e.read(sum), e.read(sum2))
		}
		// In place, without a sum.
		e.ok(fk.GELUTanhBackwardSum(gv, device.View{}, gv, z), "GELUTanhBackwardSum in place, no sum")
		e.nearTol("GELUTanhBackwardSum in place", e.read(gv), wantDx, 1e-5)
	}
}

// seq64 is seq as float64 values (exactly the float32 ones).
func seq64(n int, lo, hi float32) []float64 {
	s := seq(n, lo, hi)
	out := make([]float64, n)
	for i, v := range s {
		out[i] = float64(v)
	}
	return out
}

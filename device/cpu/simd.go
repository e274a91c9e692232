package cpu

// Loops over contiguous rows, the inner loops of the hottest elementwise
// kernels: the ReLU and its gradient mask, adds, scales, the bias add and
// ReLU of a Linear layer in one pass, the SGD update, and column sums
// accumulated in float64 (a bias gradient). On amd64 with AVX2 the bulk of
// each runs in assembly (simd_amd64.s, written by simd_gen.go), the last
// few elements in Go; elsewhere all of it runs in Go. Both compute the
// same bits: the assembly rounds exactly where the Go does.
//
// Every function takes slices of one length (the first argument's) and
// allows its output to be one of its inputs (the same elements, not an
// overlapping shift).

// simdMin is the shortest slice worth a trip into assembly.
const simdMin = 8

// vecReLU sets d[i] = max(s[i], 0), NaN propagating as in PyTorch.
func vecReLU(d, s []float32) {
	s = s[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		reluAVX2(&d[0], &s[0], m)
		d, s = d[m:], s[m:]
	}
	for i, x := range s {
		if !(x <= 0) {
			d[i] = x
		} else {
			d[i] = 0
		}
	}
}

// vecReLUGrad sets d[i] = y[i] ≤ 0 ? 0 : g[i]: the ReLU's gradient from
// its output y; at a NaN output the gradient passes, as PyTorch's
// threshold_backward.
func vecReLUGrad(d, g, y []float32) {
	g, y = g[:len(d)], y[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		reluGradAVX2(&d[0], &g[0], &y[0], m)
		d, g, y = d[m:], g[m:], y[m:]
	}
	for i := range d {
		if !(y[i] <= 0) {
			d[i] = g[i]
		} else {
			d[i] = 0
		}
	}
}

// vecAdd sets d = a + b.
func vecAdd(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		addAVX2(&d[0], &a[0], &b[0], m)
		d, a, b = d[m:], a[m:], b[m:]
	}
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

// vecAddReLU sets d = max(a + b, 0), NaN propagating.
func vecAddReLU(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		addReLUAVX2(&d[0], &a[0], &b[0], m)
		d, a, b = d[m:], a[m:], b[m:]
	}
	for i := range d {
		if x := a[i] + b[i]; !(x <= 0) {
			d[i] = x
		} else {
			d[i] = 0
		}
	}
}

// vecScale sets d = alpha·s.
func vecScale(d, s []float32, alpha float32) {
	s = s[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		scaleAVX2(&d[0], &s[0], m, alpha)
		d, s = d[m:], s[m:]
	}
	for i, x := range s {
		d[i] = alpha * x
	}
}

// vecAxpy sets d += alpha·s, rounding the product before the sum.
func vecAxpy(d, s []float32, alpha float32) {
	s = s[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		axpyAVX2(&d[0], &s[0], m, alpha)
		d, s = d[m:], s[m:]
	}
	for i, x := range s {
		p := alpha * x // rounded: no fused multiply-add, whatever the compiler
		d[i] += p
	}
}

// vecAcc64 adds s into acc, widened to float64.
func vecAcc64(acc []float64, s []float32) {
	s = s[:len(acc)]
	if hasAVX2 && len(acc) >= simdMin {
		m := len(acc) &^ 7
		acc64AVX2(&acc[0], &s[0], m)
		acc, s = acc[m:], s[m:]
	}
	for i, x := range s {
		acc[i] += float64(x)
	}
}

// vecAddF64 sets d += s.
func vecAddF64(d, s []float64) {
	s = s[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		addF64AVX2(&d[0], &s[0], m)
		d, s = d[m:], s[m:]
	}
	for i, x := range s {
		d[i] += x
	}
}

// vecReLUGradAcc64 is vecReLUGrad followed by vecAcc64(acc, d), in one
// pass.
func vecReLUGradAcc64(d, g, y []float32, acc []float64) {
	g, y, acc = g[:len(d)], y[:len(d)], acc[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		reluGradAcc64AVX2(&d[0], &g[0], &y[0], &acc[0], m)
		d, g, y, acc = d[m:], g[m:], y[m:], acc[m:]
	}
	for i := range d {
		v := float32(0)
		if !(y[i] <= 0) {
			v = g[i]
		}
		d[i] = v
		acc[i] += float64(v)
	}
}

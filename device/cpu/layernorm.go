package cpu

// Layer norm's row loops. Each sum of a row is kept as eight float64
// partial sums, element i added to lane i%8 in order of i, then added in
// the fixed order of sum8: the AVX2 loops (layernorm_amd64.s) and the Go
// ones below give the same bits, and so does every FERRY_CPU level.

// lnSum adds float64(x[i]) to acc[i%8].
func lnSum(x []float32, acc *[8]float64) {
	done := 0
	if hasAVX2 && len(x) >= 8 {
		done = len(x) &^ 7
		lnSumAVX2(&x[0], done, acc)
	}
	for i := done; i < len(x); i++ {
		acc[i&7] += float64(x[i])
	}
}

// lnSqDev adds e·e to acc[i%8], e = float64(x[i]) - m.
func lnSqDev(x []float32, m float64, acc *[8]float64) {
	done := 0
	if hasAVX2 && len(x) >= 8 {
		done = len(x) &^ 7
		lnSqDevAVX2(&x[0], done, m, acc)
	}
	for i := done; i < len(x); i++ {
		e := float64(x[i]) - m
		acc[i&7] += e * e
	}
}

// ptr is &x[0], or nil for an empty or nil x.
func ptr(x []float32) *float32 {
	if len(x) == 0 {
		return nil
	}
	return &x[0]
}

// lnApply sets out[i] = (x[i]-m)·inv, times w[i] and plus b[i] where w
// and b are not nil.
func lnApply(out, x, w, b []float32, m, inv float32) {
	x = x[:len(out)]
	if w != nil {
		w = w[:len(out)]
	}
	if b != nil {
		b = b[:len(out)]
	}
	done := 0
	if hasAVX2 && len(out) >= 8 {
		done = len(out) &^ 7
		lnApplyAVX2(&out[0], &x[0], ptr(w), ptr(b), done, m, inv)
	}
	for c := done; c < len(out); c++ {
		y := (x[c] - m) * inv
		if w != nil {
			y *= w[c]
		}
		if b != nil {
			y += b[c]
		}
		out[c] = y
	}
}

// lnBwdSums adds, with dy = g[i]·w[i] (g[i] when w is nil) and
// xh = (x[i]-m)·inv, dy to acc1[i%8] and dy·xh to acc2[i%8].
func lnBwdSums(x, g, w []float32, m, inv float32, acc1, acc2 *[8]float64) {
	g = g[:len(x)]
	if w != nil {
		w = w[:len(x)]
	}
	done := 0
	if hasAVX2 && len(x) >= 8 {
		done = len(x) &^ 7
		lnBwdSumsAVX2(&x[0], &g[0], ptr(w), done, m, inv, acc1, acc2)
	}
	for c := done; c < len(x); c++ {
		dy := g[c]
		if w != nil {
			dy *= w[c]
		}
		xh := (x[c] - m) * inv
		acc1[c&7] += float64(dy)
		acc2[c&7] += float64(dy * xh)
	}
}

// lnBwdDx sets out[i] = inv·(dy - a - xh·b), dy and xh as in lnBwdSums.
func lnBwdDx(out, x, g, w []float32, m, inv, a, b float32) {
	x, g = x[:len(out)], g[:len(out)]
	if w != nil {
		w = w[:len(out)]
	}
	done := 0
	if hasAVX2 && len(out) >= 8 {
		done = len(out) &^ 7
		lnBwdDxAVX2(&out[0], &x[0], &g[0], ptr(w), done, m, inv, a, b)
	}
	for c := done; c < len(out); c++ {
		dy := g[c]
		if w != nil {
			dy *= w[c]
		}
		xh := (x[c] - m) * inv
		out[c] = inv * (dy - a - xh*b)
	}
}

// lnColSums adds, for the columns [c0, c1) of the rows×ld matrices x and g
// and each row r in order, float64(g·xh) to aw[c-c0] and float64(g) to
// ab[c-c0], xh = (x-mean[r])·rstd[r]: the weight's and the bias's
// gradients. Each column is its own sum, so the AVX2 path (8 columns at a
// time) adds in the same order as the Go loop.
func lnColSums(x, g []float32, ld, rows, c0, c1 int, mean, rstd []float32, aw, ab []float64) {
	if rows == 0 || c0 >= c1 {
		return
	}
	_, _ = x[(rows-1)*ld+c1-1], g[(rows-1)*ld+c1-1]
	_, _ = mean[rows-1], rstd[rows-1]
	_, _ = aw[c1-c0-1], ab[c1-c0-1]
	c := c0
	if hasAVX2 {
		for ; c+8 <= c1; c += 8 {
			lnColSumsAVX2(&x[c], &g[c], ld, rows, &mean[0], &rstd[0], &aw[c-c0], &ab[c-c0])
		}
	}
	if c == c1 {
		return
	}
	for r := 0; r < rows; r++ {
		m, inv := mean[r], rstd[r]
		for cc := c; cc < c1; cc++ {
			gv := g[r*ld+cc]
			aw[cc-c0] += float64(gv * ((x[r*ld+cc] - m) * inv))
			ab[cc-c0] += float64(gv)
		}
	}
}

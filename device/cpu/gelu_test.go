package cpu

import (
	"math"
	"testing"
)

// GELU and its gradient agree with the float64 tanh form to a few float32
// ulps where they are not tiny, the assembly agrees with the Go bit for
// bit, and special values behave.
func TestGELUTanh(t *testing.T) {
	tanhForm := func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+geluCoef*x*x*x))) }
	tanhGrad := func(x float64) float64 {
		th := math.Tanh(sqrt2OverPi * (x + geluCoef*x*x*x))
		return 0.5*(1+th) + 0.5*x*(1-th*th)*sqrt2OverPi*(1+3*geluCoef*x*x)
	}
	n := 600_016 // [-30, 30] in steps of 1e-4, a multiple of 8 plus a tail
	xs, gs := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i] = float32(i-n/2) / 10000
		gs[i] = 1 + float32(i%7)/8
	}
	y, dy := make([]float32, n), make([]float32, n)
	vecGELUTanh(y, xs)
	vecGELUTanhGrad(dy, gs, xs)
	var worst, worstGrad float64
	for i, x := range xs {
		if y[i] != geluTanh(x) || dy[i] != geluTanhGrad(gs[i], x) {
			t.Fatalf("x = %v: vector %v, %v; scalar %v, %v", x, y[i], dy[i], geluTanh(x), geluTanhGrad(gs[i], x))
		}
		// Relative error, in absolute terms below 1e-6 (where the tanh
		// form itself cancels to nothing).
		want := tanhForm(float64(x))
		worst = math.Max(worst, math.Abs(float64(y[i])-want)/math.Max(math.Abs(want), 1e-6))
		// The gradient's terms, σ and x·σ·(1−σ)·dz/dx, cancel near
		// x ≈ -0.75 in float32 arithmetic (as in PyTorch's float32
		// kernel): its error is judged against g.
		wantGrad := float64(gs[i]) * tanhGrad(float64(x))
		worstGrad = math.Max(worstGrad, math.Abs(float64(dy[i])-wantGrad)/math.Max(math.Abs(wantGrad), float64(gs[i])))
		if v := math.Abs(float64(y[i])); v != 0 && v < 1.1754943508222875e-38 || (dy[i] != 0 && math.Abs(float64(dy[i])) < 1.1754943508222875e-38) {
			t.Fatalf("x = %v: subnormal result %v, %v", x, y[i], dy[i])
		}
	}
	if worst > 5e-6 || worstGrad > 5e-6 { // float32 rounding of the exponential's argument: |z|·6e-8
		t.Errorf("largest relative error against the tanh form: GELU %.3g, gradient %.3g", worst, worstGrad)
	}
	t.Logf("largest relative error against the tanh form: GELU %.3g, gradient %.3g", worst, worstGrad)
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	special := []float32{nan, inf, -inf, 0, float32(math.Copysign(0, -1)), 1e30, -1e30, 1e-30, -1e-30, 3, 4, 5, 6, 7, 8, 9}
	ys, ds := make([]float32, len(special)), make([]float32, len(special))
	vecGELUTanh(ys, special)
	ones := make([]float32, len(special))
	for i := range ones {
		ones[i] = 1
	}
	vecGELUTanhGrad(ds, ones, special)
	if ys[0] == ys[0] || ys[1] != inf || ys[2] == ys[2] || ys[5] != 1e30 || ys[6] != 0 || ds[6] != 0 || ds[2] == ds[2] {
		t.Errorf("GELU(NaN, +Inf, -Inf, ..., 1e30, -1e30) = %v", ys)
	}
	for i := range special {
		if math.Float32bits(ds[i]) != math.Float32bits(geluTanhGrad(1, special[i])) && ds[i] == ds[i] {
			t.Errorf("GELU'(%v): vector %v, scalar %v", special[i], ds[i], geluTanhGrad(1, special[i]))
		}
		if ys[i] != geluTanh(special[i]) && !(ys[i] != ys[i] && geluTanh(special[i]) != geluTanh(special[i])) {
			t.Errorf("GELU(%v): vector %v, scalar %v", special[i], ys[i], geluTanh(special[i]))
		}
	}
}

func BenchmarkGELUTanh(b *testing.B) {
	n := 1 << 16
	xs, y, g := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i] = float32(i%4000-2000) / 500
		g[i] = 1
	}
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			vecGELUTanh(y, xs)
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			vecGELUTanhGrad(y, g, xs)
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
	b.Run("tanh-form-scalar", func(b *testing.B) {
		for b.Loop() {
			for i, x := range xs {
				v := float64(x)
				y[i] = float32(0.5 * v * (1 + math.Tanh(sqrt2OverPi*(v+geluCoef*v*v*v))))
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
}

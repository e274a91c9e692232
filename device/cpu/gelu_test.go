package cpu

import (
	"math"
	"testing"
)

// The σ form with the fast exponential agrees with the tanh form computed
// in float64, to float32's rounding, everywhere that matters, and keeps
// NaN and the infinities.
func TestGELUTanhMatchesTheTanhForm(t *testing.T) {
	// The σ form in float64 with math.Exp is the reference: the tanh form
	// loses everything to cancellation in 1 + tanh(u) for x below about -5
	// (where it gives 0 and the true value is tiny); it is checked against
	// in absolute terms.
	ref := func(x float64) float64 { return x / (1 + math.Exp(-2*sqrt2OverPi*(x+geluCoef*x*x*x))) }
	tanhForm := func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+geluCoef*x*x*x))) }
	refGrad := func(x float64) float64 {
		u := sqrt2OverPi * (x + geluCoef*x*x*x)
		th := math.Tanh(u)
		return 0.5*(1+th) + 0.5*x*(1-th*th)*sqrt2OverPi*(1+3*geluCoef*x*x)
	}
	var worst, worstGrad float64
	for i := -300000; i <= 300000; i++ {
		x := float32(i) / 10000 // [-30, 30]
		got, want := float64(geluTanh(x)), ref(float64(x))
		// Relative error, above float32's normal range.
		if e := math.Abs(got-want) / math.Max(math.Abs(want), 1e-37); e > worst {
			worst = e
		}
		if d := math.Abs(got - tanhForm(float64(x))); d > 1e-6*math.Max(1, math.Abs(got)) {
			t.Fatalf("GELU(%v): σ form %v, tanh form %v", x, got, tanhForm(float64(x)))
		}
		gg, wg := float64(geluTanhGrad(1, x)), refGrad(float64(x))
		if e := math.Abs(gg-wg) / math.Max(math.Abs(wg), 1e-6); e > worstGrad { // absolute below 1e-6
			worstGrad = e
		}
	}
	// float32 rounding is 6e-8 relative; the forms differ by barely more.
	if worst > 1.2e-7 || worstGrad > 1.2e-7 {
		t.Fatalf("worst relative error: GELU %g, gradient %g (absolute, below 1e-6)", worst, worstGrad)
	}
	nan := float32(math.NaN())
	if v := geluTanh(nan); v == v {
		t.Error("GELU(NaN) is not NaN")
	}
	if v := geluTanh(float32(math.Inf(1))); !math.IsInf(float64(v), 1) {
		t.Errorf("GELU(+Inf) = %v", v)
	}
	if v := geluTanh(float32(math.Inf(-1))); v == v { // -Inf·0, as the tanh form and PyTorch give
		t.Errorf("GELU(-Inf) = %v, want NaN", v)
	}
	if v := geluTanh(-1e30); v != 0 || !math.Signbit(float64(v)) {
		t.Errorf("GELU(-1e30) = %v, want -0", v)
	}
	if expFast(-800) != 0 || !math.IsInf(expFast(800), 1) {
		t.Error("expFast does not saturate")
	}
	for _, x := range []float64{-700, -1, 0, 1e-9, 0.5, 1, 30, 700, 709} {
		if got, want := expFast(x), math.Exp(x); math.Abs(got-want) > 1e-9*want {
			t.Errorf("expFast(%v) = %v, want %v", x, got, want)
		}
	}
}

func BenchmarkGELUTanh(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i-2048) / 400
	}
	b.Run("sigma-form", func(b *testing.B) {
		for range b.N {
			for i, x := range xs {
				xs[i] = geluTanh(x) + x
			}
		}
	})
	b.Run("tanh-form", func(b *testing.B) {
		for range b.N {
			for i, x := range xs {
				v := float64(x)
				xs[i] = float32(0.5*v*(1+math.Tanh(sqrt2OverPi*(v+geluCoef*v*v*v)))) + x
			}
		}
	})
}

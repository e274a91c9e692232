package cpu

import "math"

// GPT-2's GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), is computed as
// x·σ(z) with z = 2·√(2/π)·(x + 0.044715·x³), the same function (since
// (1 + tanh(u))/2 = σ(2u)), which needs one exponential and no tanh. The
// exponential is a float64 polynomial accurate to about 1e-10, far below
// float32's resolution, so results round as the tanh form's do; it skips
// math.Exp's generality, which made GELU a sixth of a GPT step.

// expFast returns e^x for the range GELU needs, with NaN and overflow
// handled: x ≤ -708 gives 0, x ≥ 709 gives +Inf.
func expFast(x float64) float64 {
	switch {
	case x != x:
		return x
	case x < -708:
		return 0
	case x > 709:
		return math.Inf(1)
	}
	// x = k·ln2 + r with |r| ≤ ln2/2; e^r by its Taylor series to r⁹/9!
	// (error below 2e-10 relative); 2^k by the exponent bits.
	k := math.Floor(x*math.Log2E + 0.5)
	r := x - k*0.6931471803691238 - k*1.9082149292705877e-10
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320+r*(1.0/362880)))))))))
	return math.Float64frombits(math.Float64bits(p) + uint64(int64(k))<<52)
}

// geluTanh is GPT-2's GELU.
func geluTanh(x float32) float32 {
	v := float64(x)
	z := 2 * sqrt2OverPi * (v + geluCoef*v*v*v)
	return float32(v / (1 + expFast(-z)))
}

// geluTanhGrad is g·GELU'(x): with s = σ(z), d/dx x·s = s + x·s·(1−s)·dz/dx.
func geluTanhGrad(g, x float32) float32 {
	v := float64(x)
	z := 2 * sqrt2OverPi * (v + geluCoef*v*v*v)
	s := 1 / (1 + expFast(-z))
	d := s + v*s*(1-s)*2*sqrt2OverPi*(1+3*geluCoef*v*v)
	return float32(float64(g) * d)
}

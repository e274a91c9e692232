package cpu

import "math"

// GPT-2's GELU, 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³), is
// computed in float32 as x·σ(z) with z = 2u (the same function, since
// (1 + tanh(u))/2 = σ(2u)): one exponential, no tanh. The exponential
// clamps its argument to ±80 (so that nothing overflows and nothing
// subnormal comes out: subnormals slow every later product that reads
// them), splits it as k·ln2 + r and takes e^r from its Taylor series to
// r⁶/720 (error about 1e-7 relative for |r| ≤ ln2/2).
//
// On amd64 with AVX2 the bulk runs in geluAVX2/geluGradAVX2
// (gelu_amd64.s), eight at a time; the Go functions below do exactly the
// same float32 operations in the same order (no fused multiply-adds: each
// product is rounded by a conversion), so both give the same bits and the
// strided path agrees with the contiguous one.
//
// Against the float64 tanh form the results differ by a few float32 ulps
// where GELU is not tiny; for x below about -5, where 1 + tanh(u) cancels
// to 0 in the tanh form, this gives the tiny true values instead (or, below
// x ≈ -10, zero). NaN stays NaN, +Inf stays +Inf and -Inf gives NaN, as
// in the tanh form (and PyTorch).

// geluConst holds the constants, each repeated eight times so that the
// assembly reads it as one vector. The order is the assembly's (offsets
// are index·32 bytes).
var geluConst = func() (c [16][8]float32) {
	vals := [16]float32{
		2 * float32(sqrt2OverPi),                     // 0: c1 = 2·√(2/π)
		2 * float32(sqrt2OverPi) * float32(geluCoef), // 1: c2 = 2·√(2/π)·0.044715
		-80, 80, // 2, 3: the clamp
		float32(math.Log2E),         // 4
		0.693359375, -2.12194440e-4, // 5, 6: ln2 = hi + lo (Cephes)
		1,                                            // 7
		1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, // 8–12: the series, highest first
		3 * (2 * float32(sqrt2OverPi) * float32(geluCoef)), // 13: 3·c2, for dz/dx
		float32(math.Copysign(0, -1)),                      // 14: the sign bit
		math.Float32frombits(127),                          // 15: the exponent bias, as int32 bits
	}
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()

// geluExp returns x², e = e^{-z} with z = x·(c1 + c2·x²), and whether -z
// is not ≥ 80 (true for NaN), as the assembly computes them. Where it is
// false (x below about -10) GELU is x·0 and GELU' is |x|·0 (zero, or NaN
// at -Inf, as the tanh form gives): the clamp would make them wrong, and
// they round to zero anyway.
func geluExp(x float32) (x2, e float32, inRange bool) {
	c := &geluConst
	x2 = x * x
	a := float32(c[1][0]*x2) + c[0][0]
	t := -float32(x * a)
	inRange = !(t >= c[3][0])
	if !(t >= c[2][0]) { // NaN goes to the clamp, as VMAXPS does
		t = c[2][0]
	}
	if !(t <= c[3][0]) {
		t = c[3][0]
	}
	kf := float32(math.RoundToEven(float64(float32(t * c[4][0]))))
	r := t - float32(kf*c[5][0])
	r = r - float32(kf*c[6][0])
	p := float32(c[8][0]*r) + c[9][0]
	p = float32(p*r) + c[10][0]
	p = float32(p*r) + c[11][0]
	p = float32(p*r) + c[12][0]
	p = float32(p*r) + c[7][0]
	p = float32(p*r) + c[7][0]
	two := math.Float32frombits(uint32(int32(kf)+127) << 23)
	return x2, p * two, inRange
}

// geluTanh is GPT-2's GELU.
func geluTanh(x float32) float32 {
	_, e, ok := geluExp(x)
	if !ok {
		return x * 0
	}
	return x / (e + 1)
}

// geluTanhGrad is g·GELU'(x): with s = σ(z), d/dx x·s = s + x·s·(1−s)·dz/dx.
func geluTanhGrad(g, x float32) float32 {
	x2, e, ok := geluExp(x)
	if !ok {
		return g * float32(float32(math.Abs(float64(x)))*0)
	}
	c := &geluConst
	s := c[7][0] / (e + c[7][0])
	v := float32(s * (c[7][0] - s))
	dz := float32(c[13][0]*x2) + c[0][0]
	v = float32(v * dz)
	v = float32(v * x)
	d := s + v
	return g * d
}

// vecGELUTanh sets d[i] = GELU(s[i]).
func vecGELUTanh(d, s []float32) {
	s = s[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		geluAVX2(&d[0], &s[0], m, &geluConst)
		d, s = d[m:], s[m:]
	}
	for i, x := range s {
		d[i] = geluTanh(x)
	}
}

// vecGELUTanhGrad sets d[i] = g[i]·GELU'(x[i]).
func vecGELUTanhGrad(d, g, x []float32) {
	g, x = g[:len(d)], x[:len(d)]
	if hasAVX2 && len(d) >= simdMin {
		m := len(d) &^ 7
		geluGradAVX2(&d[0], &g[0], &x[0], m, &geluConst)
		d, g, x = d[m:], g[m:], x[m:]
	}
	for i := range d {
		d[i] = geluTanhGrad(g[i], x[i])
	}
}

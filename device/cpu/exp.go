package cpu

import "math"

// The exponential of the softmax rows (Softmax, LogSoftmax and its
// backward, the attention's forward and backward) in float32, eight or
// sixteen lanes at a time: Cephes' expf. The argument is clamped to
// [-104, 89] (NaN passes), split as k·ln2 + r with |r| ≤ ln2/2 (ln2 in two
// parts, so k·ln2 is nearly exact), e^r comes from a degree-7 polynomial
// (1 + r + r²·P(r)), and 2^k is applied as two factors 2^⌊k/2⌋·2^(k-⌊k/2⌋)
// so that results near overflow stay finite and results below 2^-126 come
// out as correctly scaled subnormals (one rounding, in the last product).
// Above ln(MaxFloat32) the result is +Inf, below about -103.97 it is 0.
// Against float32(math.Exp(float64(x))) it is within 2 ulp (TestExpAccuracy
// states the bound it checks).
//
// There are no fused multiply-adds: every product and sum is rounded, in the
// Go fallback (expf) as in the AVX2 and AVX-512 loops (exp_amd64.s), so all
// three give the same bits, and so do the sums the loops accumulate (see
// vecExpSub): a row's softmax does not depend on the CPU's vector width or on
// FERRY_CPU.

// expConst holds the constants, each repeated sixteen times so that the
// assembly reads it as one vector (64 bytes a row; the AVX2 loop reads the
// first 32). The order is the assembly's.
var expConst = func() (c [13][16]float32) {
	vals := [13]float32{
		89, -104, // 0, 1: the clamp
		float32(math.Log2E),         // 2
		0.693359375, -2.12194440e-4, // 3, 4: ln2 = hi + lo
		1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, // 5–10: P, highest first
		4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
		1,                         // 11
		math.Float32frombits(127), // 12: the exponent bias, as int32 bits
	}
	for i, v := range vals {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()

// expf is e^x as the assembly computes it.
func expf(x float32) float32 {
	if x != x {
		return x
	}
	c := &expConst
	if x > c[0][0] {
		x = c[0][0]
	}
	if x < c[1][0] {
		x = c[1][0]
	}
	k := float32(math.RoundToEven(float64(float32(x * c[2][0]))))
	r := x - float32(k*c[3][0])
	r = r - float32(k*c[4][0])
	z := float32(r * r)
	p := float32(c[5][0]*r) + c[6][0]
	p = float32(p*r) + c[7][0]
	p = float32(p*r) + c[8][0]
	p = float32(p*r) + c[9][0]
	p = float32(p*r) + c[10][0]
	p = float32(p*z) + r
	p = p + c[11][0]
	ki := int32(k)
	k1 := ki >> 1
	k2 := ki - k1
	p = float32(p * math.Float32frombits(uint32(k1+127)<<23))
	return p * math.Float32frombits(uint32(k2+127)<<23)
}

// vecExpSub sets d[i] = e^(s[i]-m) (the difference rounded to float32) and
// adds each d[i], widened to float64, to acc[i%8], in order of i. The
// partial sums depend only on the data, never on the path: sum8 adds them
// in a fixed order.
func vecExpSub(d, s []float32, m float32, acc *[8]float64) {
	s = s[:len(d)]
	done := 0
	if hasAVX512 && len(d) >= 16 {
		done = len(d) &^ 15
		expSumAVX512(&d[0], &s[0], done, m, acc, &expConst)
	}
	if hasAVX2 && len(d)-done >= 8 {
		n := (len(d) - done) &^ 7
		expSumAVX2(&d[done], &s[done], n, m, acc, &expConst)
		done += n
	}
	for i := done; i < len(d); i++ {
		e := expf(s[i] - m)
		d[i] = e
		acc[i%8] += float64(e)
	}
}

// expChunk is the length of the stack buffers that hold exponentials
// which are summed or used once, not kept (a multiple of 16, so that
// chunking a row changes neither the path nor the partial sums).
const expChunk = 64

// sum8 adds vecExpSub's partial sums.
func sum8(acc *[8]float64) float64 {
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

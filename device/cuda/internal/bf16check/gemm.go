package bf16check

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/device"
)

// Gemm checks products of bfloat16 A and B into a float32 or bfloat16 C
// on dev: every pair of transposes, a batch whose A is shared (stride 0),
// padded leading dimensions, odd offsets (addresses 2 bytes from a 4-byte
// boundary), Beta 0 (C not read: it starts as NaN) and not. Each result
// is compared with a float64 product: within float32 summation's error
// for a float32 C, and for a bfloat16 C the float64 result's own rounding
// or one of its neighbours (the float32 sum may fall either side of a
// rounding boundary). With exact, the device must also match, bit for
// bit, the float32 sum in order of k (the stand-in's cuBLAS, and
// ferry_gemm_bf16 run from its source or on a GPU; a GPU's cuBLAS sums in
// its own order, and the fake driver in the CPU device's).
func Gemm(t *testing.T, dev device.Device, exact bool) {
	rng := rand.New(rand.NewPCG(11, 13))
	for _, tc := range []device.DType{device.Float32, device.BFloat16} {
		for _, beta := range []float32{0, 0.75} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					name := fmt.Sprintf("C %s beta %v transA %v transB %v", tc, beta, ta, tb)
					t.Run(name, func(t *testing.T) { gemmCase(t, dev, rng, ta, tb, tc, beta, exact) })
				}
			}
		}
	}
	t.Run("refused", func(t *testing.T) {
		b := alloc(t, dev, 256)
		for _, ty := range [][3]device.DType{
			{device.BFloat16, device.Float32, device.Float32}, {device.Float32, device.BFloat16, device.BFloat16},
			{device.BFloat16, device.BFloat16, device.Int32}, {device.Float32, device.Float32, device.BFloat16},
		} {
			p := device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: b.b, B: b.b, C: b.b, LDA: 2, LDB: 2, LDC: 2, Batch: 1,
				TypeA: ty[0], TypeB: ty[1], TypeC: ty[2]}
			var u *device.UnsupportedError
			if err := dev.Kernels().Gemm(p); !errors.As(err, &u) {
				t.Errorf("Gemm %v: %v, want an *UnsupportedError", ty, err)
			}
		}
	})
}

func gemmCase(t *testing.T, dev device.Device, rng *rand.Rand, ta, tb bool, tc device.DType, beta float32, exact bool) {
	// Partial 16×16 tiles of ferry_gemm_bf16 in every dimension.
	const M, N, K, batch = 37, 29, 41, 3
	// Stored shapes: A is M×K (K×M transposed), B K×N (N×K); each row
	// padded by 3 elements.
	rA, cA := M, K
	if ta {
		rA, cA = K, M
	}
	rB, cB := K, N
	if tb {
		rB, cB = N, K
	}
	lda, ldb, ldc := cA+3, cB+1, N+2
	offA, offB, offC := 1, 3, 5
	strideA, strideB, strideC := 0, rB*ldb+7, M*ldc+1 // A shared by the batch
	lenA := offA + rA*lda
	lenB := offB + (batch-1)*strideB + rB*ldb
	lenC := offC + (batch-1)*strideC + M*ldc
	bf := func(n int, scale float64) []uint16 {
		v := make([]uint16, n)
		for i := range v {
			v[i] = device.ToBFloat16(float32(rng.NormFloat64() * scale))
		}
		return v
	}
	a, b := bf(lenA, 1), bf(lenB, 2)
	c0 := make([]float32, lenC)
	for i := range c0 {
		c0[i] = float32(rng.NormFloat64())
		if beta == 0 {
			c0[i] = float32(math.NaN()) // not to be read
		}
		if tc == device.BFloat16 {
			c0[i] = device.FromBFloat16(device.ToBFloat16(c0[i]))
		}
	}
	ma, mb := alloc(t, dev, 2*lenA), alloc(t, dev, 2*lenB)
	ma.upload(t, halves(a))
	mb.upload(t, halves(b))
	mc := alloc(t, dev, lenC*tc.Size())
	if tc == device.BFloat16 {
		h := make([]uint16, lenC)
		for i, f := range c0 {
			h[i] = device.ToBFloat16(f)
		}
		mc.upload(t, halves(h))
	} else {
		w := make([]uint32, lenC)
		for i, f := range c0 {
			w[i] = math.Float32bits(f)
		}
		mc.upload(t, words(w))
	}
	const alpha = 1.5
	p := device.GemmParams{TransA: ta, TransB: tb, M: M, N: N, K: K, Alpha: alpha, Beta: beta,
		A: ma.b, B: mb.b, C: mc.b, OffA: offA, OffB: offB, OffC: offC, LDA: lda, LDB: ldb, LDC: ldc,
		Batch: batch, StrideA: strideA, StrideB: strideB, StrideC: strideC,
		TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: tc}
	if err := dev.Kernels().Gemm(p); err != nil {
		t.Fatal(err)
	}
	raw := mc.download(t)
	got := make([]float32, lenC)
	for i := range got {
		got[i] = math.Float32frombits(elementBits(raw, tc, i))
		if tc == device.BFloat16 {
			got[i] = device.FromBFloat16(uint16(elementBits(raw, tc, i)))
		}
	}
	at := func(z, i, l int) float32 { // op(A)[i][l]
		if ta {
			return device.FromBFloat16(a[offA+z*strideA+l*lda+i])
		}
		return device.FromBFloat16(a[offA+z*strideA+i*lda+l])
	}
	bt := func(z, l, j int) float32 { // op(B)[l][j]
		if tb {
			return device.FromBFloat16(b[offB+z*strideB+j*ldb+l])
		}
		return device.FromBFloat16(b[offB+z*strideB+l*ldb+j])
	}
	written := make([]bool, lenC)
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad <= 8 {
			t.Errorf(format, args...)
		}
	}
	for z := range batch {
		for i := range M {
			for j := range N {
				ci := offC + z*strideC + i*ldc + j
				written[ci] = true
				var sum64, abs64 float64
				var sum32 float32
				for l := range K {
					x, y := at(z, i, l), bt(z, l, j)
					sum64 += float64(x) * float64(y)
					abs64 += math.Abs(float64(x) * float64(y))
					sum32 += x * y
				}
				want := alpha * sum64
				bound := alpha * abs64
				r32 := alpha * sum32
				if beta != 0 {
					want += float64(beta) * float64(c0[ci])
					bound += math.Abs(float64(beta) * float64(c0[ci]))
					r32 += beta * c0[ci]
				}
				g := got[ci]
				if math.IsNaN(float64(g)) {
					fail("batch %d C[%d][%d] is NaN, want %v", z, i, j, want)
					continue
				}
				// float32 sums of K terms: K·2⁻²⁴ of the sum of magnitudes.
				tol := float64(K+2) * bound * 0x1p-24
				if tc == device.BFloat16 {
					// one bfloat16 ulp of the result, plus the float32 error
					tol += math.Abs(want) * 0x1p-7
				}
				if d := math.Abs(float64(g) - want); d > tol {
					fail("batch %d C[%d][%d] = %v, want %v (float64) ± %.3g", z, i, j, g, want, tol)
				}
				if exact {
					w := r32
					if tc == device.BFloat16 {
						w = device.FromBFloat16(device.ToBFloat16(r32))
					}
					if math.Float32bits(g) != math.Float32bits(w) {
						fail("batch %d C[%d][%d] = %v (%#x), want %v (%#x), the float32 sum in order", z, i, j, g, math.Float32bits(g), w, math.Float32bits(w))
					}
				}
			}
		}
	}
	for i, w := range written {
		if !w && math.Float32bits(got[i]) != math.Float32bits(c0[i]) {
			fail("C element %d outside the product changed: %v, was %v", i, got[i], c0[i])
		}
	}
}

package cpu_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"ferry/device"
)

// bf16Operand fills a bfloat16 view of n elements with random values and
// returns their float64 values.
func (f *fixture) bf16Operand(n int) (device.View, []float64) {
	v := f.typed(device.BFloat16, n)
	x := make([]float64, n)
	for i := range x {
		b := device.ToBFloat16(float32(f.r.NormFloat64()))
		halves(v)[i] = b
		x[i] = float64(device.FromBFloat16(b))
	}
	return v, x
}

// TestGemmBF16 checks bfloat16 products on the device against a float64
// product of the same values, for both types of C, every transpose, odd
// sizes, a batch with A shared (stride 0), and Beta 0 with NaN in C (not
// read); a bfloat16 C must hold the float32 C's result rounded.
func TestGemmBF16(t *testing.T) {
	f := newFixture(t)
	shapes := [][3]int{{1, 1, 1}, {3, 3, 3}, {17, 33, 100}, {33, 17, 3}, {100, 100, 17}, {1, 100, 33}, {100, 1, 1}}
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, sc := range [][2]float32{{1, 0}, {-0.5, 2}, {1, 1}} {
				m, n, k := s[0], s[1], s[2]
				const batch = 3
				name := fmt.Sprintf("%dx%dx%d_t%v_%v", m, n, k, tr, sc)
				lda, ldb, ldc := k+1, n+2, n+3
				if tr[0] {
					lda = m + 1
				}
				if tr[1] {
					ldb = k + 2
				}
				aRows, bRows := m, k
				if tr[0] {
					aRows = k
				}
				if tr[1] {
					bRows = n
				}
				aSize, bSize, cSize := aRows*lda, bRows*ldb, m*ldc
				a, av := f.bf16Operand(aSize) // shared: StrideA 0
				b, bv := f.bf16Operand(batch * bSize)
				c32 := f.typed(device.Float32, batch*cSize)
				c16 := f.typed(device.BFloat16, batch*cSize)
				for i := range batch * cSize {
					x := float32(f.r.NormFloat64())
					if sc[1] == 0 {
						x = float32(math.NaN())
					}
					halves(c16)[i] = device.ToBFloat16(x)
					vals(c32)[i] = device.FromBFloat16(halves(c16)[i])
				}
				c0 := append([]float32(nil), vals(c32)...)
				p := device.GemmParams{TransA: tr[0], TransB: tr[1], M: m, N: n, K: k, Alpha: sc[0], Beta: sc[1],
					A: a.Block, B: b.Block, LDA: lda, LDB: ldb, LDC: ldc,
					Batch: batch, StrideA: 0, StrideB: bSize, StrideC: cSize,
					TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.Float32}
				p.C = c32.Block
				f.ok(f.k.Gemm(p))
				p.C, p.TypeC = c16.Block, device.BFloat16
				f.ok(f.k.Gemm(p))
				for bi := range batch {
					for i := range m {
						for j := range n {
							var sum, mag float64
							for q := range k {
								ai, bj := i*lda+q, q*ldb+j
								if tr[0] {
									ai = q*lda + i
								}
								if tr[1] {
									bj = j*ldb + q
								}
								x := av[ai] * bv[bi*bSize+bj]
								sum += x
								mag += math.Abs(x)
							}
							want := float64(sc[0]) * sum
							mag *= math.Abs(float64(sc[0]))
							ci := bi*cSize + i*ldc + j
							if sc[1] != 0 {
								want += float64(sc[1]) * float64(c0[ci])
								mag += math.Abs(float64(sc[1]) * float64(c0[ci]))
							}
							tol := 1e-5*math.Sqrt(float64(k)+1)*mag + 1e-30
							got := float64(vals(c32)[ci])
							if !(math.Abs(got-want) <= tol) {
								t.Fatalf("%s: float32 C[%d][%d,%d] = %g, want %g ± %g", name, bi, i, j, got, want, tol)
							}
							got16 := halves(c16)[ci]
							if r := device.ToBFloat16(vals(c32)[ci]); got16 != r {
								t.Fatalf("%s: bfloat16 C[%d][%d,%d] = %#04x, the float32 C rounded is %#04x", name, bi, i, j, got16, r)
							}
							if d := math.Abs(float64(device.FromBFloat16(got16)) - want); !(d <= tol+math.Abs(want)/256) {
								t.Fatalf("%s: bfloat16 C[%d][%d,%d] = %g, want %g", name, bi, i, j, device.FromBFloat16(got16), want)
							}
						}
					}
					// The padding between rows of C is not written.
					for i := range m {
						for j := n; j < ldc; j++ {
							ci := bi*cSize + i*ldc + j
							if math.Float32bits(vals(c32)[ci]) != math.Float32bits(c0[ci]) {
								t.Fatalf("%s: float32 C padding [%d][%d,%d] written", name, bi, i, j)
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16Deterministic runs a product large enough to be split over
// goroutines twice: the bits must agree.
func TestGemmBF16Deterministic(t *testing.T) {
	f := newFixture(t)
	const m, n, k = 300, 260, 270
	a, _ := f.bf16Operand(m * k)
	b, _ := f.bf16Operand(k * n)
	var runs [2][]uint16
	for r := range runs {
		c := f.typed(device.BFloat16, m*n)
		f.ok(f.k.Gemm(device.GemmParams{M: m, N: n, K: k, Alpha: 1, A: a.Block, B: b.Block, C: c.Block,
			LDA: k, LDB: n, LDC: n, Batch: 1, TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.BFloat16}))
		runs[r] = append([]uint16(nil), halves(c)[:m*n]...)
	}
	for i := range runs[0] {
		if runs[0][i] != runs[1][i] {
			t.Fatalf("element %d: %#04x then %#04x", i, runs[0][i], runs[1][i])
		}
	}
}

// TestGemmBF16Rejects checks the type combinations no device multiplies.
func TestGemmBF16Rejects(t *testing.T) {
	f := newFixture(t)
	v := f.view(4)
	for _, ty := range [][3]device.DType{
		{device.BFloat16, device.Float32, device.Float32}, {device.Float32, device.BFloat16, device.BFloat16},
		{device.BFloat16, device.BFloat16, device.Int32}, {device.Float16, device.Float16, device.Float32},
	} {
		err := f.k.Gemm(device.GemmParams{M: 1, N: 1, K: 1, Alpha: 1, A: v.Block, B: v.Block, C: v.Block,
			LDA: 1, LDB: 1, LDC: 1, Batch: 1, TypeA: ty[0], TypeB: ty[1], TypeC: ty[2]})
		var ue *device.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v, want an *UnsupportedError", ty, err)
		}
	}
}

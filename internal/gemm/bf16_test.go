package gemm

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// toBF16 is f rounded to bfloat16 bits, nearest even (device.ToBFloat16
// without its NaN rule: the tests round finite values only).
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}

// roundSlice rounds s to bfloat16 in place and returns the bits.
func roundSlice(s []float32) []uint16 {
	b := make([]uint16, len(s))
	for i, f := range s {
		b[i] = toBF16(f)
		s[i] = widen(b[i])
	}
	return b
}

// daz is f with a denormal read as zero of its sign.
func daz(f float32) float32 {
	if u := math.Float32bits(f); u&0x7F800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return f
}

// fmaExact is x·y + z rounded once to float32, for bfloat16 values x and y
// (their product is exact in float64): the float64 sum is rounded to odd,
// then to float32, which gives the correctly rounded result (53 ≥ 24+2).
func fmaExact(x, y, z float32) float32 {
	p := float64(x) * float64(y)
	s := p + float64(z)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bp := s - float64(z) // TwoSum: the exact sum is s + e
	e := (p - bp) + (float64(z) - (s - bp))
	if e != 0 && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Copysign(math.Inf(1), e))
	}
	return float32(s)
}

// dpStep is one float32 lane of VDPBF16PS (Note [VDPBF16PS]): acc plus the
// products of the bfloat16 pairs a and b, high halves first, each step a
// fused multiply-add with denormal inputs read as zero and a denormal
// result flushed to zero.
func dpStep(acc float32, a, b uint32) float32 {
	acc = daz(acc)
	acc = daz(fmaExact(daz(widen(uint16(a>>16))), daz(widen(uint16(b>>16))), acc))
	return daz(fmaExact(daz(widen(uint16(a))), daz(widen(uint16(b))), acc))
}

// store is the kernels' store of acc into c.
func store(acc, c, alpha, beta float32) float32 {
	if beta == 0 {
		return alpha * acc
	}
	return float32(alpha*acc) + float32(beta*c)
}

// refDotKernel is what a VDPBF16PS micro-kernel computes on an mr×nr tile.
func refDotKernel(kc, mr, nr int, a, b []uint32, c []float32, ldc int, alpha, beta float32) {
	for i := 0; i < mr; i++ {
		for j := 0; j < nr; j++ {
			var acc float32
			for p := 0; p < kc; p++ {
				acc = dpStep(acc, a[p*mr+i], b[p*nr+j])
			}
			c[i*ldc+j] = store(acc, c[i*ldc+j], alpha, beta)
		}
	}
}

// sameBits reports whether x and y have the same bits, or are both NaN.
func sameBits(x, y float32) bool {
	return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
}

// randBF16Bits is a random bfloat16 over every exponent, with zeros,
// denormals, infinities and NaNs when special is set.
func randBF16Bits(r *rand.Rand, special bool) uint16 {
	sign := uint16(r.IntN(2)) << 15
	if special {
		switch r.IntN(12) {
		case 0:
			return sign | uint16(r.IntN(0x80)) // zero or denormal
		case 1:
			return sign | 0x7F80 // infinity
		case 2:
			return sign | 0x7F80 | uint16(1+r.IntN(0x7F)) // NaN
		case 3:
			return sign | 0x7F7F // largest finite
		}
		return sign | uint16(1+r.IntN(254))<<7 | uint16(r.IntN(128))
	}
	// Exponents within ±20 of 1: sums that cancel and round.
	return sign | uint16(107+r.IntN(41))<<7 | uint16(r.IntN(128))
}

func randFloatBits(r *rand.Rand, special bool) float32 {
	if special && r.IntN(8) == 0 {
		return math.Float32frombits(uint32(r.IntN(2))<<31 | uint32(r.IntN(1<<23))) // denormal
	}
	return math.Float32frombits(uint32(randBF16Bits(r, special))<<16 | uint32(r.IntN(1<<16)))
}

// TestDotStep checks dpStep on cases whose bits are known: the order of
// the two steps and the flushing of denormal inputs and results.
func TestDotStep(t *testing.T) {
	pair := func(hi, lo float32) uint32 { return uint32(toBF16(hi))<<16 | uint32(toBF16(lo)) }
	negZero := float32(math.Copysign(0, -1))
	for i, c := range []struct {
		acc  float32
		a, b uint32
		want float32
	}{
		{1, pair(1, 1), pair(2, 2), 5},
		// 2^24+2 +1 (a tie, to even: 2^24+4) +2 = 2^24+6; the low
		// product first would give 2^24+4.
		{0x1p24 + 2, pair(1, 2), pair(1, 1), 0x1p24 + 6},
		{math.Float32frombits(1), pair(0, 0), pair(0, 0), 0},        // denormal acc read as zero
		{0, pair(0x1p-100, 0), pair(0x1p-30, 0), 0},                 // denormal product flushed
		{0x1p-126, pair(-0x1p-127, 0), pair(1, 0), 0x1p-126},        // denormal input read as zero
		{-0x1p-126, pair(0x1p-126, negZero), pair(0.5, 0), negZero}, // denormal sum flushed, sign kept
		{-0x1p-126, pair(0x1p-126, 0), pair(0.5, 0), 0},             // then -0 + 0·0 = +0
		{0x1p-126, pair(0, -0x1p-126), pair(0, 0.75), 0},            // the same from the low step
		{0, pair(float32(math.Inf(1)), 1), pair(1, 1), float32(math.Inf(1))},
		{3, pair(0x1p127, 0x1p127), pair(4, -4), float32(math.Inf(1))}, // overflow stays
	} {
		if got := dpStep(c.acc, c.a, c.b); !sameBits(got, c.want) {
			t.Errorf("case %d: dpStep(%g, %#x, %#x) = %g (%#x), want %g", i, c.acc, c.a, c.b, got, math.Float32bits(got), c.want)
		}
	}
}

// TestDotKernels checks the VDPBF16PS micro-kernels bit for bit against
// refDotKernel on random and special values.
func TestDotKernels(t *testing.T) {
	if bf16Dot == nil {
		t.Skip("no AVX512_BF16 (or FERRY_CPU caps it)")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, kern := range bf16Dot.variants {
		mr, nr := kern.mr, kern.nr
		for _, kc := range []int{1, 2, 3, 4, 5, 7, 8, 9, 33} {
			for _, special := range []bool{false, true} {
				for _, sc := range [][2]float32{{1, 0}, {0.5, 0}, {1, 1}, {-2, 0.75}} {
					a := make([]uint32, mr*kc)
					b := make([]uint32, nr*kc)
					for i := range a {
						a[i] = uint32(randBF16Bits(r, special)) | uint32(randBF16Bits(r, special))<<16
					}
					for i := range b {
						b[i] = uint32(randBF16Bits(r, special)) | uint32(randBF16Bits(r, special))<<16
					}
					ldc := nr + 3
					c := make([]float32, mr*ldc)
					for i := range c {
						c[i] = randFloatBits(r, special)
					}
					want := slices.Clone(c)
					refDotKernel(kc, mr, nr, a, b, want, ldc, sc[0], sc[1])
					got := slices.Clone(c)
					kern.fn(kc, (*float32)(unsafe.Pointer(&a[0])), (*float32)(unsafe.Pointer(&b[0])), &got[0], ldc, sc[0], sc[1])
					for i := range got {
						if !sameBits(got[i], want[i]) {
							t.Fatalf("%s kc %d special %v alpha,beta %v: c[%d] = %#x, want %#x",
								kern.name, kc, special, sc, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
						}
					}
				}
			}
		}
	}
}

// emulateBF16 is what GemmBF16 computes with the pairs kernel kern:
// the same k blocks, pairs of steps through dpStep, the kernels' store.
func emulateBF16(kern *kernelInfo, ta, tb bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, p int) uint32 {
		if ta {
			return uint32(a[p*lda+i])
		}
		return uint32(a[i*lda+p])
	}
	bt := func(p, j int) uint32 {
		if tb {
			return uint32(b[j*ldb+p])
		}
		return uint32(b[p*ldb+j])
	}
	kcBlk := balancedKC(kern, k)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			for pc := 0; pc < k; pc += kcBlk {
				end := min(k, pc+kcBlk)
				var acc float32
				for p := pc; p < end; p += 2 {
					ap, bp := at(i, p), bt(p, j)
					if p+1 < end {
						ap |= at(i, p+1) << 16
						bp |= bt(p+1, j) << 16
					}
					acc = dpStep(acc, ap, bp)
				}
				be := beta
				if pc > 0 {
					be = 1
				}
				c[i*ldc+j] = store(acc, c[i*ldc+j], alpha, be)
			}
		}
	}
}

func bf16Shapes() []shape {
	s := []shape{
		{1, 1, 1}, {3, 3, 3}, {1, 17, 2}, {17, 1, 33}, {6, 64, 17}, {14, 32, 5},
		{17, 33, 100}, {33, 100, 3}, {100, 17, 33}, {100, 100, 100},
		{129, 150, 140}, {40, 70, 1100}, // parallel path, several k blocks (odd last one)
	}
	if !testing.Short() {
		s = append(s, shape{300, 200, 1025})
	}
	return s
}

// bf16Case is a testCase with A and B rounded to bfloat16.
func bf16Case(r *rand.Rand, ta, tb bool, s shape, alpha, beta float32) (*testCase, []uint16, []uint16) {
	tc := newCase(r, ta, tb, s, alpha, beta)
	a, b := roundSlice(tc.a), roundSlice(tc.b)
	tc.reference()
	return tc, a, b
}

var bf16Scalars = [][2]float32{{1, 0}, {-0.5, 1.5}, {1, 1}}

// TestGemmBF16Dot checks the VDPBF16PS path bit for bit against its
// emulation (on one goroutine and on a fine parallel grid), and against
// the float64 product of the operands.
func TestGemmBF16Dot(t *testing.T) {
	if bf16Dot == nil {
		t.Skip("no AVX512_BF16 (or FERRY_CPU caps it)")
	}
	r := rand.New(rand.NewPCG(5, 6))
	nw := max(2, runtime.GOMAXPROCS(0))
	for _, kern := range bf16Dot.variants {
		for _, s := range bf16Shapes() {
			for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				for _, sc := range bf16Scalars {
					tc, a, b := bf16Case(r, tr[0], tr[1], s, sc[0], sc[1])
					want := slices.Clone(tc.c)
					emulateBF16(kern, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, want, tc.ldc)
					for _, par := range []bool{false, true} {
						got := slices.Clone(tc.c)
						if par {
							restore := forceParallel()
							gemmBF16(kern, nw, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
							restore()
						} else {
							gemmBF16(kern, 1, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
						}
						for i := range got {
							if !sameBits(got[i], want[i]) {
								t.Fatalf("%s %s parallel %v: c[%d] = %#x, emulation %#x", kern.name, tc.name(), par, i,
									math.Float32bits(got[i]), math.Float32bits(want[i]))
							}
						}
						tc.check(t, got)
					}
				}
			}
		}
	}
}

// TestGemmBF16Widen checks that with a float32 kernel GemmBF16 gives
// Sgemm's bits on the widened operands, for every float32 kernel.
func TestGemmBF16Widen(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	nw := max(2, runtime.GOMAXPROCS(0))
	for _, kern := range allKernels() {
		for _, s := range bf16Shapes() {
			for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				for _, sc := range bf16Scalars {
					tc, a, b := bf16Case(r, tr[0], tr[1], s, sc[0], sc[1])
					want := tc.run(kern, 1)
					for _, w := range []int{1, nw} {
						got := slices.Clone(tc.c)
						gemmBF16(kern, w, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
						for i := range got {
							if !sameBits(got[i], want[i]) {
								t.Fatalf("%s %s workers %d: c[%d] = %g, Sgemm %g", kern.name, tc.name(), w, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16Public checks GemmBF16 and GemmBF16Serial against the
// float64 reference and each other.
func TestGemmBF16Public(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	t.Logf("bfloat16 kernel: %s", KernelBF16())
	for _, s := range bf16Shapes() {
		tc, a, b := bf16Case(r, false, true, s, 1, 0)
		got := slices.Clone(tc.c)
		GemmBF16(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
		tc.check(t, got)
		serial := slices.Clone(tc.c)
		GemmBF16Serial(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, serial, tc.ldc)
		for i := range got {
			if !sameBits(got[i], serial[i]) {
				t.Fatalf("%v: GemmBF16 %g, GemmBF16Serial %g at %d", s, got[i], serial[i], i)
			}
		}
	}
}

// TestPairPacking checks the pairs layout on odd sizes against its
// definition (pack_bf16.go), for the Go packing and the pairs kernels'.
func TestPairPacking(t *testing.T) {
	type packer = func(dst []uint32, w int, src []uint16, ld, r0, c0, kc, cnt int)
	impls := []struct {
		name           string
		pcopy, pgather packer
	}{{"go", pairCopy, pairGather}}
	if bf16Dot != nil {
		k := bf16Dot.variants[0]
		impls = append(impls, struct {
			name           string
			pcopy, pgather packer
		}{k.name, k.pairCopy, k.pairGather})
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, im := range impls {
		for _, w := range []int{6, 14, 16, 32, 64} {
			for _, kc := range []int{1, 2, 5, 16, 31, 32, 33, 70} {
				for _, cnt := range []int{1, w - 1, w, w + 3} {
					ld := max(kc, cnt) + 3
					src := make([]uint16, (max(kc, cnt)+2)*ld)
					for i := range src {
						src[i] = uint16(r.Uint32())
					}
					np, kp := (cnt+w-1)/w, (kc+1)/2
					get := func(gather bool, q, x int) uint32 {
						if q >= kc || x >= cnt {
							return 0
						}
						if gather {
							return uint32(src[(1+x)*ld+2+q])
						}
						return uint32(src[(1+q)*ld+2+x])
					}
					for _, gather := range []bool{false, true} {
						dst := make([]uint32, np*w*kp)
						for i := range dst {
							dst[i] = 0xDEADBEEF
						}
						if gather {
							im.pgather(dst, w, src, ld, 1, 2, kc, cnt)
						} else {
							im.pcopy(dst, w, src, ld, 1, 2, kc, cnt)
						}
						for s := 0; s < np; s++ {
							for q := 0; q < kp; q++ {
								for j := 0; j < w; j++ {
									x := s*w + j
									want := get(gather, 2*q, x) | get(gather, 2*q+1, x)<<16
									if got := dst[s*w*kp+q*w+j]; got != want {
										t.Fatalf("%s: w %d kc %d cnt %d gather %v: slot (%d,%d,%d) = %#x, want %#x", im.name, w, kc, cnt, gather, s, q, j, got, want)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmBF16To16 checks that a bfloat16 C receives GemmBF16's float32
// result rounded, bit for bit, on every kernel, serially and on a fine
// parallel grid (each block rounded on its own), in one band of rows or
// several, padding untouched.
func TestGemmBF16To16(t *testing.T) {
	defer func(n int) { c16Scratch = n }(c16Scratch)
	r := rand.New(rand.NewPCG(13, 14))
	nw := max(2, runtime.GOMAXPROCS(0))
	kernels := allKernels()
	if bf16Dot != nil {
		kernels = append(kernels, bf16Dot.variants...)
	}
	for _, kern := range kernels {
		for _, s := range bf16Shapes() {
			for _, tr := range [][2]bool{{false, false}, {true, true}, {false, true}} {
				for _, sc := range [][2]float32{{1, 0}, {-0.5, 1.5}, {0, 2}} {
					tc, a, b := bf16Case(r, tr[0], tr[1], s, sc[0], sc[1])
					c16 := make([]uint16, len(tc.c))
					RoundBF16s(c16, tc.c) // NaN stays NaN for beta 0
					c32 := make([]float32, len(c16))
					WidenBF16s(c32, c16)
					gemmBF16(kern, 1, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, c32, tc.ldc)
					want := slices.Clone(c16)
					for i := range tc.m {
						RoundBF16s(want[i*tc.ldc:i*tc.ldc+tc.n], c32[i*tc.ldc:i*tc.ldc+tc.n])
					}
					// Bands of three rows of tiles, or one band.
					c16Scratch = 3 * kern.mr * tc.n
					if r.IntN(2) == 0 {
						c16Scratch = 1 << 20
					}
					for _, par := range []bool{false, true} {
						got := slices.Clone(c16)
						if par {
							restore := forceParallel()
							gemmBF16To16(kern, nw, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
							restore()
						} else {
							gemmBF16To16(kern, 1, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, tc.lda, b, tc.ldb, tc.beta, got, tc.ldc)
						}
						for i := range got {
							if got[i] != want[i] {
								t.Fatalf("%s %s parallel %v: c[%d] = %#04x, want %#04x", kern.name, tc.name(), par, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestRoundBF16s checks the conversion loops against the scalar rules on
// random bits, every length up to 40 (assembly tails).
func TestRoundBF16s(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for n := range 41 {
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(r.Uint32())
		}
		if n > 4 {
			s[1], s[2], s[3] = float32(math.NaN()), math.Float32frombits(0xFF800001), math.Float32frombits(0x7F7FFFFF)
		}
		d := make([]uint16, n)
		RoundBF16s(d, s)
		w := make([]float32, n)
		WidenBF16s(w, d)
		for i := range s {
			u := math.Float32bits(s[i])
			want := uint16((u + 0x7FFF + (u>>16)&1) >> 16)
			if u&0x7FFFFFFF > 0x7F800000 {
				want = uint16(u>>16) | 0x40
			}
			if d[i] != want || math.Float32bits(w[i]) != uint32(want)<<16 {
				t.Fatalf("n %d: %#08x -> %#04x -> %#08x, want %#04x", n, u, d[i], math.Float32bits(w[i]), want)
			}
		}
	}
}

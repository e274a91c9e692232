package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// ulps is the distance between two finite float32 of the same sign in units
// in the last place (subnormals included: their ulp is 2^-149).
func ulps(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	return max(d, -d)
}

// TestExpAccuracy checks expf against float32(math.Exp(float64(x))) over
// [-110, 90]: at most 2 ulp apart everywhere (normal and subnormal
// results alike), exact at 0, +Inf above ln(MaxFloat32) and at +Inf, 0 at
// -Inf, NaN at NaN.
func TestExpAccuracy(t *testing.T) {
	const tol = 2
	r := rand.New(rand.NewPCG(3, 4))
	var xs []float32
	for x := float32(-110); x <= 90; x += 1.0 / 64 {
		xs = append(xs, x)
	}
	for range 200000 {
		xs = append(xs, float32(r.Float64()*200-110))
	}
	for range 50000 { // near 0, where r is tiny
		xs = append(xs, float32(r.NormFloat64()*1e-3))
	}
	// Around the ends of the range and the rounding of k.
	for _, c := range []float32{88.72283, -87.33654, -103.97208, 0.34657359, -0.34657359} {
		x := c
		for range 64 {
			xs = append(xs, x, -x)
			x = math.Nextafter32(x, float32(math.Inf(1)))
		}
	}
	worst, at := int64(0), float32(0)
	for _, x := range xs {
		got, want := expf(x), float32(math.Exp(float64(x)))
		if math.IsInf(float64(want), 1) {
			if !math.IsInf(float64(got), 1) {
				t.Errorf("expf(%g) = %g, want +Inf", x, got)
			}
			continue
		}
		if d := ulps(got, want); d > worst {
			worst, at = d, x
		}
	}
	if worst > tol {
		t.Errorf("expf is %d ulp from math.Exp at x = %g (expf %g, math.Exp %g); allowed %d",
			worst, at, expf(at), float32(math.Exp(float64(at))), tol)
	}
	t.Logf("worst %d ulp, at x = %g", worst, at)
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {float32(math.Copysign(0, -1)), 1},
		{float32(math.Inf(-1)), 0}, {-200, 0}, {-1e30, 0},
		{float32(math.Inf(1)), float32(math.Inf(1))}, {88.73, float32(math.Inf(1))}, {1e30, float32(math.Inf(1))},
	} {
		if got := expf(c.x); got != c.want {
			t.Errorf("expf(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if got := expf(float32(math.NaN())); got == got {
		t.Errorf("expf(NaN) = %g, want NaN", got)
	}
}

// TestExpPathsAgree checks that vecExpSub gives the same bits, values and
// partial sums, on its AVX-512, AVX2 and Go paths, at every remainder.
func TestExpPathsAgree(t *testing.T) {
	type path struct {
		name         string
		avx2, avx512 bool
	}
	paths := []path{{"go", false, false}}
	if hasAVX2 {
		paths = append(paths, path{"avx2", true, false})
	}
	if hasAVX512 {
		paths = append(paths, path{"avx512", true, true})
	}
	if len(paths) == 1 {
		t.Skip("no assembly path on this CPU (or FERRY_CPU=generic)")
	}
	saved2, saved512 := hasAVX2, hasAVX512
	defer func() { hasAVX2, hasAVX512 = saved2, saved512 }()
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)),
		float32(math.Inf(-1)), 88.72283, 89, -87.4, -103.9, -104.5, 1e-30, -1e-30, 1e30, -1e30}
	for n := 0; n <= 70; n++ {
		s := make([]float32, n)
		for i := range s {
			if r.IntN(5) == 0 {
				s[i] = special[r.IntN(len(special))]
			} else {
				s[i] = float32(r.NormFloat64() * 30)
			}
		}
		for _, m := range []float32{0, 3.5, -7, float32(math.Inf(-1))} {
			var ref []float32
			var refAcc [8]float64
			for pi, p := range paths {
				hasAVX2, hasAVX512 = p.avx2, p.avx512
				d := make([]float32, n)
				var acc [8]float64
				vecExpSub(d, s, m, &acc)
				if pi == 0 {
					ref, refAcc = d, acc
					for i := range d {
						if w := expf(s[i] - m); math.Float32bits(w) != math.Float32bits(d[i]) && !(w != w && d[i] != d[i]) {
							t.Fatalf("n=%d m=%g: go path d[%d] = %g, expf gives %g", n, m, i, d[i], w)
						}
					}
					continue
				}
				for i := range d {
					if math.Float32bits(d[i]) != math.Float32bits(ref[i]) && !(d[i] != d[i] && ref[i] != ref[i]) {
						t.Fatalf("n=%d m=%g: %s d[%d] = %g (%#x), go gives %g (%#x) for s = %g",
							n, m, p.name, i, d[i], math.Float32bits(d[i]), ref[i], math.Float32bits(ref[i]), s[i])
					}
				}
				for j := range acc {
					if math.Float64bits(acc[j]) != math.Float64bits(refAcc[j]) && !(acc[j] != acc[j] && refAcc[j] != refAcc[j]) {
						t.Fatalf("n=%d m=%g: %s acc[%d] = %g, go gives %g", n, m, p.name, j, acc[j], refAcc[j])
					}
				}
			}
		}
	}
}

// BenchmarkExp times e^(x-m) over one attention row (256) and one
// cross-entropy row (65) on each path this CPU has, against the scalar
// float64 math.Exp the kernels used before. Elements per second in
// "Gelem/s".
func BenchmarkExp(b *testing.B) {
	saved2, saved512 := hasAVX2, hasAVX512
	defer func() { hasAVX2, hasAVX512 = saved2, saved512 }()
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{256, 65} {
		s, d := make([]float32, n), make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64() * 3)
		}
		b.Run(fmt.Sprintf("n%d/math.Exp", n), func(b *testing.B) {
			for b.Loop() {
				var sum float64
				for i, x := range s {
					e := float32(math.Exp(float64(x - 1)))
					d[i] = e
					sum += float64(e)
				}
				sink = sum
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
		for _, p := range []struct {
			name         string
			avx2, avx512 bool
		}{{"go", false, false}, {"avx2", true, false}, {"avx512", true, true}} {
			if p.avx2 && !saved2 || p.avx512 && !saved512 {
				continue
			}
			b.Run(fmt.Sprintf("n%d/%s", n, p.name), func(b *testing.B) {
				hasAVX2, hasAVX512 = p.avx2, p.avx512
				defer func() { hasAVX2, hasAVX512 = saved2, saved512 }()
				for b.Loop() {
					var acc [8]float64
					vecExpSub(d, s, 1, &acc)
					sink = sum8(&acc)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
			})
		}
	}
}

var sink float64

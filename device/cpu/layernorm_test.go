package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// Layer norm's AVX2 loops give the Go loops' bits, forward (output, mean,
// rstd) and backward (dx), at every length from 0 to 70 and some longer,
// with and without weight and bias, signed zeros and constant rows
// included; and both are right against float64 arithmetic.
func TestLayerNormPathsAgree(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 path on this CPU (or FERRY_CPU=generic)")
	}
	saved := hasAVX2
	defer func() { hasAVX2 = saved }()
	r := rand.New(rand.NewPCG(7, 8))
	negZero := float32(math.Copysign(0, -1))
	fill := func(n int, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			switch r.IntN(8) {
			case 0:
				x[i] = negZero
			case 1:
				x[i] = 0
			default:
				x[i] = float32(r.NormFloat64()*scale + 0.3)
			}
		}
		return x
	}
	lengths := []int{384, 1025}
	for n := 0; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for variant := range 5 {
			x, g := fill(n, 3), fill(n, 1)
			if variant == 4 { // a constant row: variance 0
				for i := range x {
					x[i] = 2.5
				}
			}
			var w, b []float32
			if variant&1 == 1 || variant == 4 {
				w = fill(n, 1)
			}
			if variant&2 == 2 {
				b = fill(n, 1)
			}
			type result struct {
				out, dx    []float32
				mean, rstd float32
				a, bb      float32
			}
			run := func(avx bool) result {
				hasAVX2 = avx
				var res result
				res.out = make([]float32, n)
				res.mean, res.rstd = layerNormRow(res.out, x, w, b, 1e-5)
				var s1, s2 [8]float64
				lnBwdSums(x, g, w, res.mean, res.rstd, &s1, &s2)
				res.a, res.bb = float32(sum8(&s1)/float64(max(n, 1))), float32(sum8(&s2)/float64(max(n, 1)))
				res.dx = make([]float32, n)
				lnBwdDx(res.dx, x, g, w, res.mean, res.rstd, res.a, res.bb)
				return res
			}
			goRes, avxRes := run(false), run(true)
			if !sameBits(goRes.mean, avxRes.mean) || !sameBits(goRes.rstd, avxRes.rstd) || !sameBits(goRes.a, avxRes.a) || !sameBits(goRes.bb, avxRes.bb) {
				t.Fatalf("n=%d variant %d: mean, rstd, a, b: go %v %v %v %v, avx2 %v %v %v %v", n, variant,
					goRes.mean, goRes.rstd, goRes.a, goRes.bb, avxRes.mean, avxRes.rstd, avxRes.a, avxRes.bb)
			}
			for i := range n {
				if !sameBits(goRes.out[i], avxRes.out[i]) || !sameBits(goRes.dx[i], avxRes.dx[i]) {
					t.Fatalf("n=%d variant %d [%d]: out go %v avx2 %v, dx go %v avx2 %v", n, variant, i,
						goRes.out[i], avxRes.out[i], goRes.dx[i], avxRes.dx[i])
				}
			}
			if n == 0 {
				continue
			}
			// Against float64: the mean, and the output and dx of the
			// textbook formulas.
			var sum, sq float64
			for _, v := range x {
				sum += float64(v)
			}
			mean := sum / float64(n)
			for _, v := range x {
				sq += (float64(v) - mean) * (float64(v) - mean)
			}
			rstd := 1 / math.Sqrt(sq/float64(n)+1e-5)
			if math.Abs(float64(goRes.mean)-mean) > 1e-6*(1+math.Abs(mean)) || math.Abs(float64(goRes.rstd)-rstd) > 1e-5*rstd {
				t.Fatalf("n=%d variant %d: mean %v rstd %v, float64 gives %v %v", n, variant, goRes.mean, goRes.rstd, mean, rstd)
			}
			var sdy, sdyxh float64
			for i := range x {
				dy := float64(g[i])
				if w != nil {
					dy *= float64(w[i])
				}
				xh := (float64(x[i]) - mean) * rstd
				sdy += dy
				sdyxh += dy * xh
			}
			for i := range x {
				xh := (float64(x[i]) - mean) * rstd
				y := xh
				dy := float64(g[i])
				if w != nil {
					y *= float64(w[i])
					dy *= float64(w[i])
				}
				if b != nil {
					y += float64(b[i])
				}
				dx := rstd * (dy - sdy/float64(n) - xh*sdyxh/float64(n))
				if math.Abs(float64(goRes.out[i])-y) > 1e-4*(1+math.Abs(y)) {
					t.Fatalf("n=%d variant %d: out[%d] = %v, float64 gives %v", n, variant, i, goRes.out[i], y)
				}
				if math.Abs(float64(goRes.dx[i])-dx) > 1e-3*(1+math.Abs(dx))*math.Max(1, rstd/100) {
					t.Fatalf("n=%d variant %d: dx[%d] = %v, float64 gives %v", n, variant, i, goRes.dx[i], dx)
				}
			}
		}
	}
}

// The weight's and bias's gradient sums agree bit for bit between the Go
// loop and the AVX2 one, for column ranges of every remainder.
func TestLayerNormColumnSumsPathsAgree(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 path on this CPU (or FERRY_CPU=generic)")
	}
	saved := hasAVX2
	defer func() { hasAVX2 = saved }()
	r := rand.New(rand.NewPCG(9, 10))
	const rows, ld = 37, 83
	x, g := make([]float32, rows*ld), make([]float32, rows*ld)
	mean, rstd := make([]float32, rows), make([]float32, rows)
	for i := range x {
		x[i], g[i] = float32(r.NormFloat64()*2), float32(r.NormFloat64())
	}
	for i := range mean {
		mean[i], rstd[i] = float32(r.NormFloat64()), float32(0.5+r.Float64())
	}
	for c0 := 0; c0 < 3; c0++ {
		for c1 := c0; c1 <= ld; c1++ {
			sums := func(avx bool) (aw, ab []float64) {
				hasAVX2 = avx
				aw, ab = make([]float64, c1-c0+1), make([]float64, c1-c0+1)
				lnColSums(x, g, ld, rows, c0, c1, mean, rstd, aw, ab)
				return
			}
			gw, gb := sums(false)
			aw, ab := sums(true)
			for j := range gw {
				if math.Float64bits(gw[j]) != math.Float64bits(aw[j]) || math.Float64bits(gb[j]) != math.Float64bits(ab[j]) {
					t.Fatalf("columns [%d,%d) column %d: go %v %v, avx2 %v %v", c0, c1, c0+j, gw[j], gb[j], aw[j], ab[j])
				}
			}
			if c1 == ld && c0 == 0 {
				for c := range ld {
					var w, b float64
					for i := range rows {
						xh := (float64(x[i*ld+c]) - float64(mean[i])) * float64(rstd[i])
						w += float64(g[i*ld+c]) * xh
						b += float64(g[i*ld+c])
					}
					if math.Abs(aw[c]-w) > 1e-4*(1+math.Abs(w)) || math.Abs(ab[c]-b) > 1e-9*(1+math.Abs(b)) {
						t.Fatalf("column %d: %v %v, float64 gives %v %v", c, aw[c], ab[c], w, b)
					}
				}
			}
			if gw[c1-c0] != 0 || aw[c1-c0] != 0 {
				t.Fatalf("columns [%d,%d): wrote past the range", c0, c1)
			}
		}
	}
}

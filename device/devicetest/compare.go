package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"ferry/device"
)

// The comparison tests run every required kernel on the device under test
// and on Caps.Reference (the CPU device) with the same random inputs, and
// compare the results by normwise relative error,
// max|got-ref| / max|ref|. The reference tests above check small,
// hand-picked cases against float64; these check shapes large enough (with
// Caps.Large) to span many thread blocks, split reductions and tile
// matrix products the way a real GPU does.

var compareTests = []test{
	{name: "CompareGemm", fn: compareGemmTest, needsReference: true},
	{name: "CompareCopy", fn: compareCopy, needsReference: true},
	{name: "CompareUnary", fn: compareUnary, needsReference: true},
	{name: "CompareBinary", fn: compareBinary, needsReference: true},
	{name: "CompareSum", fn: compareSum, needsReference: true},
	{name: "CompareSoftmax", fn: compareSoftmax, needsReference: true},
	{name: "CompareNLL", fn: compareNLL, needsReference: true},
	{name: "CompareOptim", fn: compareOptim, needsReference: true},
	{name: "CompareFamilies", fn: compareFamilies, needsReference: true},
}

func init() { kernelTests = append(kernelTests, compareTests...) }

// sizes are the shapes of one comparison run.
type sizes struct {
	m, n, k int // matrix products
	rows    int // softmax, NLL rows
	cols    int
	big     []int // a 3-d shape for elementwise ops and sums
	long    int   // a whole-tensor sum covers long times big's elements
}

var (
	smallSizes = sizes{m: 37, n: 29, k: 53, rows: 11, cols: 300, big: []int{5, 33, 70}, long: 40}
	largeSizes = sizes{m: 513, n: 1030, k: 257, rows: 300, cols: 5000, big: []int{37, 129, 513}, long: 16}
)

// pair is one comparison's two devices: the one under test and the
// reference, with the random source both are fed from. worst records the
// largest relative error seen, for the log.
type pair struct {
	*testing.T
	dev, ref device.Device
	rng      *rand.Rand
	sz       sizes
	tol      float64
	worst    float64
	worstOp  string
}

// both is one tensor on the device under test and its twin on the
// reference.
type both struct{ d, r device.View }

func (e *env) pair() *pair {
	e.Helper()
	ref := e.s.caps.Reference(e.T)
	e.Cleanup(func() { ref.Close() })
	seed := e.caps.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	e.Logf("seed %d (Caps.Seed repeats it)", seed)
	sz := smallSizes
	if e.caps.Large {
		sz = largeSizes
	}
	p := &pair{T: e.T, dev: e.dev, ref: ref, rng: rand.New(rand.NewPCG(seed, 7)), sz: sz, tol: e.caps.Tol}
	e.Cleanup(func() {
		if p.worstOp != "" {
			e.Logf("largest relative error %.3g (%s)", p.worst, p.worstOp)
		}
	})
	return p
}

// CompareGemm runs batched matrix products of m×k by k×n, in every
// transposition, on dev and ref with the same random inputs, fails t where
// the normwise relative error passes tol, and returns the largest error
// seen: a TF32 test checks that it is visibly above FP32's.
func CompareGemm(t *testing.T, dev, ref device.Device, m, n, k int, tol float64, seed uint64) float64 {
	t.Helper()
	p := &pair{T: t, dev: dev, ref: ref, rng: rand.New(rand.NewPCG(seed, 7)), tol: tol}
	p.gemm(m, n, k, tol)
	return p.worst
}

func (p *pair) randoms(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*p.rng.Float32()
	}
	return v
}

// storage puts vals on both devices and views them with shape, strides and
// element offset. The blocks are freed when the test ends.
func (p *pair) storage(vals []float32, off int, shape, strides []int) both {
	p.Helper()
	var out both
	for i, d := range []device.Device{p.dev, p.ref} {
		b, err := d.Allocator().Alloc(int64(max(len(vals), 1)*4), device.Activation)
		if err != nil {
			p.Fatalf("%s: %v", d.Name(), err)
		}
		p.Cleanup(func() { d.Allocator().Free(b) })
		if len(vals) > 0 {
			if err := d.Kernels().Upload(device.View{Block: b}, floatBytes(vals)); err != nil {
				p.Fatalf("%s: Upload: %v", d.Name(), err)
			}
		}
		v := device.View{Block: b, Off: off, Shape: shape, Strides: strides}
		if i == 0 {
			out.d = v
		} else {
			out.r = v
		}
	}
	return out
}

// tensor is a contiguous tensor holding vals, or NaN when vals is nil so
// that elements a kernel leaves unwritten show.
func (p *pair) tensor(shape []int, vals []float32) both {
	if vals == nil {
		vals = fill(device.Numel(shape), float32(math.NaN()))
	}
	return p.storage(vals, 0, shape, device.Contiguous(shape))
}

func (p *pair) rand(shape []int, lo, hi float32) both {
	return p.tensor(shape, p.randoms(device.Numel(shape), lo, hi))
}

// run calls f on each device's kernels with the matching views.
func (p *pair) run(what string, f func(k device.Kernels, pick func(both) device.View) error) {
	p.Helper()
	if err := f(p.dev.Kernels(), func(x both) device.View { return x.d }); err != nil {
		p.Fatalf("%s on %s: %v", what, p.dev.Name(), err)
	}
	if err := f(p.ref.Kernels(), func(x both) device.View { return x.r }); err != nil {
		p.Fatalf("%s on %s (the reference): %v", what, p.ref.Name(), err)
	}
}

func download(t *testing.T, d device.Device, v device.View, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.Kernels().Download(b, v); err != nil {
		t.Fatalf("%s: Download: %v", d.Name(), err)
	}
	return bytesFloat(b)
}

// check compares the first n elements of x (its numel when n is omitted).
// NaNs and infinities must match.
func (p *pair) check(what string, x both, tol float64, n ...int) {
	p.Helper()
	m := x.d.Numel()
	if len(n) > 0 {
		m = n[0]
	}
	g, c := download(p.T, p.dev, x.d, m), download(p.T, p.ref, x.r, m)
	var scale, diff float64
	for i := range c {
		cv, gv := float64(c[i]), float64(g[i])
		if math.IsNaN(cv) || math.IsNaN(gv) || math.IsInf(cv, 0) || math.IsInf(gv, 0) {
			if cv != gv && !(math.IsNaN(cv) && math.IsNaN(gv)) {
				p.Errorf("%s[%d]: %s gives %v, %s %v", what, i, p.dev.Name(), gv, p.ref.Name(), cv)
				return
			}
			continue
		}
		scale = math.Max(scale, math.Abs(cv))
		diff = math.Max(diff, math.Abs(gv-cv))
	}
	rel := diff / math.Max(scale, 1e-30)
	if scale == 0 {
		rel = diff
	}
	if rel > p.worst {
		p.worst, p.worstOp = rel, what
	}
	if rel > tol {
		p.Errorf("%s: relative error %.3g > %.0g (max |diff| %.3g, max |%s| %.3g)", what, rel, tol, diff, p.ref.Name(), scale)
	}
}

func compareGemmTest(e *env) {
	p := e.pair()
	p.gemm(p.sz.m, p.sz.n, p.sz.k, e.gemmTol())
}

func (p *pair) gemm(m, n, k int, tol float64) {
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			for _, batch := range []int{1, 3} {
				for _, beta := range []float32{0, 0.5} {
					name := fmt.Sprintf("gemm %dx%dx%d transA=%v transB=%v batch=%d beta=%v", m, n, k, ta, tb, batch, beta)
					ar, ac := m, k
					if ta {
						ar, ac = k, m
					}
					br, bc := k, n
					if tb {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+3, bc, n // a padded leading dimension on A
					strideA := ar * lda
					strideB := 0 // B shared by the batch
					if batch > 1 {
						strideB = br * ldb
					}
					a := p.rand([]int{batch * strideA}, -1, 1)
					b := p.rand([]int{max(1, strideB*batch, br*ldb)}, -1, 1)
					c := p.rand([]int{batch * m * ldc}, -1, 1)
					p.run(name, func(kk device.Kernels, pick func(both) device.View) error {
						return kk.Gemm(device.GemmParams{TransA: ta, TransB: tb, M: m, N: n, K: k, Alpha: 1.5, Beta: beta,
							A: pick(a).Block, B: pick(b).Block, C: pick(c).Block, LDA: lda, LDB: ldb, LDC: ldc,
							Batch: batch, StrideA: strideA, StrideB: strideB, StrideC: m * ldc})
					})
					p.check(name, c, tol)
				}
			}
		}
	}
}

func compareCopy(e *env) {
	p := e.pair()
	s := p.sz.big
	n := device.Numel(s)
	src := p.storage(p.randoms(n+5, -1, 1), 5, []int{s[2], s[0], s[1]}, []int{1, s[1] * s[2], s[2]}) // permuted
	dst := p.tensor(src.d.Shape, nil)
	p.run("copy permuted", func(k device.Kernels, pick func(both) device.View) error { return k.Copy(pick(dst), pick(src)) })
	p.check("copy permuted", dst, 0)

	row := p.storage(p.randoms(s[2], -1, 1), 0, []int{s[0] * s[1], s[2]}, []int{0, 1}) // broadcast
	dst2 := p.tensor(row.d.Shape, nil)
	p.run("copy broadcast", func(k device.Kernels, pick func(both) device.View) error { return k.Copy(pick(dst2), pick(row)) })
	p.check("copy broadcast", dst2, 0)

	flat := p.storage(p.randoms(n+3, -1, 1), 3, []int{n}, []int{1}) // contiguous with an offset
	dst3 := p.tensor([]int{n}, nil)
	p.run("copy contiguous", func(k device.Kernels, pick func(both) device.View) error { return k.Copy(pick(dst3), pick(flat)) })
	p.check("copy contiguous", dst3, 0)

	p.run("fill", func(k device.Kernels, pick func(both) device.View) error { return k.Fill(pick(dst3), -2.5) })
	p.check("fill", dst3, 0)
}

func unaryRange(op device.UnaryOp) (lo, hi float32) {
	switch op {
	case device.Log, device.Sqrt, device.PowScalar:
		return 0.01, 4
	case device.Exp:
		return -10, 10
	}
	return -4, 4
}

func compareUnary(e *env) {
	p := e.pair()
	s := p.sz.big
	for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ { // every op, new ones included
		lo, hi := unaryRange(op)
		// Random values, the first of them the edges of float32.
		vals := p.randoms(device.Numel(s), lo, hi)
		copy(vals, edgeValues)
		x := p.tensor(s, vals)
		y := p.tensor(s, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(y), pick(x), 1.7)
		})
		p.check(op.String()+" contiguous", y, p.tol)
		// A transposed input (strided kernel).
		xt := x
		xt.d.Shape, xt.d.Strides = []int{s[0], s[2], s[1]}, []int{s[1] * s[2], 1, s[2]}
		xt.r.Shape, xt.r.Strides = xt.d.Shape, xt.d.Strides
		yt := p.tensor(xt.d.Shape, nil)
		p.run(op.String()+" transposed", func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(yt), pick(xt), 1.7)
		})
		p.check(op.String()+" transposed", yt, p.tol)
	}
}

func compareBinary(e *env) {
	p := e.pair()
	s := p.sz.big
	ea, eb := edgePairs()
	for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ { // every op, new ones included
		lo, hi := float32(-3), float32(3)
		if op == device.Div {
			lo, hi = 0.5, 3
		}
		// Random values, the first of them every pair of float32's edges.
		av, bv := p.randoms(device.Numel(s), -3, 3), p.randoms(device.Numel(s), lo, hi)
		copy(av, ea)
		copy(bv, eb)
		a, b := p.tensor(s, av), p.tensor(s, bv)
		y := p.tensor(s, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(y), pick(a), pick(b))
		})
		p.check(op.String()+" contiguous", y, p.tol)
		// b broadcast along the middle axis, as a bias row.
		bb := p.storage(p.randoms(s[0]*s[2], lo, hi), 0, s, []int{s[2], 0, 1})
		p.run(op.String()+" broadcast", func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(y), pick(a), pick(bb))
		})
		p.check(op.String()+" broadcast", y, p.tol)
		// In place, a op= b broadcast over rows.
		row := p.storage(p.randoms(s[2], lo, hi), 0, s, []int{0, 0, 1})
		p.run(op.String()+" in place", func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(a), pick(a), pick(row))
		})
		p.check(op.String()+" in place", a, p.tol)
	}
}

func compareSum(e *env) {
	p := e.pair()
	s := p.sz.big
	x := p.rand(s, -1, 1)
	for _, axes := range [][]int{{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}} {
		keep := append([]int(nil), s...)
		for _, a := range axes {
			keep[a] = 1
		}
		y := p.tensor(keep, nil)
		name := fmt.Sprintf("sum over %v of %v", axes, s)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error { return k.Sum(pick(y), pick(x), 0.5) })
		p.check(name, y, p.tol)
	}
	// A transposed source, and a long whole-tensor sum.
	xt := x
	xt.d.Shape, xt.d.Strides = []int{s[2], s[1], s[0]}, []int{1, s[2], s[1] * s[2]}
	xt.r.Shape, xt.r.Strides = xt.d.Shape, xt.d.Strides
	y := p.tensor([]int{s[2], 1, s[0]}, nil)
	p.run("sum transposed", func(k device.Kernels, pick func(both) device.View) error { return k.Sum(pick(y), pick(xt), 1) })
	p.check("sum transposed", y, p.tol)
	n := p.sz.long * device.Numel(s)
	long := p.rand([]int{n}, -1, 1)
	one := p.tensor([]int{1}, nil)
	p.run("sum all", func(k device.Kernels, pick func(both) device.View) error {
		return k.Sum(pick(one), pick(long), 1/float32(n))
	})
	p.check("sum all", one, p.tol)
}

func compareSoftmax(e *env) {
	p := e.pair()
	shape := []int{p.sz.rows, p.sz.cols}
	for _, log := range []bool{false, true} {
		name := "softmax"
		if log {
			name = "log_softmax"
		}
		x := p.rand(shape, -8, 8)
		y := p.tensor(shape, nil)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error { return k.Softmax(pick(y), pick(x), log) })
		p.check(name, y, p.tol)
		g := p.rand(shape, -1, 1)
		dx := p.tensor(shape, nil)
		p.run(name+" backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.SoftmaxBackward(pick(dx), pick(g), pick(y), log)
		})
		p.check(name+" backward", dx, p.tol)
	}
}

func compareNLL(e *env) {
	p := e.pair()
	rows, cols := p.sz.rows, p.sz.cols
	logp := p.rand([]int{rows, cols}, -6, 0)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(p.rng.IntN(cols))
		if i%5 == 3 {
			targets[i] = -1 // ignored
		}
	}
	tg := p.tensor([]int{rows}, int32s(targets))
	loss := p.tensor([]int{1}, nil)
	p.run("nll", func(k device.Kernels, pick func(both) device.View) error {
		return k.NLL(pick(loss), pick(logp), pick(tg))
	})
	p.check("nll", loss, p.tol)
	grad := p.tensor([]int{1}, []float32{0.75})
	dx := p.tensor([]int{rows, cols}, nil)
	p.run("nll backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.NLLBackward(pick(dx), pick(grad), pick(tg))
	})
	p.check("nll backward", dx, p.tol)
}

func compareOptim(e *env) {
	p := e.pair()
	n := device.Numel(p.sz.big)
	w, g, buf := p.rand([]int{n}, -1, 1), p.rand([]int{n}, -1, 1), p.tensor([]int{n}, make([]float32, n))
	for step, sp := range []device.SGDParams{
		{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, First: true},
		{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01},
		{LR: 0.1, Momentum: 0.9, Nesterov: true},
		{LR: 0.05},
	} {
		name := fmt.Sprintf("sgd step %d", step)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.OptimizerKernels).SGDStep(pick(w), pick(g), pick(buf), sp)
		})
		p.check(name+" param", w, p.tol)
		p.check(name+" momentum", buf, p.tol)
	}
	m, v := p.tensor([]int{n}, make([]float32, n)), p.tensor([]int{n}, make([]float32, n))
	for step := 1; step <= 3; step++ {
		ap := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		name := fmt.Sprintf("adamw step %d", step)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.OptimizerKernels).AdamWStep(pick(w), pick(g), pick(m), pick(v), ap)
		})
		p.check(name+" param", w, p.tol)
		p.check(name+" exp_avg", m, p.tol)
		p.check(name+" exp_avg_sq", v, p.tol)
	}
}

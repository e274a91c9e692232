package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// Op by op against the CPU device: every Kernels method on the same random
// inputs, results compared by normwise relative error,
// max|gpu-cpu| / max|cpu|. compareOps runs on the fake driver in every test
// run (small shapes) and on a real GPU under FERRY_CUDA_REAL=1 (larger
// ones; see real_test.go).

type sizes struct {
	m, n, k int // matrix products
	rows    int // softmax, NLL rows
	cols    int
	big     []int // a 3-d shape for elementwise ops and sums
	long    int   // a whole-tensor sum covers long times big's elements
	tol     float64
}

var fakeSizes = sizes{m: 37, n: 29, k: 53, rows: 11, cols: 300, big: []int{5, 33, 70}, long: 40, tol: 1e-5}

type pair struct {
	t        *testing.T
	gpu, cpu device.Device
	rng      *rand.Rand
	sz       sizes
	worst    float64
	worstOp  string
}

func newPair(t *testing.T, gpu device.Device, sz sizes, seed uint64) *pair {
	c, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &pair{t: t, gpu: gpu, cpu: c, rng: rand.New(rand.NewPCG(seed, 7)), sz: sz}
}

func (p *pair) randoms(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*p.rng.Float32()
	}
	return v
}

func bytesOf(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func floatsOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:]))
	}
	return v
}

// both is one tensor on the GPU and its twin on the CPU.
type both struct{ g, c device.View }

// storage puts vals on both devices and views them with shape, strides and
// element offset.
func (p *pair) storage(vals []float32, off int, shape, strides []int) both {
	p.t.Helper()
	var out both
	for i, d := range []device.Device{p.gpu, p.cpu} {
		b, err := d.Allocator().Alloc(int64(max(len(vals), 1)*4), device.Activation)
		if err != nil {
			p.t.Fatal(err)
		}
		p.t.Cleanup(func() { d.Allocator().Free(b) })
		v := device.View{Block: b, Off: off, Shape: shape, Strides: strides}
		if len(vals) > 0 {
			if err := d.Kernels().Upload(device.View{Block: b}, bytesOf(vals)); err != nil {
				p.t.Fatal(err)
			}
		}
		if i == 0 {
			out.g = v
		} else {
			out.c = v
		}
	}
	return out
}

func (p *pair) tensor(shape []int, vals []float32) both {
	if vals == nil {
		vals = make([]float32, device.Numel(shape))
		for i := range vals {
			vals[i] = float32(math.NaN()) // outputs start as NaN: unwritten elements show
		}
	}
	return p.storage(vals, 0, shape, device.Contiguous(shape))
}

func (p *pair) rand(shape []int, lo, hi float32) both {
	return p.tensor(shape, p.randoms(device.Numel(shape), lo, hi))
}

func read(t *testing.T, d device.Device, v device.View, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.Kernels().Download(b, v); err != nil {
		t.Fatal(err)
	}
	return floatsOf(b)
}

// run calls f on each device's kernels with the matching views.
func (p *pair) run(what string, f func(k device.Kernels, pick func(both) device.View) error) {
	p.t.Helper()
	if err := f(p.gpu.Kernels(), func(x both) device.View { return x.g }); err != nil {
		p.t.Fatalf("%s on %s: %v", what, p.gpu.Name(), err)
	}
	if err := f(p.cpu.Kernels(), func(x both) device.View { return x.c }); err != nil {
		p.t.Fatalf("%s on cpu: %v", what, err)
	}
}

// check compares the first n elements of x (its numel when n is 0).
func (p *pair) check(what string, x both, tol float64, n ...int) {
	p.t.Helper()
	m := x.g.Numel()
	if len(n) > 0 {
		m = n[0]
	}
	g, c := read(p.t, p.gpu, x.g, m), read(p.t, p.cpu, x.c, m)
	var scale, diff float64
	for i := range c {
		cv, gv := float64(c[i]), float64(g[i])
		if math.IsNaN(cv) || math.IsNaN(gv) {
			if math.IsNaN(cv) != math.IsNaN(gv) {
				p.t.Errorf("%s[%d]: %s gives %v, cpu %v", what, i, p.gpu.Name(), gv, cv)
				return
			}
			continue
		}
		if math.IsInf(cv, 0) || math.IsInf(gv, 0) {
			if cv != gv {
				p.t.Errorf("%s[%d]: %s gives %v, cpu %v", what, i, p.gpu.Name(), gv, cv)
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
		p.t.Errorf("%s: relative error %.3g > %.0g (max |diff| %.3g, max |cpu| %.3g)", what, rel, tol, diff, scale)
	}
}

func compareOps(t *testing.T, p *pair) {
	sz := p.sz
	t.Run("Gemm", func(t *testing.T) { p.t = t; compareGemm(p, sz.m, sz.n, sz.k, sz.tol) })
	t.Run("Copy", func(t *testing.T) { p.t = t; compareCopy(p) })
	t.Run("Unary", func(t *testing.T) { p.t = t; compareUnary(p) })
	t.Run("Binary", func(t *testing.T) { p.t = t; compareBinary(p) })
	t.Run("Sum", func(t *testing.T) { p.t = t; compareSum(p) })
	t.Run("Softmax", func(t *testing.T) { p.t = t; compareSoftmax(p) })
	t.Run("NLL", func(t *testing.T) { p.t = t; compareNLL(p) })
	t.Run("Optim", func(t *testing.T) { p.t = t; compareOptim(p) })
	t.Run("Families", func(t *testing.T) { p.t = t; compareFamilies(p) })
}

func compareGemm(p *pair, m, n, k int, tol float64) {
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

func compareCopy(p *pair) {
	s := p.sz.big
	n := device.Numel(s)
	src := p.storage(p.randoms(n+5, -1, 1), 5, []int{s[2], s[0], s[1]}, []int{1, s[1] * s[2], s[2]}) // permuted
	dst := p.tensor(src.g.Shape, nil)
	p.run("copy permuted", func(k device.Kernels, pick func(both) device.View) error { return k.Copy(pick(dst), pick(src)) })
	p.check("copy permuted", dst, 0)

	row := p.storage(p.randoms(s[2], -1, 1), 0, []int{s[0] * s[1], s[2]}, []int{0, 1}) // broadcast
	dst2 := p.tensor(row.g.Shape, nil)
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

func compareUnary(p *pair) {
	s := p.sz.big
	for op := device.UnaryOp(0); op <= device.PowScalar; op++ {
		lo, hi := unaryRange(op)
		x := p.rand(s, lo, hi)
		y := p.tensor(s, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(y), pick(x), 1.7)
		})
		p.check(op.String()+" contiguous", y, p.sz.tol)
		// A transposed input (strided kernel).
		xt := x
		xt.g.Shape, xt.g.Strides = []int{s[0], s[2], s[1]}, []int{s[1] * s[2], 1, s[2]}
		xt.c.Shape, xt.c.Strides = xt.g.Shape, xt.g.Strides
		yt := p.tensor(xt.g.Shape, nil)
		p.run(op.String()+" transposed", func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(yt), pick(xt), 1.7)
		})
		p.check(op.String()+" transposed", yt, p.sz.tol)
	}
}

func compareBinary(p *pair) {
	s := p.sz.big
	for op := device.BinaryOp(0); op <= device.Maximum; op++ {
		a := p.rand(s, -3, 3)
		lo, hi := float32(-3), float32(3)
		if op == device.Div {
			lo, hi = 0.5, 3
		}
		b := p.rand(s, lo, hi)
		y := p.tensor(s, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(y), pick(a), pick(b))
		})
		p.check(op.String()+" contiguous", y, p.sz.tol)
		// b broadcast along the middle axis, as a bias row.
		bb := p.storage(p.randoms(s[0]*s[2], lo, hi), 0, s, []int{s[2], 0, 1})
		p.run(op.String()+" broadcast", func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(y), pick(a), pick(bb))
		})
		p.check(op.String()+" broadcast", y, p.sz.tol)
		// In place, a += b broadcast over rows.
		row := p.storage(p.randoms(s[2], lo, hi), 0, s, []int{0, 0, 1})
		p.run(op.String()+" in place", func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(a), pick(a), pick(row))
		})
		p.check(op.String()+" in place", a, p.sz.tol)
	}
}

func compareSum(p *pair) {
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
		p.check(name, y, p.sz.tol)
	}
	// A transposed source, and a long whole-tensor sum.
	xt := x
	xt.g.Shape, xt.g.Strides = []int{s[2], s[1], s[0]}, []int{1, s[2], s[1] * s[2]}
	xt.c.Shape, xt.c.Strides = xt.g.Shape, xt.g.Strides
	y := p.tensor([]int{s[2], 1, s[0]}, nil)
	p.run("sum transposed", func(k device.Kernels, pick func(both) device.View) error { return k.Sum(pick(y), pick(xt), 1) })
	p.check("sum transposed", y, p.sz.tol)
	n := p.sz.long * device.Numel(s)
	long := p.rand([]int{n}, -1, 1)
	one := p.tensor([]int{1}, nil)
	p.run("sum all", func(k device.Kernels, pick func(both) device.View) error {
		return k.Sum(pick(one), pick(long), 1/float32(n))
	})
	p.check("sum all", one, p.sz.tol)
}

func compareSoftmax(p *pair) {
	shape := []int{p.sz.rows, p.sz.cols}
	for _, log := range []bool{false, true} {
		name := "softmax"
		if log {
			name = "log_softmax"
		}
		x := p.rand(shape, -8, 8)
		y := p.tensor(shape, nil)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error { return k.Softmax(pick(y), pick(x), log) })
		p.check(name, y, p.sz.tol)
		g := p.rand(shape, -1, 1)
		dx := p.tensor(shape, nil)
		p.run(name+" backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.SoftmaxBackward(pick(dx), pick(g), pick(y), log)
		})
		p.check(name+" backward", dx, p.sz.tol)
	}
}

func compareNLL(p *pair) {
	rows, cols := p.sz.rows, p.sz.cols
	logp := p.rand([]int{rows, cols}, -6, 0)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(p.rng.IntN(cols))
		if i%5 == 3 {
			targets[i] = -1 // ignored
		}
	}
	tv := make([]float32, rows)
	for i, x := range targets {
		tv[i] = math.Float32frombits(uint32(x))
	}
	tg := p.tensor([]int{rows}, tv)
	loss := p.tensor([]int{1}, nil)
	p.run("nll", func(k device.Kernels, pick func(both) device.View) error {
		return k.NLL(pick(loss), pick(logp), pick(tg))
	})
	p.check("nll", loss, p.sz.tol)
	grad := p.tensor([]int{1}, []float32{0.75})
	dx := p.tensor([]int{rows, cols}, nil)
	p.run("nll backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.NLLBackward(pick(dx), pick(grad), pick(tg))
	})
	p.check("nll backward", dx, p.sz.tol)
}

func compareOptim(p *pair) {
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
			return k.SGDStep(pick(w), pick(g), pick(buf), sp)
		})
		p.check(name+" param", w, p.sz.tol)
		p.check(name+" momentum", buf, p.sz.tol)
	}
	m, v := p.tensor([]int{n}, make([]float32, n)), p.tensor([]int{n}, make([]float32, n))
	for step := 1; step <= 3; step++ {
		ap := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		name := fmt.Sprintf("adamw step %d", step)
		p.run(name, func(k device.Kernels, pick func(both) device.View) error {
			return k.AdamWStep(pick(w), pick(g), pick(m), pick(v), ap)
		})
		p.check(name+" param", w, p.sz.tol)
		p.check(name+" exp_avg", m, p.sz.tol)
		p.check(name+" exp_avg_sq", v, p.sz.tol)
	}
}

func TestCompareWithCPUFake(t *testing.T) {
	d, _ := openFake(t, fakeOpts(), device.Options{})
	p := newPair(t, d, fakeSizes, 1)
	compareOps(t, p)
	t.Logf("largest relative error: %.3g (%s)", p.worst, p.worstOp)
}

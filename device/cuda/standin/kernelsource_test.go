package standin_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda/internal/bf16check"
	"ferry/device/cuda/kernels"
	"ferry/device/cuda/standin"
	"ferry/device/devicetest"
)

// The CUDA sources of the kernels, compiled for the CPU (c/cudacpu.h), run
// through ferry's bindings and the stand-in: each kernel against the CPU
// device, on shapes that reach its partial blocks and grid-stride loops.

var (
	srcOnce sync.Once
	srcK    *standin.Kernels
	srcErr  error
)

// buildSource builds and loads the kernel sources for the CPU (once).
func buildSource(t *testing.T) (*standin.Kernels, error) {
	t.Helper()
	srcOnce.Do(func() {
		extra, err := os.ReadFile("testdata/cudacpu_test.cu")
		if err != nil {
			srcErr = err
			return
		}
		dir, err := os.MkdirTemp("", "ferry-cudacpu")
		if err != nil {
			srcErr = err
			return
		}
		defer os.RemoveAll(dir)
		start := time.Now()
		path, err := standin.BuildKernels(dir, map[string][]byte{"cudacpu_test.cu": extra})
		if err != nil {
			srcErr = err
			return
		}
		t.Logf("kernel sources built for the CPU in %v", time.Since(start).Round(time.Millisecond))
		srcK, srcErr = standin.OpenKernels(path)
	})
	return srcK, srcErr
}

// setupSource is setup with launches run from the kernels' CUDA sources;
// it skips without g++.
func setupSource(t *testing.T) (*standin.Lib, *standin.Kernels) {
	t.Helper()
	l := setup(t)
	k, err := buildSource(t)
	if errors.Is(err, standin.ErrNoCXX) {
		t.Skipf("running the CUDA kernel sources on the CPU needs g++: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	l.RunKernelsFromSource(k)
	t.Cleanup(l.RunKernelsWithFake)
	return l, k
}

// setupPreferSource is setupSource where there is g++, else setup (the
// fake driver's launches, on the CPU device's kernels).
func setupPreferSource(t *testing.T) *standin.Lib {
	t.Helper()
	// The stand-in first: the kernels' library resolves its symbols
	// (standin_resolve) when buildSource loads it.
	l := setup(t)
	if _, err := buildSource(t); errors.Is(err, standin.ErrNoCXX) {
		t.Logf("kernels run as the fake driver runs them: %v", err)
		return l
	}
	l, _ = setupSource(t)
	return l
}

// kpair is one kernel's comparison: the CUDA device (its kernels run from
// source) and the CPU device, fed the same inputs.
type kpair struct {
	*testing.T
	dev, ref device.Device
	rng      *rand.Rand
	worst    float64
	worstOp  string
}

type both struct{ d, r device.View }

func newKPair(t *testing.T, l *standin.Lib, params map[string]string) *kpair {
	dev := openCUDA(t, l, device.Options{PoisonFreed: true, Params: params})
	t.Cleanup(func() { dev.Close() })
	ref, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	return &kpair{T: t, dev: dev, ref: ref, rng: rand.New(rand.NewPCG(5, 17))}
}

func (p *kpair) storage(vals []float32, off int, shape, strides []int) both {
	p.Helper()
	var out both
	for i, d := range []device.Device{p.dev, p.ref} {
		b, err := d.Allocator().Alloc(int64(max(len(vals), 1)*4), device.Activation)
		if err != nil {
			p.Fatal(err)
		}
		p.Cleanup(func() { d.Allocator().Free(b) })
		buf := make([]byte, 4*len(vals))
		for j, v := range vals {
			u := math.Float32bits(v)
			buf[4*j], buf[4*j+1], buf[4*j+2], buf[4*j+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		}
		if err := d.Kernels().Upload(device.View{Block: b}, buf); err != nil {
			p.Fatal(err)
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

// tensor is contiguous; nil vals give NaNs, so unwritten elements show.
func (p *kpair) tensor(shape []int, vals []float32) both {
	if vals == nil {
		vals = make([]float32, device.Numel(shape))
		for i := range vals {
			vals[i] = float32(math.NaN())
		}
	}
	return p.storage(vals, 0, shape, device.Contiguous(shape))
}

func (p *kpair) randoms(n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*p.rng.Float32()
	}
	return v
}

func (p *kpair) rand(shape []int, lo, hi float32) both {
	return p.tensor(shape, p.randoms(device.Numel(shape), lo, hi))
}

func (p *kpair) ints(vals []int32) both {
	f := make([]float32, len(vals))
	for i, v := range vals {
		f[i] = math.Float32frombits(uint32(v))
	}
	return p.tensor([]int{len(vals)}, f)
}

// transposed views vals (rows×cols, row-major) as its cols×rows transpose.
func (p *kpair) transposed(rows, cols int, lo, hi float32) both {
	return p.storage(p.randoms(rows*cols, lo, hi), 0, []int{cols, rows}, []int{1, cols})
}

func (p *kpair) run(what string, f func(k device.Kernels, pick func(both) device.View) error) {
	p.Helper()
	if err := f(p.dev.Kernels(), func(x both) device.View { return x.d }); err != nil {
		p.Fatalf("%s on %s: %v", what, p.dev.Name(), err)
	}
	if err := f(p.ref.Kernels(), func(x both) device.View { return x.r }); err != nil {
		p.Fatalf("%s on %s: %v", what, p.ref.Name(), err)
	}
}

func (p *kpair) read(d device.Device, v device.View) []float32 {
	p.Helper()
	b := make([]byte, 4*v.Numel())
	if err := d.Kernels().Download(b, device.View{Block: v.Block, Off: v.Off, Shape: v.Shape, Strides: device.Contiguous(v.Shape)}); err != nil {
		p.Fatalf("%s: %v", d.Name(), err)
	}
	out := make([]float32, v.Numel())
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// check compares x on both devices by normwise relative error,
// max|got-want| / max|want|; NaNs and infinities must agree exactly.
func (p *kpair) check(what string, x both, tol float64) {
	p.Helper()
	g, c := p.read(p.dev, x.d), p.read(p.ref, x.r)
	var scale, diff float64
	for i := range c {
		cv, gv := float64(c[i]), float64(g[i])
		if math.IsNaN(cv) || math.IsNaN(gv) || math.IsInf(cv, 0) || math.IsInf(gv, 0) {
			if cv != gv && !(math.IsNaN(cv) && math.IsNaN(gv)) {
				p.Errorf("%s[%d]: the source gives %v, the CPU device %v", what, i, gv, cv)
				return
			}
			continue
		}
		scale = math.Max(scale, math.Abs(cv))
		diff = math.Max(diff, math.Abs(gv-cv))
	}
	rel := diff
	if scale > 0 {
		rel = diff / scale
	}
	if rel > p.worst || p.worstOp == "" {
		p.worst, p.worstOp = rel, what
	}
	if rel > tol {
		p.Errorf("%s: relative error %.3g > %.0g (max |diff| %.3g, max |want| %.3g)", what, rel, tol, diff, scale)
	}
}

const tol32 = 1e-6 // float32 kernels that follow the CPU device operation by operation

var unaryOps = []device.UnaryOp{device.Neg, device.Exp, device.Log, device.Sqrt, device.Square, device.Abs, device.Tanh,
	device.Sigmoid, device.ReLU, device.GELU, device.GELUTanh, device.Scale, device.AddScalar, device.PowScalar}
var binaryOps = []device.BinaryOp{device.Add, device.Sub, device.Mul, device.Div, device.ReLUGrad, device.GELUGrad,
	device.GELUTanhGrad, device.Maximum}

func positive(op device.UnaryOp) bool {
	return op == device.Log || op == device.Sqrt || op == device.PowScalar
}

// Shapes: n = 40000 elements is 157 blocks of 256 (the last one partial),
// more than the 128 blocks grid1 allows on the stand-in's 4
// multiprocessors, so every grid-stride loop goes round; 150 rows is more
// than rowGrid's 128 blocks; 300 columns is one block's 256 threads and a
// partial second pass.
const nElems, nRows, nCols = 40000, 150, 300

func copyDriver(p *kpair) {
	src := p.transposed(200, nElems/200, -1, 1)
	dst := p.tensor(src.d.Shape, nil)
	p.run("copy", func(k device.Kernels, pick func(both) device.View) error { return k.Copy(pick(dst), pick(src)) })
	p.check("copy", dst, 0)
}

// convertDriver: Convert's checks (bf16check: special values, every
// bfloat16 pattern, strided and offset views of 40000+ elements, each
// pair of types). The CPU device holds no bfloat16 to compare with: the
// references are device.ToBFloat16 and FromBFloat16, bit for bit.
func convertDriver(p *kpair) {
	bf16check.Convert(p.T, p.dev)
	p.worstOp = "no CPU comparison: bit for bit against ToBFloat16 and FromBFloat16"
}

func unaryContig(p *kpair) {
	for _, op := range unaryOps {
		lo := float32(-4)
		if positive(op) {
			lo = 0.01
		}
		src, dst := p.rand([]int{nElems + 1}, lo, 4), p.tensor([]int{nElems + 1}, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(dst), pick(src), 1.5)
		})
		p.check(op.String(), dst, tol32)
	}
}

func unaryStrided(p *kpair) {
	for _, op := range unaryOps {
		lo := float32(-4)
		if positive(op) {
			lo = 0.01
		}
		src := p.transposed(200, nElems/200, lo, 4)
		dst := p.tensor(src.d.Shape, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Unary(op, pick(dst), pick(src), 1.5)
		})
		p.check(op.String(), dst, tol32)
	}
}

func binaryContig(p *kpair) {
	for _, op := range binaryOps {
		a, b, dst := p.rand([]int{nElems + 3}, -3, 3), p.rand([]int{nElems + 3}, 0.25, 3), p.tensor([]int{nElems + 3}, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(dst), pick(a), pick(b))
		})
		p.check(op.String(), dst, tol32)
	}
}

// binaryStrided: a transposed a and a row broadcast b (stride 0), for
// every op (Add, Mul and ReLUGrad take their own compiled loops).
func binaryStrided(p *kpair) {
	rows, cols := 200, nElems/200
	for _, op := range binaryOps {
		a := p.transposed(cols, rows, -3, 3)
		b := p.storage(p.randoms(cols, 0.25, 3), 0, []int{rows, cols}, []int{0, 1})
		dst := p.tensor([]int{rows, cols}, nil)
		p.run(op.String(), func(k device.Kernels, pick func(both) device.View) error {
			return k.Binary(op, pick(dst), pick(a), pick(b))
		})
		p.check(op.String(), dst, tol32)
	}
}

// sumCase sums src of shape over the axes where dst's shape is 1.
func (p *kpair) sumCase(what string, shape, dstShape []int) {
	src, dst := p.rand(shape, -1, 1), p.tensor(dstShape, nil)
	p.run(what, func(k device.Kernels, pick func(both) device.View) error { return k.Sum(pick(dst), pick(src), 0.5) })
	p.check(what, dst, tol32)
}

func softmaxDriver(p *kpair, backward bool) {
	for _, log := range []bool{false, true} {
		x, y := p.rand([]int{nRows, nCols}, -5, 5), p.tensor([]int{nRows, nCols}, nil)
		p.run("softmax", func(k device.Kernels, pick func(both) device.View) error { return k.Softmax(pick(y), pick(x), log) })
		what := fmt.Sprintf("softmax (log %v)", log)
		if !backward {
			p.check(what, y, tol32)
			continue
		}
		g, dx := p.rand([]int{nRows, nCols}, -1, 1), p.tensor([]int{nRows, nCols}, nil)
		p.run("softmax backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.SoftmaxBackward(pick(dx), pick(g), pick(y), log)
		})
		p.check(what+" backward", dx, tol32)
	}
}

// nllDriver: 600 rows (more than one block's threads), every fifth target
// ignored.
func nllDriver(p *kpair, backward bool) {
	rows, cols := 600, 10
	logp := p.rand([]int{rows, cols}, -6, 0)
	tg := make([]int32, rows)
	for i := range tg {
		tg[i] = int32(p.rng.IntN(cols))
		if i%5 == 3 {
			tg[i] = -1
		}
	}
	target := p.ints(tg)
	if !backward {
		loss := p.tensor([]int{1}, nil)
		p.run("nll", func(k device.Kernels, pick func(both) device.View) error {
			return k.NLL(pick(loss), pick(logp), pick(target))
		})
		p.check("nll", loss, tol32)
		return
	}
	grad, dx := p.tensor([]int{1}, []float32{0.75}), p.tensor([]int{rows, cols}, nil)
	p.run("nll backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.NLLBackward(pick(dx), pick(grad), pick(target))
	})
	p.check("nll backward", dx, 0)
}

// crossEntropyDriver: the fused cross-entropy over more rows and classes
// than a block has threads, a fifth of the rows ignored.
func crossEntropyDriver(p *kpair, backward bool) {
	rows, cols := 300, 517
	x := p.rand([]int{rows, cols}, -8, 8)
	tg := make([]int32, rows)
	for i := range tg {
		tg[i] = int32(p.rng.IntN(cols))
		if i%5 == 3 {
			tg[i] = -100
		}
	}
	target := p.ints(tg)
	loss, stats := p.tensor([]int{1}, nil), p.tensor([]int{rows, 2}, nil)
	p.run("cross_entropy", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.CrossEntropyKernels).CrossEntropy(pick(loss), pick(stats), pick(x), pick(target))
	})
	p.check("cross_entropy stats", stats, tol32)
	p.check("cross_entropy", loss, tol32)
	if !backward {
		return
	}
	grad, dx := p.tensor([]int{1}, []float32{0.75}), p.tensor([]int{rows, cols}, nil)
	p.run("cross_entropy backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.CrossEntropyKernels).CrossEntropyBackward(pick(dx), pick(grad), pick(x), pick(stats), pick(target))
	})
	p.check("cross_entropy backward", dx, tol32)
}

// gemmDriver: partial 16×16 tiles in every dimension, a batch, every
// transposition, beta 0 and not.
func gemmDriver(p *kpair) {
	m, n, k, batch := 37, 29, 53, 3
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		a, b := p.rand([]int{batch * m * k}, -1, 1), p.rand([]int{batch * k * n}, -1, 1)
		c := p.rand([]int{batch * m * n}, -1, 1)
		lda, ldb := k, n
		if tr[0] {
			lda = m
		}
		if tr[1] {
			ldb = k
		}
		what := fmt.Sprintf("gemm transA %v transB %v", tr[0], tr[1])
		p.run(what, func(kk device.Kernels, pick func(both) device.View) error {
			return kk.Gemm(device.GemmParams{TransA: tr[0], TransB: tr[1], M: m, N: n, K: k, Alpha: 1.25, Beta: 0.5,
				A: pick(a).Block, B: pick(b).Block, C: pick(c).Block, LDA: lda, LDB: ldb, LDC: n, Batch: batch,
				StrideA: m * k, StrideB: k * n, StrideC: m * n})
		})
		p.check(what, c, tol32)
	}
}

// gemmBF16Driver: bf16check's products (every transposition, a shared A,
// padded leading dimensions, odd offsets, C float32 and bfloat16, beta 0
// and not), bit for bit against the float32 sum in order; the CPU device
// has no bfloat16 product to compare with.
func gemmBF16Driver(p *kpair) {
	bf16check.Gemm(p.T, p.dev, true)
	p.worstOp = "no CPU comparison: bit for bit against the float32 sum in order"
}

func sgdDriver(p *kpair) {
	w, g, buf := p.rand([]int{nElems}, -1, 1), p.rand([]int{nElems}, -1, 1), p.tensor([]int{nElems}, make([]float32, nElems))
	for i, sp := range []device.SGDParams{
		{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, First: true},
		{LR: 0.1, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01},
		{LR: 0.1, Momentum: 0.9, Nesterov: true},
		{LR: 0.05},
	} {
		p.run("sgd", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.OptimizerKernels).SGDStep(pick(w), pick(g), pick(buf), sp)
		})
		p.check(fmt.Sprintf("sgd step %d param", i), w, tol32)
		p.check(fmt.Sprintf("sgd step %d momentum", i), buf, tol32)
	}
}

func adamwDriver(p *kpair) {
	w, g := p.rand([]int{nElems}, -1, 1), p.rand([]int{nElems}, -1, 1)
	m, v := p.tensor([]int{nElems}, make([]float32, nElems)), p.tensor([]int{nElems}, make([]float32, nElems))
	for step := 1; step <= 3; step++ {
		ap := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		p.run("adamw", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.OptimizerKernels).AdamWStep(pick(w), pick(g), pick(m), pick(v), ap)
		})
		p.check(fmt.Sprintf("adamw step %d param", step), w, tol32)
		p.check(fmt.Sprintf("adamw step %d exp_avg", step), m, tol32)
		p.check(fmt.Sprintf("adamw step %d exp_avg_sq", step), v, tol32)
	}
}

// biasGELUDriver: 150 rows of 300 (more rows than rowGrid's blocks, rows
// longer than a block), the pre-activation updated in place; backward with the column
// sums on the rows Sum would split (the stand-in has few multiprocessors,
// so 150 rows are split).
func biasGELUDriver(p *kpair) {
	z, b := p.rand([]int{nRows, nCols}, -6, 4), p.rand([]int{nCols}, -1, 1)
	y := p.tensor([]int{nRows, nCols}, nil)
	p.run("bias_gelu_tanh", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.FusedGELUKernels).BiasGELUTanh(pick(y), pick(z), pick(b))
	})
	p.check("bias_gelu_tanh z", z, 0)
	p.check("bias_gelu_tanh", y, 1e-5) // the CPU device's GELU is a σ form, a few ulps off tanh's
	g := p.rand([]int{nRows, nCols}, -1, 1)
	dz, db := p.tensor([]int{nRows, nCols}, nil), p.tensor([]int{nCols}, nil)
	p.run("gelu_tanh_backward_sum", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.FusedGELUKernels).GELUTanhBackwardSum(pick(dz), pick(db), pick(g), pick(z))
	})
	p.check("gelu_tanh_backward_sum dz", dz, 1e-5)
	p.check("gelu_tanh_backward_sum db", db, 1e-5)
}

// addLayerNormDriver: 150 rows of 300 (more rows than rowGrid's blocks,
// rows longer than a block); the CPU device adds and normalises with its
// own AddLayerNorm.
func addLayerNormDriver(p *kpair) {
	x, r, w, b := p.rand([]int{nRows, nCols}, -3, 5), p.rand([]int{nRows, nCols}, -1, 1), p.rand([]int{nCols}, 0.5, 1.5), p.rand([]int{nCols}, -1, 1)
	sum, y := p.tensor([]int{nRows, nCols}, nil), p.tensor([]int{nRows, nCols}, nil)
	mean, rstd := p.tensor([]int{nRows}, nil), p.tensor([]int{nRows}, nil)
	p.run("add_layer_norm", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.FusedAddLayerNormKernels).AddLayerNorm(pick(sum), pick(y), pick(mean), pick(rstd), pick(x), pick(r), pick(w), pick(b), 1e-5)
	})
	p.check("add_layer_norm sum", sum, 0)
	p.check("add_layer_norm", y, tol32)
	p.check("add_layer_norm mean", mean, tol32)
	p.check("add_layer_norm rstd", rstd, tol32)
}

// adamwMultiDriver: 60 tensors (two launches' tables) of odd sizes, one
// of 70000 (five chunks), laid end to end in one block; the CPU device
// steps them one by one.
func adamwMultiDriver(p *kpair) {
	sizes := []int{1, 3, 1025, 70000, 0, 16385}
	for len(sizes) < 60 {
		sizes = append(sizes, 1+(len(sizes)*37)%300)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	w, g := p.rand([]int{total}, -1, 1), p.rand([]int{total}, -1, 1)
	m, v := p.tensor([]int{total}, make([]float32, total)), p.tensor([]int{total}, make([]float32, total))
	for step := 1; step <= 3; step++ {
		ap := device.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step}
		p.run("adamw_multi", func(k device.Kernels, pick func(both) device.View) error {
			var ts []device.AdamWTensors
			off := 0
			for _, n := range sizes {
				view := func(x both) device.View {
					v := pick(x)
					return device.View{Block: v.Block, Off: off, Shape: []int{n}, Strides: []int{1}}
				}
				ts = append(ts, device.AdamWTensors{Param: view(w), Grad: view(g), ExpAvg: view(m), ExpAvgSq: view(v)})
				off += n
			}
			if mk, ok := k.(device.MultiTensorOptimKernels); ok {
				return mk.AdamWSteps(ts, ap)
			}
			for _, t := range ts {
				if err := k.(device.OptimizerKernels).AdamWStep(t.Param, t.Grad, t.ExpAvg, t.ExpAvgSq, ap); err != nil {
					return err
				}
			}
			return nil
		})
		p.check(fmt.Sprintf("adamw_multi step %d param", step), w, tol32)
		p.check(fmt.Sprintf("adamw_multi step %d exp_avg", step), m, tol32)
		p.check(fmt.Sprintf("adamw_multi step %d exp_avg_sq", step), v, tol32)
	}
}

var dropKey = device.DropoutKey{Seed: 0x1234_5678_9abc, Op: 3, Step: 7}

func dropoutDriver(p *kpair) {
	x, y := p.rand([]int{nElems*4 + 3}, -1, 1), p.tensor([]int{nElems*4 + 3}, nil)
	p.run("dropout", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.DropoutKernels).Dropout(pick(y), pick(x), 0.3, dropKey)
	})
	p.check("dropout", y, 0)
}

// embeddingDriver: 300 positions (more than rowGrid's blocks and one tile
// of 256) over 50 rows, so indices repeat, 300 columns (a partial second
// pass); backward also 1000 positions over 3 rows (long chains across
// four tiles).
func embeddingDriver(p *kpair, backward bool) {
	for _, sz := range [][2]int{{50, 300}, {3, 1000}} {
		V, n := sz[0], sz[1]
		if !backward && V == 3 {
			continue
		}
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(p.rng.IntN(V))
		}
		ix := p.ints(idx)
		table := p.rand([]int{V, nCols}, -1, 1)
		if !backward {
			out := p.tensor([]int{n, nCols}, nil)
			p.run("embedding", func(k device.Kernels, pick func(both) device.View) error {
				return k.(device.EmbeddingKernels).Gather(pick(out), pick(table), pick(ix))
			})
			p.check("embedding", out, 0)
			continue
		}
		grad := p.rand([]int{n, nCols}, -1, 1)
		p.run("embedding backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.EmbeddingKernels).ScatterAdd(pick(table), pick(grad), pick(ix))
		})
		p.check(fmt.Sprintf("embedding backward (%d positions, %d rows)", n, V), table, 0)
	}
}

// layerNormDriver: 150 rows of 300; the parameter gradients split the
// rows (two column blocks are fewer than the stand-in's 16-block target).
func layerNormDriver(p *kpair, backward bool) {
	x, w, b := p.rand([]int{nRows, nCols}, -3, 5), p.rand([]int{nCols}, 0.5, 1.5), p.rand([]int{nCols}, -1, 1)
	y, mean, rstd := p.tensor([]int{nRows, nCols}, nil), p.tensor([]int{nRows}, nil), p.tensor([]int{nRows}, nil)
	p.run("layer_norm", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.LayerNormKernels).LayerNorm(pick(y), pick(mean), pick(rstd), pick(x), pick(w), pick(b), 1e-5)
	})
	if !backward {
		p.check("layer_norm", y, tol32)
		p.check("layer_norm mean", mean, tol32)
		p.check("layer_norm rstd", rstd, tol32)
		return
	}
	g := p.rand([]int{nRows, nCols}, -1, 1)
	dx, dw, db := p.tensor([]int{nRows, nCols}, nil), p.tensor([]int{nCols}, nil), p.tensor([]int{nCols}, nil)
	p.run("layer_norm backward", func(k device.Kernels, pick func(both) device.View) error {
		return k.(device.LayerNormKernels).LayerNormBackward(pick(dx), pick(dw), pick(db), pick(g), pick(x), pick(mean), pick(rstd), pick(w))
	})
	p.check("layer_norm dx", dx, tol32)
	p.check("layer_norm dweight", dw, tol32)
	p.check("layer_norm dbias", db, tol32)
}

// attentionDriver: causal and not, with dropout; T = 300 keys is more than
// one tile of 256, and 2·2·300 rows more than rowGrid's blocks.
func attentionDriver(p *kpair, backward bool) {
	B, H, T, D := 2, 2, 300, 8
	shape := []int{B, H, T, D}
	q, kk, v, gOut := p.rand(shape, -1, 1), p.rand(shape, -1, 1), p.rand(shape, -1, 1), p.rand(shape, -1, 1)
	for _, causal := range []bool{true, false} {
		ap := device.AttentionParams{Causal: causal, Scale: 0.35, Dropout: 0.1, Key: dropKey}
		o, lse := p.tensor(shape, nil), p.tensor(shape[:3], nil)
		p.run("attention", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.AttentionKernels).Attention(pick(o), pick(lse), pick(q), pick(kk), pick(v), ap)
		})
		what := fmt.Sprintf("attention (causal %v)", causal)
		p.check(what, o, 1e-5)
		p.check(what+" lse", lse, tol32)
		if !backward {
			continue
		}
		dq, dk, dv := p.tensor(shape, nil), p.tensor(shape, nil), p.tensor(shape, nil)
		p.run("attention backward", func(k device.Kernels, pick func(both) device.View) error {
			return k.(device.AttentionKernels).AttentionBackward(pick(dq), pick(dk), pick(dv), pick(gOut), pick(q), pick(kk), pick(v), pick(o), pick(lse), ap)
		})
		p.check(what+" dq", dq, 1e-5)
		p.check(what+" dk", dk, 1e-5)
		p.check(what+" dv", dv, 1e-5)
	}
}

// kernelCase drives one kernel through the CUDA device's methods; params
// are the device's (to reach the 64-bit index variants and ferry's own
// SGEMM).
type kernelCase struct {
	params map[string]string
	run    func(p *kpair)
}

var (
	index64 = map[string]string{"index64": "true"}
	noBLAS  = map[string]string{"cublas": "false"}
)

var kernelCases = map[string]kernelCase{
	"ferry_copy_strided32":    {nil, copyDriver},
	"ferry_copy_strided64":    {index64, copyDriver},
	"ferry_convert_strided32": {nil, convertDriver},
	"ferry_convert_strided64": {index64, convertDriver},
	"ferry_unary_contig":      {nil, unaryContig},
	"ferry_unary_strided32":   {nil, unaryStrided},
	"ferry_unary_strided64":   {index64, unaryStrided},
	"ferry_binary_contig":     {nil, binaryContig},
	"ferry_binary_strided32":  {nil, binaryStrided},
	"ferry_binary_strided64":  {index64, binaryStrided},
	"ferry_unary_mixed32":     {nil, unaryMixedDriver},
	"ferry_unary_mixed64":     {index64, unaryMixedDriver},
	"ferry_binary_mixed32":    {nil, binaryMixedDriver},
	"ferry_binary_mixed64":    {index64, binaryMixedDriver},
	"ferry_gemm":              {noBLAS, gemmDriver},
	"ferry_gemm_bf16":         {noBLAS, gemmBF16Driver},
	"ferry_sgd_step":          {nil, sgdDriver},
	"ferry_adamw_step":        {nil, adamwDriver},
	// ferry_sum_blocks: rows of 5000 (one block per row, split in three);
	// ferry_sum_threads: columns (a thread per column, rows split);
	// ferry_sum_finish: a whole-tensor sum split sixteen ways.
	"ferry_sum_blocks":               {nil, func(p *kpair) { p.sumCase("sum of rows", []int{7, 5000}, []int{7, 1}) }},
	"ferry_sum_threads":              {nil, func(p *kpair) { p.sumCase("sum of columns", []int{nRows * 2, 70}, []int{1, 70}) }},
	"ferry_sum_finish":               {nil, func(p *kpair) { p.sumCase("sum of all", []int{200, nElems / 200}, []int{1, 1}) }},
	"ferry_sum_blocks_mixed":         {nil, func(p *kpair) { p.sumMixedCase("sum of rows", []int{7, 5000}, []int{7, 1}) }},
	"ferry_sum_threads_mixed":        {nil, func(p *kpair) { p.sumMixedCase("sum of columns", []int{nRows * 2, 70}, []int{1, 70}) }},
	"ferry_sum_finish_mixed":         {nil, func(p *kpair) { p.sumMixedCase("sum of all", []int{200, nElems / 200}, []int{1, 1}) }},
	"ferry_softmax":                  {nil, func(p *kpair) { softmaxDriver(p, false) }},
	"ferry_softmax_backward":         {nil, func(p *kpair) { softmaxDriver(p, true) }},
	"ferry_nll":                      {nil, func(p *kpair) { nllDriver(p, false) }},
	"ferry_nll_grad_scale":           {nil, func(p *kpair) { nllDriver(p, true) }},
	"ferry_nll_backward":             {nil, func(p *kpair) { nllDriver(p, true) }},
	"ferry_cross_entropy_stats":      {nil, func(p *kpair) { crossEntropyDriver(p, false) }},
	"ferry_cross_entropy_loss":       {nil, func(p *kpair) { crossEntropyDriver(p, false) }},
	"ferry_cross_entropy_backward":   {nil, func(p *kpair) { crossEntropyDriver(p, true) }},
	"ferry_dropout":                  {nil, dropoutDriver},
	"ferry_dropout_bf16":             {nil, dropoutBF16Driver},
	"ferry_embedding_gather":         {nil, func(p *kpair) { embeddingDriver(p, false) }},
	"ferry_embedding_links":          {nil, func(p *kpair) { embeddingDriver(p, true) }},
	"ferry_embedding_scatter_add":    {nil, func(p *kpair) { embeddingDriver(p, true) }},
	"ferry_layer_norm":               {nil, func(p *kpair) { layerNormDriver(p, false) }},
	"ferry_layer_norm_backward":      {nil, func(p *kpair) { layerNormDriver(p, true) }},
	"ferry_layer_norm_params":        {nil, func(p *kpair) { layerNormDriver(p, true) }},
	"ferry_layer_norm_params_finish": {nil, func(p *kpair) { layerNormDriver(p, true) }},
	"ferry_attention":                {nil, func(p *kpair) { attentionDriver(p, false) }},
	"ferry_attention_delta":          {nil, func(p *kpair) { attentionDriver(p, true) }},
	"ferry_attention_backward_q":     {nil, func(p *kpair) { attentionDriver(p, true) }},
	"ferry_attention_backward_kv":    {nil, func(p *kpair) { attentionDriver(p, true) }},
	"ferry_bias_gelu_tanh":           {nil, biasGELUDriver},
	"ferry_gelu_tanh_backward_sum":   {nil, biasGELUDriver},
	"ferry_adamw_multi":              {nil, adamwMultiDriver},
	"ferry_add_layer_norm":           {nil, addLayerNormDriver},
}

// One subtest per extern "C" __global__ function of the .cu files: the
// kernel runs from its source, through the bindings, at least once, and
// what it computes matches the CPU device. A kernel added to a .cu file
// without a case here fails.
func TestKernelSource(t *testing.T) {
	if testing.Short() {
		t.Skip("short: builds and runs every kernel source with g++")
	}
	entries := kernels.Entries()
	if len(entries) == 0 {
		t.Fatal("no extern \"C\" __global__ kernels found in the .cu sources")
	}
	var races int64 = -1
	seen := map[string]bool{}
	for _, e := range entries {
		seen[e.Name] = true
		t.Run(e.Name, func(t *testing.T) {
			c, ok := kernelCases[e.Name]
			if !ok {
				t.Fatalf("%s (%s) has no case in kernelCases: say how to reach it and what to compare", e.Name, e.File)
			}
			l, k := setupSource(t)
			if races < 0 {
				races = k.Total("races") + k.Total("global_races")
			}
			before := k.Stat(e.Name, "runs")
			p := newKPair(t, l, c.params)
			start := time.Now()
			c.run(p)
			if err := p.dev.Compute().Synchronize(); err != nil {
				t.Fatal(err)
			}
			runs := k.Stat(e.Name, "runs") - before
			if runs <= 0 {
				t.Fatalf("%s did not run from its source (runs %d)", e.Name, runs)
			}
			t.Logf("%s: largest relative error against the CPU device %.3g (%s); %d launches from source, up to %d threads a block and %d blocks, %v",
				e.File, p.worst, p.worstOp, runs, k.Stat(e.Name, "max_threads"), k.Stat(e.Name, "max_blocks"), time.Since(start).Round(time.Millisecond))
		})
	}
	for name := range kernelCases {
		if !seen[name] {
			t.Errorf("kernelCases has %s, which no .cu file defines", name)
		}
	}
	if races >= 0 {
		n := srcK.Total("races") + srcK.Total("global_races") - races
		if n != 0 {
			t.Errorf("%d shared- or global-memory races in ferry's kernels", n)
		}
		t.Logf("%d shared- or global-memory races in ferry's kernels (every race is also a violation of the stand-in, which each subtest asserts is 0)", n)
	}
}

// entryPTX declares kernels to the stand-in (its PTX parser needs only
// the .entry lines) for test kernels that have no PTX.
func entryPTX(entries ...string) []byte {
	return []byte(".version 7.8\n.target sm_80\n.address_size 64\n" + strings.Join(entries, "\n") + "\n")
}

// The whole conformance suite, values compared with the CPU device, with
// every kernel run from its source; then the comparison tests again with
// the 64-bit index variants and ferry's own SGEMM.
func TestStandInConformanceFromSource(t *testing.T) {
	l, k := setupSource(t)
	races := k.Total("races")
	caps := devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}, Seed: 1,
		Reference: func(t *testing.T) device.Device {
			c, err := cpu.New(device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}}
	open := func(params map[string]string) func(t *testing.T, opts device.Options) device.Device {
		return func(t *testing.T, opts device.Options) device.Device {
			l.SetCopyDelay(0)
			if opts.Params == nil {
				opts.Params = map[string]string{}
			}
			for k, v := range params {
				opts.Params[k] = v
			}
			return openCUDA(t, l, opts)
		}
	}
	devicetest.Run(t, open(nil), caps)
	t.Run("index64,cublas=false", func(t *testing.T) {
		devicetest.RunKernels(t, open(map[string]string{"index64": "true", "cublas": "false"}), caps,
			"CompareGemm", "CompareCopy", "CompareUnary", "CompareBinary", "ConvertBF16", "GemmBF16", "ElementwiseBF16")
	})
	if n := k.Total("races") - races; n != 0 {
		t.Errorf("%d shared-memory races", n)
	}
	t.Logf("%d kernels run from source", l.Counter("launches_run"))
}

// The comparison tests at the suite's large shapes (many blocks, split
// reductions, tiles of 256 keys and columns past 256), kernels from
// source. Not in -short mode.
func TestSourceKernelsLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large shapes: not in -short mode")
	}
	l, k := setupSource(t)
	// The global-memory race check (a hash lookup per access) would make
	// this several times slower; TestKernelSource runs it on every kernel.
	k.CheckGlobalRaces(false)
	t.Cleanup(func() { k.CheckGlobalRaces(true) })
	races := k.Total("races")
	caps := devicetest.Caps{HasData: true, Seed: 2, Large: true,
		Reference: func(t *testing.T) device.Device {
			c, err := cpu.New(device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}}
	devicetest.RunKernels(t, func(t *testing.T, opts device.Options) device.Device { return openCUDA(t, l, opts) }, caps,
		"CompareCopy", "CompareUnary", "CompareBinary", "CompareSum", "CompareSoftmax", "CompareNLL", "CompareOptim", "CompareFamilies")
	if n := k.Total("races") - races; n != 0 {
		t.Errorf("%d shared-memory races", n)
	}
}

package ferry_test

// Values and gradients checked against PyTorch. The golden data under
// testdata/golden is made by testdata/golden/gen.py (PyTorch 1.13, float32,
// CPU, fixed seeds); regenerate it with
//
//	/usr/bin/python3 testdata/golden/gen.py
//
// Every check runs twice: with matrix products in OpenBLAS (skipped where it
// cannot be loaded) and in the pure-Go GEMM (cpu.SetMatmulBackend).
//
// # Tolerances
//
// Both sides compute in float32, in different orders: PyTorch sums in
// float32 (vectorised, cascaded), ferry's reductions accumulate in float64,
// the two GEMMs block their dot products differently, and ferry evaluates
// transcendental functions in float64 and rounds once. An element passes
// when
//
//	|got - want| <= rtol·|want| + atol,   rtol = 1e-5
//
// rtol is about 170 float32 units of rounding (u = 2⁻²⁴ ≈ 6e-8): room for
// a few roundings in each of a handful of chained ops. atol covers the
// elements that cancel to near zero, where a relative bound means nothing;
// the rounding error there is relative to the terms that cancelled, so
// atol follows their size (caseTolerance):
//
//   - copies and single roundings (reshape, neg, in-place ops): 1e-7;
//   - one function per element (exp ... sigmoid): 1e-6·max(1, |G|), as
//     the gradient G·f'(x) cancels inside f' (GELU' near x = -0.75);
//   - ops that sum K terms per element in forward or backward (matmul,
//     linear, reductions, broadcast gradients, softmaxes, losses):
//     max(1e-6, 1e-7·√K·S), S the largest |value| among inputs, output and
//     G: about 2u·√K·S, the typical (not worst-case, K·u·S) rounding of a
//     K-term float32 sum of terms of size S.
//
// NaN and infinities in the golden data must come out exactly so.
//
// Measured with PyTorch 1.13 (go test -v prints each case's worst error as
// a fraction of its tolerance): at most 0.23 (GELU-tanh gradients), under
// 0.07 for every matmul, reduction, softmax and loss, with either GEMM.
// The plain 1e-5/1e-6 bound also passes today, but with as little as 2x
// margin on broadcast matmul gradients, which is why sums get a K-aware
// atol.

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

// goldTensor is a tensor in the golden files: its shape and its elements
// in row-major order, float32 unless DType is "int32". JSON has no NaN or
// infinity: those are the strings "nan", "inf" and "-inf".
type goldTensor struct {
	Shape []int             `json:"shape"`
	DType string            `json:"dtype"`
	Data  []json.RawMessage `json:"data"`
}

type goldInput struct {
	goldTensor
	Grad bool  `json:"grad"` // the case checks this input's gradient
	View []int `json:"view"` // the op sees the input transposed on these two axes
}

type goldCase struct {
	Name   string         `json:"name"`
	Op     string         `json:"op"`
	Attrs  map[string]any `json:"attrs"`
	Inputs []goldInput    `json:"inputs"`
	Out    goldTensor     `json:"out"`
	G      *goldTensor    `json:"G"`     // upstream gradient; nil when nothing is differentiated
	Grads  []*goldTensor  `json:"grads"` // per input; nil entries have no gradient
}

type goldRun struct {
	Name        string       `json:"name"`
	Optim       string       `json:"optim"`
	LR          float64      `json:"lr"`
	Momentum    float64      `json:"momentum"`
	Dampening   float64      `json:"dampening"`
	WeightDecay float64      `json:"weight_decay"`
	Nesterov    bool         `json:"nesterov"`
	Beta1       float64      `json:"beta1"`
	Beta2       float64      `json:"beta2"`
	Eps         float64      `json:"eps"`
	Losses      []float64    `json:"losses"`
	Grads0      []goldTensor `json:"grads0"` // parameter gradients at the first step
	Final       []goldTensor `json:"final"`  // parameters after the last step
}

type goldModel struct {
	Name  string         `json:"name"`
	Sizes [][2]int       `json:"sizes"` // Linear (in, out) per layer
	Acts  []string       `json:"acts"`  // activation after each layer but the last
	Loss  string         `json:"loss"`  // "mse" or "cross_entropy"
	Init  [][]goldTensor `json:"init"`  // per layer: weight, bias
	X     []goldTensor   `json:"x"`     // one batch per step
	Y     []goldTensor   `json:"y"`
	Runs  []goldRun      `json:"runs"`
}

var golden struct {
	once   sync.Once
	err    error
	cases  []goldCase
	models []goldModel
}

func loadGolden(t *testing.T) ([]goldCase, []goldModel) {
	t.Helper()
	golden.once.Do(func() {
		var ops struct{ Cases []goldCase }
		var train struct{ Models []goldModel }
		for name, v := range map[string]any{"ops.json": &ops, "train.json": &train} {
			b, err := os.ReadFile("testdata/golden/" + name)
			if err != nil {
				golden.err = fmt.Errorf("%v (regenerate with /usr/bin/python3 testdata/golden/gen.py)", err)
				return
			}
			if err := json.Unmarshal(b, v); err != nil {
				golden.err = fmt.Errorf("%s: %v", name, err)
				return
			}
		}
		golden.cases, golden.models = ops.Cases, train.Models
	})
	if golden.err != nil {
		t.Fatal(golden.err)
	}
	return golden.cases, golden.models
}

// float32s parses the elements as float32: each is the shortest decimal of
// a float32, so this gives back PyTorch's exact value.
func (g *goldTensor) float32s(t testing.TB) []float32 {
	out := make([]float32, len(g.Data))
	for i, n := range g.Data {
		s := string(n)
		switch s {
		case `"nan"`:
			out[i] = float32(math.NaN())
			continue
		case `"inf"`:
			out[i] = float32(math.Inf(1))
			continue
		case `"-inf"`:
			out[i] = float32(math.Inf(-1))
			continue
		}
		v, err := strconv.ParseFloat(s, 32)
		if err != nil {
			t.Fatalf("golden value %q: %v", n, err)
		}
		out[i] = float32(v)
	}
	return out
}

func (g *goldTensor) int32s(t testing.TB) []int32 {
	out := make([]int32, len(g.Data))
	for i, n := range g.Data {
		v, err := strconv.ParseInt(string(n), 10, 32)
		if err != nil {
			t.Fatalf("golden value %q: %v", n, err)
		}
		out[i] = int32(v)
	}
	return out
}

// tensor makes g on dev, on no tape; the caller releases it.
func (g *goldTensor) tensor(t testing.TB, dev device.Device) *ferry.Tensor {
	if g.DType == "int32" {
		return ferry.FromInt32s(dev, g.int32s(t), g.Shape...)
	}
	data := g.float32s(t)
	if len(g.Shape) == 0 { // a 0-d tensor
		return ferry.Full(dev, data[0])
	}
	return ferry.FromFloat32s(dev, data, g.Shape...)
}

func (g *goldTensor) maxAbs(t testing.TB) float64 {
	if g == nil || g.DType == "int32" {
		return 0
	}
	m := 0.0
	for _, v := range g.float32s(t) {
		if a := math.Abs(float64(v)); a <= math.MaxFloat32 { // finite
			m = max(m, a)
		}
	}
	return m
}

// tolerance is |got - want| <= rtol·|want| + atol.
type tolerance struct{ rtol, atol float64 }

// closeTo compares got with want element by element. It returns the
// largest error as a fraction of the allowed error (1 means at the limit),
// and fails t when an element is out of bounds, a shape differs or a value
// is not finite.
func closeTo(t testing.TB, what string, gotShape []int, got []float32, want *goldTensor, tol tolerance) float64 {
	t.Helper()
	if !slices.Equal(gotShape, want.Shape) && !(len(gotShape) == 0 && len(want.Shape) == 0) {
		t.Errorf("%s: shape %v, want %v", what, gotShape, want.Shape)
		return math.Inf(1)
	}
	w := want.float32s(t)
	if len(got) != len(w) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(w))
		return math.Inf(1)
	}
	worst, at := 0.0, -1
	bad := 0
	for i := range got {
		g, e := float64(got[i]), float64(w[i])
		d := math.Abs(g - e)
		lim := tol.rtol*math.Abs(e) + tol.atol
		r := d / lim
		switch {
		case math.IsNaN(e) || math.IsInf(e, 0): // PyTorch's NaN or infinity, exactly
			if g == e || math.IsNaN(g) && math.IsNaN(e) {
				r = 0
			} else {
				r = math.Inf(1)
			}
		case math.IsNaN(g) || math.IsInf(g, 0):
			r = math.Inf(1)
		}
		if !(r <= 1) {
			if bad < 4 {
				t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g, allowed %.3g)", what, i, g, e, d, lim)
			}
			bad++
		}
		if r > worst || at < 0 {
			worst, at = r, i
		}
	}
	if bad > 4 {
		t.Errorf("%s: %d of %d elements out of tolerance", what, bad, len(got))
	}
	return worst
}

// matmulBackends runs f once per matrix-product library.
func matmulBackends(t *testing.T, f func(t *testing.T, dev device.Device)) {
	for _, b := range []string{"blas", "go"} {
		t.Run(b, func(t *testing.T) {
			if err := cpu.SetMatmulBackend(b); err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { _ = cpu.SetMatmulBackend("auto") })
			want := map[string]string{"blas": "openblas", "go": "pure Go"}[b]
			if got := cpu.MatmulBackend(); !strings.HasPrefix(got, want) {
				t.Fatalf("MatmulBackend() = %q after SetMatmulBackend(%q)", got, b)
			}
			f(t, newCPU(t, device.Options{PoisonFreed: true}))
		})
	}
}

func TestGoldenOps(t *testing.T) {
	cases, _ := loadGolden(t)
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		for i := range cases {
			c := &cases[i]
			t.Run(c.Name, func(t *testing.T) { runGoldenCase(t, dev, c) })
		}
	})
}

// caseTolerance chooses the tolerance of a case (see the file comment).
func caseTolerance(t testing.TB, c *goldCase) tolerance {
	const rtol, atol = 1e-5, 1e-6
	switch c.Op {
	case "reshape", "transpose", "contiguous", "clone", "to_host", "neg", "scale", "add_scalar",
		"add_", "sub_", "mul_", "scale_", "fill_", "copy_":
		// Exact copies, or one rounding per element.
		return tolerance{rtol: rtol, atol: 1e-7}
	case "exp", "log", "sqrt", "square", "relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "mul_self":
		// One function per element; the gradient G·f'(x) is rounded
		// relative to |G| times the terms of f' (which cancel near the
		// zeros of f', e.g. GELU' at x ≈ -0.75).
		return tolerance{rtol: rtol, atol: atol * max(1, c.G.maxAbs(t))}
	}
	// Ops that sum K terms per element, in the op or in its backward.
	k := 1
	switch c.Op {
	case "sum", "mean", "sum_T_mul", "mse_loss":
		k = len(c.Inputs[0].Data)
	case "add", "sub", "mul", "div", "add_self_T":
		// Gradients of broadcast inputs are sums over the broadcast axes.
		for _, in := range c.Inputs {
			k = max(k, len(c.Out.Data)/max(len(in.Data), 1))
		}
	default: // matmul, linear, softmaxes, cross-entropy, NLL
		for _, in := range c.Inputs {
			for _, d := range in.Shape {
				k = max(k, d)
			}
		}
		// The gradient of a broadcast operand also sums over the batch.
		k = max(k, len(c.Out.Data))
	}
	scale := c.Out.maxAbs(t)
	for i := range c.Inputs {
		scale = max(scale, c.Inputs[i].maxAbs(t))
	}
	if c.G != nil {
		scale = max(scale, c.G.maxAbs(t))
	}
	switch c.Op {
	case "softmax", "softmax_T":
		// The terms of softmax and its gradient are bounded by |G| and 1,
		// whatever the size of the logits.
		scale = max(c.G.maxAbs(t), 1)
	case "log_softmax", "cross_entropy":
		// x - max - log Σ: rounded relative to the row's magnitude, which
		// is not the output's (large logits give small log-probabilities).
		scale = max(c.Out.maxAbs(t), c.G.maxAbs(t), 1, c.Inputs[0].maxAbs(t)*1e-1)
	}
	return tolerance{rtol: rtol, atol: max(atol, 1e-7*math.Sqrt(float64(k))*scale)}
}

func runGoldenCase(t *testing.T, dev device.Device, c *goldCase) {
	runGoldenCaseWith(t, dev, c, caseTolerance(t, c), applyOp)
}

// runGoldenCaseWith runs case c with apply standing for its op and checks
// its output and gradients within tol.
func runGoldenCaseWith(t *testing.T, dev device.Device, c *goldCase, tol tolerance,
	apply func(t *testing.T, c *goldCase, dev device.Device, x []*ferry.Tensor) *ferry.Tensor) {
	leaves := make([]*ferry.Tensor, len(c.Inputs))
	for i := range c.Inputs {
		leaves[i] = c.Inputs[i].tensor(t, dev)
		if c.Inputs[i].Grad {
			leaves[i].RequireGrad()
		}
	}
	defer func() {
		for _, l := range leaves {
			l.Release()
		}
		if n := dev.Allocator().Allocated(); n != 0 {
			t.Errorf("%d bytes still allocated after the case", n)
		}
		if n := dev.Host().Allocator().Allocated(); n != 0 {
			t.Errorf("%d host bytes still allocated after the case", n)
		}
	}()
	if strings.HasSuffix(c.Op, "_") { // in-place: no tape, no gradient
		err := ferry.Catch(func() error {
			inPlaceOp(c, leaves)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		worst := closeTo(t, "out", leaves[0].Shape(), leaves[0].Float32s(), &c.Out, tol)
		t.Logf("worst error %.3f of tolerance", worst)
		return
	}
	var outShape []int
	var out []float32
	err := ferry.Step(func(tape *ferry.Tape) error {
		args := make([]*ferry.Tensor, len(leaves))
		for i, l := range leaves {
			x := tape.Input(l)
			if v := c.Inputs[i].View; v != nil {
				x = x.Transpose(v[0], v[1])
			}
			args[i] = x
		}
		y := apply(t, c, dev, args)
		outShape, out = y.Shape(), y.Float32s()
		if c.G == nil {
			return nil
		}
		g := c.G.tensor(t, dev)
		defer g.Release()
		return y.BackwardWith(ferry.BackwardOptions{Grad: g})
	})
	if err != nil {
		t.Fatal(err)
	}
	worst := closeTo(t, "out", outShape, out, &c.Out, tol)
	for i, want := range c.Grads {
		if want == nil {
			if g := leaves[i].Grad(); g != nil {
				t.Errorf("input %d has a gradient, PyTorch gives none", i)
			}
			continue
		}
		g := leaves[i].Grad()
		if g == nil {
			t.Errorf("input %d: no gradient", i)
			continue
		}
		worst = max(worst, closeTo(t, fmt.Sprintf("grad[%d]", i), g.Shape(), g.Float32s(), want, tol))
	}
	t.Logf("worst error %.3f of tolerance (rtol %g, atol %.3g)", worst, tol.rtol, tol.atol)
}

func attrInts(c *goldCase, key string) []int {
	raw, _ := c.Attrs[key].([]any)
	out := make([]int, len(raw))
	for i, v := range raw {
		out[i] = int(v.(float64))
	}
	return out
}

func attrFloat(c *goldCase, key string) float32 { return float32(c.Attrs[key].(float64)) }

// applyOp runs the case's op the way a user would write it in ferry.
func applyOp(t *testing.T, c *goldCase, dev device.Device, x []*ferry.Tensor) *ferry.Tensor {
	switch c.Op {
	case "matmul":
		return ferry.MatMul(x[0], x[1])
	case "linear":
		var bias *ferry.Tensor
		if len(x) > 2 {
			bias = x[2]
		}
		return ferry.Linear(x[0], x[1], bias)
	case "add":
		return ferry.Add(x[0], x[1])
	case "sub":
		return ferry.Sub(x[0], x[1])
	case "mul":
		return ferry.Mul(x[0], x[1])
	case "div":
		return ferry.Div(x[0], x[1])
	case "scale":
		return ferry.Scale(x[0], attrFloat(c, "alpha"))
	case "neg":
		return ferry.Neg(x[0])
	case "add_scalar":
		return ferry.AddScalar(x[0], attrFloat(c, "c"))
	case "exp":
		return ferry.Exp(x[0])
	case "log":
		return ferry.Log(x[0])
	case "sqrt":
		return ferry.Sqrt(x[0])
	case "square":
		return ferry.Square(x[0])
	case "relu":
		return ferry.ReLU(x[0])
	case "gelu":
		return ferry.GELU(x[0])
	case "gelu_tanh":
		return ferry.GELUTanh(x[0])
	case "tanh":
		return ferry.Tanh(x[0])
	case "sigmoid":
		return ferry.Sigmoid(x[0])
	case "sum", "mean":
		axes, keep := attrInts(c, "axes"), c.Attrs["keepdim"] == true
		switch {
		case c.Op == "sum" && keep:
			return ferry.SumKeepDim(x[0], axes...)
		case c.Op == "sum":
			return ferry.Sum(x[0], axes...)
		case keep:
			return ferry.MeanKeepDim(x[0], axes...)
		default:
			return ferry.Mean(x[0], axes...)
		}
	case "reshape":
		return x[0].Reshape(attrInts(c, "shape")...)
	case "transpose":
		return x[0].Transpose(int(c.Attrs["a"].(float64)), int(c.Attrs["b"].(float64)))
	case "contiguous":
		return x[0].Contiguous()
	case "clone":
		return x[0].Clone()
	case "to_host":
		h := x[0].To(dev.Host())
		defer h.Release()
		return h.To(dev)
	case "softmax":
		return ferry.Softmax(x[0])
	case "log_softmax":
		return ferry.LogSoftmax(x[0])
	case "mse_loss":
		return ferry.MSELoss(x[0], x[1])
	case "cross_entropy":
		return ferry.CrossEntropy(x[0], x[1])
	case "nll_loss":
		return ferry.NLLLoss(x[0], x[1])
	case "sum_T_mul":
		s := ferry.Sum(x[0], 0)
		st := s.T()
		defer s.Release()
		defer st.Release()
		return ferry.Mul(st, x[1])
	case "reshape_T":
		xt := x[0].T()
		r := xt.Reshape(attrInts(c, "shape")...)
		defer xt.Release()
		defer r.Release()
		return ferry.Mul(r, x[1])
	case "linear_T_out":
		y := ferry.Linear(x[0], x[1], x[2])
		yt := y.T()
		defer y.Release()
		defer yt.Release()
		return ferry.Mul(yt, x[3])
	case "softmax_T":
		y := ferry.Softmax(x[0])
		yt := y.T()
		defer y.Release()
		defer yt.Release()
		return ferry.Mul(yt, x[1])
	case "mul_self":
		return ferry.Mul(x[0], x[0])
	case "add_self_T":
		xt := x[0].T()
		defer xt.Release()
		return ferry.Add(x[0], xt)
	case "matmul_self_T":
		xt := x[0].T()
		defer xt.Release()
		return ferry.MatMul(x[0], xt)
	}
	t.Fatalf("golden op %q has no ferry counterpart in applyOp", c.Op)
	return nil
}

func inPlaceOp(c *goldCase, x []*ferry.Tensor) {
	switch c.Op {
	case "add_":
		x[0].AddInPlace(x[1])
	case "sub_":
		x[0].SubInPlace(x[1])
	case "mul_":
		x[0].MulInPlace(x[1])
	case "scale_":
		x[0].ScaleInPlace(attrFloat(c, "alpha"))
	case "fill_":
		x[0].FillInPlace(attrFloat(c, "value"))
	case "copy_":
		// PyTorch copies from a transposed view: so does ferry.
		src := x[1].T()
		defer src.Release()
		x[0].CopyFrom(src)
	default:
		panic("unknown in-place op " + c.Op)
	}
}

// tanhModule is Tanh as an nn.Module (nn has none yet).
type tanhModule struct{}

func (tanhModule) Forward(x *ferry.Tensor) *ferry.Tensor { return ferry.Tanh(x) }
func (tanhModule) Parameters() []*ferry.Tensor           { return nil }

// Training tolerance: the loss and parameters after a few optimizer steps
// agree to |got - want| <= trainRtol·max(1, |want|). One step's rounding
// differences are ~1e-7 relative (float32 GEMMs and sums in another order,
// the optimizer's scalar arithmetic); each step feeds them back through
// the parameters, amplified at most by lr·(curvature) + momentum, so a few
// steps stay within a few 1e-7. Measured: at most 1.2e-7 relative, for
// every run and either GEMM (-v prints it). 1e-5·max(1,|want|) leaves a wide margin while still
// catching any wrong update rule, which shows at 1e-3 or more.
const trainRtol = 1e-5

func TestGoldenTraining(t *testing.T) {
	_, models := loadGolden(t)
	matmulBackends(t, func(t *testing.T, dev device.Device) {
		for mi := range models {
			m := &models[mi]
			for ri := range m.Runs {
				r := &m.Runs[ri]
				t.Run(m.Name+"/"+r.Name, func(t *testing.T) { runGoldenTraining(t, dev, m, r) })
			}
		}
	})
}

func runGoldenTraining(t *testing.T, dev device.Device, m *goldModel, r *goldRun) {
	var mods []nn.Module
	for i, sz := range m.Sizes {
		l, err := nn.NewLinear(dev, sz[0], sz[1], true, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		for j, p := range []*ferry.Tensor{l.Weight, l.Bias} {
			src := m.Init[i][j].tensor(t, dev)
			p.CopyFrom(src)
			src.Release()
		}
		mods = append(mods, l)
		if i < len(m.Acts) {
			switch m.Acts[i] {
			case "relu":
				mods = append(mods, nn.ReLU{})
			case "gelu":
				mods = append(mods, nn.GELU{})
			case "tanh":
				mods = append(mods, tanhModule{})
			default:
				t.Fatalf("activation %q", m.Acts[i])
			}
		}
	}
	model := nn.NewSequential(mods...)
	defer nn.Release(model)
	params := model.Parameters()
	var opt optim.Optimizer
	switch r.Optim {
	case "sgd":
		o := optim.NewSGD(params, float32(r.LR))
		o.Momentum, o.Dampening, o.WeightDecay, o.Nesterov = float32(r.Momentum), float32(r.Dampening), float32(r.WeightDecay), r.Nesterov
		opt = o
	case "adamw":
		o := optim.NewAdamW(params, float32(r.LR))
		o.Beta1, o.Beta2, o.Eps, o.WeightDecay = float32(r.Beta1), float32(r.Beta2), float32(r.Eps), float32(r.WeightDecay)
		opt = o
	default:
		t.Fatalf("optimizer %q", r.Optim)
	}
	defer opt.Release()
	tol := tolerance{rtol: trainRtol, atol: trainRtol}
	worst := 0.0
	for step := range m.X {
		opt.ZeroGrad()
		var loss float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(m.X[step].tensor(t, dev))
			y := tape.Adopt(m.Y[step].tensor(t, dev))
			out := model.Forward(x)
			var l *ferry.Tensor
			if m.Loss == "mse" {
				l = ferry.MSELoss(out, y)
			} else {
				l = ferry.CrossEntropy(out, y)
			}
			loss = l.Item()
			return l.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		want := r.Losses[step]
		lossErr := math.Abs(float64(loss)-want) / (trainRtol * max(1, math.Abs(want)))
		if !(lossErr <= 1) {
			t.Errorf("step %d: loss %.9g, want %.9g", step, loss, want)
		}
		worst = max(worst, lossErr)
		if step == 0 {
			for i, p := range params {
				g := p.Grad()
				// Gradients of the first step: one forward and backward,
				// elementwise near PyTorch to float32 rounding of short sums.
				worst = max(worst, closeTo(t, fmt.Sprintf("step 0 grad of %s", p.Name()), g.Shape(), g.Float32s(), &r.Grads0[i], tol))
			}
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range params {
		worst = max(worst, closeTo(t, "final "+p.Name(), p.Shape(), p.Float32s(), &r.Final[i], tol))
	}
	t.Logf("worst error %.3f of tolerance %g·max(1,|want|)", worst, trainRtol)
}

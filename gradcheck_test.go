package ferry_test

// Finite-difference checks of every differentiable op: the gradient that
// Backward computes against the derivative of L(x) = Σ out·G measured by
// evaluating the op's forward at perturbed inputs.
//
// # Numerics
//
// The forward runs in float32, so the difference quotient is dominated by
// rounding, not truncation, unless h is large. Two choices keep both small:
//
//   - The inputs lie on a grid of 2⁻¹² and the step is h = 2⁻⁷, so x ± h and
//     x ± 2h are exact float32 values: the stencil's points are exactly
//     where it assumes them.
//   - The five-point stencil (8(L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h)))/12h
//     has truncation error h⁴/30·L⁽⁵⁾ ≈ 1e-10·L⁽⁵⁾, negligible for these
//     smooth functions on inputs of order 1.
//
// L is summed in float64 from the float32 outputs; its error is the
// rounding of the outputs, ε ≈ c·u·Σ|G_k|·S (u = 2⁻²⁴, S the size of the
// terms each output is made of, c a few roundings), and the stencil
// amplifies it by 18/12h ≈ 190. The check is
//
//	|numeric - analytic| <= 1e-3·|analytic| + 190·4u·Σ|G_k|·S
//
// with S the largest |output| or |input| (at least 1) and c = 4 roundings
// per output (more than most ops make, about what a chain of a few ops
// does). The measured worst error is 0.2 of this bound, for the MLP, and
// under 0.1 for single ops (go test -v prints it per case), while a wrong
// derivative (a missing factor, a transposed gradient) is off by O(1).
// Inputs to ReLU stay 0.05 away from its kink, to log and sqrt in
// [0.5, 2], divisors away from zero.

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

const (
	fdGrid = 1.0 / 4096 // inputs are multiples of this
	fdStep = 1.0 / 128  // the stencil's h
)

// fdInput describes one input of a gradient check.
type fdInput struct {
	shape  []int
	lo, hi float64 // uniform in [lo, hi), snapped to the grid
	gap    float64 // |x| >= gap (kinks), 0: no constraint
	ints   []int32 // an int32 input (class targets): no gradient
	noGrad bool
}

type fdCase struct {
	name   string
	inputs []fdInput
	f      func(x []*ferry.Tensor) *ferry.Tensor
}

func fdIn(shape ...int) fdInput { return fdInput{shape: shape, lo: -2, hi: 2} }

func fdPos(shape ...int) fdInput { return fdInput{shape: shape, lo: 0.5, hi: 2} }

func awayFromZero(shape ...int) fdInput { return fdInput{shape: shape, lo: -2, hi: 2, gap: 0.5} }

func fdInts(v ...int32) fdInput { return fdInput{ints: v} }

// release2 releases intermediates made inside an op chain.
func releaseAll(ts ...*ferry.Tensor) {
	for _, t := range ts {
		t.Release()
	}
}

func fdCases(dev device.Device) []fdCase {
	unary := func(f func(*ferry.Tensor) *ferry.Tensor) func(x []*ferry.Tensor) *ferry.Tensor {
		return func(x []*ferry.Tensor) *ferry.Tensor { return f(x[0]) }
	}
	binary := func(f func(a, b *ferry.Tensor) *ferry.Tensor) func(x []*ferry.Tensor) *ferry.Tensor {
		return func(x []*ferry.Tensor) *ferry.Tensor { return f(x[0], x[1]) }
	}
	tT := func(f func(a, b *ferry.Tensor) *ferry.Tensor, ta, tb bool) func(x []*ferry.Tensor) *ferry.Tensor {
		return func(x []*ferry.Tensor) *ferry.Tensor {
			a, b := x[0], x[1]
			if ta {
				a = a.T()
				defer a.Release()
			}
			if tb {
				b = b.T()
				defer b.Release()
			}
			return f(a, b)
		}
	}
	cs := []fdCase{
		{"matmul/2d", []fdInput{fdIn(3, 4), fdIn(4, 2)}, binary(ferry.MatMul)},
		{"matmul/2d_TA", []fdInput{fdIn(4, 3), fdIn(4, 2)}, tT(ferry.MatMul, true, false)},
		{"matmul/2d_TB", []fdInput{fdIn(3, 4), fdIn(2, 4)}, tT(ferry.MatMul, false, true)},
		{"matmul/2d_TA_TB", []fdInput{fdIn(4, 3), fdIn(2, 4)}, tT(ferry.MatMul, true, true)},
		{"matmul/vector_shapes", []fdInput{fdIn(1, 5), fdIn(5, 1)}, binary(ferry.MatMul)},
		{"matmul/batched", []fdInput{fdIn(2, 3, 4), fdIn(2, 4, 2)}, binary(ferry.MatMul)},
		{"matmul/batched_TA_TB", []fdInput{fdIn(2, 4, 3), fdIn(2, 2, 4)}, tT(ferry.MatMul, true, true)},
		{"matmul/bcast_3d_2d", []fdInput{fdIn(2, 3, 4), fdIn(4, 2)}, binary(ferry.MatMul)},
		{"matmul/bcast_3d_2d_TB", []fdInput{fdIn(2, 3, 4), fdIn(2, 4)}, tT(ferry.MatMul, false, true)},
		{"matmul/bcast_2d_3d", []fdInput{fdIn(3, 4), fdIn(2, 4, 2)}, binary(ferry.MatMul)},
		{"matmul/bcast_size1", []fdInput{fdIn(1, 3, 4), fdIn(2, 4, 2)}, binary(ferry.MatMul)},
		{"matmul/self_T", []fdInput{fdIn(3, 4)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].T()
			defer xt.Release()
			return ferry.MatMul(x[0], xt)
		}},
		{"linear/bias", []fdInput{fdIn(3, 4), fdIn(2, 4), fdIn(2)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], x[2]) }},
		{"linear/no_bias", []fdInput{fdIn(3, 4), fdIn(2, 4)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], nil) }},
		{"linear/3d", []fdInput{fdIn(2, 3, 4), fdIn(2, 4), fdIn(2)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], x[2]) }},
		{"linear/x_transposed", []fdInput{fdIn(4, 3), fdIn(2, 4), fdIn(2)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].T()
			defer xt.Release()
			return ferry.Linear(xt, x[1], x[2])
		}},
		{"scale", []fdInput{fdIn(2, 3)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.Scale(x, -1.5) })},
		{"neg", []fdInput{fdIn(2, 3)}, unary(ferry.Neg)},
		{"add_scalar", []fdInput{fdIn(2, 3)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.AddScalar(x, 0.75) })},
		{"exp", []fdInput{fdIn(2, 3)}, unary(ferry.Exp)},
		{"log", []fdInput{fdPos(2, 3)}, unary(ferry.Log)},
		{"sqrt", []fdInput{fdPos(2, 3)}, unary(ferry.Sqrt)},
		{"square", []fdInput{fdIn(2, 3)}, unary(ferry.Square)},
		{"relu", []fdInput{{shape: []int{3, 4}, lo: -2, hi: 2, gap: 0.05}}, unary(ferry.ReLU)},
		{"gelu", []fdInput{fdIn(3, 4)}, unary(ferry.GELU)},
		{"gelu_tanh", []fdInput{fdIn(3, 4)}, unary(ferry.GELUTanh)},
		{"tanh", []fdInput{fdIn(3, 4)}, unary(ferry.Tanh)},
		{"sigmoid", []fdInput{fdIn(3, 4)}, unary(ferry.Sigmoid)},
		{"sum/all", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.Sum(x) })},
		{"sum/axis1", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.Sum(x, 1) })},
		{"sum/axes02_keep", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.SumKeepDim(x, 0, 2) })},
		{"mean/all_keep", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.MeanKeepDim(x) })},
		{"mean/axis_neg1", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.Mean(x, -1) })},
		{"mean/axes02", []fdInput{fdIn(2, 3, 4)}, unary(func(x *ferry.Tensor) *ferry.Tensor { return ferry.Mean(x, 0, 2) })},
		{"sum/of_transposed_then_T", []fdInput{fdIn(3, 4, 2), fdIn(4, 3)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].Transpose(0, 2)
			s := ferry.Sum(xt, 0) // [4, 3]
			st := s.T()
			defer releaseAll(xt, s, st)
			return ferry.Mul(st, x[1].T())
		}},
		{"reshape", []fdInput{fdIn(2, 3, 4), fdIn(4, 6)}, func(x []*ferry.Tensor) *ferry.Tensor {
			r := x[0].Reshape(4, -1)
			defer r.Release()
			return ferry.Mul(r, x[1])
		}},
		{"reshape/of_transposed", []fdInput{fdIn(4, 6), fdIn(3, 8)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].T()
			r := xt.Reshape(3, 8)
			defer releaseAll(xt, r)
			return ferry.Mul(r, x[1])
		}},
		{"transpose", []fdInput{fdIn(2, 3, 4), fdIn(4, 3, 2)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].Transpose(0, 2)
			defer xt.Release()
			return ferry.Mul(xt, x[1])
		}},
		{"contiguous_clone_to", []fdInput{fdIn(3, 4)}, func(x []*ferry.Tensor) *ferry.Tensor {
			xt := x[0].T()
			c := xt.Contiguous()
			k := c.Clone()
			h := k.To(x[0].Device().Host())
			defer releaseAll(xt, c, k, h)
			return h.To(x[0].Device())
		}},
		{"softmax", []fdInput{fdIn(3, 5)}, unary(ferry.Softmax)},
		{"softmax/transposed", []fdInput{fdIn(5, 3)}, unary(func(x *ferry.Tensor) *ferry.Tensor {
			xt := x.T()
			defer xt.Release()
			return ferry.Softmax(xt)
		})},
		{"log_softmax", []fdInput{fdIn(2, 2, 5)}, unary(ferry.LogSoftmax)},
		{"mse_loss", []fdInput{fdIn(3, 4), fdIn(3, 4)}, binary(ferry.MSELoss)},
		{"cross_entropy", []fdInput{fdIn(4, 5), fdInts(2, -100, 0, 4)}, binary(ferry.CrossEntropy)},
		{"nll_loss", []fdInput{fdIn(4, 5), fdInts(1, 3, -100, 3)}, binary(ferry.NLLLoss)},
		{"mul/self", []fdInput{fdIn(2, 3)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Mul(x[0], x[0]) }},
		{"mlp", []fdInput{fdIn(3, 4), fdIn(5, 4), fdIn(5), fdIn(2, 5), fdIn(2), fdIn(3, 2)}, func(x []*ferry.Tensor) *ferry.Tensor {
			model := nn.NewSequential(&nn.Linear{Weight: x[1], Bias: x[2]}, nn.GELU{Tanh: true}, &nn.Linear{Weight: x[3], Bias: x[4]}, nn.GELU{})
			y := model.Forward(x[0])
			defer y.Release()
			return ferry.MSELoss(y, x[5])
		}},
	}
	bcasts := []struct {
		name   string
		sa, sb []int
	}{
		{"row", []int{3, 4}, []int{4}},
		{"col", []int{3, 4}, []int{3, 1}},
		{"scalar1", []int{3, 4}, []int{1}},
		{"lead", []int{2, 3, 4}, []int{3, 4}},
		{"both", []int{2, 1, 4}, []int{3, 1}},
	}
	ops := []struct {
		name string
		f    func(a, b *ferry.Tensor) *ferry.Tensor
	}{{"add", ferry.Add}, {"sub", ferry.Sub}, {"mul", ferry.Mul}, {"div", ferry.Div}}
	for _, op := range ops {
		for _, bc := range bcasts {
			a, b := fdIn(bc.sa...), fdIn(bc.sb...)
			if op.name == "div" { // divisors (in either order) away from 0
				a, b = awayFromZero(bc.sa...), awayFromZero(bc.sb...)
			}
			cs = append(cs, fdCase{op.name + "/" + bc.name, []fdInput{a, b}, binary(op.f)})
			cs = append(cs, fdCase{op.name + "/" + bc.name + "_swapped", []fdInput{b, a}, binary(op.f)})
		}
	}
	return cs
}

func TestGradcheck(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	for i, c := range fdCases(dev) {
		t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, uint64(i)) })
	}
}

// fdData draws the inputs of c.
func fdData(c fdCase, rng *rand.Rand) [][]float32 {
	data := make([][]float32, len(c.inputs))
	for i, in := range c.inputs {
		if in.ints != nil {
			continue
		}
		d := make([]float32, device.Numel(in.shape))
		for j := range d {
			for {
				v := in.lo + (in.hi-in.lo)*rng.Float64()
				v = math.Round(v/fdGrid) * fdGrid
				if math.Abs(v) >= in.gap {
					d[j] = float32(v)
					break
				}
			}
		}
		data[i] = d
	}
	return data
}

// fdTensors makes the inputs on dev (on no tape).
func fdTensors(dev device.Device, c fdCase, data [][]float32) []*ferry.Tensor {
	ts := make([]*ferry.Tensor, len(c.inputs))
	for i, in := range c.inputs {
		if in.ints != nil {
			ts[i] = ferry.FromInt32s(dev, in.ints)
		} else {
			ts[i] = ferry.FromFloat32s(dev, data[i], in.shape...)
		}
	}
	return ts
}

// fdForward evaluates c at data without recording anything.
func fdForward(t *testing.T, dev device.Device, c fdCase, data [][]float32) (shape []int, out []float32) {
	t.Helper()
	err := ferry.Step(func(tape *ferry.Tape) error {
		xs := fdTensors(dev, c, data)
		for i := range xs {
			xs[i] = tape.Adopt(xs[i])
		}
		y := c.f(xs)
		shape, out = y.Shape(), y.Float32s()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return shape, out
}

func gradcheck(t *testing.T, dev device.Device, c fdCase, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 77))
	data := fdData(c, rng)
	shape, out0 := fdForward(t, dev, c, data)
	G := make([]float32, len(out0))
	for i := range G {
		G[i] = float32(math.Round(rng.NormFloat64()/fdGrid) * fdGrid)
	}
	// Analytic gradients.
	leaves := fdTensors(dev, c, data)
	defer releaseAll(leaves...)
	if err := fdBackward(dev, c, leaves, shape, G, nil); err != nil {
		t.Fatal(err)
	}
	// The noise floor of L (see the file comment).
	scale := 1.0
	sumG := 0.0
	for k, v := range out0 {
		scale = max(scale, math.Abs(float64(v)))
		sumG += math.Abs(float64(G[k]))
	}
	for _, d := range data {
		for _, v := range d {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	const u = 1.0 / (1 << 24)
	atol := 18 / (12 * fdStep) * 4 * u * sumG * scale
	loss := func() float64 {
		_, out := fdForward(t, dev, c, data)
		s := 0.0
		for k, v := range out {
			s += float64(v) * float64(G[k])
		}
		return s
	}
	worst := 0.0
	for i, in := range c.inputs {
		if in.ints != nil || in.noGrad {
			continue
		}
		g := leaves[i].Grad()
		if g == nil {
			t.Errorf("input %d: no gradient", i)
			continue
		}
		if !slices.Equal(g.Shape(), in.shape) {
			t.Errorf("input %d: gradient shape %v, want %v", i, g.Shape(), in.shape)
			continue
		}
		ana := g.Float32s()
		bad := 0
		for j := range data[i] {
			x := data[i][j]
			at := func(k float32) float64 {
				data[i][j] = x + k*fdStep
				return loss()
			}
			num := (8*(at(1)-at(-1)) - (at(2) - at(-2))) / (12 * fdStep)
			data[i][j] = x
			a := float64(ana[j])
			lim := 1e-3*math.Abs(a) + atol
			worst = max(worst, math.Abs(num-a)/lim)
			if !(math.Abs(num-a) <= lim) {
				if bad < 3 {
					t.Errorf("d/d input%d[%d]: backward %.7g, finite differences %.7g (allowed %.3g)", i, j, a, num, lim)
				}
				bad++
			}
		}
	}
	if n := dev.Allocator().Allocated(); n != 0 {
		// Leaves and their gradients are still alive: count them.
		var want int64
		for _, l := range leaves {
			want += device.RoundSize(l.Bytes())
			if g := l.Grad(); g != nil {
				want += device.RoundSize(g.Bytes())
			}
		}
		if n != want {
			t.Errorf("%d bytes allocated, want %d (inputs and gradients)", n, want)
		}
	}
	t.Logf("worst error %.3f of tolerance (atol %.3g)", worst, atol)
}

// fdBackward marks the float inputs among leaves as requiring grad and
// runs c's backward from G, with hooks pushed when not nil.
func fdBackward(dev device.Device, c fdCase, leaves []*ferry.Tensor, shape []int, G []float32, hooks *ferry.SavedTensorHooks) error {
	for i, in := range c.inputs {
		if in.ints == nil && !in.noGrad {
			leaves[i].RequireGrad()
		}
	}
	return ferry.Step(func(tape *ferry.Tape) error {
		if hooks != nil {
			tape.PushHooks(hooks)
		}
		xs := make([]*ferry.Tensor, len(leaves))
		for i, l := range leaves {
			xs[i] = tape.Input(l)
		}
		y := c.f(xs)
		var g *ferry.Tensor
		if len(shape) == 0 {
			g = ferry.Full(dev, G[0])
		} else {
			g = ferry.FromFloat32s(dev, G, shape...)
		}
		defer g.Release()
		return y.BackwardWith(ferry.BackwardOptions{Grad: g})
	})
}

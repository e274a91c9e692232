package ferry_test

// Sizes the golden data does not reach: tensors large enough for the CPU
// kernels to split them across goroutines, and tensors with no elements.

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
)

// flatIndex returns the flat row-major offset of idx in shape.
func flatIndex(shape, idx []int) int {
	off := 0
	for i, d := range shape {
		off = off*d + idx[i]
	}
	return off
}

// forEachIndex calls f with every index of shape, in row-major order.
func forEachIndex(shape []int, f func(idx []int)) {
	idx := make([]int, len(shape))
	n := device.Numel(shape)
	for k := 0; k < n; k++ {
		f(idx)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// bcastAt reads a [shape] array at an index of the broadcast shape.
func bcastAt(data []float32, shape, idx []int) float32 {
	lead := len(idx) - len(shape)
	off := 0
	for i, d := range shape {
		j := idx[lead+i]
		if d == 1 {
			j = 0
		}
		off = off*d + j
	}
	return data[off]
}

// The CPU kernels split tensors larger than a grain (32768 elements) into
// chunks, starting chunks in the middle of rows (and run the chunks across
// goroutines when there are many; device/cpu's TestKernelsConcurrent runs
// small ones so too). These checks run ops on tensors big enough to be
// split, with an odd GOMAXPROCS so chunk borders fall mid-row, against
// plain Go loops over the same float32 values.
func TestLargeKernelsSplitAcrossGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(7))
	dev := newCPU(t, device.Options{PoisonFreed: true})
	rng := rand.New(rand.NewPCG(3, 4))
	randn := func(shape ...int) ([]float32, *ferry.Tensor) {
		x := ferry.Randn(dev, rng, shape...)
		t.Cleanup(x.Release)
		return x.Float32s(), x
	}
	exact := func(name string, got *ferry.Tensor, want []float32) {
		t.Helper()
		g := got.Float32s()
		got.Release()
		for i := range want {
			if g[i] != want[i] && !(math.IsNaN(float64(g[i])) && math.IsNaN(float64(want[i]))) {
				t.Errorf("%s[%d] = %g, want %g", name, i, g[i], want[i])
				return
			}
		}
	}
	near := func(name string, got *ferry.Tensor, want []float64, atol float64) {
		t.Helper()
		g := got.Float32s()
		got.Release()
		for i := range want {
			if d := math.Abs(float64(g[i]) - want[i]); !(d <= 1e-5*math.Abs(want[i])+atol) {
				t.Errorf("%s[%d] = %.9g, want %.9g", name, i, g[i], want[i])
				return
			}
		}
	}

	const R, C = 301, 257 // 77357 elements: three chunks or more
	a, ta := randn(R, C)
	row, trow := randn(C)
	col, tcol := randn(R, 1)
	b3, tb3 := randn(3, R, C)

	binaryCases := []struct {
		name   string
		x, y   *ferry.Tensor
		xd, yd []float32
		xs, ys []int
	}{
		{"row", ta, trow, a, row, []int{R, C}, []int{C}},
		{"col", ta, tcol, a, col, []int{R, C}, []int{R, 1}},
		{"lead", tb3, ta, b3, a, []int{3, R, C}, []int{R, C}},
		{"col_first", tcol, ta, col, a, []int{R, 1}, []int{R, C}},
	}
	for _, c := range binaryCases {
		for _, op := range []struct {
			name string
			f    func(a, b *ferry.Tensor) *ferry.Tensor
			g    func(a, b float32) float32
		}{
			{"add", ferry.Add, func(a, b float32) float32 { return a + b }},
			{"sub", ferry.Sub, func(a, b float32) float32 { return a - b }},
			{"mul", ferry.Mul, func(a, b float32) float32 { return a * b }},
			{"div", ferry.Div, func(a, b float32) float32 { return a / b }},
		} {
			out := op.f(c.x, c.y)
			shape := out.Shape()
			want := make([]float32, 0, out.Numel())
			forEachIndex(shape, func(idx []int) {
				want = append(want, op.g(bcastAt(c.xd, c.xs, idx), bcastAt(c.yd, c.ys, idx)))
			})
			exact(op.name+"/"+c.name, out, want)
		}
	}

	// A transposed view, copied and through unary kernels.
	at := ta.T()
	defer at.Release()
	tw := make([]float32, 0, R*C)
	forEachIndex([]int{C, R}, func(idx []int) { tw = append(tw, a[idx[1]*C+idx[0]]) })
	exact("contiguous of T", at.Contiguous(), tw)
	relu := make([]float32, len(tw))
	scaled := make([]float32, len(tw))
	sq := make([]float32, len(tw))
	for i, v := range tw {
		relu[i] = max(v, 0)
		scaled[i] = 0.3 * v
		sq[i] = v * v
	}
	exact("relu of T", ferry.ReLU(at), relu)
	exact("scale of T", ferry.Scale(at, 0.3), scaled)
	exact("square of T", ferry.Square(at), sq)
	// Broadcast add into a transposed operand.
	addT := make([]float32, 0, R*C)
	forEachIndex([]int{C, R}, func(idx []int) { addT = append(addT, tw[idx[0]*R+idx[1]]+col[idx[1]]) })
	colRow := tcol.Reshape(R)
	defer colRow.Release()
	exact("T + row", ferry.Add(at, colRow), addT)

	// Sums over each axis pattern of [3, R, C], contiguous and transposed.
	sumOver := func(shape []int, data []float32, axes ...int) []float64 {
		keep := make([]int, len(shape))
		for i, d := range shape {
			keep[i] = d
		}
		for _, ax := range axes {
			keep[ax] = 1
		}
		out := make([]float64, device.Numel(keep))
		forEachIndex(shape, func(idx []int) {
			k := make([]int, len(idx))
			for i := range idx {
				if keep[i] != 1 {
					k[i] = idx[i]
				}
			}
			out[flatIndex(keep, k)] += float64(data[flatIndex(shape, idx)])
		})
		return out
	}
	s3 := []int{3, R, C}
	for _, axes := range [][]int{{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}, {0, 1, 2}} {
		want := sumOver(s3, b3, axes...)
		near("sum", ferry.Sum(tb3, axes...), want, 1e-4)
	}
	b3t := tb3.Transpose(0, 2) // [C, R, 3]
	defer b3t.Release()
	b3tData := make([]float32, 0, len(b3))
	forEachIndex([]int{C, R, 3}, func(idx []int) { b3tData = append(b3tData, b3[flatIndex(s3, []int{idx[2], idx[1], idx[0]})]) })
	for _, axes := range [][]int{{0}, {1}, {2}, {0, 2}} {
		near("sum of transposed", ferry.Sum(b3t, axes...), sumOver([]int{C, R, 3}, b3tData, axes...), 1e-4)
	}

	// Softmax over long rows, many rows.
	sm, tsm := randn(40, 2000)
	want := make([]float64, len(sm))
	for r := 0; r < 40; r++ {
		x := sm[r*2000 : (r+1)*2000]
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, float64(v))
		}
		s := 0.0
		for _, v := range x {
			s += math.Exp(float64(v) - m)
		}
		for i, v := range x {
			want[r*2000+i] = math.Exp(float64(v)-m) / s
		}
	}
	near("softmax", ferry.Softmax(tsm), want, 1e-8)

	if t.Failed() {
		return
	}
	// Gradients of a large broadcast through sumTo.
	err := ferry.Step(func(tape *ferry.Tape) error {
		w := tape.Input(trow.RequireGrad())
		y := ferry.Mul(ta, w)
		if err := ferry.Sum(y).Backward(); err != nil {
			return err
		}
		wantG := make([]float64, C)
		for i, v := range a {
			wantG[i%C] += float64(v)
		}
		near("grad of row", trow.Grad().Detach(), wantG, 1e-4)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Empty tensors (a batch of zero rows): reductions over nothing give 0,
// means and losses NaN (0/0), and gradients through them are zeros, as in
// PyTorch 1.13.
func TestEmptyTensors(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	nan := float32(math.NaN())
	values := func(name string, y *ferry.Tensor, shape []int, want ...float32) {
		t.Helper()
		got := y.Float32s()
		if !slices.Equal(y.Shape(), shape) && !(len(shape) == 0 && y.Rank() == 0) {
			t.Errorf("%s: shape %v, want %v", name, y.Shape(), shape)
		}
		if !slices.EqualFunc(got, want, func(a, b float32) bool { return a == b || a != a && b != b }) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	err := ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.Zeros(dev, 0, 3))
		values("sum over the empty axis", ferry.Sum(x, 0), []int{3}, 0, 0, 0)
		values("mean over the empty axis", ferry.Mean(x, 0), []int{3}, nan, nan, nan)
		values("sum of all", ferry.Sum(x), nil, 0)
		values("mean of all", ferry.MeanKeepDim(x), []int{1, 1}, nan)
		values("sum over the other axis", ferry.Sum(x, 1), []int{0})
		values("mse of nothing", ferry.MSELoss(x, x), nil, nan)
		values("cross-entropy of no rows", ferry.CrossEntropy(x, tape.Adopt(ferry.FromInt32s(dev, nil, 0))), nil, nan)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w := ferry.Ones(dev, 2, 3).RequireGrad()
	b := ferry.Ones(dev, 2).RequireGrad()
	defer releaseAll(w, b)
	err = ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.Zeros(dev, 0, 3))
		y := ferry.Linear(x, w, b) // [0, 2]
		z := ferry.Add(y, b)       // b broadcast over no rows
		if err := ferry.Sum(z).Backward(); err != nil {
			return err
		}
		values("weight gradient", w.Grad(), []int{2, 3}, 0, 0, 0, 0, 0, 0)
		values("bias gradient", b.Grad(), []int{2}, 0, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w.SetGrad(nil)
	err = ferry.Step(func(tape *ferry.Tape) error {
		// Every row ignored: the loss is NaN and the gradient zero.
		y := ferry.CrossEntropy(tape.Input(w), tape.Adopt(ferry.FromInt32s(dev, []int32{-100, -100})))
		values("cross-entropy with every row ignored", y, nil, nan)
		if err := y.Backward(); err != nil {
			return err
		}
		values("its gradient", w.Grad(), []int{2, 3}, 0, 0, 0, 0, 0, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e := ferry.Zeros(dev, 0, 3).RequireGrad()
	defer e.Release()
	for _, loss := range []func(x *ferry.Tensor, tape *ferry.Tape) *ferry.Tensor{
		func(x *ferry.Tensor, tape *ferry.Tape) *ferry.Tensor { return ferry.MSELoss(x, x) },
		func(x *ferry.Tensor, tape *ferry.Tape) *ferry.Tensor {
			return ferry.CrossEntropy(x, tape.Adopt(ferry.FromInt32s(dev, nil, 0)))
		},
	} {
		err = ferry.Step(func(tape *ferry.Tape) error {
			if err := loss(tape.Input(e), tape).Backward(); err != nil {
				return err
			}
			values("gradient of a loss of no rows", e.Grad(), []int{0, 3})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		e.SetGrad(nil)
	}
	a := ferry.Zeros(dev, 2, 0).RequireGrad()
	c := ferry.Zeros(dev, 0, 3).RequireGrad()
	defer releaseAll(a, c)
	err = ferry.Step(func(tape *ferry.Tape) error {
		y := ferry.MatMul(tape.Input(a), tape.Input(c))
		values("product over K = 0", y, []int{2, 3}, 0, 0, 0, 0, 0, 0)
		if err := ferry.Sum(y).Backward(); err != nil {
			return err
		}
		values("gradient of a", a.Grad(), []int{2, 0})
		values("gradient of c", c.Grad(), []int{0, 3})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every op on inputs with no elements, forward and backward: no crash, and
// every input gets a gradient of its shape. (A Linear with in = 0 still has
// a bias gradient of 4 rows of ones; every other gradient is zero.)
func TestEmptyTensorsEveryOp(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	type c struct {
		name   string
		shapes [][]int
		f      func(x []*ferry.Tensor) *ferry.Tensor
	}
	un := func(n string, f func(*ferry.Tensor) *ferry.Tensor) c {
		return c{n, [][]int{{0, 3}}, func(x []*ferry.Tensor) *ferry.Tensor { return f(x[0]) }}
	}
	cs := []c{
		un("relu", ferry.ReLU), un("gelu", ferry.GELU), un("gelu_tanh", ferry.GELUTanh), un("tanh", ferry.Tanh), un("sigmoid", ferry.Sigmoid),
		un("exp", ferry.Exp), un("log", ferry.Log), un("sqrt", ferry.Sqrt), un("square", ferry.Square), un("neg", ferry.Neg),
		un("scale", func(x *ferry.Tensor) *ferry.Tensor { return ferry.Scale(x, 2) }),
		un("add_scalar", func(x *ferry.Tensor) *ferry.Tensor { return ferry.AddScalar(x, 2) }),
		un("softmax", ferry.Softmax), un("log_softmax", ferry.LogSoftmax),
		un("T", func(x *ferry.Tensor) *ferry.Tensor { return x.T() }),
		un("reshape", func(x *ferry.Tensor) *ferry.Tensor { return x.Reshape(3, 0) }),
		un("reshapeT", func(x *ferry.Tensor) *ferry.Tensor { return x.T().Reshape(0, 3) }),
		un("clone", func(x *ferry.Tensor) *ferry.Tensor { return x.Clone() }),
		un("contig", func(x *ferry.Tensor) *ferry.Tensor { return x.T().Contiguous() }),
		un("to", func(x *ferry.Tensor) *ferry.Tensor { return x.To(dev.Host()).To(dev) }),
		un("sum1", func(x *ferry.Tensor) *ferry.Tensor { return ferry.Sum(x, 1) }),
		un("sum0", func(x *ferry.Tensor) *ferry.Tensor { return ferry.Sum(x, 0) }),
		un("mean0", func(x *ferry.Tensor) *ferry.Tensor { return ferry.Mean(x, 0) }),
		un("sumall", func(x *ferry.Tensor) *ferry.Tensor { return ferry.Sum(x) }),
		{"add_b", [][]int{{0, 3}, {3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Add(x[0], x[1]) }},
		{"sub_b", [][]int{{0, 3}, {1, 3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Sub(x[0], x[1]) }},
		{"mul_b", [][]int{{0, 3}, {3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Mul(x[0], x[1]) }},
		{"div_b", [][]int{{0, 3}, {3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Div(x[0], x[1]) }},
		{"div_b0", [][]int{{0, 3}, {0, 1}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Div(x[0], x[1]) }},
		{"mm_m0", [][]int{{0, 3}, {3, 2}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"mm_n0", [][]int{{2, 3}, {3, 0}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"mm_b0", [][]int{{0, 2, 3}, {3, 2}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"mm_k0", [][]int{{2, 0}, {0, 3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"mm_k0_b", [][]int{{2, 2, 0}, {0, 3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"mm_n0_b", [][]int{{2, 2, 3}, {3, 0}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MatMul(x[0], x[1]) }},
		{"lin_rows0", [][]int{{0, 3}, {2, 3}, {2}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], x[2]) }},
		{"lin_in0", [][]int{{4, 0}, {2, 0}, {2}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], x[2]) }},
		{"lin_out0", [][]int{{4, 3}, {0, 3}, {0}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.Linear(x[0], x[1], x[2]) }},
		{"mse", [][]int{{0, 3}, {0, 3}}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(x[0], x[1]) }},
	}
	for _, cc := range cs {
		t.Run(cc.name, func(t *testing.T) {
			var leaves []*ferry.Tensor
			for _, s := range cc.shapes {
				leaves = append(leaves, ferry.Ones(dev, s...).RequireGrad())
			}
			defer releaseAll(leaves...)
			err := ferry.Step(func(tape *ferry.Tape) error {
				var xs []*ferry.Tensor
				for _, l := range leaves {
					xs = append(xs, tape.Input(l))
				}
				y := cc.f(xs)
				_ = y.Float32s()
				return ferry.Sum(y).Backward()
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range leaves {
				g := l.Grad()
				if g == nil || !slices.Equal(g.Shape(), l.Shape()) {
					t.Errorf("input %d %v: gradient %v", i, l.Shape(), g)
					continue
				}
				want := float32(0)
				if cc.name == "lin_in0" && i == 2 {
					want = 4
				}
				for _, v := range g.Float32s() {
					if v != want {
						t.Errorf("input %d: gradient %v", i, g.Float32s())
						break
					}
				}
			}
		})
	}
	if n := dev.Allocator().Allocated(); n != 0 {
		t.Errorf("%d bytes allocated after the steps", n)
	}
}

// In-place ops on a strided view (x.T()) are refused: the kernels write
// contiguous outputs only, and used to scatter the result over the wrong
// elements of the storage. On a contiguous view (a reshape) they work.
func TestInPlaceOnViews(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	data := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	x := ferry.FromFloat32s(dev, data, 3, 4)
	defer x.Release()
	xt := x.T()
	defer xt.Release()
	src := ferry.Ones(dev, 4, 3)
	defer src.Release()
	for name, f := range map[string]func(){
		"add_":  func() { xt.AddInPlace(src) },
		"sub_":  func() { xt.SubInPlace(src) },
		"mul_":  func() { xt.MulInPlace(src) },
		"mul_ ": func() { xt.ScaleInPlace(2) },
		"fill_": func() { xt.FillInPlace(2) },
		"copy_": func() { xt.CopyFrom(src) },
	} {
		err := ferry.Catch(func() error { f(); return nil })
		wantErrMentioning(t, err, strings.TrimSpace(name), "not contiguous")
	}
	if got := x.Float32s(); !slices.Equal(got, data) {
		t.Errorf("refused in-place ops changed the tensor: %v", got)
	}
	r := x.Reshape(4, 3) // contiguous: a view that may change
	defer r.Release()
	r.AddInPlace(src)
	r.ScaleInPlace(2)
	for i, v := range x.Float32s() {
		if v != 2*(data[i]+1) {
			t.Fatalf("after in-place ops on a reshaped view: %v", x.Float32s())
		}
	}
}

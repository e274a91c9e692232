package ferry_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
)

// SiLU's tests. The other activations' finite differences are cases of
// gradcheck_test.go's table, their values against PyTorch in
// golden_test.go.

func TestGradcheckSiLU(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	c := fdCase{"silu", []fdInput{fdIn(3, 5)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.SiLU(x[0]) }}
	t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, 100) })
}

// The forward values against x/(1 + e⁻ˣ), computed here in float64.
func TestSiLUValues(t *testing.T) {
	dev := newCPU(t, device.Options{})
	x, w := valueInputs(dev)
	defer releaseAll(x, w)
	xs := x.Float32s()
	want := make([]float64, len(xs))
	for i, v := range xs {
		want[i] = float64(v) / (1 + math.Exp(-float64(v)))
	}
	y := ferry.SiLU(x)
	defer y.Release()
	nearFloat64(t, "silu", y.Float32s(), want)
}

// SiLU saves its input, as PyTorch does.
func TestSiLUSaves(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	got := savedShapes(t, dev, func(_ *ferry.Tape, x *ferry.Tensor) *ferry.Tensor { return ferry.SiLU(x) })
	if want := [][]int{{2, 4, 16, 8}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("silu saves %v, want %v", got, want)
	}
}

// valueInputs draws x [2, 3, 8] and w [8] from a fixed seed, for the tests
// of ops' values against their definitions.
func valueInputs(dev device.Device) (x, w *ferry.Tensor) {
	rng := rand.New(rand.NewPCG(3, 4))
	x = ferry.Randn(dev, rng, 2, 3, 8)
	w = ferry.Randn(dev, rng, 8)
	return x, w
}

// nearFloat64 fails t unless got is want to within 1e-6, relative where
// |want| > 1.
func nearFloat64(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-6*math.Max(1, math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// savedShapes runs f on x [2, 4, 16, 8] (requiring grad) on dev, then
// backward, and returns the shapes of the tensors f saved for backward,
// parameters left out, as the saved-tensor hooks saw them.
func savedShapes(t *testing.T, dev device.Device, f func(tape *ferry.Tape, x *ferry.Tensor) *ferry.Tensor) [][]int {
	t.Helper()
	var shapes [][]int
	hooks := &ferry.SavedTensorHooks{
		Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
			if !info.Parameter {
				shapes = append(shapes, x.Shape())
			}
			return x
		},
		Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
	}
	x := ferry.Zeros(dev, 2, 4, 16, 8).RequireGrad()
	defer x.Release()
	err := ferry.Step(func(tape *ferry.Tape) error {
		var y *ferry.Tensor
		tape.WithHooks(hooks, func() { y = f(tape, tape.Input(x)) })
		s := ferry.Sum(y)
		return s.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	if x.Grad() == nil || !slices.Equal(x.Grad().Shape(), []int{2, 4, 16, 8}) {
		t.Fatalf("no gradient of x's shape: %v", x.Grad())
	}
	return shapes
}

func TestGradcheckSwiGLU(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	c := fdCase{"swiglu", []fdInput{fdIn(3, 5), fdIn(3, 5)}, func(x []*ferry.Tensor) *ferry.Tensor { return ferry.SwiGLU(x[0], x[1]) }}
	t.Run(c.name, func(t *testing.T) { gradcheck(t, dev, c, 101) })
}

// SwiGLU is SiLU then Mul to the bit: its output and both inputs'
// gradients, in float32 and in bfloat16 with the CPU's bfloat16 kernels
// and widened into float32 (SetWidenAlways), and with g and u of two
// types. Only what it saves differs: g and u, not SiLU(g) too.
func TestSwiGLUIsSiLUThenMul(t *testing.T) {
	dev := newCPU(t, device.Options{PoisonFreed: true})
	for _, c := range []struct {
		name   string
		gt, ut device.DType
		widen  bool
	}{
		{"float32", device.Float32, device.Float32, false},
		{"bfloat16", device.BFloat16, device.BFloat16, false},
		{"bfloat16 widened", device.BFloat16, device.BFloat16, true},
		{"bfloat16 gate, float32 up", device.BFloat16, device.Float32, false},
		{"float32 gate, bfloat16 up widened", device.Float32, device.BFloat16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer ferry.SetWidenAlways(c.widen)()
			type run struct {
				y, dg, du []float32
				saved     []string
			}
			do := func(f func(g, u *ferry.Tensor) *ferry.Tensor) run {
				rng := rand.New(rand.NewPCG(7, 8))
				g0 := ferry.Randn(dev, rng, 4, 6, 10).RequireGrad()
				u0 := ferry.Randn(dev, rng, 4, 6, 10).RequireGrad()
				w := ferry.Randn(dev, rng, 4, 6, 10)
				defer releaseAll(g0, u0, w)
				var r run
				hooks := &ferry.SavedTensorHooks{
					Pack: func(x *ferry.Tensor, info ferry.SaveInfo) any {
						r.saved = append(r.saved, info.Op)
						return x
					},
					Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
				}
				err := ferry.Step(func(tape *ferry.Tape) error {
					g, u := ferry.Cast(tape.Input(g0), c.gt), ferry.Cast(tape.Input(u0), c.ut)
					var y *ferry.Tensor
					tape.WithHooks(hooks, func() { y = f(g, u) })
					y32 := ferry.Cast(y, device.Float32)
					r.y = y32.Float32s()
					return ferry.Sum(ferry.Mul(y32, w)).Backward()
				})
				if err != nil {
					t.Fatal(err)
				}
				r.dg, r.du = g0.Grad().Float32s(), u0.Grad().Float32s()
				return r
			}
			fused := do(ferry.SwiGLU)
			ops := do(func(g, u *ferry.Tensor) *ferry.Tensor {
				s := ferry.SiLU(g)
				defer s.Release()
				return ferry.Mul(s, u)
			})
			for _, v := range []struct {
				what      string
				got, want []float32
			}{{"output", fused.y, ops.y}, {"gate's gradient", fused.dg, ops.dg}, {"up's gradient", fused.du, ops.du}} {
				if i := firstBitDiff(v.got, v.want); i >= 0 {
					t.Errorf("%s differs from SiLU then Mul at %d: %g, want %g", v.what, i, v.got[i], v.want[i])
				}
			}
			if c.gt == c.ut && !slices.Equal(fused.saved, []string{"swiglu", "swiglu"}) {
				t.Errorf("SwiGLU saved %v, want its two inputs", fused.saved)
			}
			if len(ops.saved) < 3 {
				t.Errorf("SiLU then Mul saved %v: the comparison is void", ops.saved)
			}
		})
	}
}

// firstBitDiff is the first index where a and b differ in bits (or -1;
// a length mismatch is index 0).
func firstBitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

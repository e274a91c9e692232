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

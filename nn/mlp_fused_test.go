package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
)

// TestMLPFusedRecordsAsUnfused: nn.MLP runs c_fc and the GELU fused
// (ferry.LinearGELUTanh) and records what c_fc's Linear in "mlp.c_fc" and
// the GELU in "mlp" recorded: the same saves, and values and gradients
// equal to rounding.
func TestMLPFusedRecordsAsUnfused(t *testing.T) {
	dev, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, C = 6, 8
	rng := rand.New(rand.NewPCG(2, 3))
	fc, err := nn.NewLinear(dev, C, 4*C, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := nn.NewLinear(dev, 4*C, C, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	m := &nn.MLP{CFc: fc, CProj: proj, Drop: &nn.Dropout{}}
	defer nn.Release(m)
	x := ferry.Randn(dev, rng, rows, C)
	defer x.Release()
	run := func(fused bool) (out []float32, grads [][]float32, saves []ferry.SaveInfo) {
		hooks := &ferry.SavedTensorHooks{
			Pack:   func(t *ferry.Tensor, info ferry.SaveInfo) any { saves = append(saves, info); return t },
			Unpack: func(p any) (*ferry.Tensor, error) { return p.(*ferry.Tensor), nil },
		}
		err := ferry.Step(func(tape *ferry.Tape) error {
			in := tape.Input(x)
			tape.PushHooks(hooks)
			tape.PushModule("mlp")
			var o *ferry.Tensor
			if fused {
				o = m.Forward(in)
			} else {
				tape.PushModule("c_fc")
				h := ferry.Linear(in, fc.Weight, fc.Bias)
				tape.PopModule()
				a := ferry.GELUTanh(h)
				h.Release()
				tape.PushModule("c_proj")
				o = ferry.Linear(a, proj.Weight, proj.Bias)
				tape.PopModule()
				a.Release()
			}
			tape.PopModule()
			tape.PopHooks()
			out = o.Float32s()
			return ferry.Sum(o).Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Parameters() {
			grads = append(grads, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		return out, grads, saves
	}
	y0, g0, s0 := run(false)
	y1, g1, s1 := run(true)
	if !slices.Equal(s0, s1) {
		t.Errorf("saves:\n fused   %+v\n unfused %+v", s1, s0)
	}
	if len(s1) == 0 || s1[2].Module != "mlp" {
		t.Errorf("the GELU's save is not in scope mlp: %+v", s1)
	}
	near := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5*(1+math.Abs(float64(want[i])))) {
				t.Errorf("%s[%d] = %v, unfused %v", what, i, got[i], want[i])
				return
			}
		}
	}
	near("output", y1, y0)
	for i := range g0 {
		near("gradient", g1[i], g0[i])
	}
}

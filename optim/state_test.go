package optim_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/optim"
)

// Saving an optimizer's state after k steps and restoring it into a fresh
// optimizer (and fresh parameters holding the same values) continues
// training bit for bit as if nothing had happened.
func TestStateRoundTripResumesExactly(t *testing.T) {
	for _, name := range []string{"sgd", "adamw"} {
		t.Run(name, func(t *testing.T) {
			dev, err := cpu.New(device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			newOpt := func(params []*ferry.Tensor) optim.Stateful {
				if name == "sgd" {
					s := optim.NewSGD(params, 0.1)
					s.Momentum = 0.9
					return s
				}
				return optim.NewAdamW(params, 1e-2)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			x := ferry.Randn(dev, rng, 16, 32)
			y := ferry.Randn(dev, rng, 16, 32)
			step := func(m interface {
				Forward(*ferry.Tensor) *ferry.Tensor
			}, opt optim.Optimizer) {
				err := ferry.Step(func(tape *ferry.Tape) error {
					if err := ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y)).Backward(); err != nil {
						return err
					}
					if err := opt.Step(); err != nil {
						return err
					}
					opt.ZeroGrad()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			// Straight: 5 steps.
			a := mlp(t, dev)
			optA := newOpt(a.Parameters())
			for range 5 {
				step(a, optA)
			}
			// 3 steps, save, restore into new objects, 2 more.
			b := mlp(t, dev)
			optB := newOpt(b.Parameters())
			for range 3 {
				step(b, optB)
			}
			st := optB.State()
			saved := optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: st.Scalars}
			for k, v := range st.Tensors {
				saved.Tensors[k] = v.Clone()
			}
			c := mlp(t, dev)
			for i, p := range c.Parameters() {
				p.CopyFrom(b.Parameters()[i])
			}
			optB.Release()
			optC := newOpt(c.Parameters())
			if err := optC.SetState(saved); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				step(c, optC)
			}
			for i, p := range a.Parameters() {
				pa, pc := p.Float32s(), c.Parameters()[i].Float32s()
				for j := range pa {
					if math.Float32bits(pa[j]) != math.Float32bits(pc[j]) {
						t.Fatalf("%s[%d]: straight %v, resumed %v", p.Name(), j, pa[j], pc[j])
					}
				}
			}
		})
	}
}

// SetState checks everything first, reports every problem, and changes
// nothing when anything is wrong.
func TestSetStateRejectsMismatches(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	m := mlp(t, dev)
	opt := optim.NewAdamW(m.Parameters(), 1e-2)
	p0 := m.Parameters()[0]
	bad := optim.State{
		Tensors: map[string]*ferry.Tensor{
			p0.Name() + ".exp_avg":    ferry.Zeros(dev, 3, 3),
			p0.Name() + ".exp_avg_sq": ferry.Zeros(dev, p0.Shape()...),
			"nonesuch.exp_avg":        ferry.Zeros(dev, 1),
		},
		Scalars: map[string]float64{p0.Name() + ".step": -1},
	}
	err := opt.SetState(bad)
	if err == nil {
		t.Fatal("SetState accepted a mismatched state")
	}
	for _, want := range []string{"shape [3 3]", "nonesuch.exp_avg", "not a step count"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if len(opt.State().Tensors) != 0 {
		t.Error("a rejected state changed the optimizer")
	}
}

// ClipGradNorm returns the global norm and scales the gradients to maxNorm
// as PyTorch's clip_grad_norm_ does.
func TestClipGradNorm(t *testing.T) {
	dev, _ := cpu.New(device.Options{})
	a := ferry.FromFloat32s(dev, []float32{3, 0}, 2).RequireGrad()
	b := ferry.FromFloat32s(dev, []float32{4}, 1).RequireGrad()
	a.SetGrad(ferry.FromFloat32s(dev, []float32{3, 0}, 2))
	b.SetGrad(ferry.FromFloat32s(dev, []float32{4}, 1))
	norm, err := optim.ClipGradNorm([]*ferry.Tensor{a, b, a}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if norm != 5 {
		t.Fatalf("norm %v, want 5", norm)
	}
	if g := b.Grad().Float32s()[0]; math.Abs(float64(g)-4/(5+1e-6)) > 1e-6 {
		t.Fatalf("clipped gradient %v, want %v", g, 4/(5+1e-6))
	}
	// Below the limit nothing changes.
	if _, err := optim.ClipGradNorm([]*ferry.Tensor{a, b}, 10); err != nil {
		t.Fatal(err)
	}
	if g := b.Grad().Float32s()[0]; math.Abs(float64(g)-4/(5+1e-6)) > 1e-6 {
		t.Fatalf("gradient changed under the limit: %v", g)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if _, err := optim.ClipGradNorm([]*ferry.Tensor{a}, bad); err == nil {
			t.Errorf("max norm %v accepted", bad)
		}
	}
	b.Grad().FillInPlace(float32(math.Inf(1)))
	before := a.Grad().Float32s()
	if _, err := optim.ClipGradNorm([]*ferry.Tensor{a, b}, 1); err == nil {
		t.Error("an infinite norm was not reported")
	}
	if after := a.Grad().Float32s(); after[0] != before[0] {
		t.Error("gradients changed although the norm was not finite")
	}
}

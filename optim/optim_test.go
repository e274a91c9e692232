package optim_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

func mlp(t *testing.T, dev device.Device) *nn.Sequential {
	rng := rand.New(rand.NewPCG(5, 5))
	var ms []nn.Module
	for i := 0; i < 4; i++ {
		l, err := nn.NewLinear(dev, 32, 32, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, l, nn.GELU{})
	}
	return nn.NewSequential(ms...)
}

// Updating each parameter inside backward gives the same parameters as
// Backward, Step, ZeroGrad, bit for bit, with less memory at the peak.
func TestInBackwardEqualsStepAfter(t *testing.T) {
	for _, name := range []string{"sgd", "adamw"} {
		t.Run(name, func(t *testing.T) {
			var params [2][][]float32
			var peaks [2]int64
			for variant := 0; variant < 2; variant++ {
				dev, err := cpu.New(device.Options{})
				if err != nil {
					t.Fatal(err)
				}
				m := mlp(t, dev)
				var opt optim.Stepper
				if name == "sgd" {
					s := optim.NewSGD(m.Parameters(), 0.1)
					s.Momentum, s.WeightDecay = 0.9, 1e-2
					opt = s
				} else {
					opt = optim.NewAdamW(m.Parameters(), 1e-2)
				}
				rng := rand.New(rand.NewPCG(9, 9))
				x := ferry.Randn(dev, rng, 16, 32)
				y := ferry.Randn(dev, rng, 16, 32)
				for step := 0; step < 3; step++ {
					dev.Allocator().ResetPeak()
					err := ferry.Step(func(tape *ferry.Tape) error {
						loss := ferry.MSELoss(m.Forward(tape.Input(x)), tape.Input(y))
						if variant == 0 {
							if err := loss.Backward(); err != nil {
								return err
							}
							if err := opt.Step(); err != nil {
								return err
							}
							opt.ZeroGrad()
							return nil
						}
						opts, upd := optim.InBackward(opt)
						if err := loss.BackwardWith(opts); err != nil {
							return err
						}
						return upd.Err()
					})
					if err != nil {
						t.Fatal(err)
					}
					peaks[variant] = dev.Allocator().Stats().AllocatedBytes.Peak
				}
				for _, p := range m.Parameters() {
					if p.Grad() != nil {
						t.Fatalf("%s still has a gradient", p.Name())
					}
					params[variant] = append(params[variant], p.Float32s())
				}
				x.Release()
				y.Release()
				opt.Release()
				nn.Release(m)
				if got := dev.Allocator().Allocated(); got != 0 {
					t.Errorf("%d bytes left after releasing everything", got)
				}
				dev.Close()
			}
			for i := range params[0] {
				for j := range params[0][i] {
					if math.Float32bits(params[0][i][j]) != math.Float32bits(params[1][i][j]) {
						t.Fatalf("param %d[%d]: %v after, %v in backward", i, j, params[0][i][j], params[1][i][j])
					}
				}
			}
			if peaks[1] >= peaks[0] {
				t.Errorf("peak in backward %d, not below %d", peaks[1], peaks[0])
			}
		})
	}
}

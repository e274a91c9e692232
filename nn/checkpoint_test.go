package nn_test

import (
	"math/rand/v2"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
)

func TestCheckpointModuleIsBitwise(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(2, 3))
	l1, _ := nn.NewLinear(dev, 8, 16, true, rng)
	l2, _ := nn.NewLinear(dev, 16, 8, true, rng)
	inner := nn.NewSequential(l1, nn.GELU{Tanh: true}, l2)
	x := ferry.Randn(dev, rng, 4, 8)
	defer x.Release()
	var grads [2][]float32
	for i, m := range []nn.Module{inner, nn.Checkpoint{Module: inner}} {
		err := ferry.Step(func(tape *ferry.Tape) error {
			return ferry.Sum(ferry.Square(m.Forward(tape.Input(x)))).Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		grads[i] = l1.Weight.Grad().Float32s()
		for _, p := range inner.Parameters() {
			p.SetGrad(nil)
		}
	}
	for j := range grads[0] {
		if grads[0][j] != grads[1][j] {
			t.Fatalf("gradient %d: %v plain, %v checkpointed", j, grads[0][j], grads[1][j])
		}
	}
}

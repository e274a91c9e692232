package nn_test

import (
	"fmt"
	"log"
	"math/rand/v2"
	"slices"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu" // registers "cpu" with device.Open
	"ferry/nn"
	"ferry/optim"
)

// A tiny MLP learns y = x₀ - x₁ from a fixed batch with AdamW. Each step
// is one ferry.Step: forward on the step's tape, the loss, backward, the
// update, and the gradients cleared (they add up until cleared, as in
// PyTorch).
func Example() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2)) // a fixed seed: the same model every run

	l1, err := nn.NewLinear(dev, 2, 16, true, rng)
	if err != nil {
		log.Fatal(err)
	}
	l2, err := nn.NewLinear(dev, 16, 1, true, rng)
	if err != nil {
		log.Fatal(err)
	}
	model := nn.NewSequential(l1, nn.ReLU{}, l2)
	defer nn.Release(model)
	opt := optim.NewAdamW(model.Parameters(), 0.05)
	defer opt.Release()

	const batch = 32
	xs := make([]float32, 0, 2*batch)
	ys := make([]float32, 0, batch)
	for range batch {
		a, b := rng.Float32()*2-1, rng.Float32()*2-1
		xs = append(xs, a, b)
		ys = append(ys, a-b)
	}
	x := ferry.FromFloat32s(dev, xs, batch, 2)
	defer x.Release()
	y := ferry.FromFloat32s(dev, ys, batch, 1)
	defer y.Release()

	fmt.Println("parameters:", nn.ParameterBytes(model), "bytes")
	for step := range 60 {
		err := ferry.Step(func(tape *ferry.Tape) error {
			loss := nn.MSELoss(model.Forward(tape.Input(x)), tape.Input(y))
			if err := loss.Backward(); err != nil {
				return err
			}
			if step%20 == 0 || step == 59 {
				fmt.Printf("step %2d: loss %.3f\n", step, loss.Item())
			}
			if err := opt.Step(); err != nil {
				return err
			}
			opt.ZeroGrad()
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// parameters: 260 bytes
	// step  0: loss 0.658
	// step 20: loss 0.024
	// step 40: loss 0.003
	// step 59: loss 0.000
}

// Checkpointing a segment keeps only its input through forward and runs it
// again in backward: less memory held between forward and backward, the
// same gradients bit for bit. Here the plain block's forward holds the
// outputs of its eight ops (8 KiB each: 32 × 64 float32) for backward; the
// checkpointed one holds only its own output.
func ExampleCheckpoint() {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	var layers []nn.Module
	for range 4 {
		l, err := nn.NewLinear(dev, 64, 64, true, rng)
		if err != nil {
			log.Fatal(err)
		}
		layers = append(layers, l, nn.GELU{Tanh: true})
	}
	block := nn.NewSequential(layers...)
	defer nn.Release(block)
	x := ferry.Randn(dev, rng, 32, 64)
	defer x.Release()

	alloc := dev.Allocator()
	var grads [][]float32
	for i, m := range []nn.Module{block, nn.Checkpoint{Module: block}} {
		err := ferry.Step(func(tape *ferry.Tape) error {
			before := alloc.Allocated()
			out := m.Forward(tape.Input(x))
			fmt.Printf("%s: forward keeps %s\n", []string{"plain", "checkpointed"}[i], device.FormatBytes(alloc.Allocated()-before))
			return ferry.Sum(ferry.Square(out)).Backward()
		})
		if err != nil {
			log.Fatal(err)
		}
		w := block.Parameters()[0]
		grads = append(grads, w.Grad().Float32s())
		for _, p := range block.Parameters() {
			p.SetGrad(nil)
		}
	}
	fmt.Println("same gradients:", slices.Equal(grads[0], grads[1]))
	// Output:
	// plain: forward keeps 64.00 KiB
	// checkpointed: forward keeps 8.00 KiB
	// same gradients: true
}

// Command readme is README.md's "Using it" snippets as a program that
// compiles and runs: main_test.go checks that every line of the README's
// Go blocks is here, so the README cannot drift from code that builds.
//
// It trains a small MLP on the CPU with its saved tensors offloaded, then
// runs one step of GPT-2 124M on the meta device (shapes and memory only,
// no data), where the README's snippet would need a GPU-sized machine.
package main

import (
	"fmt"
	"log"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu" // registers "cpu", as database/sql drivers do
	_ "ferry/device/meta"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
)

func main() {
	if err := run(20); err != nil {
		log.Fatal(err)
	}
}

// run trains the MLP for steps steps, then steps GPT-2 124M once on meta.
func run(steps int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	// README.md, "Using it", first block, from here:
	dev, err := device.Open("cpu", device.Options{}) // or "cuda", or "meta"
	if err != nil {
		return err
	}
	// (the README leaves out how layers, batch and target are made)
	defer dev.Close()
	l1, err := nn.NewLinear(dev, 64, 256, true, rng)
	if err != nil {
		return err
	}
	l2, err := nn.NewLinear(dev, 256, 8, true, rng)
	if err != nil {
		return err
	}
	layers := []nn.Module{l1, nn.ReLU{}, l2}
	batch := ferry.Randn(dev, rng, 32, 64)
	defer batch.Release()
	target := ferry.Randn(dev, rng, 32, 8)
	defer target.Release()

	model := nn.NewSequential(layers...)          // nn.Linear, nn.ReLU, nn.GELU, ...
	opt := optim.NewSGD(model.Parameters(), 1e-3) // or optim.NewAdamW
	off, _ := offload.New(dev, offload.DefaultConfig())

	for step := 0; step < steps; step++ {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Input(batch)
			var y *ferry.Tensor
			tape.WithHooks(off.Hooks(), func() { y = model.Forward(x) }) // saved tensors leave the device
			if err := nn.MSELoss(y, tape.Input(target)).Backward(); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			opt.ZeroGrad() // gradients accumulate until cleared, as in PyTorch
			return nil
		}) // everything the step allocated is freed here, deterministically
		if err != nil {
			return err
		}
	}
	// to here.
	off.Close()
	nn.Release(model)
	fmt.Printf("MLP: %d steps on %s with saved tensors offloaded\n", steps, dev.Name())

	return gpt(rng)
}

// gpt is the README's second block: one step of GPT-2 124M at batch 1, on
// the meta device, which keeps shapes and memory but no data.
func gpt(rng *rand.Rand) error {
	dev, err := device.Open("meta", device.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()
	tokens := ferry.ZerosOf(dev, device.Int32, device.Activation, 1, 1024)
	defer tokens.Release()
	targets := ferry.ZerosOf(dev, device.Int32, device.Activation, 1, 1024)
	defer targets.Release()

	// README.md, "Using it", second block, from here:
	cfg := nn.GPTConfig{Vocab: 50257, Seq: 1024, Layers: 12, Heads: 12, Embd: 768, Bias: true} // GPT-2 124M
	model, _ := nn.NewGPT(dev, cfg, rng)                                                       // nanoGPT's structure, PyTorch's names, tied head
	err = ferry.Step(func(tape *ferry.Tape) error {
		logits := model.Forward(tape.Input(tokens))                       // tokens: int32 [B, T]
		return ferry.CrossEntropy(logits, tape.Input(targets)).Backward() // ignore_index -100
	})
	// to here.
	if err != nil {
		return err
	}
	st := dev.Allocator().Stats()
	nn.Release(model)
	fmt.Printf("GPT-2 124M: one step on meta, peak %d bytes\n", st.AllocatedBytes.Peak)
	return nil
}

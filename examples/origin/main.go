// Command origin is the model from the question ferry started from, written
// with ferry: L × (Linear(W, W) + ReLU) at batch B, trained with MSE loss
// and SGD, printing the three lines the original PyTorch user printed.
//
//	go run ./examples/origin                      # 40 × 1024, batch 256, on the CPU
//	go run ./examples/origin -device meta -width 4096 -batch 1024
//	go run ./examples/origin -offload             # the same with the offloader
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	_ "ferry/device/cuda"
	_ "ferry/device/meta"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
)

func main() {
	devName := flag.String("device", "cpu", "cpu, cuda or meta")
	layers := flag.Int("layers", 40, "layers")
	width := flag.Int("width", 1024, "layer width")
	batch := flag.Int("batch", 256, "batch size")
	steps := flag.Int("steps", 2, "training steps")
	useOffload := flag.Bool("offload", false, "offload saved activations to host memory")
	flag.Parse()

	dev, err := device.Open(*devName, device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	var model nn.ModuleList
	for i := 0; i < *layers; i++ {
		l, err := nn.NewLinear(dev, *width, *width, true, rng)
		if err != nil {
			log.Fatal(err)
		}
		model = append(model, l)
	}
	opt := optim.NewSGD(model.Parameters(), 1e-3)
	input := ferry.Randn(dev, rng, *batch, *width)
	// The target waits in host memory until the loss needs it, so that
	// forward is measured holding only the parameters and the input.
	target := ferry.Randn(dev.Host(), rng, *batch, *width)

	var hooks *ferry.SavedTensorHooks
	if *useOffload {
		off, err := offload.New(dev, offload.DefaultConfig())
		if err != nil {
			log.Fatal(err)
		}
		defer off.Close()
		hooks = off.Hooks()
	}
	mb := func(b int64) string { return fmt.Sprintf("%.2f MB", float64(b)/(1<<20)) }
	alloc := dev.Allocator()

	for step := 0; step < *steps; step++ {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Input(input)
			fmt.Println("Memory allocated before forward pass:", mb(alloc.Allocated()))
			alloc.ResetPeak()
			if hooks != nil {
				tape.PushHooks(hooks) // every tensor saved for backward goes through the offloader
			}
			h := x
			for _, l := range model {
				z := l.Forward(h)
				y := ferry.ReLU(z)
				z.Release() // nothing refers to the pre-activation any more
				if h != x {
					h.Release() // the loop moves on; autograd keeps what it saved
				}
				h = y
			}
			if hooks != nil {
				tape.PopHooks()
			}
			fmt.Println("Memory allocated after forward pass:", mb(alloc.Allocated()))
			fmt.Println("Max memory allocated during forward pass:", mb(alloc.Stats().AllocatedBytes.Peak))
			loss := nn.MSELoss(h, tape.Adopt(target.To(dev)))
			if err := loss.Backward(); err != nil {
				return err
			}
			if device.HasData(dev) {
				fmt.Printf("step %d: loss %.6f\n", step, loss.Item())
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
}

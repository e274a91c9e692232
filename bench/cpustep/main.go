// Command cpustep times training steps of the origin model on the CPU
// device, the way bench/cpu_step.py times PyTorch's: L × (Linear(W, W) +
// ReLU) built as nn.Sequential, batch B, MSE loss, SGD (lr 1e-3), gradients
// dropped after each step (zero_grad(set_to_none=True)). It prints one line
// per timed step ("step <seconds>") and a last line with the median, so
// that bench/cpu_step.sh can run it beside PyTorch and print the ratio.
//
//	go run ./bench/cpustep [-layers 40 -width 1024 -batch 256 -steps 5 -backend auto]
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

func main() {
	layers := flag.Int("layers", 40, "Linear+ReLU layers")
	width := flag.Int("width", 1024, "layer width")
	batch := flag.Int("batch", 256, "batch size")
	steps := flag.Int("steps", 5, "timed steps, after -warmup untimed ones")
	warmup := flag.Int("warmup", 1, "untimed steps first")
	backend := flag.String("backend", "auto", "matrix products: auto, blas (OpenBLAS), go (pure Go)")
	flag.Parse()
	if err := run(*layers, *width, *batch, *steps, *warmup, *backend); err != nil {
		fmt.Fprintln(os.Stderr, "cpustep:", err)
		os.Exit(1)
	}
}

func run(layers, width, batch, steps, warmup int, backend string) error {
	if err := cpu.SetMatmulBackend(backend); err != nil {
		return err
	}
	dev, err := cpu.New(device.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 0))
	var mods []nn.Module
	for range layers {
		l, err := nn.NewLinear(dev, width, width, true, rng)
		if err != nil {
			return err
		}
		mods = append(mods, l, nn.ReLU{})
	}
	model := nn.NewSequential(mods...)
	defer nn.Release(model)
	x := ferry.Randn(dev, rng, batch, width)
	target := ferry.Randn(dev, rng, batch, width)
	defer x.Release()
	defer target.Release()
	opt := optim.NewSGD(model.Parameters(), 1e-3)
	defer opt.Release()
	step := func() error {
		return ferry.Step(func(tape *ferry.Tape) error {
			loss := ferry.MSELoss(model.Forward(tape.Input(x)), target)
			if err := loss.Backward(); err != nil {
				return err
			}
			if err := opt.Step(); err != nil {
				return err
			}
			opt.ZeroGrad()
			return nil
		})
	}
	fmt.Printf("ferry: %d x Linear(%d)+ReLU, batch %d, %s\n", layers, width, batch, cpu.Paths())
	for range warmup {
		if err := step(); err != nil {
			return err
		}
	}
	var ts []float64
	go0, blas0 := cpu.MatmulCalls()
	for range steps {
		start := time.Now()
		if err := step(); err != nil {
			return err
		}
		ts = append(ts, time.Since(start).Seconds())
		fmt.Printf("step %.4f\n", ts[len(ts)-1])
	}
	goN, blasN := cpu.MatmulCalls()
	fmt.Printf("products per step: %d pure Go, %d OpenBLAS\n", (goN-go0)/int64(steps), (blasN-blas0)/int64(steps))
	slices.Sort(ts)
	fmt.Printf("median %.4f\n", ts[len(ts)/2])
	return nil
}

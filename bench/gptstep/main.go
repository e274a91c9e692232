// Command gptstep times training steps of a GPT on the CPU device, the way
// bench/gpt_step.py times PyTorch's nanoGPT: forward, cross-entropy on
// random targets, backward, AdamW (lr 1e-3, betas 0.9/0.95, weight decay
// 0.1 on 2-D parameters, nanoGPT's configure_optimizers), gradients dropped
// after each step. It prints one line per timed step ("step <seconds> cpu
// <CPU seconds of all threads>") and last lines with the medians
// ("median", "median_cpu"), so that bench/gpt_step.sh can run it beside
// PyTorch and print the ratio.
//
//	go run ./bench/gptstep [-layers 6 -heads 6 -embd 384 -seq 256 -vocab 65 -batch 8 -steps 5 -backend auto]
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/optim"
)

func main() {
	cfg := nn.GPTConfig{Bias: true}
	flag.IntVar(&cfg.Layers, "layers", 6, "blocks")
	flag.IntVar(&cfg.Heads, "heads", 6, "attention heads")
	flag.IntVar(&cfg.Embd, "embd", 384, "embedding width")
	flag.IntVar(&cfg.Seq, "seq", 256, "sequence length")
	flag.IntVar(&cfg.Vocab, "vocab", 65, "vocabulary")
	batch := flag.Int("batch", 8, "batch size")
	steps := flag.Int("steps", 5, "timed steps, after -warmup untimed ones")
	warmup := flag.Int("warmup", 2, "untimed steps first")
	backend := flag.String("backend", "auto", "matrix products: auto, blas (OpenBLAS), go (pure Go)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the timed steps to this file")
	precision := flag.String("precision", "fp32", "fp32, or bf16 (forward under ferry.Tape.Autocast(device.BFloat16))")
	flag.Parse()
	switch *precision {
	case "fp32":
	case "bf16":
		autocast = device.BFloat16
	default:
		fmt.Fprintf(os.Stderr, "gptstep: -precision %q: want fp32 or bf16\n", *precision)
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gptstep:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := run(cfg, *batch, *steps, *warmup, *backend); err != nil {
		fmt.Fprintln(os.Stderr, "gptstep:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// autocast is the forward's matrix-product type (-precision).
var autocast = device.Float32

func run(cfg nn.GPTConfig, batch, steps, warmup int, backend string) error {
	if batch < 1 || steps < 1 || warmup < 0 {
		return fmt.Errorf("batch and steps must be positive, warmup not negative")
	}
	if err := cpu.SetMatmulBackend(backend); err != nil {
		return err
	}
	dev, err := cpu.New(device.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 0))
	model, err := nn.NewGPT(dev, cfg, rng)
	if err != nil {
		return err
	}
	defer nn.Release(model)
	tok, tgt := make([]int32, batch*cfg.Seq), make([]int32, batch*cfg.Seq)
	for i := range tok {
		tok[i], tgt[i] = int32(rng.IntN(cfg.Vocab)), int32(rng.IntN(cfg.Vocab))
	}
	x := ferry.FromInt32s(dev, tok, batch, cfg.Seq)
	y := ferry.FromInt32s(dev, tgt, batch, cfg.Seq)
	defer x.Release()
	defer y.Release()
	var decay, noDecay []*ferry.Tensor
	for _, p := range model.Parameters() {
		if p.Rank() >= 2 {
			decay = append(decay, p)
		} else {
			noDecay = append(noDecay, p)
		}
	}
	opts := []*optim.AdamW{optim.NewAdamW(decay, 1e-3), optim.NewAdamW(noDecay, 1e-3)}
	opts[0].WeightDecay, opts[1].WeightDecay = 0.1, 0
	for _, o := range opts {
		o.Beta2 = 0.95
		defer o.Release()
	}
	var loss float32
	step := func() error {
		return ferry.Step(func(tape *ferry.Tape) error {
			var logits *ferry.Tensor
			tape.Autocast(autocast, func() { logits = model.Forward(tape.Input(x)) })
			l := ferry.CrossEntropy(logits, tape.Input(y))
			if err := l.Backward(); err != nil {
				return err
			}
			loss = l.Item()
			for _, o := range opts {
				if err := o.Step(); err != nil {
					return err
				}
				o.ZeroGrad()
			}
			return nil
		})
	}
	fmt.Printf("ferry: GPT %d layers %d heads embd %d seq %d vocab %d (%d parameters), batch %d, %s, %s\n",
		cfg.Layers, cfg.Heads, cfg.Embd, cfg.Seq, cfg.Vocab, cfg.ParameterCount(), batch, autocast, cpu.Paths())
	for range warmup {
		if err := step(); err != nil {
			return err
		}
	}
	var ts, cs []float64
	go0, blas0 := cpu.MatmulCalls()
	for range steps {
		start, cpu0 := time.Now(), cpuSeconds()
		if err := step(); err != nil {
			return err
		}
		ts = append(ts, time.Since(start).Seconds())
		cs = append(cs, cpuSeconds()-cpu0)
		fmt.Printf("step %.4f cpu %.4f loss %.4f\n", ts[len(ts)-1], cs[len(cs)-1], loss)
	}
	goN, blasN := cpu.MatmulCalls()
	fmt.Printf("products per step: %d pure Go, %d OpenBLAS\n", (goN-go0)/int64(steps), (blasN-blas0)/int64(steps))
	slices.Sort(ts)
	slices.Sort(cs)
	fmt.Printf("median %.4f\n", ts[len(ts)/2])
	fmt.Printf("median_cpu %.4f\n", cs[len(cs)/2])
	return nil
}

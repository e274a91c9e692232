// Command gpt trains a byte-level GPT on text already on this machine: the
// Go distribution's own sources ($(go env GOROOT)/src), with no download.
// It holds out the last tenth of the text for validation, prints the
// validation loss as it falls (nats per byte, beside the unigram entropy of
// the text, which a model that ignores context cannot beat), and samples
// text at the end.
//
//	go run ./examples/gpt                       # a small model, a few minutes on 2 cores
//	go run ./examples/gpt -steps 2000 -embd 192 -layers 6
//	go run ./examples/gpt -data path/to/file/or/dir -offload
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"time"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	_ "ferry/device/cuda"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
)

func main() {
	data := flag.String("data", "", "a text file or a directory of .go files (default: the Go distribution's sources)")
	maxBytes := flag.Int("max-bytes", 4<<20, "read at most this much text")
	devName := flag.String("device", "cpu", "cpu or cuda")
	layers := flag.Int("layers", 4, "blocks")
	heads := flag.Int("heads", 4, "attention heads")
	embd := flag.Int("embd", 128, "embedding width")
	seq := flag.Int("seq", 64, "context length in bytes")
	batch := flag.Int("batch", 16, "sequences per step")
	steps := flag.Int("steps", 600, "training steps")
	lr := flag.Float64("lr", 2e-3, "peak learning rate (linear warm-up, cosine decay to a tenth)")
	dropout := flag.Float64("dropout", 0, "dropout probability")
	evalEvery := flag.Int("eval-every", 100, "steps between validation losses")
	sample := flag.Int("sample", 400, "bytes to sample at the end")
	useOffload := flag.Bool("offload", false, "offload saved activations (ferry's offloader)")
	seed := flag.Uint64("seed", 1, "seed")
	flag.Parse()
	for name, v := range map[string]int{"max-bytes": *maxBytes, "layers": *layers, "heads": *heads, "embd": *embd, "seq": *seq,
		"batch": *batch, "steps": *steps, "eval-every": *evalEvery} {
		if v < 1 {
			log.Fatalf("-%s must be positive, got %d", name, v)
		}
	}
	if !(*lr > 0) || !(*dropout >= 0 && *dropout < 1) || *sample < 0 {
		log.Fatal("-lr must be positive, -dropout in [0, 1), -sample not negative")
	}
	text, err := train.LoadText(*data, *maxBytes, 0.1)
	if err != nil {
		log.Fatal(err)
	}
	if err := text.Check(*seq); err != nil {
		log.Fatal(err)
	}
	trainText, val := text.Train, text.Val
	fmt.Printf("text: %s, %d bytes for training, %d held out\n", text.Source, len(trainText), len(val))
	fmt.Printf("unigram entropy of the training text: %.3f nats per byte (what a model blind to context reaches)\n", train.UnigramEntropy(trainText))

	dev, err := device.Open(*devName, device.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	cfg := nn.GPTConfig{Vocab: 256, Seq: *seq, Layers: *layers, Heads: *heads, Embd: *embd, Dropout: float32(*dropout), Bias: true, Seed: *seed}
	rng := rand.New(rand.NewPCG(*seed, 7))
	model, err := nn.NewGPT(dev, cfg, rng)
	if err != nil {
		log.Fatal(err)
	}
	defer nn.Release(model)
	fmt.Printf("model: GPT, %d layers, %d heads, embedding %d, context %d, %d parameters, on %s\n",
		*layers, *heads, *embd, *seq, cfg.ParameterCount(), dev.Name())
	opt := optim.NewAdamW(model.Parameters(), float32(*lr))
	opt.Beta2, opt.WeightDecay = 0.95, 0.1
	defer opt.Release()
	var hooks *ferry.SavedTensorHooks
	if *useOffload {
		off, err := offload.New(dev, offload.DefaultConfig())
		if err != nil {
			log.Fatal(err)
		}
		defer off.Close()
		hooks = off.Hooks()
	}

	batchOf := func(text []byte, r *rand.Rand, n int) (x, y *ferry.Tensor) { return train.Batch(dev, text, r, n, *seq) }
	evalRng := rand.New(rand.NewPCG(*seed, 99))
	evalX, evalY := make([]*ferry.Tensor, 8), make([]*ferry.Tensor, 8) // fixed validation batches
	for i := range evalX {
		evalX[i], evalY[i] = batchOf(val, evalRng, *batch)
		defer evalX[i].Release()
		defer evalY[i].Release()
	}
	validate := func() float64 {
		model.SetTraining(false)
		defer model.SetTraining(true)
		var sum float64
		for i := range evalX {
			err := ferry.Step(func(tape *ferry.Tape) error {
				tape.NoGrad(func() {
					sum += float64(ferry.CrossEntropy(model.Forward(tape.Input(evalX[i])), tape.Input(evalY[i])).Item())
				})
				return nil
			})
			if err != nil {
				log.Fatal(err)
			}
		}
		return sum / float64(len(evalX))
	}

	fmt.Printf("step %5d  val loss %.4f\n", 0, validate())
	start := time.Now()
	warmup := max(1, *steps/10)
	for step := 1; step <= *steps; step++ {
		f := float64(step) / float64(warmup)
		if step > warmup {
			f = 0.1 + 0.9*0.5*(1+math.Cos(math.Pi*float64(step-warmup)/float64(max(1, *steps-warmup))))
		}
		opt.LR = float32(*lr * f)
		model.SetStep(uint64(step))
		x, y := batchOf(trainText, rng, *batch)
		var loss float32
		err := ferry.Step(func(tape *ferry.Tape) error {
			var logits *ferry.Tensor
			fwd := func() { logits = model.Forward(tape.Input(x)) }
			if hooks != nil {
				tape.WithHooks(hooks, fwd)
			} else {
				fwd()
			}
			l := ferry.CrossEntropy(logits, tape.Input(y))
			if err := l.Backward(); err != nil {
				return err
			}
			loss = l.Item()
			if err := opt.Step(); err != nil {
				return err
			}
			opt.ZeroGrad()
			return nil
		})
		x.Release()
		y.Release()
		if err != nil {
			log.Fatal(err)
		}
		if step%*evalEvery == 0 || step == *steps {
			el := time.Since(start).Seconds()
			fmt.Printf("step %5d  val loss %.4f  train loss %.4f  %.0f bytes/s  %.0f s\n",
				step, validate(), loss, float64(step**batch**seq)/el, el)
		}
	}
	if *sample > 0 {
		fmt.Printf("\nsample (temperature 0.8, top-k 20), after the prompt \"func \":\n\n")
		out, err := train.Generate(model, dev, []byte("func "), *sample, 0.8, 20, rand.New(rand.NewPCG(*seed, 5)))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out)
	}
}

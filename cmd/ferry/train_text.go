package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"ferry"
	"ferry/device"
	"ferry/internal/demo"
	"ferry/nn"
	"ferry/plan"
	"ferry/train"
)

func init() {
	register(command{
		name:    "train text",
		summary: "train a byte-level GPT on text (default: the Go distribution's sources) and sample from it",
		setup:   setupTrainText,
	})
}

// textTask is a byte-level GPT on a corpus, with fixed validation batches.
type textTask struct {
	dev          device.Device
	text         *train.Text
	gpt          *nn.GPT
	batchSize    int
	seed         uint64
	valX, valY   []*ferry.Tensor
	maxBytes     int
	source       string
	recomputeSet bool
}

func newTextTask(dev device.Device, text *train.Text, cfg nn.GPTConfig, batch, valBatches int, seed uint64) (*textTask, error) {
	g, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(seed, 7)))
	if err != nil {
		return nil, err
	}
	t := &textTask{dev: dev, text: text, gpt: g, batchSize: batch, seed: seed}
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < valBatches; i++ {
		x, y := train.Batch(dev, text.Val, rng, batch, cfg.Seq)
		t.valX, t.valY = append(t.valX, x), append(t.valY, y)
	}
	return t, nil
}

func (t *textTask) describe() string {
	c := t.gpt.Config
	return fmt.Sprintf("byte-level GPT (%d layers, %d heads, embedding %d, context %d, dropout %g, %d parameters), batch %d, on %s",
		c.Layers, c.Heads, c.Embd, c.Seq, c.Dropout, c.ParameterCount(), t.batchSize, t.text.Source)
}

func (t *textTask) title() string {
	c := t.gpt.Config
	return fmt.Sprintf("byte-level GPT %dL %dH %dE, context %d, batch %d", c.Layers, c.Heads, c.Embd, c.Seq, t.batchSize)
}

// planModel is the same GPT and batch for the planner (ferry plan --model
// gpt --vocab 256 … writes policies for it).
func (t *textTask) planModel() plan.Model {
	return demo.PlanModel(demo.Config{Model: "gpt", GPT: t.gpt.Config, Batch: t.batchSize, Seed: t.seed, LR: 1e-3})
}

func (t *textTask) model() nn.Module { return t.gpt }

func (t *textTask) forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	t.gpt.CheckpointBlocks = recompute
	return t.gpt.Forward(x)
}

func (t *textTask) loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// batch draws from a generator keyed by (seed, step, micro).
func (t *textTask) batch(step, micro int) (x, y *ferry.Tensor, items int) {
	rng := rand.New(rand.NewPCG(t.seed^0x7465787462617463, uint64(step)<<16|uint64(micro)))
	x, y = train.Batch(t.dev, t.text.Train, rng, t.batchSize, t.gpt.Config.Seq)
	return x, y, t.batchSize * t.gpt.Config.Seq
}

func (t *textTask) setStep(s uint64)    { t.gpt.SetStep(s) }
func (t *textTask) setTraining(on bool) { t.gpt.SetTraining(on) }

func (t *textTask) evaluate() (map[string]float64, error) {
	var sum float64
	for i := range t.valX {
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				sum += float64(ferry.CrossEntropy(t.gpt.Forward(tape.Input(t.valX[i])), tape.Input(t.valY[i])).Item())
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return map[string]float64{"val_loss": sum / float64(len(t.valX))}, nil
}

func (t *textTask) identity() map[string]any {
	c := t.gpt.Config
	return map[string]any{"task": "text", "layers": c.Layers, "heads": c.Heads, "embd": c.Embd, "seq": c.Seq,
		"vocab": c.Vocab, "bias": c.Bias, "dropout": c.Dropout, "batch": t.batchSize, "seed": t.seed,
		"source": t.source, "max_bytes": t.maxBytes}
}

func (t *textTask) release() {
	for i := range t.valX {
		t.valX[i].Release()
		t.valY[i].Release()
	}
	nn.Release(t.gpt)
}

func setupTrainText(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	var o trainOptions
	o.register(fs, 2e-3, "adamw")
	data := fs.String("data", "", "a text file or a directory of text files (default: the Go distribution's sources)")
	maxBytes := fs.Int("max-bytes", 4<<20, "read at most this much text")
	layers := fs.Int("layers", 4, "blocks")
	heads := fs.Int("heads", 4, "attention heads")
	embd := fs.Int("embd", 128, "embedding width")
	seq := fs.Int("seq", 64, "context length in bytes")
	dropout := fs.Float64("dropout", 0, "dropout probability")
	valBatches := fs.Int("val-batches", 8, "held-out batches per validation")
	sample := fs.Int("sample", 300, "bytes to sample at the end (0: none)")
	prompt := fs.String("prompt", "func ", "text the sample continues")
	fs.IntVar(&o.batch, "batch", 16, "sequences per micro-batch")
	fs.IntVar(&o.steps, "steps", 600, "optimizer steps")
	fs.IntVar(&o.evalEvery, "eval-every", 100, "steps between validation losses")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if err := positive(set, map[string]int{"max-bytes": *maxBytes, "layers": *layers, "heads": *heads,
			"embd": *embd, "seq": *seq, "val-batches": *valBatches}); err != nil {
			return err
		}
		if err := o.validate(set); err != nil {
			return err
		}
		for name, v := range map[string]int{"layers": *layers, "heads": *heads, "embd": *embd, "seq": *seq, "val-batches": *valBatches} {
			if v > 1<<16 && name != "seq" || v > maxTrainDim {
				return fmt.Errorf("--%s %d is beyond what ferry train text runs (at most %d)", name, v, map[bool]int{true: maxTrainDim, false: 1 << 16}[name == "seq"])
			}
		}
		if !(*dropout >= 0 && *dropout < 1) {
			return fmt.Errorf("--dropout must be in [0, 1), got %v", *dropout)
		}
		if *sample < 0 || *sample > 1<<20 {
			return fmt.Errorf("--sample must be in [0, 1048576], got %d", *sample)
		}
		o.unit = "tokens"
		cfg := nn.GPTConfig{Vocab: 256, Seq: *seq, Layers: *layers, Heads: *heads, Embd: *embd,
			Dropout: float32(*dropout), Bias: true, Seed: o.seed}
		if err := cfg.Validate(); err != nil {
			return err
		}
		text, err := train.LoadText(*data, *maxBytes, 0.1)
		if err != nil {
			return err
		}
		if err := text.Check(*seq); err != nil {
			return err
		}
		dev, err := openTrainDevice(o.device)
		if err != nil {
			return err
		}
		defer dev.Close()
		// Activations, at least: the logits with their softmax and
		// gradient, and a dozen [batch, seq, embd] tensors per block.
		tokens := int64(o.batch) * int64(*seq)
		minStep := tokens*int64(cfg.Vocab)*4*3 + int64(*layers)*tokens*int64(*embd)*4*12
		if err := preflight(dev, cfg.ParameterCount(), stateCopies(o.optimizer), minStep, tokens*8*int64(max(1, *valBatches)),
			"lower --batch, --seq, --embd or --layers (or offload: --mode offload)"); err != nil {
			return err
		}
		task, err := newTextTask(dev, text, cfg, o.batch, *valBatches, o.seed)
		if err != nil {
			return err
		}
		defer task.release()
		task.source, task.maxBytes = *data, *maxBytes
		stop, unlisten := interruptions()
		defer unlisten()
		p := newProgress(out, stderrOf(out), asJSON)
		p.line("%s\ntext: %d bytes for training, %d held out; unigram entropy %.3f nats per byte (a model blind to context reaches no lower)\non %s, %d steps, mode %s",
			task.describe(), len(text.Train), len(text.Val), train.UnigramEntropy(text.Train), dev.Name(), o.steps, o.mode)
		sum, err := runTraining(task, dev, &o, p, stop)
		if err != nil {
			return err
		}
		sum.Task = "text"
		if sum.Metrics == nil {
			sum.Metrics = map[string]float64{}
		}
		sum.Metrics["unigram_entropy"] = train.UnigramEntropy(text.Train)
		if v, ok := sum.Metrics["val_loss"]; ok {
			sum.Metrics["final_val_loss"] = v
			delete(sum.Metrics, "val_loss")
		}
		if first, ok := sum.initialVal(); ok {
			sum.Metrics["initial_val_loss"] = first
		}
		if *sample > 0 && !sum.Interrupted {
			s, err := train.Generate(task.gpt, dev, []byte(*prompt), *sample, 0.8, 20, rand.New(rand.NewPCG(o.seed, 5)))
			if err != nil {
				return err
			}
			sum.Sample = s
			if !asJSON {
				fmt.Fprintf(out, "\nsample (temperature 0.8, top-k 20):\n\n%s\n", s)
			}
		}
		return finishTraining(out, asJSON, sum, o.unit)
	}
}

// stderrOf is where the live bar goes: the real stderr when out is the
// real stdout, else nowhere (tests).
func stderrOf(out io.Writer) io.Writer {
	if out == os.Stdout {
		return os.Stderr
	}
	return io.Discard
}

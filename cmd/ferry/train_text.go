package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"ferry/cmd/ferry/internal/demo"
	"ferry/data/text"
	"ferry/models/gpt"
	"ferry/nn"
	"ferry/plan"
)

func init() {
	register(command{
		name:    "train text",
		summary: "train a byte-level GPT on text (default: the Go distribution's sources) and sample from it",
		setup:   setupTrainText,
	})
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
		txt, err := loadText(*data, *maxBytes)
		if err != nil {
			return err
		}
		if err := txt.Check(*seq); err != nil {
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
		task, err := gpt.NewTextTask(dev, txt, cfg, o.batch, *valBatches, o.seed)
		if err != nil {
			return err
		}
		defer task.Release()
		task.Source = *data
		task.DataID = fmt.Sprintf("max-bytes %d", *maxBytes)
		ctx, unlisten := interruptContext()
		defer unlisten()
		p := newProgress(out, stderrOf(out), asJSON)
		p.line("%s\ntext: %d bytes for training, %d held out; unigram entropy %.3f nats per byte (a model blind to context reaches no lower)\non %s, %d steps, mode %s",
			task.Describe(), len(txt.Train), len(txt.Val), text.UnigramEntropy(txt.Train), dev.Name(), o.steps, o.mode)
		planned := func() plan.Model {
			return demo.PlanModel(demo.Config{Model: "gpt", GPT: cfg, Batch: o.batch, Seed: o.seed, LR: 1e-3})
		}
		sum, err := runTrainer(trainRun{task: task, describe: task.Describe(), planned: planned}, dev, &o, p, ctx)
		if err != nil {
			return err
		}
		sum.Task = "text"
		if sum.Metrics == nil {
			sum.Metrics = map[string]float64{}
		}
		sum.Metrics["unigram_entropy"] = text.UnigramEntropy(txt.Train)
		if v, ok := sum.Metrics["val_loss"]; ok {
			sum.Metrics["final_val_loss"] = v
			delete(sum.Metrics, "val_loss")
		}
		if first, ok := sum.initialVal("val_loss"); ok {
			sum.Metrics["initial_val_loss"] = first
		}
		if *sample > 0 && !sum.Interrupted && ctx.Err() == nil {
			s, err := nn.Generate(task.GPT, dev, []byte(*prompt), *sample, 0.8, 20, rand.New(rand.NewPCG(o.seed, 5)))
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

// loadText reads --data, or by default every 7th source file of the Go
// distribution that runs ferry (so that a limited read spans many
// packages), holding out a tenth.
func loadText(path string, maxBytes int) (*text.Text, error) {
	o := text.Options{Limit: maxBytes, ValFraction: 0.1}
	if path == "" {
		path, o.Stride = defaultTextSource(), 7
	}
	return text.Load(path, o)
}

// defaultTextSource is the Go distribution's own sources, on every machine
// that has Go.
func defaultTextSource() string {
	root := runtime.GOROOT()
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		root = strings.TrimSpace(string(out))
	}
	return filepath.Join(root, "src")
}

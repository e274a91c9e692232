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
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
	"ferry/plan"
	"ferry/train"
)

func init() {
	register(command{
		name:    "train text",
		summary: "train a byte-level language model on text (default: a GPT on the Go distribution's sources) and sample from it",
		setup:   setupTrainText,
	})
}

func setupTrainText(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	var o trainOptions
	o.register(fs, 2e-3, "adamw")
	data := fs.String("data", "", "a text file or a directory of text files (default: the Go distribution's sources)")
	maxBytes := fs.Int("max-bytes", 4<<20, "read at most this much text")
	// A small model by default, whatever the family's usual size; the
	// batch is --batch and the vocabulary the 256 byte values.
	sizes := defineSizeFlags(fs, "gpt", isLanguage,
		models.Sizes{"layers": 4, "heads": 4, "embd": 128, "seq": 64, "dropout": 0, "vocab": 256}, "batch", "vocab")
	valBatches := fs.Int("val-batches", 8, "held-out batches per validation")
	sample := fs.Int("sample", 300, "bytes to sample at the end (0: none)")
	prompt := fs.String("prompt", "func ", "text the sample continues")
	fs.IntVar(&o.batch, "batch", 16, "sequences per micro-batch")
	fs.IntVar(&o.steps, "steps", 600, "optimizer steps")
	fs.IntVar(&o.evalEvery, "eval-every", 100, "steps between validation losses")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if err := positive(set, map[string]int{"max-bytes": *maxBytes, "val-batches": *valBatches}); err != nil {
			return err
		}
		if err := o.validate(set); err != nil {
			return err
		}
		if *valBatches > 1<<16 {
			return fmt.Errorf("--val-batches %d is beyond what ferry train text runs (at most %d)", *valBatches, 1<<16)
		}
		if *sample < 0 || *sample > 1<<20 {
			return fmt.Errorf("--sample must be in [0, 1048576], got %d", *sample)
		}
		o.unit = "tokens"
		out, err := o.openComm(out)
		if err != nil {
			return err
		}
		defer o.closeComm()
		fam, err := sizes.family()
		if err != nil {
			return err
		}
		lf, ok := fam.(models.LanguageFamily)
		if !ok {
			return fmt.Errorf("--model %s is not a language model (%s)", fam.Name(), strings.Join(models.Names(isLanguage), ", "))
		}
		sizes.values["batch"], sizes.set["batch"] = float64(o.batch), true
		s, err := sizes.sizes(fam, "cpu")
		if err != nil {
			return err
		}
		if o.policy != "" { // a policy for another model: say which flags it was planned with
			pol, err := offload.LoadPolicy(o.policy)
			if err != nil {
				return err
			}
			sizes.modelSet = true
			if _, _, err := sizes.fromPolicy(pol, o.policy, fam, s); err != nil {
				return err
			}
		}
		for k, v := range s {
			if v > maxTrainDim {
				return fmt.Errorf("--%s %g is beyond what ferry train text runs (at most %d)", k, v, maxTrainDim)
			}
		}
		txt, err := loadText(*data, *maxBytes)
		if err != nil {
			return err
		}
		if err := txt.Check(s.Int("seq")); err != nil {
			return err
		}
		dev, err := openTrainDevice(o.device)
		if err != nil {
			return err
		}
		defer dev.Close()
		// Parameters with their gradients and optimizer state, and the
		// activations of one block and the logits, at least: the model as
		// its family builds it for the demo, on the meta device.
		var params, act int64
		if c, ok := fam.(models.Counter); ok {
			params, act = c.ParameterCount(s), 4*int64(o.batch)*int64(s.Int("seq"))*int64(s.Int("embd"))
		} else {
			w, err := fam.Workload(meta.New(device.Options{}, nil), s, o.seed)
			if err != nil {
				return err
			}
			params, act = w.ParameterCount(), w.ActivationBytes()
			w.Release()
		}
		tokens := int64(o.batch) * int64(s.Int("seq"))
		if err := preflight(dev, params, stateCopies(o.optimizer), tokens*256*4*3+int64(s.Int("layers"))*act*4, tokens*8*int64(max(1, *valBatches)),
			"lower --batch or the model's sizes (or offload: --mode offload)"); err != nil {
			return err
		}
		task, err := models.NewTextTask(dev, txt, lf, s, *valBatches, o.seed)
		if err != nil {
			return err
		}
		defer task.Release()
		task.Source = *data
		task.DataID = train.HashBytes(txt.Train, txt.Val) // the text read, whatever the path's spelling
		ctx, unlisten := interruptContext()
		defer unlisten()
		p := newProgress(out, stderrOf(out), asJSON)
		p.line("%s\ntext: %d bytes for training, %d held out; unigram entropy %.3f nats per byte (a model blind to context reaches no lower)\non %s, %d steps, mode %s",
			task.Describe(), len(txt.Train), len(txt.Val), text.UnigramEntropy(txt.Train), dev.Name(), o.steps, o.mode)
		planned := func() plan.Model {
			return demo.PlanModel(demo.Config{Family: fam, Sizes: s, Seed: o.seed, LR: 1e-3})
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
		sampleCut := false
		if *sample > 0 && !sum.Interrupted && ctx.Err() == nil && o.comm.Rank() == 0 {
			// Ctrl-C here cuts the sample short; the summary still follows.
			s, err := models.Generate(ctx, task.LM, dev, []byte(*prompt), *sample, 0.8, 20, rand.New(rand.NewPCG(o.seed, 5)))
			if sampleCut = ctx.Err() != nil; err != nil && !sampleCut {
				return err
			}
			sum.Sample = s
			if !asJSON {
				fmt.Fprintf(out, "\nsample (temperature 0.8, top-k 20):\n\n%s\n", s)
			}
		}
		if err := finishTraining(out, asJSON, sum, o.unit); err != nil || !sampleCut {
			return err
		}
		err = fmt.Errorf("%w: during the sample, which was cut short; the training had finished", demo.ErrInterrupted)
		if asJSON {
			return quietError{err}
		}
		return err
	}
}

// stderrOf is where the live bar goes: the real stderr when out is the
// real stdout (as run wraps it), else nowhere (tests, ranks other than 0).
func stderrOf(out io.Writer) io.Writer {
	if c, ok := out.(*checkedWriter); ok {
		out = c.w
	}
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

func isLanguage(f models.Family) bool { _, ok := f.(models.LanguageFamily); return ok }

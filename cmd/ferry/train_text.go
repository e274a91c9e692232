package main

import (
	"context"
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
	"ferry/data/bpe"
	"ferry/data/text"
	"ferry/device"
	"ferry/device/meta"
	"ferry/models"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
	"ferry/train"
)

func init() {
	register(command{
		name:    "train text",
		summary: "train a language model on text (bytes or GPT-2's BPE tokens; default: a GPT on the Go distribution's sources) and sample from it",
		setup:   setupTrainText,
	})
}

func setupTrainText(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	var o trainOptions
	o.register(fs, 2, "adamw")
	data := fs.String("data", "", "a text file or a directory of text files (default: the Go distribution's sources)")
	maxBytes := fs.Int("max-bytes", 4<<20, "read at most this much text")
	// A small model by default, whatever the family's usual size; the
	// batch is --batch and the vocabulary the 256 byte values.
	sizes := defineSizeFlags(fs, "gpt", isLanguage,
		textSizes, "batch", "vocab")
	valBatches := fs.Int("val-batches", 8, "held-out batches per validation")
	sample := fs.Int("sample", 300, "tokens (bytes, for a byte-level model) to sample at the end (0: none)")
	prompt := fs.String("prompt", "func ", "text the sample continues")
	tokenizer := fs.String("tokenizer", "byte", "byte (vocabulary 256) or bpe (GPT-2's, vocabulary 50257)")
	cacheDir := fs.String("token-cache", "", "directory of cached token ids (default: the user's cache directory, ferry/tokens)")
	initFrom := fs.String("init-from", "", "start from these weights: a checkpoint directory (its latest), one checkpoint, a safetensors file, or a Hugging Face model directory")
	initOpt := fs.Bool("init-optimizer", false, "with --init-from a checkpoint: take its optimizer state too")
	fs.IntVar(&o.batch, "batch", 16, "sequences per micro-batch")
	fs.IntVar(&o.steps, "steps", 1000, "optimizer steps")
	fs.IntVar(&o.evalEvery, "eval-every", 200, "steps between validation losses")
	return o.ranked(func(out io.Writer, asJSON bool) error { // ranked: leaves the job at the end (ranks.go)
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
		if *sample == 0 && set["prompt"] {
			return fmt.Errorf("--prompt starts the sample, and --sample 0 draws none: drop --prompt, or give --sample N")
		}
		if *tokenizer != "byte" && *tokenizer != "bpe" {
			return fmt.Errorf("--tokenizer %q: want byte or bpe", *tokenizer)
		}
		if *initOpt && *initFrom == "" {
			return fmt.Errorf("--init-optimizer applies to --init-from")
		}
		// From here a signal stops a load (its reads go through ctx),
		// and later the training at a step boundary.
		ctx, unlisten := interruptContext()
		defer unlisten()
		var src *models.Source
		if *initFrom != "" {
			var err error
			if src, err = models.OpenSourceContext(ctx, *initFrom); err != nil {
				return fmt.Errorf("--init-from: %w", err)
			}
			if src.Family != nil {
				if set["model"] && *sizes.model != src.Family.Name() {
					return fmt.Errorf("--model %s contradicts --init-from %s, a %s model: drop --model", *sizes.model, *initFrom, src.Family.Name())
				}
				*sizes.model = src.Family.Name()
			}
			if src.Tokenizer != "" {
				if set["tokenizer"] && *tokenizer != src.Tokenizer {
					return fmt.Errorf("--tokenizer %s contradicts --init-from %s, trained with the %s tokenizer: drop --tokenizer", *tokenizer, *initFrom, src.Tokenizer)
				}
				*tokenizer = src.Tokenizer
			}
			if *initOpt && src.OptimizerFile == "" {
				return fmt.Errorf("--init-optimizer: %s is not a ferry checkpoint, so it holds no optimizer state", *initFrom)
			}
			if *initOpt && src.OptimizerName != o.optimizer {
				return fmt.Errorf("--init-optimizer: %s was trained with --optimizer %s, and this run uses %s", *initFrom, src.OptimizerName, o.optimizer)
			}
		}
		o.unit = "tokens"
		out, err := o.openComm(out)
		if err != nil {
			return err
		}
		if err := o.checkOutputs(); err != nil {
			return err
		}
		o.checkWorld(set)
		if *tokenizer == "bpe" && *cacheDir != "" && o.comm.Rank() == 0 {
			if err := checkOutputDir("--token-cache", *cacheDir, false); err != nil {
				return err
			}
		}
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
		if *tokenizer == "bpe" {
			s["vocab"] = float64(bpe.VocabSize)
		} else if set["token-cache"] {
			return fmt.Errorf("--token-cache applies to --tokenizer bpe (a byte-level model reads the bytes)")
		}
		if src != nil && src.Sizes != nil {
			if s, err = src.Merge(fam, s, sizes.set); err != nil {
				return fmt.Errorf("--init-from: %w", err)
			}
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
		txt, tok, cacheHit, err := loadCorpus(ctx, *data, *maxBytes, *tokenizer, *cacheDir)
		if err != nil {
			return err
		}
		if tok == nil {
			if err := txt.Check(s.Int("seq")); err != nil {
				return err
			}
		} else if err := tok.Check(s.Int("seq"), txt.Source); err != nil {
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
		if err := o.preflight(dev, params, tokens*int64(s.Int("vocab"))*4*3+int64(s.Int("layers"))*act*4, tokens*8*int64(max(1, *valBatches)),
			"lower --batch or the model's sizes (or offload: --mode offload)"); err != nil {
			return err
		}
		paramDev := dev
		if len(o.paramsOnHost) > 0 && dev.Host() != dev && !(o.zero == 3 && o.comm.Size() > 1) {
			paramDev = dev.Host() // streamed from there: built there (ZeRO-3 moves its shards there itself)
		}
		task, err := models.NewTokenTaskOn(dev, paramDev, txt, tok, lf, s, *valBatches, o.seed)
		if err != nil {
			return err
		}
		defer task.Release()
		task.Source = *data
		task.DataID = train.HashBytes(txt.Train, txt.Val) // the text read, whatever the path's spelling
		// What ferry eval needs to draw this run's validation batches again.
		// text_source is where it was read: not compared on resume (the
		// content's hash, data, is), so a moved file resumes.
		task.IdentityExtra = map[string]any{"text_source": absPath(*data), "max_bytes": *maxBytes, "val_batches": *valBatches,
			train.LocationsKey: []string{"text_source", "init_from", "tokenizer_file"}}
		var initOptimizer func(optim.Stateful) error
		if src != nil {
			if err := src.LoadContext(ctx, task.LM); err != nil {
				return fmt.Errorf("--init-from: %w", err)
			}
			task.IdentityExtra["init_from"] = absPath(src.Path)
			if src.TokenizerFile != "" {
				task.IdentityExtra["tokenizer_file"] = absPath(src.TokenizerFile)
			}
			if *initOpt {
				initOptimizer = func(opt optim.Stateful) error {
					if err := src.LoadOptimizerContext(ctx, opt); err != nil {
						return fmt.Errorf("--init-optimizer: %w", err)
					}
					return nil
				}
			}
		}
		p := newProgress(out, stderrOf(out), asJSON)
		unigram, per := text.UnigramEntropy(txt.Train), "byte"
		if tok != nil {
			unigram, per = text.TokenEntropy(tok.Train), "token"
		}
		p.line("%s\ntext: %d bytes for training, %d held out; unigram entropy %.3f nats per %s (a model blind to context reaches no lower)\non %s, %d steps, mode %s",
			task.Describe(), len(txt.Train), len(txt.Val), unigram, per, dev.Name(), o.steps, o.modeName())
		if tok != nil {
			how := "tokenized now, cached in"
			if cacheHit {
				how = "read from the token cache in"
			}
			cdir, _ := tokenCacheDir(*cacheDir)
			if src != nil && src.TokenizerFile != "" {
				how, cdir = "tokenized now by", src.TokenizerFile
			}
			p.line("%s tokens: %d for training, %d held out (%s %s)", tok.Name, len(tok.Train), len(tok.Val), how, cdir)
		}
		if src != nil {
			p.line("initialised from %s (%s)", src.Path, src.Kind)
			if note := src.ContextNote(s); note != "" {
				p.line("%s", note)
			}
			if src.Tokenizer == "" && src.Sizes != nil && *tokenizer == "byte" && s.Int("vocab") != 256 {
				p.line("note: its vocabulary is %d tokens, not GPT-2's: ferry has no tokenizer for it, and trains it on byte ids 0–255", s.Int("vocab"))
			}
		}
		planned := func() plan.Model {
			return demo.PlanModel(demo.Config{Family: fam, Sizes: s, Seed: o.seed, LR: 1e-3})
		}
		sum, err := runTrainer(trainRun{task: task, name: "text", describe: task.Describe(), planned: planned, initOptimizer: initOptimizer}, dev, &o, p, ctx)
		if err != nil {
			return err
		}
		sum.Task = "text"
		if sum.Metrics == nil {
			sum.Metrics = map[string]float64{}
		}
		sum.Metrics["unigram_entropy"] = unigram
		if v, ok := sum.Metrics["val_loss"]; ok {
			sum.Metrics["final_val_loss"] = v
			delete(sum.Metrics, "val_loss")
		}
		if first, ok := sum.initialVal("val_loss"); ok {
			sum.Metrics["initial_val_loss"] = first
		}
		sum.Tokenizer, sum.InitFrom = task.Tokenizer(), ""
		if src != nil {
			sum.InitFrom = src.Path
		}
		if tok != nil {
			sum.TokenCacheHit = &cacheHit
		}
		sampleCut := false
		if *sample > 0 && !sum.Interrupted && ctx.Err() == nil && o.comm.Rank() == 0 {
			// Ctrl-C here cuts the sample short; the summary still follows.
			s, err := generateText(ctx, task.LM, dev, task.Tokenizer(), *prompt, *sample, 0.8, 20, rand.New(rand.NewPCG(o.seed, 5)))
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
	})
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
func loadText(ctx context.Context, path string, maxBytes int) (*text.Text, error) {
	o := text.Options{Limit: maxBytes, ValFraction: 0.1}
	if path == "" {
		path, o.Stride = defaultTextSource(), 7
	}
	return text.LoadContext(ctx, path, o)
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

// absPath is path made absolute (when it can be), "" for "".
func absPath(path string) string {
	if path == "" {
		return ""
	}
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// tokenCacheDir is --token-cache, or ferry/tokens in the user's cache
// directory ($XDG_CACHE_HOME on Linux).
func tokenCacheDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for token ids (%v): give --token-cache DIR", err)
	}
	return filepath.Join(d, "ferry", "tokens"), nil
}

// loadCorpus reads the text (loadText) and, under tokenizer bpe, its
// token ids, training and held-out parts apart, through the token cache;
// hit says the cache had them both.
func loadCorpus(ctx context.Context, path string, maxBytes int, tokenizer, cacheFlag string) (*text.Text, *models.Tokens, bool, error) {
	txt, err := loadText(ctx, path, maxBytes)
	if err != nil {
		return nil, nil, false, err
	}
	if t, ok := models.HFTokenizer(tokenizer); ok { // a model's tokenizer.json: no cache
		return txt, &models.Tokens{Name: tokenizer, Vocab: t.Vocab(), Train: t.Encode(txt.Train), Val: t.Encode(txt.Val)}, false, nil
	}
	switch tokenizer {
	case "byte":
		return txt, nil, false, nil
	case "bpe":
	default:
		return nil, nil, false, fmt.Errorf("tokenizer %q: this ferry knows byte and bpe", tokenizer)
	}
	dir, err := tokenCacheDir(cacheFlag)
	if err != nil {
		return nil, nil, false, err
	}
	tok := &models.Tokens{Name: "bpe", Vocab: bpe.VocabSize}
	trainIDs, hit1, err := bpe.CachedEncodeBytes(txt.Train, dir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("--token-cache: %w", err)
	}
	valIDs, hit2, err := bpe.CachedEncodeBytes(txt.Val, dir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("--token-cache: %w", err)
	}
	tok.Train, tok.Val = trainIDs, valIDs
	return txt, tok, hit1 && hit2, nil
}

// generateText continues prompt by n tokens of tokenizer ("byte": n
// bytes) and returns the text, prompt included.
func generateText(ctx context.Context, g models.LanguageModel, dev device.Device, tokenizer, prompt string, n int, temperature float64, topK int, rng *rand.Rand) (string, error) {
	return generateSampled(ctx, g, dev, tokenizer, prompt, n, models.Sampling{Temperature: temperature, TopK: topK}, rng)
}

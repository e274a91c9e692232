package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"unicode/utf8"

	"ferry/cmd/ferry/internal/demo"
	"ferry/models"
	"ferry/nn"
	"ferry/train"
)

func init() {
	register(command{
		name:    "sample",
		summary: "generate text from a checkpoint written by `ferry train text`",
		setup:   setupSample,
	})
}

func setupSample(fs *flag.FlagSet) func(out io.Writer, asJSON bool) error {
	dir := fs.String("checkpoint-dir", "", "a --checkpoint-dir of `ferry train text` (its latest checkpoint), or one checkpoint's directory")
	initFrom := fs.String("init-from", "", "instead of --checkpoint-dir: a Hugging Face model directory, a safetensors file (sized by the size flags, as train text's --init-from) or a checkpoint")
	n := fs.Int("n", 500, "tokens to generate per sample (bytes, for a byte-level model)")
	numSamples := fs.Int("num-samples", 1, "samples to draw, one after another (nanoGPT's num_samples)")
	prompt := fs.String("prompt", "func ", "text to continue")
	promptFile := fs.String("prompt-file", "", "read the text to continue from this file (instead of --prompt)")
	temperature := fs.Float64("temperature", 0.8, "softmax temperature (0: greedy, always the likeliest)")
	topK := fs.Int("top-k", 20, "sample among the k likeliest tokens (above the vocabulary: among all of them)")
	topP := fs.Float64("top-p", 1, "then among the fewest likeliest tokens whose probability sums to at least p (nucleus sampling; 1: all k)")
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	devName := fs.String("device", "cpu", "device to run on")
	tokenizerFlag := fs.String("tokenizer", "byte", "with --init-from a safetensors file (or a model without a tokenizer): byte or bpe (GPT-2's)")
	sizes := defineSizeFlags(fs, "gpt", isLanguage, textSizes, "batch", "vocab")
	return func(out io.Writer, asJSON bool) error {
		set := setFlags(fs)
		if (*dir == "") == (*initFrom == "") {
			return fmt.Errorf("give --checkpoint-dir (written by `ferry train text --checkpoint-dir D`) or --init-from (a Hugging Face directory or a safetensors file), one of them")
		}
		if err := checkSampleCounts(*n, *numSamples); err != nil {
			return err
		}
		if !(*topP > 0 && *topP <= 1) { // 0 would mean none to Sampling
			return fmt.Errorf("--top-p must be in (0, 1] (1: no nucleus cut), got %v", *topP)
		}
		sampling := models.Sampling{Temperature: *temperature, TopK: *topK, TopP: *topP}
		if err := sampling.Check(); err != nil {
			return fmt.Errorf("--%w", err)
		}
		if *temperature == 0 && (set["top-k"] || set["top-p"] || set["seed"]) {
			// Greedy decoding takes the likeliest token and draws nothing.
			return fmt.Errorf("--temperature 0 is greedy: it takes the likeliest token and draws nothing, so --top-k, --top-p and --seed would be ignored: drop them, or give a temperature above 0")
		}
		if *tokenizerFlag != "byte" && *tokenizerFlag != "bpe" {
			return fmt.Errorf("--tokenizer %q: want byte or bpe", *tokenizerFlag)
		}
		text, err := samplePrompt(set, *prompt, *promptFile)
		if err != nil {
			return err
		}
		// A signal stops the load (its reads go through ctx) or the
		// sample, with exit 130.
		ctx, unlisten := interruptContext()
		defer unlisten()
		var (
			fam       models.LanguageFamily
			sz        models.Sizes
			tokenizer string
			src       *models.Source
			path      string
			step      = -1
		)
		if *dir != "" {
			if len(sizes.set) > 0 || set["model"] || set["tokenizer"] {
				return fmt.Errorf("--checkpoint-dir: the checkpoint records its model and tokenizer; the size flags, --model and --tokenizer apply to --init-from")
			}
			ck, meta, err := train.ResolveCheckpointContext(ctx, *dir)
			if err != nil {
				return err
			}
			if fam, sz, err = models.CheckpointModel(meta.Identity); err != nil {
				return fmt.Errorf("checkpoint %s: %w", ck, err)
			}
			tokenizer, path, step = models.TokenizerOf(meta.Identity), ck, meta.Step
			if err := models.LoadTokenizerOf(meta.Identity); err != nil {
				return fmt.Errorf("checkpoint %s: %w", ck, err)
			}
		} else {
			if src, fam, sz, tokenizer, err = sampleSource(ctx, *initFrom, sizes, set, *tokenizerFlag); err != nil {
				return err
			}
			path = src.Path
		}
		dev, err := openTrainDevice(*devName)
		if err != nil {
			return err
		}
		defer dev.Close()
		// One forward pass over the context at a time; the ids and the
		// text (4 and at most 4 bytes a token) of every sample on the host.
		if err := inferencePreflight(dev, fam, sz, 1, false, 8*int64(*n)*int64(*numSamples),
			"the model is too large for this device: sample on a larger one (--device), or lower --n or --num-samples"); err != nil {
			return err
		}
		g, err := fam.LanguageModel(dev, sz, 1)
		if err != nil {
			return err
		}
		defer nn.Release(g)
		if src != nil {
			if err = src.LoadContext(ctx, g); err != nil && src.Family == nil {
				err = fmt.Errorf("%w\n(a safetensors file records no sizes, and these were %s: give the model's with those flags, as train text was given them)", err, sampleSizeArgs(fam, sz))
			}
		} else {
			err = loadWeights(ctx, path, g)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w while loading the weights", demo.ErrInterrupted)
		}
		if err != nil {
			return err
		}
		texts, err := generateSamples(ctx, g, dev, tokenizer, text, *n, *numSamples, sampling, rand.New(rand.NewPCG(*seed, 5)))
		if ctx.Err() != nil {
			return fmt.Errorf("%w during the sample", demo.ErrInterrupted)
		}
		if err != nil {
			return err
		}
		if asJSON {
			// A byte-level model emits any byte, and JSON strings hold
			// UTF-8 only: "text" shows invalid bytes as U+FFFD, for
			// people; "text_base64" is the exact bytes. The top-level
			// text is the first sample's; "samples" holds them all.
			var all []map[string]any
			for _, t := range texts {
				all = append(all, map[string]any{"text": t, "text_base64": base64.StdEncoding.EncodeToString([]byte(t)), "valid_utf8": utf8.ValidString(t)})
			}
			m := map[string]any{"prompt": text, "tokenizer": tokenizer, "temperature": *temperature, "top_k": *topK, "top_p": *topP,
				"num_samples": len(texts), "samples": all}
			for k, v := range all[0] {
				m[k] = v
			}
			if src != nil {
				m["init_from"], m["source"] = path, src.Kind
			} else {
				m["checkpoint"], m["step"] = path, step
			}
			return writeJSON(out, m)
		}
		if src != nil {
			fmt.Fprintf(out, "%s (%s):\n\n", path, src.Kind)
		} else {
			fmt.Fprintf(out, "%s (step %d):\n\n", path, step)
		}
		for i, t := range texts {
			if i > 0 {
				fmt.Fprintln(out, "---------------")
			}
			fmt.Fprintf(out, "%s\n", t)
		}
		return nil
	}
}

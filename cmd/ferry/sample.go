package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"math"
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
	n := fs.Int("n", 500, "tokens to generate (bytes, for a byte-level model)")
	prompt := fs.String("prompt", "func ", "text to continue")
	temperature := fs.Float64("temperature", 0.8, "softmax temperature (0: greedy, always the likeliest)")
	topK := fs.Int("top-k", 20, "sample among the k likeliest tokens")
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	devName := fs.String("device", "cpu", "device to run on")
	return func(out io.Writer, asJSON bool) error {
		if *dir == "" {
			return fmt.Errorf("give --checkpoint-dir (written by `ferry train text --checkpoint-dir D`)")
		}
		if *n < 1 || *n > 1<<20 {
			return fmt.Errorf("--n must be in [1, 1048576], got %d", *n)
		}
		if !(*temperature >= 0) || math.IsInf(*temperature, 0) {
			return fmt.Errorf("--temperature must be finite and ≥ 0 (0: greedy), got %v", *temperature)
		}
		if *topK < 1 {
			return fmt.Errorf("--top-k must be a positive integer, got %d", *topK)
		}
		// A signal stops the load (its reads go through ctx) or the
		// sample, with exit 130.
		ctx, unlisten := interruptContext()
		defer unlisten()
		path, meta, err := train.ResolveCheckpointContext(ctx, *dir)
		if err != nil {
			return err
		}
		fam, sz, err := models.CheckpointModel(meta.Identity)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		dev, err := openTrainDevice(*devName)
		if err != nil {
			return err
		}
		defer dev.Close()
		g, err := fam.LanguageModel(dev, sz, 1)
		if err != nil {
			return err
		}
		defer nn.Release(g)
		if err := loadWeights(ctx, path, g); err != nil {
			return err
		}
		tokenizer := models.TokenizerOf(meta.Identity)
		if err := models.LoadTokenizerOf(meta.Identity); err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		text, err := generateText(ctx, g, dev, tokenizer, *prompt, *n, *temperature, *topK, rand.New(rand.NewPCG(*seed, 5)))
		if ctx.Err() != nil {
			return fmt.Errorf("%w during the sample", demo.ErrInterrupted)
		}
		if err != nil {
			return err
		}
		if asJSON {
			// A byte-level model emits any byte, and JSON strings hold
			// UTF-8 only: "text" shows invalid bytes as U+FFFD, for
			// people; "text_base64" is the exact bytes.
			return writeJSON(out, map[string]any{"checkpoint": path, "step": meta.Step, "prompt": *prompt, "text": text, "tokenizer": tokenizer, "temperature": *temperature,
				"text_base64": base64.StdEncoding.EncodeToString([]byte(text)), "valid_utf8": utf8.ValidString(text)})
		}
		fmt.Fprintf(out, "%s (step %d):\n\n%s\n", path, meta.Step, text)
		return nil
	}
}

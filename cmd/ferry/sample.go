package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"unicode/utf8"

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
	n := fs.Int("n", 500, "bytes to generate")
	prompt := fs.String("prompt", "func ", "text to continue")
	temperature := fs.Float64("temperature", 0.8, "softmax temperature")
	topK := fs.Int("top-k", 20, "sample among the k likeliest bytes")
	seed := fs.Uint64("seed", 1, "seed of the sampling")
	devName := fs.String("device", "cpu", "device to run on")
	return func(out io.Writer, asJSON bool) error {
		if *dir == "" {
			return fmt.Errorf("give --checkpoint-dir (written by `ferry train text --checkpoint-dir D`)")
		}
		if *n < 1 || *n > 1<<20 {
			return fmt.Errorf("--n must be in [1, 1048576], got %d", *n)
		}
		if !(*temperature > 0) || math.IsInf(*temperature, 0) {
			return fmt.Errorf("--temperature must be positive and finite, got %v", *temperature)
		}
		if *topK < 1 {
			return fmt.Errorf("--top-k must be a positive integer, got %d", *topK)
		}
		path := *dir
		if _, err := train.ReadMeta(path); err != nil {
			// A checkpoint directory's parent: take its latest.
			latest, lerr := (&train.Checkpointer{Dir: *dir}).Latest()
			if lerr != nil || latest == "" {
				return fmt.Errorf("%s holds no checkpoint of `ferry train text`: %v", *dir, err)
			}
			path = latest
		}
		meta, err := train.Verify(path)
		if err != nil {
			return err
		}
		cfg, err := gptConfigOf(meta.Identity)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, err)
		}
		dev, err := openTrainDevice(*devName)
		if err != nil {
			return err
		}
		defer dev.Close()
		g, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			return err
		}
		defer nn.Release(g)
		if err := nn.LoadSafetensors(filepath.Join(path, "model.safetensors"), g); err != nil {
			return err
		}
		text, err := train.Generate(g, dev, []byte(*prompt), *n, *temperature, *topK, rand.New(rand.NewPCG(*seed, 5)))
		if err != nil {
			return err
		}
		if asJSON {
			// A byte-level model emits any byte, and JSON strings hold
			// UTF-8 only: "text" shows invalid bytes as U+FFFD, for
			// people; "text_base64" is the exact bytes.
			return writeJSON(out, map[string]any{"checkpoint": path, "step": meta.Step, "prompt": *prompt, "text": text,
				"text_base64": base64.StdEncoding.EncodeToString([]byte(text)), "valid_utf8": utf8.ValidString(text)})
		}
		fmt.Fprintf(out, "%s (step %d):\n\n%s\n", path, meta.Step, text)
		return nil
	}
}

// gptConfigOf rebuilds the GPT's configuration from a text checkpoint's
// identity.
func gptConfigOf(id map[string]any) (nn.GPTConfig, error) {
	if id["task"] != "text" {
		return nn.GPTConfig{}, fmt.Errorf("it was written by `ferry train %v`, not `ferry train text`", id["task"])
	}
	num := func(k string) (int, error) {
		v, ok := id[k].(json.Number)
		if !ok {
			return 0, fmt.Errorf("its identity lacks %s", k)
		}
		i, err := v.Int64()
		if err != nil || i < 1 || i > 1<<30 {
			return 0, fmt.Errorf("its %s is %v", k, v)
		}
		return int(i), nil
	}
	var cfg nn.GPTConfig
	var err error
	for _, f := range []struct {
		k string
		p *int
	}{{"vocab", &cfg.Vocab}, {"seq", &cfg.Seq}, {"layers", &cfg.Layers}, {"heads", &cfg.Heads}, {"embd", &cfg.Embd}} {
		if *f.p, err = num(f.k); err != nil {
			return cfg, err
		}
	}
	cfg.Bias = id["bias"] == true
	return cfg, cfg.Validate()
}

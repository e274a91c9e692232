package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"ferry/data/bpe"
	"ferry/device"
	"ferry/internal/fsx"
	"ferry/models"
)

// textSizes are ferry train text's default model sizes (a small model,
// whatever the family's usual size); sample takes them too for a bare
// safetensors file, which records none.
var textSizes = models.Sizes{"layers": 4, "heads": 4, "embd": 128, "seq": 128, "dropout": 0, "vocab": 256}

// Limits of ferry sample: a prompt file is read whole, and every sample
// is generated one forward pass per token.
const (
	maxPromptFile  = 1 << 20 // bytes
	maxNumSamples  = 1000
	maxSampleTotal = 1 << 20 // tokens, over all the samples
)

// samplePrompt is the text to continue: --prompt-file's content (read
// through fsx.ReadLimited: no FIFO, directory or endless file), or
// --prompt. Giving both is refused.
func samplePrompt(set map[string]bool, prompt, promptFile string) (string, error) {
	if !set["prompt-file"] {
		return prompt, nil
	}
	if set["prompt"] {
		return "", fmt.Errorf("--prompt and --prompt-file both give the prompt: give one")
	}
	if promptFile == "" {
		return "", fmt.Errorf("--prompt-file needs a file name")
	}
	b, err := fsx.ReadLimited(promptFile, maxPromptFile)
	if err != nil {
		return "", fmt.Errorf("--prompt-file: %w", err)
	}
	return string(b), nil
}

// checkSampleCounts refuses --n and --num-samples that cannot run.
func checkSampleCounts(n, numSamples int) error {
	if n < 1 || n > maxSampleTotal {
		return fmt.Errorf("--n must be in [1, %d], got %d", maxSampleTotal, n)
	}
	if numSamples < 1 || numSamples > maxNumSamples {
		return fmt.Errorf("--num-samples must be in [1, %d], got %d", maxNumSamples, numSamples)
	}
	if int64(n)*int64(numSamples) > maxSampleTotal {
		return fmt.Errorf("--num-samples %d × --n %d is %d tokens, more than ferry sample generates in one call (%d): lower one", numSamples, n, int64(n)*int64(numSamples), maxSampleTotal)
	}
	return nil
}

// sampleSource opens --init-from (a Hugging Face directory, a safetensors
// file or a checkpoint, as train text --init-from reads them) and says
// the family, sizes and tokenizer to build. A bare safetensors file
// records none: its sizes are the size flags' (train text's defaults)
// and its tokenizer --tokenizer's. Other sources fix them, and size flags
// given for them are refused.
func sampleSource(ctx context.Context, path string, sizes *sizeFlags, set map[string]bool, tokenizer string) (*models.Source, models.LanguageFamily, models.Sizes, string, error) {
	src, err := models.OpenSourceContext(ctx, path)
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("--init-from: %w", err)
	}
	if src.Family != nil {
		var given []string
		for k := range sizes.set {
			given = append(given, "--"+k)
		}
		if set["model"] {
			given = append(given, "--model")
		}
		if len(given) > 0 {
			return nil, nil, nil, "", fmt.Errorf("--init-from %s (%s) fixes the model, so %v do not apply: drop them", path, src.Kind, given)
		}
		if src.Tokenizer != "" {
			if set["tokenizer"] && tokenizer != src.Tokenizer {
				return nil, nil, nil, "", fmt.Errorf("--tokenizer %s contradicts --init-from %s, which uses the %s tokenizer: drop --tokenizer", tokenizer, path, src.Tokenizer)
			}
			tokenizer = src.Tokenizer
		}
		s := models.Sizes{"batch": 1}
		for k, v := range src.Sizes {
			s[k] = v
		}
		if err := checkSampleTokenizer(tokenizer, s.Int("vocab"), path); err != nil {
			return nil, nil, nil, "", err
		}
		return src, src.Family, s, tokenizer, models.Validate(src.Family, s)
	}
	fam, err := sizes.family()
	if err != nil {
		return nil, nil, nil, "", err
	}
	lf, ok := fam.(models.LanguageFamily)
	if !ok {
		return nil, nil, nil, "", fmt.Errorf("--model %s is not a language model", fam.Name())
	}
	sizes.values["batch"], sizes.set["batch"] = 1, true
	s, err := sizes.sizes(fam, "cpu")
	if err != nil {
		return nil, nil, nil, "", err
	}
	s["vocab"] = 256
	if tokenizer == "bpe" {
		s["vocab"] = float64(bpe.VocabSize)
	}
	return src, lf, s, tokenizer, models.Validate(fam, s)
}

// checkSampleTokenizer refuses a model whose ids the tokenizer cannot
// turn into text: byte ids are 0–255, and GPT-2's BPE needs its 50257.
func checkSampleTokenizer(tokenizer string, vocab int, path string) error {
	switch {
	case tokenizer == "byte" && vocab != 256:
		return fmt.Errorf("--init-from %s: its vocabulary is %d tokens, not 256 bytes, and it has no tokenizer ferry reads (no tokenizer.json beside it): "+
			"ferry cannot write its tokens as text; give --tokenizer bpe if it is GPT-2's", path, vocab)
	case tokenizer == "bpe" && vocab < bpe.VocabSize:
		return fmt.Errorf("--tokenizer bpe needs a vocabulary of %d, and %s has %d", bpe.VocabSize, path, vocab)
	}
	return nil
}

// generateSamples draws num continuations of prompt, one after another
// from one generator (nanoGPT's num_samples): the first is the sample a
// single one would be. On an interruption it returns those finished.
func generateSamples(ctx context.Context, g models.LanguageModel, dev device.Device, tokenizer, prompt string, n, num int, s models.Sampling, rng *rand.Rand) ([]string, error) {
	var out []string
	for range num {
		text, err := generateSampled(ctx, g, dev, tokenizer, prompt, n, s, rng)
		if err != nil {
			return out, err
		}
		out = append(out, text)
	}
	return out, nil
}

// generateSampled continues prompt by n tokens of tokenizer ("byte": n
// bytes), drawn by s, and returns the text, prompt included.
func generateSampled(ctx context.Context, g models.LanguageModel, dev device.Device, tokenizer, prompt string, n int, s models.Sampling, rng *rand.Rand) (string, error) {
	encode, decode := bpe.Encode, bpe.Decode
	if tokenizer == "byte" {
		encode = func(b []byte) []int32 {
			ids := make([]int32, len(b))
			for i, c := range b {
				ids[i] = int32(c)
			}
			return ids
		}
		decode = func(ids []int32) []byte {
			b := make([]byte, len(ids))
			for i, id := range ids {
				b[i] = byte(id)
			}
			return b
		}
	} else if t, ok := models.HFTokenizer(tokenizer); ok {
		encode, decode = t.Encode, t.Decode
	}
	ids := encode([]byte(prompt))
	if len(ids) == 0 {
		ids = encode([]byte("\n"))
	}
	out, err := models.GenerateSampled(ctx, g, dev, ids, n, s, rng)
	if err != nil && ctx.Err() == nil {
		return "", err
	}
	return string(decode(out)), err
}

// sampleSizeArgs writes s as sample's size flags (the batch and the
// vocabulary are not flags: the tokenizer sets the vocabulary).
func sampleSizeArgs(f models.Family, s models.Sizes) string {
	parts := []string{"--model " + f.Name()}
	for _, z := range f.Sizes() {
		if z.Name != "batch" && z.Name != "vocab" {
			parts = append(parts, fmt.Sprintf("--%s %g", z.Name, s[z.Name]))
		}
	}
	return strings.Join(parts, " ")
}

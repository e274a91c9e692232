// Package gpt registers the gpt family (nn.GPT): nanoGPT's GPT-2, with
// pre-LN blocks, a tanh-GELU MLP, learned position embeddings and a head
// tied to the token embedding, under PyTorch's parameter names. Its sizes
// default to GPT-2 124M, and on the CPU to nanoGPT's baby GPT (6 layers ×
// 384, sequence 256, vocabulary 65).
package gpt

import (
	"fmt"
	"math/rand/v2"

	"ferry/device"
	"ferry/models"
	"ferry/nn"
)

func init() { models.Register(family{}) }

// maxTokens bounds batch × sequence: a step makes its token ids on the
// host, 4 bytes each, whatever the device.
const maxTokens = 1 << 28

// family is nanoGPT's GPT-2 (nn.GPT): GPT-2 124M by default, nanoGPT's
// baby GPT (6 × 384, sequence 256, vocabulary 65) on the CPU; random
// tokens, cross-entropy, AdamW.
type family struct{}

func (family) Name() string { return "gpt" }
func (family) Summary() string {
	return "a GPT-2-style transformer (nanoGPT's structure, PyTorch's names, tied head)"
}

func (family) Sizes() []models.Size {
	whole := func(name, usage string, cpu, other float64) models.Size {
		return models.Size{Name: name, Usage: usage, Default: models.KindDefault(cpu, other), Integer: true, Min: 1, Max: 1 << 30}
	}
	// A step records every block's ops: a deeper model is refused rather
	// than built for minutes.
	blocks := func(z models.Size) models.Size { z.Max = 1 << 16; return z }
	return []models.Size{
		blocks(whole("layers", "transformer blocks", 6, 12)),
		blocks(whole("heads", "attention heads", 6, 12)),
		whole("embd", "embedding width", 384, 768),
		whole("seq", "sequence length", 256, 1024),
		whole("vocab", "vocabulary size", 65, 50257),
		{Name: "dropout", Usage: "dropout probability", Default: models.KindDefault(0, 0), Min: 0, Max: 1},
		whole("batch", "sequences per batch", 8, 8),
	}
}

// Config is the nn.GPTConfig of s.
func Config(s models.Sizes, seed uint64) nn.GPTConfig {
	return nn.GPTConfig{Vocab: s.Int("vocab"), Seq: s.Int("seq"), Layers: s.Int("layers"), Heads: s.Int("heads"), Embd: s.Int("embd"),
		Dropout: float32(s["dropout"]), Bias: true, Seed: seed}
}

// ParameterCount counts the parameters at s.
func (family) ParameterCount(s models.Sizes) int64 { return Config(s, 1).ParameterCount() }

// Check refuses a GPT whose tensors no device could hold, or whose tokens
// would not fit this machine.
func (family) Check(s models.Sizes) error {
	g, batch := Config(s, 1), s.Int("batch")
	if err := g.Validate(); err != nil {
		return err
	}
	for _, t := range []struct {
		what  string
		shape []int
	}{
		{"tokens", []int{batch, g.Seq}},
		{"logits", []int{batch, g.Seq, g.Vocab}},
		{"attention scores", []int{batch, g.Heads, g.Seq, g.Seq}},
		{"MLP hidden layer", []int{batch, g.Seq, g.Embd, 4}},
		{"token embeddings", []int{g.Vocab, g.Embd}},
		{"position embeddings", []int{g.Seq, g.Embd}},
		{"block weights", []int{g.Embd, g.Embd, 12}},
	} {
		if _, _, err := device.ShapeBytes(t.shape, 4); err != nil {
			return fmt.Errorf("gpt: the %s (shape %v): %w", t.what, t.shape, err)
		}
	}
	if n, _, _ := device.ShapeBytes([]int{batch, g.Seq}, 1); n > maxTokens {
		return fmt.Errorf("gpt: batch %d × sequence %d is %d tokens, more than the %d a step takes", batch, g.Seq, n, maxTokens)
	}
	return nil
}

func (f family) Workload(dev device.Device, s models.Sizes, seed uint64) (models.Workload, error) {
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	m, err := nn.NewGPT(dev, Config(s, seed), rand.New(rand.NewPCG(seed, 0x6e7)))
	if err != nil {
		return nil, err
	}
	c := m.Config
	return &models.TokenWorkload{LM: m, Sizes: s, Params: c.ParameterCount(),
		Model: fmt.Sprintf("GPT (%d layers, %d heads, embedding %d, sequence %d, vocabulary %d, %d parameters)",
			c.Layers, c.Heads, c.Embd, c.Seq, c.Vocab, c.ParameterCount())}, nil
}

// LanguageModel is the GPT of s (its vocab and seq included).
func (f family) LanguageModel(dev device.Device, s models.Sizes, seed uint64) (models.LanguageModel, error) {
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	return nn.NewGPT(dev, Config(s, seed), rand.New(rand.NewPCG(seed, 7)))
}

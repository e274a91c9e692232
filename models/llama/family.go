// Package llama registers the Llama-style family (nn.Llama): RMSNorm,
// rotary position embeddings, a SwiGLU MLP, grouped-query attention, an
// untied head and no biases, under Hugging Face's parameter names.
package llama

import (
	"fmt"
	"math/rand/v2"

	"ferry/device"
	"ferry/models"
	"ferry/nn"
)

func init() { models.Register(family{}) }

// family is TinyLlama-1.1B's shape by default (22 layers, 32 heads sharing
// 4 key/value heads, width 2048, SwiGLU 5632, context 2048, vocabulary
// 32000), and a baby of the same proportions on the CPU; random tokens,
// cross-entropy, AdamW.
type family struct{}

func (family) Name() string { return "llama" }
func (family) Summary() string {
	return "a Llama-style decoder (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention, Hugging Face's names)"
}

func (family) Sizes() []models.Size {
	whole := func(name, usage string, cpu, other float64, lo float64) models.Size {
		return models.Size{Name: name, Usage: usage, Default: models.KindDefault(cpu, other), Integer: true, Min: lo, Max: 1 << 30}
	}
	// A step records every block's ops: a deeper model is refused rather
	// than built for minutes.
	blocks := func(z models.Size) models.Size { z.Max = 1 << 16; return z }
	return []models.Size{
		blocks(whole("layers", "decoder blocks", 6, 22, 1)),
		blocks(whole("heads", "attention heads", 6, 32, 1)),
		whole("kv-heads", "key/value heads shared by the attention heads (grouped-query attention; a divisor of --heads)", 2, 4, 1),
		whole("embd", "model width", 384, 2048, 1),
		whole("hidden", "SwiGLU width (0: 8/3 of --embd rounded up to a multiple of 256)", 0, 5632, 0),
		whole("seq", "sequence length", 256, 2048, 1),
		whole("vocab", "vocabulary size", 65, 32000, 1),
		whole("batch", "sequences per batch", 8, 2, 1),
	}
}

// Config is the nn.LlamaConfig of s.
func Config(s models.Sizes, seed uint64) nn.LlamaConfig {
	hidden := s.Int("hidden")
	if hidden == 0 {
		hidden = (8*s.Int("embd")/3 + 255) / 256 * 256
	}
	return nn.LlamaConfig{Vocab: s.Int("vocab"), Seq: s.Int("seq"), Layers: s.Int("layers"), Heads: s.Int("heads"),
		KVHeads: s.Int("kv-heads"), Embd: s.Int("embd"), Hidden: hidden, Seed: seed}.WithDefaults()
}

// ParameterCount counts the parameters at s.
func (family) ParameterCount(s models.Sizes) int64 { return Config(s, 1).ParameterCount() }

func (family) Check(s models.Sizes) error {
	c, batch := Config(s, 1), s.Int("batch")
	if err := c.Validate(); err != nil {
		return err
	}
	for _, t := range []struct {
		what  string
		shape []int
	}{
		{"logits", []int{batch, c.Seq, c.Vocab}},
		{"attention scores", []int{batch, c.Heads, c.Seq, c.Seq}},
		{"SwiGLU hidden layer", []int{batch, c.Seq, c.Hidden, 3}},
		{"token embeddings", []int{c.Vocab, c.Embd}},
		{"block weights", []int{c.Embd, c.Embd + c.Hidden, 4}},
	} {
		if _, _, err := device.ShapeBytes(t.shape, 4); err != nil {
			return fmt.Errorf("llama: the %s (shape %v): %w", t.what, t.shape, err)
		}
	}
	if n, _, _ := device.ShapeBytes([]int{batch, c.Seq}, 1); n > 1<<28 {
		return fmt.Errorf("llama: batch %d × sequence %d is %d tokens, more than the %d a step takes", batch, c.Seq, n, 1<<28)
	}
	return nil
}

func (f family) Workload(dev device.Device, s models.Sizes, seed uint64) (models.Workload, error) {
	m, err := f.LanguageModel(dev, s, seed)
	if err != nil {
		return nil, err
	}
	c := m.(*nn.Llama).Config
	return &models.TokenWorkload{LM: m, Sizes: s, Params: c.ParameterCount(),
		Model: fmt.Sprintf("Llama (%d layers, %d heads sharing %d key/value heads, width %d, SwiGLU %d, sequence %d, vocabulary %d, %d parameters)",
			c.Layers, c.Heads, c.KVHeads, c.Embd, c.Hidden, c.Seq, c.Vocab, c.ParameterCount())}, nil
}

// LanguageModel is the Llama of s.
func (f family) LanguageModel(dev device.Device, s models.Sizes, seed uint64) (models.LanguageModel, error) {
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	return nn.NewLlama(dev, Config(s, seed), rand.New(rand.NewPCG(seed, 0x11a)))
}

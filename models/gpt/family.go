package gpt

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	"ferry/models"
	"ferry/nn"
	"ferry/optim"
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
	return &workload{m: m, batch: s.Int("batch"), sizes: s}, nil
}

// LanguageModel is the GPT of s (its vocab and seq included).
func (f family) LanguageModel(dev device.Device, s models.Sizes, seed uint64) (models.LanguageModel, error) {
	if err := models.Validate(f, s); err != nil {
		return nil, err
	}
	return nn.NewGPT(dev, Config(s, seed), rand.New(rand.NewPCG(seed, 7)))
}

// workload is a GPT on random tokens against random targets.
type workload struct {
	m     *nn.GPT
	batch int
	sizes models.Sizes
}

func (g *workload) Parameters() []*ferry.Tensor { return g.m.Parameters() }
func (g *workload) Release()                    { nn.Release(g.m) }

func (g *workload) Data(dev device.Device, seed uint64) (input, target *ferry.Tensor) {
	return models.RandomTokens(dev, seed, g.batch, g.m.Config.Seq, g.m.Config.Vocab)
}

func (g *workload) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	g.m.CheckpointBlocks = recompute
	return g.m.Forward(x)
}

func (g *workload) Loss(y, target *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(y, target) }

func (g *workload) Optimizer(lr float32) optim.Stepper {
	if lr == 0 {
		lr = 3e-4
	}
	return optim.NewAdamW(g.m.Parameters(), lr)
}

func (g *workload) Describe() string {
	c := g.m.Config
	return fmt.Sprintf("GPT (%d layers, %d heads, embedding %d, sequence %d, vocabulary %d, %d parameters), batch %d, cross-entropy, AdamW",
		c.Layers, c.Heads, c.Embd, c.Seq, c.Vocab, c.ParameterCount(), g.batch)
}

func (g *workload) ParameterCount() int64 { return g.m.Config.ParameterCount() }

// ActivationBytes is one block's output.
func (g *workload) ActivationBytes() int64 {
	c := g.m.Config
	return 4 * int64(g.batch) * int64(c.Seq) * int64(c.Embd)
}

func (g *workload) MatmulShape() (rows, width int) { return g.batch * g.m.Config.Seq, g.m.Config.Embd }

// Smaller halves the batch, then the sequence at this batch.
func (g *workload) Smaller() []models.Variant { return models.SmallerSequences(g.sizes) }

package demo

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/device"
	"ferry/nn"
	"ferry/optim"
)

// A workload is the model a demo step trains: the origin MLP or a GPT.
// runMode owns everything else (devices, offload modes, measurements), so
// both models are measured the same way.
type workload interface {
	params() []*ferry.Tensor
	release()
	// data makes the step's input on dev and its target on dev's host (as
	// in the origin test, forward runs holding only parameters and input).
	data(dev device.Device, seed uint64) (input, target *ferry.Tensor)
	// forward runs the model on x. naive makes the origin user's copy of
	// each layer input to the host; recompute checkpoints each layer or
	// block.
	forward(tape *ferry.Tape, x *ferry.Tensor, naive, recompute bool) *ferry.Tensor
	loss(y, target *ferry.Tensor) *ferry.Tensor
	optimizer(lr float32) optim.Stepper
}

// Releasable optimizers free their state.
type releasable interface{ Release() }

func newWorkload(dev device.Device, cfg Config) (workload, error) {
	if cfg.Model == "gpt" {
		m, err := nn.NewGPT(dev, cfg.GPT, rand.New(rand.NewPCG(cfg.Seed, 0x6e7)))
		if err != nil {
			return nil, err
		}
		return &gptWorkload{m: m, batch: cfg.Batch}, nil
	}
	return newModel(dev, cfg)
}

func (m *model) data(dev device.Device, seed uint64) (input, target *ferry.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 0x1277))
	w := m.layers[0].Weight.Shape()[1]
	batch := m.batch
	input = ferry.Randn(dev, rng, batch, w)
	target = ferry.Randn(dev.Host(), rng, batch, w)
	return input, target
}

func (m *model) loss(y, target *ferry.Tensor) *ferry.Tensor { return ferry.MSELoss(y, target) }

func (m *model) optimizer(lr float32) optim.Stepper { return optim.NewSGD(m.params(), lr) }

// gptWorkload is a GPT on random tokens, cross-entropy against random
// targets, AdamW: the step of issue "GPT in ferry demo".
type gptWorkload struct {
	m     *nn.GPT
	batch int
}

func (g *gptWorkload) params() []*ferry.Tensor { return g.m.Parameters() }
func (g *gptWorkload) release()                { nn.Release(g.m) }

func (g *gptWorkload) data(dev device.Device, seed uint64) (input, target *ferry.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 0x1277))
	cfg := g.m.Config
	n := g.batch * cfg.Seq
	tok, tgt := make([]int32, n), make([]int32, n)
	if device.HasData(dev) {
		for i := range tok {
			tok[i], tgt[i] = int32(rng.IntN(cfg.Vocab)), int32(rng.IntN(cfg.Vocab))
		}
	}
	return ferry.FromInt32s(dev, tok, g.batch, cfg.Seq), ferry.FromInt32s(dev.Host(), tgt, g.batch, cfg.Seq)
}

func (g *gptWorkload) forward(tape *ferry.Tape, x *ferry.Tensor, naive, recompute bool) *ferry.Tensor {
	g.m.CheckpointBlocks = recompute
	return g.m.Forward(x)
}

func (g *gptWorkload) loss(y, target *ferry.Tensor) *ferry.Tensor {
	return ferry.CrossEntropy(y, target)
}

func (g *gptWorkload) optimizer(lr float32) optim.Stepper {
	return optim.NewAdamW(g.m.Parameters(), lr)
}

// describe sizes the workload for the result's header.
func describeGPT(cfg Config) string {
	c := cfg.GPT
	return fmt.Sprintf("GPT (%d layers, %d heads, embedding %d, sequence %d, vocabulary %d, %d parameters), batch %d, cross-entropy, AdamW",
		c.Layers, c.Heads, c.Embd, c.Seq, c.Vocab, c.ParameterCount(), cfg.Batch)
}

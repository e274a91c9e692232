// Package gpt trains GPT-2-style transformers (nn.GPT) on text: the task
// the Trainer runs for `ferry train text`, with held-out evaluation and
// the identity a checkpoint must match.
package gpt

import (
	"fmt"
	"math/rand/v2"

	"ferry"
	"ferry/data/text"
	"ferry/device"
	"ferry/nn"
	"ferry/train"
)

// TextTask is a byte-level GPT (vocabulary 256) on a corpus: batches are
// random windows drawn from a generator keyed by (seed, step, micro-batch),
// and the validation batches are fixed when the task is made.
type TextTask struct {
	GPT    *nn.GPT
	Text   *text.Text
	Rows   int    // sequences per micro-batch
	Seed   uint64 // of the initialisation, the batches and dropout
	Source string // the data as given, for the identity
	// DataID identifies the data's content (a hash), for the identity.
	DataID     string
	dev        device.Device
	valX, valY []*ferry.Tensor
}

// NewTextTask makes the GPT of cfg on dev and valBatches fixed validation
// batches of rows sequences.
func NewTextTask(dev device.Device, txt *text.Text, cfg nn.GPTConfig, rows, valBatches int, seed uint64) (*TextTask, error) {
	if err := txt.Check(cfg.Seq); err != nil {
		return nil, err
	}
	g, err := nn.NewGPT(dev, cfg, rand.New(rand.NewPCG(seed, 7)))
	if err != nil {
		return nil, err
	}
	t := &TextTask{GPT: g, Text: txt, Rows: rows, Seed: seed, dev: dev}
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < valBatches; i++ {
		x, y := text.Batch(dev, txt.Val, rng, rows, cfg.Seq)
		t.valX, t.valY = append(t.valX, x), append(t.valY, y)
	}
	return t, nil
}

// Describe is one line about the model and data.
func (t *TextTask) Describe() string {
	c := t.GPT.Config
	return fmt.Sprintf("byte-level GPT (%d layers, %d heads, embedding %d, context %d, dropout %g, %d parameters), batch %d, on %s",
		c.Layers, c.Heads, c.Embd, c.Seq, c.Dropout, c.ParameterCount(), t.Rows, t.Text.Source)
}

// Title titles the plots.
func (t *TextTask) Title() string {
	c := t.GPT.Config
	return fmt.Sprintf("byte-level GPT %dL %dH %dE, context %d, batch %d", c.Layers, c.Heads, c.Embd, c.Seq, t.Rows)
}

func (t *TextTask) Model() nn.Module { return t.GPT }

func (t *TextTask) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	t.GPT.CheckpointBlocks = recompute
	return t.GPT.Forward(x)
}

func (t *TextTask) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// Batch draws from a generator keyed by (seed, step, micro).
func (t *TextTask) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(t.Seed^0x7465787462617463, uint64(step)<<16|uint64(micro)))
	x, y = text.Batch(t.dev, t.Text.Train, rng, t.Rows, t.GPT.Config.Seq)
	return x, y, t.Rows * t.GPT.Config.Seq, nil
}

// Evaluate is the mean cross-entropy over the validation batches.
func (t *TextTask) Evaluate() ([]train.Metric, error) {
	var sum float64
	for i := range t.valX {
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				sum += float64(ferry.CrossEntropy(t.GPT.Forward(tape.Input(t.valX[i])), tape.Input(t.valY[i])).Item())
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return []train.Metric{{Name: "val_loss", Value: sum / float64(len(t.valX)), Better: train.Lower}}, nil
}

// Identity is what a checkpoint must match: the model's sizes, the batch,
// the seed and the data.
func (t *TextTask) Identity() map[string]any {
	c := t.GPT.Config
	id := map[string]any{"task": "text", "layers": c.Layers, "heads": c.Heads, "embd": c.Embd, "seq": c.Seq,
		"vocab": c.Vocab, "bias": c.Bias, "dropout": c.Dropout, "batch": t.Rows, "seed": t.Seed, "source": t.Source}
	if t.DataID != "" {
		id["data"] = t.DataID
	}
	return id
}

// Release frees the model and the validation batches.
func (t *TextTask) Release() {
	for i := range t.valX {
		t.valX[i].Release()
		t.valY[i].Release()
	}
	nn.Release(t.GPT)
}

package models

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/nn"
)

// TokenWorkload is a language model as the demo and the planner train it:
// random tokens against random targets (RandomTokens), cross-entropy,
// AdamW. A language family's Workload is one, around its model.
type TokenWorkload struct {
	LM LanguageModel
	// Sizes are the family's, with "batch" and "embd" among them.
	Sizes Sizes
	// Model describes the model for people ("GPT (12 layers, …)"), and
	// Params counts its parameters.
	Model  string
	Params int64
}

func (w *TokenWorkload) Parameters() []*ferry.Tensor { return w.LM.Parameters() }
func (w *TokenWorkload) Release()                    { nn.Release(w.LM) }

func (w *TokenWorkload) Data(dev device.Device, seed uint64) (input, target *ferry.Tensor) {
	return RandomTokens(dev, seed, w.Sizes.Int("batch"), w.LM.Context(), w.LM.Vocab())
}

func (w *TokenWorkload) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	w.LM.SetRecompute(recompute)
	return w.LM.Forward(x)
}

func (w *TokenWorkload) Loss(y, target *ferry.Tensor) *ferry.Tensor {
	return ferry.CrossEntropy(y, target)
}

// Optimizer is AdamW at 3e-4.
func (w *TokenWorkload) Optimizer() (string, float32) { return "adamw", 3e-4 }

func (w *TokenWorkload) Describe() string {
	return fmt.Sprintf("%s, batch %d, cross-entropy", w.Model, w.Sizes.Int("batch"))
}

func (w *TokenWorkload) ParameterCount() int64 { return w.Params }

// ActivationBytes is one block's output.
func (w *TokenWorkload) ActivationBytes() int64 {
	return 4 * int64(w.Sizes.Int("batch")) * int64(w.LM.Context()) * int64(w.Sizes.Int("embd"))
}

func (w *TokenWorkload) MatmulShape() (rows, width int) {
	return w.Sizes.Int("batch") * w.LM.Context(), w.Sizes.Int("embd")
}

// Smaller halves the batch, then the sequence at this batch.
func (w *TokenWorkload) Smaller() []Variant { return SmallerSequences(w.Sizes) }

package models

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"ferry"
	"ferry/data/text"
	"ferry/device"
	"ferry/nn"
	"ferry/train"
)

// TextTask is a language model on a byte-level corpus (vocabulary 256),
// the task `ferry train text` gives the Trainer: batches are random
// windows drawn from a generator keyed by (seed, step, micro-batch), and
// the validation batches are fixed when the task is made.
type TextTask struct {
	LM     LanguageModel
	Family string
	Sizes  Sizes
	Text   *text.Text
	Rows   int    // sequences per micro-batch
	Seed   uint64 // of the initialisation, the batches and dropout
	Source string // the data as given, for the identity
	// DataID identifies the data's content (a hash, not the path's
	// spelling), for the identity.
	DataID     string
	dev        device.Device
	valX, valY []*ferry.Tensor
}

// NewTextTask makes family f's language model at sizes s on dev (its
// "batch" the rows of a micro-batch) and valBatches fixed validation
// batches.
func NewTextTask(dev device.Device, txt *text.Text, f LanguageFamily, s Sizes, valBatches int, seed uint64) (*TextTask, error) {
	if err := txt.Check(s.Int("seq")); err != nil {
		return nil, err
	}
	if s.Int("vocab") < 256 {
		return nil, fmt.Errorf("%s: a byte-level model needs a vocabulary of 256, not %d", f.Name(), s.Int("vocab"))
	}
	lm, err := f.LanguageModel(dev, s, seed)
	if err != nil {
		return nil, err
	}
	t := &TextTask{LM: lm, Family: f.Name(), Sizes: s, Text: txt, Rows: s.Int("batch"), Seed: seed, dev: dev}
	rng := rand.New(rand.NewPCG(seed, 99))
	for i := 0; i < valBatches; i++ {
		x, y := text.Batch(dev, txt.Val, rng, t.Rows, lm.Context())
		t.valX, t.valY = append(t.valX, x), append(t.valY, y)
	}
	return t, nil
}

// Describe is one line about the model and data.
func (t *TextTask) Describe() string {
	var n int64
	for _, p := range t.LM.Parameters() {
		n += int64(p.Numel())
	}
	return fmt.Sprintf("byte-level %s (%s, %d parameters), batch %d, on %s", t.Family, t.sizes(", "), n, t.Rows, t.Text.Source)
}

// sizes lists the model's sizes but the batch and vocabulary.
func (t *TextTask) sizes(sep string) string {
	names := make([]string, 0, len(t.Sizes))
	for k := range t.Sizes {
		if k != "batch" && k != "vocab" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %g", k, t.Sizes[k])
	}
	return strings.Join(parts, sep)
}

// Title titles the plots.
func (t *TextTask) Title() string {
	return fmt.Sprintf("byte-level %s (%s), batch %d", t.Family, t.sizes(" "), t.Rows)
}

func (t *TextTask) Model() nn.Module { return t.LM }

func (t *TextTask) Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor {
	t.LM.SetRecompute(recompute)
	return t.LM.Forward(x)
}

func (t *TextTask) Loss(out, y *ferry.Tensor) *ferry.Tensor { return ferry.CrossEntropy(out, y) }

// Batch draws from a generator keyed by (seed, step, micro).
func (t *TextTask) Batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(t.Seed^0x7465787462617463, uint64(step)<<16|uint64(micro)))
	x, y = text.Batch(t.dev, t.Text.Train, rng, t.Rows, t.LM.Context())
	return x, y, t.Rows * t.LM.Context(), nil
}

// BatchShard is rows [rank·Rows, (rank+1)·Rows) of the batch Batch would
// draw at size·Rows rows (train.Sharder): N ranks see what one process at
// N times the batch sees.
func (t *TextTask) BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(t.Seed^0x7465787462617463, uint64(step)<<16|uint64(micro)))
	seq := t.LM.Context()
	xs, ys := text.Windows(t.Text.Train, rng, t.Rows*size, seq)
	lo, hi := rank*t.Rows*seq, (rank+1)*t.Rows*seq
	return ferry.FromInt32s(t.dev, xs[lo:hi], t.Rows, seq), ferry.FromInt32s(t.dev, ys[lo:hi], t.Rows, seq), t.Rows * seq, nil
}

// Evaluate is the mean cross-entropy over the validation batches.
func (t *TextTask) Evaluate() ([]train.Metric, error) {
	var sum float64
	for i := range t.valX {
		err := ferry.Step(func(tape *ferry.Tape) error {
			tape.NoGrad(func() {
				sum += float64(ferry.CrossEntropy(t.LM.Forward(tape.Input(t.valX[i])), tape.Input(t.valY[i])).Item())
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return []train.Metric{{Name: "val_loss", Value: sum / float64(len(t.valX)), Better: train.Lower}}, nil
}

// Identity is what a checkpoint must match: the family and its sizes (the
// batch among them), the seed and the data.
func (t *TextTask) Identity() map[string]any {
	id := map[string]any{"task": "text", "model": t.Family, "seed": t.Seed}
	for k, v := range t.Sizes {
		id[k] = v
	}
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
	nn.Release(t.LM)
}

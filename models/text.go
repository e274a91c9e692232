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

// TextTask is a language model on a corpus, the task `ferry train text`
// gives the Trainer: the text's bytes (vocabulary 256), or its token ids
// under a tokenizer (Tokens). Batches are random windows drawn from a
// generator keyed by (seed, step, micro-batch), and the validation
// batches are fixed when the task is made, from the seed alone, so that
// another TextTask of the same seed, rows and data draws the same.
type TextTask struct {
	LM     LanguageModel
	Family string
	Sizes  Sizes
	Text   *text.Text
	// Tokens, if set, are the corpus as token ids: batches are drawn from
	// them rather than from Text's bytes.
	Tokens *Tokens
	Rows   int    // sequences per micro-batch
	Seed   uint64 // of the initialisation, the batches and dropout
	Source string // the data as given, for the identity
	// DataID identifies the data's content (a hash, not the path's
	// spelling), for the identity.
	DataID string
	// IdentityExtra is added to the identity (the command's settings that
	// a reader of the checkpoint needs: where the data came from, …).
	IdentityExtra map[string]any
	dev           device.Device
	attach        func(*ferry.Tape) // AttachTapes
	// valX and valY are the validation batches of rank valAt[0] of
	// valAt[1] ranks (drawVal), in host memory: each goes to the device
	// for its own forward only, so that the device holds none of them
	// between evaluations (a plan's step holds none either); valBatches
	// is how many.
	valX, valY [][]int32
	valAt      [2]int
	valBatches int
}

// Tokens is a corpus as token ids: training and held-out, under the
// tokenizer Name, whose ids are below Vocab.
type Tokens struct {
	Name       string // the tokenizer ("bpe")
	Vocab      int
	Train, Val []int32
}

// Check says whether the ids can give sequences of length seq.
func (t *Tokens) Check(seq int, source string) error {
	const minSeqs = 4
	if len(t.Train) < minSeqs*(seq+1) || len(t.Val) < seq+1 {
		return fmt.Errorf("%s: %d tokens of training text and %d held out are too little for sequences of %d tokens "+
			"(give more text, or a smaller --seq)", source, len(t.Train), len(t.Val), seq)
	}
	return nil
}

// Tokenizer names the task's tokenizer: "byte", or Tokens' name.
func (t *TextTask) Tokenizer() string {
	if t.Tokens != nil {
		return t.Tokens.Name
	}
	return "byte"
}

// NewTextTask makes family f's language model at sizes s on dev (its
// "batch" the rows of a micro-batch) and valBatches fixed validation
// batches.
func NewTextTask(dev device.Device, txt *text.Text, f LanguageFamily, s Sizes, valBatches int, seed uint64) (*TextTask, error) {
	return NewTokenTask(dev, txt, nil, f, s, valBatches, seed)
}

// NewTokenTask is NewTextTask on txt's token ids tok (nil: its bytes).
func NewTokenTask(dev device.Device, txt *text.Text, tok *Tokens, f LanguageFamily, s Sizes, valBatches int, seed uint64) (*TextTask, error) {
	return NewTokenTaskOn(dev, dev, txt, tok, f, s, valBatches, seed)
}

// NewTokenTaskOn is NewTokenTask with the model's parameters made on
// paramDev: dev's host, for a model whose parameters stream from there
// (offload.Setup.ParamsOnHost), which then never takes device memory for
// all of them at once.
func NewTokenTaskOn(dev, paramDev device.Device, txt *text.Text, tok *Tokens, f LanguageFamily, s Sizes, valBatches int, seed uint64) (*TextTask, error) {
	if tok == nil {
		if err := txt.Check(s.Int("seq")); err != nil {
			return nil, err
		}
		if s.Int("vocab") < 256 {
			return nil, fmt.Errorf("%s: a byte-level model needs a vocabulary of 256, not %d", f.Name(), s.Int("vocab"))
		}
	} else {
		if err := tok.Check(s.Int("seq"), txt.Source); err != nil {
			return nil, err
		}
		if s.Int("vocab") < tok.Vocab {
			return nil, fmt.Errorf("%s: the %s tokenizer needs a vocabulary of %d, not %d", f.Name(), tok.Name, tok.Vocab, s.Int("vocab"))
		}
	}
	lm, err := f.LanguageModel(paramDev, s, seed)
	if err != nil {
		return nil, err
	}
	t := &TextTask{LM: lm, Family: f.Name(), Sizes: s, Text: txt, Tokens: tok, Rows: s.Int("batch"), Seed: seed, dev: dev, valBatches: valBatches}
	t.drawVal(0, 1)
	return t, nil
}

// drawVal makes the validation batches of rank of size ranks: rows
// [rank·Rows, (rank+1)·Rows) of each of the valBatches batches of
// size·Rows rows that one process at size times the batch draws, from
// the seed alone. Those of another rank or size are dropped.
func (t *TextTask) drawVal(rank, size int) {
	t.releaseVal()
	rng := rand.New(rand.NewPCG(t.Seed, 99))
	seq := t.LM.Context()
	lo, hi := rank*t.Rows*seq, (rank+1)*t.Rows*seq
	for i := 0; i < t.valBatches; i++ {
		var xs, ys []int32
		if t.Tokens != nil {
			xs, ys = text.Windows(t.Tokens.Val, rng, t.Rows*size, seq)
		} else {
			xs, ys = text.Windows(t.Text.Val, rng, t.Rows*size, seq)
		}
		t.valX = append(t.valX, xs[lo:hi:hi])
		t.valY = append(t.valY, ys[lo:hi:hi])
	}
	t.valAt = [2]int{rank, size}
}

func (t *TextTask) releaseVal() { t.valX, t.valY = nil, nil }

// windows draws n training windows from rng.
func (t *TextTask) windows(rng *rand.Rand, n int) (xs, ys []int32) {
	if t.Tokens != nil {
		return text.Windows(t.Tokens.Train, rng, n, t.LM.Context())
	}
	return text.Windows(t.Text.Train, rng, n, t.LM.Context())
}

// Describe is one line about the model and data.
func (t *TextTask) Describe() string {
	var n int64
	for _, p := range t.LM.Parameters() {
		n += int64(p.Numel())
	}
	return fmt.Sprintf("%s %s (%s, %d parameters), batch %d, on %s", t.level(), t.Family, t.sizes(", "), n, t.Rows, t.Text.Source)
}

func (t *TextTask) level() string {
	if t.Tokens != nil {
		return t.Tokens.Name + "-token"
	}
	return "byte-level"
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
	return fmt.Sprintf("%s %s (%s), batch %d", t.level(), t.Family, t.sizes(" "), t.Rows)
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
	xs, ys := t.windows(rng, t.Rows)
	seq := t.LM.Context()
	return ferry.FromInt32s(t.dev, xs, t.Rows, seq), ferry.FromInt32s(t.dev, ys, t.Rows, seq), t.Rows * seq, nil
}

// BatchShard is rows [rank·Rows, (rank+1)·Rows) of the batch Batch would
// draw at size·Rows rows (train.Sharder): N ranks see what one process at
// N times the batch sees.
func (t *TextTask) BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, items int, err error) {
	rng := rand.New(rand.NewPCG(t.Seed^0x7465787462617463, uint64(step)<<16|uint64(micro)))
	seq := t.LM.Context()
	xs, ys := t.windows(rng, t.Rows*size)
	lo, hi := rank*t.Rows*seq, (rank+1)*t.Rows*seq
	return ferry.FromInt32s(t.dev, xs[lo:hi], t.Rows, seq), ferry.FromInt32s(t.dev, ys[lo:hi], t.Rows, seq), t.Rows * seq, nil
}

// Evaluate is the mean cross-entropy over the validation batches.
func (t *TextTask) Evaluate() ([]train.Metric, error) {
	s, err := t.EvaluateShard(0, 1)
	if err != nil {
		return nil, err
	}
	return []train.Metric{{Name: "val_loss", Value: s[0].Sum / s[0].Count, Better: train.Lower}}, nil
}

// EvaluateShard is the sum of the cross-entropies of rank's rows of each
// validation batch one process at size times the batch draws, with the
// number of batches as the count (train.ShardEvaluator): each batch's
// loss is the mean of its ranks' losses, since every rank holds Rows of
// its rows.
func (t *TextTask) EvaluateShard(rank, size int) ([]train.MetricSum, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("text: rank %d of %d ranks", rank, size)
	}
	if t.valAt != [2]int{rank, size} {
		t.drawVal(rank, size)
	}
	var sum float64
	for i := range t.valX {
		seq := len(t.valX[i]) / t.Rows // as drawn
		err := ferry.Step(func(tape *ferry.Tape) error {
			if t.attach != nil {
				t.attach(tape)
			}
			// The batch goes to the device for this forward alone, as a
			// training batch does for its step: the tape releases it.
			x := tape.Adopt(ferry.FromInt32s(t.dev, t.valX[i], t.Rows, seq))
			y := tape.Adopt(ferry.FromInt32s(t.dev, t.valY[i], t.Rows, seq))
			tape.NoGrad(func() {
				sum += float64(ferry.CrossEntropy(t.LM.Forward(x), y).Item())
			})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return []train.MetricSum{{Name: "val_loss", Sum: sum, Count: float64(len(t.valX)), Better: train.Lower}}, nil
}

// AttachTapes sets what Evaluate attaches to its tapes (train.TapeAttacher).
func (t *TextTask) AttachTapes(attach func(*ferry.Tape)) { t.attach = attach }

// Identity is what a checkpoint must match: the family and its sizes (the
// batch among them), the tokenizer, the seed, the data and IdentityExtra.
func (t *TextTask) Identity() map[string]any {
	id := map[string]any{"task": "text", "model": t.Family, "seed": t.Seed, "tokenizer": t.Tokenizer()}
	for k, v := range t.IdentityExtra {
		id[k] = v
	}
	for k, v := range t.Sizes {
		id[k] = v
	}
	if t.DataID != "" {
		id["data"] = t.DataID
	}
	return id
}

// Release frees the model and drops the validation batches.
func (t *TextTask) Release() {
	t.releaseVal()
	nn.Release(t.LM)
}

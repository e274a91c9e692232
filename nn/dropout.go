package nn

import (
	"ferry"
	"ferry/internal/digest"
)

// DropoutState is shared by a model's dropout sites: the seed, the step
// that keys this step's masks, and train/eval mode. A training loop
// advances Step once per optimizer step (GPT.SetStep); a forward replayed
// for recomputation within a step draws the same masks.
//
// FirstRow is the index, in the batch a single process would draw, of
// this process's first row: under data parallelism rank r of a batch of
// B rows per rank holds rows [r·B, (r+1)·B) and sets FirstRow = r·B, so
// that its masks are the ones a single process drew for those rows. It is
// 0 in a single process.
type DropoutState struct {
	Seed, Step uint64
	FirstRow   uint64
	Training   bool
}

// Dropout is inverted dropout with probability P, drawn from the key
// (State.Seed, Op, State.Step); the identity in eval mode or with P = 0.
type Dropout struct {
	P     float32
	Op    uint64 // a stable id of the site (OpID of its module path)
	State *DropoutState
}

// OpID is the dropout op id of a module path (FNV-1a, 64 bits).
func OpID(path string) uint64 {
	h := digest.NewFNV64a()
	h.Write([]byte(path))
	return h.Sum64()
}

// key is the site's key for a tensor whose first axis is the batch, with
// perRow elements per batch row.
func (d *Dropout) key(perRow int) ferry.DropoutKey {
	return ferry.DropoutKey{Seed: d.State.Seed, Op: d.Op, Step: d.State.Step, Offset: d.State.FirstRow * uint64(perRow)}
}

// perRow is the number of elements in one row of x's first axis.
func perRow(x *ferry.Tensor) int {
	if s := x.Shape(); len(s) > 0 && s[0] > 0 {
		return x.Numel() / s[0]
	}
	return 0
}

func (d *Dropout) active() bool { return d.P > 0 && d.State != nil && d.State.Training }

// Forward returns dropout of x (a new handle).
func (d *Dropout) Forward(x *ferry.Tensor) *ferry.Tensor {
	if !d.active() {
		return x.Contiguous()
	}
	return ferry.Dropout(x, d.P, d.key(perRow(x)))
}

// Parameters: none.
func (d *Dropout) Parameters() []*ferry.Tensor { return nil }

// SetTraining switches the dropout on (true) or off (eval). The state is
// shared by the dropout sites of a model: it switches them all.
func (d *Dropout) SetTraining(on bool) {
	if d.State != nil {
		d.State.Training = on
	}
}

// SetStep sets the step that keys the masks (of every site sharing the
// state).
func (d *Dropout) SetStep(step uint64) {
	if d.State != nil {
		d.State.Step = step
	}
}

// SetFirstRow sets the global batch row of this process's first row (of
// every site sharing the state; DropoutState.FirstRow).
func (d *Dropout) SetFirstRow(row uint64) {
	if d.State != nil {
		d.State.FirstRow = row
	}
}

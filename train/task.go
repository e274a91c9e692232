package train

import (
	"ferry"
	"ferry/nn"
	"ferry/plan"
)

// Task is what a Trainer trains: a model, its batches and its loss. The
// Trainer owns the loop around it (schedule, accumulation, memory mode,
// evaluation, checkpoints, logs, the Plotter's charts). Optional abilities
// are further interfaces a Task may implement: Evaluator (and
// ShardEvaluator), Identifier, Describer, Planner, Sharder and
// TapeAttacher; the model may implement
// nn.Trainable and nn.Stepped.
type Task interface {
	// Model is the module whose parameters are trained and checkpointed.
	Model() nn.Module
	// Batch returns micro-batch micro (0-based) of step (1-based): inputs,
	// targets, and how many items (samples or tokens) they hold. It must
	// depend on (step, micro) alone, so that a resumed run sees the same
	// data. The Trainer releases x and y.
	Batch(step, micro int) (x, y *ferry.Tensor, items int, err error)
	// Forward runs the model on x, recorded on tape. With recompute, it
	// checkpoints each layer or block (nn.Checkpoint, tape.Checkpoint).
	Forward(tape *ferry.Tape, x *ferry.Tensor, recompute bool) *ferry.Tensor
	// Loss is the scalar loss of out against targets y.
	Loss(out, y *ferry.Tensor) *ferry.Tensor
}

// Evaluator is a Task that measures held-out metrics. The Trainer calls it
// with the model in evaluation mode (nn.Trainable) and outside any tape.
type Evaluator interface {
	Evaluate() ([]Metric, error)
}

// Identifier is a Task that says what a checkpoint must match to be
// resumed by it: model sizes, data, anything that changes the mathematics.
// The Trainer adds its own settings (optimizer, schedule, clipping,
// accumulation, memory mode does not count: every mode gives the same bits).
type Identifier interface {
	Identity() map[string]any
}

// Describer is a Task that titles its plots (PlotData.Title).
type Describer interface {
	Title() string
}

// Planner is a Task whose step the planner can record on the meta device
// (plan.Record), so that a policy file is checked against it before
// training. Config.Plan gives the same for a task that is not one.
type Planner interface {
	PlanModel() plan.Model
}

// Better says which way a metric improves.
type Better int

const (
	Lower  Better = iota // a loss
	Higher               // an accuracy
)

// Metric is one held-out figure.
type Metric struct {
	Name   string
	Value  float64
	Better Better
}

// Sharder is a Task that can give one rank's shard of a step's global
// batch: rows [rank·B, (rank+1)·B) of the batch of size·B rows a single
// process would draw for the same (step, micro), so that N ranks train
// as one process at N times the batch. The Trainer tells the model where
// its rows start (nn.SetFirstRow: rank·B), so that dropout draws the masks
// the single process draws for those rows.
type Sharder interface {
	BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, items int, err error)
}

// TapeAttacher is a Task whose Evaluate runs on tapes of its own: the
// Trainer hands it the memory mode's hooks that must see those tapes'
// ops (parameters streamed from host memory leave the device after their
// use there too).
type TapeAttacher interface {
	AttachTapes(attach func(*ferry.Tape))
}

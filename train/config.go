package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"ferry/device"
	"ferry/dist"
	"ferry/internal/fsx"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
)

// Schedule gives the learning rate of each step (1-based). Cosine is one.
type Schedule interface {
	At(step int) float64
}

// Config is everything about a run that is not the task.
type Config struct {
	// Steps is the number of optimizer steps of the whole run (a resumed
	// run continues to it).
	Steps int
	// Accum is the number of micro-batches per step (gradient
	// accumulation; 0 means 1). Each micro-batch's loss is scaled by
	// 1/Accum, so gradients are those of the mean.
	Accum int
	// Optimizer updates the model's parameters. Its LR is set from
	// Schedule before each step. Checkpoints need an optim.Stateful one.
	Optimizer optim.Optimizer
	// Schedule sets the learning rate; nil keeps the optimizer's.
	Schedule Schedule
	// Clip, if positive, clips gradients to this global L2 norm.
	Clip float64
	// Memory is the memory mode (offload.Setup): none, offload,
	// recompute, a policy…; the zero value is mode none.
	Memory offload.Setup
	// Plan, if set, records the task's step for the planner when the
	// task is not a Planner: a Memory.Policy is checked against it. It
	// lets a front end give the plan beside the task rather than wrap
	// the task, which would hide the task's other abilities (Evaluator,
	// Identifier, Sharder…).
	Plan func() plan.Model
	// EvalEvery is the number of steps between evaluations (0: only at
	// the end); an Evaluator also runs before the first step.
	EvalEvery int
	// LogEvery is the number of steps between Hooks.Step reports marked
	// Log and JSON log records (0: about 50 per run).
	LogEvery int
	// LogPath, if set, receives one JSON object per logging interval
	// (JSON lines); a resumed run appends.
	LogPath string
	// Plots, if set, draws the run's charts at its end (see Plotter;
	// train/plot.Writer writes the loss curves, accuracy and one step's
	// device memory by category as PNG and SVG).
	Plots Plotter
	// CheckpointDir, if set, receives checkpoints every CheckpointEvery
	// steps (0: at evaluations), at the end, and when stopped.
	CheckpointDir   string
	CheckpointEvery int
	// Keep is how many checkpoints stay (0 means 3).
	Keep int
	// Resume continues from the latest checkpoint in CheckpointDir. It
	// refuses a checkpoint whose identity (the task's, and every setting
	// of this Config that changes the mathematics) differs, but for the
	// keys in Overrides, which are accepted and recorded with
	// OverrideNote in the checkpoints written after.
	Resume       bool
	Overrides    []string
	OverrideNote string
	// StopAfter, if positive, stops after this many steps of this run (the
	// schedule still spans Steps), checkpointing if asked.
	StopAfter int
	// Seed is recorded in checkpoints (the task draws from it).
	Seed uint64
	// Unit names the items a batch holds ("samples", "tokens").
	Unit string
	// Hooks report progress.
	Hooks Hooks
	// Comm, if it has more than one rank, trains data-parallel: each rank
	// runs the task on its shard of every step's batch (Sharder, or else
	// micro-batch micro·size+rank), gradients are averaged across ranks
	// in buckets as backward produces them (dist.GradientReducer), and
	// every rank applies the same update. Rank 0 writes the log, plots
	// and checkpoints; every rank calls the hooks. New refuses ranks
	// whose settings differ (*RankMismatchError, on every rank alike);
	// a ShardEvaluator validates each rank's share. A rank whose New or
	// Run fails should end the job (dist.Abort), not Close: the others
	// may be waiting for it in a collective.
	Comm dist.Comm
	// DeviceComm, with Comm, is a communicator of the same ranks whose
	// collectives run on the device's memory and streams (NCCL:
	// ferry/dist/nccl.OnDevice): the gradients are then averaged there
	// (dist.DeviceReducer), never through host memory, while Comm still
	// carries the run's small collectives (the stop flag, the loss, the
	// settings' digest, evaluation sums). At Shard 1 and 2 the owners'
	// broadcasts run through it (dist.ShardOptions.Device), and at 2 the
	// scatterer's buckets (dist.ReducerOptions.Device); at Shard 3
	// ZeRO-3's gathers and reduce-scatters (dist.FullShardOptions.Device).
	DeviceComm dist.DeviceComm
	// BucketBytes sizes the reducer's buckets (0: dist's default, 25 MiB).
	BucketBytes int64
	// CheckEvery, with Comm, checks every CheckEvery steps (and at the
	// end) that the ranks' parameters are bit-identical; 0 checks at the
	// end only.
	CheckEvery int
	// Shard, with Comm of more than one rank, shards training state
	// across ranks (ZeRO): 0 not at all; 1 the optimizer state
	// (dist.ShardedOptimizer: each rank updates the parameters it owns
	// and broadcasts them); 2 the gradients as well (dist.GradientScatterer:
	// each rank keeps only its parameters' averaged gradients, and Clip
	// uses a norm all-reduced over ranks). The Optimizer must be an
	// optim.Stepper whose state is made at a parameter's first update
	// (every optimizer of package optim). 3 shards the parameters too
	// (dist.FullShard, ZeRO-3, FSDP): each parameter split by elements
	// across ranks, gathered around its uses, its gradient reduce-scattered;
	// the Trainer then builds the Optimizer anew over the shards from its
	// registration (optim.New with its name, learning rate,
	// hyperparameters and state placement), so the Optimizer must be one
	// registered with package optim, and the one given is never stepped.
	// Results equal Shard 0's bit for bit; checkpoints hold the whole
	// parameters and state (gathered to rank 0) and load at any rank
	// count and stage.
	Shard int
	// Precision is the element type of the model's matrix products in
	// forward (ferry.Tape.Autocast): device.Float32 (the zero value) or
	// device.BFloat16, mixed precision with float32 parameters, gradients
	// and optimizer state. It is part of the run's identity.
	Precision device.DType
	// ExportBF16 also writes each checkpoint's parameters rounded to
	// bfloat16 (Checkpointer.ExportBF16); the checkpoint itself keeps the
	// float32 master weights.
	ExportBF16 bool
}

// ConfigError is a setting of Config that cannot work, found by New
// before any training work. Field is the Config field's name (a dotted
// path into a field's struct, such as Memory.Policy), so that a
// command-line front end can name its own flag.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "train: " + e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}

// check fills in c's defaults (Accum, Keep, Unit) and checks the
// settings that need no task, files or memory: each on its own, and
// Precision against dev. Every problem is a *ConfigError.
func (c *Config) check(dev device.Device) error {
	if c.Steps < 1 {
		return configErr("Steps", "must be positive, got %d", c.Steps)
	}
	if c.Accum == 0 {
		c.Accum = 1
	}
	if c.Keep == 0 {
		c.Keep = 3
	}
	if c.Unit == "" {
		c.Unit = "items"
	}
	switch c.Precision {
	case device.Float32:
	case device.BFloat16:
		if _, ok := dev.Kernels().(device.ConvertKernels); !ok {
			return configErr("Precision", "%s has no bfloat16 tensors; train in float32 on it", dev.Name())
		}
	default:
		return configErr("Precision", "%s is not supported: want float32 or bfloat16", c.Precision)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Accum", c.Accum}, {"EvalEvery", c.EvalEvery}, {"LogEvery", c.LogEvery},
		{"CheckpointEvery", c.CheckpointEvery}, {"StopAfter", c.StopAfter}} {
		if f.v < 0 {
			return configErr(f.name, "must not be negative, got %d", f.v)
		}
	}
	if c.Optimizer == nil {
		return configErr("Optimizer", "none given")
	}
	if c.Shard < 0 || c.Shard > 3 {
		return configErr("Shard", "must be 0 (none), 1 (optimizer state), 2 (and gradients) or 3 (and parameters), got %d", c.Shard)
	}
	if !(c.Clip >= 0) || math.IsInf(c.Clip, 0) {
		return configErr("Clip", "must be a finite number ≥ 0, got %v", c.Clip)
	}
	if v, ok := c.Schedule.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return &ConfigError{"Schedule", err}
		}
	}
	return nil
}

// checkStatePlacement refuses gradients in host memory with an optimizer
// that keeps its state on the device, which could not use them.
func checkStatePlacement(c *Config) error {
	m := c.Memory
	grads := m.GradsOnHost || m.Policy != nil && m.Policy.Gradients == "host"
	if !grads {
		return nil
	}
	if h, ok := c.Optimizer.(optim.HostPlaced); !ok || !h.StateOnHost() {
		return configErr("Memory", "gradients in host memory need the optimizer's state there too (optim.OnHost, --optimizer-state host)")
	}
	return nil
}

// checkPolicy checks a policy file against the task's model, recorded on
// the meta device: every name, slot and shape must be the model's, and
// disk placements need a disk directory.
func checkPolicy(task Task, c *Config) error {
	pol := c.Memory.Policy
	record := c.Plan
	if p, ok := task.(Planner); ok {
		record = p.PlanModel
	}
	if record == nil {
		return fmt.Errorf("a policy is checked against the model's plan, and this task has none (it does not implement train.Planner, and Config.Plan is unset)")
	}
	info, err := plan.Record(record())
	if err != nil {
		return fmt.Errorf("recording the model on meta: %w", err)
	}
	if err := pol.Validate(info, c.Memory.DiskDir != ""); err != nil {
		return err
	}
	want := offload.PrecisionName(c.Precision)
	if s := pol.Precision; s != "" && s != want {
		return fmt.Errorf("it was planned at precision %s and the run is %s; plan again at %s, or train at %s", s, want, want, s)
	}
	if pol.OptimizerInBackward && (c.Clip > 0 || c.Accum > 1) {
		return fmt.Errorf("it updates each parameter inside backward, which leaves no moment for clipping or accumulation; " +
			"drop those, or plan for a larger budget")
	}
	return nil
}

// writableFile checks that path is, or can be created as, a regular file
// in an existing directory: pipes and devices are refused, since a FIFO
// with no reader would block the run and /dev/full would fail it late.
func writableFile(path string) error {
	if st, err := os.Stat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file; give a file path", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: the directory %s does not exist", path, dir)
	}
	return fsx.CheckWritableDir(dir)
}

package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"ferry"
	"ferry/device"
	"ferry/dist"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
	"ferry/trace"
	"ferry/trace/plots"
)

// Task is what a Trainer trains: a model, its batches and its loss. The
// Trainer owns the loop around it (schedule, accumulation, memory mode,
// evaluation, checkpoints, logs, plots). Optional abilities are further
// interfaces a Task may implement: Evaluator, Identifier, Describer and
// Planner; the model may implement nn.Trainable and nn.Stepped.
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

// Describer is a Task that titles its plots.
type Describer interface {
	Title() string
}

// Planner is a Task whose step the planner can record on the meta device
// (plan.Record), so that a policy file is checked against it before
// training.
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
	// EvalEvery is the number of steps between evaluations (0: only at
	// the end); an Evaluator also runs before the first step.
	EvalEvery int
	// LogEvery is the number of steps between Hooks.Step reports marked
	// Log and JSON log records (0: about 50 per run).
	LogEvery int
	// LogPath, if set, receives one JSON object per logging interval
	// (JSON lines); a resumed run appends.
	LogPath string
	// PlotDir, if set, receives the loss curves, accuracy (for Higher
	// metrics) and one step's device memory by category, PNG and SVG.
	PlotDir string
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
	// and checkpoints; every rank calls the hooks.
	Comm dist.Comm
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
	// (SGD, AdamW). Results equal Shard 0's bit for bit; checkpoints hold
	// the whole state (gathered to rank 0) and load at any rank count.
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

// Sharder is a Task that can give one rank's shard of a step's global
// batch: rows [rank·B, (rank+1)·B) of the batch of size·B rows a single
// process would draw for the same (step, micro), so that N ranks train
// as one process at N times the batch. The Trainer tells the model where
// its rows start (nn.SetFirstRow: rank·B), so that dropout draws the masks
// the single process draws for those rows.
type Sharder interface {
	BatchShard(step, micro, rank, size int) (x, y *ferry.Tensor, items int, err error)
}

// Hooks let a caller show a run. Each runs on the training goroutine, and
// none may keep the values it is given beyond the call.
type Hooks struct {
	// Start is called before the first step of this run.
	Start func(first, total int)
	// Step is called after every optimizer step.
	Step func(StepInfo)
	// Eval is called after each evaluation.
	Eval func(step int, metrics []Metric)
	// Message is called with lines for people (resumed from …).
	Message func(msg string)
	// Done is called when the loop ends, before the summary is made.
	Done func()

	// Inside a step, for measuring it (ferry demo does): StepStart before
	// its first micro-batch; ForwardStart and ForwardEnd around each
	// micro-batch's forward (ForwardEnd before the loss); GradsReady with
	// every gradient complete, before clipping and the optimizer, or, for
	// an optimizer inside backward, GradReady with each parameter before
	// its update; StepEnd after the optimizer.
	StepStart    func(step int)
	ForwardStart func(step, micro int)
	ForwardEnd   func(step, micro int)
	GradsReady   func(step int, params []*ferry.Tensor)
	GradReady    func(step int, p *ferry.Tensor)
	StepEnd      func(step int)
}

// StepInfo describes one finished step.
type StepInfo struct {
	Step, Total    int
	Loss           float64 // this step's mean loss over its micro-batches
	Smoothed       float64 // exponential moving average (0.9) of Loss
	LR             float64
	ItemsPerSecond float64 // since this run started
	Elapsed        float64 // seconds since this run started
	DeviceBytes    int64   // allocated on the device after the step
	Log            bool    // a logging interval ends here
}

// Point is one value of a curve: a loss at a step.
type Point = plots.Point

// History is the run's curves; a checkpoint carries it, so a resumed
// run's plots start at step 1.
type History struct {
	Train []Point            `json:"train"`
	Evals map[string][]Point `json:"evals,omitempty"`
	// Better says which way each metric improves.
	Better map[string]Better `json:"better,omitempty"`
}

// Result is what a run did.
type Result struct {
	Steps          int // the last step done
	FirstStep      int // the first step of this run (1 unless resumed)
	ResumedFrom    int
	Interrupted    bool // ctx was cancelled
	Stopped        bool // StopAfter
	WallSeconds    float64
	StepSeconds    float64 // median
	Items          int64   // items trained on by this run
	ItemsPerSecond float64
	LastLoss       float64 // the last step's loss
	SmoothedLoss   float64
	// Metrics are the last evaluation's; Best each metric's best.
	Metrics, Best  []Metric
	PeakBytes      map[string]int64 // device peak by category
	PeakTotalBytes int64
	Offload        *offload.Stats
	Checkpoint     string // the last checkpoint written
	Plots          []string
	History        *History
}

// ConfigError is a setting of Config that cannot work, found by New or
// at the start of Run. Field is the Config field's name, so that a
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

// Trainer runs a Task under a Config on a device.
type Trainer struct {
	dev  device.Device
	task Task
	cfg  Config
	mem  *offload.Memory
	ckpt *Checkpointer
	red  gradReducer // nil on one rank
	// shard is the sharded optimizer (Config.Shard > 0 on several
	// ranks), wrapping Config.Optimizer; nil otherwise.
	shard *dist.ShardedOptimizer
	rank  int
	// updates is the last step's in-backward updates: those that run
	// beside the device (parameters and optimizer state in host memory)
	// may still run during the next step, and report their errors once
	// settled.
	updates *optim.InBackwardErr
}

// settle waits for the updates still running beside the device and
// returns the first error they met: before what reads the whole state
// (a checkpoint, an evaluation, the run's end).
func (t *Trainer) settle() error {
	if err := t.mem.Settle(); err != nil {
		return err
	}
	if t.updates != nil {
		return t.updates.Err()
	}
	return nil
}

// gradReducer is what the Trainer needs of a dist.GradientReducer or, for
// ZeRO-2, a dist.GradientScatterer.
type gradReducer interface {
	GradReady(p *ferry.Tensor)
	Wait() error
	Broadcast(root int) error
	CheckParameters() error
}

// optimizer is the optimizer the Trainer steps: the sharded one if any.
func (t *Trainer) optimizer() optim.Optimizer {
	if t.shard != nil {
		return t.shard
	}
	return t.cfg.Optimizer
}

// gatheredState is an optimizer whose State is a state gathered from all
// ranks, for rank 0 to save.
type gatheredState struct {
	optim.Stateful
	st optim.State
}

func (g gatheredState) State() optim.State { return g.st }

// New checks cfg against task and dev and prepares the run: the memory
// mode, the checkpoint directory, the log and plot paths, so that every
// setting that cannot work fails here, before any training work.
func New(dev device.Device, task Task, cfg Config) (*Trainer, error) {
	if cfg.Steps < 1 {
		return nil, configErr("Steps", "must be positive, got %d", cfg.Steps)
	}
	if cfg.Accum == 0 {
		cfg.Accum = 1
	}
	if cfg.Keep == 0 {
		cfg.Keep = 3
	}
	if cfg.Unit == "" {
		cfg.Unit = "items"
	}
	switch cfg.Precision {
	case device.Float32:
	case device.BFloat16:
		if _, ok := dev.Kernels().(device.ConvertKernels); !ok {
			return nil, configErr("Precision", "%s has no bfloat16 tensors; train in float32 on it", dev.Name())
		}
	default:
		return nil, configErr("Precision", "%s is not supported: want float32 or bfloat16", cfg.Precision)
	}
	for name, v := range map[string]int{"Accum": cfg.Accum, "EvalEvery": cfg.EvalEvery, "LogEvery": cfg.LogEvery,
		"CheckpointEvery": cfg.CheckpointEvery, "StopAfter": cfg.StopAfter} {
		if v < 0 {
			return nil, configErr(name, "must not be negative, got %d", v)
		}
	}
	if cfg.Optimizer == nil {
		return nil, configErr("Optimizer", "none given")
	}
	if cfg.Shard < 0 || cfg.Shard > 2 {
		return nil, configErr("Shard", "must be 0 (none), 1 (optimizer state) or 2 (and gradients), got %d", cfg.Shard)
	}
	if !(cfg.Clip >= 0) || math.IsInf(cfg.Clip, 0) {
		return nil, configErr("Clip", "must be a finite number ≥ 0, got %v", cfg.Clip)
	}
	if v, ok := cfg.Schedule.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, err
		}
	}
	t := &Trainer{dev: dev, task: task, cfg: cfg}
	if cfg.Comm != nil {
		t.rank = cfg.Comm.Rank()
	}
	if pol := cfg.Memory.Policy; pol != nil {
		if err := t.checkPolicy(pol); err != nil {
			return nil, &ConfigError{"Memory.Policy", err}
		}
	}
	if cfg.CheckpointDir != "" {
		if _, ok := cfg.Optimizer.(optim.Stateful); !ok {
			return nil, fmt.Errorf("train: checkpoints need an optimizer whose state can be saved (optim.Stateful); %T is not", cfg.Optimizer)
		}
		t.ckpt = &Checkpointer{Dir: cfg.CheckpointDir, Keep: cfg.Keep, Overrides: cfg.Overrides, OverrideNote: cfg.OverrideNote, ExportBF16: cfg.ExportBF16}
		// Rank 0 alone probes (it alone writes): a probe makes and removes
		// the directory, which would race with another rank's probe.
		if t.rank == 0 {
			if err := writableDir(cfg.CheckpointDir); err != nil {
				return nil, &ConfigError{"CheckpointDir", err}
			}
		}
	} else if cfg.Resume {
		return nil, fmt.Errorf("train: resume needs a checkpoint directory")
	}
	if t.rank > 0 { // rank 0 writes the files
		cfg.PlotDir, cfg.LogPath = "", ""
		t.cfg = cfg
	}
	if cfg.PlotDir != "" {
		if err := writableDir(cfg.PlotDir); err != nil {
			return nil, &ConfigError{"PlotDir", err}
		}
	}
	if cfg.LogPath != "" {
		if err := writableFile(cfg.LogPath); err != nil {
			return nil, &ConfigError{"LogPath", err}
		}
	}
	if err := checkStatePlacement(cfg); err != nil {
		return nil, err
	}
	if cfg.Memory.Params == nil {
		cfg.Memory.Params = task.Model().Parameters()
	}
	mem, err := offload.NewMemory(dev, cfg.Memory)
	if err != nil {
		return nil, err
	}
	if mem.OptimizerInBackward() {
		if _, ok := cfg.Optimizer.(optim.Stepper); !ok {
			mem.Close()
			return nil, fmt.Errorf("train: the policy updates parameters inside backward, which needs an optim.Stepper; %T is not", cfg.Optimizer)
		}
	}
	t.mem = mem
	if cfg.Comm != nil && cfg.Comm.Size() > 1 {
		if mem.Streamer() != nil {
			mem.Close()
			return nil, configErr("Memory", "parameters or gradients in host memory are not yet supported with data-parallel training")
		}
		if mem.OptimizerInBackward() {
			mem.Close()
			return nil, configErr("Memory.Policy", "it updates each parameter inside backward, from this rank's gradient alone; "+
				"data-parallel training averages gradients first: plan for a larger budget")
		}
		params := task.Model().Parameters()
		var owners []int
		if cfg.Shard == 2 {
			sc, err := dist.NewGradientScatterer(cfg.Comm, params, dist.ReducerOptions{BucketBytes: cfg.BucketBytes})
			if err != nil {
				mem.Close()
				return nil, err
			}
			t.red, owners = sc, sc.Owners()
		} else {
			red, err := dist.NewGradientReducer(cfg.Comm, params, dist.ReducerOptions{BucketBytes: cfg.BucketBytes})
			if err != nil {
				mem.Close()
				return nil, err
			}
			t.red = red
		}
		if cfg.Shard > 0 {
			st, ok := cfg.Optimizer.(optim.Stepper)
			if !ok {
				mem.Close()
				return nil, configErr("Shard", "a sharded optimizer updates one parameter at a time, which needs an optim.Stepper; %T is not", cfg.Optimizer)
			}
			sh, err := dist.NewShardedOptimizer(cfg.Comm, st, params, dist.ShardOptions{BucketBytes: cfg.BucketBytes, Owners: owners})
			if err != nil {
				mem.Close()
				return nil, err
			}
			t.shard = sh
		}
	}
	return t, nil
}

// TapeAttacher is a Task whose Evaluate runs on tapes of its own: the
// Trainer hands it the memory mode's hooks that must see those tapes'
// ops (parameters streamed from host memory leave the device after their
// use there too).
type TapeAttacher interface {
	AttachTapes(attach func(*ferry.Tape))
}

// checkStatePlacement refuses gradients in host memory with an optimizer
// that keeps its state on the device, which could not use them.
func checkStatePlacement(cfg Config) error {
	m := cfg.Memory
	grads := m.GradsOnHost || m.Policy != nil && m.Policy.Gradients == "host"
	if !grads {
		return nil
	}
	if h, ok := cfg.Optimizer.(optim.HostPlaced); !ok || !h.StateOnHost() {
		return configErr("Memory", "gradients in host memory need the optimizer's state there too (optim.OnHost, --optimizer-state host)")
	}
	return nil
}

// writableDir makes dir (and its parents) if needed and checks that a
// file can be created in it, so a read-only directory fails before
// training rather than at the first save.
func writableDir(dir string) error {
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	created := err != nil
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if created {
		// Made for the check only: the run makes it again when it first
		// writes, so a run that fails before leaves nothing behind.
		defer os.Remove(dir)
	}
	f, err := os.CreateTemp(dir, ".ferry-write-test-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
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
	return writableDir(dir)
}

// checkPolicy checks a policy file against the task's model, recorded on
// the meta device: every name, slot and shape must be the model's, and
// disk placements need a disk directory.
func (t *Trainer) checkPolicy(pol *offload.Policy) error {
	p, ok := t.task.(Planner)
	if !ok {
		return fmt.Errorf("train: a policy is checked against the model's plan, and this task has none (it does not implement train.Planner)")
	}
	info, err := plan.Record(p.PlanModel())
	if err != nil {
		return fmt.Errorf("recording the model on meta: %w", err)
	}
	if err := pol.Validate(info, t.cfg.Memory.DiskDir != ""); err != nil {
		return err
	}
	want := offload.PrecisionName(t.cfg.Precision)
	if s := pol.Precision; s != "" && s != want {
		return fmt.Errorf("it was planned at precision %s and the run is %s; plan again at %s, or train at %s", s, want, want, s)
	}
	if pol.OptimizerInBackward && (t.cfg.Clip > 0 || t.cfg.Accum > 1) {
		return fmt.Errorf("it updates each parameter inside backward, which leaves no moment for clipping or accumulation; " +
			"drop those, or plan for a larger budget")
	}
	return nil
}

// Memory is the memory mode the Trainer set up (its statistics, for one).
func (t *Trainer) Memory() *offload.Memory { return t.mem }

// Close frees what the Trainer set up (the memory mode's buffers). The
// task, model and optimizer stay the caller's.
func (t *Trainer) Close() error { return t.mem.Close() }

// ErrNonFinite is wrapped by the error of a step whose loss or gradients
// are not finite. Such a step never reaches a checkpoint.
var ErrNonFinite = errors.New("not finite")

// Run trains until Config.Steps, StopAfter, or ctx is cancelled (then
// the step under way finishes, a checkpoint is written if asked, and the
// result says Interrupted). The error is nil for all three.
func (t *Trainer) Run(ctx context.Context) (*Result, error) {
	cfg, task, dev := t.cfg, t.task, t.dev
	model := task.Model()
	opt := t.optimizer()
	h := cfg.Hooks
	say := func(format string, args ...any) {
		if h.Message != nil {
			h.Message(fmt.Sprintf(format, args...))
		}
	}
	res := &Result{History: &History{Evals: map[string][]Point{}, Better: map[string]Better{}}}
	hist := res.History

	identity := t.identity()
	first := 1
	if t.ckpt != nil && t.rank == 0 {
		// One writer per checkpoint directory, for the whole run.
		unlock, err := t.ckpt.Lock()
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if t.ckpt != nil {
		st, _ := opt.(optim.Stateful)
		if cfg.Resume {
			meta, path, err := t.ckpt.Resume(model, st, identity)
			if err != nil {
				return nil, err
			}
			if meta != nil {
				first = meta.Step + 1
				res.ResumedFrom = meta.Step
				if len(meta.Extra) > 0 {
					if err := json.Unmarshal(meta.Extra, hist); err != nil {
						return nil, fmt.Errorf("checkpoint %s: its history: %w", path, err)
					}
					if hist.Evals == nil {
						hist.Evals = map[string][]Point{}
					}
					if hist.Better == nil {
						hist.Better = map[string]Better{}
					}
				}
				say("resumed from %s (step %d of %d)", path, meta.Step, cfg.Steps)
			} else {
				say("no checkpoint in %s yet; starting at step 1", cfg.CheckpointDir)
			}
		} else if latest, err := t.ckpt.Latest(); err != nil || latest != "" {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("checkpoint directory %s already holds checkpoints (latest %s); resume to continue that run, "+
				"or give another directory to start afresh (nothing was changed)", cfg.CheckpointDir, filepath.Base(latest))
		}
	}
	if first > cfg.Steps {
		return nil, fmt.Errorf("the checkpoint is at step %d, and this run has %d steps: nothing left to train (give more steps)", first-1, cfg.Steps)
	}
	if t.red != nil {
		// Rank 0's weights everywhere (they are equal already when every
		// rank seeds alike or resumed from one checkpoint).
		if err := t.red.Broadcast(0); err != nil {
			return nil, err
		}
	}
	res.FirstStep = first

	logEvery := cfg.LogEvery
	if logEvery == 0 {
		logEvery = max(1, cfg.Steps/50)
	}
	log, err := openLog(cfg.LogPath, first > 1)
	if err != nil {
		return nil, err
	}
	defer log.close()

	saveCheckpoint := func(step int) error {
		if t.ckpt == nil {
			return nil
		}
		if err := t.settle(); err != nil {
			return err
		}
		var st optim.Stateful
		if t.shard != nil {
			// Every rank sends its shard; rank 0 saves the whole state.
			gathered, release, err := t.shard.GatherState(0)
			if err != nil {
				return err
			}
			defer release()
			st = gatheredState{t.shard, gathered}
		} else {
			st = opt.(optim.Stateful)
		}
		if t.red != nil {
			// Rank 0 writes; no rank goes on before the file is whole.
			defer cfg.Comm.Barrier()
			if t.rank > 0 {
				res.Checkpoint = t.ckpt.PathFor(step)
				return nil
			}
		}
		extra, _ := json.Marshal(hist)
		path, err := t.ckpt.Save(model, st, Meta{Step: step, Seed: cfg.Seed, Identity: identity, Extra: extra,
			DataPosition: map[string]any{"step": step, "note": "batches are drawn from generators keyed by (seed, step)"}})
		if err != nil {
			return err
		}
		res.Checkpoint = path
		return nil
	}

	best := map[string]Metric{}
	evaluate := func(step int) ([]Metric, error) {
		ev, ok := task.(Evaluator)
		if !ok {
			return nil, nil
		}
		nn.SetTraining(model, false)
		defer nn.SetTraining(model, true)
		if ta, ok := task.(TapeAttacher); ok {
			ta.AttachTapes(t.mem.Attach)
		}
		ms, err := ev.Evaluate()
		if err == nil {
			err = t.settle()
		}
		if err != nil {
			return nil, fmt.Errorf("evaluation at step %d: %w", step, err)
		}
		for _, m := range ms {
			b, seen := best[m.Name]
			if !seen || (m.Better == Higher && m.Value > b.Value) || (m.Better == Lower && m.Value < b.Value) {
				best[m.Name] = m
			}
			hist.Evals[m.Name] = append(hist.Evals[m.Name], Point{Step: step, Value: m.Value})
			hist.Better[m.Name] = m.Better
		}
		if h.Eval != nil {
			h.Eval(step, ms)
		}
		return ms, nil
	}

	alloc := dev.Allocator()
	alloc.ResetPeak()
	var rec *trace.Recorder
	recordStep := -1
	if cfg.PlotDir != "" {
		recordStep = min(first+1, cfg.Steps) // a warm step, not the first
	}
	start := time.Now()
	var stepTimes []float64
	smoothed := math.NaN()
	if len(hist.Train) > 0 { // resumed: continue the curve's average
		smoothed = hist.Train[0].Value
		for _, p := range hist.Train[1:] {
			smoothed = 0.9*smoothed + 0.1*p.Value
		}
	}
	if first == 1 {
		ms, err := evaluate(0)
		if err != nil {
			return nil, err
		}
		res.Metrics = ms
		if ms != nil {
			if err := log.write(map[string]any{"step": 0, "eval": metricMap(ms)}); err != nil {
				return nil, err
			}
		}
	}
	if h.Start != nil {
		h.Start(first, cfg.Steps)
	}
	for step := first; step <= cfg.Steps; step++ {
		stop := ctx.Err() != nil
		if t.red != nil {
			// Every rank stops at the same step, or the others would wait
			// for it in the next collective.
			flag := []float32{0}
			if stop {
				flag[0] = 1
			}
			if err := cfg.Comm.AllReduce(flag).Synchronize(); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			stop = flag[0] > 0
		}
		if stop {
			res.Interrupted = true
			break
		}
		if cfg.StopAfter > 0 && step >= first+cfg.StopAfter {
			res.Stopped = true
			break
		}
		lr := opt.LR()
		if cfg.Schedule != nil {
			lr = cfg.Schedule.At(step)
			opt.SetLR(lr)
		}
		var stopRec func()
		if step == recordStep {
			rec = trace.New(nil)
			stopRec = rec.Allocator(dev.Name(), alloc)
		}
		t0 := time.Now()
		loss, items, err := t.step(step)
		if stopRec != nil {
			stopRec()
		}
		if err != nil {
			// Nothing of this step reaches a checkpoint: the optimizer has
			// not run (or, in backward, the step stops at the first error).
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		if t.red != nil {
			// The job's loss, the same on every rank; the items all
			// ranks trained on.
			buf := []float32{float32(loss), float32(items)}
			if err := cfg.Comm.AllReduce(buf).Synchronize(); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			loss, items = float64(buf[0])/float64(cfg.Comm.Size()), int64(buf[1])
			if (cfg.CheckEvery > 0 && step%cfg.CheckEvery == 0) || step == cfg.Steps {
				if err := t.red.CheckParameters(); err != nil {
					return nil, fmt.Errorf("step %d: %w", step, err)
				}
			}
		}
		stepTimes = append(stepTimes, time.Since(t0).Seconds())
		res.Items += items
		res.Steps, res.LastLoss = step, loss
		if math.IsNaN(smoothed) {
			smoothed = loss
		} else {
			smoothed = 0.9*smoothed + 0.1*loss
		}
		res.SmoothedLoss = smoothed
		hist.Train = append(hist.Train, Point{Step: step, Value: loss})
		elapsed := time.Since(start).Seconds()
		info := StepInfo{Step: step, Total: cfg.Steps, Loss: loss, Smoothed: smoothed, LR: lr, Elapsed: elapsed,
			ItemsPerSecond: float64(res.Items) / elapsed, DeviceBytes: alloc.Allocated()}
		var evalNow []Metric
		if (cfg.EvalEvery > 0 && step%cfg.EvalEvery == 0) || step == cfg.Steps {
			if evalNow, err = evaluate(step); err != nil {
				return nil, err
			}
			if evalNow != nil {
				res.Metrics = evalNow
			}
		}
		info.Log = step%logEvery == 0 || evalNow != nil || step == cfg.Steps
		if h.Step != nil {
			h.Step(info)
		}
		if info.Log {
			r := map[string]any{"step": step, "loss": loss, "smoothed_loss": smoothed, "lr": lr,
				cfg.Unit + "_per_second": info.ItemsPerSecond, "elapsed_seconds": elapsed, "device_bytes": info.DeviceBytes}
			if evalNow != nil {
				r["eval"] = metricMap(evalNow)
			}
			if err := log.write(r); err != nil {
				return nil, err
			}
		}
		every := cfg.CheckpointEvery
		if every == 0 {
			every = cfg.EvalEvery
		}
		if t.ckpt != nil && ((every > 0 && step%every == 0) || step == cfg.Steps) {
			if err := saveCheckpoint(step); err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
		}
	}
	if err := t.settle(); err != nil {
		return nil, fmt.Errorf("step %d: %w", res.Steps, err)
	}
	if h.Done != nil {
		h.Done()
	}
	if (res.Interrupted || res.Stopped) && t.ckpt != nil && res.Steps >= first && res.Checkpoint != t.ckpt.PathFor(res.Steps) {
		if err := saveCheckpoint(res.Steps); err != nil {
			return nil, fmt.Errorf("writing the final checkpoint: %w", err)
		}
	}
	res.WallSeconds = time.Since(start).Seconds()
	res.StepSeconds = Median(stepTimes)
	if res.WallSeconds > 0 {
		res.ItemsPerSecond = float64(res.Items) / res.WallSeconds
	}
	for _, m := range res.Metrics {
		res.Best = append(res.Best, best[m.Name])
	}
	st := alloc.Stats()
	res.PeakBytes = map[string]int64{}
	for c := device.Category(0); c < device.NumCategories; c++ {
		res.PeakBytes[c.String()] = st.ByCategory[c].Peak
	}
	res.PeakTotalBytes = st.AllocatedBytes.Peak
	if s, ok := t.mem.Stats(); ok {
		res.Offload = &s
	}
	if cfg.PlotDir != "" {
		title := ""
		if d, ok := task.(Describer); ok {
			title = d.Title()
		}
		files, err := writePlots(cfg.PlotDir, title, hist, rec, dev.Name())
		if err != nil {
			return nil, err
		}
		res.Plots = files
	}
	return res, nil
}

// step runs one optimizer step: Accum micro-batches forward and backward
// under the memory mode, then clipping and the optimizer. It returns the
// mean loss and the items trained on. A loss or gradient that is not
// finite stops the step before the optimizer changes anything.
func (t *Trainer) step(step int) (loss float64, items int64, err error) {
	cfg, task, opt, h := t.cfg, t.task, t.optimizer(), t.cfg.Hooks
	model := task.Model()
	inBwd := t.mem.OptimizerInBackward()
	if h.StepStart != nil {
		h.StepStart(step)
	}
	if err := t.mem.BeginStep(); err != nil {
		return 0, 0, err
	}
	for micro := 0; micro < cfg.Accum; micro++ {
		nn.SetStep(model, uint64((step-1)*cfg.Accum+micro+1))
		x, y, n, err := t.batch(step, micro)
		if err != nil {
			return 0, 0, err
		}
		last := micro == cfg.Accum-1
		items += int64(n)
		err = ferry.Step(func(tape *ferry.Tape) error {
			xin := tape.Input(x)
			if h.ForwardStart != nil {
				h.ForwardStart(step, micro)
			}
			var out *ferry.Tensor
			forward := func() {
				tape.Autocast(cfg.Precision, func() { out = task.Forward(tape, xin, t.mem.Recompute()) })
			}
			var l *ferry.Tensor
			if t.mem.HooksOverLoss() {
				// The hooks see the loss's saves too, as the planner
				// records a step.
				t.mem.Begin(tape)
				forward()
				if h.ForwardEnd != nil {
					h.ForwardEnd(step, micro)
				}
				l = task.Loss(out, tape.Input(y))
				t.mem.End(tape)
			} else {
				t.mem.Forward(tape, forward)
				if h.ForwardEnd != nil {
					h.ForwardEnd(step, micro)
				}
				l = task.Loss(out, tape.Input(y))
			}
			out.Release()
			lossOf := func() error {
				if !device.HasData(l.Device()) {
					return nil // the meta device: shapes, no values
				}
				lv := float64(l.Item())
				if math.IsNaN(lv) || math.IsInf(lv, 0) {
					return fmt.Errorf("the loss is %v (%w); lower the learning rate or clip gradients", lv, ErrNonFinite)
				}
				loss += lv / float64(cfg.Accum)
				return nil
			}
			scaled := l
			if cfg.Accum > 1 {
				scaled = ferry.Scale(l, 1/float32(cfg.Accum))
			}
			if inBwd {
				// Parameters change inside backward: the loss is read,
				// and checked, before.
				if err := lossOf(); err != nil {
					return err
				}
				opts, e := optim.InBackward(opt.(optim.Stepper))
				if h.GradReady != nil {
					update := opts.GradReady
					opts.GradReady = func(p *ferry.Tensor) { h.GradReady(step, p); update(p) }
				}
				err := t.mem.Backward(scaled, opts)
				// The last step's updates beside the device had all run
				// when this backward began.
				if last := t.updates; err == nil && last != nil {
					err = last.Err()
				}
				t.updates = e
				if err != nil {
					return err
				}
				return e.Err()
			}
			var err error
			if t.red != nil && last {
				// The buckets' all-reduces start as backward completes
				// them, overlapping the rest of backward.
				err = scaled.BackwardWith(ferry.BackwardOptions{GradReady: t.red.GradReady})
			} else {
				err = t.mem.Backward(scaled, ferry.BackwardOptions{})
			}
			if err != nil {
				return err
			}
			// Read after backward is queued, so that reading it does not
			// hold the device between forward and backward.
			return lossOf()
		})
		x.Release()
		y.Release()
		if err != nil {
			_ = t.mem.Settle() // no update runs beside while the gradients go
			opt.ZeroGrad()
			return 0, 0, err
		}
	}
	if !inBwd {
		if t.red != nil {
			if err := t.red.Wait(); err != nil { // the gradients are now the ranks' mean
				return 0, 0, err
			}
		}
		params := model.Parameters()
		if h.GradsReady != nil {
			h.GradsReady(step, params)
		}
		if cfg.Clip > 0 {
			// A non-finite norm stops the step before the optimizer writes
			// it into the weights. (Without clipping, a non-finite
			// gradient shows as the next step's loss, and a checkpoint
			// refuses non-finite weights, so the last good one stays.)
			clip := optim.ClipGradNorm
			if t.shard != nil && cfg.Shard == 2 { // each rank holds its own gradients only
				clip = func(_ []*ferry.Tensor, max float64) (float64, error) { return t.shard.ClipGradNorm(max) }
			}
			norm, err := clip(params, cfg.Clip)
			if math.IsNaN(norm) || math.IsInf(norm, 0) {
				opt.ZeroGrad()
				return 0, 0, fmt.Errorf("the gradients' norm is %v (%w); lower the learning rate", norm, ErrNonFinite)
			}
			if err != nil {
				opt.ZeroGrad()
				return 0, 0, err
			}
		}
		if err := opt.Step(); err != nil {
			return 0, 0, err
		}
		opt.ZeroGrad()
	}
	if err := t.mem.EndStep(); err != nil {
		return 0, 0, err
	}
	if h.StepEnd != nil {
		h.StepEnd(step)
	}
	return loss, items, nil
}

// batch is this rank's micro-batch micro of step.
func (t *Trainer) batch(step, micro int) (x, y *ferry.Tensor, items int, err error) {
	if t.red == nil {
		return t.task.Batch(step, micro)
	}
	size := t.cfg.Comm.Size()
	if s, ok := t.task.(Sharder); ok {
		x, y, items, err = s.BatchShard(step, micro, t.rank, size)
		if err == nil && x != nil && len(x.Shape()) > 0 {
			// This rank's rows start at rank·rows of the batch one process
			// draws: its dropout masks are that process's for those rows.
			nn.SetFirstRow(t.task.Model(), uint64(t.rank*x.Shape()[0]))
		}
		return x, y, items, err
	}
	return t.task.Batch(step, micro*size+t.rank)
}

// identity is the task's identity with the Trainer's own settings that
// change the mathematics: a resumed run that differed in any of them would
// not continue the same run bit for bit. (The memory mode is not among
// them: every mode gives the same bits.)
func (t *Trainer) identity() map[string]any {
	cfg := t.cfg
	id := map[string]any{}
	if i, ok := t.task.(Identifier); ok {
		for k, v := range i.Identity() {
			id[k] = v
		}
	}
	id["steps"], id["accum"], id["clip"], id["seed"] = cfg.Steps, cfg.Accum, cfg.Clip, cfg.Seed
	if cfg.Precision != device.Float32 { // (absent in float32, as in checkpoints from before it existed)
		id["precision"] = cfg.Precision.String()
	}
	switch s := cfg.Schedule.(type) {
	case nil:
		id["lr"] = cfg.Optimizer.LR()
	case Cosine:
		id["lr"], id["min_lr"], id["warmup"] = s.Peak, s.Min, s.Warmup
	default:
		id["schedule"] = fmt.Sprintf("%T %+v", s, s)
	}
	id["optimizer"] = cfg.Optimizer.Name()
	for k, v := range cfg.Optimizer.Hyper() {
		id[k] = v
	}
	if cfg.Comm != nil && cfg.Comm.Size() > 1 {
		id["ranks"] = cfg.Comm.Size()
	}
	return id
}

func metricMap(ms []Metric) map[string]float64 {
	m := make(map[string]float64, len(ms))
	for _, x := range ms {
		m[x.Name] = x.Value
	}
	return m
}

// Median is the median of xs (the mean of the middle two for an even
// count), NaN for none: what a run reports as its step time.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

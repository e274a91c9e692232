package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/dist"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
	"ferry/train"
	"ferry/train/plot"
)

// The train commands parse flags into a train.Config and a task (from
// package models/…), run them with train.Trainer, and print the result.

// trainOptions are the flags every train command has.
type trainOptions struct {
	device, mode, policy, diskDir string
	offload                       bool
	batch, steps, warmup, accum   int
	evalEvery, logEvery           int
	seed                          uint64
	lr, minLR, clip               float64
	weightDecay, momentum         float64
	optimizer, optimizerState     string
	optimizerArgs                 string
	lrScale                       float64            // the command's --lr default over the optimizer's
	hyper                         map[string]float64 // the optimizer's hyperparameters, lr included (validate)
	state                         *stateFlags
	gradsOnHost                   bool
	paramsOnHost                  []string
	precision, saveDType          string
	precisionType                 device.DType
	exportBF16                    bool // --save-dtype bf16
	logPath, plotDir              string
	checkpointDir                 string
	checkpointEvery, keep         int
	resume                        bool
	override                      string
	stopAfter, checkEvery, zero   int
	unit                          string // "samples" or "tokens"
	comm                          dist.Comm
	pol                           *offload.Policy // --policy, read by validate

	timeout *collectiveTimeout // --collective-timeout (ranks.go)
}

// checkOutputs checks the output flags (outputs.go) before any data is
// read. The directories that a check may make and remove again are
// checked on rank 0 alone, which alone writes there: two ranks' checks
// would race. The disk tier, every rank's, must exist already.
func (o *trainOptions) checkOutputs() error {
	if o.diskDir != "" {
		if err := checkOutputDir("--disk-dir", o.diskDir, true); err != nil {
			return err
		}
	}
	if o.comm != nil && o.comm.Rank() > 0 {
		return nil
	}
	if o.logPath != "" {
		if err := checkOutputFile("--log", o.logPath, false); err != nil {
			return err
		}
	}
	if o.plotDir != "" {
		if err := checkOutputDir("--plot", o.plotDir, false); err != nil {
			return err
		}
	}
	if o.checkpointDir != "" {
		if err := checkOutputDir("--checkpoint-dir", o.checkpointDir, false); err != nil {
			return err
		}
	}
	return nil
}

// checkWorld warns, in one line each, of the flags that apply to
// data-parallel ranks alone when this process runs alone (set: the flags
// given): they do nothing here. A warning, not an error, so that one
// command line serves under mpirun and without it.
func (o *trainOptions) checkWorld(set map[string]bool) {
	if o.comm == nil || o.comm.Size() > 1 {
		return
	}
	if set["zero"] && o.zero > 0 {
		warn("--zero %d shards training state across mpirun's ranks; this process runs alone, so it shards nothing", o.zero)
	}
	if set["check-every"] {
		warn("--check-every compares the ranks' parameters; this process runs alone, so there is nothing to compare")
	}
}

// trainModes are the memory modes of a training run: the demo's, less
// naive (which trains the same as none and only shows the origin mistake).
var trainModes = func() []string {
	var names []string
	for _, m := range offload.Modes() {
		names = append(names, string(m))
	}
	return names
}()

// register declares the flags on fs; the default learning rate is
// lrScale times the optimizer's recipe's (optim.Registration).
func (o *trainOptions) register(fs *flag.FlagSet, lrScale float64, optimizer string) {
	o.lrScale = lrScale
	fs.StringVar(&o.device, "device", "cpu", "device to train on: cpu or cuda[:N] (under mpirun, cuda is the GPU of the rank's place on its machine)")
	fs.StringVar(&o.mode, "mode", string(offload.None), "memory mode: "+strings.Join(trainModes, ", "))
	fs.BoolVar(&o.offload, "offload", false, "offload saved activations (the same as --mode offload)")
	fs.StringVar(&o.policy, "policy", "", "policy file written by ferry plan --out (runs mode policy)")
	fs.StringVar(&o.diskDir, "disk-dir", "", "directory for the offloader's disk tier (offload-disk, or a policy with disk placements)")
	fs.IntVar(&o.accum, "accum", 1, "micro-batches per optimizer step (gradient accumulation)")
	fs.Float64Var(&o.lr, "lr", 0, lrUsage(lrScale))
	fs.Float64Var(&o.minLR, "min-lr", 0, "learning rate at the end of the cosine decay (default: a tenth of --lr)")
	fs.IntVar(&o.warmup, "warmup", 0, "linear warm-up steps (default: a tenth of the steps)")
	fs.Float64Var(&o.clip, "clip", 0, "clip gradients to this global L2 norm (0: no clipping)")
	fs.StringVar(&o.optimizer, "optimizer", optimizer, optimizerUsage(optimizer))
	fs.StringVar(&o.optimizerArgs, "optimizer-args", "", "the optimizer's other hyperparameters, key=value[,key=value] (adamw: beta1=0.9,beta2=0.95,eps=1e-8); defaults: the optimizer's recipe")
	fs.StringVar(&o.optimizerState, "optimizer-state", "device", "where the optimizer keeps its state and steps: device, or host (host memory, updated on the CPU cores: no optimizer state on the device)")
	o.state = defineStateFlags(fs)
	fs.StringVar(&o.precision, "precision", "fp32", precisionUsage)
	fs.StringVar(&o.saveDType, "save-dtype", "fp32", "element type of the saved model: fp32 (model.safetensors, the master weights each checkpoint resumes from), or bf16 to also write model.bf16.safetensors (rounded, half the bytes) in each checkpoint")
	fs.Float64Var(&o.weightDecay, "weight-decay", 0, "weight decay (default: the optimizer's recipe: "+recipeUsage("weight_decay")+")")
	fs.Float64Var(&o.momentum, "momentum", 0, "momentum, for an optimizer that takes it (default: the optimizer's recipe: "+recipeUsage("momentum")+")")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the initialisation, the data order and dropout")
	fs.IntVar(&o.logEvery, "log-every", 0, "steps between progress lines and --log records (default: about 50 per run)")
	fs.StringVar(&o.logPath, "log", "", "append one JSON object per logging interval to this file (JSON lines)")
	fs.StringVar(&o.plotDir, "plot", "", "write loss curves and one step's memory by category (PNG and SVG) to this directory")
	fs.StringVar(&o.checkpointDir, "checkpoint-dir", "", "write checkpoints to this directory")
	fs.IntVar(&o.checkpointEvery, "checkpoint-every", 0, "steps between checkpoints (default: at evaluations; 0 with --checkpoint-dir)")
	fs.IntVar(&o.keep, "keep", 3, "checkpoints to keep in --checkpoint-dir")
	fs.BoolVar(&o.resume, "resume", false, "resume from the latest checkpoint in --checkpoint-dir")
	fs.StringVar(&o.override, "override", "", "with --resume: settings that may differ from the checkpoint's, comma-separated (lr,steps,clip,…), recorded in the checkpoints written after")
	fs.IntVar(&o.zero, "zero", 0, "under mpirun: shard the optimizer state across the ranks (1: ZeRO-1), the gradients too (2: ZeRO-2), and the parameters too (3: ZeRO-3, FSDP)")
	fs.IntVar(&o.checkEvery, "check-every", 0, "under mpirun: check every N steps that the ranks' parameters are bit-identical (0: at the end)")
	fs.IntVar(&o.stopAfter, "stop-after", 0, "stop after this many steps of this run (the schedule still spans --steps), checkpointing if asked; resume later with --resume")
	o.registerRanks(fs)
}

// validate checks the shared flags; set names the flags given.
func (o *trainOptions) validate(set map[string]bool) error {
	if err := positive(set, map[string]int{"batch": o.batch, "accum": o.accum, "log-every": o.logEvery,
		"checkpoint-every": o.checkpointEvery, "keep": o.keep, "steps": o.steps, "eval-every": o.evalEvery,
		"stop-after": o.stopAfter, "check-every": o.checkEvery}); err != nil {
		return err
	}
	if set["warmup"] && o.warmup < 0 {
		return fmt.Errorf("--warmup must be ≥ 0, got %d", o.warmup)
	}
	if set["min-lr"] && !(o.minLR >= 0) {
		return fmt.Errorf("--min-lr must be ≥ 0, got %v", o.minLR)
	}
	if o.batch > maxTrainDim || o.steps > maxTrainDim || o.accum > maxTrainDim {
		return fmt.Errorf("--batch, --steps and --accum must be at most %d", maxTrainDim)
	}
	if o.offload {
		if set["mode"] && o.mode != string(offload.Offload) {
			return fmt.Errorf("--offload and --mode %s disagree; give one", o.mode)
		}
		o.mode = string(offload.Offload)
	}
	if !contains(trainModes, o.mode) {
		return fmt.Errorf("--mode %q is not one of %s", o.mode, strings.Join(trainModes, ", "))
	}
	if o.policy != "" && (set["mode"] || o.offload) {
		// The policy's placements replace any mode's: the run would
		// say one mode and run another.
		return fmt.Errorf("--policy runs mode policy (its placements, through the offloader), and cannot be combined with --mode %s: drop --mode (or --offload)", o.mode)
	}
	if o.policy != "" {
		o.mode = string(offload.PolicyMode) // what the start line and the summary say
	}
	if o.diskDir != "" && o.policy == "" && o.mode != string(offload.OffloadDisk) {
		// Modes offload and recompute-offload keep what they offload in
		// host memory, without limit: their disk tier takes nothing.
		return fmt.Errorf("--disk-dir is the disk tier of mode offload-disk (or of a policy's disk placements), and mode %s writes nothing to disk: drop --disk-dir, or give --mode offload-disk", o.mode)
	}
	if err := checkOptimizer(o.optimizer); err != nil {
		return err
	}
	if o.optimizerState != "device" && o.optimizerState != "host" {
		return fmt.Errorf("--optimizer-state %q: want device or host", o.optimizerState)
	}
	prec, err := parsePrecision(o.precision)
	if err != nil {
		return err
	}
	o.precisionType = prec
	save, err := parseFloatType("--save-dtype", o.saveDType)
	if err != nil {
		return err
	}
	o.exportBF16 = save == device.BFloat16
	if o.policy != "" {
		pol, err := offload.LoadPolicy(o.policy)
		if err != nil {
			return err
		}
		// The plan's optimizer and its state's place hold for its peak:
		// take them, and refuse a flag that contradicts them.
		if s := pol.Optimizer; s != "" {
			if set["optimizer"] && o.optimizer != s {
				return fmt.Errorf("--policy %s was planned with --optimizer %s; drop --optimizer %s, or plan again with it", o.policy, s, o.optimizer)
			}
			if err := checkOptimizer(s); err != nil {
				return fmt.Errorf("--policy %s: %w", o.policy, err)
			}
			o.optimizer = s
		}
		// A policy that records no place planned the state on the
		// device: a flag that says host contradicts it as much as the
		// reverse.
		s := policyStateOn(pol)
		if set["optimizer-state"] && o.optimizerState != s {
			return fmt.Errorf("--policy %s was planned with the optimizer state on the %s; drop --optimizer-state %s, or plan again with it", o.policy, s, o.optimizerState)
		}
		o.optimizerState = s
		if o.diskDir != "" && !pol.UsesDisk() {
			return fmt.Errorf("--policy %s places nothing on disk, so --disk-dir would be ignored: drop it", o.policy)
		}
		if o.precisionType, err = policyPrecision(o.policy, pol, set["precision"], o.precision, o.precisionType); err != nil {
			return err
		}
		o.pol = pol
	}
	if o.gradsOnHost, o.paramsOnHost, err = o.state.resolve(set, o.pol, o.policy, o.optimizerState); err != nil {
		return err
	}
	if err := o.resolveHyper(set); err != nil {
		return err
	}
	if !set["min-lr"] {
		o.minLR = o.lr / 10
	}
	if !set["warmup"] {
		o.warmup = -1 // a tenth of the steps, once they are known
	}
	if err := finiteFlag("clip", o.clip); err != nil {
		return err
	}
	if o.zero < 0 || o.zero > 3 {
		return fmt.Errorf("--zero must be 0, 1, 2 or 3, got %d", o.zero)
	}
	if o.override != "" && !o.resume {
		return fmt.Errorf("--override applies to --resume")
	}
	if (o.resume || set["checkpoint-every"] || set["keep"]) && o.checkpointDir == "" {
		return fmt.Errorf("--resume, --checkpoint-every and --keep need --checkpoint-dir")
	}
	return nil
}

// resolveHyper fills o.hyper: the optimizer's recipe (optim.Registration)
// with the command's learning-rate scale, then the flags given over it.
// A flag the optimizer does not take is an error, not ignored.
func (o *trainOptions) resolveHyper(set map[string]bool) error {
	r, err := optim.Lookup(o.optimizer)
	if err != nil {
		return err
	}
	h := r.Hyper(true)
	h["lr"] *= o.lrScale
	if set["lr"] {
		if !(o.lr > 0) || math.IsInf(o.lr, 0) {
			return fmt.Errorf("--lr must be a positive finite number, got %v", o.lr)
		}
		h["lr"] = o.lr
	}
	for _, f := range []struct {
		flag, key string
		v         float64
	}{{"weight-decay", "weight_decay", o.weightDecay}, {"momentum", "momentum", o.momentum}} {
		if !set[f.flag] {
			continue
		}
		if _, ok := h[f.key]; !ok {
			return fmt.Errorf("--%s: %s takes no %s (its hyperparameters: %s)", f.flag, o.optimizer, f.key, strings.Join(optim.HyperNames(r), ", "))
		}
		if err := finiteFlag(f.flag, f.v); err != nil {
			return err
		}
		h[f.key] = f.v
	}
	if set["momentum"] && o.momentum >= 1 {
		return fmt.Errorf("--momentum must be below 1, got %v", o.momentum)
	}
	if err := parseOptimizerArgs(o.optimizer, o.optimizerArgs, h); err != nil {
		return err
	}
	// Built once over no parameters, so that a value the optimizer
	// refuses fails here, naming it, before any data is read.
	probe, err := optim.New(o.optimizer, nil, h)
	if err != nil {
		return fmt.Errorf("--optimizer %s: %w", o.optimizer, err)
	}
	probe.Release()
	o.hyper, o.lr = h, h["lr"]
	return nil
}

// finiteFlag refuses a negative or non-finite value of --name.
func finiteFlag(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("--%s must be a finite number ≥ 0, got %v", name, v)
	}
	return nil
}

// recipeUsage lists each optimizer's recipe value of key, for a flag's
// usage.
func recipeUsage(key string) string {
	var parts []string
	for _, n := range optim.Names() {
		r, _ := optim.Lookup(n)
		if v, ok := r.Hyper(true)[key]; ok {
			parts = append(parts, fmt.Sprintf("%s %g", n, v))
		}
	}
	return strings.Join(parts, ", ")
}

// maxTrainDim bounds sizes and counts given on the command line, so that
// products of them cannot overflow before the memory checks see them.
const maxTrainDim = 1 << 24

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// trainSummary is the --json object (and the source of the human one).
type trainSummary struct {
	Task           string   `json:"task"`
	Device         string   `json:"device"`
	Mode           string   `json:"mode"`
	Optimizer      string   `json:"optimizer"`       // --optimizer
	OptimizerState string   `json:"optimizer_state"` // device or host (--optimizer-state)
	Gradients      string   `json:"gradients"`       // device or host (--gradients)
	ParamsOnHost   []string `json:"parameters_on_host,omitempty"`
	// HostState is what moved between the device and the parameters and
	// gradients in host memory.
	HostState *offload.StreamStats `json:"host_state,omitempty"`
	Precision string               `json:"precision"` // fp32 or bf16 (--precision)
	Model     string               `json:"model"`
	WorldSize int                  `json:"world_size"` // data-parallel ranks (mpirun -np N)
	// Collectives is how the ranks average gradients: "nccl (device
	// memory)" or "mpi (host memory)"; empty in one process.
	Collectives    string             `json:"collectives,omitempty"`
	Batch          int                `json:"batch"`        // --batch: each rank's micro-batch
	GlobalBatch    int                `json:"global_batch"` // world_size × batch
	ParameterCount int64              `json:"parameter_count"`
	Steps          int                `json:"steps"`     // the last step done
	RunSteps       int                `json:"run_steps"` // steps done by this run (fewer than steps when resumed)
	ResumedFrom    int                `json:"resumed_from_step,omitempty"`
	Interrupted    bool               `json:"interrupted"`
	Stopped        bool               `json:"stopped_early"` // --stop-after
	WallSeconds    float64            `json:"wall_seconds"`
	StepSeconds    float64            `json:"step_seconds"` // median
	ItemsPerSecond float64            `json:"-"`
	FinalTrainLoss float64            `json:"final_train_loss"`
	SmoothedLoss   float64            `json:"smoothed_train_loss"`
	Metrics        map[string]float64 `json:"-"` // task metrics, merged into the object
	higher         map[string]bool
	PeakBytes      map[string]int64 `json:"peak_bytes_by_category"`
	PeakTotalBytes int64            `json:"peak_bytes"`
	HostStateBytes int64            `json:"host_optimizer_state_bytes,omitempty"` // --optimizer-state host: the host memory the state holds
	Offload        *offload.Stats   `json:"offload,omitempty"`
	Checkpoint     string           `json:"checkpoint,omitempty"`
	CheckpointDir  string           `json:"checkpoint_dir,omitempty"`  // where sample and eval find the run
	RunDir         bool             `json:"run_dir_created,omitempty"` // made for this run (no --checkpoint-dir)
	Plots          []string         `json:"plots,omitempty"`
	Sample         string           `json:"sample,omitempty"`
	Tokenizer      string           `json:"tokenizer,omitempty"`       // train text: byte or bpe
	TokenCacheHit  *bool            `json:"token_cache_hit,omitempty"` // bpe: the ids came from the cache
	InitFrom       string           `json:"init_from,omitempty"`       // --init-from, resolved
	history        *train.History
}

// trainRun is what a train command hands runTrainer: the task and the
// parts of the configuration the command decides.
type trainRun struct {
	task     train.Task
	name     string // "text", "mnist": names the run directory
	describe string
	planned  func() plan.Model // the task's step for the planner (policies); nil: none
	// initOptimizer, if set, loads the optimizer's state before training
	// (--init-optimizer).
	initOptimizer func(optim.Stateful) error
}

// runTrainer runs r under the shared flags o and returns the summary.
func runTrainer(r trainRun, dev device.Device, o *trainOptions, p *progress, ctx context.Context) (_ *trainSummary, retErr error) {
	// A run that fails leaves no empty log, plot or checkpoint directory
	// that it made (what holds data stays).
	var left leftovers
	for _, path := range []string{o.logPath, o.plotDir, o.checkpointDir} {
		left.note(path)
	}
	defer left.clean(&retErr)
	if err := checkHostPeak(o.pol, o.policy, dev.Name()); err != nil {
		return nil, err
	}
	sum := &trainSummary{Device: dev.Name(), Mode: o.modeName(), Optimizer: o.optimizer, OptimizerState: o.optimizerState, Gradients: where(o.gradsOnHost), ParamsOnHost: o.paramsOnHost,
		Precision: offload.PrecisionName(o.precisionType), Model: r.describe, WorldSize: 1}
	if o.comm != nil {
		sum.WorldSize = o.comm.Size()
	}
	if note := ranksNote(sum.WorldSize, o.batch, o.accum, o.unit); note != "" {
		p.line("%s", note)
	}
	sum.Batch, sum.GlobalBatch = o.batch, sum.WorldSize*o.batch
	model := r.task.Model()
	for _, prm := range model.Parameters() {
		sum.ParameterCount += int64(prm.Numel())
	}
	place, err := optim.StateOn(o.optimizerState)
	if err != nil {
		return nil, err
	}
	var kept, visiting []string // the policy's parameters whose state stays on, or visits, the device
	ahead := 0
	if o.pol != nil {
		kept, visiting, ahead = o.pol.OptimizerStateOnDevice, o.pol.OptimizerStateVisiting, o.pol.OptimizerStateAhead
	}
	built, err := optim.New(o.optimizer, model.Parameters(), o.hyper, place, optim.KeepOnDevice(kept...),
		optim.StateVisits(visiting...), optim.StateVisitsAhead(ahead))
	if err != nil {
		return nil, err
	}
	opt, ok := built.(optim.Stateful)
	if !ok {
		built.Release()
		return nil, fmt.Errorf("--optimizer %s cannot save its state (optim.Stateful), which checkpoints need", o.optimizer)
	}
	defer opt.Release()
	if r.initOptimizer != nil {
		if err := r.initOptimizer(opt); err != nil {
			return nil, err
		}
	}
	warmup := o.warmup
	if warmup < 0 {
		warmup = o.steps / 10
	}
	mem := offload.Setup{Mode: offload.Mode(o.mode), DiskDir: o.diskDir, GradsOnHost: o.gradsOnHost, ParamsOnHost: o.paramsOnHost}
	if o.policy != "" {
		mem.Mode = offload.PolicyMode
	}
	task := r.task
	var planModel func() plan.Model // the step a policy is checked against
	if o.policy != "" {
		pol := o.pol
		if pol == nil { // validate was not called
			if pol, err = offload.LoadPolicy(o.policy); err != nil {
				return nil, err
			}
		}
		mem.Mode, mem.Policy = offload.PolicyMode, pol
		if ranks := sum.WorldSize; pol.Ranks > 0 && (pol.Ranks != ranks || pol.Zero != o.zero) {
			return nil, fmt.Errorf("--policy %s is one rank of %d at ZeRO stage %d (ferry plan --ranks %d --zero %d), and this run is %d at stage %d: "+
				"run it under mpirun -np %d with --zero %d, or plan again for this run", o.policy, pol.Ranks, pol.Zero, pol.Ranks, pol.Zero,
				ranks, o.zero, pol.Ranks, pol.Zero)
		}
		if r.planned == nil {
			return nil, fmt.Errorf("--policy: ferry plan writes policies for the GPT (train text); this model has none")
		}
		// Given beside the task (train.Config.Plan), not wrapped around
		// it: a wrapper would hide its validation, identity and sharding.
		planModel = r.planned
	}
	overrides, err := train.ParseOverrides(o.override)
	if err != nil {
		return nil, err // it names --override
	}
	// No --checkpoint-dir: the final model goes to a new run directory
	// (under mpirun, rank 0's), so that sample and eval work after any
	// run. It is this run's alone, and removed again if the run fails
	// before saving anything.
	ckptDir, ckptEvery := o.checkpointDir, o.checkpointEvery
	runDir, madeRunDir, err := o.runDirFor(r.name)
	if err != nil {
		return nil, err
	}
	if runDir != "" {
		ckptDir, ckptEvery = runDir, o.steps
		defer func() {
			if retErr != nil && madeRunDir {
				removeRunDir(runDir)
			}
		}()
	}
	evals := &evalLines{p: p} // validation lines with their step's train loss
	cfg := train.Config{
		Steps: o.steps, Accum: o.accum, Optimizer: opt, Clip: o.clip, Memory: mem, Plan: planModel,
		Schedule:  train.Cosine{Peak: o.lr, Min: o.minLR, Warmup: warmup, Total: o.steps},
		EvalEvery: o.evalEvery, LogEvery: o.logEvery, LogPath: o.logPath,
		CheckpointDir: ckptDir, CheckpointEvery: ckptEvery, Keep: o.keep, Resume: o.resume,
		StopAfter: o.stopAfter, Seed: o.seed, Unit: o.unit, Comm: o.comm, CheckEvery: o.checkEvery, Shard: o.zero,
		Precision: o.precisionType, ExportBF16: o.exportBF16,
		Overrides: overrides, OverrideNote: "--override " + o.override + " on resume",
		Hooks: train.Hooks{
			Start:   func(first, total int) { stepping.Store(true); p.phase("train", total, first-1) },
			Message: func(msg string) { p.line("%s", msg) },
			Eval:    evals.eval,
			Step: func(s train.StepInfo) {
				sum.SmoothedLoss = s.Smoothed
				evals.stepDone(s)
				p.update(s.Step, fmt.Sprintf("loss %.4f | %s %s/s | %s", s.Smoothed, siCount(s.ItemsPerSecond), o.unit, device.FormatBytes(s.DeviceBytes)))
				if s.Log {
					p.plain("step %d/%d  loss %.4f  lr %.3g  %s %s/s  %s", s.Step, s.Total, s.Smoothed, s.LR, siCount(s.ItemsPerSecond), o.unit, device.FormatBytes(s.DeviceBytes))
				}
			},
			Done: func() { evals.flush(); p.done() },
		},
	}
	if o.comm != nil && o.comm.Size() > 1 {
		dc, closeDC, note, err := deviceComm(o.comm, dev)
		if err != nil {
			return nil, err
		}
		defer closeDC()
		if note != "" {
			p.line("%s", note)
		}
		sum.Collectives = "mpi (host memory)"
		if dc != nil {
			// Watched as MPI's collectives are (--collective-timeout).
			timeout, err := o.timeoutFor()
			if err != nil {
				return nil, err
			}
			c := o.comm
			dc = dist.WatchDevice(dc, timeout, func(err error) {
				fmt.Fprintf(os.Stderr, "ferry: %v; ending the job (--collective-timeout or %s sets how long a collective may wait)\n", err, timeoutEnv)
				dist.Abort(c, 1)
			})
			cfg.DeviceComm, sum.Collectives = dc, "nccl (device memory)"
		}
	}
	if o.plotDir != "" {
		if _, ok := task.(train.Describer); !ok {
			return nil, fmt.Errorf("--plot: the task has no title")
		}
		cfg.Plots = plot.Writer{Dir: o.plotDir}
	}
	tr, err := train.New(dev, task, cfg)
	var ce *train.ConfigError
	if runDir != "" && errors.As(err, &ce) && ce.Field == "CheckpointDir" {
		return nil, fmt.Errorf("the run directory %s (where a run without --checkpoint-dir saves its model): %w; give --checkpoint-dir", runDir, ce.Err)
	}
	if err != nil {
		return nil, flagError(rankFlagError(err))
	}
	defer tr.Close()
	res, err := tr.Run(ctx)
	if s := tr.Memory().Streamer(); s != nil {
		st := s.Stats()
		sum.HostState = &st
	}
	if err != nil {
		return nil, err
	}
	sum.Steps, sum.ResumedFrom, sum.Interrupted, sum.Stopped = res.Steps, res.ResumedFrom, res.Interrupted, res.Stopped
	sum.RunSteps = max(0, res.Steps-res.FirstStep+1)
	sum.WallSeconds, sum.StepSeconds, sum.ItemsPerSecond = res.WallSeconds, res.StepSeconds, res.ItemsPerSecond
	sum.FinalTrainLoss, sum.SmoothedLoss = res.LastLoss, res.SmoothedLoss
	sum.Metrics, sum.higher = metricMap(res.Metrics), map[string]bool{}
	for _, m := range res.Metrics {
		sum.higher[m.Name] = m.Better == train.Higher
	}
	for _, m := range res.Best {
		sum.Metrics["best_"+m.Name] = m.Value
		sum.higher["best_"+m.Name] = m.Better == train.Higher
	}
	sum.PeakBytes, sum.PeakTotalBytes, sum.Offload = res.PeakBytes, res.PeakTotalBytes, res.Offload
	if h, ok := opt.(interface{ HostStateBytes() int64 }); ok {
		sum.HostStateBytes = h.HostStateBytes()
	}
	sum.Checkpoint, sum.Plots, sum.history = res.Checkpoint, res.Plots, res.History
	if res.Checkpoint != "" {
		sum.CheckpointDir = ckptDir
	} else if madeRunDir {
		removeRunDir(runDir) // stopped before its first step
	}
	sum.RunDir = runDir != "" && res.Checkpoint != ""
	return sum, nil
}

// runsDir holds the run directories of train runs given no
// --checkpoint-dir, under the current directory (tests move it).
var runsDir = "runs"

// newRunDir makes a new run directory, runs/<task>-YYYYMMDD-HHMMSS (with
// -2, -3, … after it when taken: two runs started in the same second get
// one each, since Mkdir fails on an existing directory).
func newRunDir(task string) (string, error) {
	if task == "" {
		task = "run"
	}
	if _, err := os.Stat(runsDir); errors.Is(err, fs.ErrNotExist) {
		madeRunsDir = true
	}
	if err := os.MkdirAll(runsDir, 0o755); err != nil {
		return "", fmt.Errorf("the run directory (where a run without --checkpoint-dir saves its model): %w; give --checkpoint-dir", err)
	}
	sweepDeadRunDirs()
	base := filepath.Join(runsDir, task+"-"+time.Now().Format("20060102-150405"))
	for i := 1; i < 1000; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("the run directory %s (where a run without --checkpoint-dir saves its model): %w; give --checkpoint-dir", dir, err)
		}
	}
	return "", fmt.Errorf("no free run directory %s-N: give --checkpoint-dir", base)
}

// runDirName is the name newRunDir gives: task-YYYYMMDD-HHMMSS[-N].
var runDirName = regexp.MustCompile(`^[a-z0-9]+-[0-9]{8}-[0-9]{6}(-[0-9]+)?$`)

// sweepDeadRunDirs removes what runs killed outright (kill -9) before
// their first save left in runsDir: a run directory holding nothing but
// its lock file, which no process holds (the kernel drops a flock when its
// holder dies) and which is over a minute old (so a run that is starting,
// between making its directory and locking it, is left alone). Anything
// else is left as it is.
func sweepDeadRunDirs() {
	ents, err := os.ReadDir(runsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !runDirName.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(runsDir, e.Name())
		inside, err := os.ReadDir(dir)
		if err != nil || len(inside) != 1 || inside[0].Name() != ".lock" || !inside[0].Type().IsRegular() {
			continue
		}
		lock := filepath.Join(dir, ".lock")
		if st, err := os.Stat(lock); err != nil || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		f, err := os.OpenFile(lock, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil { // no live holder
			os.Remove(lock)
			os.Remove(dir) // only if still empty
		}
		f.Close()
	}
}

// madeRunsDir says this process made runs/ (removeRunDir may remove it).
var madeRunsDir bool

// removeRunDir removes a run directory this run made and saved nothing
// in, and runs/ when that leaves it empty.
func removeRunDir(dir string) {
	if latest, err := (&train.Checkpointer{Dir: dir}).Latest(); err != nil || latest != "" {
		return
	}
	os.RemoveAll(dir)
	if madeRunsDir {
		os.Remove(runsDir) // only if empty
	}
}

// formatMetricList writes one evaluation's metrics for people.
func formatMetricList(ms []train.Metric) string {
	higher := map[string]bool{}
	for _, m := range ms {
		higher[m.Name] = m.Better == train.Higher
	}
	return formatMetricsOf(metricMap(ms), higher)
}

func metricMap(ms []train.Metric) map[string]float64 {
	m := make(map[string]float64, len(ms))
	for _, x := range ms {
		m[x.Name] = x.Value
	}
	return m
}

func formatMetrics(m map[string]float64) string { return formatMetricsOf(m, nil) }

// formatMetricsOf writes metrics for people; higher marks the fractions
// (accuracies), printed as percentages.
func formatMetricsOf(m map[string]float64, higher map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v := m[k]
		if higher[k] || (higher == nil && strings.Contains(k, "accuracy")) {
			parts = append(parts, fmt.Sprintf("%s %.2f%%", strings.ReplaceAll(k, "_", " "), 100*v))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.4f", strings.ReplaceAll(k, "_", " "), v))
		}
	}
	return strings.Join(parts, ", ")
}

// siCount writes a rate as 12.3k or 4.56M.
func siCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// summaryJSON flattens the summary and the task's metrics into one object.
func summaryJSON(s *trainSummary, unit string) map[string]any {
	b, _ := json.Marshal(s)
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, v := range s.Metrics {
		m[k] = v
	}
	m[unit+"_per_second"] = s.ItemsPerSecond
	return m
}

// printSummary writes the human summary.
func printSummary(w io.Writer, s *trainSummary, unit string) {
	state := "done"
	if s.Interrupted {
		state = "interrupted"
	} else if s.Stopped {
		state = "stopped (--stop-after)"
	}
	resumed := ""
	if s.ResumedFrom > 0 {
		resumed = fmt.Sprintf(" (steps %d–%d; resumed from step %d)", s.ResumedFrom+1, s.Steps, s.ResumedFrom)
	}
	prec := ""
	if s.Precision == "bf16" {
		prec = ", bf16 mixed precision"
	}
	on := s.Device
	if s.WorldSize > 1 {
		on = fmt.Sprintf("%d ranks (%s each; global batch %d × %d = %d)", s.WorldSize, s.Device, s.WorldSize, s.Batch, s.GlobalBatch)
	}
	fmt.Fprintf(w, "\n%s: %d steps in %.1f s%s (median step %.1f ms, %s %s/s) on %s, mode %s, optimizer %s%s\n",
		state, s.RunSteps, s.WallSeconds, resumed, 1e3*s.StepSeconds, siCount(s.ItemsPerSecond), unit, on, s.Mode, s.Optimizer, prec)
	if len(s.Metrics) > 0 {
		fmt.Fprintf(w, "  train loss %.4f (smoothed; the last step's alone %.4f); %s\n", s.SmoothedLoss, s.FinalTrainLoss, formatMetricsOf(s.Metrics, s.higher))
	}
	fmt.Fprintf(w, "  peak device memory %s", device.FormatBytes(s.PeakTotalBytes))
	sep := ":"
	keys := make([]string, 0, len(s.PeakBytes))
	for k := range s.PeakBytes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s.PeakBytes[k] > 0 {
			fmt.Fprintf(w, "%s %s %s", sep, k, device.FormatBytes(s.PeakBytes[k]))
			sep = ","
		}
	}
	fmt.Fprintln(w)
	if s.HostStateBytes > 0 {
		fmt.Fprintf(w, "  optimizer state on the host: %s (--optimizer-state host)\n", device.FormatBytes(s.HostStateBytes))
	}
	if h := s.HostState; h != nil {
		fmt.Fprintf(w, "  training state in host memory: %s of parameters (%s brought to the device, %d uploads, %d ahead of use), %s of gradients sent to the host; stalled %.3f s\n",
			device.FormatBytes(h.HostParamBytes), device.FormatBytes(h.ParamBytesIn), h.ParamUploads, h.Prefetched, device.FormatBytes(h.GradBytesOut), h.StallSeconds)
	}
	if s.Offload != nil {
		fmt.Fprintf(w, "  offloaded %s to host, %s to disk; stalled %.3f s\n",
			device.FormatBytes(s.Offload.BytesToHost), device.FormatBytes(s.Offload.BytesToDisk), s.Offload.StallSeconds)
	}
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "  checkpoint: %s\n", s.Checkpoint)
	}
	if s.RunDir {
		fmt.Fprintf(w, "  saved the model in %s (no --checkpoint-dir): ferry eval --checkpoint-dir %s\n", s.CheckpointDir, s.CheckpointDir)
	}
	for _, f := range s.Plots {
		fmt.Fprintf(w, "  plot: %s\n", f)
	}
}

// finishTraining prints the summary and turns an interruption into the
// one-line error that makes ferry exit 130.
func finishTraining(out io.Writer, asJSON bool, s *trainSummary, unit string) error {
	var werr error
	if asJSON {
		werr = writeJSON(out, summaryJSON(s, unit))
	} else {
		printSummary(out, s, unit) // a failed write: run reports it
	}
	if c, ok := out.(*checkedWriter); ok && werr == nil {
		werr = c.Flush() // what the reader took: after a signal, without waiting long
	}
	if werr != nil && s.RunDir && !s.Interrupted {
		// Nobody was told where the model went: leave no run directory
		// behind (a --checkpoint-dir stays, as asked). An interrupted
		// run's error, on stderr, says where it is.
		os.RemoveAll(s.CheckpointDir)
		if madeRunsDir {
			os.Remove(runsDir)
		}
	}
	if werr != nil && !s.Interrupted {
		return werr
	}
	if s.Interrupted {
		msg := fmt.Sprintf("stopped after step %d", s.Steps)
		if s.RunDir {
			msg += fmt.Sprintf("; resume with --checkpoint-dir %s --resume", s.CheckpointDir)
		} else if s.Checkpoint != "" {
			msg += fmt.Sprintf("; resume with --resume (checkpoint %s)", s.Checkpoint)
		}
		err := fmt.Errorf("%w: %s", demo.ErrInterrupted, msg) // run() exits 130 on it
		if asJSON {
			return quietError{err}
		}
		return err
	}
	return nil
}

// initialVal is the validation loss before the first step, when this run
// (or the one it resumed) measured it.
func (s *trainSummary) initialVal(name string) (float64, bool) {
	if s.history != nil {
		if v := s.history.Evals[name]; len(v) > 0 && v[0].Step == 0 {
			return v[0].Value, true
		}
	}
	return 0, false
}

// preflight refuses a run whose least memory cannot fit, before anything
// large is allocated (train.Preflight): params parameters with their
// gradients and optimizer state where --parameters, --gradients and
// --optimizer-state put them, stepBytes of activations on the device, and
// hostBytes of batch data on the Go heap. The optimizer's state is sized
// by the optimizer itself, made over no parameters with the run's
// hyperparameters.
func (o *trainOptions) preflight(dev device.Device, params, stepBytes, hostBytes int64, advice string) error {
	opt, err := optim.New(o.optimizer, nil, o.hyper)
	if err != nil {
		return err
	}
	defer opt.Release()
	sizer, ok := opt.(train.StateSizer)
	if !ok {
		return fmt.Errorf("--optimizer %s does not say how large its state is (train.StateSizer)", o.optimizer)
	}
	f := train.Footprint{Params: params, Optimizer: sizer, StepBytes: stepBytes, BatchBytes: hostBytes,
		ParamsOnHost: len(o.paramsOnHost) > 0, GradsOnHost: o.gradsOnHost, StateOnHost: o.optimizerState == "host"}
	return train.Preflight(dev, f, availableMemory(), advice)
}

// interruptContext is cancelled by the first SIGINT or SIGTERM (see
// interruptions): the Trainer then finishes its step and checkpoints, and
// a read through the context (fsx.Open: a checkpoint, --init-from, data)
// stops at once with an error wrapping errSignal, on which run exits 130.
func interruptContext() (context.Context, func()) {
	stop, unlisten := interruptions(0)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		select {
		case <-stop:
			cancel(errSignal)
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		unlisten()
		cancel(nil)
		stepping.Store(false)
	}
}

// errSignal is the cause of interruptContext's cancellation.
var errSignal = fmt.Errorf("%w by a signal; nothing was written", demo.ErrInterrupted)

// flagError names the flag behind a train.ConfigError.
func flagError(err error) error {
	var ce *train.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	flags := map[string]string{"Steps": "--steps", "Accum": "--accum", "EvalEvery": "--eval-every", "LogEvery": "--log-every",
		"CheckpointEvery": "--checkpoint-every", "StopAfter": "--stop-after", "Clip": "--clip", "Memory.Policy": "--policy",
		"CheckpointDir": "--checkpoint-dir", "Plots": "--plot", "LogPath": "--log", "Resume": "--resume"}
	if f, ok := flags[ce.Field]; ok {
		return fmt.Errorf("%s: %w", f, ce.Err)
	}
	return err
}

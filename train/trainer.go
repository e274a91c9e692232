package train

import (
	"errors"
	"fmt"

	"ferry/device"
	"ferry/dist"
	"ferry/internal/fsx"
	"ferry/offload"
	"ferry/optim"
)

// Trainer runs a Task under a Config on a device. New checks the Config
// and sets up what the run needs; Run trains (run.go, and a file per
// phase: phase_resume.go, phase_step.go, phase_evaluate.go,
// phase_checkpoint.go, phase_finish.go; step.go is one optimizer step,
// parallel.go what data-parallel training adds).
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
	// full is ZeRO-3 (Config.Shard 3 on several ranks), also t.red, and
	// fullOpt the optimizer over its shards; nil otherwise.
	full *dist.FullShard
	// shardsOnHost: ZeRO-3 keeps its shards in host memory (the memory
	// mode's parameters in host memory, taken from it: zero3HostState).
	shardsOnHost bool
	fullOpt      *dist.FullShardOptimizer
	// devRed is the reducer on the device (Config.DeviceComm), also
	// t.red; nil otherwise. Close frees its buckets.
	devRed *dist.DeviceReducer
	rank   int
	// updates is the last step's in-backward updates: those that run
	// beside the device (parameters and optimizer state in host memory)
	// may still run during the next step, and report their errors once
	// settled.
	updates *optim.InBackwardErr
}

// New checks cfg against task and dev and prepares the run: the memory
// mode, the checkpoint directory, the log and the Plotter, so that every
// setting that cannot work fails here, as a *ConfigError naming its
// field, before any training work. On an error nothing stays set up.
func New(dev device.Device, task Task, cfg Config) (_ *Trainer, err error) {
	if err := cfg.check(dev); err != nil {
		return nil, err
	}
	t := &Trainer{dev: dev, task: task, cfg: cfg}
	if cfg.Comm != nil {
		t.rank = cfg.Comm.Rank()
	}
	if cfg.Memory.Policy != nil {
		if err := checkPolicy(task, &t.cfg); err != nil {
			return nil, &ConfigError{"Memory.Policy", err}
		}
	}
	if err := t.checkOutputs(); err != nil {
		return nil, err
	}
	if err := checkStatePlacement(&t.cfg); err != nil {
		return nil, err
	}
	setup := t.cfg.Memory
	if setup.Params == nil {
		setup.Params = task.Model().Parameters()
	}
	if cfg.Comm != nil && cfg.Comm.Size() > 1 && cfg.Shard == 3 {
		if setup, t.shardsOnHost, err = zero3HostState(setup); err != nil {
			return nil, &ConfigError{"Memory", err}
		}
	}
	if t.mem, err = offload.NewMemory(dev, setup); err != nil {
		return nil, &ConfigError{"Memory", err}
	}
	// The one cleanup: the memory mode, and the data-parallel parts
	// that hold memory (device buckets, ZeRO-3's shards), are what New
	// sets up and must free.
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.mem.OptimizerInBackward() {
		if _, ok := cfg.Optimizer.(optim.Stepper); !ok {
			return nil, configErr("Memory", "the memory mode updates parameters inside backward, which needs an optim.Stepper; %T is not", cfg.Optimizer)
		}
		if cfg.Clip > 0 || cfg.Accum > 1 {
			return nil, configErr("Memory", "the memory mode updates each parameter inside backward, which leaves no moment for clipping or accumulation; drop those, or update after backward")
		}
	}
	if cfg.Comm != nil && cfg.Comm.Size() > 1 {
		if err := t.setupParallel(); err != nil {
			return nil, err
		}
		// Last, once every setting has passed this rank's checks, and
		// before any other collective: Note [ranks agree].
		if err := t.agreeRanks(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// checkOutputs checks where the run writes: the checkpoint directory
// (with an optimizer whose state can be saved), the Plotter and the log.
// Rank 0 alone writes them; the other ranks drop the Plotter and the log.
func (t *Trainer) checkOutputs() error {
	cfg := &t.cfg
	if cfg.CheckpointDir != "" {
		if _, ok := cfg.Optimizer.(optim.Stateful); !ok {
			return configErr("Optimizer", "checkpoints need an optimizer whose state can be saved (optim.Stateful); %T is not", cfg.Optimizer)
		}
		t.ckpt = &Checkpointer{Dir: cfg.CheckpointDir, Keep: cfg.Keep, Overrides: cfg.Overrides, OverrideNote: cfg.OverrideNote, ExportBF16: cfg.ExportBF16}
		// Rank 0 alone probes (it alone writes): a probe makes and removes
		// the directory, which would race with another rank's probe.
		if t.rank == 0 {
			if err := fsx.CheckWritableDir(cfg.CheckpointDir); err != nil {
				return &ConfigError{"CheckpointDir", err}
			}
		}
	} else if cfg.Resume {
		return configErr("Resume", "needs a checkpoint directory (CheckpointDir) to resume from")
	}
	if t.rank > 0 {
		cfg.Plots, cfg.LogPath = nil, ""
	}
	if cfg.Plots != nil {
		if err := cfg.Plots.Check(); err != nil {
			return &ConfigError{"Plots", err}
		}
	}
	if cfg.LogPath != "" {
		if err := writableFile(cfg.LogPath); err != nil {
			return &ConfigError{"LogPath", err}
		}
	}
	return nil
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

// optimizer is the optimizer the Trainer steps: the sharded one if any.
func (t *Trainer) optimizer() optim.Optimizer {
	switch {
	case t.shard != nil:
		return t.shard
	case t.fullOpt != nil:
		return t.fullOpt
	}
	return t.cfg.Optimizer
}

// Memory is the memory mode the Trainer set up (its statistics, for one).
func (t *Trainer) Memory() *offload.Memory { return t.mem }

// Close frees what the Trainer set up (the memory mode's buffers). The
// task, model and optimizer stay the caller's.
func (t *Trainer) Close() error {
	err := t.mem.Close()
	if t.devRed != nil {
		if cerr := t.devRed.Close(); err == nil {
			err = cerr
		}
		t.devRed = nil
	}
	if t.full != nil && !t.full.Sharded() {
		// Whole (a run that ended): the parameters stay the model's.
		t.fullOpt.Release()
		if cerr := t.full.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// zero3HostState takes the parameters and gradients in host memory out of
// s (out of its policy too) for ZeRO-3, which keeps its shards in host
// memory itself (dist.FullShardOptions.ShardsOnHost) and, with the
// optimizer's state on the host, lands each rank's share of the gradients
// there: no offload.Streamer. It reports whether the shards go to host
// memory: all of the parameters' or none.
func zero3HostState(s offload.Setup) (offload.Setup, bool, error) {
	params := append([]string(nil), s.ParamsOnHost...)
	if s.Policy != nil {
		pol := *s.Policy
		params = append(params, pol.ParametersOnHost...)
		pol.ParametersOnHost, pol.Gradients, pol.SerialGradCopies = nil, "", false
		s.Policy = &pol
	}
	s.ParamsOnHost, s.GradsOnHost, s.SerialGradCopies = nil, false, false
	for _, name := range params {
		if name != "*" {
			return s, false, fmt.Errorf("ZeRO-3 keeps all of its shards in host memory or none; %d parameters were named (use \"*\")", len(params))
		}
	}
	return s, len(params) > 0, nil
}

// ErrNonFinite is wrapped by the error of a step whose loss or gradients
// are not finite. Such a step never reaches a checkpoint.
var ErrNonFinite = errors.New("not finite")

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

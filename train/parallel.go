package train

import (
	"fmt"

	"ferry"
	"ferry/dist"
	"ferry/nn"
	"ferry/optim"
)

// Data-parallel training (Config.Comm of more than one rank) adds to the
// loop: the gradient reducer (or, for ZeRO-2, scatterer) and the sharded
// optimizer, made by New; this rank's batches; and four collectives
// every rank makes at the same moments: rank 0's weights broadcast
// before the first step, agreeing to stop, the step's loss and items,
// and the check that parameters are still bit-identical.

// gradReducer is what the Trainer needs of a dist.GradientReducer or, for
// ZeRO-2, a dist.GradientScatterer.
type gradReducer interface {
	GradReady(p *ferry.Tensor)
	Wait() error
	Broadcast(root int) error
	CheckParameters() error
}

// setupParallel makes the reducer and, for Config.Shard > 0, the sharded
// optimizer.
func (t *Trainer) setupParallel() error {
	cfg := t.cfg
	if t.mem.Streamer() != nil {
		return configErr("Memory", "parameters or gradients in host memory are not yet supported with data-parallel training")
	}
	if t.mem.OptimizerInBackward() {
		if host, ok := cfg.Optimizer.(optim.HostPlaced); cfg.Shard != 3 || !ok || !host.StateOnHost() {
			return configErr("Memory.Policy", "it updates each parameter inside backward, from this rank's gradient alone; "+
				"data-parallel training averages gradients first (only ZeRO-3 with the optimizer's state on the host steps each shard as its mean gradient lands): plan for a larger budget")
		}
	}
	if cfg.BucketBytes < 0 {
		return configErr("BucketBytes", "must not be negative, got %d", cfg.BucketBytes)
	}
	params := t.task.Model().Parameters()
	opts := dist.ReducerOptions{BucketBytes: cfg.BucketBytes}
	var owners []int
	if cfg.DeviceComm != nil {
		switch {
		case cfg.DeviceComm.Size() != cfg.Comm.Size() || cfg.DeviceComm.Rank() != cfg.Comm.Rank():
			return configErr("DeviceComm", "rank %d of %d, and Comm is rank %d of %d: both must be the same ranks", cfg.DeviceComm.Rank(), cfg.DeviceComm.Size(), cfg.Comm.Rank(), cfg.Comm.Size())
		case cfg.Shard == 3:
			return t.setupFullShard(params)
		case cfg.Shard == 2:
			sc, err := dist.NewGradientScatterer(cfg.Comm, params, dist.ReducerOptions{BucketBytes: cfg.BucketBytes, Device: cfg.DeviceComm})
			if err != nil {
				return configErr("DeviceComm", "%v", err)
			}
			t.red = sc
			return t.setupShardedOptimizer(params, sc.Owners())
		}
		red, err := dist.NewDeviceReducer(cfg.DeviceComm, t.dev, params, opts)
		if err != nil {
			return configErr("DeviceComm", "%v", err)
		}
		t.red, t.devRed = red, red
		if cfg.Shard == 1 {
			return t.setupShardedOptimizer(params, nil)
		}
		return nil
	}
	if cfg.Shard == 3 {
		return t.setupFullShard(params)
	}
	if cfg.Shard == 2 {
		sc, err := dist.NewGradientScatterer(cfg.Comm, params, opts)
		if err != nil {
			return err
		}
		t.red, owners = sc, sc.Owners()
	} else {
		red, err := dist.NewGradientReducer(cfg.Comm, params, opts)
		if err != nil {
			return err
		}
		t.red = red
	}
	if cfg.Shard > 0 {
		return t.setupShardedOptimizer(params, owners)
	}
	return nil
}

// setupShardedOptimizer wraps Config.Optimizer for ZeRO 1 and 2 (owners:
// the scatterer's, at 2), broadcasting on the device with DeviceComm.
func (t *Trainer) setupShardedOptimizer(params []*ferry.Tensor, owners []int) error {
	cfg := t.cfg
	st, ok := cfg.Optimizer.(optim.Stepper)
	if !ok {
		return configErr("Shard", "a sharded optimizer updates one parameter at a time, which needs an optim.Stepper; %T is not", cfg.Optimizer)
	}
	sh, err := dist.NewShardedOptimizer(cfg.Comm, st, params, dist.ShardOptions{BucketBytes: cfg.BucketBytes, Owners: owners, Device: cfg.DeviceComm})
	if err != nil {
		return err
	}
	t.shard = sh
	return nil
}

// setupFullShard makes ZeRO-3: the FullShard over params (also the
// Trainer's reducer), gathering the weights in bfloat16 for products in
// bfloat16 (FSDP's param_dtype), and the optimizer over its shards, built
// anew from Config.Optimizer's registration with its learning rate,
// hyperparameters and state placement.
func (t *Trainer) setupFullShard(params []*ferry.Tensor) error {
	cfg := t.cfg
	fs, err := dist.NewFullShard(cfg.Comm, params, dist.FullShardOptions{Device: cfg.DeviceComm, ParamType: cfg.Precision, ShardsOnHost: t.shardsOnHost})
	if err != nil {
		return configErr("Shard", "%v", err)
	}
	inner, err := optim.Like(cfg.Optimizer, fs.Shards())
	if err == nil {
		st, ok := inner.(optim.Stepper)
		if !ok {
			err = fmt.Errorf("%s is not an optim.Stepper", cfg.Optimizer.Name())
		} else {
			t.fullOpt, err = fs.Optimizer(st)
		}
		if err != nil {
			inner.Release()
		}
	}
	if err != nil {
		fs.Close()
		return configErr("Shard", "ZeRO-3 steps each rank's shards with an optimizer it builds like the one given: %v", err)
	}
	t.full, t.red = fs, fs
	return nil
}

// onHost runs f, under ZeRO-3, with every parameter's whole values
// gathered into rank 0's host memory (dist.FullShard.GatherHost, a
// collective): a checkpoint that rank 0 writes reads them there, and
// the parameters stay sharded on the device.
func (t *Trainer) onHost(f func() error) error {
	if t.full == nil || !t.full.Sharded() {
		return f()
	}
	if err := t.full.GatherHost(0); err != nil {
		return err
	}
	defer t.full.DropHost()
	return f()
}

// attach is what the tapes of an evaluation, or of the proof of the
// weights, get: under ZeRO-3 the FullShard's record hook, which frees a
// gathered parameter after its ops; else the memory mode's.
func (t *Trainer) attach(tape *ferry.Tape) {
	if t.full != nil {
		t.full.Attach(tape)
		return
	}
	t.mem.Attach(tape)
}

// settleGathered frees, under ZeRO-3, the parameters gathered outside a
// step (by an evaluation).
func (t *Trainer) settleGathered() error {
	if t.full == nil {
		return nil
	}
	return t.full.Settle()
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

// broadcastWeights puts rank 0's weights on every rank (they are equal
// already when every rank seeds alike or resumed from one checkpoint).
func (t *Trainer) broadcastWeights() error {
	if t.red == nil {
		return nil
	}
	if err := t.red.Broadcast(0); err != nil {
		return err
	}
	if t.full != nil {
		return t.full.Shard()
	}
	return nil
}

// agreeStop is whether any rank stops before step: every rank stops at
// the same step, or the others would wait for it in the next collective.
func (t *Trainer) agreeStop(stop bool) (bool, error) {
	if t.red == nil {
		return stop, nil
	}
	flag := []float32{0}
	if stop {
		flag[0] = 1
	}
	if err := t.cfg.Comm.AllReduce(flag).Synchronize(); err != nil {
		return false, err
	}
	return flag[0] > 0, nil
}

// reduceStep turns this rank's loss and items of step into the job's:
// the mean loss, the same on every rank, and the items all ranks trained
// on. Every CheckEvery steps, and at the last, it checks that the ranks'
// parameters are bit-identical.
func (t *Trainer) reduceStep(step int, loss float64, items int64) (float64, int64, error) {
	if t.red == nil {
		return loss, items, nil
	}
	cfg := t.cfg
	buf := []float32{float32(loss), float32(items)}
	if err := cfg.Comm.AllReduce(buf).Synchronize(); err != nil {
		return 0, 0, err
	}
	loss, items = float64(buf[0])/float64(cfg.Comm.Size()), int64(buf[1])
	if (cfg.CheckEvery > 0 && step%cfg.CheckEvery == 0) || step == cfg.Steps {
		if err := t.red.CheckParameters(); err != nil {
			return 0, 0, err
		}
	}
	return loss, items, nil
}

// checkpointState is the optimizer state a checkpoint of this rank
// holds: the optimizer's own, or, sharded, the whole state gathered to
// rank 0 (every rank sends its shard; release frees the gathered copy).
func (t *Trainer) checkpointState() (st optim.Stateful, release func(), err error) {
	if t.fullOpt != nil {
		gathered, release, err := t.fullOpt.GatherState(0)
		if err != nil {
			return nil, nil, err
		}
		return gatheredState{t.fullOpt, gathered}, release, nil
	}
	if t.shard == nil {
		return t.cfg.Optimizer.(optim.Stateful), func() {}, nil
	}
	gathered, release, err := t.shard.GatherState(0)
	if err != nil {
		return nil, nil, err
	}
	return gatheredState{t.shard, gathered}, release, nil
}

// gatheredState is an optimizer whose State is a state gathered from all
// ranks, for rank 0 to save.
type gatheredState struct {
	optim.Stateful
	st optim.State
}

func (g gatheredState) State() optim.State { return g.st }

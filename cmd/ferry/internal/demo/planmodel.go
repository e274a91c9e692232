package demo

import (
	"fmt"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/dist"
	"ferry/models"
	"ferry/offload"
	"ferry/optim"
	"ferry/plan"
)

// PlanModel is the demo's workload as the planner sees it: the step of
// mode policy (runMode), op for op, so that a plan's predicted figures
// are what `ferry demo --device meta --policy FILE` measures.
func PlanModel(cfg Config) plan.Model { return planModel{cfg: cfg} }

type planModel struct {
	cfg Config
	// d2h and h2d, if set, are the streams the streamer's copies run on
	// (plan.StreamsModel: the replay's offloader's, as offload.Memory
	// shares its own).
	d2h, h2d device.Stream
	// ranks > 1: the step of rank of ranks in data-parallel training at
	// ZeRO stage shard (plan.RankModel).
	ranks, shard, rank int
}

// ForRanks is the step of the rank that owns the most parameter bytes at
// ZeRO stage shard (the most optimizer state at 1, and gradients at 2),
// as train.Trainer runs it with Config.Shard: the same dist reducer and
// sharded optimizer, over dist.Pretend's communicator.
func (m planModel) ForRanks(ranks, shard int) (plan.Model, error) {
	w, err := m.cfg.Family.Workload(meta.New(device.Options{}, nil), m.cfg.sizes(), m.cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer w.Release()
	var params []*ferry.Tensor // deduplicated, as dist numbers them
	seen := map[*ferry.Tensor]bool{}
	for _, p := range w.Parameters() {
		if !seen[p] {
			seen[p] = true
			params = append(params, p)
		}
	}
	var owners []int
	switch shard {
	case 0:
		owners = make([]int, len(params))
	case 1:
		owners = dist.AssignOwners(params, ranks)
	case 2:
		owners = dist.ScatterOwners(params, ranks, 0)
	case 3:
		// Every parameter splits by elements: rank 0's shards are the
		// largest (the last rank's may be shorter).
		return planModel{cfg: m.cfg, ranks: ranks, shard: shard}, nil
	default:
		return nil, fmt.Errorf("demo: ZeRO stage %d (there are 0, 1, 2 and 3)", shard)
	}
	bytes := make([]int64, ranks)
	for i, p := range params {
		bytes[owners[i]] += p.StorageBytes()
	}
	rank := 0
	for r := range bytes {
		if bytes[r] > bytes[rank] {
			rank = r
		}
	}
	return planModel{cfg: m.cfg, ranks: ranks, shard: shard, rank: rank}, nil
}

// WithPrefetch is the model whose streamed parameters start their uploads
// n uses ahead (plan.PrefetchModel), as a run whose offloader brings n
// tensors back ahead does (offload.Memory).
func (m planModel) WithStreams(d2h, h2d device.Stream) plan.Model {
	m.d2h, m.h2d = d2h, h2d
	return m
}

func (m planModel) WithPrefetch(n int) plan.Model {
	m.cfg.Offload.Lookahead = n
	return m
}

// prefetch is the streamer's prefetch: the offloader's lookahead, as
// offload.Memory sets it.
func (m planModel) prefetch() int {
	if n := m.cfg.Offload.Lookahead; n > 0 {
		return n
	}
	return offload.DefaultConfig().Lookahead
}

// buildOn is where a workload's parameters are made: on dev's host when
// some are streamed from there (they never take device memory but around
// their uses; the others move to dev), else on dev.
func buildOn(dev device.Device, cfg Config) device.Device {
	if len(cfg.ParamsOnHost) > 0 {
		return dev.Host()
	}
	return dev
}

// PlanParams lists the model's parameters for plan.MakeJoint, in the
// model's order, each once.
func PlanParams(cfg Config) ([]plan.Param, error) {
	w, err := cfg.Family.Workload(meta.New(device.Options{}, nil), cfg.sizes(), cfg.Seed)
	if err != nil {
		return nil, err
	}
	defer w.Release()
	var ps []plan.Param
	seen := map[*ferry.Tensor]bool{}
	named := map[string]bool{}
	for _, p := range w.Parameters() {
		if !seen[p] {
			seen[p] = true
			if named[p.Name()] {
				return nil, fmt.Errorf("demo: %s has two parameters named %q; the planner places parameters by name", cfg.Family.Name(), p.Name())
			}
			named[p.Name()] = true
			ps = append(ps, plan.Param{Name: p.Name(), Bytes: p.Bytes()})
		}
	}
	return ps, nil
}

// StateModels is PlanModel for each placement of the training state.
func StateModels(cfg Config) plan.StateModels {
	return func(s plan.State) (plan.Model, error) {
		c := cfg
		c.OptimizerState, c.GradsOnHost, c.ParamsOnHost = s.OptimizerState, s.Gradients == "host", s.ParamsOnHost
		c.SerialGradCopies, c.StateOnDevice, c.StateVisiting, c.StateAhead = s.SerialGradCopies, s.StateOnDevice, s.StateVisiting, s.StateAhead
		return PlanModel(c), nil
	}
}

func (m planModel) String() string {
	w, err := m.cfg.Family.Workload(meta.New(device.Options{}, nil), m.cfg.sizes(), m.cfg.Seed)
	if err != nil {
		return m.cfg.Family.Name()
	}
	defer w.Release()
	d := w.Describe() + ", " + m.cfg.optimizerName(w)
	if m.cfg.Precision == device.BFloat16 {
		d += " · bf16"
	}
	if m.ranks > 1 {
		return fmt.Sprintf("%s · rank %d of %d, ZeRO-%d", d, m.rank, m.ranks, m.shard)
	}
	return d
}

// OptimizerName is the optimizer cfg trains its family with: its
// Optimizer, or the family's usual one.
func OptimizerName(cfg Config) string {
	if cfg.Optimizer != "" {
		return cfg.Optimizer
	}
	w, err := cfg.Family.Workload(meta.New(device.Options{}, nil), cfg.sizes(), cfg.Seed)
	if err != nil {
		return ""
	}
	defer w.Release()
	return cfg.optimizerName(w)
}

// optimizerName is the optimizer the configuration trains w with.
func (c Config) optimizerName(w models.Workload) string {
	if c.Optimizer != "" {
		return c.Optimizer
	}
	name, _ := w.Optimizer()
	return name
}

func (m planModel) Build(dev device.Device, inBackward bool) (*plan.Step, error) {
	cfg := m.cfg
	shardsOnHost, err := m.rankHostState()
	if err != nil {
		return nil, err
	}
	on := buildOn(dev, cfg)
	if m.ranks > 1 {
		on = dev // ZeRO-3 moves its shards to the host itself
	}
	w, err := cfg.Family.Workload(on, cfg.sizes(), cfg.Seed)
	if err != nil {
		return nil, err
	}
	where, err := optim.StateOn(cfg.OptimizerState)
	if err != nil {
		w.Release()
		return nil, err
	}
	opt, err := models.NewOptimizer(w, cfg.Optimizer, cfg.LR, where, optim.KeepOnDevice(cfg.StateOnDevice...), optim.StateVisits(cfg.StateVisiting...), optim.StateVisitsAhead(cfg.StateAhead))
	if err != nil {
		w.Release()
		return nil, err
	}
	// The input on the host, copied in each step, and the target cloned
	// each step, as the demo's task gives the Trainer its batch
	// (demoTask.Batch): the replay's clock and memory are the run's.
	var input, target *ferry.Tensor
	if err := ferry.Catch(func() error {
		var in *ferry.Tensor
		in, target = w.Data(dev, cfg.Seed)
		input = in.To(dev.Host())
		in.Release()
		return nil
	}); err != nil {
		opt.Release()
		w.Release()
		return nil, err
	}
	var stream *offload.Streamer
	if m.ranks <= 1 && (len(cfg.ParamsOnHost) > 0 || cfg.GradsOnHost) {
		// As the Trainer sets it up (offload.Memory), on the replay's
		// offloader's streams where it passed them (WithStreams), as
		// offload.Memory shares its offloader's: a block freed after a
		// copy is reused once the copy's stream has passed it.
		sc := offload.StreamConfig{Prefetch: m.prefetch(), HostStepsBeside: inBackward,
			SerialGradCopies: cfg.SerialGradCopies, D2H: m.d2h, H2D: m.h2d}
		if sc.Params, err = offload.SelectParams(w.Parameters(), cfg.ParamsOnHost); err == nil && cfg.GradsOnHost {
			sc.Grads = w.Parameters()
		}
		if err == nil && len(cfg.StateOnDevice) > 0 { // as offload.Memory does
			sc.StayOnDevice, err = offload.SelectParams(w.Parameters(), cfg.StateOnDevice)
		}
		if err == nil && len(cfg.StateVisiting) > 0 {
			sc.GradsOnDevice, err = offload.SelectParams(w.Parameters(), cfg.StateVisiting)
		}
		if err == nil {
			stream, err = offload.NewStreamer(dev, sc)
		}
		if err == nil {
			err = offload.MoveToDevice(dev, w.Parameters())
		}
		if err != nil {
			input.Release()
			target.Release()
			opt.Release()
			w.Release()
			return nil, err
		}
	}
	release := func() {
		if stream != nil {
			stream.Close()
		}
		input.Release()
		target.Release()
		opt.Release()
		w.Release()
	}
	var rk *rankStep
	if m.ranks > 1 {
		if rk, err = m.rankStep(dev, w.Parameters(), opt, inBackward, shardsOnHost); err != nil {
			release()
			return nil, err
		}
		inner := release
		release = func() { rk.release(); inner() }
	}
	// The last step's updates inside backward: with a streamer, they may
	// run beside the device into the next step, and report their errors
	// once the next backward has begun.
	var updates *optim.InBackwardErr
	run := func(tape *ferry.Tape) error {
		if rk != nil && rk.full != nil {
			if err := rk.full.BeginStep(); err != nil {
				return err
			}
			rk.full.Attach(tape)
		}
		if stream != nil {
			if err := stream.BeginStep(); err != nil {
				return err
			}
			stream.Attach(tape)
		}
		xb, yb := tape.Adopt(input.To(dev)), tape.Adopt(target.Clone())
		x := tape.Input(xb)
		var y *ferry.Tensor
		tape.Autocast(m.cfg.Precision, func() { y = w.Forward(tape, x, false) })
		l := w.Loss(y, tape.Input(yb).To(dev))
		y.Release() // as the Trainer does: the loss keeps what it saved
		if rk != nil {
			if err := rk.backwardAndStep(l); err != nil {
				return err
			}
			return dev.Compute().Synchronize()
		}
		if err := backwardAndStep(l, opt, inBackward, stream, &updates); err != nil {
			return err
		}
		if stream != nil {
			if err := stream.EndStep(); err != nil {
				return err
			}
		}
		return dev.Compute().Synchronize()
	}
	st := &plan.Step{Run: run, Release: release}
	if h, ok := opt.(interface{ HostStateBytes() int64 }); ok {
		st.HostStateBytes = h.HostStateBytes
	}
	return st, nil
}

// rankStep is one data-parallel rank's backward and update, as
// train.Trainer runs them: gradients through a dist reducer (GradReady in
// backward, then Wait), then the optimizer, sharded at ZeRO 1 and 2.
type rankStep struct {
	hook func(*ferry.Tensor)
	wait func() error
	opt  optim.Optimizer
	full *dist.FullShard // ZeRO-3
	// beside: ZeRO-3's shards step beside the device as their gradients
	// land (dist.FullShard.SetStepBeside), by inner, the optimizer over
	// the shards.
	beside bool
	inner  optim.Stepper
}

// rankHostState checks the training state a rank of several keeps in
// host memory, and reports whether its shards are there: gradients and
// parameters in host memory are ZeRO-3's with the optimizer's state on
// the host (the gradients land in host memory then), all of the
// parameters' shards or none.
func (m planModel) rankHostState() (shardsOnHost bool, err error) {
	cfg := m.cfg
	if m.ranks <= 1 || len(cfg.ParamsOnHost) == 0 && !cfg.GradsOnHost {
		return false, nil
	}
	switch {
	case m.shard != 3 || cfg.OptimizerState != "host":
		return false, fmt.Errorf("demo: across %d ranks, gradients and parameters in host memory are ZeRO-3's, with the optimizer's state on the host (--zero 3 --optimizer-state host)", m.ranks)
	case len(cfg.ParamsOnHost) > 0 && !(len(cfg.ParamsOnHost) == 1 && cfg.ParamsOnHost[0] == "*"):
		return false, fmt.Errorf("demo: across %d ranks, ZeRO-3 keeps all of its shards in host memory or none, not %d parameters' (--parameters host)", m.ranks, len(cfg.ParamsOnHost))
	}
	return len(cfg.ParamsOnHost) > 0, nil
}

func (m planModel) rankStep(dev device.Device, params []*ferry.Tensor, opt optim.Stepper, inBackward, shardsOnHost bool) (*rankStep, error) {
	if inBackward && (m.shard != 3 || !optimStateOnHost(opt)) {
		return nil, fmt.Errorf("demo: a rank of %d cannot update inside backward (it averages the gradients first) but at ZeRO-3 with the optimizer's state on the host", m.ranks)
	}
	// On the meta device the collectives take the profile's interconnect
	// time (meta.Device.SimulateCollective); elsewhere none.
	var clock dist.CollectiveClock
	if c, ok := dev.(dist.CollectiveClock); ok {
		clock = c
	}
	comm := dist.PretendOn(m.rank, m.ranks, clock)
	rk := &rankStep{opt: opt}
	if m.shard == 3 {
		rk.beside = inBackward
		return rk, rk.fullShard(comm, params, opt, dist.FullShardOptions{ParamType: m.cfg.Precision, ShardsOnHost: shardsOnHost})
	}
	var owners []int
	if m.shard == 2 {
		sc, err := dist.NewGradientScatterer(comm, params, dist.ReducerOptions{})
		if err != nil {
			return nil, err
		}
		rk.hook, rk.wait, owners = sc.GradReady, sc.Wait, sc.Owners()
	} else {
		red, err := dist.NewGradientReducer(comm, params, dist.ReducerOptions{})
		if err != nil {
			return nil, err
		}
		rk.hook, rk.wait = red.GradReady, red.Wait
	}
	if m.shard > 0 {
		sh, err := dist.NewShardedOptimizer(comm, opt, params, dist.ShardOptions{Owners: owners})
		if err != nil {
			return nil, err
		}
		rk.opt = sh
	}
	return rk, nil
}

// fullShard sets rk up for ZeRO-3 as train.Trainer does: params sharded
// (dist.FullShard, with opts: gathered for products in the step's
// precision, the shards in host memory or not), an optimizer like opt
// over the shards.
func (rk *rankStep) fullShard(comm dist.Comm, params []*ferry.Tensor, opt optim.Optimizer, opts dist.FullShardOptions) error {
	fs, err := dist.NewFullShard(comm, params, opts)
	if err != nil {
		return err
	}
	inner, err := optim.Like(opt, fs.Shards())
	if err != nil {
		fs.Close()
		return err
	}
	st, ok := inner.(optim.Stepper)
	var fo *dist.FullShardOptimizer
	if !ok {
		err = fmt.Errorf("demo: %s is not an optim.Stepper", inner.Name())
	} else {
		fo, err = fs.Optimizer(st)
	}
	if err == nil {
		err = fs.Shard()
	}
	if err != nil {
		inner.Release()
		fs.Close()
		return err
	}
	fs.SetReduce(true)
	rk.full, rk.opt, rk.hook, rk.wait, rk.inner = fs, fo, fs.GradReady, fs.Wait, st
	return nil
}

// optimStateOnHost reports whether opt keeps its state on the host.
func optimStateOnHost(opt optim.Optimizer) bool {
	h, ok := opt.(optim.HostPlaced)
	return ok && h.StateOnHost()
}

// release frees what fullShard made (the shards and their optimizer).
func (rk *rankStep) release() {
	if rk != nil && rk.full != nil {
		rk.opt.Release()
		if err := rk.full.Close(); err != nil {
			panic(err)
		}
		rk.full = nil
	}
}

func (rk *rankStep) backwardAndStep(l *ferry.Tensor) error {
	if rk.full != nil {
		rk.full.SetReduce(true)
	}
	if rk.beside {
		// As train.Trainer does: this step's learning rate, each shard
		// stepped as its gradient lands.
		opts, upd := optim.InBackward(rk.inner)
		if err := rk.full.SetStepBeside(func(s *ferry.Tensor) error { opts.GradReady(s); return upd.Err() }); err != nil {
			return err
		}
	}
	if err := l.BackwardWith(ferry.BackwardOptions{GradReady: rk.hook}); err != nil {
		return err
	}
	if err := rk.wait(); err != nil {
		return err
	}
	if rk.beside {
		return rk.full.EndStep()
	}
	if err := rk.opt.Step(); err != nil {
		return err
	}
	rk.opt.ZeroGrad()
	if rk.full != nil {
		return rk.full.EndStep()
	}
	return nil
}

// backwardAndStep runs backward from l and the optimizer, after backward
// or (inBackward) inside it; updates holds the last step's in-backward
// updates, whose errors are reported here.
func backwardAndStep(l *ferry.Tensor, opt optim.Stepper, inBackward bool, stream *offload.Streamer, updates **optim.InBackwardErr) error {
	backward := func(opts ferry.BackwardOptions) error {
		if stream != nil {
			return stream.Backward(l, opts)
		}
		return l.BackwardWith(opts)
	}
	if inBackward {
		opts, upd := optim.InBackward(opt)
		err := backward(opts)
		if last := *updates; err == nil && last != nil {
			err = last.Err() // its updates had all run when this backward began
		}
		*updates = upd
		if err != nil {
			return err
		}
		return upd.Err()
	}
	if err := backward(ferry.BackwardOptions{}); err != nil {
		return err
	}
	if err := opt.Step(); err != nil {
		return err
	}
	opt.ZeroGrad()
	return nil
}

// Smaller is the family's smaller sizes (a smaller batch, a shorter
// sequence, …), each as a model to plan.
func (m planModel) Smaller() []plan.Variant {
	w, err := m.cfg.Family.Workload(meta.New(device.Options{}, nil), m.cfg.sizes(), m.cfg.Seed)
	if err != nil {
		return nil
	}
	defer w.Release()
	var vs []plan.Variant
	for _, v := range w.Smaller() {
		c := m.cfg
		c.Sizes = v.Sizes
		vs = append(vs, plan.Variant{Change: v.Change, Model: planModel{cfg: c, ranks: m.ranks, shard: m.shard, rank: m.rank}})
	}
	return vs
}

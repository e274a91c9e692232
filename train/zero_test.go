package train_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/dist"
	"ferry/nn"
	"ferry/offload"
	"ferry/optim"
	"ferry/train"
	"ferry/train/traintest"
)

// zeroRun is one rank's outcome.
type zeroRun struct {
	losses []float64
	params [][]float32
	res    *train.Result
	// stepParams is the most parameter bytes on the device inside a
	// step (evaluations and checkpoints, which ZeRO-3 runs on whole
	// parameters, left out).
	stepParams int64
}

// trainRanks trains the sharded MLP task on ranks in-process ranks
// (comm nil for ranks 0: one process), with cfg's Steps, Shard, Clip and
// checkpoint fields, from a fresh model (or a checkpoint with Resume).
func trainRanks(t *testing.T, ranks int, cfg train.Config) []zeroRun {
	t.Helper()
	return trainRanksWith(t, ranks, cfg, func(ps []*ferry.Tensor) (optim.Stepper, error) { return optim.NewAdamW(ps, 1e-2), nil })
}

// trainRanksWith is trainRanks with the optimizer newOpt makes.
func trainRanksWith(t *testing.T, ranks int, cfg train.Config, newOpt func([]*ferry.Tensor) (optim.Stepper, error)) []zeroRun {
	t.Helper()
	runs, err := trainRanksErr(ranks, cfg, newOpt)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// trainRanksErr is trainRanksWith returning the first rank's error.
func trainRanksErr(ranks int, cfg train.Config, newOpt func([]*ferry.Tensor) (optim.Stepper, error)) ([]zeroRun, error) {
	one := func(comm dist.Comm) (zeroRun, error) {
		dev, err := device.Open("cpu", device.Options{})
		if err != nil {
			return zeroRun{}, err
		}
		defer dev.Close()
		task := sharded{&traintest.MLP{Dev: dev, Layers: 3, Width: 48, Rows: 4, Seed: 7}}
		model := task.Model()
		defer nn.Release(model)
		opt, err := newOpt(model.Parameters())
		if err != nil {
			return zeroRun{}, err
		}
		defer opt.Release()
		c := cfg
		c.Optimizer, c.Comm, c.BucketBytes, c.CheckEvery = opt, comm, 700, 1
		var run zeroRun
		alloc := dev.Allocator()
		c.Hooks = train.Hooks{Step: func(s train.StepInfo) { run.losses = append(run.losses, s.Loss) },
			StepStart: func(int) { alloc.ResetPeak() },
			StepEnd: func(int) {
				run.stepParams = max(run.stepParams, alloc.Stats().ByCategory[device.Parameter].Peak)
			}}
		tr, err := train.New(dev, task, c)
		if err != nil {
			return run, err
		}
		defer tr.Close()
		if run.res, err = tr.Run(context.Background()); err != nil {
			return run, err
		}
		for _, p := range model.Parameters() {
			run.params = append(run.params, p.Float32s())
		}
		return run, nil
	}
	if ranks == 0 {
		run, err := one(nil)
		if err != nil {
			return nil, err
		}
		return []zeroRun{run}, nil
	}
	comms := dist.NewGroup(ranks)
	runs := make([]zeroRun, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A failed rank's closed communicator fails the others'
			// collectives: an error each, never a hang.
			defer comms[r].Close()
			runs[r], errs[r] = one(comms[r])
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return runs, nil
}

// Config.Shard 1 and 2 on three ranks train exactly as Shard 0 (losses
// and every rank's parameters bit for bit, with clipping that bites), and
// a rank holds a share of the optimizer state (and, at 2, of the
// gradients).
func TestShardedTrainingEqualsDataParallel(t *testing.T) {
	const ranks, steps = 3, 4
	ref := trainRanks(t, ranks, train.Config{Steps: steps, Clip: 0.05})
	// Gradient accumulation: the reducer hooks the last micro-batch only.
	refAccum := trainRanks(t, ranks, train.Config{Steps: steps, Clip: 0.05, Accum: 2})
	for _, shard := range []int{1, 2, 3} {
		got := trainRanks(t, ranks, train.Config{Steps: steps, Clip: 0.05, Shard: shard, Accum: 2})
		for r := range got {
			if !sameBits(got[r].params, refAccum[r].params) {
				t.Fatalf("shard %d, accumulating 2 micro-batches, rank %d: parameters differ from unsharded", shard, r)
			}
		}
		got = trainRanks(t, ranks, train.Config{Steps: steps, Clip: 0.05, Shard: shard})
		for r := range got {
			for i := range ref[r].losses {
				if got[r].losses[i] != ref[r].losses[i] {
					t.Fatalf("shard %d, rank %d, step %d: loss %v, unsharded %v", shard, r, i+1, got[r].losses[i], ref[r].losses[i])
				}
			}
			if !sameBits(got[r].params, ref[r].params) {
				t.Fatalf("shard %d, rank %d: parameters differ from unsharded data parallelism", shard, r)
			}
		}
		full := ref[0].res.PeakBytes["optimizer_state"]
		fullGrad := ref[0].res.PeakBytes["gradient"]
		fullParams := ref[0].res.PeakBytes["parameter"]
		var sum int64
		for r, run := range got {
			st, g := run.res.PeakBytes["optimizer_state"], run.res.PeakBytes["gradient"]
			sum += st
			t.Logf("shard %d, rank %d: optimizer state %d bytes (unsharded %d), gradients at peak %d (unsharded %d)", shard, r, st, full, g, fullGrad)
			if st == 0 || st*2 >= full {
				t.Errorf("shard %d, rank %d holds %d bytes of optimizer state, unsharded %d", shard, r, st, full)
			}
			if shard >= 2 && g >= fullGrad {
				t.Errorf("shard %d, rank %d: gradients peak at %d bytes, unsharded %d", shard, r, g, fullGrad)
			}
			if p := max(run.stepParams, run.res.PeakBytes["parameter"]); shard == 3 {
				t.Logf("shard 3, rank %d: parameters peak at %d bytes in the run (unsharded %d)", r, p, fullParams)
				// A third of the parameters, plus the one gathered for
				// the op under way (the largest is a 48×48 weight), plus
				// the shards' rounding to 256 elements.
				if largest := int64(48 * 48 * 4); p > fullParams/ranks+largest+int64(4*256*ranks) {
					t.Errorf("shard 3, rank %d: parameters peak at %d bytes, unsharded %d", r, p, fullParams)
				}
			}
		}
		if sum != full {
			t.Errorf("shard %d: the ranks' optimizer state adds to %d bytes, unsharded %d", shard, sum, full)
		}
	}
	// The clip bit: without it the run differs.
	noClip := trainRanks(t, ranks, train.Config{Steps: steps})
	if sameBits(noClip[0].params, ref[0].params) {
		t.Fatal("clipping at 0.05 changed nothing: the test does not test it")
	}
}

// In bfloat16, ZeRO-3 gathers the weights as bfloat16 copies for the
// products (dist.FullShardOptions.ParamType) and still trains as
// unsharded data parallelism, bit for bit, with clipping and
// accumulation; its ranks hold fewer parameter bytes at their peak than
// in float32 (a gathered weight is half the bytes).
func TestShardedBF16EqualsDataParallel(t *testing.T) {
	const ranks, steps = 3, 3
	cfg := train.Config{Steps: steps, Clip: 0.05, Accum: 2, Precision: device.BFloat16}
	ref := trainRanks(t, ranks, cfg)
	cfg.Shard = 3
	got := trainRanks(t, ranks, cfg)
	cfg.Precision = device.Float32
	fp32 := trainRanks(t, ranks, cfg)
	for r := range got {
		for i := range ref[r].losses {
			if got[r].losses[i] != ref[r].losses[i] {
				t.Fatalf("rank %d, step %d: loss %v at ZeRO-3, %v unsharded", r, i+1, got[r].losses[i], ref[r].losses[i])
			}
		}
		if !sameBits(got[r].params, ref[r].params) {
			t.Fatalf("rank %d: bfloat16 parameters differ between ZeRO-3 and unsharded data parallelism", r)
		}
		if sameBits(got[r].params, fp32[r].params) {
			t.Fatalf("rank %d: bfloat16 and float32 trained the same parameters: the test does not test bfloat16", r)
		}
		t.Logf("rank %d: parameters peak at %d bytes in a bfloat16 step, %d in float32", r, got[r].stepParams, fp32[r].stepParams)
		if got[r].stepParams >= fp32[r].stepParams {
			t.Errorf("rank %d: parameters peak at %d bytes in a bfloat16 step, %d in float32", r, got[r].stepParams, fp32[r].stepParams)
		}
	}
}

// ZeRO-3 with the optimizer's state on the host and a policy's updates
// inside backward steps each shard beside the device as its mean gradient
// lands, and trains to the losses and parameters of unsharded data
// parallelism stepping after backward, bit for bit, with AdamW; so does
// ZeRO-3 with its shards in host memory (the memory mode's parameters in
// host memory), stepping beside or clipped after backward, its device
// holding fewer parameter bytes. Clipping with updates inside backward,
// and such updates below ZeRO-3 or with the state on the device, are
// refused.
func TestShardsStepBesideTheDevice(t *testing.T) {
	const ranks, steps = 3, 4
	adamw := func(host bool) func([]*ferry.Tensor) (optim.Stepper, error) {
		return func(ps []*ferry.Tensor) (optim.Stepper, error) {
			if host {
				return optim.NewAdamW(ps, 1e-2, optim.OnHost()), nil
			}
			return optim.NewAdamW(ps, 1e-2), nil
		}
	}
	ref := trainRanksWith(t, ranks, train.Config{Steps: steps}, adamw(false))
	refClip := trainRanksWith(t, ranks, train.Config{Steps: steps, Clip: 0.05}, adamw(false))
	onDevice := trainRanksWith(t, ranks, train.Config{Steps: steps, Shard: 3}, adamw(true))
	all := []string{"*"}
	for _, tc := range []struct {
		name string
		cfg  train.Config
		ref  []zeroRun
	}{
		{"stepping beside", train.Config{Steps: steps, Shard: 3, Memory: offload.Setup{OptimizerInBackward: true}}, ref},
		{"shards in host memory, stepping beside", train.Config{Steps: steps, Shard: 3, Memory: offload.Setup{OptimizerInBackward: true, ParamsOnHost: all}}, ref},
		{"shards in host memory, clipped", train.Config{Steps: steps, Shard: 3, Clip: 0.05, Memory: offload.Setup{ParamsOnHost: all}}, refClip},
	} {
		got := trainRanksWith(t, ranks, tc.cfg, adamw(true))
		for r := range got {
			for i := range tc.ref[r].losses {
				if got[r].losses[i] != tc.ref[r].losses[i] {
					t.Fatalf("%s, rank %d, step %d: loss %v, %v unsharded", tc.name, r, i+1, got[r].losses[i], tc.ref[r].losses[i])
				}
			}
			if !sameBits(got[r].params, tc.ref[r].params) {
				t.Fatalf("%s, rank %d: parameters differ from unsharded data parallelism", tc.name, r)
			}
			if len(tc.cfg.Memory.ParamsOnHost) > 0 {
				// The shards are in host memory: a rank's device holds
				// only the parameter in use.
				t.Logf("%s, rank %d: parameters peak at %d bytes on the device in a step, %d with the shards there", tc.name, r, got[r].stepParams, onDevice[r].stepParams)
				if got[r].stepParams >= onDevice[r].stepParams {
					t.Errorf("%s, rank %d: parameters peak at %d bytes on the device, %d with the shards there", tc.name, r, got[r].stepParams, onDevice[r].stepParams)
				}
			}
		}
	}
	for _, tc := range []struct {
		name  string
		cfg   train.Config
		host  bool
		wants string
	}{
		{"state on the device", train.Config{Steps: 1, Shard: 3, Memory: offload.Setup{OptimizerInBackward: true}}, false, "ZeRO-3 with the optimizer's state on the host"},
		{"ZeRO-2", train.Config{Steps: 1, Shard: 2, Memory: offload.Setup{OptimizerInBackward: true}}, true, "ZeRO-3 with the optimizer's state on the host"},
		{"clipping", train.Config{Steps: 1, Shard: 3, Clip: 1, Memory: offload.Setup{OptimizerInBackward: true}}, true, "lip"},
	} {
		_, err := trainRanksErr(ranks, tc.cfg, adamw(tc.host))
		if err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.wants)
		}
	}
}

// A checkpoint written by two sharded ranks holds the whole model and
// optimizer state: one process loads it and finds exactly what unsharded
// data parallelism saved at that step; two sharded ranks resume from it to
// the same parameters as the run that never stopped, bit for bit; and
// three ranks (another count) resume from it too.
func TestShardedCheckpointsMoveAcrossRankCounts(t *testing.T) {
	const steps = 4
	for _, shard := range []int{1, 2, 3} {
		dir := t.TempDir()
		unsharded := filepath.Join(dir, "unsharded")
		ref := trainRanks(t, 2, train.Config{Steps: steps, CheckpointDir: unsharded, CheckpointEvery: 2})
		ckpt := filepath.Join(dir, "sharded")
		whole := trainRanks(t, 2, train.Config{Steps: steps, Shard: shard, CheckpointDir: ckpt, CheckpointEvery: 2})
		if !sameBits(whole[0].params, ref[0].params) {
			t.Fatalf("shard %d: the sharded run differs from the unsharded one", shard)
		}
		// ZeRO-3 writes the last step's checkpoint, and evaluates, with
		// the parameters sharded on the device (rank 0 reads them
		// gathered in host memory): the peak since that step began is
		// about half the parameters, plus at most twice the largest gathered.
		if p, all := whole[0].res.PeakBytes["parameter"], ref[0].res.PeakBytes["parameter"]; shard == 3 && p > all/2+2*48*48*4+4*256*2 {
			t.Errorf("ZeRO-3: parameters peak at %d bytes around the last checkpoint, %d unsharded", p, all)
		}
		// One process reads both step-2 checkpoints: identical contents.
		load := func(path string) ([][]float32, map[string][]float32, map[string]float64) {
			dev, err := device.Open("cpu", device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			task := &traintest.MLP{Dev: dev, Layers: 3, Width: 48, Rows: 4, Seed: 99}
			model := task.Model()
			opt := optim.NewAdamW(model.Parameters(), 1e-2)
			c := &train.Checkpointer{Dir: filepath.Dir(path)}
			meta, err := train.ReadMeta(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Load(path, model, opt, meta.Identity); err != nil {
				t.Fatal(err)
			}
			var ps [][]float32
			for _, p := range model.Parameters() {
				ps = append(ps, p.Float32s())
			}
			st := opt.State()
			ts := map[string][]float32{}
			for k, v := range st.Tensors {
				ts[k] = v.Float32s()
			}
			return ps, ts, st.Scalars
		}
		p1, s1, c1 := load(filepath.Join(ckpt, "step-00000002"))
		p0, s0, c0 := load(filepath.Join(unsharded, "step-00000002"))
		if !sameBits(p1, p0) {
			t.Fatalf("shard %d: the checkpoint's model differs from unsharded data parallelism's", shard)
		}
		if len(s1) != len(s0) || len(s0) == 0 || len(c1) != len(c0) {
			t.Fatalf("shard %d: the checkpoint holds %d state tensors, %d scalars; unsharded %d, %d", shard, len(s1), len(c1), len(s0), len(c0))
		}
		for k, v := range s0 {
			if !sameBits([][]float32{s1[k]}, [][]float32{v}) {
				t.Fatalf("shard %d: optimizer state %q differs", shard, k)
			}
		}
		for k, v := range c0 {
			if c1[k] != v {
				t.Fatalf("shard %d: scalar %q is %v, unsharded %v", shard, k, c1[k], v)
			}
		}
		// Two ranks resume at step 2 and finish as the unbroken run did.
		removeAfter(t, ckpt, 2)
		resumed := trainRanks(t, 2, train.Config{Steps: steps, Shard: shard, CheckpointDir: ckpt, Resume: true})
		if resumed[0].res.ResumedFrom != 2 {
			t.Fatalf("resumed from %d", resumed[0].res.ResumedFrom)
		}
		for r := range resumed {
			if !sameBits(resumed[r].params, whole[r].params) {
				t.Fatalf("shard %d, rank %d: resumed parameters differ from the unbroken run's", shard, r)
			}
		}
		// Three ranks, and one process, take the same checkpoint.
		removeAfter(t, ckpt, 2)
		// The rank count is part of a run's identity: changing it is an
		// override, recorded in later checkpoints.
		over := []string{"ranks"}
		if got := trainRanks(t, 3, train.Config{Steps: steps, Shard: shard, CheckpointDir: ckpt, Resume: true, Overrides: over}); got[2].res.ResumedFrom != 2 {
			t.Fatalf("three ranks resumed from %d", got[2].res.ResumedFrom)
		}
		removeAfter(t, ckpt, 2)
		if got := trainRanks(t, 0, train.Config{Steps: steps, CheckpointDir: ckpt, Resume: true, Overrides: over}); got[0].res.ResumedFrom != 2 {
			t.Fatalf("one process resumed from %d", got[0].res.ResumedFrom)
		}
	}
}

// removeAfter deletes the checkpoints of steps after keep (up to 100) in
// dir, and the file naming the latest, so that a resume takes step keep.
func removeAfter(t *testing.T, dir string, keep int) {
	t.Helper()
	c := &train.Checkpointer{Dir: dir}
	for s := keep + 1; s <= 100; s++ {
		if err := os.RemoveAll(c.PathFor(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(dir, "latest")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if latest, err := c.Latest(); err != nil || latest != c.PathFor(keep) {
		t.Fatalf("latest checkpoint %q (%v), want step %d's", latest, err, keep)
	}
}

func TestShardConfigRefused(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	task := &traintest.MLP{Dev: dev, Layers: 1, Width: 4, Rows: 2, Seed: 1}
	opt := optim.NewAdamW(task.Model().Parameters(), 1e-2)
	_, err = train.New(dev, task, train.Config{Steps: 1, Optimizer: opt, Shard: 4})
	var ce *train.ConfigError
	if !asConfigError(err, &ce) || ce.Field != "Shard" {
		t.Fatalf("Shard 4: %v, want a ConfigError for Shard", err)
	}
	// An optimizer that cannot step one parameter cannot be sharded.
	comms := dist.NewGroup(2)
	_, err = train.New(dev, task, train.Config{Steps: 1, Optimizer: plainOpt{opt}, Comm: comms[0], Shard: 1})
	if !asConfigError(err, &ce) || ce.Field != "Shard" {
		t.Fatalf("a non-Stepper optimizer: %v, want a ConfigError for Shard", err)
	}
}

// plainOpt hides StepParam.
type plainOpt struct{ o *optim.AdamW }

func (p plainOpt) Step() error      { return p.o.Step() }
func (p plainOpt) LR() float64      { return p.o.LR() }
func (p plainOpt) SetLR(lr float64) { p.o.SetLR(lr) }
func (p plainOpt) ZeroGrad()        { p.o.ZeroGrad() }
func (p plainOpt) Release()         { p.o.Release() }
func (p plainOpt) Name() string     { return p.o.Name() }
func (p plainOpt) Hyper() map[string]any {
	return p.o.Hyper()
}

func asConfigError(err error, ce **train.ConfigError) bool { return errors.As(err, ce) }

// Every registered optimizer goes through the Trainer's whole machinery
// with the same bits: its state on the host trains as on the device,
// ZeRO-1 and -2 on two ranks train as unsharded data parallelism, and a
// sharded run resumed from its checkpoint finishes as the unbroken run.
// (8-bit AdamW quantises every parameter here: min_8bit_size 16.)
func TestEveryOptimizerPlacedShardedResumed(t *testing.T) {
	for _, name := range optim.Names() {
		t.Run(name, func(t *testing.T) {
			h := map[string]float64{"lr": 1e-2}
			r, _ := optim.Lookup(name)
			for k, v := range map[string]float64{"min_8bit_size": 16, "momentum": 0.9, "weight_decay": 0.05} {
				if _, ok := r.Defaults[k]; ok {
					h[k] = v
				}
			}
			mk := func(opts ...optim.Option) func([]*ferry.Tensor) (optim.Stepper, error) {
				return func(ps []*ferry.Tensor) (optim.Stepper, error) {
					o, err := optim.New(name, ps, h, opts...)
					if err != nil {
						return nil, err
					}
					return o.(optim.Stepper), nil
				}
			}
			const steps = 4
			dev := trainRanksWith(t, 0, train.Config{Steps: steps}, mk())
			host := trainRanksWith(t, 0, train.Config{Steps: steps}, mk(optim.OnHost()))
			if !sameBits(host[0].params, dev[0].params) {
				t.Fatalf("the state on the host trains other parameters than on the device")
			}
			dir := t.TempDir()
			ref := trainRanksWith(t, 2, train.Config{Steps: steps}, mk())
			for _, shard := range []int{1, 2, 3} {
				ckpt := filepath.Join(dir, fmt.Sprint("zero", shard))
				whole := trainRanksWith(t, 2, train.Config{Steps: steps, Shard: shard, CheckpointDir: ckpt, CheckpointEvery: 2}, mk())
				if !sameBits(whole[0].params, ref[0].params) || !sameBits(whole[1].params, ref[0].params) {
					t.Fatalf("ZeRO-%d trains other parameters than data parallelism", shard)
				}
				removeAfter(t, ckpt, 2)
				resumed := trainRanksWith(t, 2, train.Config{Steps: steps, Shard: shard, CheckpointDir: ckpt, Resume: true}, mk())
				if resumed[0].res.ResumedFrom != 2 || !sameBits(resumed[0].params, whole[0].params) {
					t.Fatalf("ZeRO-%d resumed from step %d to other parameters than the unbroken run", shard, resumed[0].res.ResumedFrom)
				}
			}
		})
	}
}

package dist_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/dist"
	"ferry/nn"
	"ferry/optim"
)

// wideModel is Linear(24,300) → ReLU → Linear(300,5), tied to nothing:
// parameters of 7200, 300, 1500 and 5 elements, so that on 3 ranks (a
// shard is a multiple of 256 elements) some split unevenly, some leave a
// rank empty, and one lies on one rank alone.
func wideModel(t tb, dev device.Device, seed uint64) *nn.Sequential {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	l1, err := nn.NewLinear(dev, 24, 300, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := nn.NewLinear(dev, 300, 5, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	return nn.NewSequential(l1, nn.ReLU{}, l2)
}

func wideBatch(step, rows int) (x, y []float32) {
	rng := rand.New(rand.NewPCG(uint64(step), 9))
	x, y = make([]float32, rows*24), make([]float32, rows*5)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.NormFloat64())
	}
	return x, y
}

// z3Run is one rank's record of a run: the parameters after each step,
// the norms before clipping, the state gathered on rank 0.
type z3Run struct {
	params  [][][]float32
	norms   []float64
	state   optim.State
	release func()
	shard   int64 // parameter bytes held while sharded
	stats   dist.FullShardStats
}

// trainZ3 trains wideModel on one rank: stage 0 (GradientReducer) or 3
// (FullShard), with optimizer name, accum micro-batches a step, clipping
// at clip (0: not), in bfloat16 autocast if bf16 (ZeRO-3 then gathers
// bfloat16 copies of the weights: FullShardOptions.ParamType).
func trainZ3(t tb, c dist.Comm, stage int, name string, steps, accum int, clip float64, bf16 bool) *z3Run {
	return trainZ3With(t, c, stage, name, steps, accum, clip, bf16, false, false)
}

// trainZ3With is trainZ3; beside (stage 3, no clipping) keeps the
// optimizer's state on the host and steps each shard beside the device
// as its gradient lands (FullShard.SetStepBeside); onHost keeps the
// state and the shards' values in host memory (ShardsOnHost).
func trainZ3With(t tb, c dist.Comm, stage int, name string, steps, accum int, clip float64, bf16, beside, onHost bool) *z3Run {
	hyper := map[string]float64{"lr": 0.01}
	if name == "adamw8bit" {
		hyper["min_8bit_size"] = 1 // every shard quantised, as its parameter is
	}
	rank, size := c.Rank(), c.Size()
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := wideModel(t, dev, uint64(30+rank)) // ranks start apart: Broadcast
	ps := m.Parameters()
	run := &z3Run{release: func() {}}
	var fs *dist.FullShard
	var red *dist.GradientReducer
	var opt optim.Optimizer
	var fopt *dist.FullShardOptimizer
	if stage == 3 {
		opts := dist.FullShardOptions{ShardsOnHost: onHost}
		if bf16 {
			opts.ParamType = device.BFloat16
		}
		if fs, err = dist.NewFullShard(c, ps, opts); err != nil {
			t.Fatal(err)
		}
		if err := fs.Broadcast(0); err != nil {
			t.Fatal(err)
		}
		if err := fs.Shard(); err != nil {
			t.Fatal(err)
		}
		var where []optim.Option
		if beside || onHost {
			where = append(where, optim.OnHost())
		}
		inner, err := optim.New(name, fs.Shards(), hyper, where...)
		if err != nil {
			t.Fatal(err)
		}
		if fopt, err = fs.Optimizer(inner.(optim.Stepper)); err != nil {
			t.Fatal(err)
		}
		if beside {
			run.release = func() {
				if err := fs.SetStepBeside(nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		opt = fopt
		run.shard = fs.ShardBytes()
	} else {
		if red, err = dist.NewGradientReducer(c, ps, dist.ReducerOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := red.Broadcast(0); err != nil {
			t.Fatal(err)
		}
		if opt, err = optim.New(name, ps, hyper); err != nil {
			t.Fatal(err)
		}
	}
	const rows = 4
	for step := 1; step <= steps; step++ {
		if fs != nil {
			if err := fs.BeginStep(); err != nil {
				t.Fatal(err)
			}
		}
		if beside {
			opts, upd := optim.InBackward(fopt.Inner())
			if err := fs.SetStepBeside(func(s *ferry.Tensor) error { opts.GradReady(s); return upd.Err() }); err != nil {
				t.Fatal(err)
			}
		}
		for micro := 0; micro < accum; micro++ {
			x, y := wideBatch(step*10+micro, rows*size)
			lo, hi := rank*rows, (rank+1)*rows
			xt := ferry.FromFloat32s(dev, x[lo*24:hi*24], rows, 24)
			yt := ferry.FromFloat32s(dev, y[lo*5:hi*5], rows, 5)
			last := micro == accum-1
			err := ferry.Step(func(tape *ferry.Tape) error {
				if fs != nil {
					fs.Attach(tape)
				}
				var loss *ferry.Tensor
				forward := func() { loss = ferry.MSELoss(m.Forward(tape.Input(xt)), tape.Input(yt)) }
				if bf16 {
					tape.Autocast(device.BFloat16, forward)
				} else {
					forward()
				}
				if accum > 1 {
					loss = ferry.Scale(loss, 1/float32(accum))
				}
				switch {
				case fs != nil:
					fs.SetReduce(last)
					return loss.BackwardWith(ferry.BackwardOptions{GradReady: fs.GradReady})
				case last:
					return loss.BackwardWith(ferry.BackwardOptions{GradReady: red.GradReady})
				default:
					return loss.Backward()
				}
			})
			xt.Release()
			yt.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		var norm float64
		if fs != nil {
			if err := fs.Wait(); err != nil {
				t.Fatal(err)
			}
			switch {
			case beside:
				_, err = fs.GradNorm()
				if err == nil {
					t.Fatal("GradNorm with the shards stepping beside the device: no error")
				}
				err = nil
			case clip > 0:
				norm, err = fs.ClipGradNorm(clip)
			default:
				norm, err = fs.GradNorm()
			}
		} else {
			if err := red.Wait(); err != nil {
				t.Fatal(err)
			}
			if clip > 0 {
				norm, err = optim.ClipGradNorm(ps, clip)
			} else {
				norm, err = optim.GradNorm(ps)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		run.norms = append(run.norms, norm)
		if !beside { // the shards step as their gradients land, beside
			if err := opt.Step(); err != nil {
				t.Fatal(err)
			}
			opt.ZeroGrad()
		}
		if fs != nil {
			if err := fs.EndStep(); err != nil {
				t.Fatal(err)
			}
			for _, p := range ps {
				if !p.PagedOut() {
					t.Fatalf("rank %d, step %d: %q is on the device after the step", rank, step, p.Name())
				}
			}
			for _, sh := range fs.Shards() {
				if onHost && !sh.PagedOut() {
					t.Fatalf("rank %d, step %d: the shard of %q is on the device, not in host memory", rank, step, sh.Name())
				}
			}
			if err := fs.Unshard(); err != nil {
				t.Fatal(err)
			}
		}
		var now [][]float32
		for _, p := range ps {
			now = append(now, p.Float32s())
		}
		run.params = append(run.params, now)
		if fs != nil {
			if err := fs.Shard(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fs != nil {
		run.stats = fs.Stats()
	}
	if fopt != nil {
		st, release, err := fopt.GatherState(0)
		if err != nil {
			t.Fatal(err)
		}
		run.state, run.release = st, release
	} else {
		run.state = opt.(optim.Stateful).State()
	}
	return run
}

func z3OnRanks(t *testing.T, comms []dist.Comm, f func(tb, dist.Comm) *z3Run) []*z3Run {
	t.Helper()
	runs := make([]*z3Run, len(comms))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = f(&rankT{t: t, mu: &mu}, c)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return runs
}

// sameAsZeRO0 fails t unless every rank of full (ZeRO-3, what) had
// zero's parameters after every step, bit for bit, and the state full
// gathered on rank 0 is the unsharded optimizer's: the same tensors,
// shapes, bytes and scalars. It releases full's gathered state when the
// test ends.
func sameAsZeRO0(t *testing.T, what string, zero, full []*z3Run) {
	t.Helper()
	for r := range full {
		t.Cleanup(full[r].release)
		for s := range zero[r].params {
			for i := range zero[r].params[s] {
				if !sameBits(zero[r].params[s][i], full[r].params[s][i]) {
					t.Fatalf("rank %d, step %d: parameter %d differs between ZeRO-0 and %s", r, s+1, i, what)
				}
			}
		}
	}
	want, got := zero[0].state, full[0].state
	if len(want.Tensors) != len(got.Tensors) || !maps(want.Scalars, got.Scalars) {
		t.Fatalf("%s gathered state has %d tensors and scalars %v, want %d and %v", what, len(got.Tensors), got.Scalars, len(want.Tensors), want.Scalars)
	}
	for k, w := range want.Tensors {
		g := got.Tensors[k]
		if g == nil || !slices.Equal(g.Shape(), w.Shape()) || !slices.Equal(g.RawBytes(), w.RawBytes()) {
			t.Fatalf("%s gathered state %q differs from the unsharded optimizer's", what, k)
		}
	}
}

// ZeRO-3 on 3 in-process ranks trains to the parameters, norms and
// optimizer state of unsharded data parallelism, bit for bit, with
// AdamW, AdamW8bit and SGD, clipping and accumulation, in float32 and in
// bfloat16 autocast (the weights gathered as bfloat16 copies); each rank
// holds about a third of the parameters.
func TestFullShardEqualsDataParallel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		accum int
		clip  float64
		bf16  bool
	}{{"adamw", 1, 0.05, false}, {"adamw8bit", 2, 0, false}, {"sgd", 1, 0, false}, {"adamw", 2, 0.05, false},
		{"adamw", 2, 0.05, true}, {"sgd", 1, 0, true}} {
		name := tc.name
		if tc.bf16 {
			name += "-bf16"
		}
		t.Run(name, func(t *testing.T) {
			const ranks, steps = 3, 4
			zero := z3OnRanks(t, dist.NewGroup(ranks), func(rt tb, c dist.Comm) *z3Run {
				return trainZ3(rt, c, 0, tc.name, steps, tc.accum, tc.clip, tc.bf16)
			})
			full := z3OnRanks(t, dist.NewGroup(ranks), func(rt tb, c dist.Comm) *z3Run {
				return trainZ3(rt, c, 3, tc.name, steps, tc.accum, tc.clip, tc.bf16)
			})
			if tc.bf16 {
				// Per micro-batch the weights are gathered as bfloat16
				// copies, 2 bytes an element: the first (2560 elements a
				// rank, 3 ranks) in forward alone (backward needs no
				// gradient of the input), the second (512) in forward and
				// backward; the biases (256 each) in float32, in forward
				// alone (their gradients need no values). The test's
				// Unshard after each step gathers every parameter in
				// float32 once.
				micro := int64(2*3*2560 + 2*2*3*512 + 2*4*3*256)
				unshard := int64(4 * 3 * (2560 + 256 + 512 + 256))
				want := steps * (int64(tc.accum)*micro + unshard)
				if st := full[0].stats; st.BytesGathered != want {
					t.Errorf("gathered %d bytes in %d steps (%d gathers), want %d", st.BytesGathered, steps, st.Gathers, want)
				}
			}
			sameAsZeRO0(t, "ZeRO-3", zero, full)
			for r := range ranks {
				if !slices.Equal(zero[r].norms, full[r].norms) {
					t.Fatalf("rank %d: norms %v (ZeRO-0) and %v (ZeRO-3)", r, zero[r].norms, full[r].norms)
				}
			}
			// Each rank holds its shards: 7200, 300, 1500, 5 elements at
			// 256-element grains over 3 ranks.
			var total int64
			for r := range ranks {
				total += full[r].shard
			}
			if total != 4*(7200+300+1500+5) {
				t.Fatalf("the shards hold %d bytes together, want the model's %d", total, 4*(7200+300+1500+5))
			}
			if full[0].shard > 4*(7200+300+1500+5)/2 {
				t.Fatalf("rank 0 holds %d parameter bytes of %d", full[0].shard, total)
			}
			if len(full[1].state.Tensors) != 0 {
				t.Fatalf("rank 1 got %d state tensors; only the root does", len(full[1].state.Tensors))
			}
		})
	}
}

// The shards stepping beside the device as their gradients land
// (SetStepBeside, the state on the host), and the shards in host memory
// (ShardsOnHost) stepping beside or after Wait, train to ZeRO-0's
// parameters and state, bit for bit, with AdamW and SGD, with
// accumulation and, after Wait, clipping; a rank's device then holds none
// of its shards.
func TestFullShardStepsBesideEqualDataParallel(t *testing.T) {
	for _, tc := range []struct {
		name           string
		accum          int
		clip           float64
		beside, onHost bool
	}{{"adamw", 1, 0, true, false}, {"sgd", 2, 0, true, false}, {"adamw", 2, 0, true, false},
		{"adamw", 2, 0, true, true}, {"adamw", 1, 0.05, false, true}, {"sgd", 2, 0, false, true}} {
		t.Run(fmt.Sprintf("%s-accum%d-clip%v-beside%v-onhost%v", tc.name, tc.accum, tc.clip, tc.beside, tc.onHost), func(t *testing.T) {
			const ranks, steps = 3, 4
			zero := z3OnRanks(t, dist.NewGroup(ranks), func(rt tb, c dist.Comm) *z3Run {
				return trainZ3(rt, c, 0, tc.name, steps, tc.accum, tc.clip, false)
			})
			full := z3OnRanks(t, dist.NewGroup(ranks), func(rt tb, c dist.Comm) *z3Run {
				return trainZ3With(rt, c, 3, tc.name, steps, tc.accum, tc.clip, false, tc.beside, tc.onHost)
			})
			sameAsZeRO0(t, "ZeRO-3 stepping beside", zero, full)
		})
	}
}

// A whole state (an unsharded optimizer's) loads into ZeRO-3 at another
// rank count: each rank keeps its part, and gathering gives it back.
func TestFullShardStateRoundTrip(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := wideModel(t, dev, 5)
	ps := m.Parameters()
	adam := optim.NewAdamW(ps, 0.01)
	for _, p := range ps {
		g := ferry.Full(dev, 0.5, p.Shape()...)
		p.SetGrad(g)
	}
	if err := adam.Step(); err != nil {
		t.Fatal(err)
	}
	whole := adam.State()
	comms := dist.NewGroup(2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := make([]optim.State, 2)
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := &rankT{t: t, mu: &mu}
			d, err := device.Open("cpu", device.Options{})
			if err != nil {
				rt.Fatal(err)
			}
			mm := wideModel(rt, d, 5)
			fs, err := dist.NewFullShard(c, mm.Parameters(), dist.FullShardOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			inner := optim.NewAdamW(fs.Shards(), 0.01)
			fo, err := fs.Optimizer(inner)
			if err != nil {
				rt.Fatal(err)
			}
			if err := fo.SetState(whole); err != nil {
				rt.Fatal(err)
			}
			st, _, err := fo.GatherState(0)
			if err != nil {
				rt.Fatal(err)
			}
			got[i] = st
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for k, w := range whole.Tensors {
		g := got[0].Tensors[k]
		if g == nil || !slices.Equal(g.RawBytes(), w.RawBytes()) || !slices.Equal(g.Shape(), w.Shape()) {
			t.Fatalf("state %q did not survive SetState and GatherState", k)
		}
	}
	if !maps(whole.Scalars, got[0].Scalars) {
		t.Fatalf("scalars %v, want %v", got[0].Scalars, whole.Scalars)
	}
}

// An optimizer whose state for a shard is not the shard's part of the
// parameter's (AdamW8bit quantises parameters of 4096 elements or more
// only) is refused, saying why.
func TestFullShardRefusesUnsplittableState(t *testing.T) {
	comms := dist.NewGroup(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev, err := device.Open("cpu", device.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			rng := rand.New(rand.NewPCG(1, 1))
			l, err := nn.NewLinear(dev, 80, 60, false, rng) // 4800 elements: 2560 + 2240 on 2 ranks
			if err != nil {
				errs[i] = err
				return
			}
			fs, err := dist.NewFullShard(c, l.Parameters(), dist.FullShardOptions{})
			if err != nil {
				errs[i] = err
				return
			}
			inner, err := optim.New("adamw8bit", fs.Shards(), nil)
			if err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = fs.Optimizer(inner.(optim.Stepper))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "cannot be split by elements") {
			t.Fatalf("rank %d: %v, want a refusal", r, err)
		}
	}
}

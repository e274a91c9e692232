package dist_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/dist"
	"ferry/dist/internal/mpirun"
	"ferry/dist/mpi"
	"ferry/nn"
	"ferry/optim"
)

func TestAssignOwners(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var ps []*ferry.Tensor
	for _, n := range []int{10, 100, 40, 60, 50} {
		ps = append(ps, ferry.Zeros(dev, n))
	}
	ps = append(ps, ps[1]) // a tied weight, listed twice
	// Largest first, to the least loaded rank: 100→0, 60→1, 50→1 (110),
	// 40→0 (140), 10→1 (120); the repeat follows its first listing.
	want := []int{1, 0, 0, 1, 1, 0}
	if got := dist.AssignOwners(ps, 2); !slices.Equal(got, want) {
		t.Fatalf("owners on 2 ranks = %v, want %v", got, want)
	}
	if got := dist.AssignOwners(ps, 1); !slices.Equal(got, []int{0, 0, 0, 0, 0, 0}) {
		t.Fatalf("owners on 1 rank = %v", got)
	}
	// More ranks than parameters: each parameter alone, some ranks idle.
	got := dist.AssignOwners(ps, 8)
	if !slices.Equal(got, []int{4, 0, 3, 1, 2, 0}) { // sizes 100, 60, 50, 40, 10 → ranks 0..4
		t.Fatalf("owners on 8 ranks = %v", got)
	}
}

// dpRun is one rank's view of a data-parallel run: the parameters after
// every step and the optimizer state bytes it held.
type dpRun struct {
	params     [][][]float32 // [step][param]
	stateBytes int64
	gradBytes  int64       // ZeRO-2: the most gradient bytes after Wait
	ownedBytes int64       // the bytes of the parameters the rank owns
	norms      []float64   // per step, before clipping
	state      optim.State // unsharded: the optimizer's; sharded: gathered on rank 0
	release    func()
}

// trainDataParallel trains the tiny model with AdamW on every rank of
// comms (as goroutines), each rank on its rows of every batch, clipping
// at clip (0: not), sharded or not. It returns each rank's run.
func trainDataParallel(t *testing.T, comms []dist.Comm, stage int, bucket int64, steps int, clip float64) []*dpRun {
	t.Helper()
	runs := make([]*dpRun, len(comms))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := &rankT{t: t, mu: &mu}
			runs[i] = trainRank(rt, c, stage, bucket, steps, clip)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return runs
}

// trainRank is one rank of trainDataParallel: ZeRO stage 0 (unsharded),
// 1 (ShardedOptimizer) or 2 (GradientScatterer and ShardedOptimizer).
func trainRank(t tb, c dist.Comm, stage int, bucket int64, steps int, clip float64) *dpRun {
	return trainRankOn(t, c, func() (device.Device, error) { return device.Open("cpu", device.Options{}) }, stage, bucket, steps, clip)
}

// trainRankOn is trainRank on the device open makes.
func trainRankOn(t tb, c dist.Comm, open func() (device.Device, error), stage int, bucket int64, steps int, clip float64) *dpRun {
	sharded := stage > 0
	rank, size := c.Rank(), c.Size()
	dev, err := open()
	if err != nil {
		t.Fatal(err)
	}
	m := tinyModel(t, dev, uint64(20+rank))
	ps := m.Parameters()
	var red interface {
		GradReady(*ferry.Tensor)
		Wait() error
		Broadcast(int) error
		CheckParameters() error
	}
	var owners []int
	if stage == 2 {
		sc, err := dist.NewGradientScatterer(c, ps, dist.ReducerOptions{BucketBytes: bucket})
		if err != nil {
			t.Fatal(err)
		}
		red, owners = sc, sc.Owners()
	} else {
		r, err := dist.NewGradientReducer(c, ps, dist.ReducerOptions{BucketBytes: bucket})
		if err != nil {
			t.Fatal(err)
		}
		red = r
	}
	if err := red.Broadcast(0); err != nil {
		t.Fatal(err)
	}
	run := &dpRun{release: func() {}}
	adam := optim.NewAdamW(ps, 0.05)
	var opt optim.Optimizer = adam
	var sh *dist.ShardedOptimizer
	if sharded {
		if sh, err = dist.NewShardedOptimizer(c, adam, ps, dist.ShardOptions{BucketBytes: bucket, Owners: owners}); err != nil {
			t.Fatal(err)
		}
		for _, p := range sh.Owned() {
			run.ownedBytes += p.StorageBytes()
		}
		opt = sh
	}
	const rows = 6
	for step := 1; step <= steps; step++ {
		x, y := batch(step, rows*size)
		lo, hi := rank*rows, (rank+1)*rows
		backward(t, dev, m, x[lo*4:hi*4], y[lo*3:hi*3], ferry.BackwardOptions{GradReady: red.GradReady})
		if err := red.Wait(); err != nil {
			t.Fatal(err)
		}
		if stage == 2 {
			var gradBytes int64
			for i, p := range ps {
				if g := p.Grad(); g != nil {
					gradBytes += g.StorageBytes()
				} else if owners[i] == rank {
					t.Fatalf("rank %d: no gradient for its parameter %d after Wait", rank, i)
				}
			}
			run.gradBytes = max(run.gradBytes, gradBytes)
		}
		var norm float64
		switch {
		case stage == 2 && clip > 0:
			norm, err = sh.ClipGradNorm(clip)
		case stage == 2:
			norm, err = sh.GradNorm()
		case clip > 0:
			norm, err = optim.ClipGradNorm(ps, clip)
		default:
			norm, err = optim.GradNorm(ps)
		}
		if err != nil {
			t.Fatal(err)
		}
		run.norms = append(run.norms, norm)
		opt.SetLR(0.05 / float64(step))
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
		var now [][]float32
		for _, p := range ps {
			now = append(now, p.Float32s())
		}
		run.params = append(run.params, now)
	}
	if err := red.CheckParameters(); err != nil {
		t.Fatal(err)
	}
	if sharded {
		run.stateBytes = sh.StateBytes()
		st, release, err := sh.GatherState(0)
		if err != nil {
			t.Fatal(err)
		}
		run.state, run.release = st, release
		if rank > 0 && (len(st.Tensors) != 0 || len(st.Scalars) != 0) {
			t.Errorf("rank %d: GatherState(0) returned %d tensors here; only the root gets the state", rank, len(st.Tensors))
		}
	} else {
		for _, x := range adam.State().Tensors {
			run.stateBytes += x.StorageBytes()
		}
		run.state = adam.State()
	}
	return run
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// ZeRO-1 on 3 in-process ranks equals unsharded data parallelism bit for
// bit over several AdamW steps with clipping, holds a third of the state
// per rank, and gathers the whole state on rank 0.
func TestShardedOptimizerEqualsDataParallel(t *testing.T) {
	const steps = 5
	for _, clip := range []float64{0, 0.05} {
		ref := trainDataParallel(t, dist.NewGroup(3), 0, 64, steps, clip)
		got := trainDataParallel(t, dist.NewGroup(3), 1, 64, steps, clip)
		for r := range got {
			for s := range steps {
				for i := range got[r].params[s] {
					if !sameBits(got[r].params[s][i], ref[r].params[s][i]) {
						t.Fatalf("clip %v: rank %d, step %d, parameter %d: sharded %v, unsharded %v", clip, r, s+1, i,
							got[r].params[s][i][:3], ref[r].params[s][i][:3])
					}
				}
			}
		}
		// The parameters moved (a test of nothing otherwise).
		if sameBits(got[0].params[0][0], got[0].params[steps-1][0]) {
			t.Fatal("the parameters did not change over the steps")
		}
		full := ref[0].stateBytes
		var sum int64
		for r, run := range got {
			sum += run.stateBytes
			if run.stateBytes >= full/2 {
				t.Errorf("rank %d holds %d bytes of optimizer state; the unsharded optimizer %d", r, run.stateBytes, full)
			}
		}
		if sum != full {
			t.Errorf("the ranks' state adds to %d bytes; unsharded %d", sum, full)
		}
		t.Logf("clip %v: state per rank %d, %d, %d bytes of %d", clip, got[0].stateBytes, got[1].stateBytes, got[2].stateBytes, full)
		// The gathered state is the unsharded optimizer's, bit for bit.
		gs, want := got[0].state, ref[0].state
		if len(gs.Tensors) != len(want.Tensors) || !maps(gs.Scalars, want.Scalars) {
			t.Fatalf("gathered %d tensors, scalars %v; want %d, %v", len(gs.Tensors), gs.Scalars, len(want.Tensors), want.Scalars)
		}
		for k, w := range want.Tensors {
			g := gs.Tensors[k]
			if g == nil || !sameBits(g.Float32s(), w.Float32s()) {
				t.Fatalf("gathered state %q differs from the unsharded optimizer's", k)
			}
		}
		got[0].release()
	}
}

func maps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A gathered state set into a different number of ranks continues the
// run bit for bit: state from 3 ranks into 2 ranks (sharded) and into one
// plain AdamW.
func TestShardedStateMovesAcrossRankCounts(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// One process: a few AdamW steps on the whole batch.
	m := tinyModel(t, dev, 3)
	ps := m.Parameters()
	adam := optim.NewAdamW(ps, 0.02)
	for step := 1; step <= 3; step++ {
		x, y := batch(step, 8)
		backward(t, dev, m, x, y, ferry.BackwardOptions{})
		if err := adam.Step(); err != nil {
			t.Fatal(err)
		}
		adam.ZeroGrad()
	}
	whole := adam.State()
	// Next step's expected parameters, from the unsharded optimizer.
	x, y := batch(4, 8)
	want := func() [][]float32 {
		m2 := tinyModel(t, dev, 99)
		copyParams(t, m2, m)
		o := optim.NewAdamW(m2.Parameters(), 0.02)
		if err := o.SetState(renameState(whole, m.Parameters(), m2.Parameters())); err != nil {
			t.Fatal(err)
		}
		backward(t, dev, m2, x, y, ferry.BackwardOptions{})
		if err := o.Step(); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for _, p := range m2.Parameters() {
			out = append(out, p.Float32s())
		}
		return out
	}()
	// Two sharded ranks, each given the whole state, each with the whole
	// batch's gradient (so no averaging changes a bit).
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range dist.NewGroup(2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := &rankT{t: t, mu: &mu}
			d, err := device.Open("cpu", device.Options{})
			if err != nil {
				rt.Fatal(err)
			}
			mr := tinyModel(rt, d, 99)
			copyParams(rt, mr, m)
			sh, err := dist.NewShardedOptimizer(c, optim.NewAdamW(mr.Parameters(), 0.02), mr.Parameters(), dist.ShardOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			if err := sh.SetState(renameState(whole, m.Parameters(), mr.Parameters())); err != nil {
				rt.Fatal(err)
			}
			if n := len(sh.State().Tensors); n == 0 || n >= len(whole.Tensors) {
				rt.Errorf("rank %d kept %d of %d state tensors", c.Rank(), n, len(whole.Tensors))
			}
			backward(rt, d, mr, x, y, ferry.BackwardOptions{})
			if err := sh.Step(); err != nil {
				rt.Fatal(err)
			}
			for i, p := range mr.Parameters() {
				if !sameBits(p.Float32s(), want[i]) {
					rt.Errorf("rank %d: parameter %d after the resumed step differs from one process's", c.Rank(), i)
				}
			}
		}()
	}
	wg.Wait()
}

// copyParams sets dst's parameter values to src's.
func copyParams(t tb, dst, src nn.Module) {
	t.Helper()
	d, s := dst.Parameters(), src.Parameters()
	for i := range d {
		v := ferry.FromFloat32s(d[i].Device(), s[i].Float32s(), s[i].Shape()...)
		d[i].CopyFrom(v)
		v.Release()
	}
}

// renameState maps state keyed by from's names to to's names and
// copies its tensors to to's device.
func renameState(st optim.State, from, to []*ferry.Tensor) optim.State {
	name := map[string]string{}
	for i := range from {
		name[from[i].Name()] = to[i].Name()
	}
	out := optim.State{Tensors: map[string]*ferry.Tensor{}, Scalars: map[string]float64{}}
	re := func(k string) string {
		i := strings.LastIndexByte(k, '.')
		return name[k[:i]] + k[i:]
	}
	for k, v := range st.Tensors {
		p := to[slices.IndexFunc(from, func(q *ferry.Tensor) bool { return q.Name() == k[:strings.LastIndexByte(k, '.')] })]
		out.Tensors[re(k)] = ferry.FromFloat32s(p.Device(), v.Float32s(), v.Shape()...)
	}
	for k, v := range st.Scalars {
		out.Scalars[re(k)] = v
	}
	return out
}

// failingStepper fails every StepParam.
type failingStepper struct{ optim.Stepper }

var errBoom = errors.New("boom")

func (f failingStepper) StepParam(*ferry.Tensor) error { return errBoom }

// An update that fails on one rank fails the step on every rank, rather
// than leaving the others waiting in a broadcast.
func TestShardedStepFailsEverywhere(t *testing.T) {
	errs := make([]error, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range dist.NewGroup(3) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := &rankT{t: t, mu: &mu}
			d, err := device.Open("cpu", device.Options{})
			if err != nil {
				rt.Fatal(err)
			}
			m := tinyModel(rt, d, 1)
			var inner optim.Stepper = optim.NewAdamW(m.Parameters(), 0.1)
			if c.Rank() == 1 {
				inner = failingStepper{inner}
			}
			sh, err := dist.NewShardedOptimizer(c, inner, m.Parameters(), dist.ShardOptions{})
			if err != nil {
				rt.Fatal(err)
			}
			x, y := batch(1, 4)
			backward(rt, d, m, x, y, ferry.BackwardOptions{})
			errs[c.Rank()] = sh.Step()
		}()
	}
	wg.Wait()
	if !errors.Is(errs[1], errBoom) {
		t.Errorf("rank 1: %v, want its own error", errs[1])
	}
	for _, r := range []int{0, 2} {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "failed on rank 1") {
			t.Errorf("rank %d: %v, want an error naming rank 1", r, errs[r])
		}
	}
}

// ZeRO-2 on 3 in-process ranks equals unsharded data parallelism bit for
// bit (parameters every step, the gradient norm used for clipping) with
// small buckets (each all-reduced: one parameter cannot be balanced) and
// one large bucket (reduce-scattered), and each rank keeps only its own
// parameters' gradients.
func TestGradientScattererEqualsDataParallel(t *testing.T) {
	const steps = 4
	for _, bucket := range []int64{64, 1 << 20} {
		for _, clip := range []float64{0, 0.05} {
			ref := trainDataParallel(t, dist.NewGroup(3), 0, bucket, steps, clip)
			got := trainDataParallel(t, dist.NewGroup(3), 2, bucket, steps, clip)
			for r := range got {
				for s := range steps {
					if got[r].norms[s] != ref[r].norms[s] {
						t.Fatalf("bucket %d, clip %v: rank %d, step %d: norm %v, unsharded %v", bucket, clip, r, s+1, got[r].norms[s], ref[r].norms[s])
					}
					for i := range got[r].params[s] {
						if !sameBits(got[r].params[s][i], ref[r].params[s][i]) {
							t.Fatalf("bucket %d, clip %v: rank %d, step %d, parameter %d differs", bucket, clip, r, s+1, i)
						}
					}
				}
			}
			if clip > 0 && !(ref[0].norms[0] > clip) {
				t.Fatalf("norm %v does not exceed the clip %v: clipping untested", ref[0].norms[0], clip)
			}
			var sum int64
			for r, run := range got {
				sum += run.gradBytes
				if run.gradBytes != run.ownedBytes || run.gradBytes >= ref[0].stateBytes/2 { // the state is twice the gradients
					t.Errorf("rank %d kept %d gradient bytes of %d; it owns parameters of %d bytes", r, run.gradBytes, ref[0].stateBytes/2, run.ownedBytes)
				}
			}
			if sum != ref[0].stateBytes/2 {
				t.Errorf("the ranks kept %d gradient bytes in all, want %d", sum, ref[0].stateBytes/2)
			}
		}
	}
	// Which path each bucket size took.
	ps := tinyModel(t, mustCPU(t), 1).Parameters()
	for _, tc := range []struct {
		bucket         int64
		buckets, allRd int
	}{{64, 4, 4}, {1 << 20, 1, 0}} {
		s, err := dist.NewGradientScatterer(dist.NewGroup(3)[0], ps, dist.ReducerOptions{BucketBytes: tc.bucket})
		if err != nil {
			t.Fatal(err)
		}
		if o := dist.ScatterOwners(ps, 3, tc.bucket); !slices.Equal(o, s.Owners()) {
			t.Errorf("bucket bytes %d: ScatterOwners %v, the scatterer's %v", tc.bucket, o, s.Owners())
		}
		if st := s.Stats(); st.Buckets != tc.buckets || st.BucketsAllReduced != tc.allRd {
			t.Errorf("bucket bytes %d: %d buckets, %d all-reduced; want %d, %d", tc.bucket, st.Buckets, st.BucketsAllReduced, tc.buckets, tc.allRd)
		}
	}
}

func mustCPU(t *testing.T) device.Device {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// Two MPI ranks: ZeRO-1 and ZeRO-2 (one reduce-scattered bucket, and
// small all-reduced ones) equal unsharded data parallelism bit for bit
// through Open MPI's collectives, with clipping; see TestShardedMPIChild.
func TestShardedTwoMPIRanks(t *testing.T) {
	if mpirun.IsChild("TestShardedMPIChild") {
		t.Skip("a rank does not start ranks")
	}
	out := mpirun.Run(t, 2, "TestShardedMPIChild", 2*time.Minute)
	for r := range 2 {
		if want := fmt.Sprintf("rank %d: ZeRO-1 and ZeRO-2 equal unsharded", r); !strings.Contains(out, want) {
			t.Errorf("no %q in the job's output:\n%s", want, out)
		}
	}
}

func TestShardedMPIChild(t *testing.T) {
	if !mpirun.IsChild("TestShardedMPIChild") {
		t.Skip("runs only as a rank of TestShardedTwoMPIRanks")
	}
	c, err := mpi.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const steps = 4
	for _, bucket := range []int64{64, 1 << 20} {
		ref := trainRank(t, c, 0, bucket, steps, 0.05)
		for _, stage := range []int{1, 2} {
			got := trainRank(t, c, stage, bucket, steps, 0.05)
			for s := range steps {
				if got.norms[s] != ref.norms[s] {
					t.Fatalf("rank %d, ZeRO-%d, bucket %d, step %d: norm %v, unsharded %v", c.Rank(), stage, bucket, s+1, got.norms[s], ref.norms[s])
				}
				for i := range got.params[s] {
					if !sameBits(got.params[s][i], ref.params[s][i]) {
						t.Fatalf("rank %d, ZeRO-%d, bucket %d, step %d: parameter %d differs", c.Rank(), stage, bucket, s+1, i)
					}
				}
			}
			if c.Rank() == 0 { // the state gathered through MPI is the unsharded optimizer's
				if len(got.state.Tensors) != len(ref.state.Tensors) || !maps(got.state.Scalars, ref.state.Scalars) {
					t.Fatalf("ZeRO-%d: gathered %d tensors, %v; unsharded %d, %v", stage, len(got.state.Tensors), got.state.Scalars, len(ref.state.Tensors), ref.state.Scalars)
				}
				for k, w := range ref.state.Tensors {
					if g := got.state.Tensors[k]; g == nil || !sameBits(g.Float32s(), w.Float32s()) {
						t.Fatalf("ZeRO-%d: gathered state %q differs from the unsharded optimizer's", stage, k)
					}
				}
			}
			got.release()
		}
	}
	fmt.Printf("rank %d: ZeRO-1 and ZeRO-2 equal unsharded over %d steps, state gathered\n", c.Rank(), steps)
}

// ZeRO-1 and ZeRO-2 on two in-process ranks over the CUDA device (the
// fake driver): gradients and parameters go through device memory, and
// the result equals unsharded data parallelism on the same device bit for
// bit.
func TestShardedOnCUDAFake(t *testing.T) {
	open := func() (device.Device, error) { return cuda.Open(fake.New(fake.Options{}), 0, device.Options{}) }
	run := func(stage int) []*dpRun {
		runs := make([]*dpRun, 2)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, c := range dist.NewGroup(2) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runs[i] = trainRankOn(&rankT{t: t, mu: &mu}, c, open, stage, 1<<20, 3, 0.05)
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return runs
	}
	ref := run(0)
	for _, stage := range []int{1, 2} {
		got := run(stage)
		for r := range got {
			for s := range got[r].params {
				for i := range got[r].params[s] {
					if !sameBits(got[r].params[s][i], ref[r].params[s][i]) {
						t.Fatalf("ZeRO-%d on cuda (fake), rank %d, step %d, parameter %d differs from unsharded", stage, r, s+1, i)
					}
				}
			}
			if got[r].stateBytes >= ref[r].stateBytes {
				t.Errorf("ZeRO-%d, rank %d: %d bytes of state, unsharded %d", stage, r, got[r].stateBytes, ref[r].stateBytes)
			}
		}
	}
}

// ZeRO-2's owners: no rank above a share (or the largest parameter) and
// 5%, and buckets of many parameters split evenly enough to be
// reduce-scattered; a bucket of one parameter is all-reduced.
func TestScatterOwnersBalance(t *testing.T) {
	dev := mustCPU(t)
	var ps []*ferry.Tensor
	big := nn.NewParameter(ferry.Zeros(dev, 3000), "big")
	ps = append(ps, big)
	for i := range 40 {
		ps = append(ps, nn.NewParameter(ferry.Zeros(dev, 200), fmt.Sprintf("p%d", i)))
	}
	const ranks = 4
	s, err := dist.NewGradientScatterer(dist.NewGroup(ranks)[0], ps, dist.ReducerOptions{BucketBytes: 2000 * 4})
	if err != nil {
		t.Fatal(err)
	}
	total := make([]int, ranks)
	for i, o := range s.Owners() {
		total[o] += ps[i].Numel()
	}
	limit := 3000 + 2750/20
	for r, n := range total {
		if n > limit {
			t.Errorf("rank %d owns %d elements, over %d (owners %v)", r, n, limit, total)
		}
	}
	st := s.Stats()
	if st.Buckets != 5 || st.BucketsAllReduced != 1 {
		t.Errorf("%d buckets, %d all-reduced; want 5 and only the large parameter's", st.Buckets, st.BucketsAllReduced)
	}
	t.Logf("elements per rank %v, %+v", total, st)
}

// A sharded optimizer reports its inner optimizer's state placement
// (optim.HostPlaced), so that a checkpoint loads the state into host
// memory when the inner optimizer keeps it there.
func TestShardedOptimizerStatePlacement(t *testing.T) {
	d, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, host := range []bool{false, true} {
		m := tinyModel(t, d, 1)
		var opts []optim.Option
		if host {
			opts = append(opts, optim.OnHost())
		}
		inner := optim.NewAdamW(m.Parameters(), 0.1, opts...)
		sh, err := dist.NewShardedOptimizer(dist.Local(), inner, m.Parameters(), dist.ShardOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var hp optim.HostPlaced = sh
		if hp.StateOnHost() != host {
			t.Errorf("inner state on the host %v: the sharded optimizer says %v", host, hp.StateOnHost())
		}
		inner.Release()
	}
}

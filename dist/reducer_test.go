package dist_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/dist"
	"ferry/dist/internal/mpirun"
	"ferry/dist/mpi"
	"ferry/nn"
	"ferry/optim"
)

// tinyModel is Linear(4,8) → ReLU → Linear(8,3), the same on every rank
// for a seed.
func tinyModel(t tb, dev device.Device, seed uint64) *nn.Sequential {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	l1, err := nn.NewLinear(dev, 4, 8, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := nn.NewLinear(dev, 8, 3, true, rng)
	if err != nil {
		t.Fatal(err)
	}
	return nn.NewSequential(l1, nn.ReLU{}, l2)
}

// batch returns the global batch of step (rows × 4 inputs, rows × 3
// targets), the same on every rank.
func batch(step, rows int) (x, y []float32) {
	rng := rand.New(rand.NewPCG(uint64(step), 7))
	x, y = make([]float32, rows*4), make([]float32, rows*3)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.NormFloat64())
	}
	return x, y
}

// backward runs forward and backward of the MSE loss on rows of x and y,
// with opts.
func backward(t tb, dev device.Device, m nn.Module, x, y []float32, opts ferry.BackwardOptions) {
	t.Helper()
	rows := len(x) / 4
	xt := ferry.FromFloat32s(dev, x, rows, 4)
	yt := ferry.FromFloat32s(dev, y, rows, 3)
	defer xt.Release()
	defer yt.Release()
	err := ferry.Step(func(tape *ferry.Tape) error {
		loss := ferry.MSELoss(m.Forward(tape.Input(xt)), tape.Input(yt))
		return loss.BackwardWith(opts)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func grads(ps []*ferry.Tensor) [][]float32 {
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = p.Grad().Float32s()
	}
	return out
}

// On one rank the reducer leaves gradients as they are, and fills a
// parameter that got no gradient with zeros.
func TestReducerLocal(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := tinyModel(t, dev, 1)
	unused := nn.NewParameter(ferry.Full(dev, 1, 5), "unused")
	defer unused.Release()
	ps := append(m.Parameters(), unused)
	r, err := dist.NewGradientReducer(dist.Local(), append(ps, ps[0]), dist.ReducerOptions{BucketBytes: 40})
	if err != nil {
		t.Fatal(err)
	}
	// Reverse order, a new bucket whenever 40 bytes would overflow: the
	// unused [5] (20 B) and bias2 [3] (12 B); weight2 [3,8] alone; bias1
	// [8] (32 B); weight1 [8,4] alone.
	if got := fmt.Sprint(r.Buckets()); got != "[[4 3] [2] [1] [0]]" {
		t.Errorf("buckets %s", got)
	}
	x, y := batch(0, 6)
	backward(t, dev, m, x, y, ferry.BackwardOptions{})
	want := grads(m.Parameters())
	optim.NewSGD(ps, 0).ZeroGrad()
	backward(t, dev, m, x, y, ferry.BackwardOptions{GradReady: r.GradReady})
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, g := range grads(m.Parameters()) {
		if fmt.Sprint(g) != fmt.Sprint(want[i]) {
			t.Errorf("parameter %d: gradient %v, want %v", i, g, want[i])
		}
	}
	if g := unused.Grad(); g == nil || fmt.Sprint(g.Float32s()) != "[0 0 0 0 0]" {
		t.Errorf("unused parameter's gradient %v", g)
	}
	st := r.Stats()
	// Backward completes the first three buckets in order; the unused
	// parameter holds back the bucket it shares with bias2, and so all
	// four start at Wait.
	if st.Steps != 1 || st.Buckets != 4 || st.StartedInReverse+st.StartedAtWait != 4 || st.BytesReduced != (32+8+24+3+5)*4 {
		t.Errorf("stats %+v", st)
	}
	if err := r.CheckParameters(); err != nil {
		t.Error(err)
	}
	// Reporting a gradient twice in a step is an error at Wait.
	r.GradReady(ps[0])
	r.GradReady(ps[0])
	if err := r.Wait(); err == nil || !strings.Contains(err.Error(), "reported twice") {
		t.Errorf("Wait after a doubled report: %v", err)
	}
	optim.NewSGD(ps, 0).ZeroGrad()
}

// Two ranks under mpirun train the tiny model on different halves of each
// batch; see TestReducerChild.
func TestReducerTwoRanks(t *testing.T) {
	if mpirun.IsChild("TestReducerChild") {
		t.Skip("a rank does not start ranks")
	}
	out := mpirun.Run(t, 2, "TestReducerChild", 2*time.Minute)
	for r := range 2 {
		if want := fmt.Sprintf("rank %d: 5 steps, parameters identical", r); !strings.Contains(out, want) {
			t.Errorf("no %q in the job's output:\n%s", want, out)
		}
	}
	t.Logf("%s", out)
}

func TestReducerChild(t *testing.T) {
	if !mpirun.IsChild("TestReducerChild") {
		t.Skip("runs only as a rank of TestReducerTwoRanks")
	}
	c, err := mpi.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dataParallel(t, c)
}

// The same with three ranks as goroutines of this process (dist.NewGroup):
// it runs where Open MPI is absent, and averages over an odd count.
func TestReducerThreeRanksInProcess(t *testing.T) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range dist.NewGroup(3) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := &rankT{t: t, mu: &mu}
			dataParallel(rt, c)
		}()
	}
	wg.Wait()
}

// tb is what dataParallel needs of a test: *testing.T, or a rankT.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// rankT is a tb for a rank running on its own goroutine: Fatal reports
// and ends the goroutine (runtime.Goexit), not the test.
type rankT struct {
	t  *testing.T
	mu *sync.Mutex
}

func (r *rankT) Helper() {}
func (r *rankT) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}
func (r *rankT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}
func (r *rankT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Errorf(format, args...)
}
func (r *rankT) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf(format, args...)
}

// dataParallel trains the tiny model on c's ranks, each on its own rows of
// every batch, and checks after each step that the averaged gradient is
// the whole batch's and that the parameters are identical everywhere.
func dataParallel(t tb, c dist.Comm) {
	rank, size := c.Rank(), c.Size()
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// Different seeds per rank: Broadcast must make them equal.
	m := tinyModel(t, dev, uint64(10+rank))
	ps := m.Parameters()
	r, err := dist.NewGradientReducer(c, ps, dist.ReducerOptions{BucketBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	var others []int
	for q := 1; q < size; q++ {
		others = append(others, q)
	}
	if err := r.CheckParameters(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("on rank(s) %v is not bit-identical", others)) {
		t.Fatalf("CheckParameters before Broadcast: %v", err)
	} else {
		t.Logf("rank %d, before Broadcast: %v", rank, err)
	}
	if err := r.Broadcast(0); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckParameters(); err != nil {
		t.Fatal(err)
	}
	opt := optim.NewSGD(ps, 0.1)
	const rows = 6 // per rank
	for step := range 5 {
		x, y := batch(step, rows*size)
		// The single-process gradient of the whole batch, for comparison.
		backward(t, dev, m, x, y, ferry.BackwardOptions{})
		whole := grads(ps)
		opt.ZeroGrad()
		// This rank's share, reduced.
		lo, hi := rank*rows, (rank+1)*rows
		backward(t, dev, m, x[lo*4:hi*4], y[lo*3:hi*3], ferry.BackwardOptions{GradReady: r.GradReady})
		if err := r.Wait(); err != nil {
			t.Fatal(err)
		}
		var worst float64
		for i, g := range grads(ps) {
			for j := range g {
				d := math.Abs(float64(g[j] - whole[i][j]))
				if d > 1e-6+1e-5*math.Abs(float64(whole[i][j])) {
					t.Fatalf("step %d, parameter %d[%d]: averaged gradient %v, whole-batch gradient %v", step, i, j, g[j], whole[i][j])
				}
				worst = max(worst, d)
			}
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
		if err := r.CheckParameters(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		t.Logf("rank %d step %d: averaged gradient within %.2g of the whole batch's", rank, step, worst)
	}
	st := r.Stats()
	if st.StartedInReverse == 0 {
		t.Errorf("no bucket started during backward: %+v", st)
	}
	t.Logf("rank %d: stats %+v", rank, st)
	t.Logf("rank %d: 5 steps, parameters identical", rank)
}

// The reducer moves gradients through the device's own Download and
// Upload, so it works on a CUDA device too: here the CUDA device over the
// fake driver, whose averaged (one-rank) gradients must equal the CPU's.
func TestReducerOnCUDAFake(t *testing.T) {
	gpu, err := cuda.Open(fake.New(fake.Options{}), 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	host, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	x, y := batch(3, 5)
	var got [][][]float32
	for _, dev := range []device.Device{host, gpu} {
		m := tinyModel(t, dev, 4)
		r, err := dist.NewGradientReducer(dist.Local(), m.Parameters(), dist.ReducerOptions{BucketBytes: 100})
		if err != nil {
			t.Fatal(err)
		}
		backward(t, dev, m, x, y, ferry.BackwardOptions{GradReady: r.GradReady})
		if err := r.Wait(); err != nil {
			t.Fatal(err)
		}
		if err := r.Broadcast(0); err != nil {
			t.Fatal(err)
		}
		got = append(got, grads(m.Parameters()))
		optim.NewSGD(m.Parameters(), 0).ZeroGrad()
		nn.Release(m)
	}
	for i := range got[0] {
		for j := range got[0][i] {
			if d := math.Abs(float64(got[0][i][j] - got[1][i][j])); d > 1e-5 {
				t.Fatalf("parameter %d[%d]: cpu %v, cuda (fake) %v", i, j, got[0][i][j], got[1][i][j])
			}
		}
	}
}

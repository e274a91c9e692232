package standin_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	_ "ferry/device/cuda" // registers "cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/standin"
	"ferry/device/devicetest"
	"ferry/offload"
	"ferry/optim"
	"ferry/train/traintest"
)

// Every test of this package runs ferry's real bindings against the
// stand-in: the bindings load one driver per process (cu.Load), so no
// test here may load another.

var (
	buildOnce sync.Once
	buildDir  string
	lib       *standin.Lib
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// setup builds and loads the stand-in (once), points the bindings at it
// and checks, when the test ends, that nothing broke the API.
func setup(t *testing.T) *standin.Lib {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "ferry-standin"); buildErr != nil {
			return
		}
		var path string
		if path, buildErr = standin.Build(buildDir); buildErr == nil {
			lib, buildErr = standin.Open(path)
		}
	})
	if errors.Is(buildErr, standin.ErrNoCompiler) {
		t.Skipf("the CUDA stand-in needs a C compiler: %v", buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	t.Setenv("FERRY_LIBCUDA", lib.Path)
	t.Setenv("FERRY_CUBLAS", lib.Path)
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	if info := drv.Info(); info.DriverLib != lib.Path || info.BLASLib != lib.Path {
		t.Fatalf("the bindings loaded %q and %q, not the stand-in %q", info.DriverLib, info.BLASLib, lib.Path)
	} else if info.DriverVersion != 12040 || info.BLASVersion != 120405 {
		t.Fatalf("driver version %d, cuBLAS %d through the bindings; the stand-in says 12040 and 12.4.5", info.DriverVersion, info.BLASVersion)
	}
	lib.Reset()
	lib.SetCopyDelay(0)
	lib.RunKernelsWithFake()
	standin.KernelError()
	t.Cleanup(func() {
		if n := lib.Violations(); n != 0 {
			t.Errorf("%d calls broke the CUDA API:\n%s", n, lib.Report())
		}
		if err := standin.KernelError(); err != nil {
			t.Errorf("a kernel faulted: %v", err)
		}
	})
	return lib
}

// openCUDA opens cuda:0 the ordinary way, with the param copy_delay (a
// duration) going to the stand-in instead.
func openCUDA(t *testing.T, l *standin.Lib, opts device.Options) device.Device {
	t.Helper()
	params := map[string]string{}
	for k, v := range opts.Params {
		if k == "copy_delay" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			l.SetCopyDelay(d)
			continue
		}
		params[k] = v
	}
	opts.Params = params
	d, err := device.Open("cuda:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The whole conformance suite, values included, through the bindings.
func TestStandInConformance(t *testing.T) {
	l := setup(t)
	devicetest.Run(t, func(t *testing.T, opts device.Options) device.Device {
		l.SetCopyDelay(0)
		return openCUDA(t, l, opts)
	}, devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}, Seed: 1,
		Reference: func(t *testing.T) device.Device { // the Compare* tests run against the CPU device
			c, err := cpu.New(device.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}})
	if l.Counter("launches_run") == 0 || l.Counter("sgemms") == 0 || l.Counter("copies") == 0 {
		t.Errorf("kernels %d, sgemms %d, copies %d: the suite did not reach the stand-in",
			l.Counter("launches_run"), l.Counter("sgemms"), l.Counter("copies"))
	}
	// Upload and Download copy from and to Go memory (pageable), which the
	// driver does synchronously; Copy goes through the pinned pool.
	t.Logf("%d kernels, %d sgemms, %d copies (%d of pageable memory, synchronous), %d synchronisations",
		l.Counter("launches_run"), l.Counter("sgemms"), l.Counter("copies"), l.Counter("pageable_copies"), l.Counter("syncs"))
	if n := l.Counter("live_dev_bytes"); n != 0 {
		t.Errorf("%d bytes of device memory left after every device closed", n)
	}
}

// A small MLP trained for three steps (forward, backward, AdamW) gives the
// CPU device's losses and parameters, its kernels run from their CUDA
// sources (where there is g++).
func TestStandInTraining(t *testing.T) {
	l := setupPreferSource(t)
	gpu := openCUDA(t, l, device.Options{PoisonFreed: true})
	c, err := cpu.New(device.Options{PoisonFreed: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := train(t, c, 3)
	launches, sgemms := l.Counter("launches"), l.Counter("sgemms")
	got := train(t, gpu, 3)
	if err := gpu.Close(); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "losses", got.losses, want.losses)
	for i := range want.params {
		closeTo(t, fmt.Sprintf("parameter %d after 3 steps", i), got.params[i], want.params[i])
	}
	if got.losses[2] >= got.losses[0] {
		t.Errorf("loss did not fall: %v", got.losses)
	}
	if n := l.Counter("launches") - launches; n < 30 {
		t.Errorf("only %d kernels launched", n)
	}
	if n := l.Counter("sgemms") - sgemms; n < 5*3 { // per step: two forward, three backward
		t.Errorf("only %d products went to cuBLAS", n)
	}
}

type trainRun struct {
	losses []float32
	params [][]float32
}

func train(t *testing.T, dev device.Device, steps int) trainRun {
	t.Helper()
	const batch, in, hidden, out = 24, 20, 48, 10
	rng := rand.New(rand.NewPCG(11, 3))
	param := func(shape ...int) *ferry.Tensor {
		bound := float32(1 / math.Sqrt(float64(shape[len(shape)-1])))
		return ferry.Uniform(dev, rng, -bound, bound, shape...).SetCategory(device.Parameter).RequireGrad()
	}
	w1, b1, w2, b2 := param(hidden, in), param(hidden), param(out, hidden), param(out)
	params := []*ferry.Tensor{w1, b1, w2, b2}
	defer func() {
		for _, p := range params {
			p.Release()
		}
	}()
	xs, ys := make([]float32, batch*in), make([]float32, batch*out)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	for i := range ys {
		ys[i] = float32(rng.NormFloat64())
	}
	opt := optim.NewAdamW(params, 1e-2)
	defer opt.Release()
	var r trainRun
	for step := 0; step < steps; step++ {
		err := ferry.Step(func(tape *ferry.Tape) error {
			x := tape.Adopt(ferry.FromFloat32s(dev, xs, batch, in))
			y := tape.Adopt(ferry.FromFloat32s(dev, ys, batch, out))
			h := ferry.ReLU(ferry.Linear(x, w1, b1))
			loss := ferry.MSELoss(ferry.Linear(h, w2, b2), y)
			r.losses = append(r.losses, loss.Item())
			return loss.Backward()
		})
		if err != nil {
			t.Fatalf("%s step %d: %v", dev.Name(), step, err)
		}
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
	}
	for _, p := range params {
		r.params = append(r.params, p.Float32s())
	}
	return r
}

func closeTo(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, diff float64
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
	}
	if diff > 1e-5*math.Max(scale, 1e-30) || math.IsNaN(diff) {
		t.Errorf("%s: max difference %.3g, scale %.3g", what, diff, scale)
	}
}

// Every memory mode through the Trainer: the offloader's side-stream
// copies to and from the pinned pool (and disk), with copies slow enough
// to be seen in flight. Training must give the bits of no offloading.
func TestStandInOffload(t *testing.T) {
	l := setupPreferSource(t)
	copies := l.Counter("copies")
	open := func() (device.Device, error) {
		l.SetCopyDelay(200 * time.Microsecond)
		return device.Open("cuda:0", device.Options{PoisonFreed: true})
	}
	runs, err := traintest.RunModes(open, offload.Modes(), t.TempDir(), 6, 64, 32, 2)
	if err != nil {
		t.Fatal(err)
	}
	none := runs[0]
	for _, r := range runs {
		t.Logf("%-17s after forward %7d  offloaded %d", r.Mode, r.AfterForward, r.Offloaded)
		if !r.Equal(none) {
			t.Errorf("%s: training differs from no offloading", r.Mode)
		}
		if (r.Mode == offload.Offload || r.Mode == offload.OffloadDisk) && r.Offloaded == 0 {
			t.Errorf("%s offloaded nothing", r.Mode)
		}
	}
	if l.Counter("copies") == copies {
		t.Errorf("no copies reached the stand-in")
	}
}

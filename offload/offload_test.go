package offload_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/nn"
	"ferry/offload"
)

const layers, width, batch = 8, 64, 32

func openCPU(t testing.TB, opts device.Options) device.Device {
	t.Helper()
	dev, err := cpu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func model(t testing.TB, dev device.Device) *nn.Sequential {
	rng := rand.New(rand.NewPCG(7, 7))
	var ms []nn.Module
	for i := 0; i < layers; i++ {
		l, err := nn.NewLinear(dev, width, width, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, l, nn.ReLU{})
	}
	return nn.NewSequential(ms...)
}

type result struct {
	before, after, peak int64
	loss                float32
	grads               [][]float32
}

// step trains one step with hooks (nil: none) and reports memory and grads.
func step(t *testing.T, dev device.Device, m *nn.Sequential, hooks *ferry.SavedTensorHooks) (result, error) {
	var r result
	in := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), batch, width)
	tg := ferry.Randn(dev, rand.New(rand.NewPCG(2, 2)), batch, width)
	defer in.Release()
	defer tg.Release()
	alloc := dev.Allocator()
	err := ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Input(in)
		r.before = alloc.Allocated()
		alloc.ResetPeak()
		var y *ferry.Tensor
		if hooks != nil {
			tape.WithHooks(hooks, func() { y = m.Forward(x) })
		} else {
			y = m.Forward(x)
		}
		r.after = alloc.Allocated()
		r.peak = alloc.Stats().AllocatedBytes.Peak
		loss := ferry.MSELoss(y, tape.Input(tg))
		r.loss = loss.Item()
		return loss.Backward()
	})
	for _, p := range m.Parameters() {
		if p.Grad() != nil {
			r.grads = append(r.grads, p.Grad().Float32s())
		}
		p.SetGrad(nil)
	}
	return r, err
}

func equalBits(t *testing.T, a, b result) {
	t.Helper()
	if math.Float32bits(a.loss) != math.Float32bits(b.loss) {
		t.Fatalf("loss %v != %v", a.loss, b.loss)
	}
	if len(a.grads) != len(b.grads) {
		t.Fatalf("%d grads vs %d", len(a.grads), len(b.grads))
	}
	for i := range a.grads {
		for j := range a.grads[i] {
			if math.Float32bits(a.grads[i][j]) != math.Float32bits(b.grads[i][j]) {
				t.Fatalf("grad %d[%d]: %v != %v", i, j, a.grads[i][j], b.grads[i][j])
			}
		}
	}
}

func TestModesAgreeAndSaveMemory(t *testing.T) {
	dev := openCPU(t, device.Options{PoisonFreed: true})
	m := model(t, dev)
	act := int64(batch * width * 4)
	base, err := step(t, dev, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := base.after - base.before; got != layers*act {
		t.Errorf("none: forward kept %d, want %d", got, layers*act)
	}
	soh, err := step(t, dev, m, offload.NewHostSaver(dev).Hooks())
	if err != nil {
		t.Fatal(err)
	}
	equalBits(t, base, soh)
	if d := soh.after - soh.before; d > 3*act {
		t.Errorf("save-on-host: forward kept %d bytes, want <= 3 activations (%d)", d, 3*act)
	}
	if d := soh.peak - soh.before; d > 4*act {
		t.Errorf("save-on-host: forward peak %d above before, want <= 4 activations", d)
	}
	cfg := offload.DefaultConfig()
	off, err := offload.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	for i := 0; i < 3; i++ {
		r, err := step(t, dev, m, off.Hooks())
		if err != nil {
			t.Fatal(err)
		}
		equalBits(t, base, r)
		if d := r.after - r.before; d > 3*act {
			t.Errorf("offload: forward kept %d bytes, want <= 3 activations (%d)", d, 3*act)
		}
		if d := r.peak - r.before; d > int64(4+cfg.MaxInFlight)*act {
			t.Errorf("offload: forward peak %d above before, want <= %d activations", d, 4+cfg.MaxInFlight)
		}
	}
	st := off.Stats()
	if st.Offloaded == 0 || st.BytesToHost == 0 || st.BytesFromHost == 0 || st.BytesFromHost > st.BytesToHost {
		t.Errorf("stats: %+v", st)
	}
	t.Logf("offload stats: %+v overlap %.2f", st, st.OverlapRatio())

	dir := t.TempDir()
	cfg.DiskDir, cfg.HostLimit = dir, -1
	disk, err := offload.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	r, err := step(t, dev, m, disk.Hooks())
	if err != nil {
		t.Fatal(err)
	}
	equalBits(t, base, r)
	if ds := disk.Stats(); ds.BytesToDisk == 0 || ds.BytesToHost != 0 || ds.BytesFromDisk == 0 || ds.BytesFromDisk > ds.BytesToDisk {
		t.Errorf("disk stats: %+v", ds)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
}

// The torchtune bug: freeing a device block before the copy that reads it
// has finished. With slow copies and poisoned free blocks, the copy reads
// NaN; the offloader's real behaviour does not.
func TestEarlyFreeIsCaughtByPoison(t *testing.T) {
	dev := openCPU(t, device.Options{PoisonFreed: true, Params: map[string]string{"copy_delay": "2ms"}})
	m := model(t, dev)
	off, err := offload.New(dev, offload.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	good, err := step(t, dev, m, off.Hooks())
	if err != nil {
		t.Fatal(err)
	}
	if hasNaN(good) {
		t.Fatal("correct offloading produced NaN")
	}
	offload.SetEarlyFree(off, true)
	bad, err := step(t, dev, m, off.Hooks())
	if err == nil && !hasNaN(bad) {
		t.Fatal("freeing before the copy finished went unnoticed")
	}
}

func hasNaN(r result) bool {
	for _, g := range r.grads {
		for _, v := range g {
			if v != v {
				return true
			}
		}
	}
	return r.loss != r.loss
}

func TestInPlaceChangeOfOffloadedTensorFails(t *testing.T) {
	dev := openCPU(t, device.Options{})
	off, err := offload.New(dev, offload.Config{MinBytes: 0, KeepLast: 0, MaxInFlight: 1, Lookahead: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	w := ferry.Randn(dev, rand.New(rand.NewPCG(3, 3)), 16, 16).RequireGrad()
	defer w.Release()
	err = ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.Ones(dev, 4, 16))
		var y *ferry.Tensor
		tape.WithHooks(off.Hooks(), func() {
			h := ferry.MatMul(x, w) // saves x, which stays while x is held
			tape.NoGrad(func() { x.AddInPlace(x) })
			x.Release()                  // now only the offloader holds it: it moves
			y = ferry.Sum(ferry.Tanh(h)) // the next save starts the move
		})
		if off.Stats().Offloaded == 0 {
			t.Fatal("the modified tensor was not offloaded")
		}
		return y.Backward()
	})
	if err == nil {
		t.Fatal("backward succeeded after an offloaded saved tensor was changed in place")
	}
	t.Log(err)
}

func TestDiskFailureIsClearAndRecoverable(t *testing.T) {
	dev := openCPU(t, device.Options{})
	m := model(t, dev)
	base, _ := step(t, dev, m, nil)
	dir := filepath.Join(t.TempDir(), "spill")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := offload.DefaultConfig()
	cfg.DiskDir, cfg.HostLimit = dir, -1
	off, err := offload.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	os.Remove(dir) // the directory disappears under the offloader
	_, err = step(t, dev, m, off.Hooks())
	if err == nil {
		t.Fatal("step succeeded with the disk tier's directory gone")
	}
	t.Log(err)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := step(t, dev, m, off.Hooks())
	if err != nil {
		t.Fatalf("the step after the failure: %v", err)
	}
	equalBits(t, base, r)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

// With slow copies, many are still in flight when backward starts; every
// step still starts from the same bytes and computes the same gradients.
// (cmd/ferry/internal/demo's TestOffloadStepsStartEqual catches the interleaving where
// a copy finishes between two uses of one tensor in backward.)
func TestBackwardOvertakingCopiesLeaksNothing(t *testing.T) {
	dev := openCPU(t, device.Options{Params: map[string]string{"copy_delay": "3ms"}})
	m := model(t, dev)
	cfg := offload.DefaultConfig()
	cfg.KeepLast, cfg.MaxInFlight = 0, 8 // many copies in flight when forward ends
	off, err := offload.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	base, _ := step(t, dev, m, nil)
	for i := 0; i < 4; i++ {
		r, err := step(t, dev, m, off.Hooks())
		if err != nil {
			t.Fatal(err)
		}
		equalBits(t, base, r)
		if r.before != base.before {
			t.Fatalf("step %d starts with %d bytes allocated, not %d: something leaked", i, r.before, base.before)
		}
	}
}

// The disk tier writes each step's tensors over the files of the step
// before (a step saves the same sizes every step): after the first step it
// creates no file, the bits stay the base run's, and the files it keeps,
// live and spare together, never hold more than its peak. A model of
// other sizes on the same offloader makes files of its own sizes without
// the bound being passed; Close closes them all.
func TestDiskTierWritesOverTheLastStepsFiles(t *testing.T) {
	dev := openCPU(t, device.Options{})
	m := model(t, dev)
	base, _ := step(t, dev, m, nil)
	fds := openFiles(t)
	cfg := offload.DefaultConfig()
	cfg.DiskDir, cfg.HostLimit = t.TempDir(), -1
	off, err := offload.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var made int
	for i := 0; i < 3; i++ {
		r, err := step(t, dev, m, off.Hooks())
		if err != nil {
			t.Fatal(err)
		}
		equalBits(t, base, r)
		n, live, spare := offload.DiskFiles(off)
		if i == 0 {
			made = n
			if made == 0 {
				t.Fatal("the first step made no file: nothing went to disk")
			}
		} else if n != made {
			t.Errorf("step %d made %d files more than the first step's %d", i+1, n-made, made)
		}
		if peak := off.Stats().DiskPeakBytes; live+spare > peak {
			t.Errorf("step %d: %d bytes live and %d spare, above the peak of %d", i+1, live, spare, peak)
		}
	}
	// Other sizes: hidden layers twice as wide, so that most saved
	// tensors fit no spare file (the first layer's input still does).
	rng := rand.New(rand.NewPCG(9, 9))
	var ms []nn.Module
	for i := 0; i < layers; i++ {
		in, out := 2*width, 2*width
		if i == 0 {
			in = width
		}
		if i == layers-1 {
			out = width
		}
		l, err := nn.NewLinear(dev, in, out, true, rng)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, l, nn.Tanh{})
	}
	other := nn.NewSequential(ms...)
	otherBase, _ := step(t, dev, other, nil)
	for i := 0; i < 2; i++ {
		r, err := step(t, dev, other, off.Hooks())
		if err != nil {
			t.Fatal(err)
		}
		equalBits(t, otherBase, r)
		if _, live, spare := offload.DiskFiles(off); live+spare > off.Stats().DiskPeakBytes {
			t.Errorf("other model, step %d: %d bytes live and %d spare, above the peak of %d", i+1, live, spare, off.Stats().DiskPeakBytes)
		}
	}
	if err := off.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFiles(t); fds >= 0 && after > fds {
		t.Errorf("%d files open after Close, %d before New", after, fds)
	}
}

// openFiles counts the process's open file descriptors (-1 where
// /proc/self/fd cannot be read).
func openFiles(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Logf("open files not counted: %v", err)
		return -1
	}
	return len(ents)
}

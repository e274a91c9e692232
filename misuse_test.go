package ferry_test

// Misuse of the library fails loudly: every case here returns, or panics
// with, an *ferry.Error that Step and Catch turn into an error. Nothing
// crashes, nothing succeeds silently, and nothing is lost or corrupted.

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/device/meta"
	"ferry/internal/goid"
	"ferry/nn"
	"ferry/optim"
)

// wantFerryError fails unless err is an *ferry.Error, and, when target is
// not nil, wraps target.
func wantFerryError(t *testing.T, what string, err error, target error) *ferry.Error {
	t.Helper()
	var fe *ferry.Error
	if !errors.As(err, &fe) {
		t.Fatalf("%s: got %v (%T), want a *ferry.Error", what, err, err)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("%s: %v does not wrap %v", what, err, target)
	}
	return fe
}

// After Close every use of a device's tensors is an *Error wrapping
// device.ErrClosed, on every device; releasing them is harmless.
func TestClosedDeviceTensorsFailLoudly(t *testing.T) {
	for _, name := range []string{"cpu", "meta"} {
		t.Run(name, func(t *testing.T) {
			var dev device.Device
			if name == "cpu" {
				d, err := device.Open("cpu", device.Options{})
				if err != nil {
					t.Fatal(err)
				}
				dev = d
			} else {
				dev = meta.New(device.Options{}, nil)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			a := ferry.Randn(dev, rng, 4, 8)
			b := ferry.Randn(dev, rng, 4, 8)
			lin, err := nn.NewLinear(dev, 8, 8, true, rng)
			if err != nil {
				t.Fatal(err)
			}
			opt := optim.NewSGD(lin.Parameters(), 0.1)
			// Gradients for the optimizer to apply after Close.
			if err := ferry.Step(func(tape *ferry.Tape) error {
				return ferry.MSELoss(lin.Forward(tape.Input(a)), b).Backward()
			}); err != nil {
				t.Fatal(err)
			}
			// A step whose loss outlives the device: backward after Close.
			var loss *ferry.Tensor
			tape := ferry.NewTape()
			loss = ferry.MSELoss(lin.Forward(tape.Input(a)), b)
			if err := dev.Close(); err != nil {
				t.Fatal(err)
			}

			uses := map[string]func() error{
				"add":      func() error { ferry.Add(a, b); return nil },        //ferry:discard the call must fail before it returns a tensor
				"matmul":   func() error { ferry.MatMul(a, b.T()); return nil }, //ferry:discard the call must fail before it returns a tensor
				"relu":     func() error { ferry.ReLU(a); return nil },          //ferry:discard the call must fail before it returns a tensor
				"sum":      func() error { ferry.Sum(a); return nil },           //ferry:discard the call must fail before it returns a tensor
				"reshape":  func() error { a.Reshape(32); return nil },          //ferry:discard the call must fail before it returns a tensor
				"linear":   func() error { lin.Forward(a); return nil },         //ferry:discard the call must fail before it returns a tensor
				"float32s": func() error { a.Float32s(); return nil },
				"item":     func() error { ferry.Sum(a).Item(); return nil },
				"empty":    func() error { ferry.Empty(dev, 3); return nil },      //ferry:discard the call must fail before it returns a tensor
				"randn":    func() error { ferry.Randn(dev, rng, 3); return nil }, //ferry:discard the call must fail before it returns a tensor
				"backward": func() error { return loss.Backward() },
				"sgd":      func() error { return opt.Step() },
				"step": func() error {
					return ferry.Step(func(tape *ferry.Tape) error { ferry.Add(tape.Input(a), b); return nil }) //ferry:discard the call must fail before it returns a tensor
				},
			}
			for what, use := range uses {
				wantFerryError(t, what, ferry.Catch(use), device.ErrClosed)
			}
			if err := ferry.Step(func(tape *ferry.Tape) error { ferry.ReLU(tape.Input(a)); return nil }); err == nil { //ferry:discard the call must fail before it returns a tensor
				t.Fatal("a step on a closed device's tensor returned nil")
			}
			// Letting go is harmless: the memory went with the device.
			if err := tape.Close(); err != nil {
				t.Fatalf("closing the tape after its device: %v", err)
			}
			opt.Release()
			nn.Release(lin)
			a.Release()
			b.Release()
			a.Release()
		})
	}
}

// Tensors of two devices with one name: the error says which is which.
func TestDifferentDevicesAreNamedApart(t *testing.T) {
	d1, d2 := newCPU(t, device.Options{}), newCPU(t, device.Options{})
	a, b := ferry.Ones(d1, 3), ferry.Ones(d2, 3)
	defer a.Release()
	defer b.Release()
	err := ferry.Catch(func() error { ferry.Add(a, b); return nil }) //ferry:discard the call must fail before it returns a tensor
	wantFerryError(t, "add", err, nil)
	id1, id2 := device.Identify(d1), device.Identify(d2)
	if id1 == id2 {
		t.Fatalf("two devices share the identity %q", id1)
	}
	if msg := err.Error(); !strings.Contains(msg, id1) || !strings.Contains(msg, id2) {
		t.Fatalf("error %q does not name %q and %q", msg, id1, id2)
	}
	t.Log(err)
}

// A tape used from a second goroutine: each use there is an *Error and
// changes nothing, so the owner's step ends with the gradients it would
// have had.
func TestTapeFromSecondGoroutine(t *testing.T) {
	if !goid.Supported {
		t.Skip("no goroutine identity on this architecture")
	}
	dev := newCPU(t, device.Options{})
	model := originModel(t, dev, 3, 16, 5)
	defer nn.Release(model)
	rng := rand.New(rand.NewPCG(3, 3))
	x, target := ferry.Randn(dev, rng, 4, 16), ferry.Randn(dev, rng, 4, 16)
	defer x.Release()
	defer target.Release()

	grads := func(misuse bool) [][]float32 {
		err := ferry.Step(func(tape *ferry.Tape) error {
			y := model.Forward(tape.Input(x))
			loss := ferry.MSELoss(y, target)
			if misuse {
				records := tape.Len()
				var errs []error
				onOther(func() {
					catch := func(f func()) { errs = append(errs, ferry.Catch(func() error { f(); return nil })) }
					catch(func() { ferry.ReLU(y) }) //ferry:discard the call must fail before it returns a tensor
					catch(func() { tape.Input(x) }) //ferry:discard the call must fail before it returns a tensor
					catch(func() { y.Release() })
					catch(func() { tape.PushModule("x") })
					errs = append(errs, loss.Backward(), tape.Close())
				})
				for i, err := range errs {
					fe := wantFerryError(t, "use from another goroutine", err, nil)
					if !strings.Contains(fe.Msg, "goroutine") {
						t.Errorf("use %d: %v does not say what is wrong", i, err)
					}
				}
				if tape.Len() != records {
					t.Fatalf("the other goroutine changed the tape: %d records, had %d", tape.Len(), records)
				}
			}
			return loss.Backward()
		})
		if err != nil {
			t.Fatal(err)
		}
		var gs [][]float32
		for _, p := range model.Parameters() {
			gs = append(gs, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		return gs
	}
	clean, misused := grads(false), grads(true)
	for i := range clean {
		for j := range clean[i] {
			if math.Float32bits(clean[i][j]) != math.Float32bits(misused[i][j]) {
				t.Fatalf("gradient %d[%d]: %v after misuse, %v without", i, j, misused[i][j], clean[i][j])
			}
		}
	}

	// A tape made on one goroutine and first used on another is that
	// goroutine's: handing it over before any use is fine.
	tape := ferry.NewTape()
	onOther(func() {
		if err := ferry.Catch(func() error { ferry.ReLU(tape.Input(x)); return tape.Close() }); err != nil { //ferry:discard the call must fail before it returns a tensor
			t.Errorf("a tape first used on another goroutine: %v", err)
		}
	})
}

// onOther runs f on a new goroutine and waits for it.
func onOther(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// Sizes that overflow, or that no device could hold, are an *Error wrapping
// device.ErrTooLarge on every device, before anything is staged on the
// host.
func TestSizesNeverOverflow(t *testing.T) {
	devs := map[string]device.Device{"cpu": newCPU(t, device.Options{}), "meta": meta.New(device.Options{}, nil)}
	rng := rand.New(rand.NewPCG(1, 1))
	for name, dev := range devs {
		for _, shape := range [][]int{
			{math.MaxInt64, 1024}, // --batch 9223372036854775807
			{1 << 31, 1 << 31, 4}, // 2^64 elements: 0 when unchecked
			{1 << 62, 4},          // 2^64 bytes
			{10000000, 10000000, 10000000},
		} {
			for what, make := range map[string]func(){
				"empty":   func() { ferry.Empty(dev, shape...) },              //ferry:discard the call must fail before it returns a tensor
				"uniform": func() { ferry.Uniform(dev, rng, 0, 1, shape...) }, //ferry:discard the call must fail before it returns a tensor
				"randn":   func() { ferry.Randn(dev, rng, shape...) },         //ferry:discard the call must fail before it returns a tensor
				"zeros":   func() { ferry.Zeros(dev, shape...) },              //ferry:discard the call must fail before it returns a tensor
				"from":    func() { ferry.FromFloat32s(dev, nil, shape...) },  //ferry:discard the call must fail before it returns a tensor
			} {
				err := ferry.Catch(func() error { make(); return nil })
				wantFerryError(t, name+" "+what, err, device.ErrTooLarge)
			}
		}
		// A reshape whose product wraps around to the tensor's size, and a
		// strided view whose reach does.
		x := ferry.Zeros(dev, 4)
		err := ferry.Catch(func() error { x.Reshape(1<<62+1, 4); return nil }) //ferry:discard the call must fail before it returns a tensor
		wantFerryError(t, name+" reshape", err, nil)
		err = ferry.Catch(func() error { x.AsStrided([]int{2, 1 << 62}, []int{1, 4}, 0); return nil }) //ferry:discard the call must fail before it returns a tensor
		wantFerryError(t, name+" as_strided", err, nil)
		x.Release()
		// Values that do not match the shape: an error before any memory
		// is asked for.
		before := dev.Allocator().Stats().AllocatedBytes.Allocated
		err = ferry.Catch(func() error { ferry.FromFloat32s(dev, make([]float32, 10), 1<<30); return nil }) //ferry:discard the call must fail before it returns a tensor
		wantFerryError(t, name+" from_float32s", err, nil)
		if _, oom := ferry.IsOutOfMemory(err); oom || dev.Allocator().Stats().AllocatedBytes.Allocated != before {
			t.Errorf("%s: 10 values for 2^30 elements asked the device for memory: %v", name, err)
		}
	}
}

// Uniform and Randn ask the device first: a tensor that cannot fit is an
// out-of-memory error, not a Go fatal error after filling a host slice.
// Values are staged in bounded pieces, drawn in the same order as one
// slice would be.
func TestHostStagingIsBoundedAndAfterTheDevice(t *testing.T) {
	dev := newCPU(t, device.Options{Capacity: 64 << 20})
	rng := rand.New(rand.NewPCG(1, 1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// 40 GiB: `--batch 10500000 --width 1024` of the issue.
	err := ferry.Catch(func() error { ferry.Randn(dev, rng, 10500000, 1024); return nil }) //ferry:discard the call must fail before it returns a tensor
	runtime.ReadMemStats(&after)
	if _, ok := ferry.IsOutOfMemory(err); !ok {
		t.Fatalf("40 GiB on a 64 MiB device: %v, want out of memory", err)
	}
	wantFerryError(t, "randn", err, nil)
	if staged := after.TotalAlloc - before.TotalAlloc; staged > 1<<20 {
		t.Fatalf("%d bytes allocated on the Go heap before the device said no", staged)
	}

	// 12 Mi elements (48 MiB) through a 4 MiB staging buffer, the values
	// those of one long draw.
	n := 3<<20*4 + 5
	seed := func() *rand.Rand { return rand.New(rand.NewPCG(9, 9)) }
	runtime.ReadMemStats(&before)
	u := ferry.Uniform(dev, seed(), -2, 3, n)
	runtime.ReadMemStats(&after)
	defer u.Release()
	if staged := after.TotalAlloc - before.TotalAlloc; staged > 8<<20 {
		t.Errorf("Uniform of %d MiB staged %d MiB on the Go heap", n*4>>20, staged>>20)
	}
	got := u.Float32s()
	r := seed()
	for i, v := range got {
		want := -2 + 5*r.Float32()
		if math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("element %d: %v, want %v (the sequence of one draw)", i, v, want)
		}
	}
}

// An out-of-memory error names what the memory was for, and its advice fits:
// weights are parameters, and a smaller batch does not shrink them.
func TestOutOfMemoryNamesParameters(t *testing.T) {
	dev := newCPU(t, device.Options{Capacity: 32 << 20})
	_, err := nn.NewLinear(dev, 4096, 4096, true, rand.New(rand.NewPCG(1, 1))) // 64 MiB of weight
	oom, ok := ferry.IsOutOfMemory(err)
	if !ok {
		t.Fatalf("a 64 MiB weight on a 32 MiB device: %v, want out of memory", err)
	}
	if oom.Category != device.Parameter {
		t.Errorf("the weight's allocation is counted as %s, want parameter", oom.Category)
	}
	if msg := err.Error(); strings.Contains(msg, "batch") || !strings.Contains(msg, "parameter") {
		t.Errorf("advice for a weight: %q", msg)
	}
	t.Log(err)
}

// A released tensor's use panics on every device, naming the tensor and
// where it was released; the meta device records no place (its steps are
// replayed by the thousand) and says so.
func TestUseAfterReleaseSaysWhere(t *testing.T) {
	for _, c := range []struct {
		dev  device.Device
		want string
	}{
		{newCPU(t, device.Options{}), "was released at "},
		{meta.New(device.Options{}, nil), "was released and cannot be used (meta does not record where)"},
	} {
		x := ferry.Zeros(c.dev, 2, 3)
		x.Release()
		err := ferry.Catch(func() error { ferry.Sum(x).Release(); return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "[2 3]") {
			t.Errorf("%s: use after release: %v; want %q", c.dev.Name(), err, c.want)
		}
	}
}

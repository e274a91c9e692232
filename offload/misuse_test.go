package offload_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"ferry"
	"ferry/device"
	"ferry/internal/goid"
	"ferry/offload"
)

// The step's input batch, which the caller holds outside the tape, is not
// copied: copying it would free nothing. Bytes moved per step drop by
// exactly its storage, and gradients stay bitwise those of no offloading.
func TestInputHeldByCallerIsNotCopied(t *testing.T) {
	dev := openCPU(t, device.Options{PoisonFreed: true})
	m := model(t, dev)
	base, err := step(t, dev, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	inputBytes := int64(batch * width * 4)

	run := func(adopt bool) offload.Stats {
		off, err := offload.New(dev, offload.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer off.Close()
		var r result
		if adopt {
			r, err = stepAdopted(t, dev, m, off.Hooks())
		} else {
			r, err = step(t, dev, m, off.Hooks()) // tape.Input: the caller keeps the batch
		}
		if err != nil {
			t.Fatal(err)
		}
		equalBits(t, base, r)
		return off.Stats()
	}
	held, given := run(false), run(true)
	t.Logf("input held by the caller: %+v", held)
	t.Logf("input given to the tape:  %+v", given)
	if held.HeldOutside != 1 || given.HeldOutside != 0 {
		t.Errorf("storages held outside the tape: %d and %d, want 1 (the batch) and 0", held.HeldOutside, given.HeldOutside)
	}
	if d := given.BytesToHost - held.BytesToHost; d != inputBytes {
		t.Errorf("bytes to host per step: %d with the batch held, %d with it given; the difference %d should be the batch's %d",
			held.BytesToHost, given.BytesToHost, d, inputBytes)
	}
	if given.Offloaded-held.Offloaded != 1 {
		t.Errorf("storages offloaded: %d and %d, want one more when the tape owns the batch", held.Offloaded, given.Offloaded)
	}
}

// stepAdopted is step with the batch handed to the tape (Adopt), so that no
// one outside the tape holds it: its copy is then worth making.
func stepAdopted(t *testing.T, dev device.Device, m interface {
	Forward(*ferry.Tensor) *ferry.Tensor
	Parameters() []*ferry.Tensor
}, hooks *ferry.SavedTensorHooks) (result, error) {
	var r result
	err := ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), batch, width))
		tg := tape.Adopt(ferry.Randn(dev, rand.New(rand.NewPCG(2, 2)), batch, width))
		var y *ferry.Tensor
		tape.WithHooks(hooks, func() { y = m.Forward(x) })
		loss := ferry.MSELoss(y, tg)
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

// An offloader used from a second goroutine while it holds a step's
// tensors reports it; the owner's step is unharmed. Between steps it may
// change hands.
func TestOffloaderFromSecondGoroutine(t *testing.T) {
	if !goid.Supported {
		t.Skip("no goroutine identity on this architecture")
	}
	dev := openCPU(t, device.Options{PoisonFreed: true})
	m := model(t, dev)
	base, err := step(t, dev, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	off, err := offload.New(dev, offload.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	in := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), batch, width)
	tg := ferry.Randn(dev, rand.New(rand.NewPCG(2, 2)), batch, width)
	defer in.Release()
	defer tg.Release()

	var r result
	err = ferry.Step(func(tape *ferry.Tape) error {
		var y *ferry.Tensor
		tape.WithHooks(off.Hooks(), func() { y = m.Forward(tape.Input(in)) })
		before := off.Stats()
		onOther(func() {
			// A second training loop on the same offloader.
			err := ferry.Step(func(tape *ferry.Tape) error {
				x := tape.Adopt(ferry.Randn(dev, rand.New(rand.NewPCG(5, 5)), batch, width))
				tape.WithHooks(off.Hooks(), func() { m.Forward(x) }) //ferry:discard the tape owns the output
				return nil
			})
			var fe *ferry.Error
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), "goroutine") {
				t.Errorf("pack from a second goroutine: %v, want a *ferry.Error about goroutines", err)
			}
			if err := off.Close(); err == nil {
				t.Error("Close from a second goroutine while the offloader holds tensors returned nil")
			}
		})
		if got := off.Stats(); got.SavedTensors != before.SavedTensors {
			t.Errorf("the second goroutine's tensors were recorded: %d saved, had %d", got.SavedTensors, before.SavedTensors)
		}
		loss := ferry.MSELoss(y, tape.Input(tg))
		r.loss = loss.Item()
		return loss.Backward()
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Parameters() {
		r.grads = append(r.grads, p.Grad().Float32s())
		p.SetGrad(nil)
	}
	equalBits(t, base, r)

	// The step is over and the offloader holds nothing: another goroutine
	// may train with it now.
	onOther(func() {
		r, err := step(t, dev, m, off.Hooks())
		if err != nil {
			t.Errorf("a step on another goroutine after the first finished: %v", err)
			return
		}
		equalBits(t, base, r)
	})
}

// Hooks of an offloader (or a HostSaver) on another device's tensors: an
// *Error that names both devices, and nothing leaks.
func TestOffloaderOnAnotherDevice(t *testing.T) {
	for _, kind := range []string{"offloader", "save-on-host"} {
		t.Run(kind, func(t *testing.T) { testOnAnotherDevice(t, kind) })
	}
}

func testOnAnotherDevice(t *testing.T, kind string) {
	dev, other := openCPU(t, device.Options{}), openCPU(t, device.Options{})
	hooks := offload.NewHostSaver(dev).Hooks()
	if kind == "offloader" {
		off, err := offload.New(dev, offload.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer off.Close()
		hooks = off.Hooks()
	}
	m := model(t, other)
	in := ferry.Randn(other, rand.New(rand.NewPCG(1, 1)), batch, width)
	defer in.Release()
	before := other.Allocator().Allocated()
	err := ferry.Step(func(tape *ferry.Tape) error {
		tape.WithHooks(hooks, func() { m.Forward(tape.Input(in)) }) //ferry:discard the tape owns the output
		return nil
	})
	var fe *ferry.Error
	if !errors.As(err, &fe) {
		t.Fatalf("offloader of %s on tensors of %s: %v, want a *ferry.Error", device.Identify(dev), device.Identify(other), err)
	}
	if msg := err.Error(); !strings.Contains(msg, device.Identify(dev)) || !strings.Contains(msg, device.Identify(other)) {
		t.Errorf("%q does not name both devices", msg)
	}
	if after := other.Allocator().Allocated(); after != before {
		t.Errorf("%d bytes left allocated after the failed step", after-before)
	}
	t.Log(err)
}

func onOther(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// A device closed while an offloader still holds a step's tensors: using
// them is an error, and closing the offloader afterwards is harmless.
func TestOffloaderAfterDeviceClose(t *testing.T) {
	dev := openCPU(t, device.Options{})
	m := model(t, dev)
	off, err := offload.New(dev, offload.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := ferry.Randn(dev, rand.New(rand.NewPCG(1, 1)), batch, width)
	tape := ferry.NewTape()
	var y *ferry.Tensor
	tape.WithHooks(off.Hooks(), func() { y = m.Forward(tape.Input(in)) })
	loss := ferry.MSELoss(y, y)
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	err = loss.Backward()
	if !errors.Is(err, device.ErrClosed) {
		t.Fatalf("backward after the device was closed: %v, want ErrClosed", err)
	}
	if err := tape.Close(); err != nil {
		t.Errorf("closing the tape: %v", err)
	}
	if err := off.Close(); err != nil {
		t.Errorf("closing the offloader: %v", err)
	}
	in.Release()
}

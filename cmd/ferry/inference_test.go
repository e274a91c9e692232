package main

import (
	"strings"
	"testing"
	"time"

	"ferry"
	"ferry/device"
	"ferry/device/cpu"
	"ferry/models"
	"ferry/nn"
)

// withMemory makes the preflights see free bytes of host memory, and
// caps the CPU device there, as opening it by name caps it at what the
// machine has free.
func withMemory(t *testing.T, free int64) {
	prev, prevOpts := availableMemory, trainDeviceOptions
	availableMemory = func() int64 { return free }
	trainDeviceOptions.Capacity = free
	t.Cleanup(func() { availableMemory, trainDeviceOptions = prev, prevOpts })
}

// ferry eval refuses validation batches that cannot fit, at once (the
// issue's --batch 1000000 --batches 1 ran past any reasonable time),
// naming the memory they need and the flags to lower; what fits runs.
func TestEvalPreflight(t *testing.T) {
	ck := textCheckpoint(t)
	withMemory(t, 8<<30)
	for _, args := range [][]string{
		{"--batch", "1000000", "--batches", "1"},
		{"--batch", "16777216"},
		{"--batch", "4096", "--batches", "65536"},
	} {
		start := time.Now()
		_, errOut, code := runWithin(t, 20*time.Second, append([]string{"eval", "--checkpoint-dir", ck}, args...)...)
		took := time.Since(start)
		if code != 1 || !strings.Contains(errOut, "this run needs at least") || !strings.Contains(errOut, "GiB on cpu") ||
			!strings.Contains(errOut, "the device holds 8.00 GiB") || !strings.Contains(errOut, "lower --batch") {
			t.Errorf("eval %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		if took > time.Second {
			t.Errorf("eval %s: refused after %v; want under 1 s", strings.Join(args, " "), took)
		}
	}
	if _, errOut, code := runCLI(t, "eval", "--checkpoint-dir", ck, "--batch", "4", "--batches", "2"); code != 0 {
		t.Errorf("eval --batch 4 --batches 2: exit %d: %s", code, errOut)
	}
}

// ferry sample refuses a model its device cannot hold, before loading it.
func TestSamplePreflight(t *testing.T) {
	ck := textCheckpoint(t)
	withMemory(t, 64<<10)
	_, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck, "--n", "4")
	if code != 1 || !strings.Contains(errOut, "this run needs at least") || !strings.Contains(errOut, "--device") {
		t.Errorf("sample in 64 KiB: exit %d, stderr %q", code, errOut)
	}
	withMemory(t, 8<<30)
	if _, errOut, code := runCLI(t, "sample", "--checkpoint-dir", ck, "--n", "4"); code != 0 {
		t.Errorf("sample in 8 GiB: exit %d: %s", code, errOut)
	}
}

// The preflight's figure, measured on the meta device, is what the CPU
// device reserves for the same evaluation step, to the byte.
func TestInferenceStepIsTheCPUs(t *testing.T) {
	f, _ := models.Lookup("gpt")
	lf := f.(models.LanguageFamily)
	s := models.Defaults(f, "cpu")
	for k, v := range (models.Sizes{"layers": 2, "heads": 2, "embd": 32, "seq": 16, "vocab": 256, "dropout": 0}) {
		s[k] = v
	}
	const rows, batches = 512, 2
	params, want, err := inferenceStep(lf, s, rows, batches, true)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	g, err := lf.LanguageModel(dev, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(g)
	nn.SetTraining(g, false)
	var n int64
	for _, p := range g.Parameters() {
		n += int64(p.Numel())
	}
	base := dev.Allocator().Stats().ReservedBytes.Current
	var held []*ferry.Tensor
	for range 2 * batches {
		held = append(held, ferry.ZerosOf(dev, device.Int32, device.Activation, rows, 16))
	}
	defer func() {
		for _, x := range held {
			x.Release()
		}
	}()
	err = ferry.Step(func(tape *ferry.Tape) error {
		tape.NoGrad(func() { ferry.CrossEntropy(g.Forward(tape.Input(held[0])), tape.Input(held[1])).Item() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := dev.Allocator().Stats().ReservedBytes.Peak - base
	if n != params || got != want {
		t.Errorf("meta: %d parameters, %d bytes reserved for the step; cpu: %d, %d", params, want, n, got)
	}
}

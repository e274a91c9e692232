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
// One batch at a time is on the device; all of them wait in host memory.
func TestEvalPreflight(t *testing.T) {
	ck := textCheckpoint(t)
	withMemory(t, 8<<30)
	onDevice := []string{"this run needs at least", "GiB on cpu", "the device holds 8.00 GiB", "lower --batch"}
	onHost := []string{"the batches held in host memory need 32.00 GiB", "8.00 GiB free", "lower --batch (now 4096) or --batches (now 65536)"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--batch", "1000000", "--batches", "1"}, onDevice},
		{[]string{"--batch", "16777216"}, onDevice},
		{[]string{"--batch", "4096", "--batches", "65536"}, onHost},
	} {
		args := c.args
		start := time.Now()
		_, errOut, code := runWithin(t, 20*time.Second, append([]string{"eval", "--checkpoint-dir", ck}, args...)...)
		took := time.Since(start)
		missing := code != 1
		for _, w := range c.want {
			missing = missing || !strings.Contains(errOut, w)
		}
		if missing {
			t.Errorf("eval %s: exit %d, stderr %q; want %q", strings.Join(args, " "), code, errOut, c.want)
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
	const rows = 512
	params, want, err := inferenceStep(lf, s, rows, true)
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
	// As TextTask.EvaluateShard runs a validation batch.
	err = ferry.Step(func(tape *ferry.Tape) error {
		x := tape.Adopt(ferry.ZerosOf(dev, device.Int32, device.Activation, rows, 16))
		y := tape.Adopt(ferry.ZerosOf(dev, device.Int32, device.Activation, rows, 16))
		tape.NoGrad(func() { ferry.CrossEntropy(g.Forward(x), y).Item() })
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

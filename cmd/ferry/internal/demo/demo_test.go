package demo_test

import (
	"strconv"
	"testing"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	_ "ferry/device/cpu"
	_ "ferry/device/meta"
	"ferry/models"
)

// The meta device is the CPU device minus the arithmetic: the demo model
// allocates, frees and saves the same bytes on both, in every mode. Modes
// that copy asynchronously may hold up to the offloader's copies in flight
// longer on the CPU, where copies take real time.
func TestMetaMatchesCPU(t *testing.T) {
	t.Run("mlp", func(t *testing.T) {
		metaMatchesCPU(t, func(cfg *demo.Config) { cfg.Sizes = models.Sizes{"layers": 6, "width": 64, "batch": 32} })
	})
	t.Run("gpt", func(t *testing.T) {
		metaMatchesCPU(t, func(cfg *demo.Config) {
			cfg.Family, _ = models.Lookup("gpt")
			cfg.Sizes = models.Sizes{"vocab": 37, "seq": 16, "layers": 3, "heads": 2, "embd": 32, "dropout": 0.1, "batch": 2}
		})
	})
	// In bfloat16 mixed precision too: the same bytes to the byte, and
	// every mode's gradients equal to none's.
	t.Run("mlp-bf16", func(t *testing.T) {
		metaMatchesCPU(t, func(cfg *demo.Config) {
			cfg.Sizes = models.Sizes{"layers": 6, "width": 64, "batch": 32}
			cfg.Precision = device.BFloat16
		})
	})
	t.Run("gpt-bf16", func(t *testing.T) {
		metaMatchesCPU(t, func(cfg *demo.Config) {
			cfg.Family, _ = models.Lookup("gpt")
			cfg.Sizes = models.Sizes{"vocab": 37, "seq": 16, "layers": 3, "heads": 2, "embd": 32, "dropout": 0.1, "batch": 2}
			cfg.Precision = device.BFloat16
		})
	})
	t.Run("llama-bf16", func(t *testing.T) {
		metaMatchesCPU(t, func(cfg *demo.Config) {
			cfg.Family, _ = models.Lookup("llama")
			cfg.Sizes = models.Sizes{"vocab": 37, "seq": 16, "layers": 2, "heads": 4, "kv-heads": 2, "embd": 32, "hidden": 96, "batch": 2}
			cfg.Precision = device.BFloat16
		})
	})
}

func metaMatchesCPU(t *testing.T, configure func(*demo.Config)) {
	run := func(dev string) *demo.Result {
		cfg := demo.DefaultConfig(dev)
		cfg.Steps = 1
		configure(&cfg)
		cfg.DiskDir = t.TempDir()
		r, err := demo.Execute(cfg)
		if err != nil {
			t.Fatalf("%s: %v", dev, err)
		}
		return r
	}
	c, m := run("cpu"), run("meta")
	act := c.ActivationBytes
	// Copies in flight hold at most MaxInFlight of the largest saved
	// tensors: one activation for the MLP; a GPT block's MLP hidden layer
	// (4 × embedding; the test vocabulary is smaller).
	largest := act
	if c.Model == "gpt" {
		largest = 4 * act
	}
	bound := int64(demo.DefaultConfig("cpu").Offload.MaxInFlight) * largest
	for i, cr := range c.Runs {
		mr := m.Runs[i]
		exact := cr.Mode != demo.Offload && cr.Mode != demo.OffloadDisk && cr.Mode != demo.RecomputeOffload
		for _, f := range []struct {
			name     string
			cpu, met int64
		}{
			{"before forward", cr.BeforeForwardBytes, mr.BeforeForwardBytes},
			{"after forward", cr.AfterForwardBytes, mr.AfterForwardBytes},
			{"peak forward", cr.PeakForwardBytes, mr.PeakForwardBytes},
			{"peak step", cr.PeakStepBytes, mr.PeakStepBytes},
		} {
			d := f.cpu - f.met
			if exact && d != 0 || !exact && (d < 0 || d > bound) {
				t.Errorf("%s %s: cpu %d, meta %d (difference %d, allowed %v)", cr.Mode, f.name, f.cpu, f.met, d, map[bool]string{true: "0", false: "0.." + strconv.FormatInt(bound, 10)}[exact])
			}
		}
		if cr.GradsEqualNone == nil || !*cr.GradsEqualNone {
			t.Errorf("%s: gradients differ from none's", cr.Mode)
		}
	}
}

// The origin configuration on the meta device gives the original user's
// PyTorch figures, less the 8.125 MiB of cuBLAS workspace ferry does not
// model.
func TestOriginFigures(t *testing.T) {
	cfg := demo.DefaultConfig("meta")
	cfg.Steps = 1
	r, err := demo.Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	act := int64(16 * mib)
	for _, run := range r.Runs {
		if run.BeforeForwardBytes != 2701787136 { // 2576.625 MiB
			t.Errorf("%s: before forward %d bytes, want 2701787136", run.Mode, run.BeforeForwardBytes)
		}
		switch run.Mode {
		case demo.None, demo.Naive:
			if run.AfterForwardBytes != 2701787136+640*mib || run.PeakForwardBytes != 2701787136+656*mib {
				t.Errorf("%s: after %d, peak %d; want 3216.625 and 3232.625 MiB", run.Mode, run.AfterForwardBytes, run.PeakForwardBytes)
			}
		case demo.SaveOnHost, demo.Offload, demo.OffloadDisk:
			if d := run.AfterForwardBytes - run.BeforeForwardBytes; d > 2*act {
				t.Errorf("%s: forward kept %d bytes, want at most 2 activations", run.Mode, d)
			}
		}
	}
}

// Offloading leaks nothing from step to step, however copies and backward
// interleave (run a few times: the interleaving varies).
func TestOffloadStepsStartEqual(t *testing.T) {
	for i := 0; i < 5; i++ {
		cfg := demo.DefaultConfig("cpu")
		cfg.Sizes, cfg.Steps = models.Sizes{"layers": 6, "width": 64, "batch": 32}, 3
		cfg.Modes = []string{demo.None, demo.Offload, demo.OffloadDisk}
		cfg.DiskDir = t.TempDir()
		r, err := demo.Execute(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, run := range r.Runs {
			if run.BeforeForwardBytes != r.Runs[0].BeforeForwardBytes {
				t.Fatalf("%s: the last step starts with %d bytes allocated, none's with %d", run.Mode, run.BeforeForwardBytes, r.Runs[0].BeforeForwardBytes)
			}
		}
	}
}

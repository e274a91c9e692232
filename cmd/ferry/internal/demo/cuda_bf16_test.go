package demo_test

import (
	"math"
	"testing"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/models"
)

// A GPT in bfloat16 mixed precision on the CUDA device over the fake
// driver (cuBLAS's bfloat16 products, the convert kernel, the bfloat16
// elementwise kernels, attention and the losses widening into float32
// temporaries): every memory mode gives mode none's gradients, bit for
// bit, and the loss is finite.
func TestGPTInBF16OnFakeCUDA(t *testing.T) {
	cfg := demo.DefaultConfig("cuda")
	cfg.Family, _ = models.Lookup("gpt")
	cfg.Sizes = models.Sizes{"vocab": 37, "seq": 16, "layers": 2, "heads": 2, "embd": 32, "dropout": 0.1, "batch": 2}
	cfg.Precision = device.BFloat16
	cfg.Steps = 1
	cfg.Modes = []string{demo.None, demo.Offload, demo.Recompute, demo.RecomputeOffload}
	cfg.DiskDir = t.TempDir()
	cfg.Open = func(string, device.Options) (device.Device, error) {
		return cuda.Open(fake.New(fake.Options{SMs: 4}), 0, device.Options{PoisonFreed: true})
	}
	r, err := demo.Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Precision != "bf16" {
		t.Errorf("result precision %q", r.Precision)
	}
	for _, run := range r.Runs {
		if run.GradsEqualNone == nil || !*run.GradsEqualNone {
			t.Errorf("%s: gradients differ from none's", run.Mode)
		}
		if l := float64(run.Loss); math.IsNaN(l) || math.IsInf(l, 0) || l <= 0 {
			t.Errorf("%s: loss %v", run.Mode, run.Loss)
		}
	}
}

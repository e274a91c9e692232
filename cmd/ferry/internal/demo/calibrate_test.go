package demo_test

import (
	"math"
	"strings"
	"testing"

	"ferry/cmd/ferry/internal/demo"
	"ferry/device"
	"ferry/models"
	"ferry/plan"
)

// A GPT fit on the CPU at a toy size: it runs in seconds and gives finite,
// positive rates, with the host optimizer's rate and the copy share fitted
// to the steps with the state and the parameters on the host.
func TestFitModelProfileCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("short: times training steps on the CPU")
	}
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	gpt, _ := models.Lookup("gpt")
	s := models.Sizes{"vocab": 64, "seq": 16, "layers": 2, "heads": 2, "embd": 32, "batch": 4}
	p, err := plan.Calibrate(dev, plan.CalibrateOptions{Width: 32, Batch: 4 * 16, Seconds: 0.02, DiskDir: t.TempDir(),
		Fit: demo.FitModelProfile(gpt, s), FitOn: "a toy GPT", HostIsDevice: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"matmul": p.MatmulFLOPS, "memory": p.MemoryBytesPerSec, "h2d": p.H2DBytesPerSec,
		"d2h": p.D2HBytesPerSec, "disk write": p.DiskWriteBytesPerSec, "disk read": p.DiskReadBytesPerSec} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s rate %v: want finite and positive", name, v)
		}
	}
	if !(p.KernelSeconds >= 0) || !(p.CopyComputeShare >= 0 && p.CopyComputeShare <= 10) {
		t.Errorf("kernel %v s, copy share %v", p.KernelSeconds, p.CopyComputeShare)
	}
	if !(p.HostOptimizerBytesPerSec > 0) || !(p.DiskSeconds >= 0 && p.DiskSeconds <= 1) || !p.HostSharesCompute {
		t.Errorf("host optimizer %v B/s, disk transfer %v s, host shares compute %v: want fitted, timed, and set on the CPU",
			p.HostOptimizerBytesPerSec, p.DiskSeconds, p.HostSharesCompute)
	}
	if !strings.Contains(p.Source, "a toy GPT") {
		t.Errorf("source %q does not say what was fitted", p.Source)
	}
}

func TestFitModelProfileRefusesBadSizes(t *testing.T) {
	dev, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	gpt, _ := models.Lookup("gpt")
	fit := demo.FitModelProfile(gpt, models.Sizes{"vocab": 64, "seq": 16, "layers": 2, "heads": 3, "embd": 32, "batch": 4})
	if err := fit(dev, nil, plan.CalibrateOptions{}); err == nil || !strings.Contains(err.Error(), "multiple") {
		t.Errorf("3 heads of 32: %v", err)
	}
	fit = demo.FitModelProfile(gpt, models.Sizes{"vocab": 64, "seq": 16, "layers": 2, "heads": 2, "embd": 32, "batch": 0})
	if err := fit(dev, nil, plan.CalibrateOptions{}); err == nil || !strings.Contains(err.Error(), "batch") {
		t.Errorf("batch 0: %v", err)
	}
}

package cuda_test

import (
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/internal/demo"
)

// The demo, every offload mode, on the CUDA device over the fake driver
// with slow copies: the offload engine's streams, events and pinned host
// pool against an asynchronous device. Gradients must equal those of no
// offloading, and offloading must lower the memory held after forward.
func TestDemoOnFake(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cfg := demo.DefaultConfig("cuda:0")
	cfg.Layers, cfg.Width, cfg.Batch, cfg.Steps = 6, 64, 32, 2
	cfg.DiskDir = t.TempDir()
	cfg.DeviceOptions = device.Options{PoisonFreed: true}
	cfg.Open = func(name string, opts device.Options) (device.Device, error) {
		return cuda.Open(fake.New(fake.Options{SMs: 4, CopyDelay: 200 * time.Microsecond}), 0, opts)
	}
	res, err := demo.Execute(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var none demo.Run
	for _, r := range res.Runs {
		t.Logf("%-13s before %7d after %7d peak %7d  step %.1f ms  offloaded %d  equal grads %v",
			r.Mode, r.BeforeForwardBytes, r.AfterForwardBytes, r.PeakForwardBytes, r.StepSeconds*1e3, r.OffloadedBytes, *r.GradsEqualNone)
		if r.GradsEqualNone == nil || !*r.GradsEqualNone {
			t.Errorf("%s: gradients differ from no offloading", r.Mode)
		}
		if r.Mode == demo.None {
			none = r
		}
	}
	for _, r := range res.Runs {
		switch r.Mode {
		case demo.SaveOnHost, demo.Offload, demo.OffloadDisk:
			if r.AfterForwardBytes >= none.AfterForwardBytes {
				t.Errorf("%s keeps %d bytes after forward, no offloading %d", r.Mode, r.AfterForwardBytes, none.AfterForwardBytes)
			}
		}
	}
}

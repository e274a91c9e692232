package cuda_test

import (
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/offload"
	"ferry/train/traintest"
)

// Every memory mode through the Trainer, on the CUDA device over the fake
// driver with slow copies: the offload engine's streams, events and pinned
// host pool against an asynchronous device. Training must give the bits
// of no offloading, and offloading must lower the memory held after
// forward.
func TestModesOnFake(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	open := func() (device.Device, error) {
		return cuda.Open(fake.New(fake.Options{SMs: 4, CopyDelay: 200 * time.Microsecond}), 0, device.Options{PoisonFreed: true})
	}
	runs, err := traintest.RunModes(open, offload.Modes(), t.TempDir(), 6, 64, 32, 2)
	if err != nil {
		t.Fatal(err)
	}
	none := runs[0]
	for _, r := range runs {
		t.Logf("%-17s after forward %7d offloaded %d losses %v", r.Mode, r.AfterForward, r.Offloaded, r.Losses)
		if !r.Equal(none) {
			t.Errorf("%s: training differs from no offloading", r.Mode)
		}
		switch r.Mode {
		case offload.SaveOnHost, offload.Offload, offload.OffloadDisk:
			if r.AfterForward >= none.AfterForward {
				t.Errorf("%s keeps %d bytes after forward, no offloading %d", r.Mode, r.AfterForward, none.AfterForward)
			}
		}
	}
}

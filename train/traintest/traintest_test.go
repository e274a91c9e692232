package traintest

import (
	"testing"

	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/offload"
)

// Every memory mode trains the MLP to the bits of mode none on the CPU,
// and the modes that move saved tensors hold less after forward.
func TestModesTrainAlikeOnCPU(t *testing.T) {
	open := func() (device.Device, error) { return device.Open("cpu", device.Options{PoisonFreed: true}) }
	runs, err := RunModes(open, offload.Modes(), t.TempDir(), 4, 32, 16, 3)
	if err != nil {
		t.Fatal(err)
	}
	none := runs[0]
	if len(none.Losses) != 3 {
		t.Fatalf("mode none ran %d steps", len(none.Losses))
	}
	for _, r := range runs {
		t.Logf("%-17s losses %v after forward %d offloaded %d", r.Mode, r.Losses, r.AfterForward, r.Offloaded)
		if !r.Equal(none) {
			t.Errorf("%s trained differently from none", r.Mode)
		}
		switch r.Mode {
		case offload.SaveOnHost, offload.Offload, offload.OffloadDisk:
			if r.AfterForward >= none.AfterForward || r.Offloaded == 0 {
				t.Errorf("%s: %d bytes after forward (none %d), %d offloaded", r.Mode, r.AfterForward, none.AfterForward, r.Offloaded)
			}
		}
	}
}

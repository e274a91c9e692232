package train_test

import (
	"strings"
	"testing"

	"ferry/device"
	cpudev "ferry/device/cpu"
	"ferry/train"
)

// An inference footprint (ferry eval, sample) counts the parameters
// alone: no gradients, no optimizer state, however an optimizer is set.
func TestPreflightInference(t *testing.T) {
	dev, err := cpudev.New(device.Options{Capacity: 5_000})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	f := train.Footprint{Params: 1000, Optimizer: &sizer{bytesPer: 8}, StepBytes: 1000, Inference: true}
	if err := train.Preflight(dev, f, 0, "lower --batch"); err != nil {
		t.Errorf("4000 B of parameters and 1000 of activations on 5000 B: %v", err)
	}
	f.StepBytes = 1001
	err = train.Preflight(dev, f, 0, "lower --batch")
	if err == nil || !strings.Contains(err.Error(), "1000 parameters for inference: 3.91 KiB; activations: 1001 B") || !strings.Contains(err.Error(), "lower --batch") {
		t.Errorf("one byte over: %v", err)
	}
}

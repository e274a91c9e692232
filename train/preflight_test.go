package train_test

import (
	"strings"
	"testing"

	"ferry/device"
	cpudev "ferry/device/cpu"
	"ferry/train"
)

// sizer is a StateSizer of bytesPer bytes an element that records the
// sizes it was asked about.
type sizer struct {
	bytesPer int64
	asked    []int64
}

func (s *sizer) StateBytes(n int64) int64 { s.asked = append(s.asked, n); return s.bytesPer * n }

// Preflight counts the optimizer's state as the optimizer sizes it, where
// it lives, and refuses what cannot fit on the device (an uncapped CPU
// device holds the machine's free memory), in host memory, or a batch
// above a quarter of host memory.
func TestPreflight(t *testing.T) {
	const n = 1000 // parameters: 4000 bytes, and 4000 of gradients
	adam := &sizer{bytesPer: 8}
	cases := []struct {
		name               string
		f                  train.Footprint
		capacity, hostFree int64  // capacity 0: an uncapped device
		want               string // "" for none
	}{
		{"fits", train.Footprint{Params: n, Optimizer: adam, StepBytes: 1000}, 17_000, 0, ""},
		{"device", train.Footprint{Params: n, Optimizer: adam, StepBytes: 1000}, 16_999, 0,
			"needs at least 16.60 KiB on cpu (1000 parameters with gradients and optimizer state: 15.62 KiB; activations: 1000 B), and the device holds 16.60 KiB"},
		{"uncapped: the machine's memory", train.Footprint{Params: n, Optimizer: adam, StepBytes: 1000}, 0, 16_999,
			"needs at least 16.60 KiB on cpu"},
		{"uncapped, host unknown", train.Footprint{Params: n, Optimizer: adam, StepBytes: 1000}, 0, 0, ""},
		{"state on the host frees the device", train.Footprint{Params: n, Optimizer: adam, StateOnHost: true, StepBytes: 1000}, 9_000, 8_000, ""},
		{"host", train.Footprint{Params: n, Optimizer: adam, StateOnHost: true, GradsOnHost: true}, 4_000, 11_999,
			"the training state on the host (--optimizer-state, --gradients, --parameters host) needs 11.72 KiB for 1000 parameters, and the machine has 11.72 KiB free"},
		{"no optimizer state", train.Footprint{Params: n, Optimizer: &sizer{}}, 8_000, 0, ""},
		{"no optimizer", train.Footprint{Params: n, ParamsOnHost: true, GradsOnHost: true}, 1, 8_000, ""},
		{"batch", train.Footprint{Params: n, BatchBytes: 25_000}, 0, 99_999, "one batch needs 24.41 KiB of host memory, and the machine has 97.66 KiB free"},
		{"batch, host unknown", train.Footprint{Params: n, Optimizer: adam, StateOnHost: true, BatchBytes: 1 << 40}, 8_000, 0, ""},
	}
	for _, c := range cases {
		dev, err := cpudev.New(device.Options{Capacity: c.capacity})
		if err != nil {
			t.Fatal(err)
		}
		adam.asked = nil
		err = train.Preflight(dev, c.f, c.hostFree, "lower the sizes")
		dev.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasSuffix(err.Error(), ": lower the sizes")):
			t.Errorf("%s: got %v, want %q and the advice", c.name, err, c.want)
		}
		if c.f.Optimizer == adam && (len(adam.asked) != 1 || adam.asked[0] != n) {
			t.Errorf("%s: the optimizer was asked about %v, want [%d]", c.name, adam.asked, n)
		}
	}
}

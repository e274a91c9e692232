package offload

import (
	"testing"

	"ferry"

	"ferry/device"
	"ferry/device/meta"
)

// Mode policy runs with the copies in flight its policy records (the
// plan's peak assumes them), and with Config's where it records none.
func TestPolicyModeAppliesCopiesInFlight(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	given := DefaultConfig()
	given.MaxInFlight = 3
	for _, c := range []struct{ recorded, want int }{{0, 3}, {1, 1}, {6, 6}} {
		pol := &Policy{Version: 2, Default: Keep, CopiesInFlight: c.recorded}
		m, err := NewMemory(dev, Setup{Mode: PolicyMode, Policy: pol, Config: &given})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.off.cfg.MaxInFlight; got != c.want {
			t.Errorf("policy copies_in_flight %d: the offloader runs %d in flight, want %d", c.recorded, got, c.want)
		}
		m.Close()
	}
}

// Mode policy brings offloaded tensors back, and streams parameters, as
// far ahead as its policy records (the plan's peak and step assume it),
// and as Config says where it records nothing.
func TestPolicyModeAppliesLookahead(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	defer dev.Close()
	given := DefaultConfig()
	given.Lookahead = 3
	for _, c := range []struct{ recorded, want int }{{0, 3}, {1, 1}, {8, 8}} {
		w := ferry.Zeros(dev.Host(), 4, 4).SetName("w")
		pol := &Policy{Version: 2, Default: Keep, Lookahead: c.recorded, OptimizerState: "host", ParametersOnHost: []string{"w"}}
		m, err := NewMemory(dev, Setup{Mode: PolicyMode, Policy: pol, Config: &given, Params: []*ferry.Tensor{w}})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.off.cfg.Lookahead; got != c.want {
			t.Errorf("policy lookahead %d: the offloader brings %d back ahead, want %d", c.recorded, got, c.want)
		}
		if got := m.stream.prefetch; got != c.want {
			t.Errorf("policy lookahead %d: parameters stream %d uses ahead, want %d", c.recorded, got, c.want)
		}
		m.Close()
		w.Release()
	}
}

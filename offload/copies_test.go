package offload

import (
	"testing"

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

package plan

import (
	"errors"
	"testing"

	"ferry/device"
	_ "ferry/device/cpu"
	"ferry/device/meta"
)

// The bfloat16 product rate is measured where the device multiplies
// bfloat16 (the meta device) and left to the caller, with the device's
// *device.UnsupportedError, where it refuses (the CPU device until it
// has bfloat16 products).
func TestCalibrateBF16(t *testing.T) {
	o := CalibrateOptions{Width: 32, Batch: 16, Seconds: 0.01}
	m := meta.New(device.Options{}, nil)
	defer m.Close()
	if rate, err := calibrateBF16(m, o, 0, 1e10); err != nil || !(rate > 0) {
		t.Errorf("meta: rate %v, %v; want a positive rate", rate, err)
	}
	if used := m.Allocator().Stats().AllocatedBytes.Current; used != 0 {
		t.Errorf("meta: %d bytes left allocated", used)
	}

	c, err := device.Open("cpu", device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rate, err := calibrateBF16(c, o, 0, 1e10)
	var u *device.UnsupportedError
	switch {
	case errors.As(err, &u):
		t.Logf("cpu: not measured: %v", err)
	case err != nil || !(rate > 0):
		t.Errorf("cpu: rate %v, %v; want a positive rate or an *UnsupportedError", rate, err)
	}
}

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

// The copy share is measured, not fitted: on the CPU device, whose copies
// run on the cores the products use, it is a finite, non-negative figure;
// on the meta device, whose copies take no wall time, compute loses
// nothing to them.
func TestCopyShareMeasured(t *testing.T) {
	for _, name := range []string{"cpu", "meta"} {
		dev, err := device.Open(name, device.Options{})
		if err != nil {
			t.Fatal(err)
		}
		const n = 4 << 20
		db, err := dev.Allocator().Alloc(n, device.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		hb, err := dev.Host().Allocator().Alloc(n, device.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		s, err := dev.NewStream("share")
		if err != nil {
			t.Fatal(err)
		}
		view := device.View{Block: db, Shape: []int{n / 4}, Strides: []int{1}}
		products := func() error {
			if err := dev.Kernels().Fill(view, 1); err != nil {
				return err
			}
			return dev.Compute().Synchronize()
		}
		alone, err := repeat(0.02, products, func() error { return nil }, 1)
		if err != nil {
			t.Fatal(err)
		}
		share, err := copyShare(dev, s, db, hb, alone, 0.05, products, 2*float64(n)/20e9)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: copy share %.3f", name, share)
		if !(share >= 0 && share < 20) || name == "meta" && share > 0.05 {
			t.Errorf("%s: copy share %v", name, share)
		}
		dev.Allocator().Free(db)
		dev.Host().Allocator().Free(hb)
		dev.Close()
	}
}

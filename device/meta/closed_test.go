package meta_test

import (
	"errors"
	"testing"

	"ferry/device"
	"ferry/device/meta"
)

// After Close the meta device, like every device, refuses memory, copies
// and streams with device.ErrClosed, on itself and its host.
func TestClosedDevice(t *testing.T) {
	dev := meta.New(device.Options{}, nil)
	b, err := dev.Allocator().Alloc(64, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := dev.Host().Allocator().Alloc(64, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream("d2h")
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Copy(s, device.Whole(hb), device.Whole(b)); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Copy after Close: %v, want ErrClosed", err)
	}
	if _, err := dev.NewStream("h2d"); !errors.Is(err, device.ErrClosed) {
		t.Errorf("NewStream after Close: %v, want ErrClosed", err)
	}
	for _, d := range []device.Device{dev, dev.Host()} {
		if _, err := d.Allocator().Alloc(64, device.Activation); !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s: Alloc after Close: %v, want ErrClosed", d.Name(), err)
		}
	}
	dev.Allocator().Free(b)
}

package cpu_test

import (
	"errors"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
)

// After Close, copies, streams and allocations fail with device.ErrClosed
// (a copy would touch unmapped memory), on the device and its host.
func TestClosedDevice(t *testing.T) {
	dev, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	host := dev.Host()
	b, err := dev.Allocator().Alloc(64, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := host.Allocator().Alloc(64, device.Activation)
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
	if err := dev.Copy(dev.Compute(), device.Whole(hb), device.Whole(b)); !errors.Is(err, device.ErrClosed) {
		t.Errorf("Copy on the compute stream after Close: %v, want ErrClosed", err)
	}
	if _, err := dev.NewStream("h2d"); !errors.Is(err, device.ErrClosed) {
		t.Errorf("NewStream after Close: %v, want ErrClosed", err)
	}
	for _, d := range []device.Device{dev, host} {
		if _, err := d.Allocator().Alloc(64, device.Activation); !errors.Is(err, device.ErrClosed) {
			t.Errorf("%s: Alloc after Close: %v, want ErrClosed", d.Name(), err)
		}
	}
	dev.Allocator().Free(b) // harmless: the memory went with the device
	host.Allocator().Free(hb)
}

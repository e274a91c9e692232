package cuda_test

import (
	"errors"
	"testing"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
)

// The native handles that NCCL needs: the CUstream of each stream and the
// device address of a span.
func TestNativeHandles(t *testing.T) {
	drv := fake.New(fake.Options{})
	d, err := cuda.Open(drv, 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := cuda.StreamHandle(d.Compute())
	if err != nil || hc == 0 {
		t.Fatalf("compute stream handle %#x, %v", hc, err)
	}
	side, err := d.NewStream("nccl")
	if err != nil {
		t.Fatal(err)
	}
	if hs, err := cuda.StreamHandle(side); err != nil || hs == 0 || hs == hc {
		t.Errorf("side stream handle %#x (compute %#x), %v", hs, hc, err)
	}
	c, _ := cpu.New(device.Options{})
	defer c.Close()
	if _, err := cuda.StreamHandle(c.Compute()); err == nil {
		t.Error("a CPU stream has a CUstream")
	}
	b, err := d.Allocator().Alloc(4096, device.Gradient)
	if err != nil {
		t.Fatal(err)
	}
	p0, err := d.DevicePointer(device.Whole(b))
	if err != nil || p0 == 0 {
		t.Fatalf("DevicePointer %#x, %v", p0, err)
	}
	if p1, err := d.DevicePointer(device.Span{Block: b, Off: 1000, Len: 8}); err != nil || p1 != p0+1000 {
		t.Errorf("DevicePointer at 1000: %#x, %v; want %#x", p1, err, p0+1000)
	}
	if _, err := d.DevicePointer(device.Span{Block: b, Off: 4090, Len: 8}); err == nil {
		t.Error("a span past the block has an address")
	}
	hb, err := d.Host().Allocator().Alloc(64, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DevicePointer(device.Whole(hb)); err == nil {
		t.Error("pinned host memory has a device address")
	}
	d.Host().Allocator().Free(hb)
	d.Allocator().Free(b)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cuda.StreamHandle(side); !errors.Is(err, device.ErrClosed) {
		t.Errorf("StreamHandle after Close: %v", err)
	}
}

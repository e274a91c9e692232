package cuda_test

import (
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cuda"
	"ferry/device/cuda/fake"
	"ferry/device/devicetest"
)

// openFake opens cuda:0 over a fresh fake driver, closing it (and checking
// that nothing leaked) when the test ends.
func openFake(t testing.TB, fo fake.Options, opts device.Options) (*cuda.Device, *fake.Driver) {
	t.Helper()
	drv := fake.New(fo)
	d, err := cuda.Open(drv, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if l := drv.Leaks(); len(l) > 0 {
			t.Errorf("left behind at Close: %v", l)
		}
	})
	return d, drv
}

// The device conformance suite, on the CUDA device over the fake driver:
// every kernel against the suite's reference, streams and events, copies
// between device and pinned host, the allocator through the device.
func TestConformanceFake(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, opts device.Options) device.Device {
		fo := fake.Options{}
		params := map[string]string{}
		for k, v := range opts.Params {
			if k == "copy_delay" {
				dur, err := time.ParseDuration(v)
				if err != nil {
					t.Fatal(err)
				}
				fo.CopyDelay = dur
				continue
			}
			params[k] = v
		}
		opts.Params = params
		drv := fake.New(fo)
		d, err := cuda.Open(drv, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if l := drv.Leaks(); len(l) > 0 {
				t.Errorf("left behind at Close: %v", l)
			}
		})
		return d
	}, devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}})
}

func fakeOpts() fake.Options { return fake.Options{SMs: 4} }

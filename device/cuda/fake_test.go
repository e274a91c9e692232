package cuda_test

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
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
// every kernel against the suite's reference and against the CPU device,
// streams and events, copies between device and pinned host, the allocator
// through the device.
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
	}, devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}, Reference: openCPU, Seed: 1})
}

// openCPU opens the CPU device, the reference the suite compares with.
func openCPU(t *testing.T) device.Device {
	t.Helper()
	c, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func fakeOpts() fake.Options { return fake.Options{SMs: 4} }

func bytesOf(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func floatsOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.NativeEndian.Uint32(b[4*i:]))
	}
	return v
}

// read downloads n elements of v from d.
func read(t *testing.T, d device.Device, v device.View, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.Kernels().Download(b, v); err != nil {
		t.Fatal(err)
	}
	return floatsOf(b)
}

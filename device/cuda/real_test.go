package cuda_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/devicetest"
)

// Tests and benchmarks on a real GPU. They skip, with a one-line reason,
// where libcuda.so.1 or a GPU is missing, and unless FERRY_CUDA_REAL=1
// (so that `go test ./...` on a GPU machine stays quick). scripts/gpu-check.sh
// runs them.

func openReal(t testing.TB, opts device.Options) *cuda.Device {
	t.Helper()
	drv, err := cu.Load()
	if err != nil {
		t.Skip(strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if n, _ := drv.DeviceCount(); n == 0 {
		t.Skip("no CUDA device: " + drv.Info().InitError)
	}
	if os.Getenv("FERRY_CUDA_REAL") != "1" {
		t.Skip("a GPU is present; set FERRY_CUDA_REAL=1 to test on it")
	}
	d, err := cuda.Open(drv, 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// What Probe reports here (runs wherever libcuda.so.1 loads, GPU or not).
// Under FERRY_CUDA_REAL=1 (scripts/gpu-check.sh) it fails when CUDA is
// unusable, so that the skips of the other tests cannot pass for success.
func TestProbeReal(t *testing.T) {
	real := os.Getenv("FERRY_CUDA_REAL") == "1"
	if _, err := cu.Load(); err != nil {
		if real {
			t.Fatalf("FERRY_CUDA_REAL=1: %v", err)
		}
		t.Skip(strings.SplitN(err.Error(), "\n", 2)[0])
	}
	r := cuda.Probe()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s\n%s", r, b)
	if !r.Available && (real || len(r.Devices) > 0) {
		t.Errorf("CUDA unavailable: %s", r.Reason)
	}
}

// The device conformance suite on the real GPU, as on the fake driver: the
// same tests for every device, the optional kernel families included.
// Each test opens its own device (a context each; the JIT cache makes the
// PTX cheap after the first).
func TestRealConformance(t *testing.T) {
	openReal(t, device.Options{}) // skips, with the reason, where there is no GPU (closed at the end)
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	devicetest.Run(t, func(t *testing.T, opts device.Options) device.Device {
		d, err := cuda.Open(drv, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}, devicetest.Caps{HasData: true})
}

var realSizes = sizes{m: 513, n: 1030, k: 257, rows: 300, cols: 5000, big: []int{37, 129, 513}, long: 16, tol: 1e-4}

func seed() uint64 { return uint64(time.Now().UnixNano()) }

// Every kernel against the CPU device on fresh random data: FP32 relative
// error below 1e-4.
func TestRealCompareWithCPU(t *testing.T) {
	d := openReal(t, device.Options{})
	s := seed()
	t.Logf("%s (%s), seed %d", d.Props().Name, d.MatmulBackend(), s)
	p := newPair(t, d, realSizes, s)
	compareOps(t, p)
	t.Logf("largest relative error: %.3g (%s)", p.worst, p.worstOp)
}

// TF32 products: relative error below 1e-2, and visibly not FP32.
func TestRealTF32(t *testing.T) {
	d := openReal(t, device.Options{Params: map[string]string{"tf32": "true"}})
	if strings.Contains(d.MatmulBackend(), "ferry's") {
		t.Skip("no cuBLAS: " + d.MatmulBackend())
	}
	p := newPair(t, d, realSizes, seed())
	compareGemm(p, 1024, 768, 1024, 1e-2)
	t.Logf("TF32 largest relative error: %.3g (%s)", p.worst, p.worstOp)
	if p.worst < 1e-6 {
		t.Errorf("TF32 products agree with FP32 to %.2g: TF32 was not used", p.worst)
	}
}

// A few training steps give the CPU device's losses, gradients and
// parameters.
func TestRealTraining(t *testing.T) {
	gpu := openReal(t, device.Options{PoisonFreed: true})
	c, err := cpu.New(device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want, got := train(t, c, 3), train(t, gpu, 3)
	closeTo(t, "losses", got.losses, want.losses, 1e-4)
	for i := range want.grads {
		closeTo(t, fmt.Sprintf("gradient %d", i), got.grads[i], want.grads[i], 1e-4)
		closeTo(t, fmt.Sprintf("parameter %d", i), got.params[i], want.params[i], 1e-4)
	}
}

// A copy on a side stream overlaps compute and is ordered by events.
func TestRealSideStreamCopy(t *testing.T) {
	d := openReal(t, device.Options{})
	const n = 64 << 20 // floats: 256 MiB
	src, err := d.Allocator().Alloc(4*n, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Allocator().Free(src)
	v := device.View{Block: src, Shape: []int{n}, Strides: []int{1}}
	if err := d.Kernels().Fill(v, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Kernels().Unary(device.Scale, v, v, 2); err != nil {
		t.Fatal(err)
	}
	side, err := d.NewStream("d2h")
	if err != nil {
		t.Fatal(err)
	}
	side.Wait(d.Compute().Record())
	hb, err := d.Host().Allocator().Alloc(4*n, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Host().Allocator().Free(hb)
	start := time.Now()
	if err := d.Copy(side, device.Whole(hb), device.Whole(src)); err != nil {
		t.Fatal(err)
	}
	e := side.Record()
	enqueued := time.Since(start)
	if err := e.Synchronize(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("256 MiB device→host on a side stream: enqueued in %v, done in %v (%.1f GB/s)", enqueued, took, 4*n/took.Seconds()/1e9)
	got := floatsOf(cpuBytes(hb)[:4*n])
	for _, i := range []int{0, n / 2, n - 1} {
		if got[i] != 6 {
			t.Fatalf("host[%d] = %v, want 6", i, got[i])
		}
	}
}

// Pinned host↔device copy bandwidth each way, and device to device.
// scripts/gpu-check.sh runs it: -test.bench Copy -test.benchtime 20x.
func BenchmarkRealCopy(b *testing.B) {
	d := openReal(b, device.Options{})
	const n = 256 << 20
	db, err := d.Allocator().Alloc(n, device.Activation)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Allocator().Free(db)
	db2, err := d.Allocator().Alloc(n, device.Activation)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Allocator().Free(db2)
	hb, err := d.Host().Allocator().Alloc(n, device.Activation)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Host().Allocator().Free(hb)
	s, err := d.NewStream("copy")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		dst, src *device.Block
	}{{"HtoD", db, hb}, {"DtoH", hb, db}, {"DtoD", db2, db}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(n)
			for i := 0; i < b.N; i++ {
				if err := d.Copy(s, device.Whole(c.dst), device.Whole(c.src)); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// The cost of one small kernel launch as ferry makes it (context made
// current, arguments packed, cuLaunchKernel through purego).
func BenchmarkRealLaunch(b *testing.B) {
	d := openReal(b, device.Options{})
	blk, err := d.Allocator().Alloc(4096, device.Activation)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Allocator().Free(blk)
	v := device.View{Block: blk, Shape: []int{1024}, Strides: []int{1}}
	k := d.Kernels()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := k.Unary(device.Scale, v, v, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Compute().Synchronize(); err != nil {
		b.Fatal(err)
	}
}

package cuda_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/device/devicetest"
)

// Tests and benchmarks on a real GPU. They skip, with a one-line reason,
// where libcuda.so.1 or a GPU is missing, and unless FERRY_CUDA_REAL=1
// (so that `go test ./...` on a GPU machine stays quick). scripts/gpu-check.sh
// runs them.

// realDriver loads libcuda.so.1, or skips t saying why there is nothing to
// test on.
func realDriver(t testing.TB) cu.Driver {
	t.Helper()
	drv, err := cu.Load()
	if err != nil {
		t.Skip("no CUDA driver: " + strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if n, _ := drv.DeviceCount(); n == 0 {
		t.Skip("no CUDA device: " + drv.Info().InitError)
	}
	if os.Getenv("FERRY_CUDA_REAL") != "1" {
		t.Skip("a GPU is present; set FERRY_CUDA_REAL=1 to test on it")
	}
	return drv
}

func openReal(t testing.TB, opts device.Options) *cuda.Device {
	t.Helper()
	d, err := cuda.Open(realDriver(t), 0, opts)
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

// TestRealGPUConformance runs the device conformance suite on the real GPU
// in full: every kernel against the suite's float64 references and, on
// large random inputs, against the CPU device (FP32: relative error below
// 1e-4), the optional kernel families the device implements, streams,
// events, pinned copies and the allocator. Then, in TF32 mode, the matrix
// products again (relative error below 1e-2, and visibly not FP32).
// scripts/gpu-check.sh runs it.
func TestRealGPUConformance(t *testing.T) {
	drv := realDriver(t)
	open := func(t *testing.T, opts device.Options) device.Device {
		d, err := cuda.Open(drv, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	s := seed()
	fp32 := devicetest.Caps{HasData: true, Tol: 1e-4, Reference: openCPU, Large: true, Seed: s}
	t.Run("FP32", func(t *testing.T) {
		d := openReal(t, device.Options{})
		t.Logf("%s (%s), seed %d", d.Props().Name, d.MatmulBackend(), s)
		devicetest.Run(t, open, fp32)
	})
	t.Run("TF32", func(t *testing.T) {
		d := openReal(t, device.Options{Params: map[string]string{"tf32": "true"}})
		if strings.Contains(d.MatmulBackend(), "ferry's") {
			t.Skip("no cuBLAS: " + d.MatmulBackend())
		}
		tf32 := fp32
		tf32.GemmTol = 1e-2
		devicetest.RunKernels(t, func(t *testing.T, opts device.Options) device.Device {
			opts.Params = map[string]string{"tf32": "true"}
			return open(t, opts)
		}, tf32, "Gemm", "CompareGemm")
		ref := openCPU(t)
		defer ref.Close()
		worst := devicetest.CompareGemm(t, d, ref, 1024, 768, 1024, 1e-2, s)
		t.Logf("TF32 largest relative error: %.3g", worst)
		if worst < 1e-6 {
			t.Errorf("TF32 products agree with FP32 to %.2g: TF32 was not used", worst)
		}
	})
}

func seed() uint64 { return uint64(time.Now().UnixNano()) }

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

// Attention at GPT-2 124M's shape at batch 8 (B 8, H 12, T 1024, D 64,
// causal, fp32), forward alone and forward with backward, as ferry's
// kernels run it. scripts/gpu-check.sh runs it beside PyTorch's
// scaled_dot_product_attention on the same shapes
// (bench/torch_attention.py). The tflops metric counts 4·B·H·T²·D flops
// for the forward (two products), halved when causal, and 2.5 times that
// for backward (FlashAttention's convention), so the two are comparable.
func BenchmarkRealAttention(b *testing.B) {
	d := openReal(b, device.Options{})
	b.Run("forward", func(b *testing.B) { benchAttention(b, d, 8, 12, 1024, 64, false) })
	b.Run("forward+backward", func(b *testing.B) { benchAttention(b, d, 8, 12, 1024, 64, true) })
}

// The benchmark's body runs on the fake driver at a small shape, so that
// the first GPU run does not find a mistake in it.
func TestAttentionBenchmarkOnFake(t *testing.T) {
	d, err := cuda.Open(fake.New(fake.Options{}), 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, bwd := range []bool{false, true} {
		r := testing.Benchmark(func(b *testing.B) { benchAttention(b, d, 1, 2, 16, 8, bwd) })
		if r.N == 0 || r.Extra["tflops"] <= 0 {
			t.Fatalf("backward %v: the benchmark did not run: %+v", bwd, r)
		}
	}
}

// benchAttention times causal attention on [B, H, T, D] inputs (with
// backward when bwd) and reports tflops by the convention above.
func benchAttention(b *testing.B, d *cuda.Device, B, H, T, D int, bwd bool) {
	ak, ok := d.Kernels().(device.AttentionKernels)
	if !ok {
		b.Fatal("the CUDA device has no attention kernels")
	}
	var blocks []*device.Block
	defer func() {
		for _, blk := range blocks {
			d.Allocator().Free(blk)
		}
	}()
	alloc := func(shape ...int) device.View {
		n := 1
		for _, s := range shape {
			n *= s
		}
		blk, err := d.Allocator().Alloc(int64(4*n), device.Activation)
		if err != nil {
			b.Fatal(err)
		}
		blocks = append(blocks, blk)
		v := device.View{Block: blk, Shape: shape, Strides: device.Contiguous(shape)}
		vals := make([]byte, 4*n)
		for i := 0; i < n; i++ {
			f := float32((i*7919)%2001-1000) / 1000
			binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(f))
		}
		if err := d.Kernels().Upload(v, vals); err != nil {
			b.Fatal(err)
		}
		return v
	}
	q, k, v, g := alloc(B, H, T, D), alloc(B, H, T, D), alloc(B, H, T, D), alloc(B, H, T, D)
	out, lse := alloc(B, H, T, D), alloc(B, H, T)
	dq, dk, dv := alloc(B, H, T, D), alloc(B, H, T, D), alloc(B, H, T, D)
	p := device.AttentionParams{Causal: true, Scale: float32(1 / math.Sqrt(float64(D)))}
	flops := 4.0 * float64(B*H*T*T*D) / 2
	if bwd {
		flops *= 3.5
	}
	run := func() {
		if err := ak.Attention(out, lse, q, k, v, p); err != nil {
			b.Fatal(err)
		}
		if bwd {
			if err := ak.AttentionBackward(dq, dk, dv, g, q, k, v, out, lse, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	run() // warm-up: module load, first launch
	if err := d.Compute().Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	if err := d.Compute().Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e12, "tflops")
}

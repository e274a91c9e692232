package cuda_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/device/cuda/kernels"
	"ferry/device/devicetest"
)

// What the CUDA device does beyond the conformance suite, on the fake
// driver: errors at every boundary, cuBLAS and its absence, the pinned host
// pool, events and streams under delays.

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := cuda.Open(fake.New(fake.Options{Devices: -1}), 0, device.Options{})
	wantErr(t, err, "no CUDA device")
	if !errors.Is(err, cu.ErrNoGPU) {
		t.Errorf("%v is not ErrNoGPU", err)
	}
	_, err = cuda.Open(fake.New(fake.Options{Devices: 2}), 2, device.Options{})
	wantErr(t, err, "cuda:2", "2 CUDA devices")
	_, err = cuda.Open(fake.New(fake.Options{}), 0, device.Options{Params: map[string]string{"bogus": "1"}})
	wantErr(t, err, `unknown parameter "bogus"`, "tf32")
	_, err = cuda.Open(fake.New(fake.Options{}), 0, device.Options{Params: map[string]string{"tf32": "maybe"}})
	wantErr(t, err, "tf32")
}

// A failure half way through Open releases everything acquired so far.
func TestOpenFailureReleasesEverything(t *testing.T) {
	for _, call := range []string{"cuStreamCreate", "cuModuleLoadDataEx", "cuModuleGetFunction"} {
		drv := fake.New(fake.Options{})
		if call == "cuModuleGetFunction" {
			drv.Fail(call, int32(cu.ErrNotFound), 1)
		} else {
			drv.Fail(call, int32(cu.ErrInvalidPTX), 1)
		}
		_, err := cuda.Open(drv, 0, device.Options{})
		wantErr(t, err, "cuda:0", call)
		if drv.Context(0) != nil {
			t.Errorf("%s failed: the primary context is still retained", call)
		}
		if l := drv.Leaks(); len(l) > 0 {
			t.Errorf("%s failed: left behind %v", call, l)
		}
	}
}

// Without libcuda.so.1, device.Open says so in words and Probe explains.
// (Debian's nvidia-cuda-toolkit installs a libcuda.so.1 without a GPU: then
// the driver loads, and reports no device.)
func TestRealDriverAbsent(t *testing.T) {
	drv, err := cu.Load()
	if err == nil {
		if n, _ := drv.DeviceCount(); n > 0 {
			t.Skip("a GPU is present")
		}
	}
	_, openErr := device.Open("cuda:0", device.Options{})
	r := cuda.Probe()
	if err != nil {
		wantErr(t, openErr, "cuda unavailable", "libcuda.so.1 not found")
		if !strings.Contains(r.Reason, "libcuda.so.1") {
			t.Errorf("Probe: %+v", r)
		}
	} else {
		wantErr(t, openErr, "cuda:0: no CUDA device", "cuInit", "CUDA_ERROR_NO_DEVICE")
		if r.DriverLibrary == "" || r.DriverVersion == "" || !strings.Contains(r.Reason, "no CUDA device") {
			t.Errorf("Probe: %+v", r)
		}
	}
	if r.Available || !strings.Contains(r.String(), "unavailable") {
		t.Errorf("Probe().String() = %q", r)
	}
	t.Logf("Probe():\n%s", r)
}

func TestProbeFake(t *testing.T) {
	r := cuda.ProbeDriver(fake.New(fake.Options{Devices: 2, Name: "Fake H200", Memory: 141 << 30, SMs: 132}))
	if !r.Available || len(r.Devices) != 2 || r.Devices[1].ComputeCapability != "9.0" || r.DriverVersion != "12.4" || r.BLASVersion != "12.4.5" {
		t.Errorf("ProbeDriver: %+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"model":"Fake H200"`) || !strings.Contains(string(b), `"available":true`) {
		t.Errorf("JSON: %s %v", b, err)
	}
	s := r.String()
	for _, want := range []string{"CUDA: available", "cuda:1: Fake H200, 141.0 GiB, compute capability 9.0, 132 SMs", "elementwise.ptx"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	r = cuda.ProbeDriver(fake.New(fake.Options{NoBLAS: true, Major: 7, Minor: 5}))
	if r.Available || !strings.Contains(r.Reason, "compute capability below 8.0") || r.BLASReason == "" {
		t.Errorf("ProbeDriver on an old GPU without cuBLAS: %+v", r)
	}
}

// Every embedded kernel parses, and the Go side packs exactly the bytes
// the PTX declares: the fake checks each launch, so a run of the suite
// proves it for every kernel it launches; here the declarations themselves.
func TestEmbeddedPTX(t *testing.T) {
	images := cuda.PTX()
	cus := 0
	for name := range kernels.Sources() {
		if strings.HasSuffix(name, ".cu") {
			cus++
		}
	}
	if len(images) != cus {
		t.Fatalf("embedded PTX: %d files, want %d (one per .cu source)", len(images), cus)
	}
	n := 0
	declared := map[string]bool{}
	for _, e := range kernels.Entries() {
		declared[e.Name] = true
	}
	for name, img := range images {
		entries, err := cu.ParsePTX(img)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(string(img), ".target sm_80") {
			t.Errorf("%s is not PTX for compute_80", name)
		}
		for _, e := range entries {
			n++
			if !declared[e.Name] {
				t.Errorf("%s: %s is not an extern \"C\" __global__ function of the .cu sources", name, e.Name)
			}
			for _, size := range e.Params {
				if size != 4 && size != 8 && size != 8*33 && size != 8*34 && size != 8*16 && size != 8*243 {
					t.Errorf("%s: %s has a parameter of %d bytes (not an int, pointer, Strided, Reduce, Heads or AdamWTable)", name, e.Name, size)
				}
			}
		}
	}
	if n != len(declared) {
		t.Errorf("%d kernels embedded, the .cu sources define %d", n, len(declared))
	}
}

func TestOutOfMemory(t *testing.T) {
	d, drv := openFake(t, fake.Options{Memory: 64 << 20}, device.Options{})
	a := d.Allocator()
	b, err := a.Alloc(40<<20, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Alloc(40<<20, device.Activation)
	var oom *device.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("second 40 MiB of 64: %v, want an OutOfMemoryError", err)
	}
	wantErr(t, err, "cuda:0 out of memory", "cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY")
	a.Free(b)
	// The cached segment serves the next request; a flush makes room for a
	// bigger one.
	if b, err = a.Alloc(50<<20, device.Activation); err != nil {
		t.Fatalf("after a free: %v", err)
	}
	a.Free(b)
	// Two retries after flushing: the failed 40 MiB and this 50 MiB (PyTorch
	// counts every such retry in num_alloc_retries).
	if got := a.Stats().CacheFlushes; got != 2 {
		t.Errorf("cache flushes %d, want 2", got)
	}
	// An injected failure is retried after flushing the cache.
	a.EmptyCache()
	drv.Fail("cuMemAlloc_v2", int32(cu.ErrOutOfMemory), 1)
	before := drv.Calls("cuMemAlloc_v2")
	if b, err = a.Alloc(1<<20, device.Activation); err != nil {
		t.Fatalf("one failed cuMemAlloc: %v", err)
	}
	a.Free(b)
	if got := drv.Calls("cuMemAlloc_v2") - before; got != 2 {
		t.Errorf("%d cuMemAlloc calls, want 2 (a failure and a retry)", got)
	}
	// A capacity below the hardware's is enforced by the allocator.
	d2, _ := openFake(t, fake.Options{}, device.Options{Capacity: 30 << 20})
	if _, err := d2.Allocator().Alloc(31<<20, device.Activation); !errors.As(err, &oom) {
		t.Errorf("31 MiB under a 30 MiB capacity: %v", err)
	}
}

func TestLaunchErrorsNameTheCall(t *testing.T) {
	d, drv := openFake(t, fakeOpts(), device.Options{})
	x := devTensor(t, d, []float32{1, 2, 3})
	drv.Fail("cuLaunchKernel", int32(cu.ErrInvalidValue), 1)
	err := d.Kernels().Unary(device.Exp, x, x, 0)
	wantErr(t, err, "cuda:0", "ferry_unary_contig", "cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE")
	drv.Fail("cuMemcpyDtoHAsync_v2", int32(cu.ErrInvalidValue), 1)
	err = d.Kernels().Download(make([]byte, 12), x)
	wantErr(t, err, "download", "cuMemcpyDtoHAsync_v2")
	drv.Fail("cublasSgemmStridedBatched", int32(cu.BLASExecutionFailed), 1)
	err = d.Kernels().Gemm(device.GemmParams{M: 1, N: 1, K: 1, Alpha: 1, A: x.Block, B: x.Block, C: x.Block, LDA: 1, LDB: 1, LDC: 1, Batch: 1})
	wantErr(t, err, "gemm", "cublasSgemmStridedBatched", "CUBLAS_STATUS_EXECUTION_FAILED")
	// Rank beyond the kernels' limit after merging: an error, not a crash.
	shape := []int{2, 2, 2, 2, 2, 2, 2, 2, 2}
	strides := make([]int, 9)
	for i := range strides {
		strides[i] = 1 << (2 * (8 - i)) // gaps everywhere: nothing merges
	}
	big := device.View{Block: x.Block, Shape: shape, Strides: strides}
	dst := device.View{Block: x.Block, Shape: shape, Strides: device.Contiguous(shape)}
	if err := d.Kernels().Copy(dst, big); !errors.Is(err, device.ErrNotSupported) {
		t.Errorf("rank-9 copy: %v, want ErrNotSupported", err)
	}
}

// A kernel fault is asynchronous: the launch succeeds, the next
// synchronisation reports it, naming the kernel, and the context stays
// broken, as on a GPU.
func TestKernelFaultSurfacesAtSynchronize(t *testing.T) {
	drv := fake.New(fakeOpts())
	d, err := cuda.Open(drv, 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close() // reports the broken context; nothing to check
	x := devTensor(t, d, []float32{1, 2, 3})
	drv.Fail("kernel/ferry_unary_contig", 0, 1)
	if err := d.Kernels().Unary(device.Exp, x, x, 0); err != nil {
		t.Fatalf("launch: %v", err)
	}
	err = d.Compute().Synchronize()
	wantErr(t, err, "ferry_unary_contig", "CUDA_ERROR_ILLEGAL_ADDRESS")
	wantErr(t, d.Kernels().Fill(x, 1), "CUDA_ERROR_ILLEGAL_ADDRESS")
	if e := d.Compute().Record(); !e.Done() || e.Synchronize() == nil {
		t.Errorf("an event recorded on a broken context should be done with an error")
	}
}

func devTensor(t *testing.T, d device.Device, vals []float32) device.View {
	t.Helper()
	b, err := d.Allocator().Alloc(int64(4*len(vals)), device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	v := device.View{Block: b, Shape: []int{len(vals)}, Strides: []int{1}}
	if err := d.Kernels().Upload(v, bytesOf(vals)); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWithoutCUBLAS(t *testing.T) {
	d, _ := openFake(t, fake.Options{NoBLAS: true, SMs: 4}, device.Options{})
	if !strings.Contains(d.MatmulBackend(), "fallback") && !strings.Contains(d.MatmulBackend(), "ferry's tiled SGEMM") {
		t.Errorf("MatmulBackend() = %q", d.MatmulBackend())
	}
	ref := openCPU(t)
	defer ref.Close()
	devicetest.CompareGemm(t, d, ref, 40, 33, 20, 1e-5, 2)
	if d.Allocator().Stats().ByCategory[device.Workspace].Current != 0 {
		t.Errorf("a workspace was allocated without cuBLAS")
	}
}

// TF32: cuBLAS's math mode follows the option, and the products (rounded
// to TF32 inputs by the fake) stay within 1e-2 of FP32.
func TestTF32(t *testing.T) {
	d, drv := openFake(t, fakeOpts(), device.Options{Params: map[string]string{"tf32": "true"}})
	if got := drv.Context(0).BLASHandles(); len(got) != 1 || got[0].Mode != cu.TF32Math {
		t.Fatalf("cuBLAS handles %+v, want one in TF32 mode", got)
	}
	if d.MatmulBackend() != "cuBLAS (TF32)" {
		t.Errorf("MatmulBackend() = %q", d.MatmulBackend())
	}
	ref := openCPU(t)
	defer ref.Close()
	if worst := devicetest.CompareGemm(t, d, ref, 30, 20, 64, 1e-2, 3); worst < 1e-5 {
		t.Errorf("TF32 products agree with FP32 to %.2g: TF32 was not used", worst)
	}
	if err := d.SetTF32(false); err != nil {
		t.Fatal(err)
	}
	if got := drv.Context(0).BLASHandles()[0].Mode; got != cu.DefaultMath {
		t.Errorf("after SetTF32(false): mode %d", got)
	}
}

// cuBLAS gets its workspace from the allocator at the first product, sized
// as PyTorch sizes it, counted as workspace.
func TestCUBLASWorkspace(t *testing.T) {
	for _, tc := range []struct {
		major  int
		params map[string]string
		want   int64
	}{
		{9, nil, 32 << 20},
		{8, nil, 8<<20 + 128<<10},
		{9, map[string]string{"cublas_workspace": "0"}, 0},
		{8, map[string]string{"cublas_workspace": "1048576"}, 1 << 20},
	} {
		d, drv := openFake(t, fake.Options{Major: tc.major}, device.Options{Params: tc.params})
		x := devTensor(t, d, []float32{2})
		if err := d.Kernels().Gemm(device.GemmParams{M: 1, N: 1, K: 1, Alpha: 1, A: x.Block, B: x.Block, C: x.Block, LDA: 1, LDB: 1, LDC: 1, Batch: 1}); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if want > 0 {
			want = device.RoundSize(want)
		}
		if got := d.Allocator().Stats().ByCategory[device.Workspace].Current; got != want {
			t.Errorf("major %d %v: %d bytes of workspace, want %d", tc.major, tc.params, got, tc.want)
		}
		if got := drv.Context(0).BLASHandles()[0].Workspace; got != tc.want {
			t.Errorf("major %d %v: cuBLAS was handed %d bytes, want %d", tc.major, tc.params, got, tc.want)
		}
		if got := read(t, d, x, 1)[0]; got != 4 {
			t.Errorf("2·2 = %v", got)
		}
	}
}

// The host pool is pinned memory with its own statistics; copies between
// it and the device on a side stream are asynchronous and ordered by events.
func TestPinnedHostCopies(t *testing.T) {
	d, drv := openFake(t, fake.Options{CopyDelay: 50 * time.Millisecond, SMs: 4}, device.Options{})
	host := d.Host()
	if host.Host() != host {
		t.Errorf("the host's host is not itself")
	}
	const n = 1000
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i) - 300
	}
	src := devTensor(t, d, vals)
	hb, err := host.Allocator().Alloc(4*n, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	if got := host.Allocator().Stats().AllocatedBytes.Current; got != device.RoundSize(4*n) {
		t.Errorf("host allocator: %d bytes allocated, want %d", got, device.RoundSize(4*n))
	}
	side, err := d.NewStream("d2h")
	if err != nil {
		t.Fatal(err)
	}
	// Compute changes src after a slow kernel; the side stream waits for
	// it, then copies to the host.
	if err := d.Kernels().Unary(device.Scale, src, src, 2); err != nil {
		t.Fatal(err)
	}
	side.Wait(d.Compute().Record())
	if err := d.Copy(side, device.Whole(hb), device.Span{Block: src.Block, Len: 4 * n}); err != nil {
		t.Fatal(err)
	}
	done := side.Record()
	if done.Done() {
		t.Errorf("a 50 ms copy finished at once")
	}
	if err := done.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := floatsOf(cpuBytes(hb)[:4*n])
	for i := range got {
		if got[i] != 2*vals[i] {
			t.Fatalf("host[%d] = %v, want %v", i, got[i], 2*vals[i])
		}
	}
	// Host to device, and host to host, on the compute stream.
	hb2, _ := host.Allocator().Alloc(4*n, device.Activation)
	if err := d.Copy(d.Compute(), device.Whole(hb2), device.Whole(hb)); err != nil {
		t.Fatal(err)
	}
	dst := devTensor(t, d, make([]float32, n))
	if err := d.Copy(d.Compute(), device.Span{Block: dst.Block, Len: 4 * n}, device.Whole(hb2)); err != nil {
		t.Fatal(err)
	}
	back := read(t, d, dst, n)
	for i := range back {
		if back[i] != 2*vals[i] {
			t.Fatalf("round trip [%d] = %v, want %v", i, back[i], 2*vals[i])
		}
	}
	if s := drv.Context(0).Stats(); s.Copies < 3 {
		t.Errorf("stats %+v", s)
	}
	// Spans outside the block, or of another device, are refused.
	wantErr(t, d.Copy(side, device.Span{Block: hb, Off: hb.Size() - 4, Len: 8}, device.Span{Block: src.Block, Len: 8}), "out of a block")
	other, _ := openFake(t, fakeOpts(), device.Options{})
	ob, _ := other.Allocator().Alloc(8, device.Activation)
	wantErr(t, d.Copy(side, device.Span{Block: ob, Len: 8}, device.Span{Block: src.Block, Len: 8}), "a block of cuda:0")
	wantErr(t, d.Copy(d.Host().Compute(), device.Whole(hb), device.Whole(hb2)), "stream of another device")
	host.Allocator().Free(hb)
	host.Allocator().Free(hb2)
	other.Allocator().Free(ob)
}

func cpuBytes(b *device.Block) []byte {
	type bytesSeg interface{ Bytes() []byte }
	return b.Segment().(bytesSeg).Bytes()[b.Offset() : b.Offset()+b.Size()]
}

// Event handles are recycled once events are seen to complete.
func TestEventsRecycled(t *testing.T) {
	d, drv := openFake(t, fakeOpts(), device.Options{})
	s, _ := d.NewStream("side")
	for i := 0; i < 100; i++ {
		e := s.Record()
		if i%2 == 0 {
			_ = e.Synchronize()
		} else {
			for !e.Done() {
				time.Sleep(time.Microsecond)
			}
		}
		d.Compute().Wait(e)
	}
	if n := drv.Calls("cuEventCreate"); n > 2 {
		t.Errorf("%d events created for 100 records seen to complete one at a time", n)
	}
}

// PoisonFreed poisons device memory with cuMemsetD32 on the compute stream.
func TestPoisonOnDevice(t *testing.T) {
	d, drv := openFake(t, fakeOpts(), device.Options{PoisonFreed: true})
	x := devTensor(t, d, []float32{1, 2, 3, 4})
	before := drv.Calls("cuMemsetD32Async")
	d.Allocator().Free(x.Block)
	if drv.Calls("cuMemsetD32Async") != before+1 {
		t.Errorf("freeing did not poison")
	}
	y, _ := d.Allocator().Alloc(16, device.Activation)
	for i, v := range read(t, d, device.View{Block: y}, 4) {
		if !math.IsNaN(float64(v)) {
			t.Errorf("reused block [%d] = %v, want NaN", i, v)
		}
	}
	d.Allocator().Free(y)
}

// The registered "fakecuda" kind opens the device over a fake of its own.
func TestFakeKind(t *testing.T) {
	d, err := device.Open("fakecuda:0", device.Options{Params: map[string]string{"copy_delay": "1ms", "memory": "1073741824"}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != "cuda:0" {
		t.Errorf("name %q", d.Name())
	}
	if err := d.Close(); err != nil {
		t.Error(err)
	}
	_, err = device.Open("fakecuda:0", device.Options{Params: map[string]string{"memory": "lots"}})
	wantErr(t, err, "memory")
}

// The fake bounds-checks every access: a kernel that runs past its
// allocation faults as on a GPU (CUDA_ERROR_ILLEGAL_ADDRESS at the next
// synchronisation), so a wrong launch configuration cannot pass unseen.
func TestFakeCatchesOutOfBounds(t *testing.T) {
	drv := fake.New(fakeOpts())
	d, err := cuda.Open(drv, 0, device.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, _ := d.Allocator().Alloc(4<<20, device.Activation) // in a 20 MiB segment
	huge := device.View{Block: b, Shape: []int{64 << 20}, Strides: []int{1}}
	if err := d.Kernels().Unary(device.Neg, huge, huge, 0); err != nil {
		t.Fatal(err)
	}
	wantErr(t, d.Compute().Synchronize(), "CUDA_ERROR_ILLEGAL_ADDRESS", "ferry_unary_contig")
}

// The fake checks each launch's parameters against the PTX declaration.
func TestFakeChecksLaunchParameters(t *testing.T) {
	d, _ := openFake(t, fakeOpts(), device.Options{})
	ctx := d.Context()
	m, err := ctx.ModuleLoadData(cuda.PTX()["kernels/optim.ptx"])
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.ModuleUnload(m)
	f, err := ctx.ModuleGetFunction(m, "ferry_sgd_step")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := ctx.StreamCreate()
	defer ctx.StreamDestroy(s)
	one := cu.Dim3{X: 1, Y: 1, Z: 1}
	var a cu.Args
	wantErr(t, ctx.LaunchKernel(f, one, one, 0, s, a.Ptr(0).Ptr(0)), "takes 10 parameters, got 2")
	a.Reset().Ptr(0).Ptr(0).Ptr(0).I32(1).F32(0).F32(0).F32(0).F32(0).I32(0).I32(0) // n as int, not long long
	wantErr(t, ctx.LaunchKernel(f, one, one, 0, s, &a), "parameter 3 is 8 bytes in the PTX, 4 given")
	wantErr(t, ctx.LaunchKernel(f, one, cu.Dim3{X: 2048, Y: 1, Z: 1}, 0, s, &a), "beyond 1024 threads")
	if _, err := ctx.ModuleGetFunction(m, "ferry_no_such_kernel"); !cu.IsResult(err, cu.ErrNotFound) {
		t.Errorf("a missing kernel: %v", err)
	}
}

// A CUDA stream told to wait for another device's event (a CPU stream's)
// waits on the caller's goroutine; errors of failed events surface at the
// stream's next Synchronize.
func TestWaitForForeignEvent(t *testing.T) {
	d, _ := openFake(t, fakeOpts(), device.Options{})
	c, _ := cpu.New(device.Options{Params: map[string]string{"copy_delay": "20ms"}})
	defer c.Close()
	cs, _ := c.NewStream("cpu side")
	cb, _ := c.Allocator().Alloc(64, device.Activation)
	defer c.Allocator().Free(cb)
	if err := c.Copy(cs, device.Span{Block: cb, Len: 32}, device.Span{Block: cb, Off: 32, Len: 32}); err != nil {
		t.Fatal(err)
	}
	e := cs.Record()
	d.Compute().Wait(e)
	if !e.Done() {
		t.Errorf("Wait on a foreign event returned before it completed")
	}
	if err := d.Compute().Synchronize(); err != nil {
		t.Error(err)
	}
}

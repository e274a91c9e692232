package cpu_test

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/devicetest"
	"ferry/internal/blas"
)

var caps = devicetest.Caps{HasData: true, SlowCopy: map[string]string{"copy_delay": "50ms"}}

func open(t *testing.T, opts device.Options) device.Device {
	t.Helper()
	d, err := device.Open("cpu", opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	devicetest.Run(t, open, caps)
}

// TestKernelsConcurrent runs the kernel tests again with every input big
// enough to be split (devicetest's "large" cases) spread over helper
// goroutines, as only much larger inputs are by default.
func TestKernelsConcurrent(t *testing.T) {
	defer cpu.SetParallelMin(1)()
	devicetest.RunKernels(t, open, caps)
}

// TestKernelsPureGo runs the matrix-product tests again on the pure-Go
// kernel when OpenBLAS served them above.
func TestKernelsPureGo(t *testing.T) {
	if !blas.Available() {
		t.Skip("OpenBLAS is not loaded: TestConformance already ran the pure-Go kernel")
	}
	if err := cpu.SetMatmulBackend("go"); err != nil {
		t.Fatal(err)
	}
	defer cpu.SetMatmulBackend("auto")
	if !strings.HasPrefix(cpu.MatmulBackend(), "pure Go") {
		t.Fatalf("backend %q after SetMatmulBackend(go)", cpu.MatmulBackend())
	}
	devicetest.RunKernels(t, open, caps, "Gemm")
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		opts device.Options
		want string
	}{
		{"cpu:1", device.Options{}, "one CPU device"},
		{"cpu", device.Options{Params: map[string]string{"copy_delay": "soon"}}, "copy_delay"},
		{"cpu", device.Options{Params: map[string]string{"threads": "4"}}, `unknown parameter "threads"`},
	} {
		d, err := device.Open(c.name, c.opts)
		if err == nil {
			d.Close()
			t.Errorf("Open(%q, %v) succeeded", c.name, c.opts.Params)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %v): %v, want it to mention %q", c.name, c.opts.Params, err, c.want)
		}
	}
}

// TestCopyOverlapsCompute: a slow copy on a side stream runs while the
// caller goes on computing, and completes without the caller waiting.
func TestCopyOverlapsCompute(t *testing.T) {
	const delay = 50 * time.Millisecond
	d := open(t, device.Options{Params: map[string]string{"copy_delay": delay.String()}})
	defer d.Close()
	s, err := d.NewStream("d2h")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 16
	src, err := d.Allocator().Alloc(4*n, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d.Host().Allocator().Alloc(4*n, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	k := d.Kernels()
	x := device.View{Block: src, Shape: []int{n}, Strides: []int{1}}
	if err := k.Fill(x, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := d.Copy(s, device.Whole(dst), device.Whole(src)); err != nil {
		t.Fatal(err)
	}
	done := s.Record()
	if el := time.Since(start); el >= delay {
		t.Fatalf("Copy on a side stream blocked the caller for %v", el)
	}
	// Compute on the caller's goroutine until the copy is done, without
	// ever waiting for it.
	scratch, err := d.Allocator().Alloc(4*n, device.Temporary)
	if err != nil {
		t.Fatal(err)
	}
	y := device.View{Block: scratch, Shape: []int{n}, Strides: []int{1}}
	steps := 0
	for !done.Done() {
		if err := k.Unary(device.Exp, y, y, 0); err != nil {
			t.Fatal(err)
		}
		steps++
		if time.Since(start) > 5*time.Second {
			t.Fatal("the side-stream copy did not finish while the caller computed")
		}
	}
	if steps == 0 {
		t.Fatal("the copy finished before the caller computed anything: no overlap observed")
	}
	if el := time.Since(start); el < delay {
		t.Fatalf("the copy finished after %v, before its delay of %v", el, delay)
	}
	if !bytes.Equal(cpu.Bytes(dst)[:4*n], cpu.Bytes(src)[:4*n]) {
		t.Fatal("the copied bytes differ")
	}
	t.Logf("%d compute steps ran while the copy was in flight", steps)
}

// TestCloseStopsGoroutines: side streams are goroutines, and closing the
// device ends them, after running the work already enqueued.
func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	d := open(t, device.Options{Params: map[string]string{"copy_delay": "10ms"}})
	var streams []device.Stream
	for _, name := range []string{"d2h", "h2d", "disk"} {
		s, err := d.NewStream(name)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if got := runtime.NumGoroutine(); got < before+3 {
		t.Fatalf("%d goroutines with three side streams, %d before", got, before)
	}
	// Work still queued at Close is finished, not dropped.
	src, _ := d.Allocator().Alloc(4096, device.Activation)
	dst, _ := d.Host().Allocator().Alloc(4096, device.Activation)
	copy(cpu.Bytes(src), bytes.Repeat([]byte{7}, 4096))
	if err := d.Copy(streams[0], device.Whole(dst), device.Whole(src)); err != nil {
		t.Fatal(err)
	}
	ev := streams[0].Record()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if !ev.Done() {
		t.Errorf("Close returned before the work enqueued on its streams finished")
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > before {
		t.Errorf("%d goroutines after Close, %d before Open", got, before)
	}
	if _, err := d.NewStream("late"); err == nil {
		t.Errorf("NewStream on a closed device succeeded")
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// rss is the process's resident memory in bytes, from /proc/self/statm.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// TestEmptyCacheReturnsMemory: device memory is mmap'd outside the Go heap,
// stays resident while cached, and leaves the process on EmptyCache.
func TestEmptyCacheReturnsMemory(t *testing.T) {
	const size = 32 << 20
	d := open(t, device.Options{})
	defer d.Close()
	a := d.Allocator()
	base := rss(t)
	b, err := a.Alloc(size, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Kernels().Fill(device.View{Block: b, Shape: []int{size / 4}, Strides: []int{1}}, 1); err != nil {
		t.Fatal(err)
	}
	touched := rss(t)
	if touched-base < size*3/4 {
		t.Fatalf("writing %d MiB raised resident memory by only %d MiB", size>>20, (touched-base)>>20)
	}
	a.Free(b)
	if cached := rss(t); touched-cached > size/4 {
		t.Errorf("Free gave back %d MiB: a caching allocator keeps the segment", (touched-cached)>>20)
	}
	a.EmptyCache()
	after := rss(t)
	if touched-after < size*3/4 {
		t.Errorf("EmptyCache gave back only %d of %d MiB of resident memory", (touched-after)>>20, size>>20)
	}
	if st := a.Stats(); st.ReservedBytes.Current != 0 {
		t.Errorf("reserved %d after EmptyCache", st.ReservedBytes.Current)
	}
}

// TestHostIsCPU: the host of the CPU device is a CPU device whose host is
// itself, without the device's capacity cap.
func TestHostIsCPU(t *testing.T) {
	d := open(t, device.Options{Capacity: 4 << 20})
	defer d.Close()
	h := d.Host()
	if h.Host() != h {
		t.Errorf("the host's Host is not itself")
	}
	// The host has no cap: 12 MiB fits where the device holds 4.
	b, err := h.Allocator().Alloc(12<<20, device.Activation)
	if err != nil {
		t.Fatalf("host allocation beyond the device's capacity: %v", err)
	}
	h.Allocator().Free(b)
	if _, err := d.Allocator().Alloc(12<<20, device.Activation); err == nil {
		t.Errorf("device allocation beyond its capacity succeeded")
	}
}

func TestCopyErrors(t *testing.T) {
	d := open(t, device.Options{})
	defer d.Close()
	other := open(t, device.Options{})
	defer other.Close()
	a, _ := d.Allocator().Alloc(1024, device.Activation)
	b, _ := d.Allocator().Alloc(1024, device.Activation)
	if err := d.Copy(d.Compute(), device.Span{Block: a, Len: 512}, device.Whole(b)); err == nil {
		t.Errorf("Copy of 1024 bytes into a span of 512 succeeded")
	}
	if err := d.Copy(foreignStream{}, device.Whole(a), device.Whole(b)); err == nil {
		t.Errorf("Copy on a stream of another kind of device succeeded")
	}
}

type foreignStream struct{ device.Stream }

func TestBytesOfForeignBlockPanics(t *testing.T) {
	a := device.NewAllocator(fakeMemory{}, device.AllocatorConfig{Name: "fake"})
	b, err := a.Alloc(100, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("cpu.Bytes of a block of another device did not panic")
		}
	}()
	cpu.Bytes(b)
}

type fakeMemory struct{}

func (fakeMemory) Reserve(int64) (device.Segment, error) { return struct{}{}, nil }
func (fakeMemory) Release(device.Segment) error          { return nil }

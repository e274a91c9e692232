package standin_test

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/device/cuda/cu"
	"ferry/device/cuda/standin"
)

// Each test here breaks the API on purpose, calling the stand-in directly,
// and checks that it is caught.

// CUresult values (cuda.h).
const (
	invalidValue   = 1
	invalidContext = 201
	invalidPTX     = 218
	invalidHandle  = 400
)

// raw is the stand-in's primary context, current on the test's OS thread
// (locked to it until the test ends).
type raw struct {
	t   *testing.T
	l   *standin.Lib
	ctx uintptr
}

func openRaw(t *testing.T) *raw {
	l := setup(t)
	runtime.LockOSThread()
	r := &raw{t: t, l: l}
	if rc := l.Call("cuDevicePrimaryCtxRetain", uintptr(unsafe.Pointer(&r.ctx)), 0); rc != 0 {
		t.Fatalf("cuDevicePrimaryCtxRetain: %d", rc)
	}
	r.must("cuCtxSetCurrent", r.ctx)
	t.Cleanup(func() {
		r.must("cuDevicePrimaryCtxRelease_v2", 0)
		runtime.UnlockOSThread()
	})
	return r
}

func (r *raw) must(name string, args ...uintptr) {
	r.t.Helper()
	if rc := r.l.Call(name, args...); rc != 0 {
		r.t.Fatalf("%s: CUresult %d\n%s", name, rc, r.l.Report())
	}
}

// caught checks that the calls since the last check broke the API at
// least once with a message containing want, then forgets them.
func (r *raw) caught(want string) {
	r.t.Helper()
	rep := r.l.Report()
	if r.l.Violations() == 0 || !strings.Contains(rep, want) {
		r.t.Errorf("want a violation %q; the stand-in reported %d:\n%s", want, r.l.Violations(), rep)
	}
	r.l.Reset()
}

func (r *raw) alloc(n int) uint64 {
	var p uint64
	r.must("cuMemAlloc_v2", uintptr(unsafe.Pointer(&p)), uintptr(n))
	return p
}

func (r *raw) pinned(n int) unsafe.Pointer {
	var p unsafe.Pointer
	r.must("cuMemHostAlloc", uintptr(unsafe.Pointer(&p)), uintptr(n), 1)
	return p
}

func (r *raw) stream() uintptr {
	var s uintptr
	r.must("cuStreamCreate", uintptr(unsafe.Pointer(&s)), 1)
	return s
}

func TestStandInCatchesCallWithoutContext(t *testing.T) {
	l := setup(t)
	done := make(chan int32)
	go func() {
		// This goroutine's thread ends with it. The context is made
		// non-current first, as on a thread that never set one.
		runtime.LockOSThread()
		l.Call("cuCtxSetCurrent", 0)
		var p uint64
		done <- l.Call("cuMemAlloc_v2", uintptr(unsafe.Pointer(&p)), 256)
	}()
	if rc := <-done; rc != invalidContext {
		t.Errorf("cuMemAlloc_v2 without a context: CUresult %d, want %d", rc, invalidContext)
	}
	(&raw{t: t, l: l}).caught("cuMemAlloc_v2: no current context on this thread")
}

func TestStandInCatchesFreeDuringAsyncCopy(t *testing.T) {
	r := openRaw(t)
	const n = 4096
	dev, host, s := r.alloc(n), r.pinned(n), r.stream()
	r.must("cuMemcpyHtoDAsync_v2", uintptr(dev), uintptr(host), n, s)
	r.must("cuMemFree_v2", uintptr(dev)) // the copy has not run
	r.caught("freed while a copy queued on a stream still uses it")

	dev = r.alloc(n)
	r.must("cuMemcpyDtoHAsync_v2", uintptr(host), uintptr(dev), n, s)
	r.must("cuMemFreeHost", uintptr(host))
	r.caught("cuMemFreeHost")
	r.must("cuMemFree_v2", uintptr(dev))
	r.must("cuStreamDestroy_v2", s)
}

// Pinned copies land when the stream runs; copies from or to pageable
// memory are synchronous, as the real driver's, and counted.
func TestStandInAsyncCopySemantics(t *testing.T) {
	r := openRaw(t)
	const n = 256
	dev, host, s := r.alloc(n), r.pinned(n), r.stream()
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	pageable := r.l.Counter("pageable_copies")
	r.must("cuMemcpyHtoDAsync_v2", uintptr(dev), uintptr(unsafe.Pointer(&src[0])), n, s)
	src[0] = 99 // the driver staged the bytes at the call
	pin := unsafe.Slice((*byte)(host), n)
	pin[0] = 7
	r.must("cuMemcpyDtoHAsync_v2", uintptr(host), uintptr(dev), n, s)
	if pin[0] != 7 {
		t.Errorf("a copy into pinned memory landed before the stream ran")
	}
	r.must("cuStreamSynchronize", s)
	if pin[0] != 0 || pin[n-1] != n-1 {
		t.Errorf("after synchronising: %d, %d", pin[0], pin[n-1])
	}
	back := make([]byte, n)
	r.must("cuMemcpyDtoHAsync_v2", uintptr(unsafe.Pointer(&back[0])), uintptr(dev), n, s)
	if back[5] != 5 { // no synchronisation: a pageable destination is written before the call returns
		t.Errorf("a copy into pageable memory was not synchronous")
	}
	if got := r.l.Counter("pageable_copies") - pageable; got != 2 {
		t.Errorf("%d pageable copies counted, want 2", got)
	}
	r.must("cuMemFreeHost", uintptr(host))
	r.must("cuMemFree_v2", uintptr(dev))
	r.must("cuStreamDestroy_v2", s)
}

func TestStandInCatchesBadHandlesAndPointers(t *testing.T) {
	r := openRaw(t)
	s := r.stream()
	r.must("cuStreamDestroy_v2", s)
	if rc := r.l.Call("cuStreamDestroy_v2", s); rc != invalidHandle {
		t.Errorf("double destroy: %d", rc)
	}
	r.caught("stream")

	var e uintptr
	r.must("cuEventCreate", uintptr(unsafe.Pointer(&e)), 2)
	r.must("cuEventDestroy_v2", e)
	r.l.Call("cuEventQuery", e)
	r.caught("used after it was destroyed")

	if rc := r.l.Call("cuEventCreate", uintptr(unsafe.Pointer(&e)), 0x40); rc != invalidValue {
		t.Errorf("bad flags: %d", rc)
	}
	r.caught("unknown Flags")
	r.l.Call("cuMemAlloc_v2", 0, 16)
	r.caught("dptr is NULL")
	var p uint64
	r.l.Call("cuMemAlloc_v2", uintptr(unsafe.Pointer(&p)), 0)
	r.caught("bytesize is 0")

	const n = 64
	a, b := r.alloc(n), r.alloc(n)
	s = r.stream()
	if uintptr(a) == uintptr(unsafe.Pointer(&p)) || a < 1<<47 {
		t.Errorf("device address %#x could be a host address", a)
	}
	r.l.Call("cuMemcpyHtoDAsync_v2", uintptr(a), uintptr(b), n, s) // a device pointer as the host source
	r.caught("is a device address passed as a host pointer")
	r.l.Call("cuMemcpyDtoDAsync_v2", uintptr(a), uintptr(b), 2*n, s)
	r.caught("is not inside one device allocation")
	r.must("cuMemFree_v2", uintptr(b))
	r.l.Call("cuMemsetD32Async", uintptr(b), 0, 4, s)
	r.caught("use after cuMemFree")
	r.l.Call("cuMemFree_v2", uintptr(b))
	r.caught("freed twice")
	r.must("cuMemFree_v2", uintptr(a))
	r.must("cuStreamDestroy_v2", s)
}

const ptx = `.version 8.0
.target sm_90
.address_size 64
.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1,
	.param .align 8 .b8 k_param_2[24]
)
{ ret; }
`

func TestStandInModuleOptionsAndLogs(t *testing.T) {
	r := openRaw(t)
	r.l.NoKernels() // the fake driver does not know k
	image := append([]byte(ptx), 0)
	var m uintptr
	// An unknown CUjit_option.
	opts := []int32{99}
	vals := []uintptr{0}
	if rc := r.l.Call("cuModuleLoadDataEx", uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])), 1,
		uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0]))); rc != invalidValue {
		t.Errorf("unknown option: %d", rc)
	}
	r.caught("unknown CUjit_option 99")
	// A log buffer without its size.
	log := make([]byte, 64)
	opts, vals = []int32{5}, []uintptr{uintptr(unsafe.Pointer(&log[0]))}
	r.l.Call("cuModuleLoadDataEx", uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])), 1,
		uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	r.caught("without its size")

	// The info and error logs are written, within their sizes, and the
	// sizes written back.
	info, errLog := make([]byte, 64), make([]byte, 8)
	opts = []int32{3, 4, 5, 6}
	load := func(img []byte) int32 {
		vals = []uintptr{uintptr(unsafe.Pointer(&info[0])), uintptr(len(info)), uintptr(unsafe.Pointer(&errLog[0])), uintptr(len(errLog))}
		return r.l.Call("cuModuleLoadDataEx", uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])), 4,
			uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	}
	if rc := load([]byte("garbage\x00")); rc != invalidPTX {
		t.Errorf("bad PTX: %d", rc)
	}
	if got := string(errLog[:vals[3]-1]); got != "ptx: no" {
		t.Errorf("error log %q (%d bytes used), want the message cut to 8 bytes", got, vals[3])
	}
	if rc := load(image); rc != 0 {
		t.Fatalf("load: %d\n%s", rc, r.l.Report())
	}
	if got := string(info[:vals[1]-1]); got != "standin: 1 kernels loaded" {
		t.Errorf("info log %q", got)
	}

	var f uintptr
	name := []byte("k\x00")
	r.must("cuModuleGetFunction", uintptr(unsafe.Pointer(&f)), m, uintptr(unsafe.Pointer(&name[0])))
	s := r.stream()
	launch := func(params []unsafe.Pointer) int32 {
		var kp uintptr
		if params != nil {
			kp = uintptr(unsafe.Pointer(&params[0]))
		}
		return r.l.Call("cuLaunchKernel", f, 1, 1, 1, 32, 1, 1, 0, s, kp, 0)
	}
	if rc := launch(nil); rc != invalidValue {
		t.Errorf("launch without kernelParams: %d", rc)
	}
	r.caught("k takes 3 parameters, kernelParams is NULL")
	var args [5]uint64
	if rc := launch([]unsafe.Pointer{unsafe.Pointer(&args[0]), unsafe.Pointer(&args[1]), nil}); rc != invalidValue {
		t.Errorf("a null parameter pointer: %d", rc)
	}
	r.caught("kernelParams[2] is NULL")
	// Parameter 0 is a .u64, but parameter 1 starts 4 bytes after it.
	base := unsafe.Pointer(&args[0])
	launch([]unsafe.Pointer{base, unsafe.Add(base, 4), unsafe.Add(base, 8)})
	r.caught("parameter 0 is 8 bytes in the PTX, but parameter 1 starts 4 bytes after it")
	if rc := launch([]unsafe.Pointer{base, unsafe.Add(base, 8), unsafe.Add(base, 16)}); rc != 0 {
		t.Errorf("a good launch: %d\n%s", rc, r.l.Report())
	}
	r.must("cuStreamSynchronize", s) // no runner knows k: it is a no-op
	r.must("cuModuleUnload", m)
	r.l.Call("cuModuleGetFunction", uintptr(unsafe.Pointer(&f)), m, uintptr(unsafe.Pointer(&name[0])))
	r.caught("used after it was destroyed")
	r.must("cuStreamDestroy_v2", s)
}

// Through the bindings: a JIT failure's log reaches the error, and what a
// context still holds at its release is reported as a leak.
func TestStandInBindingsReportLogAndLeaks(t *testing.T) {
	l := setup(t)
	drv, err := cu.Load()
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := drv.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ctx.ModuleLoadData([]byte(".version 8.0\n.target sm_90\nno kernels here"))
	if e, ok := err.(*cu.Error); !ok || !cu.IsResult(err, cu.ErrInvalidPTX) || !strings.Contains(e.Detail, "no .entry found") {
		t.Errorf("ModuleLoadData of a PTX without kernels: %v (detail %q)", err, errDetail(err))
	}
	if _, err := ctx.StreamCreate(); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.MemAlloc(1000); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	rep := l.Report()
	if l.Violations() != 2 || !strings.Contains(rep, "stream") || !strings.Contains(rep, "1000 bytes from cuMemAlloc_v2 still allocated") {
		t.Errorf("leaks at release: %d violations:\n%s", l.Violations(), rep)
	}
	l.Reset()
	// The context is gone: a call through it is refused.
	if _, err := ctx.MemAlloc(16); err == nil {
		t.Errorf("MemAlloc after the context was released succeeded")
	}
	if !strings.Contains(l.Report(), "cuCtxSetCurrent: context") {
		t.Errorf("use of a released context: %s", l.Report())
	}
	l.Reset()
}

func errDetail(err error) string {
	if e, ok := err.(*cu.Error); ok {
		return e.Detail
	}
	return ""
}

// The stand-in returns each CUresult in the low half of the return
// register with the upper half set, as the C ABI allows: the bindings,
// which passed every test above through it, read only the low half.
func TestStandInResultsHaveDirtyUpperHalf(t *testing.T) {
	l := setup(t)
	h, err := purego.Dlopen(l.Path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, "cuDriverGetVersion")
	if err != nil {
		t.Fatal(err)
	}
	var v int32
	r, _, _ := purego.SyscallN(p, uintptr(unsafe.Pointer(&v)))
	if uint32(r) != 0 || r>>32 == 0 || v != 12040 {
		t.Errorf("cuDriverGetVersion returned %#x (version %d): want 0 in the low half, garbage above", r, v)
	}
}

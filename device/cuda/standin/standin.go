// Package standin builds and drives a strict C stand-in for the CUDA
// driver and cuBLAS (c/standin.c), so that tests run ferry's real purego
// bindings (package ferry/device/cuda/cu) end to end on a machine without
// a GPU.
//
// The fake driver (package ferry/device/cuda/fake) implements cu.Context
// in Go and so bypasses the binding layer: the argument registers, the
// pointers handed to C, the option arrays, which OS thread holds the
// context. The stand-in is a shared library with the real symbols and
// signatures: the bindings load it through FERRY_LIBCUDA and FERRY_CUBLAS
// as they would libcuda.so.1, and it checks every call against the
// documented API, counting each breach as a violation (see the comment at
// the top of c/standin.c for what it checks and how it models the GPU).
//
// A test builds it with Build (gcc; ErrNoCompiler without one), points
// the environment at it, opens the device as usual ("cuda:0"), and at the
// end asserts Lib.Violations() == 0, printing Lib.Report() if not.
// Kernels run one of two ways. RunKernelsFromSource (kernels.go) runs the
// CUDA sources themselves, device/cuda/kernels/*.cu compiled for the CPU
// with g++: what a GPU would run, with barriers, warp operations and
// shared memory emulated and checked. RunKernelsWithFake calls back into
// Go, where the fake driver runs each launch on the CPU device's kernels
// (fake.RunKernel): the fallback where there is no g++. Either way the
// stand-in's memory is the kernels' memory, so results can be checked
// against the CPU device.
package standin

import (
	_ "embed"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/internal/cbuild"
)

var (
	//go:embed c/standin.c
	source []byte
	//go:embed c/standin.h
	header []byte
)

// ErrNoCompiler is returned by Build when there is no C compiler.
var ErrNoCompiler = cbuild.ErrNoCompiler

// Build compiles the stand-in into dir and returns the library's path.
func Build(dir string) (string, error) {
	// -ffp-contract=off: sgemm sums as the Go fake does, without FMA.
	lib, err := cbuild.Shared(dir, "standin", source, header, "-ffp-contract=off")
	if err != nil {
		return "", fmt.Errorf("standin: %w", err)
	}
	return lib, nil
}

// Lib is the loaded stand-in: its test-facing functions (c/standin.h).
type Lib struct {
	Path string
	h    uintptr

	violations, report, reset, counter, setDelay, setRunner, resolve uintptr
}

// Open loads the library at path (the process keeps one copy per path;
// the bindings' Load, given the same path, gets the same one).
func Open(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: path, h: h}
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"standin_violations", &l.violations}, {"standin_report", &l.report}, {"standin_reset", &l.reset},
		{"standin_counter", &l.counter}, {"standin_set_copy_delay_us", &l.setDelay},
		{"standin_set_kernel_runner", &l.setRunner}, {"standin_resolve", &l.resolve},
	} {
		if *s.p, err = purego.Dlsym(h, s.name); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Call calls the library's function name (a CUDA or cuBLAS entry point,
// for tests that misuse the API on purpose) and returns its 32-bit result.
//
//go:uintptrescapes
func (l *Lib) Call(name string, args ...uintptr) int32 {
	p, err := purego.Dlsym(l.h, name)
	if err != nil {
		panic(err)
	}
	r, _, _ := purego.SyscallN(p, args...)
	return int32(r)
}

// Violations is how many calls broke the API since the last Reset.
func (l *Lib) Violations() int {
	r, _, _ := purego.SyscallN(l.violations)
	return int(int64(r))
}

// Report describes the violations, one a line.
func (l *Lib) Report() string {
	r, _, _ := purego.SyscallN(l.report)
	return cString(r)
}

// Reset forgets the violations and zeroes the counters.
func (l *Lib) Reset() { purego.SyscallN(l.reset) }

// Counter reads one of the stand-in's counters by name ("launches",
// "launches_run", "sgemms", "gemms_ex", "copies", "pageable_copies", "memsets",
// "syncs", "default_stream", "live_dev_bytes"); -1 for an unknown name.
func (l *Lib) Counter(name string) int64 {
	b := append([]byte(name), 0)
	r, _, _ := purego.SyscallN(l.counter, uintptr(unsafe.Pointer(&b[0])))
	return int64(r)
}

// SetCopyDelay makes every copy due d after it is enqueued: until then
// cuEventQuery reports it not ready (synchronising calls still wait for
// it at once).
func (l *Lib) SetCopyDelay(d time.Duration) { purego.SyscallN(l.setDelay, uintptr(d.Microseconds())) }

// launchC is struct standin_launch.
type launchC struct {
	name        *byte
	grid, block [3]uint32
	nparams     int32
	sizes       *int32
	params      *unsafe.Pointer
	shared      uint32
}

var (
	runnerOnce sync.Once
	runner     uintptr
	runLib     *Lib
	runMu      sync.Mutex
	runErr     error // the first kernel fault since the last KernelError
)

// RunKernelsWithFake makes the stand-in run each kernel, when its stream
// reaches it, as the fake driver runs it (fake.RunKernel: the CPU
// device's kernel) over the stand-in's memory. Without it, launches are checked and queued but do
// nothing. The runner runs on the thread of the call that drives the
// stream (a synchronisation, an event query), inside that call.
func (l *Lib) RunKernelsWithFake() {
	runnerOnce.Do(func() { runner = purego.NewCallback(runKernel) })
	runMu.Lock()
	runLib = l
	runMu.Unlock()
	purego.SyscallN(l.setRunner, runner)
}

// NoKernels makes launches, once checked and queued, do nothing when they
// run (the stand-in's default).
func (l *Lib) NoKernels() { purego.SyscallN(l.setRunner, 0) }

// KernelError returns, and forgets, the first kernel fault the runner saw.
func KernelError() error {
	runMu.Lock()
	defer runMu.Unlock()
	err := runErr
	runErr = nil
	return err
}

func runKernel(p uintptr) uintptr {
	lc := (*launchC)(cPtr(p))
	runMu.Lock()
	l := runLib
	runMu.Unlock()
	n := int(lc.nparams)
	params := make([][]byte, n)
	if n > 0 {
		sizes := unsafe.Slice(lc.sizes, n)
		ptrs := unsafe.Slice(lc.params, n)
		for i := range params {
			params[i] = unsafe.Slice((*byte)(ptrs[i]), sizes[i])
		}
	}
	grid := cu.Dim3{X: lc.grid[0], Y: lc.grid[1], Z: lc.grid[2]}
	block := cu.Dim3{X: lc.block[0], Y: lc.block[1], Z: lc.block[2]}
	err := fake.RunKernel(goString(lc.name), grid, block, params, l.mem)
	if err != nil {
		runMu.Lock()
		if runErr == nil {
			runErr = err
		}
		runMu.Unlock()
		return 1
	}
	return 0
}

// mem maps a device address to the stand-in's bytes behind it, to the end
// of its allocation.
func (l *Lib) mem(p uint64) ([]byte, bool) {
	var avail uint64
	h, _, _ := purego.SyscallN(l.resolve, uintptr(p), uintptr(unsafe.Pointer(&avail)))
	if h == 0 {
		return nil, false
	}
	return unsafe.Slice((*byte)(cPtr(h)), avail), true
}

// cPtr turns an address of C memory, which the Go collector never moves
// or frees, back into a pointer.
func cPtr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// cString copies the NUL-terminated string at p (owned by C).
func cString(p uintptr) string { return goString((*byte)(cPtr(p))) }

func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; ; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			return string(b)
		}
		b = append(b, c)
	}
}

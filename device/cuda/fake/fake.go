// Package fake is a CUDA driver and cuBLAS that run on the host, so that
// the CUDA device's own logic runs end to end where there is no GPU: host
// memory stands in for device memory, each stream is a goroutine, events
// order them, copies can be slowed down, and failures can be injected.
//
// A launch reads its arguments from the same parameter bytes the real
// cuLaunchKernel would copy and runs the CPU device's kernel that
// computes what the launched kernel computes (Note [one source per
// kernel] in kernels.go): the fake keeps the driver's behaviour, not a
// copy of the kernels' arithmetic. Every launch is checked against the
// kernel's declaration in the loaded PTX (name, parameter count and
// sizes), against CUDA's limits on grid and block shapes, and against
// the block shape the kernel is written for. Device memory is addressed
// through fake device pointers; every operand of a launch is checked to
// lie inside its allocation, so an out-of-range access is a
// CUDA_ERROR_ILLEGAL_ADDRESS, sticky for the context, as on a GPU.
//
// Use it with cuda.Open(fake.New(fake.Options{}), 0, opts).
package fake

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ferry/device/cuda/cu"
)

// Options shape the fake GPU.
type Options struct {
	Devices int    // GPUs (default 1; negative: none)
	Name    string // model name (default "Fake GPU")
	// Memory is each GPU's memory in bytes (default 4 GiB); cuMemAlloc
	// beyond it fails with CUDA_ERROR_OUT_OF_MEMORY.
	Memory       int64
	SMs          int // multiprocessors (default 4)
	Major, Minor int // compute capability (default 9.0)
	// CopyDelay is added to every memcpy run on a stream; KernelDelay to
	// every kernel and cuBLAS call.
	CopyDelay, KernelDelay time.Duration
	// NoBLAS makes the driver behave as if cuBLAS were not installed.
	NoBLAS bool
	// HostAddresses makes a device allocation's address that of its Go
	// memory (as a pinned one's is), so that a library reading device
	// pointers as host addresses (the NCCL stand-in,
	// dist/nccl/standin) works on this driver's memory. Addresses then
	// have no gap between allocations to catch an overrun.
	HostAddresses bool
}

// Driver is a fake cu.Driver.
type Driver struct {
	opts Options

	mu       sync.Mutex
	fails    map[string][]cu.Result // call → codes to return, in order
	calls    map[string]int
	contexts map[int]*Context
	leaks    []string // resources alive when a primary context was destroyed
}

// New returns a fake driver.
func New(opts Options) *Driver {
	switch {
	case opts.Devices == 0:
		opts.Devices = 1
	case opts.Devices < 0:
		opts.Devices = 0
	}
	if opts.Name == "" {
		opts.Name = "Fake GPU"
	}
	if opts.Memory == 0 {
		opts.Memory = 4 << 30
	}
	if opts.SMs == 0 {
		opts.SMs = 4
	}
	if opts.Major == 0 {
		opts.Major, opts.Minor = 9, 0
	}
	return &Driver{opts: opts, fails: map[string][]cu.Result{}, calls: map[string]int{}, contexts: map[int]*Context{}}
}

// Fail makes the next times calls of call fail with code. call is a driver
// or cuBLAS function name as the real library spells it ("cuMemAlloc_v2",
// "cuMemHostAlloc", "cublasSgemmStridedBatched"), or "cuLaunchKernel/NAME"
// for launches of kernel NAME, or "kernel/NAME" to make kernel NAME fault
// when it runs (an asynchronous CUDA_ERROR_ILLEGAL_ADDRESS, whatever code
// is given). For cuBLAS calls code is a cublasStatus_t.
func (d *Driver) Fail(call string, code int32, times int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < times; i++ {
		d.fails[call] = append(d.fails[call], cu.Result(code))
	}
}

// Calls reports how many times call was made ("cuLaunchKernel/NAME" counts
// launches of one kernel).
func (d *Driver) Calls(call string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[call]
}

// Leaks lists what was still allocated when a primary context was
// destroyed (its last retain released): memory, streams, events, modules,
// cuBLAS handles the device forgot. The real driver frees them silently.
func (d *Driver) Leaks() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.leaks...)
}

// injected counts a call and returns its injected failure, if any.
func (d *Driver) injected(call string) (cu.Result, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[call]++
	if q := d.fails[call]; len(q) > 0 {
		d.fails[call] = q[1:]
		return q[0], true
	}
	return 0, false
}

var resultNames = map[cu.Result][2]string{
	cu.ErrInvalidValue:     {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	cu.ErrOutOfMemory:      {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	cu.ErrNotInitialized:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	cu.ErrDeinitialized:    {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	cu.ErrNoDevice:         {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	cu.ErrInvalidDevice:    {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	cu.ErrInvalidPTX:       {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	cu.ErrInvalidHandle:    {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	cu.ErrNotFound:         {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	cu.ErrNotReady:         {"CUDA_ERROR_NOT_READY", "device not ready"},
	cu.ErrIllegalAddress:   {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	cu.ErrLaunchOutOfRes:   {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	cu.ErrLaunchFailed:     {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	cu.ErrNotSupported:     {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	cu.ErrUnknown:          {"CUDA_ERROR_UNKNOWN", "unknown error"},
	cu.ErrUnsupportedPTX:   {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
	cu.ErrJITNotFound:      {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	cu.ErrSystemDriverMism: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
}

// errorOf builds the error the real driver would give for r.
func errorOf(call string, r cu.Result, detail string) *cu.Error {
	n, ok := resultNames[r]
	if !ok {
		n = [2]string{fmt.Sprintf("CUresult(%d)", r), ""}
	}
	return &cu.Error{Call: call, Code: int32(r), Name: n[0], Text: n[1], Detail: detail}
}

func (d *Driver) Info() cu.LibInfo {
	info := cu.LibInfo{DriverLib: "fake", DriverVersion: 12040}
	if d.opts.NoBLAS {
		info.BLASError = "cuBLAS not found (fake driver with NoBLAS)"
	} else {
		info.BLASLib, info.BLASVersion = "fake cuBLAS", 120405
	}
	return info
}

func (d *Driver) DeviceCount() (int, error) {
	if r, ok := d.injected("cuDeviceGetCount"); ok {
		return 0, errorOf("cuDeviceGetCount", r, "")
	}
	return d.opts.Devices, nil
}

func (d *Driver) Device(ordinal int) (cu.DeviceProps, error) {
	if ordinal < 0 || ordinal >= d.opts.Devices {
		return cu.DeviceProps{}, errorOf("cuDeviceGet", cu.ErrInvalidDevice, "")
	}
	return cu.DeviceProps{Name: d.opts.Name, TotalMem: d.opts.Memory, Major: d.opts.Major, Minor: d.opts.Minor, SMs: d.opts.SMs}, nil
}

// Open retains the primary context of GPU ordinal: the same *Context each
// time, until every retain is released.
func (d *Driver) Open(ordinal int) (cu.Context, error) {
	if _, err := d.Device(ordinal); err != nil {
		return nil, err
	}
	if r, ok := d.injected("cuDevicePrimaryCtxRetain"); ok {
		return nil, errorOf("cuDevicePrimaryCtxRetain", r, "")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.contexts[ordinal]
	if c == nil {
		c = newContext(d, ordinal)
		d.contexts[ordinal] = c
	}
	c.refs++
	return &handle{Context: c}, nil
}

// handle is one retain of a primary context; Close releases it once.
type handle struct {
	*Context
	once sync.Once
}

func (h *handle) Close() error {
	var err error = errorOf("cuDevicePrimaryCtxRelease_v2", cu.ErrInvalidValue, "released twice")
	h.once.Do(func() { err = h.release() })
	return err
}

// Context is a fake primary context: a GPU's memory, streams, events,
// modules and cuBLAS handles.
type Context struct {
	drv     *Driver
	ordinal int
	refs    int // under drv.mu

	mu      sync.Mutex
	sticky  *cu.Error // a kernel fault: every later call returns it
	allocs  []*alloc  // sorted by base
	next    uint64    // next device address
	used    int64
	streams map[cu.Stream]*fstream
	events  map[cu.Event]*fevent
	modules map[cu.Module]*module
	funcs   map[cu.Function]*function
	blas    map[cu.BLASHandle]*blasHandle
	ids     uintptr
	stats   Stats
}

// Stats counts what a context did, for tests.
type Stats struct {
	Launches       int // kernels run
	Copies         int // memcpys run on streams
	PageableCopies int // async host copies from or to memory that is not pinned
	CopyBytes      int64
}

func newContext(d *Driver, ordinal int) *Context {
	return &Context{
		drv: d, ordinal: ordinal, next: 0x7f00_0000_0000,
		streams: map[cu.Stream]*fstream{}, events: map[cu.Event]*fevent{},
		modules: map[cu.Module]*module{}, funcs: map[cu.Function]*function{},
		blas: map[cu.BLASHandle]*blasHandle{},
	}
}

// Context returns GPU ordinal's primary context while it is retained (for
// tests that look at its memory or statistics), or nil.
func (d *Driver) Context(ordinal int) *Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.contexts[ordinal]
}

// Stats returns the context's counters.
func (c *Context) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// MemoryUsed is the bytes of device memory allocated.
func (c *Context) MemoryUsed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

func (c *Context) release() error {
	d := c.drv
	if r, ok := d.injected("cuDevicePrimaryCtxRelease_v2"); ok {
		return errorOf("cuDevicePrimaryCtxRelease_v2", r, "")
	}
	d.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		delete(d.contexts, c.ordinal)
	}
	d.mu.Unlock()
	if !last {
		return nil
	}
	// Destroy: stop the streams, note what the device left behind.
	c.mu.Lock()
	var leaks []string
	var dev, host int
	for _, a := range c.allocs {
		if a.host {
			host++
		} else {
			dev++
		}
	}
	for what, n := range map[string]int{"device allocations": dev, "pinned host allocations": host,
		"streams": len(c.streams), "events": len(c.events), "modules": len(c.modules), "cuBLAS handles": len(c.blas)} {
		if n > 0 {
			leaks = append(leaks, fmt.Sprintf("cuda:%d: %d %s", c.ordinal, n, what))
		}
	}
	streams := c.streams
	c.streams = map[cu.Stream]*fstream{}
	c.mu.Unlock()
	for _, s := range streams {
		s.stop()
	}
	sort.Strings(leaks)
	d.mu.Lock()
	d.leaks = append(d.leaks, leaks...)
	d.mu.Unlock()
	return nil
}

// enter counts a call, returns an injected failure, or the sticky error.
func (c *Context) enter(call string) error {
	if r, ok := c.drv.injected(call); ok {
		if strings.HasPrefix(call, "cublas") {
			return cu.BLASError(call, cu.BLASStatus(r))
		}
		return errorOf(call, r, "injected by the fake driver")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sticky != nil {
		e := *c.sticky
		e.Call = call
		return &e
	}
	return nil
}

// fault makes err the context's sticky error (a kernel fault).
func (c *Context) fault(err *cu.Error) {
	c.mu.Lock()
	if c.sticky == nil {
		c.sticky = err
	}
	c.mu.Unlock()
}

func (c *Context) newID() uintptr {
	c.ids++
	return 0x1000 + lastID.Add(1)*16
}

// lastID numbers the handles of every context of the process, so that no
// two contexts (two ranks' fake GPUs in one test) hand out the same
// stream: a stand-in of a library that keys its work by stream (the NCCL
// stand-in) tells them apart.
var lastID atomic.Uintptr

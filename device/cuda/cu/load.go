package cu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// # Note [one context, many OS threads]
//
// The driver API keeps a "current context" per OS thread, while Go moves
// goroutines between threads at will. Two designs keep calls in the right
// context: one executor goroutine per device, locked to its thread with
// the context made current once, to which every call is sent; or
// runtime.LockOSThread and cuCtxSetCurrent around each call, on whichever
// thread the caller is.
//
// ferry does the second. The driver API is thread-safe and built to be
// called from many threads, and ferry does call it from several goroutines
// at once: the training goroutine launches kernels while offload workers
// wait on events and the allocator queries them. An executor would
// serialise all of that behind one queue, so that a worker blocked in
// cuEventSynchronize would stall every kernel launch behind it (or the
// executor would need a second path for blocking calls), and every call
// would pay a cross-thread hand-off of a few microseconds, as much as the
// launch itself. Setting the context costs one extra foreign call (about
// 0.1 µs), keeps callers independent, and needs no goroutine to start or
// stop. The primary context is the same object on every thread, so which
// thread runs a call makes no difference to the GPU.

// Load opens the CUDA driver (libcuda.so.1, or the path in FERRY_LIBCUDA)
// and, if it can, cuBLAS (the path in FERRY_CUBLAS, else libcublas.so.13,
// .12, .11), and initialises the driver. It runs once; later calls return
// the same result. The error, wrapping ErrUnavailable, says what is missing
// in words for people. A driver that loads but finds no GPU is returned
// without error: it has no devices, and Info().InitError says why.
func Load() (Driver, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

var (
	loadOnce sync.Once
	loaded   *lib
	loadErr  error
)

// ErrUnavailable is wrapped by Load's error when the driver library is
// missing or unusable; ErrNoGPU when it loads but sees no device.
var (
	ErrUnavailable = errors.New("cuda unavailable")
	ErrNoGPU       = errors.New("no CUDA device")
)

type lib struct {
	info LibInfo

	cuGetErrorName, cuGetErrorString, cuInit, cuDriverGetVersion                           uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceTotalMem, cuDeviceGetAttribute uintptr
	cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease, cuCtxSetCurrent, cuCtxSynchronize uintptr
	cuMemGetInfo, cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost                     uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync, cuMemcpyAsync                 uintptr
	cuMemsetD32Async                                                                       uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent                uintptr
	cuEventCreate, cuEventDestroy, cuEventRecord, cuEventQuery, cuEventSynchronize         uintptr
	cuModuleLoadDataEx, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel                uintptr

	blas     *blasLib // nil when cuBLAS could not be loaded
	noDevice bool     // cuInit said CUDA_ERROR_NO_DEVICE
}

func load() (*lib, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w: the CUDA device is supported on linux only, not %s", ErrUnavailable, runtime.GOOS)
	}
	names := []string{"libcuda.so.1", "libcuda.so"}
	if p := os.Getenv("FERRY_LIBCUDA"); p != "" {
		names = []string{p}
	}
	h, name, errs := dlopenFirst(names)
	if h == 0 {
		return nil, fmt.Errorf("%w: %s not found (%s); install the NVIDIA driver, or set FERRY_LIBCUDA to its path",
			ErrUnavailable, names[0], strings.Join(errs, "; "))
	}
	l := &lib{}
	syms := []struct {
		name string
		p    *uintptr
	}{
		{"cuGetErrorName", &l.cuGetErrorName}, {"cuGetErrorString", &l.cuGetErrorString},
		{"cuInit", &l.cuInit}, {"cuDriverGetVersion", &l.cuDriverGetVersion},
		{"cuDeviceGetCount", &l.cuDeviceGetCount}, {"cuDeviceGet", &l.cuDeviceGet},
		{"cuDeviceGetName", &l.cuDeviceGetName}, {"cuDeviceTotalMem_v2", &l.cuDeviceTotalMem},
		{"cuDeviceGetAttribute", &l.cuDeviceGetAttribute},
		{"cuDevicePrimaryCtxRetain", &l.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &l.cuDevicePrimaryCtxRelease},
		{"cuCtxSetCurrent", &l.cuCtxSetCurrent}, {"cuCtxSynchronize", &l.cuCtxSynchronize},
		{"cuMemGetInfo_v2", &l.cuMemGetInfo}, {"cuMemAlloc_v2", &l.cuMemAlloc}, {"cuMemFree_v2", &l.cuMemFree},
		{"cuMemHostAlloc", &l.cuMemHostAlloc}, {"cuMemFreeHost", &l.cuMemFreeHost},
		{"cuMemcpyHtoDAsync_v2", &l.cuMemcpyHtoDAsync}, {"cuMemcpyDtoHAsync_v2", &l.cuMemcpyDtoHAsync},
		{"cuMemcpyDtoDAsync_v2", &l.cuMemcpyDtoDAsync}, {"cuMemcpyAsync", &l.cuMemcpyAsync},
		{"cuMemsetD32Async", &l.cuMemsetD32Async},
		{"cuStreamCreate", &l.cuStreamCreate}, {"cuStreamDestroy_v2", &l.cuStreamDestroy},
		{"cuStreamSynchronize", &l.cuStreamSynchronize}, {"cuStreamWaitEvent", &l.cuStreamWaitEvent},
		{"cuEventCreate", &l.cuEventCreate}, {"cuEventDestroy_v2", &l.cuEventDestroy},
		{"cuEventRecord", &l.cuEventRecord}, {"cuEventQuery", &l.cuEventQuery},
		{"cuEventSynchronize", &l.cuEventSynchronize},
		{"cuModuleLoadDataEx", &l.cuModuleLoadDataEx}, {"cuModuleUnload", &l.cuModuleUnload},
		{"cuModuleGetFunction", &l.cuModuleGetFunction}, {"cuLaunchKernel", &l.cuLaunchKernel},
	}
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: %s has no symbol %s (driver too old?)", ErrUnavailable, name, s.name)
		}
		*s.p = p
	}
	l.info.DriverLib = mappedPath(name)
	v := new(int32)
	if r, _, _ := purego.SyscallN(l.cuDriverGetVersion, uintptr(unsafe.Pointer(v))); uint32(r) == 0 {
		l.info.DriverVersion = int(*v)
	}
	l.blas, l.info.BLASError = loadBLAS(l.info.DriverVersion)
	if l.blas != nil {
		l.info.BLASLib, l.info.BLASVersion = l.blas.path, l.blas.version
	}
	if r, _, _ := purego.SyscallN(l.cuInit, 0); uint32(r) != 0 {
		err := l.errorOf("cuInit", r)
		if Result(uint32(r)) != ErrNoDevice {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		// A driver without a GPU: report what was found, and no device.
		l.info.InitError = err.Error()
		l.noDevice = true
	}
	return l, nil
}

func dlopenFirst(names []string) (h uintptr, name string, errs []string) {
	for _, n := range names {
		hh, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return hh, n, errs
		}
		errs = append(errs, err.Error())
	}
	return 0, "", errs
}

// mappedPath finds where the dynamic loader found a library, from
// /proc/self/maps; it returns name itself when it cannot tell.
func mappedPath(name string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return name
	}
	defer f.Close()
	base := name
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		base = base[i+1:]
	}
	stem := strings.SplitN(base, ".so", 2)[0] + ".so"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[len(fields)-1]
		if i := strings.LastIndexByte(p, '/'); i >= 0 && strings.HasPrefix(p[i+1:], stem) {
			return p
		}
	}
	return name
}

func (l *lib) Info() LibInfo { return l.info }

// errorOf turns a failed CUresult into an *Error naming call.
func (l *lib) errorOf(call string, r uintptr) *Error {
	r = uintptr(uint32(r))
	e := &Error{Call: call, Code: int32(r)}
	var p *byte
	if rr, _, _ := purego.SyscallN(l.cuGetErrorName, r, uintptr(unsafe.Pointer(&p))); uint32(rr) == 0 && p != nil {
		e.Name = goString(p)
	} else {
		e.Name = fmt.Sprintf("CUresult(%d)", r)
	}
	p = nil
	if rr, _, _ := purego.SyscallN(l.cuGetErrorString, r, uintptr(unsafe.Pointer(&p))); uint32(rr) == 0 && p != nil {
		e.Text = goString(p)
	}
	return e
}

// check turns a CUresult into an error. A CUresult is a 32-bit enum: only
// the low half of the return register is the result (the upper half is
// whatever the callee left there).
func (l *lib) check(call string, r uintptr) error {
	if uint32(r) == 0 {
		return nil
	}
	return l.errorOf(call, r)
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func (l *lib) DeviceCount() (int, error) {
	if l.noDevice {
		return 0, nil
	}
	n := new(int32)
	if r, _, _ := purego.SyscallN(l.cuDeviceGetCount, uintptr(unsafe.Pointer(n))); uint32(r) != 0 {
		return 0, l.errorOf("cuDeviceGetCount", r)
	}
	return int(*n), nil
}

func (l *lib) device(ordinal int) (int32, error) {
	d := new(int32)
	if r, _, _ := purego.SyscallN(l.cuDeviceGet, uintptr(unsafe.Pointer(d)), uintptr(ordinal)); uint32(r) != 0 {
		return 0, l.errorOf("cuDeviceGet", r)
	}
	return *d, nil
}

// Attributes of cuDeviceGetAttribute (cuda.h).
const (
	attrMultiprocessorCount = 16
	attrComputeMajor        = 75
	attrComputeMinor        = 76
)

func (l *lib) Device(ordinal int) (DeviceProps, error) {
	var p DeviceProps
	dev, err := l.device(ordinal)
	if err != nil {
		return p, err
	}
	buf := make([]byte, 256)
	if r, _, _ := purego.SyscallN(l.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev)); uint32(r) != 0 {
		return p, l.errorOf("cuDeviceGetName", r)
	}
	p.Name = goString(&buf[0])
	mem := new(uint64)
	if r, _, _ := purego.SyscallN(l.cuDeviceTotalMem, uintptr(unsafe.Pointer(mem)), uintptr(dev)); uint32(r) != 0 {
		return p, l.errorOf("cuDeviceTotalMem_v2", r)
	}
	p.TotalMem = int64(*mem)
	for _, a := range []struct {
		attr uintptr
		dst  *int
	}{{attrComputeMajor, &p.Major}, {attrComputeMinor, &p.Minor}, {attrMultiprocessorCount, &p.SMs}} {
		v := new(int32)
		if r, _, _ := purego.SyscallN(l.cuDeviceGetAttribute, uintptr(unsafe.Pointer(v)), a.attr, uintptr(dev)); uint32(r) != 0 {
			return p, l.errorOf("cuDeviceGetAttribute", r)
		}
		*a.dst = int(*v)
	}
	return p, nil
}

func (l *lib) Open(ordinal int) (Context, error) {
	dev, err := l.device(ordinal)
	if err != nil {
		return nil, err
	}
	h := new(uintptr)
	if r, _, _ := purego.SyscallN(l.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(h)), uintptr(dev)); uint32(r) != 0 {
		return nil, l.errorOf("cuDevicePrimaryCtxRetain", r)
	}
	return &context{l: l, dev: dev, h: *h}, nil
}

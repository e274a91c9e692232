package cu

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Flags (cuda.h).
const (
	memHostAllocPortable = 0x01
	streamNonBlocking    = 0x1
	eventDisableTiming   = 0x2
	jitErrorLogBuffer    = 5
	jitErrorLogBufSize   = 6
)

// context is a retained primary context of the real driver. Every method
// makes it current on the calling OS thread first (see Note [one context,
// many OS threads]).
type context struct {
	l   *lib
	dev int32
	h   uintptr // CUcontext

	closeOnce sync.Once
}

// call runs fn(args...) with the context current on this OS thread and
// turns its CUresult into an error naming the call.
//
//go:uintptrescapes
func (c *context) call(name string, fn uintptr, args ...uintptr) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r, _, _ := purego.SyscallN(c.l.cuCtxSetCurrent, c.h); uint32(r) != 0 {
		return c.l.errorOf("cuCtxSetCurrent", r)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return c.l.check(name, r)
}

// callRaw is call for functions whose non-zero result is not always an
// error (cuEventQuery); it returns the raw result.
//
//go:uintptrescapes
func (c *context) callRaw(fn uintptr, args ...uintptr) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r, _, _ := purego.SyscallN(c.l.cuCtxSetCurrent, c.h); uint32(r) != 0 {
		return 0, c.l.errorOf("cuCtxSetCurrent", r)
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return r, nil
}

func (c *context) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r, _, _ := purego.SyscallN(c.l.cuCtxSetCurrent, c.h); uint32(r) != 0 {
		return c.l.errorOf("cuCtxSetCurrent", r)
	}
	return f()
}

func (c *context) Synchronize() error {
	return c.call("cuCtxSynchronize", c.l.cuCtxSynchronize)
}

func (c *context) MemGetInfo() (free, total int64, err error) {
	f, t := new(uint64), new(uint64)
	err = c.call("cuMemGetInfo_v2", c.l.cuMemGetInfo, uintptr(unsafe.Pointer(f)), uintptr(unsafe.Pointer(t)))
	return int64(*f), int64(*t), err
}

func (c *context) MemAlloc(n int64) (DevicePtr, error) {
	p := new(uint64)
	err := c.call("cuMemAlloc_v2", c.l.cuMemAlloc, uintptr(unsafe.Pointer(p)), uintptr(n))
	return DevicePtr(*p), err
}

func (c *context) MemFree(p DevicePtr) error {
	return c.call("cuMemFree_v2", c.l.cuMemFree, uintptr(p))
}

func (c *context) MemHostAlloc(n int64) (unsafe.Pointer, error) {
	p := new(unsafe.Pointer)
	err := c.call("cuMemHostAlloc", c.l.cuMemHostAlloc, uintptr(unsafe.Pointer(p)), uintptr(n), memHostAllocPortable)
	return *p, err
}

func (c *context) MemFreeHost(p unsafe.Pointer) error {
	return c.call("cuMemFreeHost", c.l.cuMemFreeHost, uintptr(p))
}

func (c *context) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int64, s Stream) error {
	return c.call("cuMemcpyHtoDAsync_v2", c.l.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (c *context) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int64, s Stream) error {
	return c.call("cuMemcpyDtoHAsync_v2", c.l.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (c *context) MemcpyDtoDAsync(dst, src DevicePtr, n int64, s Stream) error {
	return c.call("cuMemcpyDtoDAsync_v2", c.l.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (c *context) MemcpyHtoHAsync(dst, src unsafe.Pointer, n int64, s Stream) error {
	return c.call("cuMemcpyAsync", c.l.cuMemcpyAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s))
}

func (c *context) MemsetD32Async(dst DevicePtr, v uint32, n int64, s Stream) error {
	return c.call("cuMemsetD32Async", c.l.cuMemsetD32Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
}

func (c *context) StreamCreate() (Stream, error) {
	h := new(uintptr)
	err := c.call("cuStreamCreate", c.l.cuStreamCreate, uintptr(unsafe.Pointer(h)), streamNonBlocking)
	return Stream(*h), err
}

func (c *context) StreamDestroy(s Stream) error {
	return c.call("cuStreamDestroy_v2", c.l.cuStreamDestroy, uintptr(s))
}

func (c *context) StreamSynchronize(s Stream) error {
	return c.call("cuStreamSynchronize", c.l.cuStreamSynchronize, uintptr(s))
}

func (c *context) StreamWaitEvent(s Stream, e Event) error {
	return c.call("cuStreamWaitEvent", c.l.cuStreamWaitEvent, uintptr(s), uintptr(e), 0)
}

func (c *context) EventCreate() (Event, error) {
	h := new(uintptr)
	err := c.call("cuEventCreate", c.l.cuEventCreate, uintptr(unsafe.Pointer(h)), eventDisableTiming)
	return Event(*h), err
}

func (c *context) EventDestroy(e Event) error {
	return c.call("cuEventDestroy_v2", c.l.cuEventDestroy, uintptr(e))
}

func (c *context) EventRecord(e Event, s Stream) error {
	return c.call("cuEventRecord", c.l.cuEventRecord, uintptr(e), uintptr(s))
}

func (c *context) EventQuery(e Event) (bool, error) {
	r, err := c.callRaw(c.l.cuEventQuery, uintptr(e))
	switch {
	case err != nil:
		return false, err
	case uint32(r) == 0:
		return true, nil
	case Result(uint32(r)) == ErrNotReady:
		return false, nil
	}
	return false, c.l.errorOf("cuEventQuery", r)
}

func (c *context) EventSynchronize(e Event) error {
	return c.call("cuEventSynchronize", c.l.cuEventSynchronize, uintptr(e))
}

func (c *context) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 || image[len(image)-1] != 0 {
		image = append(append(make([]byte, 0, len(image)+1), image...), 0)
	}
	const logSize = 16 << 10
	// The option values are void*: the log buffer, and its size cast to a
	// pointer. The driver reaches the buffer only through that uintptr,
	// which neither escape analysis nor the garbage collector sees: a
	// buffer on the goroutine stack would move when the stack grows, and
	// the driver would write its log into freed memory, exactly when a JIT
	// fails. So the buffer is pinned: Pin moves it to the heap and keeps it
	// in place until Unpin. (The arrays passed directly as arguments escape
	// through call's go:uintptrescapes.)
	var pin runtime.Pinner
	defer pin.Unpin()
	log := make([]byte, logSize)
	pin.Pin(&log[0])
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufSize}
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), logSize}
	m := new(uintptr)
	err := c.call("cuModuleLoadDataEx", c.l.cuModuleLoadDataEx, uintptr(unsafe.Pointer(m)),
		uintptr(unsafe.Pointer(&image[0])), uintptr(len(opts)),
		uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	runtime.KeepAlive(log)
	runtime.KeepAlive(image)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Detail = goString(&log[0])
		}
		return 0, err
	}
	return Module(*m), nil
}

func (c *context) ModuleUnload(m Module) error {
	return c.call("cuModuleUnload", c.l.cuModuleUnload, uintptr(m))
}

func (c *context) ModuleGetFunction(m Module, name string) (Function, error) {
	cname := append([]byte(name), 0)
	f := new(uintptr)
	err := c.call("cuModuleGetFunction", c.l.cuModuleGetFunction, uintptr(unsafe.Pointer(f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if e, ok := err.(*Error); ok {
		e.Detail = "kernel " + name
	}
	return Function(*f), err
}

func (c *context) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, args *Args) error {
	ptrs := args.Pointers()
	var kp uintptr
	if len(ptrs) > 0 {
		kp = uintptr(unsafe.Pointer(&ptrs[0]))
	}
	err := c.call("cuLaunchKernel", c.l.cuLaunchKernel, uintptr(f),
		uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z),
		uintptr(sharedMem), uintptr(s), kp, 0)
	runtime.KeepAlive(args)
	runtime.KeepAlive(ptrs)
	return err
}

func (c *context) Close() error {
	var err error
	c.closeOnce.Do(func() {
		r, _, _ := purego.SyscallN(c.l.cuDevicePrimaryCtxRelease, uintptr(c.dev))
		err = c.l.check("cuDevicePrimaryCtxRelease_v2", r)
	})
	return err
}

package fake

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"time"
	"unsafe"

	"ferry/device/cuda/cu"
)

type module struct{ entries map[string]cu.Entry }

type function struct {
	entry cu.Entry
	run   kernelFunc
}

// kernelFunc runs one launch of a kernel, its whole grid (Note [one
// source per kernel]). It panics through launch.fail on a launch the
// kernel is not written for.
type kernelFunc func(k *launch)

func (c *Context) ModuleLoadData(image []byte) (cu.Module, error) {
	const call = "cuModuleLoadDataEx"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	entries, err := cu.ParsePTX(image)
	if err != nil {
		return 0, errorOf(call, cu.ErrInvalidPTX, err.Error())
	}
	m := &module{entries: map[string]cu.Entry{}}
	for _, e := range entries {
		m.entries[e.Name] = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := cu.Module(c.newID())
	c.modules[h] = m
	return h, nil
}

func (c *Context) ModuleUnload(h cu.Module) error {
	const call = "cuModuleUnload"
	if err := c.enter(call); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.modules[h] == nil {
		return errorOf(call, cu.ErrInvalidHandle, "")
	}
	delete(c.modules, h)
	return nil
}

func (c *Context) ModuleGetFunction(h cu.Module, name string) (cu.Function, error) {
	const call = "cuModuleGetFunction"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.modules[h]
	if m == nil {
		return 0, errorOf(call, cu.ErrInvalidHandle, "")
	}
	e, ok := m.entries[name]
	if !ok {
		return 0, errorOf(call, cu.ErrNotFound, "kernel "+name+" is not in the module")
	}
	run := kernelsByName[name]
	if run == nil {
		return 0, errorOf(call, cu.ErrNotFound, "the fake driver does not know kernel "+name)
	}
	f := cu.Function(c.newID())
	c.funcs[f] = &function{entry: e, run: run}
	return f, nil
}

// LaunchKernel checks the launch as the driver would (and a little more:
// the parameter bytes must be exactly as many as the PTX declares), copies
// the parameters, and queues the kernel on the stream.
func (c *Context) LaunchKernel(f cu.Function, grid, block cu.Dim3, sharedMem uint32, s cu.Stream, args *cu.Args) error {
	const call = "cuLaunchKernel"
	if err := c.enter(call); err != nil {
		return err
	}
	c.mu.Lock()
	fn := c.funcs[f]
	c.mu.Unlock()
	if fn == nil {
		return errorOf(call, cu.ErrInvalidHandle, "no such function")
	}
	name := fn.entry.Name
	if err := c.enter(call + "/" + name); err != nil {
		return err
	}
	st, err := c.stream(call, s)
	if err != nil {
		return err
	}
	if err := checkShape(grid, block); err != nil {
		return errorOf(call, cu.ErrInvalidValue, name+": "+err.Error())
	}
	if args.Len() != len(fn.entry.Params) {
		return errorOf(call, cu.ErrInvalidValue, fmt.Sprintf("%s takes %d parameters, got %d", name, len(fn.entry.Params), args.Len()))
	}
	params := make([][]byte, args.Len())
	for i, want := range fn.entry.Params {
		if got := args.Size(i); got != want {
			return errorOf(call, cu.ErrInvalidValue, fmt.Sprintf("%s: parameter %d is %d bytes in the PTX, %d given", name, i, want, got))
		}
		params[i] = append([]byte(nil), args.Param(i)...)
	}
	delay := c.drv.opts.KernelDelay
	st.enqueue(func() *cu.Error {
		if c.faulted() {
			return nil
		}
		if r, ok := c.drv.injected("kernel/" + name); ok {
			_ = r
			return errorOf(name, cu.ErrIllegalAddress, "kernel "+name+": fault injected by the fake driver")
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		c.mu.Lock()
		c.stats.Launches++
		c.mu.Unlock()
		return c.run(name, fn.run, &launch{mem: c.deviceTail, name: name, grid: grid, block: block, params: params})
	})
	return nil
}

func checkShape(grid, block cu.Dim3) error {
	switch {
	case grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0:
		return fmt.Errorf("empty grid %v or block %v", grid, block)
	case grid.X > math.MaxInt32 || grid.Y > 65535 || grid.Z > 65535:
		return fmt.Errorf("grid %v beyond (2³¹-1, 65535, 65535)", grid)
	case block.X > 1024 || block.Y > 1024 || block.Z > 64 || block.Threads() > 1024:
		return fmt.Errorf("block %v beyond 1024 threads", block)
	}
	return nil
}

func (c *Context) faulted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sticky != nil
}

// run runs a launch, turning a panic (an access out of bounds, an
// unexpected launch shape) into the fault a GPU would report.
func (c *Context) run(name string, fn kernelFunc, k *launch) *cu.Error {
	return runKernel(name, fn, k)
}

// RunKernel runs a launch of kernel name as the fake driver runs it, over
// the memory that mem maps device addresses to (the bytes from an address
// to the end of its allocation; false when the address is not device
// memory). params are
// the parameters' bytes, as many of each as the PTX declares. A fault (an
// access out of bounds, a launch shape the kernel is not written for) is
// returned as the *cu.Error a GPU would report; an unknown kernel as
// CUDA_ERROR_NOT_FOUND. The stand-in driver (package
// ferry/device/cuda/standin) runs kernels through it.
func RunKernel(name string, grid, block cu.Dim3, params [][]byte, mem func(p uint64) ([]byte, bool)) error {
	fn := kernelsByName[name]
	if fn == nil {
		return errorOf(name, cu.ErrNotFound, "the fake driver does not know kernel "+name)
	}
	if err := runKernel(name, fn, &launch{mem: mem, name: name, grid: grid, block: block, params: params}); err != nil {
		return err
	}
	return nil
}

func runKernel(name string, fn kernelFunc, k *launch) (err *cu.Error) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprint(r)
			if !strings.Contains(msg, "fake:") {
				msg += "\n" + string(debug.Stack())
			}
			err = errorOf(name, cu.ErrIllegalAddress, "kernel "+name+": "+msg)
		}
	}()
	fn(k)
	return nil
}

// launch is one kernel launch: its grid and parameter bytes.
type launch struct {
	mem         func(p uint64) ([]byte, bool) // device memory from p to the end of its allocation
	name        string
	grid, block cu.Dim3
	params      [][]byte
}

func (k *launch) fail(format string, args ...any) {
	panic(fmt.Sprintf("fake: "+k.name+": "+format, args...))
}

func (k *launch) u64(i int) uint64 { return binary.LittleEndian.Uint64(k.params[i]) }
func (k *launch) i64(i int) int64  { return int64(k.u64(i)) }
func (k *launch) i32(i int) int32  { return int32(binary.LittleEndian.Uint32(k.params[i])) }
func (k *launch) f32(i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(k.params[i]))
}

// field reads the j-th 64-bit field of struct parameter i.
func (k *launch) field(i, j int) int64 { return int64(binary.LittleEndian.Uint64(k.params[i][8*j:])) }

// mem returns device memory from pointer parameter i to the end of its
// allocation, as elements of T (a null pointer gives nil).
func mem[T any](k *launch, i int) []T {
	p := k.u64(i)
	if p == 0 {
		return nil
	}
	b, ok := k.mem(p)
	if !ok {
		k.fail("parameter %d: %#x is not device memory", i, p)
	}
	var zero T
	size := int64(unsafe.Sizeof(zero))
	if p%uint64(size) != 0 {
		k.fail("parameter %d: %#x is not aligned to %d bytes", i, p, size)
	}
	n := int64(len(b)) / size
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// Package cuda is ferry's NVIDIA GPU device. Importing it registers the
// "cuda" kind with package device; device.Open("cuda:0", opts) opens the
// first GPU, or says in words why it cannot ("cuda unavailable: libcuda.so.1
// not found …", "no CUDA device").
//
// Nothing here needs cgo: the driver API (libcuda.so.1) and cuBLAS are
// loaded at run time through package cu, which also says how calls find
// their context (Note [one context, many OS threads] in cu/load.go).
//
// Memory comes from cuMemAlloc through the caching allocator of package
// device, so statistics, capacity caps and out-of-memory errors work as on
// every device. Host() is a CPU device over page-locked (pinned) host
// memory from cuMemHostAlloc, with an allocator of its own: a reusable
// pinned pool whose bytes are counted apart, on which host tensors run the
// CPU kernels. Copy moves bytes between the two with cuMemcpy*Async on the
// stream it is given.
//
// Kernels are CUDA C (kernels/*.cu), compiled to PTX by `go generate` and
// embedded; the driver JIT-compiles them for the GPU at Open. Matrix
// products go to cuBLAS (FP32 by default; TF32 with the "tf32" parameter, as
// PyTorch's allow_tf32), or to a plain kernel of ferry's own when cuBLAS
// cannot be loaded. Everything else runs on the kernels, with the same
// arithmetic as the CPU device's, operation by operation.
//
// bfloat16 (Note [bfloat16] in package device) reaches three places:
// Convert (ferry_convert_strided: float32 to bfloat16 rounds with
// device.ToBFloat16's bits, in integer operations); products with
// bfloat16 operands, through cublasGemmStridedBatchedEx with float32
// compute (CUBLAS_COMPUTE_32F), or ferry_gemm_bf16 where cuBLAS is absent
// or has no bfloat16 kernel for the GPU; and Unary, Binary, Sum and
// Dropout, which take bfloat16 views in one pass (Note [bfloat16
// elementwise on the GPU]). A view's Off and strides count elements of its
// own DType.
//
// Every kernel runs on the compute stream, a stream the device creates (not
// the legacy default stream), asynchronously: a kernel's error surfaces at
// the next synchronisation, as CUDA's do.
//
// # Streams and fresh blocks
//
// Unlike the CPU device's, this compute stream runs behind the caller. The
// allocator reuses a freed block at once, in compute-stream order (as
// PyTorch's does): work later on the compute stream comes after the old
// user's, but a side stream does not. A side stream that writes into a
// freshly allocated block must first Wait for an event recorded on
// Compute(); one that reads a block compute produced, likewise. Waiting on
// an event of another device (a CPU stream's) blocks the caller until it
// completes, since a CUDA stream cannot wait for Go code.
package cuda

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"ferry/device"
	"ferry/device/cpu"
	"ferry/device/cuda/cu"
)

func init() { device.Register("cuda", driver{}) }

type driver struct{}

func (driver) Open(index int, opts device.Options) (device.Device, error) {
	drv, err := cu.Load()
	if err != nil {
		return nil, err
	}
	return Open(drv, index, opts)
}

// Device is one GPU.
type Device struct {
	name  string
	ctx   cu.Context
	props cu.DeviceProps
	alloc *device.Allocator
	host  *cpu.Device

	compute *stream
	kern    *kernels

	// Modules and the kernels found in them, by name.
	modules []cu.Module
	funcs   map[string]cu.Function

	// cuBLAS, or the reason it is not used (then ferry_gemm runs).
	blas      cu.BLASHandle
	blasErr   error
	wsSize    int64         // workspace handed to cuBLAS at the first product
	workspace *device.Block // nil until then
	tf32      bool
	noBLAS    bool // the "cublas" parameter is false
	index64   bool // the "index64" parameter is true

	closed atomic.Bool

	mu       sync.Mutex
	streams  []*stream
	evFree   []cu.Event        // recycled events
	evAll    map[cu.Event]bool // every event created, for Close
	asyncErr error             // first error of work that could not report one
}

// Params understood by Open (device.Options.Params).
var knownParams = []string{"tf32", "cublas_workspace", "host_capacity", "cublas", "index64"}

// Open opens GPU index of drv. Tests pass the fake driver of package
// ferry/device/cuda/fake; device.Open("cuda:N") passes the real one.
//
// Params: "tf32" (true/false: let cuBLAS use TF32 tensor cores for FP32
// products), "cublas_workspace" (bytes of workspace for cuBLAS, allocated
// at the first product and counted as workspace; default as PyTorch: 32 MiB
// on compute capability 9.x, 8.125 MiB otherwise; 0 leaves cuBLAS its own),
// "host_capacity" (a cap, in bytes, on the pinned host pool), and two for
// tests that reach every kernel: "cublas" (false: products go to ferry's
// own SGEMM kernel even where cuBLAS loads) and "index64" (true: strided
// kernels always take their 64-bit index variant).
func Open(drv cu.Driver, index int, opts device.Options) (_ *Device, err error) {
	name := fmt.Sprintf("cuda:%d", index)
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n == 0 {
		if why := drv.Info().InitError; why != "" {
			return nil, fmt.Errorf("%s: %w (%s)", name, cu.ErrNoGPU, why)
		}
		return nil, fmt.Errorf("%s: %w", name, cu.ErrNoGPU)
	}
	if index >= n {
		return nil, fmt.Errorf("%s: there are %d CUDA devices (cuda:0 to cuda:%d)", name, n, n-1)
	}
	props, err := drv.Device(index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d := &Device{name: name, props: props, funcs: map[string]cu.Function{}, evAll: map[cu.Event]bool{}}
	d.wsSize = 4096*2<<10 + 16*8<<10 // PyTorch's default, ":4096:2:16:8"
	if props.Major >= 9 {
		d.wsSize = 4096 * 8 << 10 // ":4096:8", PyTorch's default on Hopper
	}
	var hostCap int64
	for k, v := range opts.Params {
		switch k {
		case "tf32":
			if d.tf32, err = strconv.ParseBool(v); err != nil {
				return nil, fmt.Errorf("%s: tf32=%q: want true or false", name, v)
			}
		case "cublas_workspace":
			if d.wsSize, err = strconv.ParseInt(v, 10, 64); err != nil || d.wsSize < 0 {
				return nil, fmt.Errorf("%s: cublas_workspace=%q: want a number of bytes", name, v)
			}
		case "cublas", "index64":
			on, perr := strconv.ParseBool(v)
			if perr != nil {
				return nil, fmt.Errorf("%s: %s=%q: want true or false", name, k, v)
			}
			if k == "cublas" {
				d.noBLAS = !on
			} else {
				d.index64 = on
			}
		case "host_capacity":
			if hostCap, err = strconv.ParseInt(v, 10, 64); err != nil || hostCap < 0 {
				return nil, fmt.Errorf("%s: host_capacity=%q: want a number of bytes", name, v)
			}
		default:
			return nil, fmt.Errorf("%s: unknown parameter %q (known: %s)", name, k, strings.Join(knownParams, ", "))
		}
	}
	if d.ctx, err = drv.Open(index); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	h, err := d.ctx.StreamCreate()
	if err != nil {
		return nil, fmt.Errorf("%s: compute stream: %w", name, err)
	}
	d.compute = &stream{d: d, name: "compute", h: h}
	if err := d.loadKernels(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d.initBLAS()
	d.alloc = device.NewAllocator(&devMemory{d: d}, device.AllocatorConfig{
		Name: name, Capacity: opts.Capacity, PoisonFreed: opts.PoisonFreed,
	})
	d.kern = &kernels{d: d}
	host, err := cpu.NewOver(name+" pinned host", &hostMemory{d: d}, device.Options{PoisonFreed: opts.PoisonFreed, Capacity: hostCap})
	if err != nil {
		return nil, fmt.Errorf("%s: host: %w", name, err)
	}
	d.host = host
	return d, nil
}

// initBLAS creates the cuBLAS handle on the compute stream, or records why
// there is none.
func (d *Device) initBLAS() {
	if d.noBLAS {
		d.blasErr = errors.New("the cublas parameter is false")
		return
	}
	h, err := d.ctx.BLASCreate()
	if err != nil {
		d.blasErr = err
		return
	}
	d.blas = h
	if err := d.ctx.BLASSetStream(h, d.compute.h); err != nil {
		d.blasErr = err
		return
	}
	if err := d.setMathMode(); err != nil {
		d.blasErr = err
	}
}

func (d *Device) setMathMode() error {
	mode := cu.DefaultMath
	if d.tf32 {
		mode = cu.TF32Math
	}
	return d.ctx.BLASSetMathMode(d.blas, mode)
}

// SetTF32 lets (or forbids) cuBLAS run FP32 matrix products on TF32 tensor
// cores (PyTorch: torch.backends.cuda.matmul.allow_tf32). It has no effect
// without cuBLAS.
func (d *Device) SetTF32(on bool) error {
	d.tf32 = on
	if d.blas == 0 || d.blasErr != nil {
		return nil
	}
	return d.setMathMode()
}

// MatmulBackend says what runs matrix products: "cuBLAS (FP32)", "cuBLAS
// (TF32)" or ferry's own kernel and why.
func (d *Device) MatmulBackend() string {
	if d.blasErr != nil {
		return "ferry's tiled SGEMM kernel (slow), because " + d.blasErr.Error()
	}
	if d.tf32 {
		return "cuBLAS (TF32)"
	}
	return "cuBLAS (FP32)"
}

// Props describe the GPU.
func (d *Device) Props() cu.DeviceProps { return d.props }

// Context is the device's driver context, for code that needs a call this
// package does not make (benchmarks).
func (d *Device) Context() cu.Context { return d.ctx }

func (d *Device) Name() string                 { return d.name }
func (d *Device) Allocator() *device.Allocator { return d.alloc }
func (d *Device) Compute() device.Stream       { return d.compute }
func (d *Device) Kernels() device.Kernels      { return d.kern }

// Host is the CPU device over this GPU's pinned host pool.
func (d *Device) Host() device.Device { return d.host }

// NewStream creates a non-blocking side stream; it lives until Close.
func (d *Device) NewStream(name string) (device.Stream, error) {
	if d.closed.Load() {
		return nil, fmt.Errorf("%s: NewStream on a closed device", d.name)
	}
	h, err := d.ctx.StreamCreate()
	if err != nil {
		return nil, fmt.Errorf("%s: stream %q: %w", d.name, name, err)
	}
	s := &stream{d: d, name: name, h: h}
	d.mu.Lock()
	d.streams = append(d.streams, s)
	d.mu.Unlock()
	return s, nil
}

// noteAsync keeps the first error of work that had no caller to report it
// to (poisoning a freed block); the compute stream's next Synchronize
// returns it.
func (d *Device) noteAsync(err error) {
	d.mu.Lock()
	if d.asyncErr == nil {
		d.asyncErr = err
	}
	d.mu.Unlock()
}

// Close waits for the GPU, then releases the host pool, the device's
// memory, streams, events, cuBLAS, the kernels and the primary context.
// Blocks still allocated are released too.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: close: %s: %w", d.name, what, err))
		}
	}
	if d.ctx == nil {
		return nil
	}
	add("synchronize", d.ctx.Synchronize())
	if d.host != nil {
		add("host pool", d.host.Close())
	}
	if d.workspace != nil {
		d.alloc.Free(d.workspace)
		d.workspace = nil
	}
	if d.alloc != nil {
		add("memory", d.alloc.Close())
	}
	if d.blas != 0 {
		add("cublas", d.ctx.BLASDestroy(d.blas))
	}
	d.mu.Lock()
	streams := d.streams
	events := d.evAll
	d.streams, d.evAll, d.evFree = nil, nil, nil
	d.mu.Unlock()
	for _, s := range streams {
		add("stream "+s.name, d.ctx.StreamDestroy(s.h))
	}
	if d.compute != nil {
		add("compute stream", d.ctx.StreamDestroy(d.compute.h))
	}
	for e := range events {
		add("event", d.ctx.EventDestroy(e))
	}
	for _, m := range d.modules {
		add("module", d.ctx.ModuleUnload(m))
	}
	add("context", d.ctx.Close())
	return errors.Join(errs...)
}

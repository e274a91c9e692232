// Package cpu is ferry's CPU device. Importing it registers the "cpu" kind
// with package device.
//
// Memory comes from anonymous mmap, outside the Go heap, through the caching
// allocator in package device: the garbage collector never frees a tensor's
// bytes, and flushing the cache really lowers the process's resident memory.
//
// Kernels run on the caller's goroutine (the compute stream is synchronous),
// spreading large loops over GOMAXPROCS goroutines. Side streams each run on
// a goroutine of their own, so a copy really overlaps compute.
//
// Float32 matrix products run on a pure-Go kernel (package internal/gemm)
// or on OpenBLAS, loaded at run time with purego where it is installed
// (package internal/blas). The library is chosen per product by its shape
// class, from a table `ferry tune` measured on this machine (Note [matmul
// table]); a class the table does not hold, or a machine without a table,
// follows a fixed rule (matmulMode: pure Go where the CPU has AVX-512,
// OpenBLAS elsewhere). Without OpenBLAS, or with FERRY_BLAS=off, every
// product runs in pure Go; FERRY_MATMUL=go|blas forces one library, and
// MatmulBackend says which runs and why. bfloat16 products always run in
// pure Go.
//
// Host memory (Device.Host) is a second CPU device with its own allocator, so
// that bytes offloaded "to the host" are counted apart from the device's,
// even though both live in the same RAM.
package cpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"ferry/device"
	"ferry/internal/blas"
)

func init() { device.Register("cpu", driver{}) }

type driver struct{}

func (driver) Open(index int, opts device.Options) (device.Device, error) {
	if index != 0 {
		return nil, fmt.Errorf("cpu:%d: there is one CPU device, cpu:0", index)
	}
	if err := blas.EnvError(); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	if opts.Capacity == 0 {
		// Opened by name (the CLI, a user's program): cap at the memory the
		// machine has free now, so that a step too large for it fails with
		// an out-of-memory error and its figures instead of being killed
		// by the kernel. New leaves the device uncapped.
		opts.Capacity = AvailableMemory() / 10 * 9
	}
	return New(opts)
}

// AvailableMemory is MemAvailable from /proc/meminfo: what the machine can
// give this process without swapping, or 0 where it cannot be read.
func AvailableMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb > 0 {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// Device is the CPU device.
type Device struct {
	name      string
	alloc     *device.Allocator
	compute   *inlineStream
	kern      *kernels
	copyDelay time.Duration
	poison    bool

	mu      sync.Mutex
	streams []*workerStream
	host    *Device // nil until first asked for; a host's host is itself
	isHost  bool
	closed  bool
}

// New opens a CPU device. Params understood: "copy_delay" (a duration added
// to every copy on a side stream; for tests that need a copy to be slow).
func New(opts device.Options) (*Device, error) {
	return newDevice("cpu", opts, false)
}

// NewOver opens a CPU device whose memory comes from mem, each of whose
// segments must implement Segment: an accelerator's pinned host memory,
// serving as that accelerator's Host(). Its Host is itself.
func NewOver(name string, mem device.Memory, opts device.Options) (*Device, error) {
	return newDeviceOver(name, mem, opts, true)
}

func newDevice(name string, opts device.Options, isHost bool) (*Device, error) {
	return newDeviceOver(name, memory{}, opts, isHost)
}

func newDeviceOver(name string, mem device.Memory, opts device.Options, isHost bool) (*Device, error) {
	d := &Device{name: name, isHost: isHost, poison: opts.PoisonFreed}
	for k, v := range opts.Params {
		switch k {
		case "copy_delay":
			dur, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("cpu: copy_delay=%q: %v", v, err)
			}
			d.copyDelay = dur
		default:
			return nil, fmt.Errorf("cpu: unknown parameter %q (known: copy_delay)", k)
		}
	}
	d.alloc = device.NewAllocator(poisoning{mem}, device.AllocatorConfig{
		Name: name, Capacity: opts.Capacity, PoisonFreed: opts.PoisonFreed,
	})
	d.compute = &inlineStream{}
	d.kern = &kernels{}
	if isHost {
		d.host = d
	}
	return d, nil
}

func (d *Device) Name() string                 { return d.name }
func (d *Device) Allocator() *device.Allocator { return d.alloc }
func (d *Device) Compute() device.Stream       { return d.compute }
func (d *Device) Kernels() device.Kernels      { return d.kern }

// Host returns the device holding this device's host memory, creating it on
// first use. It shares this device's poisoning but has no capacity cap.
func (d *Device) Host() device.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.host == nil {
		// After Close the new host is closed too: it must not outlive the device.
		h, _ := newDevice(d.name+" host", device.Options{PoisonFreed: d.poison}, true)
		d.host = h
		if d.closed {
			h.Close()
		}
	}
	return d.host
}

// NewStream starts a side stream on its own goroutine.
func (d *Device) NewStream(name string) (device.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("%s: NewStream: %w", d.name, device.ErrClosed)
	}
	s := newWorkerStream(name, d.copyDelay)
	d.streams = append(d.streams, s)
	return s, nil
}

// Copy copies src to dst on s. Both spans must be CPU memory (this device's
// or its host's).
func (d *Device) Copy(s device.Stream, dst, src device.Span) error {
	if d.alloc.Closed() {
		return fmt.Errorf("%s: copy: %w", d.name, device.ErrClosed)
	}
	if dst.Len != src.Len {
		return fmt.Errorf("%s: copy of %d bytes into a span of %d", d.name, src.Len, dst.Len)
	}
	db, sb := spanBytes(dst), spanBytes(src)
	switch st := s.(type) {
	case *inlineStream:
		copy(db, sb)
		return nil
	case *workerStream:
		return st.enqueue(func() error {
			copy(db, sb)
			return nil
		}, true)
	default:
		return fmt.Errorf("%s: Copy on a stream of another device (%T)", d.name, s)
	}
}

// Close stops the side streams and releases all memory. Afterwards
// allocations, copies and new streams fail with device.ErrClosed, and
// frees do nothing; the tensor layer refuses to use tensors on it.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	streams, host := d.streams, d.host
	d.mu.Unlock()
	for _, s := range streams {
		s.stop()
	}
	var hostErr error
	if host != nil && host != d {
		hostErr = host.Close()
	}
	if err := d.alloc.Close(); err != nil {
		return err
	}
	return hostErr
}

// Segment is what the memory under a CPU device hands out: bytes the
// process can address.
type Segment interface{ Bytes() []byte }

// memory reserves segments with mmap.
type memory struct{}

type segment struct{ mem []byte }

func (s *segment) Bytes() []byte { return s.mem }

// poisoning gives any CPU memory the ability to poison freed blocks.
type poisoning struct{ device.Memory }

func (poisoning) Poison(s device.Segment, off, n int64) {
	f := bytesAsFloats(s.(Segment).Bytes()[off : off+n])
	nan := float32NaN()
	for i := range f {
		f[i] = nan
	}
}

func (memory) Reserve(size int64) (device.Segment, error) {
	b, err := mapAnon(size)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return &segment{mem: b}, nil
}

func (memory) Release(s device.Segment) error { return unmapAnon(s.(*segment).mem) }

// Bytes returns the memory of a CPU block (device or host), len Size().
// The slice is valid until the block is freed.
func Bytes(b *device.Block) []byte {
	seg, ok := b.Segment().(Segment)
	if !ok {
		panic(fmt.Sprintf("cpu: block of another device (%T)", b.Segment()))
	}
	return seg.Bytes()[b.Offset() : b.Offset()+b.Size()]
}

func spanBytes(s device.Span) []byte { return Bytes(s.Block)[s.Off : s.Off+s.Len] }

func bytesAsFloats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// floats returns the float32 elements a view can reach, starting at its
// offset.
func floats(v device.View) []float32 { return bytesAsFloats(Bytes(v.Block))[v.Off:] }

func int32s(v device.View) []int32 {
	b := Bytes(v.Block)
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), len(b)/4)[v.Off:]
}

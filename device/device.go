// Package device defines what ferry asks of a compute device: memory handed
// out by a caching allocator that keeps PyTorch-shaped statistics, streams and
// events that order asynchronous work, copies between the device and its
// host, and a small set of kernels.
//
// A device knows nothing of tensors or autograd. Implementations live in
// sub-packages (device/cpu, device/meta, device/cuda) and register themselves
// by name, as database/sql drivers do:
//
//	import _ "ferry/device/cpu"
//	dev, err := device.Open("cpu", device.Options{})
//
// Abilities that only some devices have are optional interfaces, found by type
// assertion; ErrNotSupported says a device lacks one.
package device

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Device is one compute device: the CPU, a GPU, or the shape-only meta
// device.
//
// Work on a device is issued from one goroutine at a time (the goroutine
// that trains); the allocator and streams are safe for concurrent use, so
// copy and disk workers may run beside it.
type Device interface {
	// Name is how the device is written on the command line: "cpu",
	// "cuda:0", "meta".
	Name() string

	// Allocator hands out this device's memory and keeps its statistics.
	Allocator() *Allocator

	// Compute is the stream that kernels run on. On the CPU device it runs
	// on the caller's goroutine; on a GPU it is asynchronous.
	Compute() Stream

	// NewStream creates a side stream, for copies that should overlap
	// compute. The stream lives as long as the device.
	NewStream(name string) (Stream, error)

	// Host is the device that holds this device's host memory: the place
	// offloaded tensors go. On a GPU its memory is pinned; on the CPU
	// device it is a second CPU device with an allocator of its own, so
	// that device and host bytes are counted apart.
	Host() Device

	// Copy enqueues on s a copy of len(src) bytes from src to dst. Each of
	// dst and src is a span of this device's memory or of Host()'s. The
	// caller keeps both blocks alive (and, for blocks it may free before s
	// reaches the copy, calls Allocator().RecordStream) until the copy has
	// finished, which an event recorded on s after the call tells.
	Copy(s Stream, dst, src Span) error

	// Kernels runs the arithmetic, on the compute stream.
	Kernels() Kernels

	// Close releases the device's streams and cached memory. Blocks still
	// allocated are released too: afterwards the allocator refuses memory
	// with ErrClosed and ignores frees (see Allocator.Close), Copy and
	// NewStream return errors wrapping ErrClosed, and the tensor layer
	// refuses the device's tensors with an error before any kernel could
	// touch their memory.
	Close() error
}

// Stream is an ordered queue of work on a device. Work enqueued on one
// stream runs in order; events order streams against each other and against
// the host.
type Stream interface {
	// Name identifies the stream in traces: "compute", "d2h", "h2d".
	Name() string

	// Record returns an event that completes when all work enqueued on the
	// stream before the call has finished.
	Record() Event

	// Wait makes work enqueued on the stream after the call wait until e
	// has completed. It does not block the caller (except on a stream that
	// runs on the caller's goroutine, where waiting is the only way).
	Wait(e Event)

	// Synchronize blocks until all work enqueued so far has finished and
	// returns the first error any of it produced.
	Synchronize() error
}

// Event marks a point in a stream's work.
type Event interface {
	// Done reports, without blocking, whether the work before the event has
	// finished.
	Done() bool
	// Synchronize blocks until the event has completed and returns the
	// first error the stream's work produced up to that point.
	Synchronize() error
}

// Span is a range of bytes inside a block.
type Span struct {
	Block *Block
	Off   int64 // bytes from the start of the block
	Len   int64 // bytes
}

// Whole returns the span covering all requested bytes of b.
func Whole(b *Block) Span { return Span{Block: b, Len: b.Requested()} }

// ErrNotSupported is returned (wrapped) when a device lacks an optional
// ability.
var ErrNotSupported = errors.New("not supported by this device")

// Options configure a device when it is opened. The zero value asks for the
// device's defaults.
type Options struct {
	// Capacity caps the bytes the device's allocator may reserve, below
	// what the hardware has; 0 means the hardware's limit (unlimited on the
	// CPU). With a cap, out-of-memory behaviour is testable anywhere.
	Capacity int64
	// PoisonFreed fills every block with NaN when it becomes reusable, so
	// a use after free shows up as a wrong number. For tests.
	PoisonFreed bool
	// Driver-specific settings, as key=value strings (for example
	// "copy_delay=5ms" on the CPU device).
	Params map[string]string
}

// Driver opens devices of one kind.
type Driver interface {
	// Open opens the device with the given index ("cuda:1" gives 1).
	Open(index int, opts Options) (Device, error)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a driver available under a kind name ("cpu", "cuda",
// "meta"). It panics if the name is taken, as database/sql.Register does.
func Register(kind string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[kind]; dup {
		panic("device: Register called twice for " + kind)
	}
	drivers[kind] = d
}

// Kinds lists the registered kinds, sorted.
func Kinds() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	var ks []string
	for k := range drivers {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Open opens a device by name: a kind, optionally followed by ":index".
func Open(name string, opts Options) (Device, error) {
	kind, index, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	driversMu.RLock()
	d, ok := drivers[kind]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("device %q: no driver for %q (known: %s); import the driver package, e.g. _ \"ferry/device/%s\"",
			name, kind, strings.Join(Kinds(), ", "), kind)
	}
	return d.Open(index, opts)
}

// ParseName splits "cuda:1" into ("cuda", 1); a name without an index gets 0.
func ParseName(name string) (kind string, index int, err error) {
	kind, idx, found := strings.Cut(name, ":")
	if kind == "" {
		return "", 0, fmt.Errorf("device name %q: empty kind", name)
	}
	if found {
		var err error
		if index, err = strconv.Atoi(idx); err != nil || index < 0 || strings.TrimSpace(idx) != idx {
			return "", 0, fmt.Errorf("device name %q: index %q is not a non-negative integer", name, idx)
		}
	}
	return kind, index, nil
}

// Package dist is ferry's collective layer: the few operations that data
// parallel training needs across processes (all-reduce, reduce-scatter,
// all-gather, broadcast, barrier) over float32 buffers, behind one small
// interface that every backend implements.
//
// Backends:
//
//   - Local (this package): one rank, no communication. Every caller of
//     Comm works unchanged in a single process.
//   - ferry/dist/mpi: Open MPI's C library, loaded at run time with purego
//     (docs/design.md, decisions 6 and 16), over host memory.
//   - ferry/dist/nccl: a binding of NCCL for device memory on CUstreams.
//
// Collectives are asynchronous, as device work is (docs/design.md,
// decision 4): each returns a device.Event that completes when the result
// is in place, and carries the collective's error. Between the call and
// the event's completion the buffers belong to the backend: the caller
// neither reads nor writes them, and keeps them alive (holding the slice
// is enough).
//
// Every rank must issue the same collectives, with the same lengths, in
// the same order; a backend matches them by order alone. A rank that skips
// one hangs the others, as in MPI.
//
// GradientReducer builds data parallelism on a Comm: it all-reduces
// gradients in buckets while backward still runs, and averages them.
package dist

import (
	"errors"
	"fmt"

	"ferry"
	"ferry/device"
)

// Comm is a communicator: the ranks 0..Size()-1 that take part in
// collectives, seen from one of them.
//
// A Comm is used from one goroutine at a time (the training goroutine);
// the events it returns may be waited on from any goroutine.
type Comm interface {
	// Rank is this process's place in the group, 0..Size()-1.
	Rank() int
	// Size is the number of ranks.
	Size() int

	// AllReduce replaces buf, on every rank, with the elementwise sum of
	// buf over all ranks.
	AllReduce(buf []float32) device.Event
	// ReduceScatter sums send elementwise over all ranks and leaves in
	// recv the block of the sum that belongs to this rank: len(send) must
	// be Size()*len(recv), and rank r receives send[r*n:(r+1)*n] summed.
	ReduceScatter(send, recv []float32) device.Event
	// AllGather concatenates every rank's send, in rank order, into recv
	// on every rank: len(recv) must be Size()*len(send).
	AllGather(send, recv []float32) device.Event
	// Broadcast copies root's buf into buf on every other rank.
	Broadcast(buf []float32, root int) device.Event

	// Barrier returns when every rank has called it (and every collective
	// issued before it here has completed).
	Barrier() error
	// Close waits for the collectives in flight and releases the
	// communicator. Using a closed Comm is an error (ErrClosed), never a
	// crash.
	Close() error
}

// ErrClosed is wrapped by the error of an operation on a closed Comm.
var ErrClosed = errors.New("dist: communicator is closed")

// ErrUnavailable is matched (errors.Is) by the error a backend returns when
// its native library is missing or unusable; the message says why.
var ErrUnavailable = errors.New("dist: backend unavailable")

// Unavailable returns an error that matches ErrUnavailable and reads as
// the formatted message alone ("dist/mpi unavailable because ...").
func Unavailable(format string, args ...any) error {
	return unavailable{fmt.Sprintf(format, args...)}
}

type unavailable struct{ msg string }

func (e unavailable) Error() string        { return e.msg }
func (e unavailable) Is(target error) bool { return target == ErrUnavailable }

// AllReduceAverage starts an all-reduce of buf and, when it completes,
// divides the sum by c.Size(): buf becomes the mean over ranks. The
// returned event completes after the division.
func AllReduceAverage(c Comm, buf []float32) device.Event {
	return averaged(c, c.AllReduce(buf), buf)
}

// averaged is inner, a collective of c that sums into buf, followed by
// buf's division by the ranks, once it completes. A pretend
// communicator's values are fictitious: dividing them would only touch
// every page of buf, so they are left as they are.
func averaged(c Comm, inner device.Event, buf []float32) device.Event {
	if _, ok := c.(*pretend); ok {
		return inner
	}
	return &scaleEvent{inner: inner, buf: buf, f: 1 / float32(c.Size())}
}

// scaleEvent multiplies buf by f once the inner event has completed without
// error. Done and Synchronize may be called from any goroutine, but the
// scaling itself runs once, on whichever goroutine sees completion first.
type scaleEvent struct {
	inner device.Event
	buf   []float32
	f     float32
	once  onceErr
}

func (e *scaleEvent) finish() error {
	return e.once.do(func() error {
		if err := e.inner.Synchronize(); err != nil {
			return err
		}
		if e.f != 1 {
			for i := range e.buf {
				e.buf[i] *= e.f
			}
		}
		return nil
	})
}

func (e *scaleEvent) Done() bool {
	if !e.inner.Done() {
		return false
	}
	_ = e.finish()
	return true
}

func (e *scaleEvent) Synchronize() error { return e.finish() }

// Done is an already completed event carrying err (nil for success), for
// backends that finish a collective on the spot or refuse it at once.
func Done(err error) device.Event { return doneEvent{err} }

type doneEvent struct{ err error }

func (e doneEvent) Done() bool         { return true }
func (e doneEvent) Synchronize() error { return e.err }

// CheckLengths returns the error a backend should report for collective op
// with the given lengths on a group of size ranks, or nil. Backends call it
// before starting anything, so that a wrong length is an error on every
// rank rather than a hang or a read past a buffer.
func CheckLengths(op string, size, send, recv int) error {
	switch op {
	case "reduce_scatter":
		if send != size*recv {
			return fmt.Errorf("dist: reduce_scatter: len(send)=%d must be size(%d) × len(recv)=%d", send, size, recv)
		}
	case "all_gather":
		if recv != size*send {
			return fmt.Errorf("dist: all_gather: len(recv)=%d must be size(%d) × len(send)=%d", recv, size, send)
		}
	}
	return nil
}

// CheckRoot reports a broadcast root outside 0..size-1.
func CheckRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("dist: broadcast: root %d is not a rank of a group of %d", root, size)
	}
	return nil
}

// buffers hands out the host buffers of a reducer's or scatterer's
// buckets. Parameters on a device that holds no values (the meta device,
// where ferry plan replays a rank's step) have no gradient values to
// reduce, so their buckets share one buffer, as large as the largest:
// a plan of a model of many gigabytes does not allocate (and the
// kernel fault in) gigabytes of host memory for buckets whose contents
// nobody reads.
type buffers struct {
	shared bool
	buf    []float32
}

func newBuffers(params []*ferry.Tensor) *buffers {
	return &buffers{shared: len(params) > 0 && !device.HasData(params[0].Device())}
}

// get is a buffer of n float32s: fresh, or the shared one. Once every
// buffer has been got, final gives each its final backing.
func (b *buffers) get(n int) []float32 {
	if !b.shared {
		return make([]float32, n)
	}
	if n > len(b.buf) {
		b.buf = make([]float32, n) // the smaller ones before move here in final
	}
	return b.buf[:n]
}

// final is s (a buffer get returned) on the shared buffer as it ends up,
// the largest: s itself where nothing is shared.
func (b *buffers) final(s []float32) []float32 {
	if !b.shared {
		return s
	}
	return b.buf[:len(s)]
}

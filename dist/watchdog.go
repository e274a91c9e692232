package dist

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"ferry/device"
)

// Aborter is an optional interface of a Comm whose backend can end every
// rank of the job at once (Open MPI's MPI_Abort). Abort does not return:
// it ends this process with code, and the backend's launcher ends the
// others. It may be called from any goroutine, even while a collective
// of this rank is blocked.
type Aborter interface {
	Abort(code int)
}

// Abort ends the job: c's Abort where the backend has one, else this
// process alone (os.Exit), which a launcher such as mpirun sees as a
// failed rank and answers by ending the others.
func Abort(c Comm, code int) {
	if a, ok := c.(Aborter); ok {
		a.Abort(code)
	}
	os.Exit(code)
}

// DefaultTimeout is how long Watch lets a collective wait for the other
// ranks when its caller gives no timeout: long enough for rank 0 to write
// a checkpoint while the others wait at the barrier after it, short
// enough that a job whose rank hangs does not hold its machines for long.
// (PyTorch's NCCL process groups wait 10 minutes by default.)
const DefaultTimeout = 5 * time.Minute

// Watch returns c with a watchdog: when one of its collectives (Barrier
// included) has not completed timeout after it was issued, stuck is
// called, once, with an error that names the collective and says what
// to look for. A collective that never completes means another rank
// died, hangs, or issued other collectives: without the watchdog this
// rank would wait forever. stuck runs on a goroutine of its own; it
// typically reports the error and ends the job (Abort), since the
// collective itself cannot be cancelled; a nil stuck does exactly that
// (the error to standard error, then Abort with code 1). A timeout ≤ 0
// returns c as it is.
//
// Close is not watched: a rank that has finished waits there for the
// others to finish their own work, however long it takes, and a rank
// that never comes is stuck in a watched collective of its own.
//
// The returned Comm keeps c's Aborter.
func Watch(c Comm, timeout time.Duration, stuck func(error)) Comm {
	if timeout <= 0 {
		return c
	}
	if stuck == nil {
		stuck = func(err error) {
			fmt.Fprintf(os.Stderr, "%v; ending the job\n", err)
			Abort(c, 1)
		}
	}
	return &watched{Comm: c, timeout: timeout, stuck: stuck}
}

type watched struct {
	Comm
	timeout time.Duration
	stuck   func(error)
	seq     atomic.Int64 // collectives issued so far
	fired   sync.Once
}

// watch arms a timer for the collective just issued as ev.
func (w *watched) watch(op string, ev device.Event) device.Event {
	n := w.seq.Add(1)
	issued := time.Now()
	t := time.AfterFunc(w.timeout, func() {
		if !ev.Done() {
			w.fire(op, n, issued)
		}
	})
	return &watchedEvent{Event: ev, t: t}
}

func (w *watched) fire(op string, n int64, issued time.Time) {
	w.fired.Do(func() {
		w.stuck(fmt.Errorf("dist: rank %d of %d: %s (collective %d of this rank, issued at %s) has waited %v for the other ranks: "+
			"one of them died, hangs, or issued other collectives (raise the timeout if a rank is merely slow)",
			w.Rank(), w.Size(), op, n, issued.Format("15:04:05"), w.timeout))
	})
}

func (w *watched) AllReduce(buf []float32) device.Event {
	return w.watch("all_reduce", w.Comm.AllReduce(buf))
}

func (w *watched) ReduceScatter(send, recv []float32) device.Event {
	return w.watch("reduce_scatter", w.Comm.ReduceScatter(send, recv))
}

func (w *watched) AllGather(send, recv []float32) device.Event {
	return w.watch("all_gather", w.Comm.AllGather(send, recv))
}

func (w *watched) Broadcast(buf []float32, root int) device.Event {
	return w.watch("broadcast", w.Comm.Broadcast(buf, root))
}

func (w *watched) Barrier() error {
	n := w.seq.Add(1)
	issued := time.Now()
	var done atomic.Bool
	t := time.AfterFunc(w.timeout, func() {
		if !done.Load() {
			w.fire("barrier", n, issued)
		}
	})
	err := w.Comm.Barrier()
	done.Store(true)
	t.Stop()
	return err
}

// Abort is c's Abort, or os.Exit.
func (w *watched) Abort(code int) { Abort(w.Comm, code) }

// watchedEvent stops its timer once the collective is seen complete, so
// that a finished collective leaves no timer behind.
type watchedEvent struct {
	device.Event
	t *time.Timer
}

func (e *watchedEvent) Done() bool {
	if !e.Event.Done() {
		return false
	}
	e.t.Stop()
	return true
}

func (e *watchedEvent) Synchronize() error {
	err := e.Event.Synchronize()
	e.t.Stop()
	return err
}

// WatchDevice is Watch for a DeviceComm: after each collective is
// enqueued, an event recorded on its stream marks its end, and when that
// event has not completed timeout later, stuck is called, once, with an
// error naming the collective. A collective on the device (NCCL) whose
// peer died or hangs blocks the stream, and then whatever waits for the
// stream on the host (a gradient norm read back, a checkpoint); the
// watchdog ends the job instead, as Watch does for the host's
// collectives. A nil stuck reports the error and ends the process (the
// launcher ends the others); a timeout ≤ 0 returns dc as it is.
func WatchDevice(dc DeviceComm, timeout time.Duration, stuck func(error)) DeviceComm {
	if timeout <= 0 {
		return dc
	}
	if stuck == nil {
		stuck = func(err error) {
			fmt.Fprintf(os.Stderr, "%v; ending the job\n", err)
			os.Exit(1)
		}
	}
	return &watchedDevice{DeviceComm: dc, timeout: timeout, stuck: stuck}
}

type watchedDevice struct {
	DeviceComm
	timeout time.Duration
	stuck   func(error)
	seq     atomic.Int64
	fired   sync.Once
}

// watch arms a timer for the collective just enqueued on s (err: the
// enqueue's own error, returned as it is, unwatched).
func (w *watchedDevice) watch(op string, s device.Stream, err error) error {
	if err != nil {
		return err
	}
	n := w.seq.Add(1)
	issued := time.Now()
	ev := s.Record()
	time.AfterFunc(w.timeout, func() {
		if !ev.Done() {
			w.fired.Do(func() {
				w.stuck(fmt.Errorf("dist: rank %d of %d: %s on the device (collective %d of this rank, enqueued at %s) has not completed in %v: "+
					"another rank died, hangs, or issued other collectives (raise the timeout if a rank is merely slow)",
					w.Rank(), w.Size(), op, n, issued.Format("15:04:05"), w.timeout))
			})
		}
	})
	return nil
}

func (w *watchedDevice) AllReduce(buf device.Span, n int, s device.Stream) error {
	return w.watch("all_reduce", s, w.DeviceComm.AllReduce(buf, n, s))
}

func (w *watchedDevice) ReduceScatter(send, recv device.Span, recvCount int, s device.Stream) error {
	return w.watch("reduce_scatter", s, w.DeviceComm.ReduceScatter(send, recv, recvCount, s))
}

func (w *watchedDevice) AllGather(send, recv device.Span, sendCount int, s device.Stream) error {
	return w.watch("all_gather", s, w.DeviceComm.AllGather(send, recv, sendCount, s))
}

func (w *watchedDevice) Broadcast(buf device.Span, n, root int, s device.Stream) error {
	return w.watch("broadcast", s, w.DeviceComm.Broadcast(buf, n, root, s))
}

// Package mpi is ferry's collective backend over Open MPI, for ranks that
// are processes (on one machine or many) holding their buffers in host
// memory. libmpi.so.40 is loaded at run time with purego, without cgo; where
// it is missing, Open says so in an error wrapping dist.ErrUnavailable.
//
// A program is started by mpirun, which tells each process its rank:
//
//	mpirun -np 4 ./train ...
//
//	c, err := mpi.Auto() // MPI under mpirun, dist.Local() otherwise
//	if err != nil { ... } // launched by mpirun, yet MPI failed: stop
//	defer c.Close()
//
// # Note [one OS thread for MPI]
//
// Every MPI call of a process, from MPI_Init_thread to MPI_Finalize, runs
// on one goroutine locked to its OS thread (the "MPI thread"), which takes
// collectives from a queue in the order they were issued and runs them with
// the blocking calls (MPI_Allreduce, MPI_Reduce_scatter_block,
// MPI_Allgather, MPI_Bcast). A collective's event completes when its call
// returns. Why this and not the nonblocking calls (MPI_Iallreduce and
// MPI_Test) from the training goroutine:
//
//   - Go moves goroutines between OS threads, and MPI ties its thread
//     levels to threads: one thread owning MPI needs only
//     MPI_THREAD_FUNNELED, which every build of Open MPI provides, where
//     calling from whichever thread a goroutine is on would need
//     MPI_THREAD_MULTIPLE (or SERIALIZED plus a lock around every call).
//   - Open MPI's nonblocking collectives progress only while some thread is
//     inside an MPI call. Started from backward and then left alone, an
//     MPI_Iallreduce would mostly run at MPI_Wait, after backward: no
//     overlap. Someone has to sit in MPI while backward computes; a blocking
//     call on the MPI thread does exactly that, without a polling loop.
//   - Ranks must issue collectives in the same order; a FIFO queue keeps
//     the order in which the training goroutine issued them.
//
// The price: one collective runs at a time. Gradient buckets are large
// (25 MiB by default), so the link, not the queue, bounds the rate.
//
// Buffers are Go memory. Each is pinned (runtime.Pinner) from the moment
// its collective is queued until its event completes, so the collector
// neither moves nor frees it while C holds its address.
package mpi

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/device"
	"ferry/dist"
)

// Launch is what mpirun told this process through its environment.
type Launch struct {
	Rank, Size int
	LocalRank  int // rank among the processes on this machine (-1: not told)
}

// Launched reads the environment that Open MPI's mpirun gives each process
// (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK).
// ok is false when the process was not started by mpirun. A malformed
// value is an error.
func Launched() (l Launch, ok bool, err error) {
	rs, sz := os.Getenv("OMPI_COMM_WORLD_RANK"), os.Getenv("OMPI_COMM_WORLD_SIZE")
	if rs == "" && sz == "" {
		return Launch{}, false, nil
	}
	r, err1 := strconv.Atoi(rs)
	s, err2 := strconv.Atoi(sz)
	if err1 != nil || err2 != nil || s < 1 || r < 0 || r >= s {
		return Launch{}, false, fmt.Errorf("dist/mpi: the environment says OMPI_COMM_WORLD_RANK=%q OMPI_COMM_WORLD_SIZE=%q, which is not a rank of a group", rs, sz)
	}
	l = Launch{Rank: r, Size: s, LocalRank: -1}
	if lr, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK")); err == nil {
		l.LocalRank = lr
	}
	return l, true, nil
}

// Auto returns an MPI communicator when the process was started by mpirun,
// and dist.Local() (one rank) when it was not. Under mpirun, any failure
// is an error, never a silent fallback to one rank: ranks that each trained
// alone would be wrong without a word.
func Auto() (dist.Comm, error) {
	_, ok, err := Launched()
	if err != nil {
		return nil, err
	}
	if !ok {
		return dist.Local(), nil
	}
	return Open()
}

var (
	openMu sync.Mutex
	opened bool
)

// Open initialises MPI (once per process: MPI cannot be initialised again
// after MPI_Finalize) and returns the communicator of all its ranks
// (MPI_COMM_WORLD). Without mpirun it runs as an MPI "singleton" of one
// rank.
//
// Errors: the library missing or too unlike Open MPI (wrapping
// dist.ErrUnavailable), a second Open, a thread level below FUNNELED, and a
// rank or size that disagrees with what mpirun's environment announced. A
// failure inside MPI_Init_thread itself is Open MPI's to report: its
// default is to print a diagnosis and end the process, before ferry could
// see an error code.
func Open() (*Comm, error) {
	l, err := load()
	if err != nil {
		return nil, err
	}
	launch, launched, err := Launched()
	if err != nil {
		return nil, err
	}
	openMu.Lock()
	defer openMu.Unlock()
	if opened {
		return nil, fmt.Errorf("dist/mpi: Open called twice: MPI is initialised once per process (keep the first Comm)")
	}
	opened = true
	c := &Comm{l: l, queue: make(chan *op, 64), exited: make(chan struct{})}
	ready := make(chan error)
	go c.thread(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	if launched && (c.rank != launch.Rank || c.size != launch.Size) {
		err := fmt.Errorf("dist/mpi: mpirun announced rank %d of %d, but MPI_COMM_WORLD is rank %d of %d: was the process started by Open MPI's mpirun, with this library?",
			launch.Rank, launch.Size, c.rank, c.size)
		c.Close()
		return nil, err
	}
	return c, nil
}

// Comm is MPI_COMM_WORLD. It implements dist.Comm.
type Comm struct {
	l          *lib
	rank, size int
	version    string

	mu     sync.Mutex // guards closed and sends on queue
	closed bool
	queue  chan *op
	exited chan struct{}
}

var _ dist.Comm = (*Comm)(nil)

// Library names the MPI library and its version ("Open MPI v4.1.4, ...").
func (c *Comm) Library() string { return c.l.path + ": " + c.version }

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

type opKind int

const (
	opAllReduce opKind = iota
	opReduceScatter
	opAllGather
	opBroadcast
	opBarrier
	opFinalize
)

var opNames = [...]string{"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "finalize"}

// op is one queued collective; it is also the device.Event returned for it.
type op struct {
	kind       opKind
	send, recv []float32
	root       int
	pin        runtime.Pinner
	done       chan struct{}
	err        error // written before done is closed
}

func (o *op) Done() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

func (o *op) Synchronize() error { <-o.done; return o.err }

func (c *Comm) AllReduce(buf []float32) device.Event {
	return c.enqueue(&op{kind: opAllReduce, recv: buf})
}

func (c *Comm) ReduceScatter(send, recv []float32) device.Event {
	if err := dist.CheckLengths("reduce_scatter", c.size, len(send), len(recv)); err != nil {
		return dist.Done(err)
	}
	return c.enqueue(&op{kind: opReduceScatter, send: send, recv: recv})
}

func (c *Comm) AllGather(send, recv []float32) device.Event {
	if err := dist.CheckLengths("all_gather", c.size, len(send), len(recv)); err != nil {
		return dist.Done(err)
	}
	return c.enqueue(&op{kind: opAllGather, send: send, recv: recv})
}

func (c *Comm) Broadcast(buf []float32, root int) device.Event {
	if err := dist.CheckRoot(root, c.size); err != nil {
		return dist.Done(err)
	}
	return c.enqueue(&op{kind: opBroadcast, recv: buf, root: root})
}

func (c *Comm) Barrier() error { return c.enqueue(&op{kind: opBarrier}).Synchronize() }

// Close waits for the queued collectives, calls MPI_Finalize and ends the
// MPI thread. Every rank must call it (mpirun reports a rank that exits
// without finalizing as a failure of the job).
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("%w: close called twice", dist.ErrClosed)
	}
	o := &op{kind: opFinalize, done: make(chan struct{})}
	c.queue <- o
	c.closed = true
	c.mu.Unlock()
	err := o.Synchronize()
	<-c.exited
	return err
}

// Abort ends every rank of the job with exit code code (MPI_Abort on
// MPI_COMM_WORLD; dist.Aborter): Open MPI prints who aborted, and mpirun
// kills the other ranks and exits non-zero. It does not return.
//
// It is the one MPI call made off the MPI thread (Note [one OS thread for
// MPI]): that thread may be blocked in a collective that will never
// complete, which is often why the job is ended. Under
// MPI_THREAD_FUNNELED Open MPI takes no locks, so the call cannot wait
// on the blocked thread; in case it returns or stalls all the same, the
// process exits with code after abortGrace. After Close (MPI finalized)
// it exits at once.
func (c *Comm) Abort(code int) {
	go func() {
		time.Sleep(abortGrace)
		os.Exit(code)
	}()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if !closed {
		runtime.LockOSThread()
		purego.SyscallN(c.l.abort, c.l.commWorld, uintptr(code))
	}
	os.Exit(code)
}

// abortGrace bounds how long Abort waits for MPI_Abort to end the process.
const abortGrace = 10 * time.Second

var _ dist.Aborter = (*Comm)(nil)

func (c *Comm) enqueue(o *op) device.Event {
	o.done = make(chan struct{})
	for _, b := range [][]float32{o.send, o.recv} {
		if len(b) > maxCount {
			return dist.Done(fmt.Errorf("dist/mpi: %s of %d elements: MPI counts are C ints (at most %d); split the buffer", opNames[o.kind], len(b), maxCount))
		}
		if len(b) > 0 {
			o.pin.Pin(&b[0])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		o.pin.Unpin()
		return dist.Done(fmt.Errorf("%w: %s", dist.ErrClosed, opNames[o.kind]))
	}
	c.queue <- o
	return o
}

// thread is the MPI thread (Note [one OS thread for MPI]). It initialises
// MPI, reports on ready, runs the queue until finalize, and ends.
func (c *Comm) thread(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	defer close(c.exited)
	l := c.l
	var provided int32
	if err := l.call("MPI_Init_thread", l.initThread, 0, 0, mpiThreadFunnel, uintptr(unsafe.Pointer(&provided))); err != nil {
		ready <- fmt.Errorf("dist/mpi: %w", err)
		return
	}
	fail := func(err error) {
		l.call("MPI_Finalize", l.finalize)
		ready <- err
	}
	if provided < mpiThreadFunnel {
		fail(fmt.Errorf("dist/mpi: MPI_Init_thread provided thread level %d, below MPI_THREAD_FUNNELED (1), which ferry's MPI thread needs", provided))
		return
	}
	// Errors come back as return codes instead of ending the process.
	if err := l.call("MPI_Comm_set_errhandler", l.commSetErrhandler, l.commWorld, l.errorsReturn); err != nil {
		fail(fmt.Errorf("dist/mpi: %w", err))
		return
	}
	var rank, size int32
	if err := l.call("MPI_Comm_rank", l.commRank, l.commWorld, uintptr(unsafe.Pointer(&rank))); err != nil {
		fail(fmt.Errorf("dist/mpi: %w", err))
		return
	}
	if err := l.call("MPI_Comm_size", l.commSize, l.commWorld, uintptr(unsafe.Pointer(&size))); err != nil {
		fail(fmt.Errorf("dist/mpi: %w", err))
		return
	}
	c.rank, c.size, c.version = int(rank), int(size), l.version()
	ready <- nil

	for o := range c.queue {
		o.err = c.run(o)
		if o.err != nil {
			o.err = fmt.Errorf("dist/mpi: rank %d: %s: %w", c.rank, opNames[o.kind], o.err)
		}
		o.pin.Unpin()
		close(o.done)
		if o.kind == opFinalize {
			return
		}
	}
}

// run makes the blocking MPI call for o, on the MPI thread.
func (c *Comm) run(o *op) error {
	l := c.l
	switch o.kind {
	case opAllReduce:
		if len(o.recv) == 0 {
			return nil
		}
		return l.call("MPI_Allreduce", l.allreduce, mpiInPlace, ptr(o.recv), uintptr(len(o.recv)), l.float, l.opSum, l.commWorld)
	case opReduceScatter:
		if len(o.recv) == 0 {
			return nil
		}
		return l.call("MPI_Reduce_scatter_block", l.reduceScatterBlock, ptr(o.send), ptr(o.recv), uintptr(len(o.recv)), l.float, l.opSum, l.commWorld)
	case opAllGather:
		if len(o.send) == 0 {
			return nil
		}
		return l.call("MPI_Allgather", l.allgather, ptr(o.send), uintptr(len(o.send)), l.float, ptr(o.recv), uintptr(len(o.send)), l.float, l.commWorld)
	case opBroadcast:
		if len(o.recv) == 0 {
			return nil
		}
		return l.call("MPI_Bcast", l.bcast, ptr(o.recv), uintptr(len(o.recv)), l.float, uintptr(o.root), l.commWorld)
	case opBarrier:
		return l.call("MPI_Barrier", l.barrier, l.commWorld)
	case opFinalize:
		return l.call("MPI_Finalize", l.finalize)
	}
	return fmt.Errorf("unknown op %d", o.kind)
}

// ptr is the address of a pinned buffer's first element.
func ptr(b []float32) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

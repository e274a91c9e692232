// Package nccl binds NCCL (libnccl.so.2), NVIDIA's collectives over GPU
// memory, loaded at run time with purego: no cgo (docs/design.md,
// decisions 6 and 16). Where the library is missing, Load's error matches
// dist.ErrUnavailable and says why.
//
// This is the layer under a GPU backend, shaped like NCCL itself rather
// than like dist.Comm: buffers are device pointers (cu.DevicePtr) and
// every collective is enqueued on a CUDA stream (cu.Stream) of the CUDA
// device, returning once it is enqueued. Completion is the stream's: record
// an event on the stream after the call and wait for it, as for a kernel.
// The CUDA device hands out both: cuda.StreamHandle(dev.Compute()) and
// dev.DevicePointer(span).
//
// Starting a communicator takes three steps on every rank:
//
//	var id nccl.UniqueID
//	if rank == 0 { id, err = nccl.GetUniqueID() }
//	id, err = nccl.ExchangeID(mpiComm, id)      // or ServeID / FetchID over TCP
//	c, err := nccl.InitRank(size, id, rank)      // blocks until all ranks join
//	defer c.Destroy()
//
// # Note [the unique id by value]
//
// ncclCommInitRank takes ncclUniqueId, a struct of 128 bytes, by value.
// Under the System V ABI for x86-64 a struct over 16 bytes is of class
// MEMORY: the caller copies it onto the stack, in the argument area, and
// it takes no register; the int after it (rank) still goes in the next
// free integer register (rdx). purego's RegisterFunc lays out a struct
// argument of more than 64 bytes exactly so (placeStack: the struct's
// eightbytes, in order, as stack arguments), and the stand-in checks the
// bytes it receives against those it issued (TestUniqueIDByValue). The
// other calls pass only pointers and integers, through purego.SyscallN.
package nccl

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/device/cuda/cu"
	"ferry/dist"
)

// UniqueID is ncclUniqueId: the 128 bytes that name a clique of ranks.
// Rank 0 makes it with GetUniqueID and gives it to the others.
type UniqueID struct{ Internal [128]byte }

// DataType is ncclDataType_t.
type DataType int32

// NCCL's data types (nccl.h).
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9
)

// RedOp is ncclRedOp_t.
type RedOp int32

// NCCL's reduction ops.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// Result is ncclResult_t.
type Result int32

// NCCL's results.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

// Error is a failed NCCL call.
type Error struct {
	Call   string
	Result Result
	Text   string // ncclGetErrorString's words
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: NCCL error %d: %s", e.Call, e.Result, e.Text)
}

const libEnv = "FERRY_LIBNCCL"

type lib struct {
	path    string
	version int

	getErrorString, getVersion, getUniqueID        uintptr
	commDestroy, commGetAsyncError                 uintptr
	allReduce, reduceScatter, allGather, broadcast uintptr
	groupStart, groupEnd                           uintptr
	commInitRank                                   func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
}

var (
	loadOnce sync.Once
	loaded   *lib
	loadErr  error
)

// Load opens libnccl.so.2 (or the path in FERRY_LIBNCCL) once; later calls
// return the same result. The other functions of the package call it.
func Load() error {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loadErr
}

// Library names the library loaded and its version (22105 is 2.21.5).
func Library() (path string, version int, err error) {
	if err := Load(); err != nil {
		return "", 0, err
	}
	return loaded.path, loaded.version, nil
}

func load() (*lib, error) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, dist.Unavailable("dist/nccl unavailable because NCCL runs on linux/amd64 and linux/arm64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	name := "libnccl.so.2"
	if p := os.Getenv(libEnv); p != "" {
		name = p
	}
	h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, dist.Unavailable("dist/nccl unavailable because %s could not be loaded (%v); install NCCL (libnccl2) on a machine with an NVIDIA GPU, or set %s to the library's path", name, err, libEnv)
	}
	l := &lib{path: name}
	var initRank uintptr
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"ncclGetErrorString", &l.getErrorString}, {"ncclGetVersion", &l.getVersion},
		{"ncclGetUniqueId", &l.getUniqueID}, {"ncclCommInitRank", &initRank},
		{"ncclCommDestroy", &l.commDestroy}, {"ncclCommGetAsyncError", &l.commGetAsyncError},
		{"ncclAllReduce", &l.allReduce}, {"ncclReduceScatter", &l.reduceScatter},
		{"ncclAllGather", &l.allGather}, {"ncclBroadcast", &l.broadcast},
		{"ncclGroupStart", &l.groupStart}, {"ncclGroupEnd", &l.groupEnd},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, dist.Unavailable("dist/nccl unavailable because %s has no symbol %s (NCCL older than 2.4?)", name, s.name)
		}
		*s.p = p
	}
	// By value: see Note [the unique id by value].
	purego.RegisterFunc(&l.commInitRank, initRank)
	var v int32
	if r, _, _ := purego.SyscallN(l.getVersion, uintptr(unsafe.Pointer(&v))); int32(r) == 0 {
		l.version = int(v)
	}
	return l, nil
}

func (l *lib) check(call string, r uintptr) error {
	res := Result(int32(r))
	if res == Success {
		return nil
	}
	e := &Error{Call: call, Result: res}
	if p, _, _ := purego.SyscallN(l.getErrorString, uintptr(res)); p != 0 {
		e.Text = cString(p)
	}
	return e
}

// GetUniqueID makes a new id (on rank 0) for InitRank.
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := Load(); err != nil {
		return id, err
	}
	r, _, _ := purego.SyscallN(loaded.getUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, loaded.check("ncclGetUniqueId", r)
}

// Comm is one rank's ncclComm_t.
type Comm struct {
	l          *lib
	h          uintptr
	rank, size int

	mu        sync.Mutex
	destroyed bool
}

// InitRank joins rank (0..nranks-1) to the clique named by id, blocking
// until all nranks ranks have joined. The CUDA context of the device the
// communicator will use must be current on the calling thread (on a GPU);
// call it with the OS thread locked.
func InitRank(nranks int, id UniqueID, rank int) (*Comm, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks || nranks > 1<<31-1 {
		return nil, fmt.Errorf("dist/nccl: InitRank: rank %d of %d is not a rank of a group", rank, nranks)
	}
	var h uintptr
	if err := loaded.check("ncclCommInitRank", uintptr(loaded.commInitRank(&h, int32(nranks), id, int32(rank)))); err != nil {
		return nil, fmt.Errorf("dist/nccl: rank %d of %d: %w", rank, nranks, err)
	}
	return &Comm{l: loaded, h: h, rank: rank, size: nranks}, nil
}

// Rank and Size are the communicator's.
func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Handle is the ncclComm_t, for tests and for code that calls NCCL itself.
func (c *Comm) Handle() uintptr { return c.h }

func (c *Comm) live(call string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return fmt.Errorf("%w: %s on rank %d after Destroy", dist.ErrClosed, call, c.rank)
	}
	return nil
}

func checkCount(call string, n int) error {
	if n < 0 {
		return fmt.Errorf("dist/nccl: %s: count %d is negative", call, n)
	}
	return nil
}

// AllReduce enqueues on s the reduction of count elements of send over
// all ranks into recv (send == recv is in place).
func (c *Comm) AllReduce(send, recv cu.DevicePtr, count int, dt DataType, op RedOp, s cu.Stream) error {
	if err := c.enqueueCheck("ncclAllReduce", count); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(c.l.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), c.h, uintptr(s))
	return c.l.check("ncclAllReduce", r)
}

// ReduceScatter enqueues on s the reduction of Size()*recvCount elements
// of send, rank r receiving block r (recvCount elements) in recv.
func (c *Comm) ReduceScatter(send, recv cu.DevicePtr, recvCount int, dt DataType, op RedOp, s cu.Stream) error {
	if err := c.enqueueCheck("ncclReduceScatter", recvCount); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(c.l.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), c.h, uintptr(s))
	return c.l.check("ncclReduceScatter", r)
}

// AllGather enqueues on s the gathering of every rank's sendCount
// elements, in rank order, into recv (Size()*sendCount elements).
func (c *Comm) AllGather(send, recv cu.DevicePtr, sendCount int, dt DataType, s cu.Stream) error {
	if err := c.enqueueCheck("ncclAllGather", sendCount); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(c.l.allGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), c.h, uintptr(s))
	return c.l.check("ncclAllGather", r)
}

// Broadcast enqueues on s the copy of root's send into every rank's recv
// (send is read on root only).
func (c *Comm) Broadcast(send, recv cu.DevicePtr, count int, dt DataType, root int, s cu.Stream) error {
	if err := c.enqueueCheck("ncclBroadcast", count); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("dist/nccl: ncclBroadcast: root %d is not a rank of %d", root, c.size)
	}
	r, _, _ := purego.SyscallN(c.l.broadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), c.h, uintptr(s))
	return c.l.check("ncclBroadcast", r)
}

func (c *Comm) enqueueCheck(call string, count int) error {
	if err := c.live(call); err != nil {
		return err
	}
	return checkCount(call, count)
}

// AsyncError asks NCCL whether the communicator has failed in the
// background (a peer gone, a network error): nil while it has not.
func (c *Comm) AsyncError() error {
	if err := c.live("ncclCommGetAsyncError"); err != nil {
		return err
	}
	var res int32
	r, _, _ := purego.SyscallN(c.l.commGetAsyncError, c.h, uintptr(unsafe.Pointer(&res)))
	if err := c.l.check("ncclCommGetAsyncError", r); err != nil {
		return err
	}
	if err := c.l.check("asynchronous", uintptr(res)); err != nil {
		return fmt.Errorf("dist/nccl: rank %d: communicator failed: %w", c.rank, err)
	}
	return nil
}

// Destroy releases the communicator once its collectives have completed
// (synchronise their streams first). A second Destroy, and any use after
// it, is an error wrapping dist.ErrClosed that never reaches NCCL.
func (c *Comm) Destroy() error {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return fmt.Errorf("%w: Destroy called twice on rank %d", dist.ErrClosed, c.rank)
	}
	c.destroyed = true
	c.mu.Unlock()
	r, _, _ := purego.SyscallN(c.l.commDestroy, c.h)
	return c.l.check("ncclCommDestroy", r)
}

// Group runs f between ncclGroupStart and ncclGroupEnd, so that the
// collectives f enqueues (on one or several communicators) are launched
// together: what one thread needs to drive several ranks, and what fuses
// small collectives. NCCL keeps the group depth per OS thread, so Group
// locks the calling goroutine to its thread for the duration; f must make
// its calls on the same goroutine. Groups nest.
func Group(f func() error) (err error) {
	if err := Load(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, _, _ := purego.SyscallN(loaded.groupStart)
	if err := loaded.check("ncclGroupStart", r); err != nil {
		return err
	}
	defer func() { // even if f panics: the thread's depth must come back down
		r, _, _ := purego.SyscallN(loaded.groupEnd)
		if e := loaded.check("ncclGroupEnd", r); e != nil && err == nil {
			err = e
		}
	}()
	return f()
}

// cString copies the NUL-terminated string at p (owned by C).
func cString(p uintptr) string {
	var b []byte
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	for i := 0; ; i++ {
		c := *(*byte)(unsafe.Add(base, i))
		if c == 0 {
			return string(b)
		}
		b = append(b, c)
	}
}

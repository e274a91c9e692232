package nccl_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/device/cuda/cu"
	"ferry/dist"
	"ferry/dist/nccl"
	"ferry/dist/nccl/standin"
)

// Every test here runs ferry's binding against the C stand-in: the binding
// loads one library per process, so TestMain points it there first.
var (
	lib      *standin.Lib
	buildErr error

	errRealGPU = errors.New("the stand-in is not used on a real GPU")
)

func TestMain(m *testing.M) {
	if realGPU {
		// The real libnccl is loaded (real_test.go); the stand-in's
		// tests skip.
		buildErr = errRealGPU
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ferry-nccl-standin")
	if err != nil {
		panic(err)
	}
	var path string
	if path, buildErr = standin.Build(dir); buildErr == nil {
		lib, buildErr = standin.Open(path)
		os.Setenv("FERRY_LIBNCCL", path)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// setup skips without a C compiler, and checks at the end that no call
// broke NCCL's API.
func setup(t *testing.T) *standin.Lib {
	t.Helper()
	if buildErr == errRealGPU {
		t.Skip("FERRY_CUDA_REAL=1: the real libnccl is loaded, not the stand-in")
	}
	if errors.Is(buildErr, standin.ErrNoCompiler) {
		t.Skipf("the NCCL stand-in needs a C compiler: %v", buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if p, v, err := nccl.Library(); err != nil || p != lib.Path || v != 22105 {
		t.Fatalf("the binding loaded %q version %d (%v), not the stand-in %q 22105", p, v, err, lib.Path)
	}
	lib.Reset()
	t.Cleanup(func() {
		if n := lib.Violations(); n != 0 {
			t.Errorf("%d calls broke NCCL's API:\n%s", n, lib.Report())
		}
	})
	return lib
}

// expectViolation runs f and checks that it made exactly one violation
// whose report contains want; it then forgets it.
func expectViolation(t *testing.T, l *standin.Lib, want string, f func()) {
	t.Helper()
	before := l.Violations()
	f()
	if n := l.Violations() - before; n != 1 || !strings.Contains(l.Report(), want) {
		t.Errorf("want one violation saying %q, got %d:\n%s", want, n, l.Report())
	}
	l.Reset()
}

// ranks runs f on n goroutines, one per rank, and returns their errors.
func ranks(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r) }()
	}
	wg.Wait()
	return errs
}

func dptr(p *runtime.Pinner, v []float32) cu.DevicePtr {
	p.Pin(&v[0])
	return cu.DevicePtr(uintptr(unsafe.Pointer(&v[0])))
}

// The 128-byte id crosses by value (Note [the unique id by value]): the
// stand-in receives the bytes it issued, and a layout that passes a
// pointer instead, or one changed byte, is caught.
func TestUniqueIDByValue(t *testing.T) {
	l := setup(t)
	id, err := nccl.GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	if id.Internal[0] != 0 || id.Internal[1] != 0xff {
		t.Fatalf("the stand-in's id starts % x", id.Internal[:4])
	}
	c, err := nccl.InitRank(1, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	// A pointer where the struct belongs: the callee takes its rank from
	// rdx, which now holds the pointer, and its id from the stack.
	id2, _ := nccl.GetUniqueID()
	var h uintptr
	expectViolation(t, l, "ncclCommInitRank: rank ", func() {
		r, _, _ := purego.SyscallN(l.Sym("ncclCommInitRank"), uintptr(unsafe.Pointer(&h)), 1, uintptr(unsafe.Pointer(&id2)), 0)
		if nccl.Result(r) != nccl.InvalidArgument {
			t.Errorf("ncclCommInitRank with a pointer: result %d", r)
		}
	})
	// The same id as SyscallN's stack words: six register slots (comm,
	// nranks, rank, three unused), then the sixteen eightbytes. This is
	// the layout RegisterFunc must produce.
	args := []uintptr{uintptr(unsafe.Pointer(&h)), 1, 0, 0, 0, 0}
	for i := 0; i < 128; i += 8 {
		args = append(args, *(*uintptr)(unsafe.Pointer(&id2.Internal[i])))
	}
	if r, _, _ := purego.SyscallN(l.Sym("ncclCommInitRank"), args...); r != 0 || h == 0 {
		t.Fatalf("ncclCommInitRank with the id on the stack by hand: result %d", r)
	}
	purego.SyscallN(l.Sym("ncclCommDestroy"), h)
	// One byte changed in Go arrives changed: the check is byte for byte.
	id3, _ := nccl.GetUniqueID()
	id3.Internal[127] ^= 1
	expectViolation(t, l, "not, byte for byte", func() {
		if _, err := nccl.InitRank(1, id3, 0); err == nil || !strings.Contains(err.Error(), "invalid argument") {
			t.Errorf("InitRank with a changed id: %v", err)
		}
	})
}

// Four ranks (goroutines) meet over a TCP rendezvous on loopback and run
// every collective, plain and grouped.
func TestCollectives(t *testing.T) {
	l := setup(t)
	const n = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	errs := ranks(n, func(r int) error {
		var id nccl.UniqueID
		var err error
		if r == 0 {
			if id, err = nccl.GetUniqueID(); err != nil {
				return err
			}
			go func() {
				if err := nccl.ServeID(ln, id, n-1, 30*time.Second); err != nil {
					t.Error(err)
				}
			}()
		} else if id, err = nccl.FetchID(addr, 30*time.Second); err != nil {
			return err
		}
		c, err := nccl.InitRank(n, id, r)
		if err != nil {
			return err
		}
		if c.Rank() != r || c.Size() != n {
			return fmt.Errorf("rank %d of %d", c.Rank(), c.Size())
		}
		s := cu.Stream(0x5000 + r) // the stand-in's streams are names
		var pin runtime.Pinner
		defer pin.Unpin()
		check := func(what string, got []float32, want func(i int) float32) error {
			if err := l.StreamWait(uintptr(s), 10*time.Second); err != nil {
				return err
			}
			for i := range got {
				if got[i] != want(i) {
					return fmt.Errorf("rank %d: %s[%d] = %v, want %v", r, what, i, got[i], want(i))
				}
			}
			return nil
		}
		// all-reduce, in place: rank r holds r+i; the sum is 6+4i.
		a := make([]float32, 100)
		for i := range a {
			a[i] = float32(r + i)
		}
		pa := dptr(&pin, a)
		if err := c.AllReduce(pa, pa, len(a), nccl.Float32, nccl.Sum, s); err != nil {
			return err
		}
		if err := check("all_reduce", a, func(i int) float32 { return float32(6 + 4*i) }); err != nil {
			return err
		}
		// average, out of place: a now holds the sum on every rank, so its
		// mean is the sum again.
		avg := make([]float32, len(a))
		if err := c.AllReduce(pa, dptr(&pin, avg), len(a), nccl.Float32, nccl.Avg, s); err != nil {
			return err
		}
		if err := check("average", avg, func(i int) float32 { return float32(6 + 4*i) }); err != nil {
			return err
		}
		// reduce-scatter: send[j] = j*(r+1); rank r gets block r of the sum (10j).
		send := make([]float32, n*3)
		for j := range send {
			send[j] = float32(j * (r + 1))
		}
		rs := make([]float32, 3)
		if err := c.ReduceScatter(dptr(&pin, send), dptr(&pin, rs), 3, nccl.Float32, nccl.Sum, s); err != nil {
			return err
		}
		if err := check("reduce_scatter", rs, func(k int) float32 { return float32(10 * (3*r + k)) }); err != nil {
			return err
		}
		// all-gather, in rank order.
		mine := []float32{float32(r), float32(10 * r)}
		all := make([]float32, 2*n)
		if err := c.AllGather(dptr(&pin, mine), dptr(&pin, all), 2, nccl.Float32, s); err != nil {
			return err
		}
		if err := check("all_gather", all, func(i int) float32 { return float32((i / 2) * []int{1, 10}[i%2]) }); err != nil {
			return err
		}
		// broadcast from rank 2.
		b := []float32{float32(r), -float32(r) - 1}
		if err := c.Broadcast(dptr(&pin, b), dptr(&pin, b), 2, nccl.Float32, 2, s); err != nil {
			return err
		}
		if err := check("broadcast", b, func(i int) float32 { return []float32{2, -3}[i] }); err != nil {
			return err
		}
		// two all-reduces in one group, as a bucketed step would.
		x, y := []float32{float32(r)}, []float32{1, 2}
		err = nccl.Group(func() error {
			if err := c.AllReduce(dptr(&pin, x), dptr(&pin, x), 1, nccl.Float32, nccl.Max, s); err != nil {
				return err
			}
			return c.AllReduce(dptr(&pin, y), dptr(&pin, y), 2, nccl.Float32, nccl.Sum, s)
		})
		if err != nil {
			return err
		}
		if err := check("grouped max", x, func(int) float32 { return n - 1 }); err != nil {
			return err
		}
		if err := check("grouped sum", y, func(i int) float32 { return float32(n * (i + 1)) }); err != nil {
			return err
		}
		if err := c.AsyncError(); err != nil {
			return err
		}
		if r == 1 {
			l.SetAsyncError(c.Handle(), int(nccl.RemoteError))
			if err := c.AsyncError(); err == nil || !strings.Contains(err.Error(), "remote process exited") {
				return fmt.Errorf("AsyncError after a remote error: %v", err)
			}
		}
		if err := c.Destroy(); err != nil {
			return err
		}
		// Use after Destroy is refused in Go, before NCCL sees it.
		if err := c.AllReduce(pa, pa, 1, nccl.Float32, nccl.Sum, s); !errors.Is(err, dist.ErrClosed) {
			return fmt.Errorf("all_reduce after Destroy: %v", err)
		}
		if err := c.Destroy(); !errors.Is(err, dist.ErrClosed) {
			return fmt.Errorf("second Destroy: %v", err)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if g, d, cs := l.Counter("groups"), l.Counter("deferred"), l.Counter("collectives"); g != n || d != 2*n || cs != 7*n {
		t.Errorf("groups %d, deferred calls %d, collectives %d; want %d, %d, %d", g, d, cs, n, 2*n, 7*n)
	}
}

// The binding refuses what it can before calling NCCL.
func TestBindingChecks(t *testing.T) {
	setup(t)
	if _, err := nccl.InitRank(2, nccl.UniqueID{}, 2); err == nil {
		t.Error("InitRank of rank 2 of 2 succeeded")
	}
	id, _ := nccl.GetUniqueID()
	c, err := nccl.InitRank(1, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	v := []float32{1}
	var pin runtime.Pinner
	defer pin.Unpin()
	if err := c.AllReduce(dptr(&pin, v), dptr(&pin, v), -1, nccl.Float32, nccl.Sum, 1); err == nil {
		t.Error("a negative count was sent")
	}
	if err := c.Broadcast(dptr(&pin, v), dptr(&pin, v), 1, nccl.Float32, 1, 1); err == nil {
		t.Error("broadcast from root 1 of 1 was sent")
	}
	// A real type that the stand-in does not compute: NCCL's error text
	// comes back through ncclGetErrorString.
	if err := c.AllReduce(dptr(&pin, v), dptr(&pin, v), 1, nccl.Float16, nccl.Sum, 1); err == nil || !strings.Contains(err.Error(), "invalid usage") {
		t.Errorf("float16 on the stand-in: %v", err)
	}
	got, err := nccl.ExchangeID(dist.Local(), id, nil)
	if err != nil || got != id {
		t.Errorf("ExchangeID on one rank: %v", err)
	}
	if _, err := nccl.FetchID("127.0.0.1:1", 100*time.Millisecond); err == nil {
		t.Error("FetchID from a closed port succeeded")
	}
}

// Calls that break NCCL's API, made through the raw entry points, are
// each caught and counted by the stand-in: the checks can fail.
func TestStandInCatchesMisuse(t *testing.T) {
	l := setup(t)
	id, _ := nccl.GetUniqueID()
	c, err := nccl.InitRank(1, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handle()
	allReduce := l.Sym("ncclAllReduce")
	v := make([]float32, 4)
	p := uintptr(unsafe.Pointer(&v[0]))
	for _, m := range []struct {
		want string
		args []uintptr
	}{
		{"recvbuff is NULL", []uintptr{p, 0, 4, 7, 0, h, 1}},
		{"a negative number cast to size_t", []uintptr{p, p, ^uintptr(0), 7, 0, h, 1}},
		{"datatype 42 is not an ncclDataType_t", []uintptr{p, p, 4, 42, 0, h, 1}},
		{"reduction op 9 is not an ncclRedOp_t", []uintptr{p, p, 4, 7, 9, h, 1}},
		{"the communicator was never created", []uintptr{p, p, 4, 7, 0, h + 8, 1}},
	} {
		expectViolation(t, l, m.want, func() {
			if r, _, _ := purego.SyscallN(allReduce, m.args...); r == 0 {
				t.Errorf("%s: ncclAllReduce succeeded", m.want)
			}
		})
	}
	runtime.KeepAlive(v)
	// NCCL's group depth is per thread: an end on another thread than the
	// start is unbalanced there (why nccl.Group locks the OS thread).
	started := make(chan struct{})
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		purego.SyscallN(l.Sym("ncclGroupStart"))
		close(started)
		<-release
		purego.SyscallN(l.Sym("ncclGroupEnd"))
	}()
	<-started
	expectViolation(t, l, "ncclGroupEnd without ncclGroupStart on this thread", func() {
		runtime.LockOSThread()
		purego.SyscallN(l.Sym("ncclGroupEnd"))
		runtime.UnlockOSThread()
	})
	close(release)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	expectViolation(t, l, "ncclAllReduce: the communicator was destroyed", func() {
		purego.SyscallN(allReduce, p, p, 4, 7, 0, h, 1)
	})
	expectViolation(t, l, "ncclCommDestroy: the communicator was destroyed", func() {
		purego.SyscallN(l.Sym("ncclCommDestroy"), h)
	})
	// Ranks whose n-th collectives differ.
	id2, _ := nccl.GetUniqueID()
	expectViolation(t, l, "rank 1 posts ncclAllReduce(count 2", func() {
		errs := ranks(2, func(r int) error {
			c, err := nccl.InitRank(2, id2, r)
			if err != nil {
				return err
			}
			var pin runtime.Pinner
			defer pin.Unpin()
			buf := make([]float32, 2)
			if r == 1 {
				time.Sleep(50 * time.Millisecond) // rank 0 posts first
			}
			if err := c.AllReduce(dptr(&pin, buf), dptr(&pin, buf), 1+r, nccl.Float32, nccl.Sum, cu.Stream(0x7000+r)); err != nil {
				return err
			}
			if err := l.StreamWait(uintptr(0x7000+r), 5*time.Second); err != nil {
				return err
			}
			return c.Destroy()
		})
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

// A listener that is not a ferry rank 0 is not taken for one.
func TestFetchIDFromStranger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write(make([]byte, 200))
			c.Close()
		}
	}()
	if _, err := nccl.FetchID(ln.Addr().String(), 5*time.Second); err == nil || !strings.Contains(err.Error(), "is not a ferry rank 0") {
		t.Errorf("FetchID from a stranger: %v", err)
	}
}

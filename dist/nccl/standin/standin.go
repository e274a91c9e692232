// Package standin builds and drives a strict C stand-in for NCCL
// (c/nccl_standin.c), so that tests run ferry's real purego binding of
// NCCL (package ferry/dist/nccl) on a machine without a GPU or NCCL. Ranks
// are goroutines of the test process; device pointers are host addresses.
//
// A test builds it with Build (gcc; ErrNoCompiler without one), sets
// FERRY_LIBNCCL to its path before the binding loads, runs its ranks, and
// at the end asserts Lib.Violations() == 0, printing Lib.Report() if not.
// The top of c/nccl_standin.c lists what it checks.
package standin

import (
	_ "embed"
	"ferry/internal/cbuild"
	"fmt"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

var (
	//go:embed c/nccl_standin.c
	source []byte
	//go:embed c/nccl_standin.h
	header []byte
)

// ErrNoCompiler is returned by Build when there is no C compiler.
var ErrNoCompiler = cbuild.ErrNoCompiler

// Build compiles the stand-in into dir and returns the library's path.
func Build(dir string) (string, error) {
	lib, err := cbuild.Shared(dir, "nccl_standin", source, header)
	if err != nil {
		return "", fmt.Errorf("nccl standin: %w", err)
	}
	return lib, nil
}

// Lib is the loaded stand-in: its test-facing functions (c/nccl_standin.h).
type Lib struct {
	Path string
	h    uintptr

	violations, report, reset, counter, streamWait, setAsync, groupDepth uintptr
}

// Open loads the library at path (the process keeps one copy per path;
// the binding, loading the same path, gets the same one).
func Open(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: path, h: h}
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"standin_nccl_violations", &l.violations}, {"standin_nccl_report", &l.report},
		{"standin_nccl_reset", &l.reset}, {"standin_nccl_counter", &l.counter},
		{"standin_nccl_stream_wait", &l.streamWait}, {"standin_nccl_set_async_error", &l.setAsync},
		{"standin_nccl_group_depth", &l.groupDepth},
	} {
		if *s.p, err = purego.Dlsym(h, s.name); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Sym is the address of one of the library's functions (an NCCL entry
// point, for tests that call it with a wrong layout on purpose).
func (l *Lib) Sym(name string) uintptr {
	p, err := purego.Dlsym(l.h, name)
	if err != nil {
		panic(err)
	}
	return p
}

// Violations is how many calls broke NCCL's API since the last Reset.
func (l *Lib) Violations() int {
	r, _, _ := purego.SyscallN(l.violations)
	return int(int64(r))
}

// Report describes the violations, one a line.
func (l *Lib) Report() string {
	r, _, _ := purego.SyscallN(l.report)
	return cString(r)
}

// Reset forgets the violations and zeroes the counters.
func (l *Lib) Reset() { purego.SyscallN(l.reset) }

// Counter reads a counter: "collectives", "inits", "groups", "deferred",
// "destroys"; -1 for another name.
func (l *Lib) Counter(name string) int64 {
	b := append([]byte(name), 0)
	r, _, _ := purego.SyscallN(l.counter, uintptr(unsafe.Pointer(&b[0])))
	return int64(r)
}

// StreamWait is the stand-in's cuStreamSynchronize: it returns when every
// collective posted on stream has completed, or an error (and a violation)
// after timeout.
func (l *Lib) StreamWait(stream uintptr, timeout time.Duration) error {
	r, _, _ := purego.SyscallN(l.streamWait, stream, uintptr(timeout.Milliseconds()))
	if int32(r) != 0 {
		return fmt.Errorf("nccl standin: stream %#x: collectives did not complete within %v", stream, timeout)
	}
	return nil
}

// SetAsyncError makes ncclCommGetAsyncError report code for comm (an
// ncclComm_t); false if comm is not live.
func (l *Lib) SetAsyncError(comm uintptr, code int) bool {
	r, _, _ := purego.SyscallN(l.setAsync, comm, uintptr(code))
	return int32(r) == 0
}

// GroupDepth is the NCCL group depth of the calling OS thread.
func (l *Lib) GroupDepth() int {
	r, _, _ := purego.SyscallN(l.groupDepth)
	return int(int32(r))
}

func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := 0; ; i++ {
		c := *(*byte)(unsafe.Add(*(*unsafe.Pointer)(unsafe.Pointer(&p)), i))
		if c == 0 {
			return string(b)
		}
		b = append(b, c)
	}
}

package mpi

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"ferry/dist"
)

// Open MPI's ABI (mpi.h of Open MPI 4 and 5, the "libmpi.so.40" soname):
// handles are pointers to library globals, counts and ranks are C ints.
const (
	mpiSuccess      = 0
	mpiThreadFunnel = 1 // MPI_THREAD_FUNNELED
	mpiMaxErrString = 256
	mpiInPlace      = 1 // MPI_IN_PLACE is (void *) 1
	maxCount        = 1<<31 - 1
	defaultLibName  = "libmpi.so.40"
	libEnv          = "FERRY_LIBMPI"
)

// lib holds the entry points and the handles (addresses of globals).
type lib struct {
	path string

	initThread, finalize, initialized, finalized, commRank, commSize uintptr
	commSetErrhandler, errorString, getLibraryVersion, abort         uintptr
	allreduce, reduceScatterBlock, allgather, bcast, barrier         uintptr

	commWorld, float, opSum, errorsReturn uintptr
}

var (
	loadOnce sync.Once
	loaded   *lib
	loadErr  error
)

// load opens libmpi (FERRY_LIBMPI, else libmpi.so.40) once.
func load() (*lib, error) {
	loadOnce.Do(func() { loaded, loadErr = loadLib() })
	return loaded, loadErr
}

func loadLib() (*lib, error) {
	if runtime.GOOS != "linux" {
		return nil, dist.Unavailable("dist/mpi unavailable because the MPI backend is supported on linux only, not %s", runtime.GOOS)
	}
	name := defaultLibName
	if p := os.Getenv(libEnv); p != "" {
		name = p
	}
	// RTLD_GLOBAL: Open MPI's own plugins (mca_*.so), which it dlopens
	// during MPI_Init, resolve their references to libmpi through the
	// global scope.
	h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, dist.Unavailable("dist/mpi unavailable because %s could not be loaded (%v); install Open MPI (the libopenmpi3 and openmpi-bin packages on Debian) or set %s to the library's path",
			name, err, libEnv)
	}
	l := &lib{path: name}
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"MPI_Init_thread", &l.initThread}, {"MPI_Finalize", &l.finalize},
		{"MPI_Initialized", &l.initialized}, {"MPI_Finalized", &l.finalized},
		{"MPI_Comm_rank", &l.commRank}, {"MPI_Comm_size", &l.commSize},
		{"MPI_Comm_set_errhandler", &l.commSetErrhandler}, {"MPI_Error_string", &l.errorString},
		{"MPI_Get_library_version", &l.getLibraryVersion}, {"MPI_Abort", &l.abort},
		{"MPI_Allreduce", &l.allreduce}, {"MPI_Reduce_scatter_block", &l.reduceScatterBlock},
		{"MPI_Allgather", &l.allgather}, {"MPI_Bcast", &l.bcast}, {"MPI_Barrier", &l.barrier},
		// Open MPI's predefined handles: MPI_COMM_WORLD is
		// &ompi_mpi_comm_world, and so on.
		{"ompi_mpi_comm_world", &l.commWorld}, {"ompi_mpi_float", &l.float},
		{"ompi_mpi_op_sum", &l.opSum},
		{"ompi_mpi_errors_return", &l.errorsReturn},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, dist.Unavailable("dist/mpi unavailable because %s has no symbol %s: ferry needs Open MPI 4 or later (MPICH and others lay out their handles differently)",
				name, s.name)
		}
		*s.p = p
	}
	return l, nil
}

// call runs fn with args and turns a return code other than MPI_SUCCESS
// into an error naming what. It must run on the MPI thread.
//
//go:uintptrescapes
func (l *lib) call(what string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	if code := int32(r); code != mpiSuccess {
		return &Error{Call: what, Code: int(code), Text: l.errText(code)}
	}
	return nil
}

func (l *lib) errText(code int32) string {
	buf := make([]byte, mpiMaxErrString+1)
	var n int32
	r, _, _ := purego.SyscallN(l.errorString, uintptr(code), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)))
	if int32(r) != mpiSuccess || n <= 0 || int(n) > len(buf) {
		return ""
	}
	return string(buf[:n])
}

// version is MPI_Get_library_version's first line ("Open MPI v4.1.4, ...").
func (l *lib) version() string {
	buf := make([]byte, 8192) // MPI_MAX_LIBRARY_VERSION_STRING is 256 in Open MPI; be generous
	var n int32
	r, _, _ := purego.SyscallN(l.getLibraryVersion, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)))
	if int32(r) != mpiSuccess || n <= 0 || int(n) > len(buf) {
		return ""
	}
	s := strings.TrimRight(string(buf[:n]), "\x00\n")
	first, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(first)
}

// Error is a failed MPI call.
type Error struct {
	Call string // the MPI function
	Code int    // its return code
	Text string // MPI_Error_string's words for it
}

func (e *Error) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("%s failed with MPI error %d", e.Call, e.Code)
	}
	return fmt.Sprintf("%s failed with MPI error %d: %s", e.Call, e.Code, e.Text)
}

// Available reports whether the MPI library can be loaded, without
// initialising MPI; the error, wrapping dist.ErrUnavailable, says why not.
func Available() error {
	_, err := load()
	return err
}

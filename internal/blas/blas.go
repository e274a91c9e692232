// Package blas binds a native BLAS (OpenBLAS) single-precision matrix
// multiply at run time, without cgo, using github.com/ebitengine/purego.
//
// The shared library is opened lazily, once, on the first call to any
// function of this package. The search order is:
//
//  1. the path in the FERRY_BLAS environment variable, if set
//     (FERRY_BLAS=off, none, 0, false or no disables native BLAS entirely,
//     which lets tests and benchmarks force the pure-Go fallback);
//  2. libopenblas.so.0, libopenblas.so (default dynamic-linker search);
//  3. /usr/lib/x86_64-linux-gnu/libopenblas.so.0 and
//     /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0;
//  4. libblas.so.3, accepted only if it exports cblas_sgemm;
//  5. on macOS also libopenblas.dylib (Homebrew paths) and the Accelerate
//     framework.
//
// A library is used only if it exports cblas_sgemm. When none can be
// loaded, Available reports false and Reason explains why; callers are
// expected to fall back to ferry/internal/gemm.
//
// All matrices are row-major, exactly as cblas_sgemm with CblasRowMajor.
// Dimensions and leading dimensions must fit in a C int (the 32-bit "LP64"
// BLAS interface, the Debian default).
//
// Calls go through the Fortran entry point sgemm_ when the library exports
// it (OpenBLAS and the reference BLAS do): it takes every argument by
// reference, so purego.SyscallN can call it directly, costing about 0.25 µs
// and one small allocation per call. Otherwise Sgemm calls cblas_sgemm
// through a purego.RegisterFunc binding (needed for its float32 arguments,
// which go in SSE registers), which marshals arguments by reflection: about
// 0.9 µs and a dozen allocations per call. Either is noise for anything but
// tiny matrices; see BenchmarkSgemmCallOverhead.
package blas

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loaded   bool   // a library with cblas_sgemm is bound
	reason   string // why not, when !loaded
	libName  string // the name it was opened by

	threadsMu sync.Mutex
)

// disabledByEnv reports whether FERRY_BLAS turns native BLAS off.
func disabledByEnv() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("FERRY_BLAS"))) {
	case "off", "none", "0", "false", "no":
		return true
	}
	return false
}

// candidates returns the libraries to try, in order. A library named by
// FERRY_BLAS is the only one: when it does not load, nothing else is
// tried in its place (see EnvError).
func candidates() []string {
	var list []string
	if env := strings.TrimSpace(os.Getenv("FERRY_BLAS")); env != "" {
		return []string{env}
	}
	if runtime.GOOS == "darwin" {
		return append(list,
			"libopenblas.dylib",
			"/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
			"/usr/local/opt/openblas/lib/libopenblas.dylib",
			"/System/Library/Frameworks/Accelerate.framework/Accelerate",
		)
	}
	return append(list,
		"libopenblas.so.0",
		"libopenblas.so",
		"/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
		"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
		"libblas.so.3",
	)
}

func ensure() {
	loadOnce.Do(func() {
		if disabledByEnv() {
			reason = "native BLAS disabled by FERRY_BLAS=" + os.Getenv("FERRY_BLAS")
			return
		}
		load() // platform-specific; sets loaded, libName or reason
	})
}

// EnvError is the error of a library that FERRY_BLAS names explicitly
// and that did not load (a wrong path, a library without cblas_sgemm):
// nil when FERRY_BLAS is unset or turns native BLAS off, or the library
// loaded. The CPU device's driver returns it from Open, and ferry doctor
// reports it, so that a named library never silently becomes the pure-Go
// kernel.
func EnvError() error {
	env := strings.TrimSpace(os.Getenv("FERRY_BLAS"))
	if env == "" || disabledByEnv() {
		return nil
	}
	ensure()
	if loaded {
		return nil
	}
	return fmt.Errorf("FERRY_BLAS=%s does not load: %s (fix the path, unset FERRY_BLAS to search the usual places, "+
		"or set FERRY_BLAS=off for the pure-Go kernel)", env, reason)
}

// Available reports whether a native BLAS was loaded; Reason says why not
// when it wasn't.
func Available() bool {
	ensure()
	return loaded
}

// Reason explains why no native BLAS is available ("" when one is), e.g.
// "libopenblas.so.0 not found (apt-get install libopenblas0-pthread); ...".
func Reason() string {
	ensure()
	return reason
}

// Library returns the path or soname of the loaded library, "" if none.
func Library() string {
	ensure()
	return libName
}

// Threads returns OpenBLAS's current thread count, or 0 when the library
// does not export openblas_get_num_threads (or none is loaded).
func Threads() int {
	ensure()
	if !loaded {
		return 0
	}
	return getThreads()
}

// SetThreads sets OpenBLAS's thread count (n >= 1) and reports whether the
// library supports it (exports openblas_set_num_threads).
func SetThreads(n int) bool {
	ensure()
	if !loaded || n < 1 {
		return false
	}
	threadsMu.Lock()
	defer threadsMu.Unlock()
	return setThreads(n)
}

func checkInt(name string, v int) {
	if v < 0 || v > math.MaxInt32 {
		panic(fmt.Sprintf("blas: %s = %d out of range for a 32-bit BLAS", name, v))
	}
}

func checkArgs(transA, transB bool, m, n, k, lda, ldb, ldc int) {
	checkInt("m", m)
	checkInt("n", n)
	checkInt("k", k)
	checkInt("lda", lda)
	checkInt("ldb", ldb)
	checkInt("ldc", ldc)
	// Minimal leading dimensions (row-major): width of the stored matrix.
	aw, bw := k, n
	if transA {
		aw = m
	}
	if transB {
		bw = k
	}
	if lda < max(1, aw) {
		panic(fmt.Sprintf("blas: lda = %d < %d", lda, max(1, aw)))
	}
	if ldb < max(1, bw) {
		panic(fmt.Sprintf("blas: ldb = %d < %d", ldb, max(1, bw)))
	}
	if ldc < max(1, n) {
		panic(fmt.Sprintf("blas: ldc = %d < %d", ldc, max(1, n)))
	}
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C on row-major matrices (like
// cblas_sgemm with CblasRowMajor). op(A) is m×k, op(B) is k×n, C is m×n;
// op(X) is X transposed when the matching trans flag is set (A is then
// stored k×m, B n×k). lda, ldb and ldc are row strides in elements. a, b
// and c point to the first element, so callers can pass memory that is not
// a Go slice (for example mmap'd memory); it must stay valid for the call.
// When beta == 0, C is not read (OpenBLAS semantics).
//
// Sgemm panics if no native BLAS is available (check Available first), if a
// dimension is negative or does not fit the 32-bit interface, or if a
// leading dimension is too small. It is safe for concurrent use.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, beta float32, c unsafe.Pointer, ldc int) {
	ensure()
	if !loaded {
		panic("blas: Sgemm called but no native BLAS is available: " + reason)
	}
	checkArgs(transA, transB, m, n, k, lda, ldb, ldc)
	if m == 0 || n == 0 {
		return
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// need returns the number of elements a row-major rows×cols matrix with
// leading dimension ld spans.
func need(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// SgemmSlices is Sgemm on Go slices. It panics with a descriptive message if
// a slice is too short for the given dimensions and leading dimensions.
func SgemmSlices(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ensure()
	if !loaded {
		panic("blas: SgemmSlices called but no native BLAS is available: " + reason)
	}
	checkArgs(transA, transB, m, n, k, lda, ldb, ldc)
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if nd := need(ar, ac, lda); len(a) < nd {
		panic(fmt.Sprintf("blas: len(a) = %d < %d needed for a %d×%d matrix with lda %d", len(a), nd, ar, ac, lda))
	}
	if nd := need(br, bc, ldb); len(b) < nd {
		panic(fmt.Sprintf("blas: len(b) = %d < %d needed for a %d×%d matrix with ldb %d", len(b), nd, br, bc, ldb))
	}
	if nd := need(m, n, ldc); len(c) < nd {
		panic(fmt.Sprintf("blas: len(c) = %d < %d needed for a %d×%d matrix with ldc %d", len(c), nd, m, n, ldc))
	}
	if m == 0 || n == 0 {
		return
	}
	pc := unsafe.Pointer(&c[0])
	pa, pb := pc, pc // k == 0: BLAS reads neither A nor B but wants valid pointers
	if k > 0 {
		pa, pb = unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	}
	sgemm(transA, transB, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

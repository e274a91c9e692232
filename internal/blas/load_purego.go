//go:build (darwin || freebsd || netbsd || (linux && (386 || amd64 || arm || arm64 || loong64 || ppc64le || riscv64))) && !android && !faketime

package blas

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// CBLAS enum values.
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

var (
	cblasSgemm func(order, transA, transB, m, n, k int32, alpha float32,
		a unsafe.Pointer, lda int32, b unsafe.Pointer, ldb int32,
		beta float32, c unsafe.Pointer, ldc int32)
	fortranSgemm  uintptr // address of sgemm_, 0 if not exported
	getNumThreads func() int32
	setNumThreads func(n int32)

	forceCBLAS bool // tests: use the cblas_sgemm binding even if sgemm_ exists
)

func load() {
	var errs []string
	for _, name := range candidates() {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		sym, err := purego.Dlsym(h, "cblas_sgemm")
		if err != nil || sym == 0 {
			errs = append(errs, name+": no cblas_sgemm symbol")
			_ = purego.Dlclose(h)
			continue
		}
		purego.RegisterFunc(&cblasSgemm, sym)
		if s, err := purego.Dlsym(h, "sgemm_"); err == nil {
			fortranSgemm = s
		}
		if s, err := purego.Dlsym(h, "openblas_get_num_threads"); err == nil && s != 0 {
			purego.RegisterFunc(&getNumThreads, s)
		}
		if s, err := purego.Dlsym(h, "openblas_set_num_threads"); err == nil && s != 0 {
			purego.RegisterFunc(&setNumThreads, s)
		}
		loaded = true
		libName = name
		return
	}
	if strings.TrimSpace(os.Getenv("FERRY_BLAS")) != "" {
		reason = strings.Join(errs, "; ")
		return
	}
	reason = "libopenblas.so.0 not found (apt-get install libopenblas0-pthread); tried " + strings.Join(errs, "; ")
}

func getThreads() int {
	if getNumThreads == nil {
		return 0
	}
	return int(getNumThreads())
}

func setThreads(n int) bool {
	if setNumThreads == nil {
		return false
	}
	setNumThreads(int32(n))
	return true
}

// sgemm calls the native library; arguments are already validated.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, beta float32, c unsafe.Pointer, ldc int) {
	if fortranSgemm != 0 && !forceCBLAS {
		callFortran(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	ta, tb := int32(cblasNoTrans), int32(cblasNoTrans)
	if transA {
		ta = cblasTrans
	}
	if transB {
		tb = cblasTrans
	}
	cblasSgemm(cblasRowMajor, ta, tb, int32(m), int32(n), int32(k), alpha,
		a, int32(lda), b, int32(ldb), beta, c, int32(ldc))
}

// fortranArgs holds the scalar arguments of sgemm_, which takes every
// argument by reference. It lives on the heap (pooled) so its address stays
// valid across the foreign call.
type fortranArgs struct {
	transA, transB byte
	_              [2]byte
	m, n, k        int32
	lda, ldb, ldc  int32
	alpha, beta    float32
}

var fortranPool = sync.Pool{New: func() any { return new(fortranArgs) }}

// callFortran evaluates the row-major product through the column-major
// Fortran interface: row-major C = op(A)·op(B) is column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, and a row-major matrix is its own transpose seen
// column-major, so A and B swap places and keep their trans flags.
func callFortran(transA, transB bool, m, n, k int, alpha float32, a unsafe.Pointer, lda int, b unsafe.Pointer, ldb int, beta float32, c unsafe.Pointer, ldc int) {
	p := fortranPool.Get().(*fortranArgs)
	*p = fortranArgs{
		transA: 'N', transB: 'N',
		m: int32(m), n: int32(n), k: int32(k),
		lda: int32(lda), ldb: int32(ldb), ldc: int32(ldc),
		alpha: alpha, beta: beta,
	}
	if transA {
		p.transA = 'T'
	}
	if transB {
		p.transB = 'T'
	}
	purego.SyscallN(fortranSgemm,
		uintptr(unsafe.Pointer(&p.transB)), uintptr(unsafe.Pointer(&p.transA)),
		uintptr(unsafe.Pointer(&p.n)), uintptr(unsafe.Pointer(&p.m)), uintptr(unsafe.Pointer(&p.k)),
		uintptr(unsafe.Pointer(&p.alpha)),
		uintptr(b), uintptr(unsafe.Pointer(&p.ldb)),
		uintptr(a), uintptr(unsafe.Pointer(&p.lda)),
		uintptr(unsafe.Pointer(&p.beta)),
		uintptr(c), uintptr(unsafe.Pointer(&p.ldc)),
		1, 1) // hidden Fortran lengths of the two character arguments
	fortranPool.Put(p)
}

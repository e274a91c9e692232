package cu

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

type blasLib struct {
	path    string
	version int

	create, destroy, setStream, setMathMode, sgemmStridedBatched uintptr
	setWorkspace                                                 uintptr // 0 before cuBLAS 11.? (optional)
	gemmStridedBatchedEx                                         uintptr // 0 when absent (optional: bfloat16 products)
}

// blasNames is where cuBLAS is looked for, newest first, for a driver of
// version driverVersion (cuDriverGetVersion: 12040 is CUDA 12.4). A cuBLAS
// of a newer CUDA major than the driver supports would load and then fail,
// so majors above the driver's are not tried; with the version unknown (0),
// every major is, newest first.
func blasNames(driverVersion int) []string {
	var names []string
	for major := 13; major >= 11; major-- {
		if driverVersion == 0 || major <= driverVersion/1000 {
			names = append(names, fmt.Sprintf("libcublas.so.%d", major))
		}
	}
	return names
}

// loadBLAS opens cuBLAS; on failure it returns why, in words.
func loadBLAS(driverVersion int) (*blasLib, string) {
	names := blasNames(driverVersion)
	if len(names) == 0 {
		return nil, fmt.Sprintf("the driver (CUDA %d.%d) is older than any cuBLAS ferry uses (11 to 13); update the driver", driverVersion/1000, driverVersion%1000/10)
	}
	if p := os.Getenv("FERRY_CUBLAS"); p != "" {
		names = []string{p}
	}
	h, name, errs := dlopenFirst(names)
	if h == 0 {
		return nil, fmt.Sprintf("cuBLAS not found (%s); install it (it ships with the CUDA toolkit and with PyTorch's nvidia-cublas wheel), "+
			"put its directory on LD_LIBRARY_PATH or set FERRY_CUBLAS to its path", strings.Join(errs, "; "))
	}
	b := &blasLib{path: mappedPath(name)}
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"cublasCreate_v2", &b.create}, {"cublasDestroy_v2", &b.destroy},
		{"cublasSetStream_v2", &b.setStream}, {"cublasSetMathMode", &b.setMathMode},
		{"cublasSgemmStridedBatched", &b.sgemmStridedBatched},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Sprintf("%s has no symbol %s", name, s.name)
		}
		*s.p = p
	}
	if p, err := purego.Dlsym(h, "cublasSetWorkspace_v2"); err == nil {
		b.setWorkspace = p
	}
	if p, err := purego.Dlsym(h, "cublasGemmStridedBatchedEx"); err == nil {
		b.gemmStridedBatchedEx = p
	}
	if p, err := purego.Dlsym(h, "cublasGetProperty"); err == nil && p != 0 {
		var v [3]int32 // MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
		for i := range v {
			purego.SyscallN(p, uintptr(i), uintptr(unsafe.Pointer(&v[i])))
		}
		b.version = int(v[0])*10000 + int(v[1])*100 + int(v[2])
	}
	return b, ""
}

func (c *context) blas(call string) (*blasLib, error) {
	if c.l.blas == nil {
		return nil, fmt.Errorf("%s: %w: %s", call, ErrNoBLAS, c.l.info.BLASError)
	}
	return c.l.blas, nil
}

// blasCall runs a cuBLAS function with the context current.
//
//go:uintptrescapes
func (c *context) blasCall(name string, fn uintptr, args ...uintptr) error {
	r, err := c.callRaw(fn, args...)
	if err != nil {
		return err
	}
	if uint32(r) != 0 { // cublasStatus_t is 32 bits
		return BLASError(name, BLASStatus(uint32(r)))
	}
	return nil
}

func (c *context) BLASCreate() (BLASHandle, error) {
	b, err := c.blas("cublasCreate_v2")
	if err != nil {
		return 0, err
	}
	h := new(uintptr)
	err = c.blasCall("cublasCreate_v2", b.create, uintptr(unsafe.Pointer(h)))
	return BLASHandle(*h), err
}

func (c *context) BLASDestroy(h BLASHandle) error {
	b, err := c.blas("cublasDestroy_v2")
	if err != nil {
		return err
	}
	return c.blasCall("cublasDestroy_v2", b.destroy, uintptr(h))
}

func (c *context) BLASSetStream(h BLASHandle, s Stream) error {
	b, err := c.blas("cublasSetStream_v2")
	if err != nil {
		return err
	}
	return c.blasCall("cublasSetStream_v2", b.setStream, uintptr(h), uintptr(s))
}

func (c *context) BLASSetWorkspace(h BLASHandle, p DevicePtr, n int64) error {
	b, err := c.blas("cublasSetWorkspace_v2")
	if err != nil {
		return err
	}
	if b.setWorkspace == 0 {
		return BLASError("cublasSetWorkspace_v2", BLASNotSupported)
	}
	return c.blasCall("cublasSetWorkspace_v2", b.setWorkspace, uintptr(h), uintptr(p), uintptr(n))
}

func (c *context) BLASSetMathMode(h BLASHandle, m MathMode) error {
	b, err := c.blas("cublasSetMathMode")
	if err != nil {
		return err
	}
	return c.blasCall("cublasSetMathMode", b.setMathMode, uintptr(h), uintptr(m))
}

// scalars holds alpha and beta where cuBLAS can read them by pointer
// during the call (heap memory, which does not move).
type scalars struct{ alpha, beta float32 }

var scalarPool = sync.Pool{New: func() any { return new(scalars) }}

func blasOp(trans bool) uintptr {
	if trans {
		return 1 // CUBLAS_OP_T
	}
	return 0 // CUBLAS_OP_N
}

func (c *context) SgemmStridedBatched(h BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a DevicePtr, lda int, strideA int64, b DevicePtr, ldb int, strideB int64,
	beta float32, cp DevicePtr, ldc int, strideC int64, batch int) error {
	bl, err := c.blas("cublasSgemmStridedBatched")
	if err != nil {
		return err
	}
	s := scalarPool.Get().(*scalars)
	s.alpha, s.beta = alpha, beta
	err = c.blasCall("cublasSgemmStridedBatched", bl.sgemmStridedBatched, uintptr(h),
		blasOp(transA), blasOp(transB), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&s.alpha)), uintptr(a), uintptr(lda), uintptr(strideA),
		uintptr(b), uintptr(ldb), uintptr(strideB),
		uintptr(unsafe.Pointer(&s.beta)), uintptr(cp), uintptr(ldc), uintptr(strideC), uintptr(batch))
	scalarPool.Put(s)
	return err
}

// GemmStridedBatchedEx calls cublasGemmStridedBatchedEx(handle, transa,
// transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
// beta, C, Ctype, ldc, strideC, batchCount, computeType, algo).
func (c *context) GemmStridedBatchedEx(h BLASHandle, transA, transB bool, m, n, k int, alpha float32,
	a DevicePtr, typeA DataType, lda int, strideA int64, b DevicePtr, typeB DataType, ldb int, strideB int64,
	beta float32, cp DevicePtr, typeC DataType, ldc int, strideC int64, batch int) error {
	const call = "cublasGemmStridedBatchedEx"
	bl, err := c.blas(call)
	if err != nil {
		return err
	}
	if bl.gemmStridedBatchedEx == 0 {
		e := BLASError(call, BLASNotSupported)
		e.Detail = bl.path + " has no symbol " + call
		return e
	}
	algo := int32(GemmDefault) // a C int: negative, sign-extended in its slot
	s := scalarPool.Get().(*scalars)
	s.alpha, s.beta = alpha, beta
	err = c.blasCall(call, bl.gemmStridedBatchedEx, uintptr(h),
		blasOp(transA), blasOp(transB), uintptr(m), uintptr(n), uintptr(k),
		uintptr(unsafe.Pointer(&s.alpha)), uintptr(a), uintptr(typeA), uintptr(lda), uintptr(strideA),
		uintptr(b), uintptr(typeB), uintptr(ldb), uintptr(strideB),
		uintptr(unsafe.Pointer(&s.beta)), uintptr(cp), uintptr(typeC), uintptr(ldc), uintptr(strideC), uintptr(batch),
		uintptr(Compute32F), uintptr(algo))
	scalarPool.Put(s)
	return err
}

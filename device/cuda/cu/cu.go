// Package cu is the part of the CUDA driver API and of cuBLAS that ferry's
// CUDA device uses, as a Go interface with two implementations: the real
// libraries, loaded at run time with purego (Load), and a fake over host
// memory for tests (package ferry/device/cuda/fake).
//
// Everything the device does to the GPU goes through Driver and Context, so
// that the device's own logic (argument packing, launch configuration,
// memory, stream and event ordering, error paths) runs unchanged against
// either one.
//
// Every call that fails returns an *Error naming the call, with the
// driver's own name and text for the status (cuGetErrorName,
// cuGetErrorString; cublasGetStatusName for cuBLAS).
package cu

import (
	"errors"
	"fmt"
	"unsafe"
)

// Handles, as the driver API spells them. Zero is never a valid handle that
// ferry uses: in particular Stream(0), the legacy default stream, is never
// passed by the device (the fake rejects it).
type (
	DevicePtr  uint64  // CUdeviceptr
	Stream     uintptr // CUstream
	Event      uintptr // CUevent
	Module     uintptr // CUmodule
	Function   uintptr // CUfunction
	BLASHandle uintptr // cublasHandle_t
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Threads is the number of threads (or blocks) d describes.
func (d Dim3) Threads() uint64 { return uint64(d.X) * uint64(d.Y) * uint64(d.Z) }

// Result is a CUresult.
type Result int32

// The CUresult values ferry looks at (cuda.h).
const (
	Success           Result = 0
	ErrInvalidValue   Result = 1
	ErrOutOfMemory    Result = 2
	ErrNotInitialized Result = 3
	ErrDeinitialized  Result = 4
	ErrNoDevice       Result = 100
	ErrInvalidDevice  Result = 101
	ErrInvalidPTX     Result = 218
	ErrInvalidHandle  Result = 400
	ErrNotFound       Result = 500
	ErrNotReady       Result = 600
	ErrIllegalAddress Result = 700
	ErrLaunchOutOfRes Result = 701
	ErrLaunchFailed   Result = 719
	ErrNotSupported   Result = 801
	ErrUnknown        Result = 999
	// The realistic failure with a driver older than the PTX: the JIT
	// refuses the PTX ISA version. (35, cudaErrorInsufficientDriver, is a
	// runtime-API code; the driver API has none such.)
	ErrUnsupportedPTX   Result = 222
	ErrJITNotFound      Result = 221
	ErrSystemDriverMism Result = 803
)

// BLASStatus is a cublasStatus_t.
type BLASStatus int32

// cublasStatus_t values (cublas_api.h).
const (
	BLASSuccess         BLASStatus = 0
	BLASNotInitialized  BLASStatus = 1
	BLASAllocFailed     BLASStatus = 3
	BLASInvalidValue    BLASStatus = 7
	BLASArchMismatch    BLASStatus = 8
	BLASMappingError    BLASStatus = 11
	BLASExecutionFailed BLASStatus = 13
	BLASInternalError   BLASStatus = 14
	BLASNotSupported    BLASStatus = 15
)

var blasStatusNames = map[BLASStatus]string{
	BLASSuccess: "CUBLAS_STATUS_SUCCESS", BLASNotInitialized: "CUBLAS_STATUS_NOT_INITIALIZED",
	BLASAllocFailed: "CUBLAS_STATUS_ALLOC_FAILED", BLASInvalidValue: "CUBLAS_STATUS_INVALID_VALUE",
	BLASArchMismatch: "CUBLAS_STATUS_ARCH_MISMATCH", BLASMappingError: "CUBLAS_STATUS_MAPPING_ERROR",
	BLASExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED", BLASInternalError: "CUBLAS_STATUS_INTERNAL_ERROR",
	BLASNotSupported: "CUBLAS_STATUS_NOT_SUPPORTED",
}

// MathMode is a cublasMath_t.
type MathMode int32

const (
	// DefaultMath: plain FP32 arithmetic (PyTorch's allow_tf32=False).
	DefaultMath MathMode = 0
	// TF32Math lets FP32 products run on tensor cores with TF32 inputs
	// (PyTorch's allow_tf32=True); about 1e-3 relative error.
	TF32Math MathMode = 3
)

// DataType is a cudaDataType_t: the element type of a cuBLAS Ex call's
// matrix (library_types.h).
type DataType int32

const (
	R32F  DataType = 0  // CUDA_R_32F: float32
	R16BF DataType = 14 // CUDA_R_16BF: bfloat16
)

// ComputeType is a cublasComputeType_t (cublas_api.h).
type ComputeType int32

// Compute32F: products and sums in float32 (CUBLAS_COMPUTE_32F); alpha
// and beta are float32.
const Compute32F ComputeType = 68

// GemmDefault is CUBLAS_GEMM_DEFAULT, the cublasGemmAlgo_t that lets
// cuBLAS choose (tensor cores included, for bfloat16 operands).
const GemmDefault = -1

// Error is a failed driver or cuBLAS call.
type Error struct {
	Call   string // "cuMemAlloc_v2", "cublasSgemmStridedBatched"
	Code   int32  // the CUresult or cublasStatus_t
	Name   string // "CUDA_ERROR_OUT_OF_MEMORY"
	Text   string // "out of memory"
	Detail string // more, when there is any (a JIT log)
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Text != "" {
		s += ": " + e.Text
	}
	if e.Detail != "" {
		s += "\n" + e.Detail
	}
	return s
}

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Call == "" && t.Code == e.Code
}

// IsResult reports whether err is a driver error with code r.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == int32(r) && !isBLASCall(e.Call)
}

func isBLASCall(call string) bool { return len(call) >= 6 && call[:6] == "cublas" }

// BLASError builds the error for a failed cuBLAS call.
func BLASError(call string, s BLASStatus) *Error {
	name, ok := blasStatusNames[s]
	if !ok {
		name = fmt.Sprintf("CUBLAS_STATUS_%d", s)
	}
	return &Error{Call: call, Code: int32(s), Name: name}
}

// ErrNoBLAS is returned (wrapped) by the BLAS methods of a Context whose
// driver could not load cuBLAS.
var ErrNoBLAS = errors.New("cuBLAS is not loaded")

// LibInfo says which libraries a Driver uses.
type LibInfo struct {
	DriverLib     string // the path of libcuda.so.1 as loaded, or "fake"
	DriverVersion int    // cuDriverGetVersion: 12040 is 12.4
	BLASLib       string // the path of libcublas, "" when not loaded
	BLASVersion   int    // major*10000 + minor*100 + patch, 0 when not loaded
	BLASError     string // why cuBLAS is not loaded
	InitError     string // cuInit's error when it found no device
}

// DeviceProps describe one GPU.
type DeviceProps struct {
	Name         string
	TotalMem     int64
	Major, Minor int // compute capability
	SMs          int // multiprocessors
}

// Driver is the CUDA driver library, initialised (cuInit has run).
type Driver interface {
	Info() LibInfo
	DeviceCount() (int, error)
	Device(ordinal int) (DeviceProps, error)
	// Open retains the device's primary context (cuDevicePrimaryCtxRetain).
	Open(ordinal int) (Context, error)
}

// Context is one device's primary context and the calls made in it. Its
// methods are safe for concurrent use: the real implementation makes the
// context current on the calling OS thread for each call.
//
// Async methods enqueue on the given stream and return at once; an error in
// the enqueued work surfaces at a later synchronising call (as a sticky
// context error for a kernel fault).
type Context interface {
	Synchronize() error // cuCtxSynchronize
	MemGetInfo() (free, total int64, err error)

	MemAlloc(n int64) (DevicePtr, error)
	MemFree(p DevicePtr) error
	// MemHostAlloc allocates n bytes of page-locked host memory, mapped
	// for every context (CU_MEMHOSTALLOC_PORTABLE).
	MemHostAlloc(n int64) (unsafe.Pointer, error)
	MemFreeHost(p unsafe.Pointer) error

	MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, n int64, s Stream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, n int64, s Stream) error
	MemcpyDtoDAsync(dst, src DevicePtr, n int64, s Stream) error
	// MemcpyHtoHAsync copies between page-locked host buffers
	// (cuMemcpyAsync, which unified addressing allows on host pointers).
	MemcpyHtoHAsync(dst, src unsafe.Pointer, n int64, s Stream) error
	// MemsetD32Async sets n 32-bit words at dst to v.
	MemsetD32Async(dst DevicePtr, v uint32, n int64, s Stream) error

	StreamCreate() (Stream, error) // CU_STREAM_NON_BLOCKING
	StreamDestroy(Stream) error
	StreamSynchronize(Stream) error
	StreamWaitEvent(Stream, Event) error

	EventCreate() (Event, error) // CU_EVENT_DISABLE_TIMING
	EventDestroy(Event) error
	EventRecord(Event, Stream) error
	// EventQuery reports whether the work before the event's last record
	// has finished (true for an event never recorded).
	EventQuery(Event) (bool, error)
	EventSynchronize(Event) error

	// ModuleLoadData loads a PTX image (NUL-terminated or not); a JIT
	// failure's log is in the error's Detail.
	ModuleLoadData(image []byte) (Module, error)
	ModuleUnload(Module) error
	ModuleGetFunction(m Module, name string) (Function, error)
	LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, args *Args) error

	// cuBLAS, on the handle's stream. Errors wrap ErrNoBLAS when cuBLAS
	// was not loaded.
	BLASCreate() (BLASHandle, error)
	BLASDestroy(BLASHandle) error
	BLASSetStream(BLASHandle, Stream) error
	// BLASSetWorkspace hands cuBLAS its workspace; ErrNotSupported-coded
	// when the library is too old to take one.
	BLASSetWorkspace(h BLASHandle, p DevicePtr, n int64) error
	BLASSetMathMode(BLASHandle, MathMode) error
	// SgemmStridedBatched is cublasSgemmStridedBatched: column-major, as
	// cuBLAS is; alpha and beta are passed to cuBLAS by (host) pointer.
	SgemmStridedBatched(h BLASHandle, transA, transB bool, m, n, k int, alpha float32,
		a DevicePtr, lda int, strideA int64, b DevicePtr, ldb int, strideB int64,
		beta float32, c DevicePtr, ldc int, strideC int64, batch int) error
	// GemmStridedBatchedEx is cublasGemmStridedBatchedEx with compute
	// type CUBLAS_COMPUTE_32F (float32 alpha and beta, by host pointer)
	// and CUBLAS_GEMM_DEFAULT: A, B and C of the element types given,
	// column-major. A cuBLAS without the symbol answers
	// CUBLAS_STATUS_NOT_SUPPORTED.
	GemmStridedBatchedEx(h BLASHandle, transA, transB bool, m, n, k int, alpha float32,
		a DevicePtr, typeA DataType, lda int, strideA int64, b DevicePtr, typeB DataType, ldb int, strideB int64,
		beta float32, c DevicePtr, typeC DataType, ldc int, strideC int64, batch int) error

	// Do runs f with the context current on the calling goroutine's OS
	// thread, held for the duration of f: for libraries that act in the
	// current context, such as NCCL (ncclCommInitRank and every
	// collective). f must not start goroutines that expect the context.
	Do(f func() error) error

	// Close releases the primary context (cuDevicePrimaryCtxRelease).
	Close() error
}

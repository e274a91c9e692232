package cu

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unsafe"
)

func TestArgs(t *testing.T) {
	var a Args
	a.I32(-3).F32(1.5).Ptr(0x7f0000001000).I64(1<<40).Int64s(1, 2, 3)
	if a.Len() != 5 {
		t.Fatalf("Len %d", a.Len())
	}
	for i, want := range []int{4, 4, 8, 8, 24} {
		if a.Size(i) != want {
			t.Errorf("param %d: %d bytes, want %d", i, a.Size(i), want)
		}
	}
	if got := int32(binary.LittleEndian.Uint32(a.Param(0))); got != -3 {
		t.Errorf("I32: %d", got)
	}
	if got := binary.LittleEndian.Uint64(a.Param(2)); got != 0x7f0000001000 {
		t.Errorf("Ptr: %#x", got)
	}
	if got := binary.LittleEndian.Uint64(a.Param(4)[16:]); got != 3 {
		t.Errorf("struct field 2: %d", got)
	}
	ptrs := a.Pointers()
	for i, p := range ptrs {
		if uintptr(p)%8 != 0 {
			t.Errorf("param %d is not 8-byte aligned", i)
		}
		if *(*byte)(p) != a.Param(i)[0] {
			t.Errorf("pointer %d does not point at its parameter", i)
		}
	}
	if *(*int64)(unsafe.Pointer(ptrs[3])) != 1<<40 {
		t.Errorf("I64 through its pointer")
	}
	a.Reset().I32(7)
	if a.Len() != 1 || len(a.Pointers()) != 1 {
		t.Errorf("Reset")
	}
}

func TestParsePTX(t *testing.T) {
	ptx := `
.visible .entry k1(
	.param .u32 k1_param_0,
	.param .f32 k1_param_1,
	.param .u64 k1_param_2,
	.param .align 8 .b8 k1_param_3[264]
)
{ ret; }
.visible .entry k2()
{ ret; }
`
	es, err := ParsePTX([]byte(ptx))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Name != "k1" || len(es[0].Params) != 4 || es[0].Params[3] != 264 || es[0].Params[0] != 4 || len(es[1].Params) != 0 {
		t.Errorf("ParsePTX: %+v", es)
	}
	if _, err := ParsePTX([]byte("nothing")); err == nil {
		t.Errorf("no entries: no error")
	}
}

func TestErrors(t *testing.T) {
	e := &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Text: "out of memory"}
	if e.Error() != "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" {
		t.Errorf("%q", e)
	}
	var err error = e
	if !IsResult(err, ErrOutOfMemory) || IsResult(err, ErrInvalidValue) {
		t.Errorf("IsResult")
	}
	b := BLASError("cublasSgemmStridedBatched", BLASInvalidValue)
	if !strings.Contains(b.Error(), "CUBLAS_STATUS_INVALID_VALUE") || IsResult(b, Result(BLASInvalidValue)) {
		t.Errorf("BLASError: %v", b)
	}
	if !errors.Is(err, &Error{Code: 2}) {
		t.Errorf("errors.Is by code")
	}
}

// The libraries' names are looked up in words when missing.
func TestLoadMissing(t *testing.T) {
	t.Setenv("FERRY_LIBCUDA", "/nonexistent/libcuda.so.1")
	_, err := load()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not found") || !strings.Contains(err.Error(), "FERRY_LIBCUDA") {
		t.Errorf("load with a missing libcuda: %v", err)
	}
	t.Setenv("FERRY_CUBLAS", "/nonexistent/libcublas.so.12")
	b, why := loadBLAS(0)
	if b != nil || !strings.Contains(why, "cuBLAS not found") || !strings.Contains(why, "FERRY_CUBLAS") {
		t.Errorf("loadBLAS with a missing library: %v %q", b, why)
	}
}

// Where the real libraries are installed (with or without a GPU), every
// symbol the binding uses resolves and error names come from the driver.
func TestRealLibraries(t *testing.T) {
	l, err := load()
	if err != nil {
		t.Skipf("libcuda.so.1 not loadable here: %v", err)
	}
	if l.info.DriverVersion < 11000 {
		t.Errorf("driver version %d", l.info.DriverVersion)
	}
	e := l.errorOf("cuMemAlloc_v2", uintptr(ErrOutOfMemory))
	if e.Name != "CUDA_ERROR_OUT_OF_MEMORY" || e.Text == "" {
		t.Errorf("cuGetErrorName/String: %+v", e)
	}
	t.Logf("driver %s (%d), cuBLAS %q (%d) %s", l.info.DriverLib, l.info.DriverVersion, l.info.BLASLib, l.info.BLASVersion, l.info.BLASError)
	if l.blas != nil && l.blas.setWorkspace == 0 {
		t.Logf("this cuBLAS has no cublasSetWorkspace_v2")
	}
}

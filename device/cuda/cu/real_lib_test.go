package cu

import (
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

// TestRealLibrarySymbols runs where the real driver library is installed
// (Debian non-free: libcuda1, libcublas11; .ci/run installs them): every
// symbol ferry binds must resolve in it and in cuBLAS, the driver's version
// must read, and without a GPU cuInit must fail with the driver's own
// error name.
func TestRealLibrarySymbols(t *testing.T) {
	h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Skipf("no libcuda.so.1 here (%v); install Debian's libcuda1 to run this test", err)
	}
	purego.Dlclose(h)
	d, err := Load()
	if err != nil {
		t.Fatalf("the real driver library does not bind: %v", err)
	}
	info := d.Info()
	if info.DriverVersion < 11000 {
		t.Errorf("driver version %d", info.DriverVersion)
	}
	if info.BLASLib == "" {
		if strings.Contains(info.BLASError, "has no symbol") {
			t.Errorf("cuBLAS lacks a symbol: %s", info.BLASError)
		} else {
			t.Logf("no cuBLAS: %s", info.BLASError)
		}
	}
	// Optional in the binding (bfloat16 products fall back to ferry's
	// kernel without it), but every cuBLAS ferry loads (11 to 13) has it.
	if b := loaded.blas; b != nil && b.gemmStridedBatchedEx == 0 {
		t.Errorf("%s has no cublasGemmStridedBatchedEx", b.path)
	}
	if n, _ := d.DeviceCount(); n == 0 && !strings.Contains(info.InitError, "CUDA_ERROR_NO_DEVICE") {
		t.Errorf("without a GPU, cuInit says %q", info.InitError)
	}
	t.Logf("driver %s (version %d), cuBLAS %s %d; init: %s", info.DriverLib, info.DriverVersion, info.BLASLib, info.BLASVersion, info.InitError)
}

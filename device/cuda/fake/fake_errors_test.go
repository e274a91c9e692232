package fake

import (
	"testing"

	"ferry/device/cuda/cu"
)

// The error table follows the driver API's cuda.h: 222 is the code an old
// driver gives for new PTX; 35 is a runtime-API code the driver never
// returns.
func TestErrorTableIsTheDriverAPIs(t *testing.T) {
	if n := resultNames[cu.ErrUnsupportedPTX][0]; cu.ErrUnsupportedPTX != 222 || n != "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" {
		t.Errorf("222 is %q", n)
	}
	if n, ok := resultNames[35]; ok {
		t.Errorf("35 (a runtime-API code) is in the driver's table as %q", n[0])
	}
	for r, n := range resultNames {
		if got := errorOf("cuX", r, "").Name; got != n[0] {
			t.Errorf("%d: %s", r, got)
		}
	}
}

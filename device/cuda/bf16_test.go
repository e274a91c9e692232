package cuda_test

import (
	"testing"

	"ferry/device"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/device/cuda/internal/bf16check"
)

// Convert on the fake driver, through the launches of
// ferry_convert_strided with 32- and 64-bit indices.
func TestConvertFake(t *testing.T) {
	for _, params := range []map[string]string{nil, {"index64": "true"}} {
		t.Run("index64="+params["index64"], func(t *testing.T) {
			d, drv := openFake(t, fakeOpts(), device.Options{PoisonFreed: true, Params: params})
			bf16check.Convert(t, d)
			name := "ferry_convert_strided32"
			if params != nil {
				name = "ferry_convert_strided64"
			}
			if drv.Calls("cuLaunchKernel/"+name) == 0 {
				t.Errorf("%s never launched", name)
			}
		})
	}
}

// bfloat16 products through the fake's cublasGemmStridedBatchedEx, and
// through ferry_gemm_bf16 without cuBLAS: both the CPU device's products
// (Note [one source per kernel] in fake/kernels.go), so within float32
// summation's error of a float64 product; the stand-in checks the order
// of ferry_gemm_bf16's sums from its source.
func TestGemmBFloat16Fake(t *testing.T) {
	t.Run("cuBLAS", func(t *testing.T) {
		d, drv := openFake(t, fakeOpts(), device.Options{PoisonFreed: true})
		bf16check.Gemm(t, d, false) // the fake sums in the CPU device's order
		if drv.Calls("cublasGemmStridedBatchedEx") == 0 || drv.Calls("cuLaunchKernel/ferry_gemm_bf16") != 0 {
			t.Errorf("%d calls of cublasGemmStridedBatchedEx, %d launches of ferry_gemm_bf16; want cuBLAS only",
				drv.Calls("cublasGemmStridedBatchedEx"), drv.Calls("cuLaunchKernel/ferry_gemm_bf16"))
		}
	})
	for _, c := range []struct {
		name   string
		fo     fake.Options
		params map[string]string
	}{
		{"no cuBLAS", fake.Options{SMs: 4, NoBLAS: true}, nil},
		{"cublas=false", fakeOpts(), map[string]string{"cublas": "false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, drv := openFake(t, c.fo, device.Options{PoisonFreed: true, Params: c.params})
			bf16check.Gemm(t, d, false) // the fake sums in the CPU device's order
			if drv.Calls("cuLaunchKernel/ferry_gemm_bf16") == 0 {
				t.Error("ferry_gemm_bf16 never launched")
			}
		})
	}
}

// Where cuBLAS answers that it cannot (an old cuBLAS without the call, a
// GPU it has no bfloat16 kernel for), ferry_gemm_bf16 computes the
// product; any other cuBLAS error is returned.
func TestGemmBFloat16Fallback(t *testing.T) {
	for _, code := range []cu.BLASStatus{cu.BLASNotSupported, cu.BLASArchMismatch} {
		t.Run(cu.BLASError("", code).Name, func(t *testing.T) {
			d, drv := openFake(t, fakeOpts(), device.Options{PoisonFreed: true})
			drv.Fail("cublasGemmStridedBatchedEx", int32(code), 1000)
			bf16check.Gemm(t, d, false) // the fake sums in the CPU device's order
			if drv.Calls("cuLaunchKernel/ferry_gemm_bf16") == 0 {
				t.Error("ferry_gemm_bf16 never launched")
			}
		})
	}
	t.Run("other errors stay errors", func(t *testing.T) {
		d, drv := openFake(t, fakeOpts(), device.Options{})
		b, err := d.Allocator().Alloc(64, device.Activation)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Allocator().Free(b)
		drv.Fail("cublasGemmStridedBatchedEx", int32(cu.BLASExecutionFailed), 1)
		err = d.Kernels().Gemm(device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: b, B: b, C: b, LDA: 2, LDB: 2, LDC: 2, Batch: 1,
			TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.Float32})
		wantErr(t, err, "cublasGemmStridedBatchedEx", "CUBLAS_STATUS_EXECUTION_FAILED")
		if drv.Calls("cuLaunchKernel/ferry_gemm_bf16") != 0 {
			t.Error("ferry_gemm_bf16 launched after a cuBLAS failure that is not NOT_SUPPORTED")
		}
	})
}

// bfloat16 on a real GPU (FERRY_CUDA_REAL=1; scripts/gpu-check.sh runs it
// in its conformance step): Convert's kernel bit for bit against
// device.ToBFloat16; products through cuBLAS's cublasGemmStridedBatchedEx
// (or, where cuBLAS cannot, ferry_gemm_bf16) against a float64 product
// (cuBLAS sums in its own order, so not bit for bit), and through
// ferry_gemm_bf16 (cublas=false) bit for bit against the float32 sum in
// order, which it computes unfused (--fmad=false).
func TestRealBFloat16(t *testing.T) {
	d := openReal(t, device.Options{})
	t.Logf("%s (%s)", d.Props().Name, d.MatmulBackend())
	t.Run("Convert", func(t *testing.T) { bf16check.Convert(t, d) })
	t.Run("Gemm", func(t *testing.T) { bf16check.Gemm(t, d, false) })
	t.Run("Gemm cublas=false", func(t *testing.T) {
		bf16check.Gemm(t, openReal(t, device.Options{Params: map[string]string{"cublas": "false"}}), true)
	})
}

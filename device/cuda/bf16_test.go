package cuda_test

import (
	"errors"
	"testing"

	"ferry/device"
	"ferry/device/cuda/cu"
	"ferry/device/cuda/fake"
	"ferry/device/cuda/internal/bf16check"
)

// Convert on the fake driver, its kernel the fake's Go copy of
// ferry_convert_strided, with 32- and 64-bit indices.
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

// bfloat16 products through the fake's cublasGemmStridedBatchedEx, bit
// for bit against the float32 sum in order.
func TestGemmBFloat16Fake(t *testing.T) {
	d, drv := openFake(t, fakeOpts(), device.Options{PoisonFreed: true})
	bf16check.Gemm(t, d, true)
	if drv.Calls("cublasGemmStridedBatchedEx") == 0 {
		t.Error("cublasGemmStridedBatchedEx never called")
	}
}

// A bfloat16 product is refused, saying why, where cuBLAS is absent or
// answers that it cannot (an old cuBLAS without the call, a GPU it has no
// bfloat16 kernel for).
func TestGemmBFloat16Unsupported(t *testing.T) {
	p := func(d device.Device) device.GemmParams {
		b, err := d.Allocator().Alloc(64, device.Activation)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Allocator().Free(b) })
		return device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: b, B: b, C: b, LDA: 2, LDB: 2, LDC: 2, Batch: 1,
			TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.Float32}
	}
	var u *device.UnsupportedError
	t.Run("no cuBLAS", func(t *testing.T) {
		d, _ := openFake(t, fake.Options{NoBLAS: true}, device.Options{})
		err := d.Kernels().Gemm(p(d))
		if !errors.As(err, &u) {
			t.Fatalf("%v, want an *UnsupportedError", err)
		}
		wantErr(t, err, "cuBLAS", "bfloat16×bfloat16→float32", "cuda:0")
	})
	t.Run("cublas=false", func(t *testing.T) {
		d, _ := openFake(t, fakeOpts(), device.Options{Params: map[string]string{"cublas": "false"}})
		if err := d.Kernels().Gemm(p(d)); !errors.As(err, &u) {
			t.Fatalf("%v, want an *UnsupportedError", err)
		}
	})
	for _, code := range []cu.BLASStatus{cu.BLASNotSupported, cu.BLASArchMismatch} {
		t.Run(cu.BLASError("", code).Name, func(t *testing.T) {
			d, drv := openFake(t, fakeOpts(), device.Options{})
			drv.Fail("cublasGemmStridedBatchedEx", int32(code), 1)
			err := d.Kernels().Gemm(p(d))
			if !errors.As(err, &u) {
				t.Fatalf("%v, want an *UnsupportedError", err)
			}
			wantErr(t, err, "cublasGemmStridedBatchedEx")
		})
	}
	t.Run("other errors stay errors", func(t *testing.T) {
		d, drv := openFake(t, fakeOpts(), device.Options{})
		drv.Fail("cublasGemmStridedBatchedEx", int32(cu.BLASExecutionFailed), 1)
		err := d.Kernels().Gemm(p(d))
		if err == nil || errors.As(err, &u) {
			t.Fatalf("%v, want a plain error", err)
		}
	})
}

// bfloat16 on a real GPU (FERRY_CUDA_REAL=1; scripts/gpu-check.sh runs it
// in its conformance step): Convert's kernel bit for bit against
// device.ToBFloat16, and products through cuBLAS's
// cublasGemmStridedBatchedEx against a float64 product (cuBLAS sums in its
// own order, so not bit for bit). Without cuBLAS, or on a GPU it has no
// bfloat16 kernel for, the product must be refused with an
// *UnsupportedError, which the test reports as a skip of that part.
func TestRealBFloat16(t *testing.T) {
	d := openReal(t, device.Options{})
	t.Logf("%s (%s)", d.Props().Name, d.MatmulBackend())
	t.Run("Convert", func(t *testing.T) { bf16check.Convert(t, d) })
	t.Run("Gemm", func(t *testing.T) {
		b, err := d.Allocator().Alloc(64, device.Activation)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Allocator().Free(b)
		err = d.Kernels().Gemm(device.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, A: b, B: b, C: b, LDA: 2, LDB: 2, LDC: 2, Batch: 1,
			TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.Float32})
		var u *device.UnsupportedError
		if errors.As(err, &u) {
			t.Skipf("bfloat16 products refused: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		bf16check.Gemm(t, d, false)
	})
}

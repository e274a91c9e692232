package standin_test

import (
	"errors"
	"testing"

	"ferry/device"
	"ferry/device/cuda/internal/bf16check"
)

// bfloat16 through the real bindings: Convert's kernels (from source where
// there is g++) and products through the stand-in's
// cublasGemmStridedBatchedEx, which checks the call's arguments (types,
// compute type, algo, leading dimensions, strides, alignment, bounds) and
// sums in float32 in order of k, so the results match that sum bit for
// bit.
func TestBFloat16(t *testing.T) {
	l := setupPreferSource(t)
	dev := openCUDA(t, l, device.Options{PoisonFreed: true})
	t.Cleanup(func() { dev.Close() })
	t.Run("Convert", func(t *testing.T) { bf16check.Convert(t, dev) })
	t.Run("Gemm", func(t *testing.T) { bf16check.Gemm(t, dev, true) })
	if n := l.Counter("gemms_ex"); n < 16 {
		t.Errorf("%d calls of cublasGemmStridedBatchedEx, want one per product (16)", n)
	}
}

// The stand-in answers a type combination cuBLAS has no kernel for with
// CUBLAS_STATUS_NOT_SUPPORTED, and a compute type it does not model as a
// violation; an argument out of bounds (lda below the rows) is a
// violation, as the other cuBLAS calls' are.
func TestGemmExChecksArguments(t *testing.T) {
	l := setup(t)
	dev := openCUDA(t, l, device.Options{})
	t.Cleanup(func() { dev.Close() })
	b, err := dev.Allocator().Alloc(1024, device.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Allocator().Free(b)
	p := device.GemmParams{M: 4, N: 4, K: 4, Alpha: 1, A: b, B: b, C: b, LDA: 4, LDB: 4, LDC: 4, Batch: 1,
		TypeA: device.BFloat16, TypeB: device.BFloat16, TypeC: device.BFloat16}
	if err := dev.Kernels().Gemm(p); err != nil {
		t.Fatal(err)
	}
	if err := dev.Compute().Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n := l.Violations(); n != 0 {
		t.Fatalf("a valid call broke the API %d times:\n%s", n, l.Report())
	}
	p.LDA = 3 // rows of A's column-major transpose are K = 4
	err = dev.Kernels().Gemm(p)
	var u *device.UnsupportedError
	if err == nil || errors.As(err, &u) {
		t.Errorf("lda 3 < 4: %v, want cuBLAS's INVALID_VALUE", err)
	}
	if n := l.Violations(); n != 1 {
		t.Errorf("%d violations for lda < rows, want 1:\n%s", n, l.Report())
	}
	l.Reset()
}

package cuda

import (
	"errors"
	"fmt"
	"math"

	"ferry/device"
	"ferry/device/cuda/cu"
)

// Gemm runs a batched row-major product through cuBLAS, which is
// column-major. A row-major matrix read column-major is its transpose, so
// row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the call
// swaps A and B (and M and N), each keeping its own transpose flag and
// leading dimension. Without cuBLAS, ferry_gemm computes it directly.
//
// A bfloat16 product (GemmParams' types) goes through
// cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F, so float32 products
// and sums, and a bfloat16 C rounded to nearest even by cuBLAS. Without
// cuBLAS, or where cuBLAS lacks that call or answers that it has no
// kernel for this GPU, ferry_gemm_bf16 computes it.
func (k *kernels) Gemm(p device.GemmParams) error {
	d := k.d
	if err := device.CheckGemmTypes(d.name, p); err != nil {
		return err
	}
	if p.M == 0 || p.N == 0 || p.Batch == 0 {
		return nil
	}
	a, err := d.ptr(device.View{Block: p.A, Off: p.OffA, DType: p.TypeA})
	if err != nil {
		return err
	}
	b, err := d.ptr(device.View{Block: p.B, Off: p.OffB, DType: p.TypeB})
	if err != nil {
		return err
	}
	c, err := d.ptr(device.View{Block: p.C, Off: p.OffC, DType: p.TypeC})
	if err != nil {
		return err
	}
	if d.blasErr != nil {
		return k.gemmKernel(p, a, b, c)
	}
	for _, v := range []int{p.M, p.N, p.K, p.LDA, p.LDB, p.LDC, p.Batch} {
		if v > math.MaxInt32 {
			return fmt.Errorf("%s: gemm: dimension %d does not fit cuBLAS's 32-bit int: %w", d.name, v, device.ErrNotSupported)
		}
	}
	if err := d.ensureWorkspace(); err != nil {
		return err
	}
	if p.Mixed() {
		return k.gemmEx(p, a, b, c)
	}
	err = d.ctx.SgemmStridedBatched(d.blas, p.TransB, p.TransA, p.N, p.M, p.K, p.Alpha,
		b, p.LDB, int64(p.StrideB), a, p.LDA, int64(p.StrideA),
		p.Beta, c, p.LDC, int64(p.StrideC), p.Batch)
	if err != nil {
		return fmt.Errorf("%s: gemm %dx%dx%d (batch %d): %w", d.name, p.M, p.N, p.K, p.Batch, err)
	}
	return nil
}

// gemmEx runs a product with bfloat16 operands through
// cublasGemmStridedBatchedEx, swapped as Gemm swaps them. Where cuBLAS
// cannot (a library without the call answers NOT_SUPPORTED, as cuBLAS
// does, with ARCH_MISMATCH, for a GPU it has no bfloat16 kernel for),
// ferry_gemm_bf16 computes it: the call fails before any work is queued.
func (k *kernels) gemmEx(p device.GemmParams, a, b, c cu.DevicePtr) error {
	d := k.d
	err := d.ctx.GemmStridedBatchedEx(d.blas, p.TransB, p.TransA, p.N, p.M, p.K, p.Alpha,
		b, dataType(p.TypeB), p.LDB, int64(p.StrideB), a, dataType(p.TypeA), p.LDA, int64(p.StrideA),
		p.Beta, c, dataType(p.TypeC), p.LDC, int64(p.StrideC), p.Batch)
	if err == nil {
		return nil
	}
	var e *cu.Error
	if errors.As(err, &e) && (e.Code == int32(cu.BLASNotSupported) || e.Code == int32(cu.BLASArchMismatch)) {
		return k.gemmKernel(p, a, b, c)
	}
	return fmt.Errorf("%s: gemm %dx%dx%d (batch %d, %s×%s→%s): %w", d.name, p.M, p.N, p.K, p.Batch, p.TypeA, p.TypeB, p.TypeC, err)
}

// dataType is cuBLAS's name for an element type CheckGemmTypes lets
// through.
func dataType(t device.DType) cu.DataType {
	if t == device.BFloat16 {
		return cu.R16BF
	}
	return cu.R32F
}

// ensureWorkspace gives cuBLAS its workspace from the device's allocator at
// the first product, as PyTorch does, so that its bytes are counted (as
// workspace). A cuBLAS too old to take one keeps its own.
func (d *Device) ensureWorkspace() error {
	if d.workspace != nil || d.wsSize == 0 {
		return nil
	}
	b, err := d.alloc.Alloc(d.wsSize, device.Workspace)
	if err != nil {
		return fmt.Errorf("%s: cuBLAS workspace: %w", d.name, err)
	}
	p, _ := d.ptr(device.View{Block: b})
	if err := d.ctx.BLASSetWorkspace(d.blas, p, d.wsSize); err != nil {
		d.alloc.Free(b)
		if e, ok := err.(*cu.Error); ok && e.Code == int32(cu.BLASNotSupported) {
			d.wsSize = 0
			return nil
		}
		return fmt.Errorf("%s: %w", d.name, err)
	}
	d.workspace = b
	return nil
}

// gemmKernel runs ferry_gemm, or ferry_gemm_bf16 for bfloat16 operands:
// 16×16 threads per 16×16 tile of C, the batch along the grid's z
// (looping past 65535).
func (k *kernels) gemmKernel(p device.GemmParams, a, b, c cu.DevicePtr) error {
	const tile = 16
	gy := (p.M + tile - 1) / tile
	if gy > 65535 {
		why := "cuBLAS has no bfloat16 kernel here"
		if k.d.blasErr != nil {
			why = "cuBLAS is not loaded: " + k.d.blasErr.Error()
		}
		return fmt.Errorf("%s: gemm with M = %d is too tall for ferry's fallback kernel (%s): %w",
			k.d.name, p.M, why, device.ErrNotSupported)
	}
	grid := cu.Dim3{X: uint32((p.N + tile - 1) / tile), Y: uint32(gy), Z: uint32(min(p.Batch, 65535))}
	name, args := "ferry_gemm", newArgs()
	if p.Mixed() {
		name = "ferry_gemm_bf16"
		args.I32(b2i(p.TypeC == device.BFloat16))
	}
	args.I32(b2i(p.TransA)).I32(b2i(p.TransB)).I64(int64(p.M)).I64(int64(p.N)).I64(int64(p.K)).F32(p.Alpha).
		Ptr(a).I64(int64(p.LDA)).I64(int64(p.StrideA)).
		Ptr(b).I64(int64(p.LDB)).I64(int64(p.StrideB)).
		F32(p.Beta).Ptr(c).I64(int64(p.LDC)).I64(int64(p.StrideC)).I64(int64(p.Batch))
	return k.launch(name, grid, cu.Dim3{X: tile, Y: tile, Z: 1}, args)
}

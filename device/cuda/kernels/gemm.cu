// A plain tiled SGEMM, used only when cuBLAS cannot be loaded: row-major,
// C[z] = alpha*op(A[z])*op(B[z]) + beta*C[z] for z < batch, as
// device.GemmParams describes. Launched with 16x16 threads, grid
// (ceil(N/16), ceil(M/16), min(batch, 65535)). Each output sums its K
// products in order, in float32.
#include "common.cuh"

#define TILE 16

extern "C" __global__ void ferry_gemm(int trans_a, int trans_b, i64 M, i64 N, i64 K, float alpha,
                                      const float* A, i64 lda, i64 stride_a, const float* B, i64 ldb, i64 stride_b,
                                      float beta, float* C, i64 ldc, i64 stride_c, i64 batch) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const i64 row = (i64)blockIdx.y * TILE + ty;
  const i64 col = (i64)blockIdx.x * TILE + tx;
  for (i64 z = blockIdx.z; z < batch; z += gridDim.z) {
    const float* a = A + z * stride_a;
    const float* b = B + z * stride_b;
    float* c = C + z * stride_c;
    float acc = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += TILE) {
      i64 ka = k0 + tx, kb = k0 + ty;
      As[ty][tx] = (row < M && ka < K) ? (trans_a ? a[ka * lda + row] : a[row * lda + ka]) : 0.0f;
      Bs[ty][tx] = (kb < K && col < N) ? (trans_b ? b[col * ldb + kb] : b[kb * ldb + col]) : 0.0f;
      __syncthreads();
      int kk_end = (int)min((i64)TILE, K - k0);
      for (int kk = 0; kk < kk_end; kk++) acc += As[ty][kk] * Bs[kk][tx];
      __syncthreads();
    }
    if (row < M && col < N) {
      float r = alpha * acc;
      if (beta != 0.0f) r += beta * c[row * ldc + col];
      c[row * ldc + col] = r;
    }
  }
}

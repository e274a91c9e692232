// A plain tiled GEMM, used only when cuBLAS cannot be loaded (or, for
// bfloat16 operands, has no kernel for them): row-major,
// C[z] = alpha*op(A[z])*op(B[z]) + beta*C[z] for z < batch, as
// device.GemmParams describes. Launched with 16x16 threads, grid
// (ceil(N/16), ceil(M/16), min(batch, 65535)). Each output sums its K
// products in order, in float32. ferry_gemm takes float32 operands;
// ferry_gemm_bf16 bfloat16 A and B (widened exactly as tiles are loaded)
// with a float32 C, or with c_bf16 a bfloat16 C (read widened, written
// rounded to nearest even: f32_to_bf16).
#include "common.cuh"

#define TILE 16

__device__ __forceinline__ float load_elem(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float load_elem(const unsigned short* p, i64 i) { return __uint_as_float((unsigned)p[i] << 16); }
__device__ __forceinline__ void store_elem(float* p, i64 i, float v) { p[i] = v; }
__device__ __forceinline__ void store_elem(unsigned short* p, i64 i, float v) { p[i] = f32_to_bf16(__float_as_uint(v)); }

// gemm_tiles is the whole kernel over the block's shared tiles As and Bs.
template <typename TAB, typename TC>
__device__ void gemm_tiles(float (*As)[TILE + 1], float (*Bs)[TILE + 1], int trans_a, int trans_b, i64 M, i64 N, i64 K,
                           float alpha, const TAB* A, i64 lda, i64 stride_a, const TAB* B, i64 ldb, i64 stride_b, float beta,
                           TC* C, i64 ldc, i64 stride_c, i64 batch) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const i64 row = (i64)blockIdx.y * TILE + ty;
  const i64 col = (i64)blockIdx.x * TILE + tx;
  for (i64 z = blockIdx.z; z < batch; z += gridDim.z) {
    const TAB* a = A + z * stride_a;
    const TAB* b = B + z * stride_b;
    TC* c = C + z * stride_c;
    float acc = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += TILE) {
      i64 ka = k0 + tx, kb = k0 + ty;
      As[ty][tx] = (row < M && ka < K) ? load_elem(a, trans_a ? ka * lda + row : row * lda + ka) : 0.0f;
      Bs[ty][tx] = (kb < K && col < N) ? load_elem(b, trans_b ? col * ldb + kb : kb * ldb + col) : 0.0f;
      __syncthreads();
      int kk_end = (int)min((i64)TILE, K - k0);
      for (int kk = 0; kk < kk_end; kk++) acc += As[ty][kk] * Bs[kk][tx];
      __syncthreads();
    }
    if (row < M && col < N) {
      float r = alpha * acc;
      if (beta != 0.0f) r += beta * load_elem(c, row * ldc + col);
      store_elem(c, row * ldc + col, r);
    }
  }
}

extern "C" __global__ void ferry_gemm(int trans_a, int trans_b, i64 M, i64 N, i64 K, float alpha,
                                      const float* A, i64 lda, i64 stride_a, const float* B, i64 ldb, i64 stride_b,
                                      float beta, float* C, i64 ldc, i64 stride_c, i64 batch) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  gemm_tiles<float, float>(As, Bs, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                           stride_c, batch);
}

extern "C" __global__ void ferry_gemm_bf16(int c_bf16, int trans_a, int trans_b, i64 M, i64 N, i64 K, float alpha,
                                           const unsigned short* A, i64 lda, i64 stride_a, const unsigned short* B,
                                           i64 ldb, i64 stride_b, float beta, void* C, i64 ldc, i64 stride_c, i64 batch) {
  __shared__ float As[TILE][TILE + 1];
  __shared__ float Bs[TILE][TILE + 1];
  if (c_bf16)
    gemm_tiles<unsigned short, unsigned short>(As, Bs, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                               stride_b, beta, (unsigned short*)C, ldc, stride_c, batch);
  else
    gemm_tiles<unsigned short, float>(As, Bs, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                                      beta, (float*)C, ldc, stride_c, batch);
}

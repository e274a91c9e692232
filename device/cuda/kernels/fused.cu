// Fused kernels: a Linear layer's bias with GPT-2's GELU (forward), and
// AdamW over many tensors in one launch. Each does the float32 (or
// double) operations of the kernels it replaces, in their order, so that
// it gives their bits.
#include "common.cuh"
#include "ops.cuh"

// z[r, c] += bias[c]; dst = GELUTanh(z), as elementwise.cu's
// unary_op<U_GELU_TANH> computes it. z and dst are contiguous
// [rows, cols]. A block per row (grid-stride over rows), its threads along
// the row: no division per element.
extern "C" __global__ void ferry_bias_gelu_tanh(float* dst, float* z, const float* bias, i64 rows, i64 cols) {
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    float* zr = z + r * cols;
    float* yr = dst + r * cols;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
      float s = zr[c] + bias[c];
      zr[c] = s;
      double v = s;
      yr[c] = (float)(0.5 * v * (1.0 + tanh(SQRT2_OVER_PI * (v + GELU_COEF * v * v * v))));
    }
  }
}

// grad·GELUTanh'(z), as elementwise.cu's binary_op<B_GELU_TANH_GRAD>
// computes it (keep the two in step).
__device__ __forceinline__ float gelu_tanh_grad(float a, float b) {
  double v = b;
  double inner = SQRT2_OVER_PI * (v + GELU_COEF * v * v * v);
  double t = tanh(inner);
  double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * SQRT2_OVER_PI * (1.0 + GELU_COEF3 * v * v);
  return (float)((double)a * d);
}

// dst = grad·GELUTanh'(z) for contiguous [rows, cols], and the column sums
// of dst in the same pass, laid out as reduce.cu's ferry_sum_threads lays
// out the sum over rows (a thread per column, blockIdx.y a chunk of rows,
// double sums; split: partial sums that ferry_sum_finish adds), so that
// they are Sum's bits. dst may be grad.
extern "C" __global__ void ferry_gelu_tanh_backward_sum(float* dst, float* sum, double* partial, const float* grad,
                                                        const float* z, i64 rows, i64 cols, i64 chunk) {
  i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, rows);
  double acc = 0;
  for (i64 r = lo; r < hi; r++) {
    i64 i = r * cols + c;
    float d = gelu_tanh_grad(grad[i], z[i]);
    dst[i] = d;
    acc += (double)d;
  }
  if (gridDim.y == 1) {
    sum[c] = (float)(1.0 * acc);
  } else {
    partial[(i64)blockIdx.y * cols + c] = acc;
  }
}

// AdamWTable is up to ADAMW_TABLE tensors of one multi-tensor AdamW
// launch: each tensor's parameter, gradient and moments (device
// addresses), its length, and the first of its chunks: tensor t covers
// chunks first[t] to first[t+1]-1 (first[count] is the total), each
// chunk `chunk` elements. Only 64-bit integers, as common.cuh asks.
#define ADAMW_TABLE 40
struct AdamWTable {
  i64 count;
  i64 chunk;
  i64 w[ADAMW_TABLE];
  i64 g[ADAMW_TABLE];
  i64 m[ADAMW_TABLE];
  i64 v[ADAMW_TABLE];
  i64 n[ADAMW_TABLE];
  i64 first[ADAMW_TABLE + 1];
};

// Each block takes chunks in a grid-stride loop, finds the chunk's tensor
// by binary search and updates its elements as ferry_adamw_step
// (optim.cu) does, expression for expression. The table is read from
// parameter space at computed offsets (ld.param, no copy to local
// memory).
extern "C" __global__ void ferry_adamw_multi(AdamWTable T, float decay, float beta1, float beta2, float eps,
                                             float step_size, float bc2_sqrt) {
  i64 total = T.first[T.count];
  for (i64 c = blockIdx.x; c < total; c += gridDim.x) {
    int lo = 0, hi = (int)T.count - 1;
    while (lo < hi) {  // the last tensor whose first chunk is ≤ c
      int mid = (lo + hi + 1) / 2;
      if (T.first[mid] <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    float* w = (float*)T.w[lo];
    const float* g = (const float*)T.g[lo];
    float* m = (float*)T.m[lo];
    float* v = (float*)T.v[lo];
    i64 start = (c - T.first[lo]) * T.chunk;
    i64 end = min(start + T.chunk, T.n[lo]);
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
      w[i] *= decay;
      m[i] = m[i] * beta1 + g[i] * (1.0f - beta1);
      v[i] = v[i] * beta2 + (1.0f - beta2) * g[i] * g[i];
      float denom = sqrtf(v[i]) / bc2_sqrt + eps;
      w[i] += -step_size * m[i] / denom;
    }
  }
}

// ---- residual add + layer norm ----

#define LN_BLOCK 256  // ferry_add_layer_norm is launched with 256 threads

// transformer.cu's tree_sum (keep the two in step: the order of the sum is the
// bits).
__device__ __forceinline__ double fused_tree_sum(double* s, double v) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int h = LN_BLOCK / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  double r = s[0];
  __syncthreads();
  return r;
}

// sum = x + res, then transformer.cu's ferry_layer_norm of sum, operation for
// operation (keep the two in step); each thread reads back only the
// elements of sum it wrote. One block per row.
extern "C" __global__ void ferry_add_layer_norm(float* sum, float* dst, float* mean, float* rstd, const float* x,
                                                const float* res, const float* w, const float* b, i64 rows, i64 C,
                                                float eps) {
  __shared__ double s[LN_BLOCK];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    float* xr = sum + r * C;
    float* y = dst + r * C;
    double acc = 0;
    for (i64 c = threadIdx.x; c < C; c += LN_BLOCK) {
      float v = x[r * C + c] + res[r * C + c];
      xr[c] = v;
      acc += (double)v;
    }
    double m = fused_tree_sum(s, acc) / (double)C;
    acc = 0;
    for (i64 c = threadIdx.x; c < C; c += LN_BLOCK) {
      double e = (double)xr[c] - m;
      acc += e * e;
    }
    double inv = 1.0 / sqrt(fused_tree_sum(s, acc) / (double)C + (double)eps);
    float mf = (float)m, invf = (float)inv;
    if (threadIdx.x == 0) {
      mean[r] = mf;
      rstd[r] = invf;
    }
    for (i64 c = threadIdx.x; c < C; c += LN_BLOCK) {
      float v = (xr[c] - mf) * invf;
      if (w) v *= w[c];
      if (b) v += b[c];
      y[c] = v;
    }
  }
}

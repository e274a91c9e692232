// Reductions: sums over axis sets, softmax and log-softmax with their
// backward, and the negative log-likelihood loss. Sums accumulate in double,
// as the CPU device does, and never with atomics: a result does not depend
// on scheduling.
#include "common.cuh"

#define BLOCK 256  // every kernel here is launched with 256 threads

__device__ __forceinline__ i64 out_offset(const Reduce& R, i64 o) {
  return strided_offset<i64>(R.out_rank, R.out_shape, R.out_stride, o);
}
__device__ __forceinline__ i64 red_offset(const Reduce& R, i64 r) {
  return strided_offset<i64>(R.red_rank, R.red_shape, R.red_stride, r);
}

// Tree sum of one double per thread; the result is in s[0].
__device__ __forceinline__ void block_sum(double* s) {
  __syncthreads();
  for (int h = BLOCK / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
}

// Writes a finished sum: alpha*sum to dst[o] when the reduction is not
// split (gridDim.y == 1), else the split's partial sum.
__device__ __forceinline__ void put_sum(float* dst, double* partial, float alpha, i64 n_out, i64 o, double sum) {
  if (gridDim.y == 1) {
    dst[o] = (float)((double)alpha * sum);
  } else {
    partial[(i64)blockIdx.y * n_out + o] = sum;
  }
}

// One block per output element o = blockIdx.x and split blockIdx.y; the
// block's threads stride over the split's chunk of the reduced index.
// Suits reductions over the innermost axis and whole-tensor sums.
extern "C" __global__ void ferry_sum_blocks(float* dst, double* partial, const float* src, float alpha,
                                            i64 n_out, i64 n_red, i64 chunk, Reduce R) {
  __shared__ double s[BLOCK];
  i64 o = blockIdx.x;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, n_red);
  const float* base = src + out_offset(R, o);
  double acc = 0;
  for (i64 r = lo + threadIdx.x; r < hi; r += BLOCK) acc += (double)base[red_offset(R, r)];
  s[threadIdx.x] = acc;
  block_sum(s);
  if (threadIdx.x == 0) put_sum(dst, partial, alpha, n_out, o, s[0]);
}

// One thread per output element (consecutive threads, consecutive outputs)
// and split blockIdx.y; each thread walks its chunk of the reduced index.
// Suits reductions over outer axes (a bias gradient), where neighbouring
// threads read neighbouring addresses.
extern "C" __global__ void ferry_sum_threads(float* dst, double* partial, const float* src, float alpha,
                                             i64 n_out, i64 n_red, i64 chunk, Reduce R) {
  i64 o = (i64)blockIdx.x * BLOCK + threadIdx.x;
  if (o >= n_out) return;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, n_red);
  const float* base = src + out_offset(R, o);
  double acc = 0;
  for (i64 r = lo; r < hi; r++) acc += (double)base[red_offset(R, r)];
  put_sum(dst, partial, alpha, n_out, o, acc);
}

// Adds the splits' partial sums of each output, in split order.
extern "C" __global__ void ferry_sum_finish(float* dst, const double* partial, float alpha, i64 n_out, i64 splits) {
  GRID_STRIDE_LOOP(i64, o, n_out) {
    double t = 0;
    for (i64 s = 0; s < splits; s++) t += partial[s * n_out + o];
    dst[o] = (float)((double)alpha * t);
  }
}

// The sums with a bfloat16 dst or src (device.ElementwiseBF16Kernels):
// ferry_sum_blocks, ferry_sum_threads and ferry_sum_finish again, each
// operand float32 or bfloat16 by its bit of types (TYPE_BF16: 0 dst, 1
// src). A bfloat16 element is widened exactly, so the double sums are the
// float32 kernels' on the widened source; a bfloat16 dst receives the
// float32 result rounded as Convert rounds it.
__device__ __forceinline__ void put_sum_mixed(bool hd, void* dst, double* partial, float alpha, i64 n_out, i64 o,
                                              double sum) {
  if (gridDim.y == 1) {
    store_f32_or_bf16(dst, o, hd, (float)((double)alpha * sum));
  } else {
    partial[(i64)blockIdx.y * n_out + o] = sum;
  }
}

extern "C" __global__ void ferry_sum_blocks_mixed(int types, void* dst, double* partial, const void* src, float alpha,
                                                  i64 n_out, i64 n_red, i64 chunk, Reduce R) {
  __shared__ double s[BLOCK];
  const bool hs = TYPE_BF16(types, 1);
  i64 o = blockIdx.x;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, n_red);
  i64 base = out_offset(R, o);
  double acc = 0;
  for (i64 r = lo + threadIdx.x; r < hi; r += BLOCK) acc += (double)load_f32_or_bf16(src, base + red_offset(R, r), hs);
  s[threadIdx.x] = acc;
  block_sum(s);
  if (threadIdx.x == 0) put_sum_mixed(TYPE_BF16(types, 0), dst, partial, alpha, n_out, o, s[0]);
}

extern "C" __global__ void ferry_sum_threads_mixed(int types, void* dst, double* partial, const void* src, float alpha,
                                                   i64 n_out, i64 n_red, i64 chunk, Reduce R) {
  const bool hs = TYPE_BF16(types, 1);
  i64 o = (i64)blockIdx.x * BLOCK + threadIdx.x;
  if (o >= n_out) return;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, n_red);
  i64 base = out_offset(R, o);
  double acc = 0;
  for (i64 r = lo; r < hi; r++) acc += (double)load_f32_or_bf16(src, base + red_offset(R, r), hs);
  put_sum_mixed(TYPE_BF16(types, 0), dst, partial, alpha, n_out, o, acc);
}

extern "C" __global__ void ferry_sum_finish_mixed(int types, void* dst, const double* partial, float alpha, i64 n_out,
                                                  i64 splits) {
  const bool hd = TYPE_BF16(types, 0);
  GRID_STRIDE_LOOP(i64, o, n_out) {
    double t = 0;
    for (i64 s = 0; s < splits; s++) t += partial[s * n_out + o];
    store_f32_or_bf16(dst, o, hd, (float)((double)alpha * t));
  }
}

// The maximum of row x and Σ exp(x - maximum) in double, into every
// thread's *m and *sum: the row statistics of softmax and of the fused
// cross-entropy, one computation so that both have the same bits. smax
// and ssum are the block's scratch; the caller syncs before reusing them.
__device__ __forceinline__ void row_max_sum(const float* x, i64 cols, float* smax, double* ssum, float* m, double* sum) {
  float mx = -INFINITY;
  for (i64 j = threadIdx.x; j < cols; j += BLOCK) {
    float v = x[j];
    if (v > mx) mx = v;
  }
  smax[threadIdx.x] = mx;
  __syncthreads();
  for (int h = BLOCK / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h && smax[threadIdx.x + h] > smax[threadIdx.x]) smax[threadIdx.x] = smax[threadIdx.x + h];
    __syncthreads();
  }
  mx = smax[0];
  double s = 0;
  for (i64 j = threadIdx.x; j < cols; j += BLOCK) s += exp((double)(x[j] - mx));
  ssum[threadIdx.x] = s;
  block_sum(ssum);
  *m = mx;
  *sum = ssum[0];
}

// Softmax (or log-softmax) over rows of cols elements: one block per row.
extern "C" __global__ void ferry_softmax(float* dst, const float* src, i64 rows, i64 cols, int log_) {
  __shared__ float smax[BLOCK];
  __shared__ double ssum[BLOCK];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = src + row * cols;
    float* y = dst + row * cols;
    float m;
    double sum;
    row_max_sum(x, cols, smax, ssum, &m, &sum);
    if (log_) {
      float ls = (float)log(sum);
      for (i64 j = threadIdx.x; j < cols; j += BLOCK) y[j] = x[j] - m - ls;
    } else {
      double inv = 1.0 / sum;
      for (i64 j = threadIdx.x; j < cols; j += BLOCK) y[j] = (float)(exp((double)(x[j] - m)) * inv);
    }
    __syncthreads();  // smax and ssum are reused by the next row
  }
}

// Gradient of softmax (or log-softmax) given the output's gradient g and
// the output y: g - exp(y)*sum(g) for log-softmax, y*(g - sum(g*y)) else.
extern "C" __global__ void ferry_softmax_backward(float* dst, const float* grad, const float* out, i64 rows, i64 cols,
                                                  int log_) {
  __shared__ double s[BLOCK];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* g = grad + row * cols;
    const float* y = out + row * cols;
    float* d = dst + row * cols;
    double dot = 0;
    for (i64 j = threadIdx.x; j < cols; j += BLOCK) dot += log_ ? (double)g[j] : (double)g[j] * (double)y[j];
    s[threadIdx.x] = dot;
    block_sum(s);
    dot = s[0];
    if (log_) {
      for (i64 j = threadIdx.x; j < cols; j += BLOCK) d[j] = g[j] - (float)(exp((double)y[j]) * dot);
    } else {
      for (i64 j = threadIdx.x; j < cols; j += BLOCK) d[j] = y[j] * (g[j] - (float)dot);
    }
    __syncthreads();
  }
}

// dst[0] = the mean over rows of -lp(r, target[r]), skipping negative
// targets, in one block with the block's scratch ssum and scount; NaN when
// no row counts (0/0). NLL and the fused cross-entropy share it, and so
// their bits.
template <typename LogP>
__device__ __forceinline__ void nll_mean(float* dst, const int* target, i64 rows, const LogP& lp, double* ssum,
                                         double* scount) {
  double sum = 0, count = 0;
  for (i64 r = threadIdx.x; r < rows; r += BLOCK) {
    int t = target[r];
    if (t >= 0) {
      sum -= (double)lp(r, t);
      count += 1;
    }
  }
  ssum[threadIdx.x] = sum;
  scount[threadIdx.x] = count;
  block_sum(ssum);
  block_sum(scount);
  if (threadIdx.x == 0) dst[0] = (float)(ssum[0] / scount[0]);
}

// The log-probability logp[r, t] of a [rows, cols] matrix.
struct LogPAt {
  const float* logp;
  i64 cols;
  __device__ __forceinline__ float operator()(i64 r, int t) const { return logp[r * cols + t]; }
};

// Mean over rows of -logp[r, target[r]], skipping negative targets; one
// block. NaN when no row counts (0/0).
extern "C" __global__ void ferry_nll(float* dst, const float* logp, const int* target, i64 rows, i64 cols) {
  __shared__ double ssum[BLOCK];
  __shared__ double scount[BLOCK];
  nll_mean(dst, target, rows, LogPAt{logp, cols}, ssum, scount);
}

// scale[0] = -grad[0] / (number of rows with a non-negative target); one
// block. The first half of NLLBackward.
extern "C" __global__ void ferry_nll_grad_scale(float* scale, const float* grad, const int* target, i64 rows) {
  __shared__ double scount[BLOCK];
  double count = 0;
  for (i64 r = threadIdx.x; r < rows; r += BLOCK) count += target[r] >= 0 ? 1 : 0;
  scount[threadIdx.x] = count;
  block_sum(scount);
  if (threadIdx.x == 0) scale[0] = -grad[0] / (float)(long long)scount[0];
}

// dst[r, c] = scale[0] where c == target[r], 0 elsewhere.
extern "C" __global__ void ferry_nll_backward(float* dst, const float* scale, const int* target, i64 rows, i64 cols) {
  GRID_STRIDE_LOOP(i64, i, rows * cols) {
    i64 r = i / cols, c = i % cols;
    int t = target[r];
    dst[i] = (t >= 0 && c == t) ? scale[0] : 0.0f;
  }
}

// ---- cross-entropy fused with log-softmax (device.CrossEntropyKernels) ----
// The row statistics as ferry_softmax computes them, the loss as ferry_nll
// of those log-probabilities, the gradient as ferry_softmax_backward of
// ferry_nll_backward's: the same operations, so the same bits, without the
// [rows, cols] log-probabilities.

// stats[2r] = the maximum of row r, stats[2r+1] = log Σ exp(x - maximum);
// one block per row.
extern "C" __global__ void ferry_cross_entropy_stats(float* stats, const float* src, i64 rows, i64 cols) {
  __shared__ float smax[BLOCK];
  __shared__ double ssum[BLOCK];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    float m;
    double sum;
    row_max_sum(src + row * cols, cols, smax, ssum, &m, &sum);
    if (threadIdx.x == 0) {
      stats[2 * row] = m;
      stats[2 * row + 1] = (float)log(sum);
    }
    __syncthreads();  // smax and ssum are reused by the next row
  }
}

// The log-probability of x[r, t] from its row's statistics, as
// ferry_softmax's log case writes it: x - max - logsum.
struct RowLogPAt {
  const float* x;
  const float* stats;
  i64 cols;
  __device__ __forceinline__ float operator()(i64 r, int t) const {
    return x[r * cols + t] - stats[2 * r] - stats[2 * r + 1];
  }
};

// dst[0] = the mean over rows with a non-negative target of
// -(x[r, t] - max - logsum); one block. NaN when no row counts.
extern "C" __global__ void ferry_cross_entropy_loss(float* dst, const float* stats, const float* x, const int* target,
                                                    i64 rows, i64 cols) {
  __shared__ double ssum[BLOCK];
  __shared__ double scount[BLOCK];
  nll_mean(dst, target, rows, RowLogPAt{x, stats, cols}, ssum, scount);
}

// dst[r, c] = g - exp(x[r, c] - max - logsum)·Σg, with g = scale[0] at the
// target (ferry_nll_grad_scale's -grad/count) and 0 elsewhere, Σg the row's
// one value or 0 on an ignored row.
extern "C" __global__ void ferry_cross_entropy_backward(float* dst, const float* scale, const float* x,
                                                        const float* stats, const int* target, i64 rows, i64 cols) {
  GRID_STRIDE_LOOP(i64, i, rows * cols) {
    i64 r = i / cols, c = i % cols;
    int t = target[r];
    float g = (t >= 0 && c == t) ? scale[0] : 0.0f;
    double dot = 0;
    if (t >= 0) dot += (double)scale[0];
    float y = x[i] - stats[2 * r] - stats[2 * r + 1];
    dst[i] = g - (float)(exp((double)y) * dot);
  }
}

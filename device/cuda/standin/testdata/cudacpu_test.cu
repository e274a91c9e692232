// Test-only kernels for the CPU build of the CUDA sources
// (kernelsource_test.go): the language features ferry's kernels may come
// to use, and a kernel with a shared-memory race the checker must report.
// Never compiled to PTX; the tests declare their .entry lines by hand.

// Warp shuffles and votes, dynamic shared memory and shared atomics, on a
// block whose last warp is partial. out has 8 words per thread.
extern "C" __global__ void ferry_test_warp(int* out) {
  extern __shared__ int dyn[];
  __shared__ int count;
  const int t = threadIdx.x, n = blockDim.x, lane = t % 32, w0 = t - lane;
  const int width = n - w0 < 32 ? n - w0 : 32;
  const unsigned mask = width == 32 ? 0xffffffffu : (1u << width) - 1;
  if (t == 0) count = 0;
  dyn[t] = 1000 + t;
  __syncthreads();
  atomicAdd(&count, t);
  int* o = out + 8 * (blockIdx.x * n + t);
  o[0] = dyn[n - 1 - t];  // another thread's word, after the barrier
  o[1] = __shfl_sync(mask, t * 3, 0);
  o[2] = __shfl_down_sync(mask, t, 1);
  o[3] = __shfl_xor_sync(mask, t, 1);
  int s = t;
  for (int d = 1; d < 32; d <<= 1) {
    int v = __shfl_xor_sync(mask, s, d);
    if ((lane ^ d) < width) s += v;  // a lane past the warp's end gives its own value back
  }
  o[4] = s;
  o[5] = (int)__ballot_sync(mask, t % 3 == 0);
  o[6] = __any_sync(mask, t == 5) + 2 * __all_sync(mask, t < 1000);
  __syncthreads();
  o[7] = __syncthreads_count(t % 2 == 0) * 100000 + count % 100000;
}

// Every thread writes its word, then reads its neighbour's without a
// barrier between: a race on every word but one.
extern "C" __global__ void ferry_test_racy(float* out) {
  __shared__ float s[128];
  s[threadIdx.x] = (float)threadIdx.x;
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// Reads one word past the end of its output's allocation.
extern "C" __global__ void ferry_test_out_of_bounds(float* out, long long n) {
  if (threadIdx.x == 0) out[n] = 1.0f;
}

// Reads shared memory no thread of the block has written.
extern "C" __global__ void ferry_test_uninitialised(float* out) {
  __shared__ float u[64];
  out[threadIdx.x] = u[threadIdx.x];
}

// Half the block waits at one barrier, half at another.
extern "C" __global__ void ferry_test_divergent(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

// The two halves of a warp shuffle at different program points.
extern "C" __global__ void ferry_test_divergent_shuffle(int* out) {
  int x;
  if (threadIdx.x < 16) {
    x = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
  } else {
    x = __shfl_sync(0xffffffffu, (int)threadIdx.x, 1);
  }
  out[threadIdx.x] = x;
}

// Every block writes the same word of global memory.
extern "C" __global__ void ferry_test_global_race(float* out) {
  if (threadIdx.x == 0) out[0] = (float)blockIdx.x;
}

// Threads storing neighbouring 2-byte elements (bfloat16) share 4-byte
// words but no bytes: no race. With same, pairs of threads store the same
// element: one race per word.
extern "C" __global__ void ferry_test_halves(unsigned short* out, int same) {
  int i = threadIdx.x;
  out[same ? i / 2 * 2 : i] = (unsigned short)i;
}

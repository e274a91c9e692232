// Elementwise kernels: strided copy, unary and binary ops. Each has a
// contiguous variant (one flat loop) and strided variants with 32- or 64-bit
// index arithmetic (the host picks 32-bit when every offset fits).
#include "common.cuh"

// Op numbers are device.UnaryOp and device.BinaryOp.
enum {
  U_NEG, U_EXP, U_LOG, U_SQRT, U_SQUARE, U_ABS, U_TANH, U_SIGMOID, U_RELU,
  U_GELU, U_GELU_TANH, U_SCALE, U_ADD_SCALAR, U_POW
};
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_RELU_GRAD, B_GELU_GRAD, B_GELU_TANH_GRAD, B_MAXIMUM };

template <int OP>
__device__ __forceinline__ float unary_op(float x, float alpha) {
  switch (OP) {
    case U_NEG: return -x;
    case U_EXP: return (float)exp((double)x);
    case U_LOG: return (float)log((double)x);
    case U_SQRT: return (float)sqrt((double)x);
    case U_SQUARE: return x * x;
    case U_ABS: return fabsf(x);
    case U_TANH: return (float)tanh((double)x);
    case U_SIGMOID: return (float)(1.0 / (1.0 + exp(-(double)x)));
    case U_RELU: return x > 0.0f ? x : 0.0f;
    case U_GELU: {
      double v = x;
      return (float)(0.5 * v * (1.0 + erf(v / SQRT2)));
    }
    case U_GELU_TANH: {
      double v = x;
      return (float)(0.5 * v * (1.0 + tanh(SQRT2_OVER_PI * (v + GELU_COEF * v * v * v))));
    }
    case U_SCALE: return alpha * x;
    case U_ADD_SCALAR: return x + alpha;
    case U_POW: return (float)pow((double)x, (double)alpha);
  }
  return nan32();
}

template <int OP>
__device__ __forceinline__ float binary_op(float a, float b) {
  switch (OP) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_RELU_GRAD: return b > 0.0f ? a : 0.0f;
    case B_GELU_GRAD: {
      double v = b;
      double cdf = 0.5 * (1.0 + erf(v / SQRT2));
      double pdf = INV_SQRT_2PI * exp(-0.5 * v * v);
      return (float)((double)a * (cdf + v * pdf));
    }
    case B_GELU_TANH_GRAD: {
      double v = b;
      double inner = SQRT2_OVER_PI * (v + GELU_COEF * v * v * v);
      double t = tanh(inner);
      double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * SQRT2_OVER_PI * (1.0 + GELU_COEF3 * v * v);
      return (float)((double)a * d);
    }
    case B_MAXIMUM: return (a != a || a > b) ? a : b;  // NaN propagates, as torch.maximum
  }
  return nan32();
}

// Dispatch a runtime op number to a template instantiation, so that each
// op's loop is compiled on its own.
#define UNARY_DISPATCH(op, CALL)       \
  switch (op) {                        \
    case U_NEG: CALL(U_NEG); break;    \
    case U_EXP: CALL(U_EXP); break;    \
    case U_LOG: CALL(U_LOG); break;    \
    case U_SQRT: CALL(U_SQRT); break;  \
    case U_SQUARE: CALL(U_SQUARE); break; \
    case U_ABS: CALL(U_ABS); break;    \
    case U_TANH: CALL(U_TANH); break;  \
    case U_SIGMOID: CALL(U_SIGMOID); break; \
    case U_RELU: CALL(U_RELU); break;  \
    case U_GELU: CALL(U_GELU); break;  \
    case U_GELU_TANH: CALL(U_GELU_TANH); break; \
    case U_SCALE: CALL(U_SCALE); break; \
    case U_ADD_SCALAR: CALL(U_ADD_SCALAR); break; \
    case U_POW: CALL(U_POW); break;    \
  }

#define BINARY_DISPATCH(op, CALL)      \
  switch (op) {                        \
    case B_ADD: CALL(B_ADD); break;    \
    case B_SUB: CALL(B_SUB); break;    \
    case B_MUL: CALL(B_MUL); break;    \
    case B_DIV: CALL(B_DIV); break;    \
    case B_RELU_GRAD: CALL(B_RELU_GRAD); break; \
    case B_GELU_GRAD: CALL(B_GELU_GRAD); break; \
    case B_GELU_TANH_GRAD: CALL(B_GELU_TANH_GRAD); break; \
    case B_MAXIMUM: CALL(B_MAXIMUM); break; \
  }

// ---- copy (32-bit words: float32 and int32 alike) ----

template <typename I>
__device__ void copy_strided(unsigned* dst, const unsigned* src, i64 n, const Strided& L) {
  GRID_STRIDE_LOOP(I, i, n) {
    I off[2];
    strided_offsets<I, 2>(L, i, off);
    dst[off[0]] = src[off[1]];
  }
}

extern "C" __global__ void ferry_copy_strided32(unsigned* dst, const unsigned* src, i64 n, Strided L) {
  copy_strided<int>(dst, src, n, L);
}
extern "C" __global__ void ferry_copy_strided64(unsigned* dst, const unsigned* src, i64 n, Strided L) {
  copy_strided<i64>(dst, src, n, L);
}

// ---- unary ----

template <int OP>
__device__ void unary_contig(float* dst, const float* src, i64 n, float alpha) {
  GRID_STRIDE_LOOP(i64, i, n) { dst[i] = unary_op<OP>(src[i], alpha); }
}

extern "C" __global__ void ferry_unary_contig(int op, float alpha, float* dst, const float* src, i64 n) {
#define CALL(OP) unary_contig<OP>(dst, src, n, alpha)
  UNARY_DISPATCH(op, CALL)
#undef CALL
}

// The strided variants switch on the op per element (a uniform branch)
// rather than compiling the index arithmetic once per op: they are the
// rarer path, and this keeps the PTX small.
__device__ __noinline__ float unary_any(int op, float x, float alpha) {
  float y = nan32();
#define CALL(OP) y = unary_op<OP>(x, alpha)
  UNARY_DISPATCH(op, CALL)
#undef CALL
  return y;
}

template <typename I>
__device__ void unary_strided(int op, float* dst, const float* src, i64 n, float alpha, const Strided& L) {
  GRID_STRIDE_LOOP(I, i, n) {
    I off[2];
    strided_offsets<I, 2>(L, i, off);
    dst[off[0]] = unary_any(op, src[off[1]], alpha);
  }
}

extern "C" __global__ void ferry_unary_strided32(int op, float alpha, float* dst, const float* src, i64 n, Strided L) {
  unary_strided<int>(op, dst, src, n, alpha, L);
}
extern "C" __global__ void ferry_unary_strided64(int op, float alpha, float* dst, const float* src, i64 n, Strided L) {
  unary_strided<i64>(op, dst, src, n, alpha, L);
}

// ---- binary ----

template <int OP>
__device__ void binary_contig(float* dst, const float* a, const float* b, i64 n) {
  GRID_STRIDE_LOOP(i64, i, n) { dst[i] = binary_op<OP>(a[i], b[i]); }
}

extern "C" __global__ void ferry_binary_contig(int op, float* dst, const float* a, const float* b, i64 n) {
#define CALL(OP) binary_contig<OP>(dst, a, b, n)
  BINARY_DISPATCH(op, CALL)
#undef CALL
}

__device__ __noinline__ float binary_any(int op, float a, float b) {
  float y = nan32();
#define CALL(OP) y = binary_op<OP>(a, b)
  BINARY_DISPATCH(op, CALL)
#undef CALL
  return y;
}

// Add, Mul and the ReLU gradient (a bias add, a broadcast product, ReLU's
// backward) are hot enough to be compiled with their index arithmetic.
template <int OP, typename I>
__device__ void binary_strided(float* dst, const float* a, const float* b, i64 n, const Strided& L) {
  GRID_STRIDE_LOOP(I, i, n) {
    I off[3];
    strided_offsets<I, 3>(L, i, off);
    dst[off[0]] = binary_op<OP>(a[off[1]], b[off[2]]);
  }
}

template <typename I>
__device__ void binary_strided_any(int op, float* dst, const float* a, const float* b, i64 n, const Strided& L) {
  switch (op) {
    case B_ADD: binary_strided<B_ADD, I>(dst, a, b, n, L); return;
    case B_MUL: binary_strided<B_MUL, I>(dst, a, b, n, L); return;
    case B_RELU_GRAD: binary_strided<B_RELU_GRAD, I>(dst, a, b, n, L); return;
  }
  GRID_STRIDE_LOOP(I, i, n) {
    I off[3];
    strided_offsets<I, 3>(L, i, off);
    dst[off[0]] = binary_any(op, a[off[1]], b[off[2]]);
  }
}

extern "C" __global__ void ferry_binary_strided32(int op, float* dst, const float* a, const float* b, i64 n, Strided L) {
  binary_strided_any<int>(op, dst, a, b, n, L);
}
extern "C" __global__ void ferry_binary_strided64(int op, float* dst, const float* a, const float* b, i64 n, Strided L) {
  binary_strided_any<i64>(op, dst, a, b, n, L);
}

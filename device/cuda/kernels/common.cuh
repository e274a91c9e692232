// Shared definitions of ferry's CUDA kernels.
//
// Kernel parameters that describe a layout are structs of 64-bit integers
// only, so that their C layout is the plain sequence of fields, which the Go
// side packs (device/cuda/layout.go) and the fake driver reads
// (device/cuda/fake/kernels.go) at the same offsets. Change all three
// together.
//
// Arithmetic follows the CPU device (device/cpu) operation by operation:
// float32 where it computes in float32, double where it goes through
// float64 (transcendental functions, sums). The PTX is compiled with
// --fmad=false so that a*b+c is not fused, as Go does not fuse on amd64.
#pragma once

typedef long long i64;

#define FERRY_MAX_RANK 8

// Strided is the iteration space of an elementwise kernel: the (collapsed)
// output shape, and each operand's strides in elements. Operand 0 is the
// output; then the inputs.
struct Strided {
  i64 rank;
  i64 shape[FERRY_MAX_RANK];
  i64 stride[3][FERRY_MAX_RANK];
};

// Reduce is the iteration space of a sum: the kept axes (in the order the
// contiguous output lays them out) and the reduced axes, each with its
// shape and the input's strides.
struct Reduce {
  i64 out_rank;
  i64 out_shape[FERRY_MAX_RANK];
  i64 out_stride[FERRY_MAX_RANK];
  i64 red_rank;
  i64 red_shape[FERRY_MAX_RANK];
  i64 red_stride[FERRY_MAX_RANK];
};

// The element offset of flat index i in a row-major walk of shape, with the
// given strides. Loops are unrolled so that struct fields are read at fixed
// offsets from parameter space (no local-memory copy).
template <typename I>
__device__ __forceinline__ I strided_offset(i64 rank, const i64* shape, const i64* stride, I i) {
  I off = 0;
#pragma unroll
  for (int d = FERRY_MAX_RANK - 1; d > 0; d--) {
    if (d < rank) {
      I n = (I)shape[d];
      I q = i % n;
      i /= n;
      off += q * (I)stride[d];
    }
  }
  return off + i * (I)stride[0];
}

// The offsets of flat index i for NOPS operands at once (one division per
// axis for all of them); L.stride[k] are operand k's strides.
template <typename I, int NOPS>
__device__ __forceinline__ void strided_offsets(const Strided& L, I i, I* off) {
#pragma unroll
  for (int k = 0; k < NOPS; k++) off[k] = 0;
#pragma unroll
  for (int d = FERRY_MAX_RANK - 1; d > 0; d--) {
    if (d < L.rank) {
      I n = (I)L.shape[d];
      I q = i % n;
      i /= n;
#pragma unroll
      for (int k = 0; k < NOPS; k++) off[k] += q * (I)L.stride[k][d];
    }
  }
#pragma unroll
  for (int k = 0; k < NOPS; k++) off[k] += i * (I)L.stride[k][0];
}

#define GRID_STRIDE_LOOP(I, i, n)                                    \
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(n); \
       i += (I)gridDim.x * blockDim.x)

__device__ __forceinline__ float nan32() { return __int_as_float(0x7fc00000); }

// f32_to_bf16 is device.ToBFloat16 on float32 bits u, in integer
// operations so that it does not depend on cuda_bf16.h: round to nearest,
// ties to even (add half an ulp less one plus the kept part's lowest bit;
// an overflow carries into the exponent, to infinity); a NaN stays a NaN,
// quiet, its sign and the top of its payload kept.
__device__ __forceinline__ unsigned short f32_to_bf16(unsigned u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Loads and stores of an operand that is float32 or bfloat16 (h), for the
// kernels that take bfloat16 views (device.ElementwiseBF16Kernels): off
// counts the operand's own elements; a load widens exactly, a store rounds
// as f32_to_bf16.
__device__ __forceinline__ float load_f32_or_bf16(const void* p, i64 off, bool h) {
  return h ? __uint_as_float((unsigned)((const unsigned short*)p)[off] << 16) : ((const float*)p)[off];
}
__device__ __forceinline__ void store_f32_or_bf16(void* p, i64 off, bool h, float v) {
  if (h) {
    ((unsigned short*)p)[off] = f32_to_bf16(__float_as_uint(v));
  } else {
    ((float*)p)[off] = v;
  }
}

// The operand type bits of those kernels' types argument: operand k (0:
// dst, 1: the first input, 2: the second) is bfloat16 when bit k is set.
#define TYPE_BF16(types, k) (((types) >> (k)) & 1)

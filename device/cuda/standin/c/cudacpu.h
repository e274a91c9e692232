// CUDA C++ on the CPU: what ferry's kernels (device/cuda/kernels/*.cu) use
// of the CUDA language, for g++, so that the stand-in (standin.c) runs the
// kernel sources themselves (cudacpu.cpp says how; standin.go builds it).
//
// Each block's threads are cooperating fibers on one OS thread: a thread
// runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle
// or a vote) or ends, and a barrier lets no thread continue before every
// thread it waits for has arrived. So shared memory, barriers and warp
// exchanges behave as on a GPU, and one block's interleaving is fixed (the
// threads in order between barriers).
//
// Shared memory (__shared__ variables and the extern __shared__ array) is
// a linker section, ferry_shared, that cudacpu.cpp watches: the kernels are
// compiled with -fsanitize=thread, whose instrumentation calls back into
// cudacpu.cpp (__tsan_read4, …) before each load and store, and a write by
// one thread of a block with another thread's read or write of the same
// word between two barriers is reported as a race. The same hooks report
// global-memory races (two threads of different blocks, or of one block
// without a barrier between, touching a word one of them writes) and
// accesses outside the launch's allocations.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#define __global__ __attribute__((used))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static shared variables live in the ferry_shared section (one block runs
// at a time, so one copy serves every block); `extern __shared__ T a[]`
// names the dynamic shared memory, which the generated registration unit
// defines (see standin.go).
#define __shared__ __attribute__((section("ferry_shared"), aligned(16))) static
#define FERRY_DYNAMIC_SHARED __attribute__((aligned(16)))

struct uint3 {
  unsigned x, y, z;
};
typedef uint3 dim3;
struct uint4 {
  unsigned x, y, z, w;
};
struct int4 {
  int x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
struct float2 {
  float x, y;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

// The built-in variables of the running thread, set by the scheduler
// before it resumes a thread.
struct ferry_builtins_t {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
};
extern "C" ferry_builtins_t ferry_builtins;
#define threadIdx (ferry_builtins.threadIdx)
#define blockIdx (ferry_builtins.blockIdx)
#define blockDim (ferry_builtins.blockDim)
#define gridDim (ferry_builtins.gridDim)
#define warpSize 32

// ---- barriers and warp operations (cudacpu.cpp) ----

extern "C" {
// A block-wide barrier at site (file:line); pred is combined over the
// block as op says (0 none, 1 or, 2 and, 3 count) and returned.
int ferry_block_barrier(const char* site, int op, int pred);
// A warp exchange at site among the lanes of mask: every lane puts v and
// gets lane src's value (src -1: none). vote is 0 none, 1 all, 2 any, 3
// ballot (returned instead of the value).
unsigned long long ferry_warp_exchange(const char* site, unsigned mask, unsigned long long v, int src, int vote);
// The calling thread's lane (its linear index in the block, mod 32).
int ferry_lane(void);
// Reports a misuse of the CUDA language found at run time (a violation).
void ferry_misuse(const char* fmt, ...);
}

#define FERRY_STR2(x) #x
#define FERRY_STR(x) FERRY_STR2(x)
#define FERRY_SITE __FILE__ ":" FERRY_STR(__LINE__)

#define __syncthreads() ((void)ferry_block_barrier(FERRY_SITE, 0, 0))
#define __syncthreads_or(p) ferry_block_barrier(FERRY_SITE, 1, (p) != 0)
#define __syncthreads_and(p) ferry_block_barrier(FERRY_SITE, 2, (p) != 0)
#define __syncthreads_count(p) ferry_block_barrier(FERRY_SITE, 3, (p) != 0)
#define __syncwarp(...) ((void)ferry_warp_exchange(FERRY_SITE, ferry_mask_or_all(__VA_ARGS__), 0, -1, 0))
#define __all_sync(mask, p) ((int)ferry_warp_exchange(FERRY_SITE, (mask), (p) != 0, -1, 1))
#define __any_sync(mask, p) ((int)ferry_warp_exchange(FERRY_SITE, (mask), (p) != 0, -1, 2))
#define __ballot_sync(mask, p) ((unsigned)ferry_warp_exchange(FERRY_SITE, (mask), (p) != 0, -1, 3))
#define __shfl_sync(mask, v, src, ...) ferry_shfl(FERRY_SITE, (mask), (v), 0, (int)(src), ferry_width(__VA_ARGS__))
#define __shfl_up_sync(mask, v, d, ...) ferry_shfl(FERRY_SITE, (mask), (v), 1, (int)(d), ferry_width(__VA_ARGS__))
#define __shfl_down_sync(mask, v, d, ...) ferry_shfl(FERRY_SITE, (mask), (v), 2, (int)(d), ferry_width(__VA_ARGS__))
#define __shfl_xor_sync(mask, v, m, ...) ferry_shfl(FERRY_SITE, (mask), (v), 3, (int)(m), ferry_width(__VA_ARGS__))

static inline unsigned ferry_mask_or_all() { return 0xffffffffu; }
static inline unsigned ferry_mask_or_all(unsigned m) { return m; }
static inline int ferry_width() { return 32; }
static inline int ferry_width(int w) { return w; }

// A shuffle: kind 0 (from lane src), 1 (up by d), 2 (down by d), 3 (xor
// m), within segments of width lanes, as the CUDA programming guide
// defines them; a lane whose source falls outside its segment gets its own
// value back.
template <typename T>
static inline T ferry_shfl(const char* site, unsigned mask, T v, int kind, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a value over 8 bytes");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) ferry_misuse("%s: shuffle width %d is not a power of two up to 32", site, width);
  int lane = ferry_lane();
  int base = lane & ~(width - 1), src;
  switch (kind) {
    case 0: src = base + (arg & (width - 1)); break;
    case 1: src = lane - arg >= base ? lane - arg : lane; break;
    case 2: src = lane + arg < base + width ? lane + arg : lane; break;
    default: src = (lane ^ arg) < base + width ? lane ^ arg : lane; break;
  }
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof v);
  bits = ferry_warp_exchange(site, mask, bits, src, 0);
  T r;
  memcpy(&r, &bits, sizeof r);
  return r;
}

// ---- atomics ----
//
// Blocks run one at a time and a thread is never interrupted between two
// barriers, so a read-modify-write is atomic as written. They are not
// instrumented: an atomic is no race.
#define FERRY_ATOMIC static inline __attribute__((no_sanitize_thread))

template <typename T>
FERRY_ATOMIC T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicSub(T* p, T v) {
  T old = *p;
  *p = old - v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicMin(T* p, T v) {
  T old = *p;
  if (v < old) *p = v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicMax(T* p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicExch(T* p, T v) {
  T old = *p;
  *p = v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicCAS(T* p, T cmp, T v) {
  T old = *p;
  if (old == cmp) *p = v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicOr(T* p, T v) {
  T old = *p;
  *p = old | v;
  return old;
}
template <typename T>
FERRY_ATOMIC T atomicAnd(T* p, T v) {
  T old = *p;
  *p = old & v;
  return old;
}

// ---- integer and bit intrinsics ----

static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline float __int_as_float(int x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static inline int __float_as_int(float f) {
  int x;
  memcpy(&x, &f, 4);
  return x;
}
static inline float __uint_as_float(unsigned x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  return x;
}
static inline double __longlong_as_double(long long x) {
  double f;
  memcpy(&f, &x, 8);
  return f;
}
static inline long long __double_as_longlong(double f) {
  long long x;
  memcpy(&x, &f, 8);
  return x;
}

// min and max as CUDA overloads them for every arithmetic type.
template <typename A, typename B>
static inline typename std::common_type<A, B>::type min(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)b < (T)a ? (T)b : (T)a;
}
template <typename A, typename B>
static inline typename std::common_type<A, B>::type max(A a, B b) {
  typedef typename std::common_type<A, B>::type T;
  return (T)a < (T)b ? (T)b : (T)a;
}

// ---- fast-math intrinsics ----
//
// The hardware's approximations (ex2.approx, lg2.approx, rcp.approx,
// rsqrt.approx, div.approx) are not bit-reproducible here; each is
// computed in double and rounded once, which lies inside the error the
// CUDA C++ Programming Guide documents for it (Appendix "Intrinsic
// Functions": __expf 2 + floor(|1.173·x|) ulp, __logf 2^-21.41 absolute
// on [0.5, 2] else 3 ulp, __fdividef 2 ulp for |y| in [2^-126, 2^126],
// rsqrtf 2 ulp, __frcp_rn and __fsqrt_rn exact). A kernel that uses them
// must be compared against the CPU device with those bounds, not 1 ulp.
// glibc declares some of these names itself, so they are macros here.
#define __expf ferry_expf
#define __exp10f ferry_exp10f
#define __logf ferry_logf
#define __log2f ferry_log2f
#define __powf ferry_powf
#define __fdividef ferry_fdividef
static inline float ferry_expf(float x) { return (float)exp((double)x); }
static inline float ferry_exp10f(float x) { return (float)exp10((double)x); }
static inline float ferry_logf(float x) { return (float)log((double)x); }
static inline float ferry_log2f(float x) { return (float)log2((double)x); }
static inline float ferry_powf(float x, float y) { return (float)pow((double)x, (double)y); }
static inline float ferry_fdividef(float x, float y) { return (float)((double)x / (double)y); }
static inline float rsqrtf(float x) { return (float)(1.0 / sqrt((double)x)); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

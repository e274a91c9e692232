// Transformer kernels (device.EmbeddingKernels, LayerNormKernels,
// AttentionKernels, DropoutKernels), following device/cpu/transformer.go
// operation by operation. No float atomics: every sum runs in an order
// fixed by the shapes (and, for the layer-norm parameter gradients, the
// launch's split), so results repeat bit for bit.
#include "common.cuh"

#define BLOCK 256  // every kernel here is launched with 256 threads

// The sum of v over the block's threads by reduce.cu's tree; every thread
// gets it, and s may be reused at once.
__device__ __forceinline__ double tree_sum(double* s, double v) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int h = BLOCK / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
    __syncthreads();
  }
  double r = s[0];
  __syncthreads();
  return r;
}

// ---- dropout: Philox-4x32-10, as device.Philox4x32 ----

// A key is passed as device.DropoutKey.PhiloxKey gives it: the generator
// key (k0, k1) and the counter's high words, the step (s0, s1).

__device__ __forceinline__ uint4 philox(uint4 c, unsigned k0, unsigned k1) {
#pragma unroll
  for (int i = 0; i < 10; i++) {
    unsigned hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    unsigned hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The four draws for elements 4b … 4b+3 (device.DropoutKey.DropoutBits).
__device__ __forceinline__ uint4 dropout_bits(unsigned long long b, unsigned k0, unsigned k1, unsigned s0,
                                              unsigned s1) {
  return philox(make_uint4((unsigned)b, (unsigned)(b >> 32), s0, s1), k0, k1);
}

// Whether element e survives: its draw is at least thr.
__device__ __forceinline__ bool keep(i64 e, unsigned thr, unsigned k0, unsigned k1, unsigned s0, unsigned s1) {
  uint4 r = dropout_bits((unsigned long long)e >> 2, k0, k1, s0, s1);
  unsigned lane = (unsigned)e & 3u;
  unsigned bits = lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
  return bits >= thr;
}

// dst[i] = src[i]*scale where element i survives, else 0; element i is
// mask element off+i (device.DropoutKey.Offset). One thread per block of
// four mask elements (one Philox call) that the tensor overlaps. dst may
// be src.
extern "C" __global__ void ferry_dropout(float* dst, const float* src, i64 n, unsigned thr, float scale, unsigned k0,
                                         unsigned k1, unsigned s0, unsigned s1, i64 off) {
  const i64 first = off >> 2, skew = off & 3;
  GRID_STRIDE_LOOP(i64, b, (skew + n + 3) / 4) {
    uint4 r = dropout_bits((unsigned long long)(first + b), k0, k1, s0, s1);
    unsigned bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int lane = 0; lane < 4; lane++) {
      i64 i = 4 * b + lane - skew;
      if (i >= 0 && i < n) dst[i] = bits[lane] >= thr ? src[i] * scale : 0.0f;
    }
  }
}

// ferry_dropout on bfloat16 src and dst: each element widened exactly,
// multiplied by scale in float32 and rounded as Convert rounds, or +0; with
// zero set (p ≥ 1) every element is +0, as Fill writes it. dst may be src.
extern "C" __global__ void ferry_dropout_bf16(unsigned short* dst, const unsigned short* src, i64 n, unsigned thr,
                                              float scale, unsigned k0, unsigned k1, unsigned s0, unsigned s1, i64 off,
                                              int zero) {
  const i64 first = off >> 2, skew = off & 3;
  GRID_STRIDE_LOOP(i64, b, (skew + n + 3) / 4) {
    uint4 r = dropout_bits((unsigned long long)(first + b), k0, k1, s0, s1);
    unsigned bits[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int lane = 0; lane < 4; lane++) {
      i64 i = 4 * b + lane - skew;
      if (i >= 0 && i < n) {
        unsigned short y = 0;
        if (!zero && bits[lane] >= thr) y = f32_to_bf16(__float_as_uint(__uint_as_float((unsigned)src[i] << 16) * scale));
        dst[i] = y;
      }
    }
  }
}

// ---- embedding ----

// Note [bad indices]: an index outside [0, V) is skipped, and the smallest
// position holding one is kept in *bad (which starts as all ones; an
// integer minimum does not depend on the order of the atomics). The host
// reads it back and reports the index as the CPU device does.

// dst[r, c] = table[idx[r], c]; one thread per element.
extern "C" __global__ void ferry_embedding_gather(float* dst, const float* table, const int* idx,
                                                  unsigned long long* bad, i64 n, i64 V, i64 C) {
  GRID_STRIDE_LOOP(i64, i, n * C) {
    i64 r = i / C, c = i - r * C;
    int v = idx[r];
    if (v < 0 || v >= V) {
      if (c == 0) atomicMin(bad, (unsigned long long)r);
      continue;
    }
    dst[i] = table[(i64)v * C + c];
  }
}

// dst[idx[r], :] += src[r, :] for r in order, in two launches and without
// atomics on floats: ferry_embedding_links chains the positions of each
// index in order, then ferry_embedding_scatter_add lets the block of the
// first position of each index add the rows of its chain, each thread
// carrying a column's sum in a register: float32 additions in the order
// the CPU device makes them. Work and memory are linear in the positions.

// prev[r] and next[r] link position r (with an index in [0, V)) to the
// previous and the next position holding the same index, -1 where there is
// none; last[v] is scratch. One block of 256 threads walks the positions in
// tiles: a position finds its predecessor among the tile's earlier
// positions, else in last[] (the previous tiles'), and the tile's last
// position of each index then updates last[]. prev, next and last start as
// all -1 (all ones).
extern "C" __global__ void ferry_embedding_links(i64* next, i64* prev, i64* last, const int* idx, i64 n, i64 V) {
  __shared__ int sidx[BLOCK];
  for (i64 j0 = 0; j0 < n; j0 += BLOCK) {
    i64 r = j0 + threadIdx.x;
    int v = r < n ? idx[r] : -1;
    bool ok = v >= 0 && v < V;
    sidx[threadIdx.x] = ok ? v : -1;
    __syncthreads();
    int m = (int)min((i64)BLOCK, n - j0);
    bool tail = ok;  // the tile's last position of v
    if (ok) {
      int t = (int)threadIdx.x - 1;
      while (t >= 0 && sidx[t] != v) t--;
      i64 p = t >= 0 ? j0 + t : last[v];
      prev[r] = p;
      if (p >= 0) next[p] = r;
      for (int u = threadIdx.x + 1; u < m && tail; u++) tail = sidx[u] != v;
    }
    __syncthreads();  // every read of last[] comes before this tile's updates
    if (tail) last[v] = r;
    __syncthreads();  // sidx is reused by the next tile
  }
}

// One block per position r: the block of the first position of index v
// (prev[r] < 0) owns dst row v and adds the rows of v's chain in order.
extern "C" __global__ void ferry_embedding_scatter_add(float* dst, const float* src, const int* idx, const i64* next,
                                                       const i64* prev, unsigned long long* bad, i64 n, i64 V, i64 C) {
  for (i64 r = blockIdx.x; r < n; r += gridDim.x) {
    int v = idx[r];  // uniform over the block
    if (v < 0 || v >= V) {
      if (threadIdx.x == 0) atomicMin(bad, (unsigned long long)r);
      continue;
    }
    if (prev[r] >= 0) continue;  // another block owns row v
    float* row = dst + (i64)v * C;
    for (i64 c = threadIdx.x; c < C; c += BLOCK) {
      float acc = row[c];
      for (i64 j = r; j >= 0; j = next[j]) acc += src[j * C + c];
      row[c] = acc;
    }
  }
}

// ---- layer norm ----

// One block per row: mean and biased variance in double, then
// y = (x - mean)·rstd·w + b in float32. w and b may be null.
extern "C" __global__ void ferry_layer_norm(float* dst, float* mean, float* rstd, const float* x, const float* w,
                                            const float* b, i64 rows, i64 C, float eps) {
  __shared__ double s[BLOCK];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    float* y = dst + r * C;
    double acc = 0;
    for (i64 c = threadIdx.x; c < C; c += BLOCK) acc += (double)xr[c];
    double m = tree_sum(s, acc) / (double)C;
    acc = 0;
    for (i64 c = threadIdx.x; c < C; c += BLOCK) {
      double e = (double)xr[c] - m;
      acc += e * e;
    }
    double inv = 1.0 / sqrt(tree_sum(s, acc) / (double)C + (double)eps);
    float mf = (float)m, invf = (float)inv;
    if (threadIdx.x == 0) {
      mean[r] = mf;
      rstd[r] = invf;
    }
    for (i64 c = threadIdx.x; c < C; c += BLOCK) {
      float v = (xr[c] - mf) * invf;
      if (w) v *= w[c];
      if (b) v += b[c];
      y[c] = v;
    }
  }
}

// dx = rstd·(dŷ - mean(dŷ) - x̂·mean(dŷ·x̂)), dŷ = g·w; one block per row.
extern "C" __global__ void ferry_layer_norm_backward(float* dx, const float* grad, const float* x, const float* mean,
                                                     const float* rstd, const float* w, i64 rows, i64 C) {
  __shared__ double s[BLOCK];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * C;
    const float* g = grad + r * C;
    float* out = dx + r * C;
    float m = mean[r], inv = rstd[r];
    double s1 = 0, s2 = 0;
    for (i64 c = threadIdx.x; c < C; c += BLOCK) {
      float dy = g[c];
      if (w) dy *= w[c];
      float xh = (xr[c] - m) * inv;
      s1 += (double)dy;
      s2 += (double)(dy * xh);
    }
    float a = (float)(tree_sum(s, s1) / (double)C);
    float bb = (float)(tree_sum(s, s2) / (double)C);
    for (i64 c = threadIdx.x; c < C; c += BLOCK) {
      float dy = g[c];
      if (w) dy *= w[c];
      float xh = (xr[c] - m) * inv;
      out[c] = inv * (dy - a - xh * bb);
    }
  }
}

// The weight and bias gradients: one thread per column c, summing rows
// [blockIdx.y·chunk, +chunk) in order in double. Unsplit (gridDim.y == 1)
// the sums are final and go to dw and db (either may be null); split, they
// go to partial[2y·C + c] and partial[(2y+1)·C + c] for
// ferry_layer_norm_params_finish.
extern "C" __global__ void ferry_layer_norm_params(float* dw, float* db, double* partial, const float* grad,
                                                   const float* x, const float* mean, const float* rstd, i64 rows,
                                                   i64 C, i64 chunk) {
  i64 c = (i64)blockIdx.x * BLOCK + threadIdx.x;
  if (c >= C) return;
  i64 lo = (i64)blockIdx.y * chunk;
  i64 hi = min(lo + chunk, rows);
  double aw = 0, ab = 0;
  for (i64 r = lo; r < hi; r++) {
    float gv = grad[r * C + c];
    aw += (double)(gv * ((x[r * C + c] - mean[r]) * rstd[r]));
    ab += (double)gv;
  }
  if (gridDim.y == 1) {
    if (dw) dw[c] = (float)aw;
    if (db) db[c] = (float)ab;
  } else {
    partial[2 * (i64)blockIdx.y * C + c] = aw;
    partial[(2 * (i64)blockIdx.y + 1) * C + c] = ab;
  }
}

// Adds the splits' partial sums of each column in split order.
extern "C" __global__ void ferry_layer_norm_params_finish(float* dw, float* db, const double* partial, i64 C,
                                                          i64 splits) {
  GRID_STRIDE_LOOP(i64, c, C) {
    double aw = 0, ab = 0;
    for (i64 s = 0; s < splits; s++) {
      aw += partial[2 * s * C + c];
      ab += partial[(2 * s + 1) * C + c];
    }
    if (dw) dw[c] = (float)aw;
    if (db) db[c] = (float)ab;
  }
}

// ---- attention ----

// Heads is the geometry of attention's [B, H, T, D] operands: the sizes,
// then the (batch, head, row) strides of q, k, v and the output's gradient
// (their last axis has stride 1). The row stride is the CPU device's:
// max(stride, D, 1).
struct Heads {
  i64 B, H, T, D;
  i64 q[3], k[3], v[3], g[3];
};

__device__ __forceinline__ i64 head_off(const i64* st, i64 H, i64 bh) { return (bh / H) * st[0] + (bh % H) * st[1]; }
__device__ __forceinline__ i64 row_stride(const i64* st, i64 D) { return max(st[2], max(D, (i64)1)); }

// Σ_d a[d]·b[d] in float32, in order, as the reference product.
__device__ __forceinline__ float dot(const float* a, const float* b, i64 D) {
  float s = 0;
  for (i64 d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// Dropout on the attention weights, applied only when on: element (bh, i,
// j) of the [B, H, T, T] weights is number (bh·T + i)·T + j, mask element
// off + that (device.DropoutKey.Offset).
struct AttnDrop {
  int on;
  unsigned thr;
  float scale;
  unsigned k0, k1, s0, s1;
  i64 off;
  __device__ __forceinline__ float apply(float p, i64 e) const {
    if (!on) return p;
    return keep(off + e, thr, k0, k1, s0, s1) ? p * scale : 0.0f;
  }
};

// The attention kernels work in tiles, in the manner of FlashAttention-2.
// A block of 256 threads takes one tile of ATT = 32 query rows (forward,
// dq) or 32 keys (dk, dv) of one (batch, head), and walks the tiles of the
// other side 32 at a time, the head's columns in chunks of ATD = 64
// through shared memory. Scores are recomputed where needed and never
// stored: the forward keeps a running maximum and sum per row (online
// softmax) and saves only the log-sum-exp; the backward recomputes the
// weights from it. Thread t owns row t/8 of a 32×32 score tile, its keys
// (or, in dk and dv, its query rows) t%8 + 8k, k < 4; and row t/8 of a
// 32×64 output chunk, its columns 4(t%8) … +3 and 32 + 4(t%8) … +3. Heads
// wider than 64 columns are done a chunk of 64 output columns at a time,
// the scores (which need every column) recomputed for each chunk. The
// operand tiles have rows of 68 floats, read four columns at a time
// (float4): the eight rows (or eight column groups) a warp reads at once
// fall on distinct banks, so each 16-byte load is one shared-memory
// transaction. Score tiles have rows of 33 floats. Every sum runs in an order fixed by the shapes:
// each dot product and each output element in key (query) order, as the
// CPU device's; no atomics.
#define ATT 32
#define ATD 64
#define ATP (ATD + 4)

typedef float AttTile[ATT][ATP];
typedef float AttScores[ATT][ATT + 1];

// Loads rows r0 … r0+31, columns d0 … d0+63 of one head of an operand
// (row stride ld) into s, with zeros past row T and column D. Thread t
// loads column t%64 of rows t/64 + 4k, walking one pointer down the rows
// (so the compiler keeps no table of eight 64-bit offsets per operand
// alive across the kernel's loops: that halves the backward kernels'
// registers).
__device__ __forceinline__ void att_load(AttTile& s, const float* base, i64 ld, i64 r0, i64 T, i64 d0, i64 D) {
  const int c = threadIdx.x % ATD, r = threadIdx.x / ATD;
  const bool in = d0 + c < D;
  const float* p = base + (r0 + r) * ld + d0 + c;
  const i64 step = (BLOCK / ATD) * ld;
#pragma unroll
  for (int k = 0; k < ATT * ATD / BLOCK; k++) {
    s[r + k * (BLOCK / ATD)][c] = in && r0 + r + k * (BLOCK / ATD) < T ? *p : 0.0f;
    p += step;
  }
}

// s[k] += Σ_{d<n} a[t/8][d]·b[t%8 + 8k][d], column by column: across the
// chunks, each of the thread's four dot products runs over d in order
// (rounding n up to a multiple of four adds products of the tiles' zero
// padding, which change no sum).
__device__ __forceinline__ void att_dots(float* s, const AttTile& a, const AttTile& b, int n) {
  const int r = threadIdx.x >> 3, c = threadIdx.x & 7;
  for (int d = 0; d < n; d += 4) {
    float4 x = *reinterpret_cast<const float4*>(&a[r][d]);
#pragma unroll
    for (int k = 0; k < 4; k++) {
      float4 y = *reinterpret_cast<const float4*>(&b[c + 8 * k][d]);
      s[k] += x.x * y.x;
      s[k] += x.y * y.y;
      s[k] += x.z * y.z;
      s[k] += x.w * y.w;
    }
  }
}

// The column of a 64-wide chunk that thread t's accumulator kk holds.
__device__ __forceinline__ int att_col(int kk) { return (kk & 4) * 8 + 4 * (threadIdx.x & 7) + (kk & 3); }

// o[kk] += p·row[att_col(kk)] for the thread's eight columns (two float4
// loads).
__device__ __forceinline__ void att_axpy8(float* o, float p, const float* row) {
  const int c = threadIdx.x & 7;
  float4 u = *reinterpret_cast<const float4*>(row + 4 * c);
  float4 w = *reinterpret_cast<const float4*>(row + 32 + 4 * c);
  o[0] += p * u.x;
  o[1] += p * u.y;
  o[2] += p * u.z;
  o[3] += p * u.w;
  o[4] += p * w.x;
  o[5] += p * w.y;
  o[6] += p * w.z;
  o[7] += p * w.w;
}

// The maximum and the sum over the eight threads of a tile row (lanes
// 8·(lane/8) … +7, in one warp): an xor butterfly, after which every
// thread holds the same value (a+b and b+a round alike).
__device__ __forceinline__ float row8_max(float v) {
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
__device__ __forceinline__ float row8_sum(float v) {
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// out[i] = Σ_j P'_ij·v[j] and lse[i] = log Σ_j exp(s_ij), with s_ij =
// scale·q_i·k_j over the attended keys (j ≤ i when causal) and P' the
// softmax weights after dropout (P' = keep·P/(1-p), P from the undropped
// scores). One block per tile of 32 query rows; per tile of 32 keys
// (causal: none wholly above the diagonal) the scores, the row's new
// maximum m, the running sum l and the output rescaled by exp(m_old - m);
// out = acc/l at the end. Shared memory: 21,632 bytes.
extern "C" __global__ void ferry_attention(float* out, float* lse, const float* q, const float* k, const float* v,
                                           Heads L, float scale, int causal, int drop, unsigned thr, float dscale,
                                           unsigned k0, unsigned k1, unsigned s0, unsigned s1, i64 off) {
  __shared__ __align__(16) AttTile sq, skv;
  __shared__ AttScores sp;
  AttnDrop dr = {drop, thr, dscale, k0, k1, s0, s1, off};
  const i64 T = L.T, D = L.D, nt = (T + ATT - 1) / ATT, tiles = L.B * L.H * nt;
  const i64 ldq = row_stride(L.q, D), ldk = row_stride(L.k, D), ldv = row_stride(L.v, D);
  const int r = threadIdx.x >> 3, c = threadIdx.x & 7;
  for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 bh = tile / nt, i0 = (tile - bh * nt) * ATT, i = i0 + r;
    const float* qh = q + head_off(L.q, L.H, bh);
    const float* kh = k + head_off(L.k, L.H, bh);
    const float* vh = v + head_off(L.v, L.H, bh);
    // Keys row i attends (none for a row past T), and keys any row of
    // the tile attends.
    const i64 n = i >= T ? 0 : causal ? i + 1 : T;
    const i64 nkeys = causal ? min(T, i0 + ATT) : T;
    for (i64 c0 = 0; c0 < D; c0 += ATD) {
      float m = -INFINITY, l = 0, o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (i64 j0 = 0; j0 < nkeys; j0 += ATT) {
        float s[4] = {0, 0, 0, 0};
        for (i64 d0 = 0; d0 < D; d0 += ATD) {
          if (D > ATD || j0 == 0) att_load(sq, qh, ldq, i0, T, d0, D);
          att_load(skv, kh, ldk, j0, T, d0, D);
          __syncthreads();
          att_dots(s, sq, skv, (int)min((i64)ATD, D - d0));
          __syncthreads();
        }
        float x[4], mt = -INFINITY;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          x[kk] = scale * s[kk];
          if (j0 + c + 8 * kk < n) mt = fmaxf(mt, x[kk]);
        }
        const float mn = fmaxf(m, row8_max(mt));
        const float alpha = mn == -INFINITY ? 1.0f : expf(m - mn);
        float ps = 0;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          i64 j = j0 + c + 8 * kk;
          float p = 0, pd = 0;
          if (j < n) {
            p = expf(x[kk] - mn);
            pd = dr.apply(p, (bh * T + i) * T + j);
          }
          ps += p;
          sp[r][c + 8 * kk] = pd;
        }
        l = l * alpha + row8_sum(ps);
        m = mn;
#pragma unroll
        for (int kk = 0; kk < 8; kk++) o[kk] *= alpha;
        att_load(skv, vh, ldv, j0, T, c0, D);
        __syncthreads();
        const int cnt = (int)min((i64)ATT, T - j0);
        for (int t = 0; t < cnt; t++) att_axpy8(o, sp[r][t], skv[t]);
        __syncthreads();
      }
      if (i < T) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
          i64 d = c0 + att_col(kk);
          if (d < D) out[(bh * T + i) * D + d] = o[kk] / l;
        }
        if (c0 == 0 && c == 0) lse[bh * T + i] = m + logf(l);
      }
    }
  }
}

// delta[i] = Σ_d grad[i, d]·out[i, d] (which equals Σ_j dP'_ij·P'_ij,
// dropout or not); one thread per row.
extern "C" __global__ void ferry_attention_delta(float* delta, const float* grad, const float* out, Heads L) {
  const i64 T = L.T, D = L.D, ldg = row_stride(L.g, D);
  GRID_STRIDE_LOOP(i64, row, L.B * L.H * T) {
    i64 bh = row / T, i = row - bh * T;
    delta[row] = dot(grad + head_off(L.g, L.H, bh) + i * ldg, out + row * D, D);
  }
}

// The gradient of score (i, j) from its recomputed s_ij = x and dP_ij =
// dO_i·v_j = dp: P_ij = exp(x - lse_i), the weight after dropout P'_ij
// (into *pd) and dS_ij = P_ij·(dP'_ij - delta_i), dP' being dP taken back
// through dropout.
__device__ __forceinline__ float att_ds(float x, float dp, float lse_i, float delta_i, const AttnDrop& dr, i64 e,
                                        float* pd) {
  float p = expf(x - lse_i);
  if (dr.on) {
    bool kp = keep(dr.off + e, dr.thr, dr.k0, dr.k1, dr.s0, dr.s1);
    *pd = kp ? p * dr.scale : 0.0f;
    dp = kp ? dp * dr.scale : 0.0f;
  } else {
    *pd = p;
  }
  return p * (dp - delta_i);
}

// dq[i] = scale·Σ_j dS_ij·k[j]: one block per tile of 32 query rows, as
// ferry_attention, walking the key tiles in order (so no atomics, and
// each dq element sums over j in order). Shared memory: 39,040 bytes.
extern "C" __global__ void ferry_attention_backward_q(float* dq, const float* grad, const float* q, const float* k,
                                                      const float* v, const float* lse, const float* delta, Heads L,
                                                      float scale, int causal, int drop, unsigned thr, float dscale,
                                                      unsigned k0, unsigned k1, unsigned s0, unsigned s1, i64 off) {
  __shared__ __align__(16) AttTile sq, sg, sk, sv;
  __shared__ AttScores sds;
  AttnDrop dr = {drop, thr, dscale, k0, k1, s0, s1, off};
  const i64 T = L.T, D = L.D, nt = (T + ATT - 1) / ATT, tiles = L.B * L.H * nt;
  const i64 ldq = row_stride(L.q, D), ldk = row_stride(L.k, D), ldv = row_stride(L.v, D), ldg = row_stride(L.g, D);
  const int r = threadIdx.x >> 3, c = threadIdx.x & 7;
  for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 bh = tile / nt, i0 = (tile - bh * nt) * ATT, i = i0 + r;
    const float* qh = q + head_off(L.q, L.H, bh);
    const float* gh = grad + head_off(L.g, L.H, bh);
    const float* kh = k + head_off(L.k, L.H, bh);
    const float* vh = v + head_off(L.v, L.H, bh);
    const i64 n = i >= T ? 0 : causal ? i + 1 : T;
    const i64 nkeys = causal ? min(T, i0 + ATT) : T;
    const float li = i < T ? lse[bh * T + i] : 0.0f, di = i < T ? delta[bh * T + i] : 0.0f;
    for (i64 c0 = 0; c0 < D; c0 += ATD) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (i64 j0 = 0; j0 < nkeys; j0 += ATT) {
        float s[4] = {0, 0, 0, 0}, dp[4] = {0, 0, 0, 0};
        for (i64 d0 = 0; d0 < D; d0 += ATD) {
          if (D > ATD || j0 == 0) {
            att_load(sq, qh, ldq, i0, T, d0, D);
            att_load(sg, gh, ldg, i0, T, d0, D);
          }
          att_load(sk, kh, ldk, j0, T, d0, D);
          att_load(sv, vh, ldv, j0, T, d0, D);
          __syncthreads();
          int nd = (int)min((i64)ATD, D - d0);
          att_dots(s, sq, sk, nd);
          att_dots(dp, sg, sv, nd);
          __syncthreads();
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          i64 j = j0 + c + 8 * kk;
          float ds = 0, pd;
          if (j < n) ds = att_ds(scale * s[kk], dp[kk], li, di, dr, (bh * T + i) * T + j, &pd);
          sds[r][c + 8 * kk] = ds;
        }
        if (D > ATD) att_load(sk, kh, ldk, j0, T, c0, D);
        __syncthreads();
        const int cnt = (int)min((i64)ATT, T - j0);
        for (int t = 0; t < cnt; t++) att_axpy8(acc, sds[r][t], sk[t]);
        __syncthreads();
      }
      if (i < T) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
          i64 d = c0 + att_col(kk);
          if (d < D) dq[(bh * T + i) * D + d] = scale * acc[kk];
        }
      }
    }
  }
}

// dv[j] = Σ_i P'_ij·grad[i] and dk[j] = scale·Σ_i dS_ij·q[i]: one block
// per tile of 32 keys, walking the query tiles that attend to it (causal:
// from the tile on the diagonal) in order. Shared memory: 43,264 bytes.
extern "C" __global__ void ferry_attention_backward_kv(float* dk, float* dv, const float* grad, const float* q,
                                                       const float* k, const float* v, const float* lse,
                                                       const float* delta, Heads L, float scale, int causal, int drop,
                                                       unsigned thr, float dscale, unsigned k0, unsigned k1,
                                                       unsigned s0, unsigned s1, i64 off) {
  __shared__ __align__(16) AttTile sq, sg, sk, sv;
  __shared__ AttScores spd, sds;
  AttnDrop dr = {drop, thr, dscale, k0, k1, s0, s1, off};
  const i64 T = L.T, D = L.D, nt = (T + ATT - 1) / ATT, tiles = L.B * L.H * nt;
  const i64 ldq = row_stride(L.q, D), ldk = row_stride(L.k, D), ldv = row_stride(L.v, D), ldg = row_stride(L.g, D);
  const int r = threadIdx.x >> 3, c = threadIdx.x & 7;
  for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 bh = tile / nt, j0 = (tile - bh * nt) * ATT;
    const float* qh = q + head_off(L.q, L.H, bh);
    const float* gh = grad + head_off(L.g, L.H, bh);
    const float* kh = k + head_off(L.k, L.H, bh);
    const float* vh = v + head_off(L.v, L.H, bh);
    const i64 first = causal ? j0 : 0;
    for (i64 c0 = 0; c0 < D; c0 += ATD) {
      float ak[8] = {0, 0, 0, 0, 0, 0, 0, 0}, av[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (i64 i0 = first; i0 < T; i0 += ATT) {
        // The score tile's rows are queries i0 + t/8, its columns keys
        // j0 + t%8 + 8k.
        float s[4] = {0, 0, 0, 0}, dp[4] = {0, 0, 0, 0};
        for (i64 d0 = 0; d0 < D; d0 += ATD) {
          att_load(sq, qh, ldq, i0, T, d0, D);
          att_load(sg, gh, ldg, i0, T, d0, D);
          if (D > ATD || i0 == first) {
            att_load(sk, kh, ldk, j0, T, d0, D);
            att_load(sv, vh, ldv, j0, T, d0, D);
          }
          __syncthreads();
          int nd = (int)min((i64)ATD, D - d0);
          att_dots(s, sq, sk, nd);
          att_dots(dp, sg, sv, nd);
          __syncthreads();
        }
        const i64 i = i0 + r, n = i >= T ? 0 : causal ? i + 1 : T;
        const float li = i < T ? lse[bh * T + i] : 0.0f, di = i < T ? delta[bh * T + i] : 0.0f;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          i64 j = j0 + c + 8 * kk;
          float ds = 0, pd = 0;
          if (j < n) ds = att_ds(scale * s[kk], dp[kk], li, di, dr, (bh * T + i) * T + j, &pd);
          spd[r][c + 8 * kk] = pd;
          sds[r][c + 8 * kk] = ds;
        }
        if (D > ATD) {
          att_load(sq, qh, ldq, i0, T, c0, D);
          att_load(sg, gh, ldg, i0, T, c0, D);
        }
        __syncthreads();
        // Now thread t accumulates key j0 + t/8, columns c0 + att_col(kk).
        const int cnt = (int)min((i64)ATT, T - i0);
        for (int t = 0; t < cnt; t++) {
          att_axpy8(av, spd[t][r], sg[t]);
          att_axpy8(ak, sds[t][r], sq[t]);
        }
        __syncthreads();
      }
      const i64 j = j0 + r;
      if (j < T) {
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
          i64 d = c0 + att_col(kk);
          if (d < D) {
            dk[(bh * T + j) * D + d] = scale * ak[kk];
            dv[(bh * T + j) * D + d] = av[kk];
          }
        }
      }
    }
  }
}

// GEMV kernel template: y = epilogue(W * prologue(x)) for batch 1, over the 16-byte tiled
// weight layout documented in kernels.h.
//
// Work split. A warp owns kRows rows at a time (a "row group") and walks all columns: at step g
// lane l takes block c = 32g + l of each of its rows, i.e. one 16-byte piece (P pieces for
// Q8_0/F16/BF16) per row per step, all kRows*P loads issued before any use and the next step's
// loads issued before this step's math (double buffer). The x values of block c (32 floats) come
// from shared memory once per step and serve all kRows rows. The grid is persistent-ish: at most
// (SMs x occupancy) blocks, row groups dealt round-robin over blocks so every SM gets an equal
// share, and each block stages x only once.
//
// Shared x. x (after the prologue) is staged as 32-float blocks of 8 float4 slots, slot f of
// block c stored at c*8 + (f ^ (c & 7)): the 8 lanes of a quarter-warp read 8 different 16-byte
// bank groups (conflict-free). For the 4-bit types each element is pre-multiplied by 2^-k, where
// q*2^k is what the shift-free nibble decode produces (see nib()); sumx[c] (unscaled) carries the
// zero-point / minimum term.
//
// RMSNorm prologue: y = rsqrt(mean(h^2)+eps) * (W (h*gamma)): the scalar is applied to each dot
// at the end, so staging is one pass (sum of squares accumulates while staging).
#pragma once
#include <cuda_fp16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/common.cuh"

namespace lmf::cuda::dev {

constexpr int kGemvWarps = 8;
constexpr int kGemvThreads = kGemvWarps * 32;
constexpr int kRows = 4;  // rows per warp (row group)
static_assert(kRows % 2 == 0, "SiluMul pairs rows inside a row group");

template <DType T>
struct WTraits;
template <DType T>
struct Frag;
template <>
struct WTraits<DType::Q4_0> {
  static constexpr int P = 1;
  static constexpr int scale_bytes = 2;
  static constexpr bool nibbles = true;
};
template <>
struct WTraits<DType::Q4_1> {
  static constexpr int P = 1;
  static constexpr int scale_bytes = 4;
  static constexpr bool nibbles = true;
};
template <>
struct WTraits<DType::Q8_0> {
  static constexpr int P = 2;
  static constexpr int scale_bytes = 2;
  static constexpr bool nibbles = false;
};
template <>
struct WTraits<DType::F16> {
  static constexpr int P = 4;
  static constexpr int scale_bytes = 0;
  static constexpr bool nibbles = false;
};
template <>
struct WTraits<DType::BF16> {
  static constexpr int P = 4;
  static constexpr int scale_bytes = 0;
  static constexpr bool nibbles = false;
};

// Kernel parameters (a flat copy of GemvArgs; passed by value in constant memory).
struct GemvParams {
  const uint8_t* q;
  const uint8_t* scales;
  int rows, cols;
  const float* in;
  const float* residual;
  float* residual_out;
  const float* gamma;
  float eps;
  float* y;
  const float* y_residual;
  const float* bias;
  QkvParams qkv;
};

// Steps loaded together per row group: 2 for the 4-bit types (one piece per step), else 1, so a
// lane has 128-256 bytes of weights in flight per batch (and the next batch behind it).
template <DType T>
constexpr int kSteps = WTraits<T>::P == 1 ? 2 : 1;

// Pre-scale of element e (0..31) of a block for the nibble decode: 2^-(nibble bit offset).
__device__ __forceinline__ float nib_prescale(int e) {
  const int sh = (e < 16 ? 0 : 4) + (e & 1) * 8;
  return __uint_as_float(uint32_t(127 - sh) << 23);
}
// Nibble at bits [sh, sh+4) of v as a float q * 2^sh, exact: OR-ing into the mantissa of 2^23
// and subtracting 2^23 needs no shift (one LOP3 + one FADD).
__device__ __forceinline__ float nib(uint32_t v, int sh) {
  return __uint_as_float((v & (0xFu << sh)) | 0x4B000000u) - 8388608.f;
}

// sum_e q_e * x_e over one Q4 block (16 bytes), x pre-scaled per nib_prescale.
__device__ __forceinline__ float dot_q4(const uint4& q, const float4 (&x)[8]) {
  const uint32_t wd[4] = {q.x, q.y, q.z, q.w};
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t lo = wd[w], hi = wd[w] >> 16;
    // lo: bits 0,4,8,12 = elements 4w, 4w+16, 4w+1, 4w+17; hi: 4w+2, 4w+18, 4w+3, 4w+19.
    s0 = fmaf(nib(lo, 0), x[w].x, s0);
    s1 = fmaf(nib(lo, 4), x[4 + w].x, s1);
    s0 = fmaf(nib(lo, 8), x[w].y, s0);
    s1 = fmaf(nib(lo, 12), x[4 + w].y, s1);
    s0 = fmaf(nib(hi, 0), x[w].z, s0);
    s1 = fmaf(nib(hi, 4), x[4 + w].z, s1);
    s0 = fmaf(nib(hi, 8), x[w].w, s0);
    s1 = fmaf(nib(hi, 12), x[4 + w].w, s1);
  }
  return s0 + s1;
}

// Signed byte k of v as an exact float: XOR 0x80 makes it q+128 unsigned; PRMT places it under
// the exponent of 2^23.
__device__ __forceinline__ float sbyte(uint32_t u /* v ^ 0x80808080 */, int k) {
  return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440 | k)) - 8388736.f;
}

__device__ __forceinline__ float dot_q8(const uint4 (&q)[2], const float4 (&x)[8]) {
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const uint32_t wd[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t u = wd[w] ^ 0x80808080u;
      const float4 xv = x[4 * p + w];
      s0 = fmaf(sbyte(u, 0), xv.x, s0);
      s1 = fmaf(sbyte(u, 1), xv.y, s1);
      s0 = fmaf(sbyte(u, 2), xv.z, s0);
      s1 = fmaf(sbyte(u, 3), xv.w, s1);
    }
  }
  return s0 + s1;
}

template <DType T>
__device__ __forceinline__ float dot_f16x(const uint4 (&q)[4], const float4 (&x)[8]) {
  float s0 = 0.f, s1 = 0.f;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const uint32_t wd[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float4 xv = x[2 * p + (w >> 1)];
      const float xa = (w & 1) ? xv.z : xv.x, xb = (w & 1) ? xv.w : xv.y;
      float a, b;
      if constexpr (T == DType::F16) {
        __half2 h;
        memcpy(&h, &wd[w], 4);
        const float2 f = __half22float2(h);
        a = f.x;
        b = f.y;
      } else {
        a = __uint_as_float(wd[w] << 16);
        b = __uint_as_float(wd[w] & 0xffff0000u);
      }
      s0 = fmaf(a, xa, s0);
      s1 = fmaf(b, xb, s1);
    }
  }
  return s0 + s1;
}

// One step's weights for a row group: kRows rows x P pieces, plus the block scales.
template <DType T>
struct Frag {
  static constexpr int P = WTraits<T>::P;
  uint4 w[kRows][P];
  uint32_t sc[kRows];

  __device__ __forceinline__ void load(const GemvParams& p, int rg, int g, int nblk, int lane, uint64_t pol) {
    const int gb = min(32, nblk - 32 * g);
    const size_t row_stride = size_t(nblk) * P * 16;
    const int c = 32 * g + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = rg * kRows + r;
      if (lane < gb && row < p.rows) {
        const uint8_t* base = p.q + size_t(row) * row_stride + size_t(g) * 32 * P * 16;
#pragma unroll
        for (int pc = 0; pc < P; ++pc) w[r][pc] = ld_stream16(base + (pc * gb + lane) * 16, pol);
        if constexpr (WTraits<T>::scale_bytes == 2)
          sc[r] = ld_stream2(p.scales + (size_t(row) * nblk + c) * 2, pol);
        else if constexpr (WTraits<T>::scale_bytes == 4)
          sc[r] = ld_stream4(p.scales + (size_t(row) * nblk + c) * 4, pol);
      } else {
#pragma unroll
        for (int pc = 0; pc < P; ++pc) w[r][pc] = make_uint4(0, 0, 0, 0);
        sc[r] = 0;  // zero scale: the row/block contributes nothing
      }
    }
  }

  __device__ __forceinline__ void accumulate(float (&acc)[kRows], const float4* xs4,
                                             const float* sumx, int g, int nblk, int lane) const {
    const int gb = min(32, nblk - 32 * g);
    if (lane >= gb) return;
    const int c = 32 * g + lane;
    float4 x[8];  // [32] x of block c
#pragma unroll
    for (int f = 0; f < 8; ++f) x[f] = xs4[c * 8 + (f ^ (c & 7))];
    const float sx = sumx[c];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if constexpr (T == DType::Q4_0) {
        const float d = __half2float(__ushort_as_half(uint16_t(sc[r])));
        acc[r] = fmaf(d, dot_q4(w[r][0], x) - 8.f * sx, acc[r]);
      } else if constexpr (T == DType::Q4_1) {
        const float d = __half2float(__ushort_as_half(uint16_t(sc[r] & 0xffffu)));
        const float m = __half2float(__ushort_as_half(uint16_t(sc[r] >> 16)));
        acc[r] = fmaf(d, dot_q4(w[r][0], x), fmaf(m, sx, acc[r]));
      } else if constexpr (T == DType::Q8_0) {
        const float d = __half2float(__ushort_as_half(uint16_t(sc[r])));
        acc[r] = fmaf(d, dot_q8(w[r], x), acc[r]);
      } else {
        acc[r] += dot_f16x<T>(w[r], x);
      }
    }
  }
};

// QKV head epilogue, run by the warp that completed the head's last row group. raw holds the
// head's head_dim outputs (bias included).
__device__ __forceinline__ void qkv_head_epilogue(const QkvParams& q, int head, int lane) {
  const int hd = q.head_dim, half_d = hd / 2;
  const float* src = q.raw + size_t(head) * hd;
  const bool is_q = head < q.n_head, is_k = !is_q && head < q.n_head + q.n_kv_head;
  const int pos = *q.pos;
  const float* gamma = is_q ? q.q_norm : (is_k ? q.k_norm : nullptr);
  constexpr int kMaxPairs = 2;  // head_dim <= 128: <= 2 pairs per lane
  float va[kMaxPairs], vb[kMaxPairs];
  int ia[kMaxPairs], ib[kMaxPairs];
  const int np = half_d / 32;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j) {
    if (j < np) {
      const int i = lane + 32 * j;
      ia[j] = q.rope == RopeStyle::NeoX ? i : 2 * i;
      ib[j] = q.rope == RopeStyle::NeoX ? i + half_d : 2 * i + 1;
      va[j] = __ldcg(src + ia[j]);  // L2: written by other blocks in this launch
      vb[j] = __ldcg(src + ib[j]);
      ss += va[j] * va[j] + vb[j] * vb[j];
    }
  }
  if (gamma) {
    const float r = rsqrtf(warp_sum(ss) / float(hd) + q.norm_eps);
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np) {
        va[j] = va[j] * r * gamma[ia[j]];
        vb[j] = vb[j] * r * gamma[ib[j]];
      }
  }
  if (is_q || is_k) {
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np) {
        float c, s;
        rope_cs(pos, lane + 32 * j, hd, q.theta, &c, &s);
        const float a = va[j] * c - vb[j] * s, b = vb[j] * c + va[j] * s;
        va[j] = a;
        vb[j] = b;
      }
  }
  if (is_q) {
    float* dst = q.q_out + size_t(head) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np) {
        dst[ia[j]] = va[j];
        dst[ib[j]] = vb[j];
      }
  } else {
    const int kvh = is_k ? head - q.n_head : head - q.n_head - q.n_kv_head;
    __half* dst = reinterpret_cast<__half*>(is_k ? q.k_cache : q.v_cache) +
                  (size_t(kvh) * q.n_ctx + pos) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np) {
        dst[ia[j]] = __float2half_rn(va[j]);
        dst[ib[j]] = __float2half_rn(vb[j]);
      }
  }
}

template <DType T, Prologue PRO, Epilogue EPI>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ float4 xs4[];  // [nblk][8] swizzled x slots, then sumx [nblk]
  __shared__ float red[32];
  const int nblk = p.cols >> 5;
  float* sumx = reinterpret_cast<float*>(xs4 + size_t(nblk) * 8);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_rg = (p.rows + kRows - 1) / kRows;
  const int ngroups = (nblk + 31) / 32;
  const int rg_step = gridDim.x * kGemvWarps;

  const uint64_t pol = evict_first_policy();
  int rg = blockIdx.x + gridDim.x * warp;
  int g = 0;
  constexpr int U = kSteps<T>;
  Frag<T> cur[U];
  if (rg < n_rg)  // in flight while x is staged
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < ngroups) cur[u].load(p, rg, u, nblk, lane, pol);

  // Stage x (prologue). Thread t takes float4 t of each 1024-element slice: read-only loads, no
  // dependence between iterations, so the unrolled loop keeps several L2 reads in flight (a
  // serial chain here costs an L2 latency per iteration). 8 consecutive lanes hold one 32-element
  // block, so its sum is 3 shuffles.
  float ss = 0.f;
  const int n4 = p.cols >> 2;
  const float4* in4 = reinterpret_cast<const float4*>(p.in);
  const float4* res4 = reinterpret_cast<const float4*>(p.residual);
  const float4* gam4 = reinterpret_cast<const float4*>(p.gamma);
#pragma unroll 4
  for (int base = 0; base < n4; base += kGemvThreads) {  // uniform trip count: shuffles are safe
    const int i4 = base + threadIdx.x;
    const bool ok = i4 < n4;
    float4 v = ok ? __ldg(in4 + i4) : make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (PRO == Prologue::AddNorm) {
      const float4 r = ok ? __ldg(res4 + i4) : make_float4(0.f, 0.f, 0.f, 0.f);
      v.x += r.x;
      v.y += r.y;
      v.z += r.z;
      v.w += r.w;
      if (blockIdx.x == 0 && ok) reinterpret_cast<float4*>(p.residual_out)[i4] = v;
    }
    if constexpr (PRO != Prologue::None) {
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      const float4 gm = ok ? __ldg(gam4 + i4) : make_float4(0.f, 0.f, 0.f, 0.f);
      v.x *= gm.x;
      v.y *= gm.y;
      v.z *= gm.z;
      v.w *= gm.w;
    }
    float bs = (v.x + v.y) + (v.z + v.w);
    bs += __shfl_xor_sync(0xffffffffu, bs, 1);
    bs += __shfl_xor_sync(0xffffffffu, bs, 2);
    bs += __shfl_xor_sync(0xffffffffu, bs, 4);
    if (ok) {
      const int c = i4 >> 3, f = i4 & 7;
      if (f == 0) sumx[c] = bs;
      if constexpr (WTraits<T>::nibbles) {
        v.x *= nib_prescale(4 * f);
        v.y *= nib_prescale(4 * f + 1);
        v.z *= nib_prescale(4 * f + 2);
        v.w *= nib_prescale(4 * f + 3);
      }
      xs4[c * 8 + (f ^ (c & 7))] = v;
    }
  }
  float rn = 1.f;
  if constexpr (PRO != Prologue::None) {
    rn = rsqrtf(block_sum(ss, red) / float(p.cols) + p.eps);  // includes __syncthreads
  } else {
    __syncthreads();
  }

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;

  while (rg < n_rg) {
    int nrg = rg, ng = g + U;
    if (ng >= ngroups) {
      ng = 0;
      nrg += rg_step;
    }
    Frag<T> nxt[U];
    if (nrg < n_rg)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ng + u < ngroups) nxt[u].load(p, nrg, ng + u, nblk, lane, pol);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (g + u < ngroups) cur[u].accumulate(acc, xs4, sumx, g + u, nblk, lane);
    if (ng == 0) {  // row group rg complete
      float v[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        v[r] = warp_sum(acc[r]) * rn;
        acc[r] = 0.f;
      }
      const int row0 = rg * kRows;
      if constexpr (EPI == Epilogue::Store || EPI == Epilogue::Residual ||
                    EPI == Epilogue::QKV) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int row = row0 + r;
          if (lane == r && row < p.rows) {
            float o = v[r];
            if constexpr (EPI == Epilogue::Residual) o += p.y_residual[row];
            if constexpr (EPI != Epilogue::Residual)
              if (p.bias) o += p.bias[row];
            if constexpr (EPI == Epilogue::QKV)
              p.qkv.raw[row] = o;
            else
              p.y[row] = o;
          }
        }
      } else if constexpr (EPI == Epilogue::SiluMul) {
#pragma unroll
        for (int r = 0; r < kRows; r += 2)
          if (lane == r / 2) p.y[row0 / 2 + r / 2] = silu(v[r]) * v[r + 1];
      }
      if constexpr (EPI == Epilogue::QKV) {
        // Last-arriver pattern: publish this row group, count it; the warp completing a head
        // runs the head epilogue, then resets the counter for the next launch.
        __threadfence();
        __syncwarp();
        const int head = row0 / p.qkv.head_dim;
        unsigned old = 0;
        if (lane == 0) old = atomicAdd(&p.qkv.counters[head], 1u);
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old == unsigned(p.qkv.head_dim / kRows - 1)) {
          __threadfence();
          qkv_head_epilogue(p.qkv, head, lane);
          if (lane == 0) p.qkv.counters[head] = 0;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = nxt[u];
    rg = nrg;
    g = ng;
  }
}

inline size_t gemv_smem_bytes(int cols) { return size_t(cols / 32) * (8 * 16 + 4); }

}  // namespace lmf::cuda::dev

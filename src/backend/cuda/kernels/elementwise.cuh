// Unfused building blocks: embedding lookup, row RMSNorm, RoPE, KV store, add, SiLU-mul, argmax.
#pragma once
#include <cuda_fp16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/gguf_elem.cuh"
#include "backend/cuda/kernels/pdl_launch.cuh"

namespace lmf::cuda::dev {

template <DType T>
__global__ void embed_kernel(const uint8_t* table, size_t row_bytes, int cols, const int* token,
                             float* out, bool early) {
  pdl_trigger_early(early);  // the next kernel waits for this one's completion before reading out
  const uint8_t* row = table + size_t(*token) * row_bytes;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x)
    out[i] = gguf_elem<T>(row, i);
}

// blockDim kNormThreads. n % 4 == 0 (every model dimension) takes the float4 order shared with
// the GEMV Norm prologue (common.cuh), so fused and unfused norms are bit-identical.
__global__ void rmsnorm_rows_kernel(const float* x, const float* gamma, float* y, int n, float eps) {
  __shared__ float sh[32];
  const float* xr = x + size_t(blockIdx.x) * n;
  float* yr = y + size_t(blockIdx.x) * n;
  float ss = 0.f;
  if ((n & 3) == 0) {
    const int n4 = n >> 2;
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int i4 = threadIdx.x; i4 < n4; i4 += blockDim.x) ss = sumsq4(x4[i4], ss);
    const float r = rms_scale(block_sum(ss, sh), n, eps);
    for (int i4 = threadIdx.x; i4 < n4; i4 += blockDim.x) y4[i4] = norm_apply4(x4[i4], r, g4[i4]);
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    const float r = rms_scale(block_sum(ss, sh), n, eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], r), gamma[i]);
  }
}

// grid n_heads, block head_dim/2: one pair per thread.
__global__ void rope_kernel(float* x, int hd, RopeStyle st, float theta, const float* ff, const int* pos) {
  const int i = threadIdx.x, half_d = hd / 2;
  float* h = x + size_t(blockIdx.x) * hd;
  const int a = st == RopeStyle::NeoX ? i : 2 * i, b = st == RopeStyle::NeoX ? i + half_d : 2 * i + 1;
  float c, s;
  rope_cs(*pos, i, hd, theta, ff, &c, &s);
  const float va = h[a], vb = h[b];
  h[a] = rope_rotate(va, vb, c, s, true);
  h[b] = rope_rotate(vb, va, c, s, false);
}

// grid n_kv, block head_dim.
__global__ void kv_store_kernel(const float* k, const float* v, __half* kc, __half* vc, int hd,
                                int n_ctx, const int* pos) {
  const int h = blockIdx.x, d = threadIdx.x;
  const size_t dst = (size_t(h) * n_ctx + *pos) * hd + d;
  kc[dst] = __float2half_rn(k[size_t(h) * hd + d]);
  vc[dst] = __float2half_rn(v[size_t(h) * hd + d]);
}

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = a[i] + b[i];
}
__global__ void silu_mul_kernel(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = silu(g[i]) * u[i];
}

// (value, index) with "better" = larger value, then smaller index; NaN never better.
__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi) || (bi < 0 && !isnan(v));
}
__device__ __forceinline__ void am_warp(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && am_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}
// Block-level reduce of (v, i) -> thread 0.
__device__ __forceinline__ void am_block(float& v, int& i) {
  __shared__ float sv[32];
  __shared__ int si[32];
  am_warp(v, i);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) {
    sv[w] = v;
    si[w] = i;
  }
  __syncthreads();
  if (w == 0) {
    const int nw = blockDim.x >> 5;
    v = l < nw ? sv[l] : -INFINITY;
    i = l < nw ? si[l] : -1;
    am_warp(v, i);
  }
}

// One launch: blocks reduce slices, the last block to finish reduces the partials.
// Chained decode's outputs of a picked id (kernels.h ChainOut): the next step's token and
// position words, and the host's mapped slot (made visible before the kernel's completion event).
__device__ __forceinline__ void chain_store(int id, int* io, int next_pos, int* host) {
  if (io) {
    io[0] = id;
    io[1] = next_pos;
  }
  if (host) {
    *reinterpret_cast<volatile int*>(host) = id;
    __threadfence_system();
  }
}

__global__ void chain_id_kernel(const int* id, int* io, int next_pos, int* host) {
  chain_store(*id, io, next_pos, host);
}

__global__ void argmax_kernel(const float* x, int64_t n, int* out, float* pv, int* pi,
                              unsigned* counter, int* io, int next_pos, int* host) {
  float v = -INFINITY;
  int idx = -1;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const float xj = x[j];
    if (am_better(xj, int(j), v, idx)) {
      v = xj;
      idx = int(j);
    }
  }
  am_block(v, idx);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    pv[blockIdx.x] = v;
    pi[blockIdx.x] = idx;
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  v = -INFINITY;
  idx = -1;
  for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    const float bv = __ldcg(pv + b);
    const int bi = __ldcg(pi + b);
    if (bi >= 0 && am_better(bv, bi, v, idx)) {
      v = bv;
      idx = bi;
    }
  }
  __syncthreads();
  am_block(v, idx);
  if (threadIdx.x == 0) {
    const int id = idx < 0 ? 0 : idx;
    *out = id;
    *counter = 0;
    chain_store(id, io, next_pos, host);
  }
}

}  // namespace lmf::cuda::dev

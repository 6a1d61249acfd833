// Attention of a batch step over the paged KV cache (paged.h), on CUDA cores, in two passes.
//
// Pass 1: block = (split s, KV head, row t), 4 warps. The split covers positions
// [s * kPagedSlice, (s + 1) * kPagedSlice) clipped to the row's length L = row_pos[t] + 1;
// warp w takes positions s * kPagedSlice + w, + 4, ... in order. Per position the warp reads the
// key's slot through the row's block table, its lanes hold HD / 32 dims of the key, the value and
// each of the G query heads of this KV head (pre-scaled by 1/sqrt(HD)), a score is a lane-local
// dot then a butterfly sum, and each head keeps an online softmax (running max m, sum l, output
// accumulator rescaled by exp(m_old - m_new)). The four warps' states merge in shared memory into
// the split's partial (m, l, unnormalized o). A split past L writes l = 0.
// Pass 2: block = (query head, row), HD threads: out = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M)
// over the row's splits (M = max m_s of the splits with l_s > 0).
// The split count of a row depends only on its own length, so a row's result is the same alone
// or batched. Arithmetic as the other attention kernels: fp32, __expf.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/paged.h"
#include "util/status.h"

namespace lmf::cuda {
namespace {

constexpr int kWarps = 4, kGMax = 8;

__device__ __forceinline__ int splits_of(int L) { return (L + kPagedSlice - 1) / kPagedSlice; }

template <int HD>
__global__ void __launch_bounds__(kWarps * 32) paged_attn_kernel(const PagedAttnArgs a, int n_splits, float scale) {
  constexpr int E = HD / 32;  // dims per lane
  const int s = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = a.n_head / a.n_kv_head;
  const int L = a.row_pos[t] + 1;
  const int j0 = s * kPagedSlice, j1 = min(L, j0 + kPagedSlice);
  float* part = a.partial + (size_t(t) * a.n_head + size_t(kvh) * G) * n_splits * (HD + 2);
  if (j0 >= j1) {  // past the row's length: nothing here (pass 2 skips l = 0)
    for (int i = threadIdx.x; i < G; i += blockDim.x) {
      float* p = part + (size_t(i) * n_splits + s) * (HD + 2);
      p[HD] = -INFINITY;
      p[HD + 1] = 0.f;
    }
    return;
  }
  const int* table = a.tables + a.tab_off[a.row_seq[t]];
  const int mask = (1 << a.block_shift) - 1;
  float q[kGMax][E], acc[kGMax][E], m[kGMax], l[kGMax];
#pragma unroll
  for (int g = 0; g < kGMax; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      acc[g][e] = 0.f;
      q[g][e] = g < G ? a.q[(size_t(t) * a.n_head + size_t(kvh) * G + g) * HD + lane * E + e] * scale : 0.f;
    }
  }
  const __half* kbase = reinterpret_cast<const __half*>(a.k_pool) + size_t(kvh) * a.n_slots * HD + lane * E;
  const __half* vbase = reinterpret_cast<const __half*>(a.v_pool) + size_t(kvh) * a.n_slots * HD + lane * E;
  for (int j = j0 + warp; j < j1; j += kWarps) {
    const size_t slot = (size_t(table[j >> a.block_shift]) << a.block_shift) | size_t(j & mask);
    float k[E], v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      k[e] = __half2float(kbase[slot * HD + e]);
      v[e] = __half2float(vbase[slot * HD + e]);
    }
#pragma unroll
    for (int g = 0; g < kGMax; ++g) {
      if (g >= G) break;
      float sc = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) sc = fmaf(q[g][e], k[e], sc);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, o);
      const float mn = fmaxf(m[g], sc);
      const float c = __expf(m[g] - mn), p = __expf(sc - mn);
      l[g] = fmaf(l[g], c, p);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = fmaf(acc[g][e], c, p * v[e]);
      m[g] = mn;
    }
  }
  // The four warps' states -> the split's partial.
  __shared__ float sm_ml[kWarps][kGMax][2];
  __shared__ float sm_o[kWarps][kGMax][HD];
#pragma unroll
  for (int g = 0; g < kGMax; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      sm_ml[warp][g][0] = m[g];
      sm_ml[warp][g][1] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sm_o[warp][g][lane * E + e] = acc[g][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w)
      if (sm_ml[w][g][1] > 0.f) M = fmaxf(M, sm_ml[w][g][0]);
    float o = 0.f, den = 0.f;
    for (int w = 0; w < kWarps; ++w)
      if (sm_ml[w][g][1] > 0.f) {
        const float c = __expf(sm_ml[w][g][0] - M);
        o = fmaf(sm_o[w][g][d], c, o);
        den = fmaf(sm_ml[w][g][1], c, den);
      }
    float* p = part + (size_t(g) * n_splits + s) * (HD + 2);
    p[d] = o;
    if (d == 0) {
      p[HD] = M;
      p[HD + 1] = den;
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(HD) paged_merge_kernel(const PagedAttnArgs a, int n_splits) {
  const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  const int used = splits_of(a.row_pos[t] + 1);
  const float* part = a.partial + (size_t(t) * a.n_head + h) * n_splits * (HD + 2);
  float M = -INFINITY;
  for (int s = 0; s < used; ++s)
    if (part[size_t(s) * (HD + 2) + HD + 1] > 0.f) M = fmaxf(M, part[size_t(s) * (HD + 2) + HD]);
  float num = 0.f, den = 0.f;
  for (int s = 0; s < used; ++s) {
    const float* p = part + size_t(s) * (HD + 2);
    if (p[HD + 1] > 0.f) {
      const float w = __expf(p[HD] - M);
      num = fmaf(p[d], w, num);
      den = fmaf(p[HD + 1], w, den);
    }
  }
  a.out[(size_t(t) * a.n_head + h) * HD + d] = num / den;
}

__global__ void gather_rows_kernel(const float* x, int64_t cols, const int* rows, float* y) {
  const float* src = x + size_t(rows[blockIdx.y]) * cols;
  float* dst = y + size_t(blockIdx.y) * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < cols; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

int host_splits(int max_len) { return std::max(1, (max_len + kPagedSlice - 1) / kPagedSlice); }

}  // namespace

size_t paged_attn_scratch_floats(int T, int n_head, int head_dim, int max_len) {
  return size_t(T) * n_head * host_splits(max_len) * (head_dim + 2);
}

void attention_paged(const PagedAttnArgs& a, cudaStream_t s) {
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128)
    LMF_FAIL("cuda paged attention: head_dim must be 32, 64 or 128, got ", a.head_dim);
  if (a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0 || a.n_head / a.n_kv_head > kGMax)
    LMF_FAIL("cuda paged attention: n_head ", a.n_head, " must be a multiple (<= ", kGMax, "x) of n_kv_head ",
             a.n_kv_head);
  if (!a.q || !a.out || !a.k_pool || !a.v_pool || !a.row_pos || !a.row_seq || !a.tab_off || !a.tables || !a.partial ||
      a.T < 1 || a.max_len < 1 || a.n_slots < 1)
    LMF_FAIL("cuda paged attention: missing pointer or bad shape");
  const int n_splits = host_splits(a.max_len);
  const float scale = 1.0f / std::sqrt(float(a.head_dim));
  const dim3 g1(unsigned(n_splits), unsigned(a.n_kv_head), unsigned(a.T)), g2(unsigned(a.n_head), unsigned(a.T));
  switch (a.head_dim) {
    case 32:
      paged_attn_kernel<32><<<g1, kWarps * 32, 0, s>>>(a, n_splits, scale);
      paged_merge_kernel<32><<<g2, 32, 0, s>>>(a, n_splits);
      break;
    case 64:
      paged_attn_kernel<64><<<g1, kWarps * 32, 0, s>>>(a, n_splits, scale);
      paged_merge_kernel<64><<<g2, 64, 0, s>>>(a, n_splits);
      break;
    default:
      paged_attn_kernel<128><<<g1, kWarps * 32, 0, s>>>(a, n_splits, scale);
      paged_merge_kernel<128><<<g2, 128, 0, s>>>(a, n_splits);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, int64_t cols, const int* rows, int n, float* y, cudaStream_t s) {
  if (n < 1 || cols < 1) LMF_FAIL("cuda gather_rows: bad shape ", n, " x ", cols);
  const unsigned bx = unsigned(std::min<int64_t>(64, (cols + 255) / 256));
  gather_rows_kernel<<<dim3(bx, unsigned(n)), 256, 0, s>>>(x, cols, rows, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace lmf::cuda

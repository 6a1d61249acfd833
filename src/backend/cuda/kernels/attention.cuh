// Decode attention (one query token) over the head-major fp16 KV cache, flash-decoding style.
//
// Pass 1, grid (n_kv_head, n_splits): a block owns one KV head and one contiguous slice of the
// positions [0, L), L = *pos + 1 read on the device, slice = ceil(L / n_splits). All G query
// heads of the KV head are handled by the block, so each K/V row is loaded once for G heads
// (GQA). A timestep is handled by LPT = HD/8 lanes, each holding 8 dims (one 16-byte load of K
// and of V); a warp covers 32/LPT timesteps per step. Each lane group keeps an online softmax
// (m, l, acc); the block merges its groups in shared memory and writes, per query head and
// split, the normalized partial output o_s [HD] and (m_s, l_s).
// Pass 2, grid n_head: o = sum_s o_s l_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max m_s.
// Short contexts. n_splits is planned for n_ctx, but the slice length is chosen on the device from
// L: at least kMinSliceSteps warp steps' worth of positions (attn_slice), so at L = 20 one or two
// splits per KV head do the work; the other blocks exit at once and the merge reads only the
// ceil(L / slice) used splits (one split: a plain copy).
#pragma once
#include <cuda_fp16.h>

#include "backend/cuda/kernels/act_quant.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/pdl_launch.cuh"

namespace lmf::cuda::dev {

constexpr int kAttnWarps = 4;
constexpr int kMinSliceSteps = 2;  // a slice spans >= this many block steps (SLOTS positions each)
// Warp steps whose K/V loads are issued together: 8 (measured best at depth 4096 and at tg128,
// docs/PERF.md session 6), 4 for GQA groups of 8 (registers: q and acc already take 128).
template <int GMAX>
constexpr int kStepsInFlight = GMAX >= 8 ? 4 : 8;

// How the positions [0, L) are cut into splits (attn_slice; attn_slice_rule on the host): one
// split holding all of them while L <= single_max (the merge is then a copy), else slices of
// max(ceil(L / n_splits), min_slice) positions.
struct AttnSliceRule {
  int min_slice, single_max;
};
// Positions per split for length L (same formula in both kernels and the merge).
__device__ __forceinline__ int attn_slice(int L, int n_splits, const AttnSliceRule& r) {
  return L <= r.single_max ? L : max((L + n_splits - 1) / n_splits, r.min_slice);
}
AttnSliceRule attn_slice_rule(int head_dim, bool single);  // kernels_attention.cu (host)
// Splits holding positions for length L with slices of `chunk` (attn_slice): the merge reads these.
__device__ __forceinline__ int attn_used_splits(int L, int n_splits, int chunk) {
  return min(n_splits, (L + chunk - 1) / chunk);
}

struct AttnParams {
  const float* q;
  const __half* k;
  const __half* v;
  int n_head, n_kv, n_ctx, n_splits;
  AttnSliceRule slice;  // how the positions are cut into splits (attn_slice)
  const int* pos;
  float* out;
  float* part_o;   // [n_head][n_splits][HD]
  float* part_ml;  // [n_head][n_splits][2]
  float scale;
  unsigned long long* tl;  // launch timeline: split slot, merge slot (kTlWords apart) or null
  bool early;  // trigger the next kernel before the PDL wait (pdl_wait_trigger)
  // Or null: the merge kernel also writes out quantized for the o_proj GEMV's Int8 prologue
  // (act_quant.cuh layout, n_head * HD / 32 blocks; the merge kernel or a direct split).
  uint8_t* xq;
  // One split per KV head (grid y = 1) over the whole length, which writes out (and xq) itself:
  // no partials, no merge kernel (AttnArgs::direct).
  bool direct_only;
  // Query heads per block (AttnArgs::heads_per_block; G when not split): block x takes heads
  // x * hpb .. x * hpb + hpb - 1, of KV head x * hpb / G. Only the staged direct launch splits
  // (hpb < G); every other launch has hpb = G, one block per KV head.
  int hpb;
  // o_proj in the direct launch (attention_staged.cuh, OPROJ; AttnArgs::wo): block (h, r)
  // multiplies head h's output by the Q4_0 columns h * HD .. of o_proj rows r * o_rows ..
  // (r + 1) * o_rows - 1 (tiled layout: wo_q rows of wo_nblk 16-byte blocks, wo_s their fp16
  // scales) and adds the products to o_acc[r * o_rows ..] with atomics; after its PDL wait it
  // zeroes o_zero[0, o_zero_n) (the previous layer's accumulator, read by then).
  const uint8_t* wo_q;
  const uint8_t* wo_s;
  int wo_nblk, o_rows;
  float* o_acc;
  float* o_zero;
  int o_zero_n;
};

// A split that is the only one writes output h's element d itself (and its int8 code when p.xq
// is set, as the merge kernel would). Called by whole warps holding 32 consecutive d of one head
// (d & 31 is the lane): the quantization is a warp's.
template <int HD>
__device__ __forceinline__ void attn_direct_store(const AttnParams& p, int h, int d, float o) {
  p.out[size_t(h) * HD + d] = o;
  if (p.xq) quant_warp_store(o, reinterpret_cast<float4*>(p.xq), p.n_head * (HD / 32), h * (HD / 32) + d / 32, d & 31);
}

// This block's slice of the positions [0, L), L = *pos + 1: [start, end) (empty when start >= L),
// and whether the block writes the output itself (a direct launch).
// The same for both forms of pass 1.
struct AttnSlice {
  int L, start, end;
  bool direct;
};
__device__ __forceinline__ AttnSlice attn_block_slice(const AttnParams& p, int split) {
  AttnSlice s;
  s.L = *p.pos + 1;
  if (p.direct_only) {
    s.start = 0;
    s.end = s.L;
    s.direct = true;
    return s;
  }
  const int chunk = attn_slice(s.L, p.n_splits, p.slice);
  s.start = split * chunk;
  s.end = min(s.L, s.start + chunk);
  s.direct = false;
  return s;
}

template <int HD, int GMAX>
__global__ void __launch_bounds__(kAttnWarps * 32, 1) attn_split_kernel(const __grid_constant__ AttnParams p) {
  constexpr int LPT = HD / 8;     // lanes per timestep
  constexpr int TPW = 32 / LPT;   // timesteps per warp step
  constexpr int SLOTS = kAttnWarps * TPW;
  static_assert(HD % 32 == 0 && LPT <= 32, "head_dim 32, 64 or 128");
  __shared__ float sm_m[SLOTS][GMAX], sm_l[SLOTS][GMAX], sm_w[SLOTS][GMAX], sm_M[GMAX];
  __shared__ float sm_acc[SLOTS][GMAX][HD];

  tl_start(p.tl);
  const int kvh = blockIdx.x, split = blockIdx.y;
  const int G = p.n_head / p.n_kv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % LPT, tg = lane / LPT, slot = warp * TPW + tg;
  // Before the PDL wait: pos (copied from the host before the step began) and every cache row
  // before it (written by earlier steps) are final, so the slice and the first batch of K/V loads
  // need not wait for the previous kernel. q and the row at pos (that kernel's output) are read
  // after the wait.
  const AttnSlice bs = attn_block_slice(p, split);
  const int L = bs.L, start = bs.start, end = bs.end;
  const bool direct = bs.direct;  // the only split (a direct launch): write the output
  if (start >= L) {  // unused split: the merge does not read it
    tl_end(p.tl);
    return;
  }
  const int pos = L - 1;
  const __half* K = p.k + size_t(kvh) * p.n_ctx * HD + sub * 8;
  const __half* V = p.v + size_t(kvh) * p.n_ctx * HD + sub * 8;

  // The loads of NB warp steps are issued before any is used (one DRAM round trip per batch
  // instead of per step: a long context is latency-bound otherwise); the steps' math then runs in
  // the one-step-at-a-time order, so the result does not depend on the batching.
  constexpr int NB = kStepsInFlight<GMAX>;
  uint4 kb[NB], vb[NB];
  auto load_pos_row = [&](int j) {
    kb[j] = __ldg(reinterpret_cast<const uint4*>(K + size_t(pos) * HD));
    vb[j] = __ldg(reinterpret_cast<const uint4*>(V + size_t(pos) * HD));
  };
  auto load_batch = [&](int t00, bool with_pos) {  // with_pos false: the row at pos is left zero
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int t = t00 + j * SLOTS + tg;
      kb[j] = vb[j] = make_uint4(0, 0, 0, 0);
      if (t < end) {
        if (t != pos) {
          kb[j] = __ldg(reinterpret_cast<const uint4*>(K + size_t(t) * HD));
          vb[j] = __ldg(reinterpret_cast<const uint4*>(V + size_t(t) * HD));
        } else if (with_pos) {
          load_pos_row(j);
        }
      }
    }
  };
  const int t_first = start + warp * TPW;
  load_batch(t_first, false);

  pdl_wait_trigger(p.early);  // q and the cache row at pos come from the previous kernel
  tl_waited_phase(p.tl);
#pragma unroll
  for (int j = 0; j < NB; ++j) {  // the first batch's row at pos, now written
    const int t = t_first + j * SLOTS + tg;
    if (t == pos && t < end) load_pos_row(j);
  }

  float q[GMAX][8];  // this lane's 8 dims of each query head, pre-scaled by 1/sqrt(HD)
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    float4 qa = make_float4(0.f, 0.f, 0.f, 0.f), qb = qa;
    if (g < G) {
      const float* src = p.q + size_t(kvh * G + g) * HD + sub * 8;
      qa = reinterpret_cast<const float4*>(src)[0];  // two 16-byte loads (32-byte aligned)
      qb = reinterpret_cast<const float4*>(src)[1];
    }
    const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] = qv[i] * p.scale;
  }
  float m[GMAX], l[GMAX], acc[GMAX][8];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
  }

  for (int t00 = t_first; t00 < end; t00 += NB * SLOTS) {  // warp-uniform
    if (t00 != t_first) load_batch(t00, true);
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      const int t0 = t00 + j * SLOTS;
      if (t0 >= end) break;  // warp-uniform: this step has no position for any lane group
      const int t = t0 + tg;
      const bool valid = t < end;
      float kf[8], vf[8];
      {
        const __half2* kh = reinterpret_cast<const __half2*>(&kb[j]);
        const __half2* vh = reinterpret_cast<const __half2*>(&vb[j]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 a = __half22float2(kh[i]), b = __half22float2(vh[i]);
          kf[2 * i] = a.x;
          kf[2 * i + 1] = a.y;
          vf[2 * i] = b.x;
          vf[2 * i + 1] = b.y;
        }
      }
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g >= G) break;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s = fmaf(q[g][i], kf[i], s);
#pragma unroll
        for (int o = LPT / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (valid) {
          const float mn = fmaxf(m[g], s);
          const float corr = __expf(m[g] - mn);  // m = -inf -> 0
          const float pe = __expf(s - mn);
          l[g] = l[g] * corr + pe;
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pe, vf[i], acc[g][i] * corr);
          m[g] = mn;
        }
      }
    }
  }
  tl_mark(p.tl, 0);  // this block's warp 0 through its positions
#pragma unroll
  for (int g = 0; g < GMAX; ++g) {
    if (g >= G) break;
    if (sub == 0) {
      sm_m[slot][g] = m[g];
      sm_l[slot][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm_acc[slot][g][sub * 8 + i] = acc[g][i];
  }
  __syncthreads();
  tl_mark(p.tl, 1);  // partials in shared memory
  // Each slot's weight e^(m_s - M) per head, once per block (one thread per slot and head; 0 for
  // an empty slot), then every (head, dim) thread sums in slot order without branches: the
  // per-slot branch and exponential in every thread made this a ~1-3 µs serial chain (timeline,
  // docs/PERF.md session 8). Same expressions and order: an empty slot adds fma(0, 0, den) and
  // fma(acc = 0, 0, num), which leave the sums unchanged.
  for (int i = threadIdx.x; i < SLOTS * G; i += blockDim.x) {
    const int s = i / G, g = i % G;
    float M = -INFINITY;
#pragma unroll
    for (int r = 0; r < SLOTS; ++r)
      if (sm_l[r][g] > 0.f) M = fmaxf(M, sm_m[r][g]);
    sm_w[s][g] = sm_l[s][g] > 0.f ? __expf(sm_m[s][g] - M) : 0.f;
    if (s == 0) sm_M[g] = M;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * HD; idx += blockDim.x) {
    const int g = idx / HD, d = idx % HD;
    float den = 0.f, num = 0.f;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
      const float w = sm_w[s][g];
      den = fmaf(sm_l[s][g], w, den);
      num = fmaf(sm_acc[s][g][d], w, num);
    }
    const int h = kvh * G + g;
    const float o = den > 0.f ? num / den : 0.f;
    if (direct) {  // the only split: its normalized result is the output (the merge's copy)
      attn_direct_store<HD>(p, h, d, o);
      continue;
    }
    const size_t ps = size_t(h) * p.n_splits + split;
    p.part_o[ps * HD + d] = o;
    if (d == 0) {
      p.part_ml[ps * 2] = sm_M[g];
      p.part_ml[ps * 2 + 1] = den;
    }
  }
  tl_end(p.tl);
}

// Pass 2. One block per query head, thread d owns dimension d. Every split's (m_s, l_s) is loaded
// once per block (one split per thread) into shared memory and its weight w_s = l_s e^(m_s - M)
// computed once; each thread issues its part_o loads kMergeBatch at a time before using any (the
// first batch before the weights are known): 64, so the ~2 splits per SM of attn_plan_splits over
// 8 KV heads (33 on an H200) are one L2 round trip (16, measured in session 7, took three at depth
// 4096). M = max m_s is reduced by warp 0 (exact in any order) instead of by every thread
// serially. Sums run in split order (den += w_s, num = fma(o_s, w_s, num)); a split with l_s = 0
// gets w_s = 0, which adds exact zeros.
constexpr int kMergeBatch = 64;
// Up to this many used splits (lengths up to 16 minimum slices at least: 256 positions at
// head_dim 128), each thread loads every split's (m_s, l_s) and o_s itself, all at once, and
// computes M and the weights in registers: no shared memory, none of the three barriers. Same
// expressions and order. Measured (docs/PERF.md S13-5): the merge 2.41 -> 2.09 µs per 8B layer at
// 5 used splits, chain +0.4-1.3 % (8B) and +0.9-2.7 % (0.6B) at positions 16-127.
constexpr int kMergeFewSplits = 16;
inline size_t attn_merge_smem(int n_splits) { return size_t(2) * size_t(n_splits) * sizeof(float); }

// XQ: p.xq is set (its own instance, so the default one is unchanged).
template <int HD, bool XQ>
__global__ void __launch_bounds__(HD) attn_merge_kernel(const __grid_constant__ AttnParams p) {
  extern __shared__ float merge_sh[];  // [n_splits] m_s, then w_s; [n_splits] l_s
  unsigned long long* tl = p.tl ? p.tl + kTlWords : nullptr;
  tl_start(tl);
  pdl_trigger_early(p.early);
  const int h = blockIdx.x, d = threadIdx.x;
  const float* ml = p.part_ml + size_t(h) * p.n_splits * 2;
  const float* po = p.part_o + size_t(h) * p.n_splits * HD + d;
  // The position is the host's (written before the graph launch), so the splits used are known
  // before the wait, and the partials' loads follow it without another L2 round trip.
  const int L = *p.pos + 1;
  const int chunk = attn_slice(L, p.n_splits, p.slice);
  const int used = attn_used_splits(L, p.n_splits, chunk);
  pdl_wait_trigger_late(p.early);
  tl_waited_phase(tl);
  // out, and its int8 codes for the next GEMV when asked (a warp's 32 outputs are one block).
  auto write_out = [&](float o) {
    p.out[size_t(h) * HD + d] = o;
    if constexpr (XQ)
      quant_warp_store(o, reinterpret_cast<float4*>(p.xq), p.n_head * (HD / 32), h * (HD / 32) + d / 32, d & 31);
  };
  if (used == 1) {  // one split holds the whole (normalized) result
    write_out(__ldcg(po));
    tl_end(tl);
    return;
  }
  if (used <= kMergeFewSplits) {
    constexpr int K = kMergeFewSplits;
    float2 mls[K];  // (m_s, l_s)
    float os[K];
#pragma unroll
    for (int s = 0; s < K; ++s)
      if (s < used) {
        mls[s] = __ldcg(reinterpret_cast<const float2*>(ml) + s);
        os[s] = __ldcg(po + size_t(s) * HD);
      }
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < K; ++s)
      if (s < used && mls[s].y > 0.f) M = fmaxf(M, mls[s].x);
    float den = 0.f, num = 0.f;
#pragma unroll
    for (int s = 0; s < K; ++s)
      if (s < used) {
        const float w = mls[s].y > 0.f ? mls[s].y * __expf(mls[s].x - M) : 0.f;
        den += w;
        num = fmaf(os[s], w, num);
      }
    write_out(num / den);
    tl_end(tl);
    return;
  }
  float v[kMergeBatch];  // part_o of splits s0 .. s0 + kMergeBatch - 1 (0 past used)
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) v[j] = s0 + j < used ? __ldcg(po + size_t(s0 + j) * HD) : 0.f;
  };
  load_batch(0);
  float* sm = merge_sh;
  float* sl = merge_sh + p.n_splits;
  for (int s = d; s < used; s += HD) {
    sm[s] = __ldcg(ml + 2 * s);
    sl[s] = __ldcg(ml + 2 * s + 1);
  }
  __syncthreads();
  __shared__ float s_M;
  if (d < 32) {  // HD >= 32
    float m = -INFINITY;
    for (int s = d; s < used; s += 32)
      if (sl[s] > 0.f) m = fmaxf(m, sm[s]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (d == 0) s_M = m;
  }
  __syncthreads();  // warp 0 has read every m_s before it becomes w_s
  const float M = s_M;
  for (int s = d; s < used; s += HD) sm[s] = sl[s] > 0.f ? sl[s] * __expf(sm[s] - M) : 0.f;
  __syncthreads();
  tl_mark(tl, 0);  // split weights known
  float den = 0.f, num = 0.f;
  for (int s = 0; s < used; ++s) den += sm[s];
  for (int s0 = 0;;) {
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (s0 + j < used) num = fmaf(v[j], sm[s0 + j], num);
    s0 += kMergeBatch;
    if (s0 >= used) break;
    load_batch(s0);
  }
  write_out(num / den);
  tl_end(tl);
}

}  // namespace lmf::cuda::dev

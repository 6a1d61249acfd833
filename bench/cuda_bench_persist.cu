// Does a persistent decode kernel keep the weight stream going across the dependent phases of a
// layer? (No gtest: runs on the bare GPU machine; docs/PERF.md, session 20.)
//
// The engine's decode step is ~6 dependent launches per layer, and each GEMV launch pays a fixed
// ~1.5-2 µs over its bytes (session 9: `time = ~1.4-1.9 µs + bytes / copy bandwidth` for every
// load method inside one launch): its blocks become resident only when the previous kernel's
// leave, and its weight stream starts from empty. Session 15 measured that a grid barrier is no
// cheaper than a PDL boundary; what a persistent kernel can add is that the weights of the next
// phase keep streaming while the current one finishes and hands over, because they depend on
// nothing.
//
// The prototype: one block per SM, one producer warp and W consumer warps. The producer walks
// the SM's share of every weight matrix of every layer in order and copies it, in chunks of CT
// tiles, into a ring of S shared-memory slots (cp.async.bulk completing on a per-slot mbarrier,
// L2 evict-first); it waits only for a free slot, never for data. The consumers run the layer's
// phases: each phase first waits until every SM has finished the phase before it (a counter in
// global memory per phase, red.release / ld.acquire), stages its input vector (RMSNorm where the
// layer has one, int8 per 32-block as the engine's integer-dot GEMVs do), then takes the phase's
// chunks from the ring (chunk g of the token belongs to consumer warp g % W), and at the end
// applies the epilogue and counts the SM in.
//
// Per layer (Qwen3 shapes, Q4_0): qkv = W_qkv * norm(hA); a weightless hop standing for the
// attention (attn = q part of qkv, sliced over the SMs: one more grid-wide dependency), or with
// `--attn` the attention itself at position `--pos` (query head h on SM h: q/k RMSNorm, RoPE, the
// KV-cache append, softmax over the prefilled fp16 caches); hB = hA + W_o * attn; act =
// silu(gate) * up of W_gu * norm(hB) (rows interleaved gate/up); hA = hB + W_down * act.
// `--quant-act` / `--quant-all`: the producers quantize their outputs once for the next phase.
//
// Weight layout (any SM count): the engine's per-SM tiles (kernels.h, repack_tiles_*): a matrix
// of R rows x K columns is row groups of 32 rows, each K/128 tiles of 32 rows x 4 blocks of 32
// columns (4 x 32 x 16 bytes of nibbles, block-major, then 4 x 32 fp16 scales: 2,304 bytes), row
// group after row group. SM s owns row groups [s*n/nsm, (s+1)*n/nsm), a contiguous range. Lane l
// of a consumer warp takes row l of each tile (no shuffles; x's blocks are broadcast reads); a warp
// adds its tiles of one row group in registers, and the W per-warp sums of a row meet in shared
// memory, added in warp order at the end of the phase (deterministic for a given W). Earlier forms,
// measured (docs/PERF.md S20-1): 8-row tiles with a 16-lane shuffle reduction per tile, and
// single tiles dealt to the warps (ncu: half of the consumers' instructions were that
// bookkeeping); both left the consumers, not the copies, as the bound.
//
// Diagnostics: `--marks` (per-phase times of the middle layer: dependency wait, staging, first
// chunk, tiles, epilogue), `--nodep` (no phase waits: the streaming bound), `--noweights` (the
// latency chain alone), `--nomath` (the copies alone), `--nocopy` (the consumers alone).
//
// `--check`: one layer whose weights are random GGUF Q4_0 rows put in tiles by the engine's
// repack, each phase compared with a host computation from those GGUF rows and the device's own
// input to that phase (rel-L2): the kernel and the repack checked together. Timing: tokens of all
// layers, back-to-back launches, µs per layer and % of the copy bandwidth measured in the same run.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/act_quant.cuh"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "model/presets.h"
#include "bulk_copy.cuh"
#include "cuda_bench_util.cuh"
#include "grid_sync.cuh"

using namespace lmf::cuda::dev;

namespace {

// The tile layout is the engine's (kernels.h, repack_tiles_*): 32 rows x 4 blocks of 32 columns,
// nibbles block-major then the fp16 scales; a consumer lane per row.
using lmf::cuda::kTileBytes;
using lmf::cuda::kTileRows;
constexpr int kTileBlk = lmf::cuda::kTileBlocks, kTileQ = lmf::cuda::kTileQBytes;
constexpr int kPhases = 5;  // qkv, hop (or the attention), o, gate/up, down
constexpr int kMaxK = 12288;
constexpr int kMaxPart = 4096;  // floats of per-warp row partials per SM and phase

struct Mat {
  size_t off;  // bytes into the layer
  int R, K;
};

struct Params {
  const uint8_t* w;
  size_t layer_bytes;
  Mat m[kPhases];  // m[1] unused (the hop)
  int L, H, nq_hd, F;
  int nsm;
  float eps;
  const float* g_attn;  // [L][H]
  const float* g_ffn;   // [L][H]
  float *hA, *hB, *qkv, *attn, *act;
  uint8_t* actq;  // act quantized once by gate/up (int8 staging layout), or null: down stages act itself
  // Every input quantized once by its producer (or null): attnq by the hop; hq = h * gamma of the
  // next RMSNorm per 32-block and ssq = each block's sum of h^2, by the residual epilogues (the
  // norm's scale rsqrt(mean + eps) is common to a vector, so it multiplies dx at the staging: the
  // same codes as quantizing the normalized vector up to rounding ties).
  uint8_t *attnq, *hq;
  float* ssq;
  // The attention in the hop's place (k_cache non-null): query head h on SM h at position pos,
  // over fp16 caches [L][n_kv][n_ctx][128] prefilled below pos; Qwen3's q/k RMSNorm over the head
  // (q_norm, k_norm: [L][128]) and NeoX RoPE.
  __half *k_cache, *v_cache;
  const float *q_norm, *k_norm;
  int n_head, n_kv, pos, n_ctx;
  float theta;
  // Chunks the producer keeps in flight (issued, not landed) at most; 0 = the ring's free slots
  // only. The question it answers: do the consumers' own loads and stores queue behind the SM's
  // outstanding copies? (S20-4: the staging and the epilogues took 1-3 µs with up to 147 KB
  // outstanding per SM, 0.1-0.5 µs with no weights.)
  int inflight;
  unsigned* cnt;  // [L * kPhases]
  unsigned epoch;
  int nodep;    // timing only: no phase waits for the one before (wrong results; the streaming bound)
  int noweights;  // timing only: no weights copied or read (the phases' latency chain alone)
  int nomath;     // timing only: the consumers take each chunk and release it unread (the stream alone)
  int nocopy;     // timing only: the producer releases each slot without copying (the consumers alone)
  unsigned long long* stamps;  // [nsm][kPhases][kMarks] of layer L/2, or null
};
// Per-phase marks of thread 0 (%globaltimer): begin, dependency met, x staged, first chunk
// ready, tiles done, epilogue done (all warps), thread 0's own epilogue done.
constexpr int kMarks = 7;

__device__ __forceinline__ void cbar(int W) {  // the consumer warps only
  asm volatile("bar.sync 1, %0;" ::"r"(W * 32) : "memory");
}

struct Share {
  int rg0, rg1, kt;  // row groups [rg0, rg1) of this SM, tiles per row group
  __device__ int tiles() const { return (rg1 - rg0) * kt; }
};
// pairs: shares of whole row-group pairs (gate/up: 64 rows = one 32-block of act, which the
// SM that computes it quantizes for down).
__device__ __forceinline__ Share share_of(const Mat& m, int s, int nsm, bool pairs = false) {
  const int u = pairs ? 2 : 1, n = m.R / kTileRows / u;
  return {u * int(long(s) * n / nsm), u * int(long(s + 1) * n / nsm), m.K / (kTileBlk * 32)};
}

// x (K floats, global, written by other SMs) -> int8 codes in xs (planes lo, hi, then {dx, sum}).
// Thread t takes float4 t + k*NT, k < V, all V loads issued together (one L2 round trip per
// phase; a loop with a load per trip paid one round trip per trip, ~1-2 µs each while the
// weights stream: the first run of this prototype). NORM: x * rsqrt(mean(x^2) + eps) * gamma
// first, gamma (a weight) loaded by the caller before the phase's dependency wait.
template <int V, bool NORM>
__device__ __forceinline__ void stage_x(const float* x, const float4 (&g)[V], int K, float eps, float4* xs, float* red,
                                        int W) {
  const int NT = W * 32, tid = int(threadIdx.x);
  const int n4 = K / 4, nblk = K / 32;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 v[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int i = k * NT + tid;
    v[k] = i < n4 ? __ldcg(x4 + i) : zero;
  }
  if constexpr (NORM) {
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < V; ++k) ss = fmaf(v[k].x, v[k].x, fmaf(v[k].y, v[k].y, fmaf(v[k].z, v[k].z, fmaf(v[k].w, v[k].w, ss))));
    ss = warp_sum(ss);
    if ((tid & 31) == 0) red[tid >> 5] = ss;
    cbar(W);
    float t = 0.f;
    for (int w = 0; w < W; ++w) t += red[w];
    const float rn = rsqrtf(t / float(K) + eps);
#pragma unroll
    for (int k = 0; k < V; ++k)
      v[k] = make_float4(v[k].x * rn * g[k].x, v[k].y * rn * g[k].y, v[k].z * rn * g[k].z, v[k].w * rn * g[k].w);
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    if (k * NT >= n4) break;  // uniform: the shuffles below stay full-warp
    const int i = k * NT + tid;
    const QuantWord q = quant_x4(v[k]);
    if (i < n4) store_quant_word(xs, nblk, i >> 3, i & 7, q);
  }
}
// float4s per thread for W consumer warps: the Norm inputs are the hidden size (<= 4096), the
// others up to kMaxK.
constexpr int kMaxH = 4096;
template <int W>
constexpr int kVNorm = kMaxH / 4 / (W * 32);
template <int W>
constexpr int kVPlain = kMaxK / 4 / (W * 32);

// Staging from a vector its producer quantized (the int8 layout): the planes copied, loads
// batched. ssq (or null): the blocks' sums of squares; dx is then multiplied by the RMSNorm scale,
// which every warp computes itself from them (same order in each: the same value).
template <int W>
__device__ __forceinline__ void stage_copy(const uint8_t* q, int K, const float* ssq, float eps, float4* xs) {
  constexpr int NT = W * 32;
  constexpr int kV = (2 * kMaxK / 32 + NT - 1) / NT, kV2 = (kMaxK / 32 + NT - 1) / NT, kS = kMaxH / 1024;
  const int tid = int(threadIdx.x), lane = tid & 31, nb = K / 32;
  const uint4* src = reinterpret_cast<const uint4*>(q);
  const uint2* src2 = reinterpret_cast<const uint2*>(src + 2 * nb);
  uint4 v[kV];
  uint2 v2[kV2];
  float sq[kS];
#pragma unroll
  for (int k = 0; k < kV; ++k)
    if (k * NT + tid < 2 * nb) v[k] = __ldcg(src + k * NT + tid);
#pragma unroll
  for (int k = 0; k < kV2; ++k)
    if (k * NT + tid < nb) v2[k] = __ldcg(src2 + k * NT + tid);
  float rn = 1.f;
  if (ssq) {
#pragma unroll
    for (int k = 0; k < kS; ++k) sq[k] = lane + 32 * k < nb ? __ldcg(ssq + lane + 32 * k) : 0.f;
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < kS; ++k) t += sq[k];
    rn = rsqrtf(warp_sum(t) / float(K) + eps);
  }
  uint4* dst = reinterpret_cast<uint4*>(xs);
  uint2* dst2 = reinterpret_cast<uint2*>(dst + 2 * nb);
#pragma unroll
  for (int k = 0; k < kV; ++k)
    if (k * NT + tid < 2 * nb) dst[k * NT + tid] = v[k];
#pragma unroll
  for (int k = 0; k < kV2; ++k)
    if (k * NT + tid < nb) dst2[k * NT + tid] = make_uint2(__float_as_uint(__uint_as_float(v2[k].x) * rn), v2[k].y);
}

// The lane's four values of cache rows t0 + u W (u < 4) of one KV head (rows of 128 fp16); the row
// at pos is the step's own (own), rows past pos are not read.
__device__ __forceinline__ void cache_rows4(const __half* rows, int t0, int W, int pos, int lane, const float (&own)[4],
                                            float (&out)[4][4]) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int t = t0 + u * W;
#pragma unroll
    for (int j = 0; j < 4; ++j) out[u][j] = t < pos ? __half2float(rows[size_t(t) * 128 + lane + 32 * j]) : own[j];
  }
}

// The attention of query head h (Params: k_cache): every warp builds the head's q and its KV
// head's k, v at pos from the raw qkv (lane j-th value = element lane + 32 j of 128; RoPE pairs
// i, i + 64 sit in one lane), k and v rounded to fp16 as the cache holds them, the first head of
// the group stores them; scores for positions w, w + W, ... per warp into sc, the softmax in every
// warp (same order), each warp's share of sum p v into po, added in warp order.
template <int W>
__device__ void attn_head(const Params& p, int l, int h, float* sc, float* po) {
  constexpr int hd = 128;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int G = p.n_head / p.n_kv, kvh = h / G, pos = p.pos;
  const float* qr = p.qkv + size_t(h) * hd;
  const float* kr = p.qkv + size_t(p.n_head + kvh) * hd;
  const float* vr = p.qkv + size_t(p.n_head + p.n_kv + kvh) * hd;
  float q[4], k[4], v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q[j] = __ldcg(qr + lane + 32 * j);
    k[j] = __ldcg(kr + lane + 32 * j);
    v[j] = __ldcg(vr + lane + 32 * j);
  }
  float sq = 0.f, sk = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    sq = fmaf(q[j], q[j], sq);
    sk = fmaf(k[j], k[j], sk);
  }
  sq = warp_sum(sq);
  sk = warp_sum(sk);
  const float* qg = p.q_norm + size_t(l) * hd;
  const float* kg = p.k_norm + size_t(l) * hd;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q[j] = head_norm(q[j], sq, hd, p.eps, __ldg(qg + lane + 32 * j));
    k[j] = head_norm(k[j], sk, hd, p.eps, __ldg(kg + lane + 32 * j));
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float c, sn;
    rope_cs(pos, lane + 32 * j, hd, p.theta, &c, &sn);
    const float qa = q[j], qb = q[j + 2], ka = k[j], kb = k[j + 2];
    q[j] = rope_rotate(qa, qb, c, sn, true);
    q[j + 2] = rope_rotate(qb, qa, c, sn, false);
    k[j] = rope_rotate(ka, kb, c, sn, true);
    k[j + 2] = rope_rotate(kb, ka, c, sn, false);
  }
  const size_t row = ((size_t(l) * p.n_kv + kvh) * p.n_ctx) * hd;  // this KV head's cache rows
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __half kh = __float2half_rn(k[j]), vh = __float2half_rn(v[j]);
    k[j] = __half2float(kh);
    v[j] = __half2float(vh);
    if (h % G == 0 && warp == 0) {
      p.k_cache[row + size_t(pos) * hd + lane + 32 * j] = kh;
      p.v_cache[row + size_t(pos) * hd + lane + 32 * j] = vh;
    }
  }
  const float scale = rsqrtf(float(hd));
  for (int t0 = warp; t0 <= pos; t0 += 4 * W) {  // four positions per trip, loads together
    float kt[4][4];
    cache_rows4(p.k_cache + row, t0, W, pos, lane, k, kt);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float d = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) d = fmaf(q[j], kt[u][j], d);
      d = warp_sum(d);
      if (lane == 0 && t0 + u * W <= pos) sc[t0 + u * W] = d * scale;
    }
  }
  cbar(W);
  float m = -INFINITY;
  for (int t = lane; t <= pos; t += 32) m = fmaxf(m, sc[t]);
  m = warp_max(m);
  float o[4] = {0.f, 0.f, 0.f, 0.f};
  for (int t0 = warp; t0 <= pos; t0 += 4 * W) {
    float vt[4][4];
    cache_rows4(p.v_cache + row, t0, W, pos, lane, v, vt);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int t = t0 + u * W;
      if (t > pos) break;
      const float e = __expf(sc[t] - m);
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = fmaf(e, vt[u][j], o[j]);
    }
  }
  float den = 0.f;
  for (int t = lane; t <= pos; t += 32) den += __expf(sc[t] - m);
  den = warp_sum(den);
#pragma unroll
  for (int j = 0; j < 4; ++j) po[warp * hd + lane + 32 * j] = o[j];
  cbar(W);
  if (tid < hd) {  // warps 0-3: one 32-block of the head's output each
    float r = 0.f;
    for (int w = 0; w < W; ++w) r += po[w * hd + tid];
    r /= den;
    p.attn[size_t(h) * hd + tid] = r;
    if (p.attnq) quant_warp_store(r, reinterpret_cast<float4*>(p.attnq), p.nq_hd / 32, h * 4 + warp, lane);
  }
}

// W consumer warps (a power of two), chunks of CT tiles, S ring slots (a multiple of W): chunk g
// (counted over the whole token) sits in slot g % S and belongs to consumer warp g % W, which
// reads all its tiles (the per-chunk bookkeeping amortized over CT tiles; the first form dealt
// single tiles to the warps, and ncu put half of the consumers' instructions in that bookkeeping).
template <int W, int CT, int S>
__global__ void __launch_bounds__((W + 1) * 32, 1) persist_kernel(const __grid_constant__ Params p) {
  static_assert((W & (W - 1)) == 0 && S % W == 0, "slot g % S must belong to warp g % W");
  constexpr int CB = CT * kTileBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* ring = smem;
  float4* xs = reinterpret_cast<float4*>(smem + size_t(S) * CB);           // <= 15.4 KB
  float* part = reinterpret_cast<float*>(smem + size_t(S) * CB + kMaxK / 32 * 40);
  uint64_t* full = reinterpret_cast<uint64_t*>(part + kMaxPart);
  uint64_t* empty = full + S;
  __shared__ float red[32];
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int s = int(blockIdx.x), nsm = p.nsm;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      mbar_init(full + i, 1);
      mbar_init(empty + i, 1u);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == W) {  // producer
    if (lane == 0 && !p.noweights) {
      const uint64_t pol = evict_first_policy();
      unsigned gc = 0;
      for (int l = 0; l < p.L; ++l)
        for (int ph = 0; ph < kPhases; ++ph) {
          if (ph == 1) continue;
          const Mat& m = p.m[ph];
          const Share sh = share_of(m, s, nsm, ph == 3 && p.actq);
          const uint8_t* src = p.w + size_t(l) * p.layer_bytes + m.off + size_t(sh.rg0) * sh.kt * kTileBytes;
          const int nt = sh.tiles();
          for (int t0 = 0; t0 < nt; t0 += CT, ++gc) {
            const int slot = int(gc % unsigned(S));
            if (gc >= unsigned(S)) mbar_wait_parity(empty + slot, ((gc / unsigned(S)) - 1) & 1);
            if (p.inflight > 0 && gc >= unsigned(p.inflight)) {  // chunk gc - inflight has landed
              const unsigned o = gc - unsigned(p.inflight);
              mbar_wait_parity(full + o % unsigned(S), (o / unsigned(S)) & 1);
            }
            const uint32_t bytes = uint32_t(min(CT, nt - t0)) * kTileBytes;
            if (p.nocopy) {
              mbar_arrive(full + slot);
              continue;
            }
            mbar_arrive_expect_tx(full + slot, bytes);
            bulk_load(ring + size_t(slot) * CB, src + size_t(t0) * kTileBytes, bytes, full + slot, pol);
          }
        }
    }
    return;
  }

  // consumers
  const int tid = int(threadIdx.x), NT = W * 32;
  const unsigned target = p.epoch * unsigned(nsm);
  unsigned gc = 0;
  for (int l = 0; l < p.L; ++l)
    for (int ph = 0; ph < kPhases; ++ph) {
      const int gph = l * kPhases + ph;
      unsigned long long* mk = p.stamps && l == p.L / 2 && tid == 0 ? p.stamps + (size_t(s) * kPhases + ph) * kMarks : nullptr;
      if (mk) mk[0] = global_ns();
      // Before the wait: what does not depend on the previous phase (gamma; the residual rows,
      // final since an earlier phase's wait).
      const Mat& m = p.m[ph];
      const Share sh = share_of(m, s, nsm, ph == 3 && p.actq);
      const int nt = ph == 1 ? 0 : sh.tiles();
      const bool norm = ph == 0 || ph == 3;
      float4 g[kVNorm<W>];
      if (norm && nt > 0) {
        const float4* g4 = reinterpret_cast<const float4*>((ph == 0 ? p.g_attn : p.g_ffn) + size_t(l) * p.H);
#pragma unroll
        for (int k = 0; k < kVNorm<W>; ++k) {
          const int i = k * NT + tid;
          g[k] = i < p.H / 4 ? __ldg(g4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
      float res = 0.f;
      const int nrows = (sh.rg1 - sh.rg0) * kTileRows;
      float gnext = 0.f;  // gamma of the RMSNorm that reads this residual phase's output
      if ((ph == 2 || ph == 4) && tid < nrows) {
        res = __ldcg((ph == 2 ? p.hA : p.hB) + sh.rg0 * kTileRows + tid);
        if (p.hq) gnext = ph == 2 ? p.g_ffn[size_t(l) * p.H + sh.rg0 * kTileRows + tid]
                                  : p.g_attn[size_t((l + 1) % p.L) * p.H + sh.rg0 * kTileRows + tid];
      }
      if (gph > 0 && !p.nodep) {
        if (tid == 0)
          while (ld_acquire(p.cnt + gph - 1) < target) {
          }
        cbar(W);
      }
      if (mk) mk[1] = global_ns();
      if (ph == 1 && p.k_cache) {
        if (s < p.n_head) attn_head<W>(p, l, s, part, part + 2048);
      } else if (ph == 1) {  // the hop: attn = q part of qkv, sliced over the SMs
        for (int i = s * NT + tid; i < p.nq_hd; i += nsm * NT) {  // warp-uniform: nq_hd % 32 == 0
          const float v = __ldcg(p.qkv + i);
          p.attn[i] = v;
          if (p.attnq) quant_warp_store(v, reinterpret_cast<float4*>(p.attnq), p.nq_hd / 32, i / 32, lane);
        }
      } else if (nt > 0) {
        {
          const float* xin = ph == 0 ? p.hA : ph == 2 ? p.attn : ph == 3 ? p.hB : p.act;
          if (norm && p.hq && (ph == 3 || l > 0)) {  // layer 0 stages hA itself (no producer in this launch)
            stage_copy<W>(p.hq, m.K, p.ssq, p.eps, xs);
          } else if (norm) {
            stage_x<kVNorm<W>, true>(xin, g, m.K, p.eps, xs, red, W);
          } else if (ph == 4 && p.actq) {
            stage_copy<W>(p.actq, m.K, nullptr, p.eps, xs);
          } else if (ph == 2 && p.attnq) {
            stage_copy<W>(p.attnq, m.K, nullptr, p.eps, xs);
          } else {
            float4 none[kVPlain<W>];
            stage_x<kVPlain<W>, false>(xin, none, m.K, p.eps, xs, red, W);
          }
          // Partials [row group][warp][row]: zero, as a warp may see no tile of a row group.
          const int nrg = sh.rg1 - sh.rg0;
          for (int i = tid; i < nrg * W * kTileRows; i += NT) part[i] = 0.f;
          cbar(W);
          if (mk) mk[2] = global_ns();
          const int nblk = m.K / 32;
          const uint4* xlo = reinterpret_cast<const uint4*>(xs);
          const uint4* xhi = xlo + nblk;
          const int2* xsc = reinterpret_cast<const int2*>(xlo + 2 * nblk);
          float acc = 0.f;
          int cur = -1;  // the row group acc belongs to
          bool first = true;
          for (int t0 = 0; t0 < nt && !p.noweights; t0 += CT, ++gc) {
            if (int(gc % W) != warp) continue;
            const int slot = int(gc % S);
            mbar_wait_parity(full + slot, (gc / S) & 1);
            if (mk && first) mk[3] = global_ns();
            first = false;
            const uint8_t* chunk = ring + size_t(slot) * CB;
            // A chunk lies inside one row group (CT divides K/128, checked on the host), so its
            // CT tiles are independent sums: no branch between them, their loads all in flight.
            const int rg = t0 / sh.kt, c0 = (t0 - rg * sh.kt) * kTileBlk;
            if (rg != cur) {
              if (cur >= 0) part[(cur * W + warp) * kTileRows + lane] = acc;
              acc = 0.f;
              cur = rg;
            }
            if (!p.nomath) {
              float a[CT];
#pragma unroll
              for (int i = 0; i < CT; ++i) {
                const uint8_t* tile = chunk + size_t(i) * kTileBytes;
                float ai = 0.f;
#pragma unroll
                for (int b = 0; b < kTileBlk; ++b) {
                  const int c = c0 + i * kTileBlk + b;
                  const uint4 xl = xlo[c], xh = xhi[c];
                  const int2 sc = xsc[c];
                  const uint4 q = reinterpret_cast<const uint4*>(tile)[b * kTileRows + lane];
                  const float d = __half2float(reinterpret_cast<const __half*>(tile + kTileQ)[b * kTileRows + lane]);
                  ai = fmaf(d * __int_as_float(sc.x), float(dot_q4_i8(q, xl, xh, -8 * sc.y)), ai);
                }
                a[i] = ai;
              }
#pragma unroll
              for (int i = 0; i < CT; ++i) acc += a[i];
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + slot);
          }
          if (cur >= 0) part[(cur * W + warp) * kTileRows + lane] = acc;
          cbar(W);
          if (mk) mk[4] = global_ns();
          // Rows of this SM: sum the row group's tiles in order, then the epilogue.
          if (ph == 3 && p.actq) {
            // One warp per 32-block of act (two row groups): lane e makes value e, the warp
            // quantizes the block into actq (act_quant.cuh's rule, as down's staging would).
            const int nb = nrows / 64, a0 = sh.rg0 * (kTileRows / 2);
            for (int bl = warp; bl < nb; bl += W) {
              const int r = bl * 64 + 2 * lane, rg = r / kTileRows, rr = r % kTileRows;
              float gt = 0.f, ut = 0.f;
              for (int w = 0; w < W; ++w) {
                gt += part[(rg * W + w) * kTileRows + rr];
                ut += part[(rg * W + w) * kTileRows + rr + 1];
              }
              const float v = silu(gt) * ut;
              p.act[a0 + bl * 32 + lane] = v;
              quant_warp_store(v, reinterpret_cast<float4*>(p.actq), p.F / 32, a0 / 32 + bl, lane);
            }
          } else if (ph == 3) {
            for (int pr = tid; pr < nrows / 2; pr += NT) {
              float gt = 0.f, ut = 0.f;
              const int r = 2 * pr, rg = r / kTileRows, rr = r % kTileRows;
              for (int w = 0; w < W; ++w) {
                gt += part[(rg * W + w) * kTileRows + rr];
                ut += part[(rg * W + w) * kTileRows + rr + 1];
              }
              p.act[sh.rg0 * (kTileRows / 2) + pr] = silu(gt) * ut;
            }
          } else {
            for (int r = tid; r < nrows; r += NT) {  // residual phases: nrows <= NT, res is row r's
              const int rg = r / kTileRows, rr = r % kTileRows;
              float v = 0.f;
              for (int w = 0; w < W; ++w) v += part[(rg * W + w) * kTileRows + rr];
              const int row = sh.rg0 * kTileRows + r;
              if (ph == 0) {
                p.qkv[row] = v;
              } else {
                const float h = res + v;
                (ph == 2 ? p.hB : p.hA)[row] = h;
                if (p.hq) {  // warp-uniform: nrows is a multiple of 32, one row group = one block
                  quant_warp_store(h * gnext, reinterpret_cast<float4*>(p.hq), p.H / 32, row / 32, lane);
                  const float ss = warp_sum(h * h);
                  if (lane == 0) p.ssq[row / 32] = ss;
                }
              }
            }
          }
        }
      }
      if (mk) mk[6] = global_ns();
      cbar(W);
      // Release after the block barrier: the other threads' stores are ordered before it
      // (cumulativity), so no separate fence (S15-1: fence + atomic 0.1-0.2 µs slower).
      if (mk) mk[5] = global_ns();
      if (tid == 0) red_release(p.cnt + gph, 1u);
    }
}

// Tiles' scales: small positive fp16 (0x2000..0x23FF, ~0.008-0.016); nibbles stay random.
__global__ void fix_scales(uint8_t* w, size_t ntiles) {
  for (size_t t = blockIdx.x * size_t(blockDim.x) + threadIdx.x; t < ntiles; t += size_t(gridDim.x) * blockDim.x) {
    uint16_t* d = reinterpret_cast<uint16_t*>(w + t * kTileBytes + kTileQ);
    for (int i = 0; i < kTileRows * kTileBlk; ++i) {
      uint32_t h = uint32_t(t * 131 + i) * 2654435761u;
      h ^= h >> 13;
      d[i] = uint16_t(0x2000u | (h & 0x3FFu));
    }
  }
}

// A model's shapes, from the presets `lmfuse random-model` uses (model/presets.h).
struct Shape {
  const char* name;  // "0.6b" for preset qwen3-0.6b
  int H, nq, nkv, hd, F, L;
  float theta, eps;
};
Shape shape_of(const char* name) {
  const lmf::Preset& m = lmf::find_preset(std::string("qwen3-") + name);
  return {name, int(m.n_embd), int(m.n_head), int(m.n_head_kv), int(m.head_dim), int(m.n_ff), int(m.n_layer),
          float(m.rope_theta), float(m.rms_eps)};
}
const char* const kShapes[] = {"0.6b", "4b", "8b"};

size_t mat_bytes(const Mat& m) { return size_t(m.R / kTileRows) * (m.K / (kTileBlk * 32)) * kTileBytes; }

// Host: y[r] = sum_c d * dx * (sum_e (q_e - 8) * xq_e) over GGUF Q4_0 rows (independent of the
// tile layout), with the device's quantization of x (the same float ops: amax, 127/amax, round to
// nearest even).
std::vector<float> host_quant_gemv(const std::vector<uint8_t>& rows, int R, int K, const std::vector<float>& x) {
  const int nblk = K / 32;
  std::vector<int8_t> q(K);
  std::vector<float> dx(nblk);
  for (int c = 0; c < nblk; ++c) {
    float am = 0.f;
    for (int e = 0; e < 32; ++e) am = std::fmax(am, std::fabs(x[c * 32 + e]));
    const float id = am > 0.f ? 127.f / am : 0.f;
    for (int e = 0; e < 32; ++e) q[c * 32 + e] = int8_t(std::nearbyint(x[c * 32 + e] * id));
    dx[c] = am / 127.f;
  }
  std::vector<float> y(R);
  for (int r = 0; r < R; ++r) {
    const auto* blk = reinterpret_cast<const lmf::BlockQ4_0*>(rows.data() + lmf::row_bytes(lmf::DType::Q4_0, K) * r);
    double acc = 0;
    for (int c = 0; c < nblk; ++c) {
      __half_raw hr;
      hr.x = blk[c].d;
      const float d = __half2float(__half(hr));
      long sum = 0;
      for (int b = 0; b < 16; ++b) {
        sum += long((blk[c].qs[b] & 15) - 8) * q[c * 32 + b];
        sum += long((blk[c].qs[b] >> 4) - 8) * q[c * 32 + 16 + b];
      }
      acc += double(d) * double(dx[c]) * double(sum);
    }
    y[r] = float(acc);
  }
  return y;
}
// Random GGUF Q4_0 rows (hashed bytes, small positive scales as fix_scales makes them).
std::vector<uint8_t> random_q4_0_rows(int R, int K, uint32_t seed) {
  std::vector<uint8_t> out(lmf::row_bytes(lmf::DType::Q4_0, K) * R);
  auto* blk = reinterpret_cast<lmf::BlockQ4_0*>(out.data());
  for (size_t b = 0; b < size_t(R) * (K / 32); ++b) {
    uint32_t h = uint32_t(b) * 2654435761u ^ seed;
    h ^= h >> 13;
    blk[b].d = uint16_t(0x2000u | (h & 0x3FFu));
    for (int i = 0; i < 16; ++i) {
      h = h * 1664525u + 1013904223u;
      blk[b].qs[i] = uint8_t(h >> 24);
    }
  }
  return out;
}
std::vector<float> host_norm(const std::vector<float>& x, const float* g, float eps) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const float rn = float(1.0 / std::sqrt(ss / x.size() + eps));
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * rn * g[i];
  return y;
}
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}
std::vector<float> d2h(const float* d, size_t n) {
  std::vector<float> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

struct Config {
  int W, CT, S;
};
constexpr Config kConfigs[] = {{8, 4, 16}, {16, 4, 16}, {8, 2, 32}, {16, 2, 32}};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));
// The kernel instance of kConfigs[I] (its shared memory set on first use; the size depends only on
// the configuration).
template <int I>
void launch_cfg(const Params& p, size_t smem, int nsm) {
  constexpr Config c = kConfigs[I];
  static const bool ready = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(persist_kernel<c.W, c.CT, c.S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    return true;
  }();
  (void)ready;
  persist_kernel<c.W, c.CT, c.S><<<nsm, (c.W + 1) * 32, smem>>>(p);
}
void launch_config(int ci, const Params& p, size_t smem, int nsm) {
  static_assert(kNumConfigs == 4, "one case per configuration");
  switch (ci) {
    case 0: launch_cfg<0>(p, smem, nsm); break;
    case 1: launch_cfg<1>(p, smem, nsm); break;
    case 2: launch_cfg<2>(p, smem, nsm); break;
    default: launch_cfg<3>(p, smem, nsm); break;
  }
}

// Host attention of layer 0 at pos from the device's raw qkv and the prefilled caches (head_dim
// 128): the norms, RoPE, fp16 rounding of the new k and v, softmax in double. knew/vnew: the new
// cache rows per KV head (as fp16 values), for comparing the device's stores.
std::vector<float> host_attention(const std::vector<float>& qkv, const std::vector<__half>& kc,
                                  const std::vector<__half>& vc, const std::vector<float>& qn,
                                  const std::vector<float>& kn, int nq, int nkv, int pos, int n_ctx, float eps,
                                  float theta, std::vector<float>* knew, std::vector<float>* vnew) {
  constexpr int hd = 128;
  auto norm_rope = [&](const float* x, const float* g, bool rope) {
    std::vector<float> y(x, x + hd);
    if (g) {
      float ss = 0.f;
      for (float v : y) ss += v * v;
      const float rn = 1.f / std::sqrt(ss / hd + eps);
      for (int i = 0; i < hd; ++i) y[i] = y[i] * rn * g[i];
    }
    if (rope)
      for (int i = 0; i < hd / 2; ++i) {
        const float inv = 1.0f / std::pow(theta, float(2 * i) / float(hd)), ang = float(pos) * inv;
        const double c = std::cos(double(ang)), sn = std::sin(double(ang));
        const float a = y[i], b = y[i + hd / 2];
        y[i] = float(a * c - b * sn);
        y[i + hd / 2] = float(b * c + a * sn);
      }
    return y;
  };
  auto f16 = [](float v) { return __half2float(__float2half_rn(v)); };
  knew->assign(size_t(nkv) * hd, 0.f);
  vnew->assign(size_t(nkv) * hd, 0.f);
  for (int kh = 0; kh < nkv; ++kh) {
    const auto k = norm_rope(&qkv[size_t(nq + kh) * hd], kn.data(), true);
    for (int i = 0; i < hd; ++i) {
      (*knew)[size_t(kh) * hd + i] = f16(k[i]);
      (*vnew)[size_t(kh) * hd + i] = f16(qkv[size_t(nq + nkv + kh) * hd + i]);
    }
  }
  std::vector<float> out(size_t(nq) * hd);
  for (int h = 0; h < nq; ++h) {
    const int kh = h / (nq / nkv);
    const auto q = norm_rope(&qkv[size_t(h) * hd], qn.data(), true);
    auto krow = [&](int t, int i) {
      return t < pos ? __half2float(kc[(size_t(kh) * n_ctx + t) * hd + i]) : (*knew)[size_t(kh) * hd + i];
    };
    auto vrow = [&](int t, int i) {
      return t < pos ? __half2float(vc[(size_t(kh) * n_ctx + t) * hd + i]) : (*vnew)[size_t(kh) * hd + i];
    };
    std::vector<double> sc(pos + 1);
    double m = -1e300;
    for (int t = 0; t <= pos; ++t) {
      double d = 0;
      for (int i = 0; i < hd; ++i) d += double(q[i]) * krow(t, i);
      sc[t] = d / std::sqrt(double(hd));
      m = std::max(m, sc[t]);
    }
    double den = 0;
    for (double& v : sc) den += (v = std::exp(v - m));
    for (int i = 0; i < hd; ++i) {
      double acc = 0;
      for (int t = 0; t <= pos; ++t) acc += sc[t] * vrow(t, i);
      out[size_t(h) * hd + i] = float(acc / den);
    }
  }
  return out;
}

// The command line's choices for one run.
struct Opts {
  bool check = false, nodep = false, noweights = false, marks = false, quant_act = false, quant_all = false;
  bool attn = false;  // the attention in the hop's place, at position pos
  int mode = 0;       // 1 = --nomath, 2 = --nocopy
  int inflight = 0, pos = 64;
};

int run(const Shape& sh, int ci, const Opts& o, double copy_gbs, int nsm) {
  Params p{};
  p.nomath = o.mode == 1;
  p.nocopy = o.mode == 2;
  p.nodep = o.nodep ? 1 : 0;
  p.noweights = o.noweights ? 1 : 0;
  p.inflight = o.inflight;
  p.H = sh.H;
  p.nq_hd = sh.nq * sh.hd;
  p.F = sh.F;
  p.L = o.check ? 1 : sh.L;
  p.nsm = nsm;
  const int W = kConfigs[ci].W, CT = kConfigs[ci].CT, S = kConfigs[ci].S;
  const std::string qtag = o.quant_all ? " qall" : o.quant_act ? " qact" : "";  // in both report lines
  p.eps = sh.eps;
  const int qkv_rows = (sh.nq + 2 * sh.nkv) * sh.hd;
  p.m[0] = {0, qkv_rows, sh.H};
  p.m[2] = {mat_bytes(p.m[0]), sh.H, p.nq_hd};
  p.m[3] = {p.m[2].off + mat_bytes(p.m[2]), 2 * sh.F, sh.H};
  p.m[4] = {p.m[3].off + mat_bytes(p.m[3]), sh.H, sh.F};
  p.m[1] = {0, 0, 0};
  p.layer_bytes = p.m[4].off + mat_bytes(p.m[4]);
  if (o.inflight < 0 || o.inflight >= S) {
    std::fprintf(stderr, "error: --inflight must be 0..%d for %d ring slots\n", S - 1, S);
    return 1;
  }
  // Every phase's share (checked before anything is allocated) of partials must fit.
  for (int ph : {0, 2, 3, 4}) {
    const int n = p.m[ph].R / kTileRows;
    const bool pairs = ph == 3 && o.quant_act;
    if (pairs && n % 2) {
      std::fprintf(stderr, "error: %s gate/up has an odd number of row groups\n", sh.name);
      return 1;
    }
    const int per = pairs ? 2 * ((n / 2 + nsm - 1) / nsm) : (n + nsm - 1) / nsm;
    if ((ph == 2 || ph == 4) && per * kTileRows > W * 32) {
      std::fprintf(stderr, "error: %s phase %d has more rows per SM than consumer threads\n", sh.name, ph);
      return 1;
    }
    if ((p.m[ph].K / (kTileBlk * 32)) % CT != 0) {
      std::fprintf(stderr, "error: %s phase %d: a chunk of %d tiles would cross a row group\n", sh.name, ph, CT);
      return 1;
    }
    if (per * W * kTileRows > kMaxPart) {
      std::fprintf(stderr, "error: %s phase %d needs more partials than %d\n", sh.name, ph, kMaxPart);
      return 1;
    }
  }
  const size_t wbytes = p.layer_bytes * p.L;
  uint8_t* w = nullptr;
  CUDA_CHECK(cudaMalloc(&w, wbytes));
  // --check: GGUF rows on the host, put in tiles by the engine's repack (the host reference then
  // reads the GGUF rows, so the layout is checked too). Timing: random tiles filled on the device.
  std::vector<uint8_t> wq, wk, wv, wo, wg, wu, wd;
  if (o.check) {
    using lmf::cuda::RowsRef;
    const int kv_rows = sh.nkv * sh.hd;
    wq = random_q4_0_rows(p.nq_hd, sh.H, 1);
    wk = random_q4_0_rows(kv_rows, sh.H, 2);
    wv = random_q4_0_rows(kv_rows, sh.H, 3);
    wo = random_q4_0_rows(sh.H, p.nq_hd, 4);
    wg = random_q4_0_rows(sh.F, sh.H, 5);
    wu = random_q4_0_rows(sh.F, sh.H, 6);
    wd = random_q4_0_rows(sh.H, sh.F, 7);
    const lmf::cuda::HostTiles t[4] = {
        lmf::cuda::repack_tiles_concat(lmf::DType::Q4_0,
                                       {RowsRef{wq.data(), p.nq_hd}, RowsRef{wk.data(), kv_rows}, RowsRef{wv.data(), kv_rows}},
                                       sh.H),
        lmf::cuda::repack_tiles_concat(lmf::DType::Q4_0, {RowsRef{wo.data(), sh.H}}, p.nq_hd),
        lmf::cuda::repack_tiles_gate_up(lmf::DType::Q4_0, wg.data(), wu.data(), sh.F, sh.H),
        lmf::cuda::repack_tiles_concat(lmf::DType::Q4_0, {RowsRef{wd.data(), sh.H}}, sh.F)};
    const int at[4] = {0, 2, 3, 4};
    for (int i = 0; i < 4; ++i) {
      if (t[i].bytes.size() != mat_bytes(p.m[at[i]])) {
        std::fprintf(stderr, "error: %s phase %d: the repack made %zu bytes, the layout needs %zu\n", sh.name, at[i],
                     t[i].bytes.size(), mat_bytes(p.m[at[i]]));
        CUDA_CHECK(cudaFree(w));
        return 1;
      }
      CUDA_CHECK(cudaMemcpy(w + p.m[at[i]].off, t[i].bytes.data(), t[i].bytes.size(), cudaMemcpyHostToDevice));
    }
  } else {
    lmf::cuda::bench::fill_bits<<<1024, 256>>>(reinterpret_cast<uint32_t*>(w), wbytes / 4, 12345u, 0xFFFFFFFFu, 0);
    fix_scales<<<1024, 256>>>(w, wbytes / kTileBytes);
    CUDA_CHECK(cudaGetLastError());
  }
  p.w = w;
  // Activations and gammas.
  std::vector<float> g(size_t(p.L) * sh.H), h0(sh.H);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.8f + 0.4f * float((i * 2654435761u >> 7) % 1000) / 1000.f;
  for (int i = 0; i < sh.H; ++i) h0[i] = float(int((i * 40503u) % 2001) - 1000) / 500.f;
  float *ga, *gf, *hA, *hB, *qkv, *attn, *act;
  unsigned* cnt;
  CUDA_CHECK(cudaMalloc(&ga, g.size() * 4));
  CUDA_CHECK(cudaMalloc(&gf, g.size() * 4));
  CUDA_CHECK(cudaMalloc(&hA, sh.H * 4));
  CUDA_CHECK(cudaMalloc(&hB, sh.H * 4));
  CUDA_CHECK(cudaMalloc(&qkv, qkv_rows * 4));
  CUDA_CHECK(cudaMalloc(&attn, p.nq_hd * 4));
  CUDA_CHECK(cudaMalloc(&act, sh.F * 4));
  CUDA_CHECK(cudaMalloc(&cnt, p.L * kPhases * 4));
  uint8_t *actq = nullptr, *attnq = nullptr, *hq = nullptr;
  float* ssq = nullptr;
  if (o.quant_act) CUDA_CHECK(cudaMalloc(&actq, size_t(sh.F / 32) * 40));
  if (o.quant_all) {
    CUDA_CHECK(cudaMalloc(&attnq, size_t(p.nq_hd / 32) * 40));
    CUDA_CHECK(cudaMalloc(&hq, size_t(sh.H / 32) * 40));
    CUDA_CHECK(cudaMalloc(&ssq, size_t(sh.H / 32) * 4));
  }
  // Attention inputs: caches prefilled with fp16 values in [-1, 1) below pos, norms near 1.
  __half *kc = nullptr, *vc = nullptr;
  float *qn = nullptr, *kn = nullptr;
  std::vector<__half> kch, vch;
  std::vector<float> qnh(size_t(p.L) * 128), knh(size_t(p.L) * 128);
  if (o.attn) {
    if (sh.hd != 128) {
      std::fprintf(stderr, "error: --attn needs head_dim 128\n");
      return 1;
    }
    p.n_head = sh.nq;
    p.n_kv = sh.nkv;
    p.pos = o.pos;
    p.n_ctx = o.pos + 1;
    p.theta = sh.theta;
    const size_t nc = size_t(p.L) * sh.nkv * p.n_ctx * 128;
    kch.resize(nc);
    vch.resize(nc);
    for (size_t i = 0; i < nc; ++i) {
      kch[i] = __float2half(float(int((i * 2654435761u >> 9) % 2000) - 1000) / 1000.f);
      vch[i] = __float2half(float(int((i * 40503u + 7) % 2000) - 1000) / 1000.f);
    }
    for (size_t i = 0; i < qnh.size(); ++i) {
      qnh[i] = 0.9f + 0.2f * float(i % 17) / 17.f;
      knh[i] = 1.1f - 0.2f * float(i % 13) / 13.f;
    }
    CUDA_CHECK(cudaMalloc(&kc, nc * 2));
    CUDA_CHECK(cudaMalloc(&vc, nc * 2));
    CUDA_CHECK(cudaMalloc(&qn, qnh.size() * 4));
    CUDA_CHECK(cudaMalloc(&kn, knh.size() * 4));
    CUDA_CHECK(cudaMemcpy(kc, kch.data(), nc * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(vc, vch.data(), nc * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(qn, qnh.data(), qnh.size() * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(kn, knh.data(), knh.size() * 4, cudaMemcpyHostToDevice));
  }
  p.k_cache = kc;
  p.v_cache = vc;
  p.q_norm = qn;
  p.k_norm = kn;
  p.actq = actq;
  p.attnq = attnq;
  p.hq = hq;
  p.ssq = ssq;
  CUDA_CHECK(cudaMemset(cnt, 0, p.L * kPhases * 4));
  CUDA_CHECK(cudaMemcpy(ga, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
  for (float& v : g) v = 2.0f - v;
  CUDA_CHECK(cudaMemcpy(gf, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(hA, h0.data(), sh.H * 4, cudaMemcpyHostToDevice));
  p.g_attn = ga;
  p.g_ffn = gf;
  p.hA = hA;
  p.hB = hB;
  p.qkv = qkv;
  p.attn = attn;
  p.act = act;
  p.cnt = cnt;
  const size_t smem = size_t(S) * CT * kTileBytes + kMaxK / 32 * 40 + kMaxPart * 4 + 2 * S * 8;
  auto cleanup = [&] {
    for (void* q : {(void*)actq, (void*)attnq, (void*)hq, (void*)ssq, (void*)kc, (void*)vc, (void*)qn, (void*)kn})
      if (q) CUDA_CHECK(cudaFree(q));
    for (void* q : {(void*)w, (void*)ga, (void*)gf, (void*)hA, (void*)hB, (void*)qkv, (void*)attn, (void*)act, (void*)cnt})
      CUDA_CHECK(cudaFree(q));
  };
  unsigned epoch = 0;
  auto launch = [&] {
    p.epoch = ++epoch;
    launch_config(ci, p, smem, nsm);
  };
  if (o.check) {
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> gh(sh.H), gfh(sh.H);
    CUDA_CHECK(cudaMemcpy(gh.data(), ga, sh.H * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gfh.data(), gf, sh.H * 4, cudaMemcpyDeviceToHost));
    const auto dqkv = d2h(qkv, qkv_rows), dattn = d2h(attn, p.nq_hd), dhB = d2h(hB, sh.H), dact = d2h(act, sh.F),
               dhA = d2h(hA, sh.H);
    const int kv_rows = sh.nkv * sh.hd;
    const auto xn = host_norm(h0, gh.data(), p.eps);
    std::vector<float> rq = host_quant_gemv(wq, p.nq_hd, sh.H, xn);
    for (const auto* part : {&wk, &wv}) {
      const auto y = host_quant_gemv(*part, kv_rows, sh.H, xn);
      rq.insert(rq.end(), y.begin(), y.end());
    }
    std::vector<float> rattn(dqkv.begin(), dqkv.begin() + p.nq_hd), knew, vnew;
    double ecache = 0;
    if (o.attn) {
      rattn = host_attention(dqkv, kch, vch, qnh, knh, sh.nq, sh.nkv, p.pos, p.n_ctx, p.eps, p.theta, &knew, &vnew);
      std::vector<__half> dk(size_t(sh.nkv) * p.n_ctx * 128), dv(dk.size());
      CUDA_CHECK(cudaMemcpy(dk.data(), kc, dk.size() * 2, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(dv.data(), vc, dv.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<float> dkv, rkv;
      for (int kh = 0; kh < sh.nkv; ++kh)
        for (int i = 0; i < 128; ++i) {
          const size_t at = (size_t(kh) * p.n_ctx + p.pos) * 128 + i;
          dkv.push_back(__half2float(dk[at]));
          dkv.push_back(__half2float(dv[at]));
          rkv.push_back(knew[size_t(kh) * 128 + i]);
          rkv.push_back(vnew[size_t(kh) * 128 + i]);
        }
      ecache = rel_l2(dkv, rkv);
    }
    auto ro = host_quant_gemv(wo, sh.H, p.nq_hd, dattn);
    for (int i = 0; i < sh.H; ++i) ro[i] += h0[i];
    const auto xf = host_norm(dhB, gfh.data(), p.eps);
    const auto rg = host_quant_gemv(wg, sh.F, sh.H, xf), ru = host_quant_gemv(wu, sh.F, sh.H, xf);
    std::vector<float> ract(sh.F);
    for (int i = 0; i < sh.F; ++i) ract[i] = rg[i] / (1.f + std::exp(-rg[i])) * ru[i];
    auto rd = host_quant_gemv(wd, sh.H, sh.F, dact);
    for (int i = 0; i < sh.H; ++i) rd[i] += dhB[i];
    const double e[5] = {rel_l2(dqkv, rq), rel_l2(dattn, rattn), rel_l2(dhB, ro), rel_l2(dact, ract),
                         rel_l2(dhA, rd)};
    bool ok = ecache <= 1e-3;
    for (double v : e) ok = ok && v <= 1e-3;
    std::printf("check %s W=%d CT=%d S=%d F=%d%s: rel-L2 qkv %.2e %s %.2e o+res %.2e gate/up %.2e down+res %.2e%s: %s\n",
                sh.name, W, CT, S, o.inflight, qtag.c_str(), e[0],
                o.attn ? "attn" : "hop", e[1], e[2], e[3], e[4],
                o.attn ? (" kv@pos " + std::to_string(ecache)).c_str() : "", ok ? "ok" : "FAIL");
    cleanup();
    return ok ? 0 : 1;
  }
  for (int i = 0; i < 3; ++i) launch();
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  const int reps = 20;
  CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) launch();
  CUDA_CHECK(cudaEventRecord(b));
  CUDA_CHECK(cudaEventSynchronize(b));
  CUDA_CHECK(cudaGetLastError());
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  const double us_tok = ms * 1e3 / reps, us_layer = us_tok / p.L;
  const double gbs = double(wbytes) / (us_tok * 1e-6) / 1e9;
  std::printf("%-5s W=%2d CT=%d S=%2d F=%2d%s%s%s: %8.1f us/token %6.2f us/layer (bytes at copy %5.2f) %7.1f GB/s %5.1f %% of copy\n",
              sh.name, W, CT, S, o.inflight, (qtag + (o.attn ? " attn@" + std::to_string(o.pos) : "")).c_str(),
              o.nodep ? " nodep" : "", o.noweights ? " noweights" : o.mode == 1 ? " nomath" : o.mode == 2 ? " nocopy" : "",
              us_tok, us_layer, double(p.layer_bytes) / (copy_gbs * 1e3), gbs, 100.0 * gbs / copy_gbs);
  if (o.marks) {  // one more token with the marks of layer L/2
    const size_t n = size_t(nsm) * kPhases * kMarks;
    unsigned long long* dm;
    CUDA_CHECK(cudaMalloc(&dm, n * 8));
    CUDA_CHECK(cudaMemset(dm, 0, n * 8));
    p.stamps = dm;
    launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> hm(n);
    CUDA_CHECK(cudaMemcpy(hm.data(), dm, n * 8, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(dm));
    p.stamps = nullptr;
    const char* names[kPhases] = {"qkv", o.attn ? "attn" : "hop", "o", "gate/up", "down"};
    unsigned long long prev_end = 0;
    std::printf("  layer %d, us (mean over SMs; 'step' = latest end minus the previous phase's latest end):\n", p.L / 2);
    std::printf("  %-8s %7s %7s %7s %7s %7s %7s %7s %7s  %s\n", "phase", "wait", "stage", "chunk1", "tiles", "epi", "epi(t0)",
                "total", "step", "ends after the median (p90, max) and the last SMs");
    for (int ph = 0; ph < kPhases; ++ph) {
      double sum[6] = {0, 0, 0, 0, 0, 0};
      int cnt[6] = {0, 0, 0, 0, 0, 0};
      unsigned long long end = 0;
      for (int sm = 0; sm < nsm; ++sm) {
        const unsigned long long* m = &hm[(size_t(sm) * kPhases + ph) * kMarks];
        end = std::max(end, m[5]);
        auto add = [&](int i, unsigned long long a, unsigned long long b) {
          if (a && b) {
            sum[i] += double(b - a);
            ++cnt[i];
          }
        };
        add(0, m[0], m[1]);
        add(1, m[1], m[2]);
        add(2, m[2], m[3]);
        add(3, m[2], m[4]);
        add(4, m[4] ? m[4] : m[1], m[5]);
        add(5, m[4] ? m[4] : m[1], m[6]);
      }
      double tot = 0;
      {
        int c = 0;
        for (int sm = 0; sm < nsm; ++sm) {
          const unsigned long long* m = &hm[(size_t(sm) * kPhases + ph) * kMarks];
          tot += double(m[5] - m[0]);
          ++c;
        }
        tot /= c;
      }
      auto mean = [&](int i) { return cnt[i] ? sum[i] / cnt[i] / 1e3 : 0.0; };
      // How unevenly the SMs finish the phase: which SMs set its end.
      std::vector<std::pair<unsigned long long, int>> ends;
      for (int sm = 0; sm < nsm; ++sm) ends.push_back({hm[(size_t(sm) * kPhases + ph) * kMarks + 5], sm});
      std::sort(ends.begin(), ends.end());
      const unsigned long long med = ends[ends.size() / 2].first;
      std::printf("  %-8s %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f  %.2f, %.2f: SM %d, %d, %d\n", names[ph], mean(0),
                  mean(1), mean(2), mean(3), mean(4), mean(5), tot / 1e3, prev_end ? double(end - prev_end) / 1e3 : 0.0,
                  double(ends[ends.size() * 9 / 10].first - med) / 1e3, double(ends.back().first - med) / 1e3,
                  ends[ends.size() - 1].second, ends[ends.size() - 2].second, ends[ends.size() - 3].second);
      prev_end = end;
    }
  }
  cleanup();
  return 0;
}

}  // namespace

int run_main(int argc, char** argv) {
  // cuda_bench_persist [--check] [--shape NAME] [--configs I,I..] (kConfigs: consumer warps,
  // tiles per chunk, ring slots)
  Opts o;
  std::string only;
  std::vector<int> cfgs = {0}, inflights = {0};
  auto list = [](const char* s) {
    std::vector<int> v;
    for (const char* c = s; *c;) {
      v.push_back(std::atoi(c));
      while (*c && *c != ',') ++c;
      if (*c) ++c;
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") o.check = true;
    else if (a == "--nodep") o.nodep = true;
    else if (a == "--quant-act") o.quant_act = true;
    else if (a == "--quant-all") o.quant_act = o.quant_all = true;
    else if (a == "--attn") o.attn = true;
    else if (a == "--pos" && i + 1 < argc) o.pos = std::atoi(argv[++i]);
    else if (a == "--noweights") o.noweights = true;
    else if (a == "--marks") o.marks = true;
    else if (a == "--nomath") o.mode = 1;
    else if (a == "--nocopy") o.mode = 2;
    else if (a == "--shape" && i + 1 < argc) only = argv[++i];
    else if (a == "--configs" && i + 1 < argc) cfgs = list(argv[++i]);
    else if (a == "--inflight" && i + 1 < argc) inflights = list(argv[++i]);
    else {
      std::fprintf(stderr, "usage: cuda_bench_persist [--check] [--quant-act] [--quant-all] [--attn] [--pos P] [--nodep] [--noweights] [--nomath] [--nocopy] [--marks] [--shape 0.6b|4b|8b] [--configs 0,1,2,3] [--inflight 0,4,6]\n");
      return 2;
    }
  }
  for (int c : cfgs)
    if (c < 0 || c >= kNumConfigs) {
      std::fprintf(stderr, "error: --configs takes indices 0..%d\n", kNumConfigs - 1);
      return 2;
    }
  if (o.pos < 1 || o.pos > 2047) {
    std::fprintf(stderr, "error: --pos must be 1..2047\n");
    return 2;
  }
  int dev = 0, nsm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  const double copy = o.check ? 0.0 : lmf::cuda::bench::copy_bandwidth();
  if (!o.check) std::printf("copy bandwidth %.1f GB/s, %d SMs\n", copy, nsm);
  int rc = 0;
  for (const char* name : kShapes) {
    if (!only.empty() && only != name) continue;
    const Shape sh = shape_of(name);
    for (int c : cfgs)
      for (int f : inflights) {
        o.inflight = f;
        rc |= run(sh, c, o, copy, nsm);
      }
  }
  return rc;
}

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

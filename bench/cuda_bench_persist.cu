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
// `--attn` the attention itself at position `--pos` (q/k RMSNorm, RoPE, the KV-cache append,
// softmax over the prefilled fp16 caches; SM s takes KV head s / nsplit with all its query heads
// over split s % nsplit of the positions, the cached rows streamed through the ring like weights,
// each chunk of 16 rows on one warp's tensor cores, splits merged by the last to arrive;
// `--split-rows R`: ~R positions per split, at most nsm / n_kv splits); hB = hA + W_o * attn;
// act = silu(gate) * up of W_gu * norm(hB) (rows interleaved gate/up); hA = hB + W_down * act.
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
// chunk, tiles, epilogue; for the attention also its time in chunk waits), `--attn-nomath` (the
// attention's rows taken and released unread), `--nodep` (no phase waits: the streaming bound),
// `--noweights` (the latency chain alone), `--nomath` (the copies alone), `--nocopy` (the
// consumers alone).
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
constexpr int kMaxPart = 10752;  // floats of per-warp row partials per SM and phase (and the attention's, AttnSmem)

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
  // The attention in the hop's place (k_cache non-null) at position pos, over fp16 caches
  // [L][n_kv][n_ctx][128] prefilled below pos; Qwen3's q/k RMSNorm over the head (q_norm,
  // k_norm: [L][128]) and NeoX RoPE.
  __half *k_cache, *v_cache;
  const float *q_norm, *k_norm;
  int n_head, n_kv, pos, n_ctx;
  float theta;
  // Splits of the positions per KV head (SM s < n_kv * nsplit: head s / nsplit, split s % nsplit);
  // with more than one, partials apart [n_kv][nsplit][G][132] and a counter per layer and KV head
  // kvcnt [L][n_kv] (the last split to arrive merges).
  int nsplit;
  float* apart;
  unsigned* kvcnt;
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
  int attn_nomath;  // timing only: the attention's chunks taken and released unread
};
// Per-phase marks of thread 0 (%globaltimer): begin, dependency met, x staged, first chunk
// ready, tiles done, epilogue done (all warps), thread 0's own epilogue done.
// [7]: the attention's time in chunk waits (thread 0, + 1 ns).
constexpr int kMarks = 8;

__device__ __forceinline__ void cbar(int W) {  // the consumer warps only
  asm volatile("bar.sync 1, %0;" ::"r"(W * 32) : "memory");
}

// Ring chunk g (the g-th chunk the producer copies, in slot g % S): waits until it has landed,
// returns its slot.
template <int S>
__device__ __forceinline__ int ring_wait(uint64_t* full, unsigned g) {
  const int slot = int(g % unsigned(S));
  mbar_wait_parity(full + slot, (g / unsigned(S)) & 1);
  return slot;
}
// A phase's chunks are ring chunks gc, gc + 1, ..; chunk gc + c is consumer warp (gc + c) % W's.
// The first c of `warp` (W divides 2^32, so the unsigned difference is exact mod W).
template <int W>
__device__ __forceinline__ int first_own_chunk(int warp, unsigned gc) {
  return int((unsigned(warp) - gc) % unsigned(W));
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

// The attention's work (Params: k_cache): KV head kvh of SM s < n_kv * nsplit, split j of the
// positions 0..pos (rows [t0, t1), t1 = pos + 1 for the last split). The rows below pos are in
// the cache and stream through the ring like weights (they do not depend on this token); row pos
// is this token's k, v, made by each SM of the head from qkv and appended by the last split.
struct KvShare {
  int kvh, j, t0, t1;
  __device__ int cached_end(int pos) const { return min(t1, pos); }
};
__device__ __forceinline__ KvShare kv_share(const Params& p, int s) {
  if (s >= p.n_kv * p.nsplit) return {-1, 0, 0, 0};
  const int kvh = s / p.nsplit, j = s % p.nsplit, n = p.pos + 1;
  return {kvh, j, int(long(j) * n / p.nsplit), int(long(j + 1) * n / p.nsplit)};
}
constexpr int kMaxG = 4;       // query heads per KV head
constexpr int kPartStride = 132;  // floats per online-softmax state (a warp's, a split's): m, l, 2 pad, o[128]

// What the attention needs that does not depend on the previous phase: the q/k norm gammas and
// RoPE's cos/sin of the lane's pairs (i = lane + 32 j, j < 2, with i + 64), before the wait.
struct AttnPrep {
  float qg[4], kg[4], c[2], sn[2];
};
__device__ __forceinline__ AttnPrep attn_prep(const Params& p, int l, int lane) {
  AttnPrep a;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a.qg[j] = __ldg(p.q_norm + size_t(l) * 128 + lane + 32 * j);
    a.kg[j] = __ldg(p.k_norm + size_t(l) * 128 + lane + 32 * j);
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) rope_cs(p.pos, lane + 32 * j, 128, p.theta, nullptr, &a.c[j], &a.sn[j]);
  return a;
}
// Head row x (lane j-th value = element lane + 32 j): RMSNorm over the head, then NeoX RoPE.
__device__ __forceinline__ void norm_rope(float (&x)[4], const float (&g)[4], const AttnPrep& a, float eps) {
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) ss = fmaf(x[j], x[j], ss);
  ss = warp_sum(ss);
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = head_norm(x[j], ss, 128, eps, g[j]);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float xa = x[j], xb = x[j + 2];
    x[j] = rope_rotate(xa, xb, a.c[j], a.sn[j], true);
    x[j + 2] = rope_rotate(xb, xa, a.c[j], a.sn[j], false);
  }
}
// Head h's output o / L (lane j-th value at lane + 32 j) into attn and its int8 blocks.
__device__ __forceinline__ void attn_out(const Params& p, int h, float L, const float (&o)[4], int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float r = o[j] / L;
    p.attn[size_t(h) * 128 + lane + 32 * j] = r;
    if (p.attnq) quant_warp_store(r, reinterpret_cast<float4*>(p.attnq), p.nq_hd / 32, h * 4 + j, lane);
  }
}
// Online-softmax states (m, l, 2 pad, o[128]) of n sources at src + i * stride merged in order
// (a source with no positions has m = -inf and is skipped); global: written by other SMs.
__device__ __forceinline__ void merge_parts(const float* src, int n, size_t stride, bool global, int lane, float& M,
                                            float& L, float (&r)[4]) {
  auto ld = [global](const float* a) { return global ? __ldcg(a) : *a; };
  M = -INFINITY;
  for (int i = 0; i < n; ++i) M = fmaxf(M, ld(src + i * stride));
  L = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) r[j] = 0.f;
  for (int i = 0; i < n; ++i) {
    const float* e = src + i * stride;
    const float mi = ld(e);
    if (mi == -INFINITY) continue;
    const float f = __expf(mi - M);
    L = fmaf(ld(e + 1), f, L);
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = fmaf(ld(e + 4 + lane + 32 * j), f, r[j]);
  }
}

// Rows of a chunk per ring slot: K rows then V rows (128 fp16 each) of kAttnRows positions (a
// slot of at least 8 KB: the CT = 4 configurations).
constexpr int kAttnRows = 16;
// Whether a ring slot of CB bytes holds a chunk (the kernel's, the producer's and the host's test).
__host__ __device__ constexpr bool attn_fits(int CB) { return CB >= 2 * kAttnRows * 256; }

// The attention's shared memory (in the phase partials' space), floats: q_s [G][128] (normed,
// roped, scaled); own_s 128 (row pos: K then V, fp16); q's mma fragments (q_frag_store: a uint4
// per k-step and lane, loaded per chunk: held in registers they pushed the kernel past its 168
// registers, three warps sharing an SM sub-partition, and it spilled); then the online-softmax
// states (m, l, 2 pad, o[128]) of entry e (warp e < W, row pos e = W) and head h at
// kEnt + (e * G + h) * kPartStride.
template <int W, int G>
struct AttnSmem {
  static constexpr int kQ = 0, kOwn = kQ + G * 128, kQf = kOwn + 128, kEnt = kQf + 8 * 32 * 4,
                       kEnd = kEnt + (W + 1) * G * kPartStride;
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
// x = hi + lo in two fp16 pairs (the products then as exact as fp32 for these magnitudes).
__device__ __forceinline__ void split_half2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
  hi = pack_half2(__half2float(ha), __half2float(hb));
  lo = pack_half2(a - __half2float(ha), b - __half2float(hb));
}
// D += A B, m16n8k16, fp16 in, fp32 accumulate, rows 0-7 only: a1 = a3 = 0, and D's rows 8-15
// (zero) are neither kept nor fed back.
__device__ __forceinline__ void mma_rows8(float (&d)[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float x, y;  // rows 8-15: dropped
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%12};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(x), "=f"(y)
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]), "f"(0.f));
  asm volatile("" ::"f"(x), "f"(y));  // (used: no set-but-unused warning)
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// q of the G heads as mma A fragments (rows = heads, lane group g = lane / 4 holds head g, zero
// past G), hi and lo parts {a0 hi, a2 hi, a0 lo, a2 lo} of k-step ks for lane ln into qf[ks * 32 +
// ln]. The columns (head dims) of k-step 2u + e are permuted so that lane t = lane % 4 reads one
// 16-byte piece of a K row per pair of k-steps: k = 2t, 2t+1 <-> dims 32u + 8t + 4e + {0, 1},
// k = 2t+8, 2t+9 <-> dims 32u + 8t + 4e + {2, 3} (the same for B).
template <int G>
__device__ __forceinline__ void q_frag_store(const float* q_s, uint4* qf, int ks, int ln) {
  const int g = ln >> 2, t = ln & 3;
  const int c = 32 * (ks >> 1) + 8 * t + 4 * (ks & 1);
  const float* q = q_s + (g < G ? g : 0) * 128 + c;
  const float z = g < G ? 1.f : 0.f;
  uint4 f;
  split_half2(z * q[0], z * q[1], f.x, f.z);
  split_half2(z * q[2], z * q[3], f.y, f.w);
  qf[ks * 32 + ln] = f;
}

// One warp's chunk of n <= 16 rows (K rows kc, V rows vc: 16 each, V rows past n zero): the
// scores S^T (heads x rows) in 32 mma, the online-softmax update of head g's state in the lanes
// of group g (max over the group's 4 lanes), then O += P V in 32 mma (P as A straight from the
// score fragments, V's B fragments by ldmatrix.trans). O: 16 n-tiles of 8 dims, C layout rows
// 0-7 (lane group g = head g: dims 8j + 2t, +1). M (same in the group's lanes) and the lane's
// partial sum Lp.
__device__ __forceinline__ void attn_chunk_mma(const __half* kc, const __half* vc, int n, const uint4* qf, float& M,
                                               float& Lp, float (&O)[16][2], int lane) {
  const int g = lane >> 2, t = lane & 3;
  // (One chain of 16 dependent mma per n-tile, ~0.5 µs of a chunk by S21-5's count; two chains
  // made ptxas spill 40 more bytes at 168 registers, four 120: not tried on the GPU yet.)
  float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const uint4 qa = qf[(2 * u) * 32 + lane], qb = qf[(2 * u + 1) * 32 + lane];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint4 w = *reinterpret_cast<const uint4*>(kc + (8 * j + g) * 128 + 32 * u + 8 * t);
      mma_rows8(s[j], qa.x, qa.y, w.x, w.y);
      mma_rows8(s[j], qa.z, qa.w, w.x, w.y);
      mma_rows8(s[j], qb.x, qb.y, w.z, w.w);
      mma_rows8(s[j], qb.z, qb.w, w.z, w.w);
    }
  }
  // s[j][e] = score of head g at row 8j + 2t + e (e < 2); rows past n masked.
  float cm = -INFINITY;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (8 * j + 2 * t + e >= n) s[j][e] = -INFINITY;
      cm = fmaxf(cm, s[j][e]);
    }
  cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
  cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 2));
  const float mn = fmaxf(M, cm), cr = __expf(M - mn);  // mn finite: row 0 is there
  float p[2][2], ps = 0.f;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      p[j][e] = s[j][e] == -INFINITY ? 0.f : __expf(s[j][e] - mn);
      ps += p[j][e];
    }
  Lp = fmaf(Lp, cr, ps);
  M = mn;
  uint32_t ph0, pl0, ph1, pl1;  // P's A fragment: k = 2t, 2t+1 <-> rows 2t, 2t+1; k = 2t+8.. <-> rows 8+2t..
  split_half2(p[0][0], p[0][1], ph0, pl0);
  split_half2(p[1][0], p[1][1], ph1, pl1);
  const int lr = (lane & 7) + ((lane >> 3) & 1) * 8, lc = (lane >> 4) * 8;  // ldmatrix row of this lane
#pragma unroll
  for (int jj = 0; jj < 8; ++jj) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, vc + lr * 128 + 16 * jj + lc);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float(&d)[2] = O[2 * jj + h];
      d[0] *= cr;
      d[1] *= cr;
      mma_rows8(d, ph0, ph1, b[2 * h], b[2 * h + 1]);
      mma_rows8(d, pl0, pl1, b[2 * h], b[2 * h + 1]);
    }
  }
}

// The attention phase of SM s: its KV head's G query heads over its split of the positions. Its
// ring chunks are dealt to the warps (chunk g to warp g % W, as the GEMV phases' chunks), each
// warp an online softmax on tensor cores (attn_chunk_mma); row pos an entry of its own; the
// entries merged in order. One split: the SM writes the heads' output, else its partials, and the
// last split of the head to arrive merges them in split order. (S21-2..4: CUDA-core forms cost
// ~1 µs per chunk of 16-18 rows whatever the split between warps.)
template <int W, int G, int CB, int S>
__device__ void attn_split(const Params& p, int l, int s, const AttnPrep& a, const uint8_t* ring, uint64_t* full,
                           uint64_t* empty, unsigned& gc, float* sm, int* flag, unsigned long long* mk) {
  constexpr int PC = kAttnRows;
  static_assert(attn_fits(CB), "a slot holds a chunk's K and V rows");
  static_assert(W > G && G <= 8, "a warp per query head and one for k, v; heads in the mma's 8 row groups");
  using A = AttnSmem<W, G>;
  static_assert(A::kEnd <= kMaxPart, "the attention's shared memory fits the partials' space");
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const KvShare ks = kv_share(p, s);
  if (ks.kvh < 0) return;
  const int h0 = ks.kvh * G;
  const bool own = ks.t1 == p.pos + 1;
  if (warp < G) {  // q of head h0 + warp: normed, roped, scaled
    float q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) q[j] = __ldcg(p.qkv + size_t(h0 + warp) * 128 + lane + 32 * j);
    norm_rope(q, a.qg, a, p.eps);
#pragma unroll
    for (int j = 0; j < 4; ++j) sm[A::kQ + warp * 128 + lane + 32 * j] = q[j] * rsqrtf(128.f);
  } else if (warp == G && own) {  // row pos: k normed and roped, both rounded to fp16 as the cache holds them
    float k[4], v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k[j] = __ldcg(p.qkv + size_t(p.n_head + ks.kvh) * 128 + lane + 32 * j);
      v[j] = __ldcg(p.qkv + size_t(p.n_head + p.n_kv + ks.kvh) * 128 + lane + 32 * j);
    }
    norm_rope(k, a.kg, a, p.eps);
    const size_t row = ((size_t(l) * p.n_kv + ks.kvh) * p.n_ctx + p.pos) * 128;
    __half* os = reinterpret_cast<__half*>(sm + A::kOwn);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __half kh = __float2half_rn(k[j]), vh = __float2half_rn(v[j]);
      p.k_cache[row + lane + 32 * j] = kh;
      p.v_cache[row + lane + 32 * j] = vh;
      os[lane + 32 * j] = kh;
      os[128 + lane + 32 * j] = vh;
    }
  }
  cbar(W);
  if (mk) mk[2] = global_ns();
  float* ent = sm + A::kEnt;
  uint4* qf = reinterpret_cast<uint4*>(sm + A::kQf);
  for (int i = tid; i < 8 * 32; i += 32 * W) q_frag_store<G>(sm + A::kQ, qf, i >> 5, i & 31);
  cbar(W);
  float M = -INFINITY, Lp = 0.f, O[16][2];
#pragma unroll
  for (int j = 0; j < 16; ++j) O[j][0] = O[j][1] = 0.f;
  const int nrows = ks.cached_end(p.pos) - ks.t0, nch = (nrows + PC - 1) / PC;
  unsigned long long waited = 0;
  bool first = true;
  for (int c = first_own_chunk<W>(warp, gc); c < nch; c += W) {  // each warp walks its own chunks
    const unsigned long long w0 = mk ? global_ns() : 0;
    const int slot = ring_wait<S>(full, gc + unsigned(c));
    if (mk) {
      const unsigned long long w1 = global_ns();
      waited += w1 - w0;
      if (first) mk[3] = w1;
    }
    first = false;
    __half* kc = reinterpret_cast<__half*>(const_cast<uint8_t*>(ring) + size_t(slot) * CB);
    __half* vc = kc + PC * 128;
    const int n = min(PC, nrows - c * PC);
    if (n < PC) {  // V rows past n: zero (stale bytes could be inf or NaN, and 0 * NaN is NaN)
      uint4* z = reinterpret_cast<uint4*>(vc + n * 128);
      for (int i = lane; i < (PC - n) * 16; i += 32) z[i] = make_uint4(0u, 0u, 0u, 0u);
      __syncwarp();
    }
    if (!p.attn_nomath) attn_chunk_mma(kc, vc, n, qf, M, Lp, O, lane);
    __syncwarp();
    if (lane == 0) {
      if (n < PC) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the zeros before the next copy
      mbar_arrive(empty + slot);
    }
  }
  gc += unsigned(nch);
  // The entry of row pos: m = its score, l = 1, o = its value (or none), after warp W - 1's chunks
  // (S21-5 made it before the fragments' barrier, where it held every warp back: that barrier
  // and the first chunk's wait took 1.08 µs; here, 0.39 µs, S22-1).
  if (warp == W - 1) {
    const __half* os = reinterpret_cast<const __half*>(sm + A::kOwn);
#pragma unroll
    for (int h = 0; h < G; ++h) {
      float* e = ent + (W * G + h) * kPartStride;
      float d = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) d = fmaf(sm[A::kQ + h * 128 + lane + 32 * j], __half2float(os[lane + 32 * j]), d);
      d = warp_sum(d);
      if (lane == 0) {
        e[0] = own ? d : -INFINITY;
        e[1] = 1.f;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) e[4 + lane + 32 * j] = __half2float(os[128 + lane + 32 * j]);
    }
  }
  if (mk) {
    mk[4] = global_ns();
    mk[7] = waited + 1;  // (+1: recorded)
  }
  {  // this warp's entry: head g in lane group g
    const int g = lane >> 2, t = lane & 3;
    Lp += __shfl_xor_sync(0xffffffffu, Lp, 1);
    Lp += __shfl_xor_sync(0xffffffffu, Lp, 2);
    if (g < G) {
      float* e = ent + (warp * G + g) * kPartStride;
      if (t == 0) {
        e[0] = M;  // -inf: no chunk
        e[1] = Lp;
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        e[4 + 8 * j + 2 * t] = O[j][0];
        e[4 + 8 * j + 2 * t + 1] = O[j][1];
      }
    }
  }
  cbar(W);
  if (warp < G) {  // head h0 + warp: the entries merged, the output or this split's partial
    float Mh, L, r[4];
    merge_parts(ent + warp * kPartStride, W + 1, size_t(G) * kPartStride, false, lane, Mh, L, r);
    if (p.nsplit == 1) {
      attn_out(p, h0 + warp, L, r, lane);
    } else {
      float* d = p.apart + ((size_t(ks.kvh) * p.nsplit + ks.j) * G + warp) * kPartStride;
      if (lane == 0) {
        d[0] = Mh;
        d[1] = L;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) d[4 + lane + 32 * j] = r[j];
    }
  }
  if (p.nsplit == 1) return;
  cbar(W);
  if (tid == 0)
    *flag = atom_add_acq_rel(p.kvcnt + size_t(l) * p.n_kv + ks.kvh, 1u) + 1u == p.epoch * unsigned(p.nsplit);
  cbar(W);
  if (*flag && warp < G) {
    float Mh, L, r[4];
    merge_parts(p.apart + (size_t(ks.kvh) * p.nsplit * G + warp) * kPartStride, p.nsplit, size_t(G) * kPartStride, true,
                lane, Mh, L, r);
    attn_out(p, h0 + warp, L, r, lane);
  }
}

template <int W, int CT, int S, bool AT>
__global__ void __launch_bounds__((W + 1) * 32, 1) persist_kernel(const __grid_constant__ Params p) {
  // S % W == 0: a slot's next use (chunk g + S) is the same warp's as its current one (chunk g), so
  // no warp waits for chunk g + S while chunk g's phase is still open (its parity is the previous
  // phase's, which has completed: the wait would pass at once). It also bounds the ring (S22-7).
  static_assert((W & (W - 1)) == 0 && S % W == 0, "slot g % S must belong to warp g % W");
  constexpr int CB = CT * kTileBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* ring = smem;
  float4* xs = reinterpret_cast<float4*>(smem + size_t(S) * CB);           // <= 15.4 KB
  float* part = reinterpret_cast<float*>(smem + size_t(S) * CB + kMaxK / 32 * 40);
  uint64_t* full = reinterpret_cast<uint64_t*>(part + kMaxPart);
  uint64_t* empty = full + S;
  __shared__ float red[32];
  __shared__ int aflag;
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
      // Chunk gc: na bytes from a, and nb bytes from b after PC rows of 256 bytes (K then V rows).
      auto issue = [&](const uint8_t* a, uint32_t na, const uint8_t* b, uint32_t nb) {
        const int slot = int(gc % unsigned(S));
        if (gc >= unsigned(S)) mbar_wait_parity(empty + slot, ((gc / unsigned(S)) - 1) & 1);
        if (p.inflight > 0 && gc >= unsigned(p.inflight)) {  // chunk gc - inflight has landed
          ring_wait<S>(full, gc - unsigned(p.inflight));
        }
        ++gc;
        if (p.nocopy) {
          mbar_arrive(full + slot);
          return;
        }
        mbar_arrive_expect_tx(full + slot, na + nb);
        bulk_load(ring + size_t(slot) * CB, a, na, full + slot, pol);
        if (nb) bulk_load(ring + size_t(slot) * CB + kAttnRows * 256, b, nb, full + slot, pol);
      };
      for (int l = 0; l < p.L; ++l)
        for (int ph = 0; ph < kPhases; ++ph) {
          if (ph == 1) {  // the attention: this SM's cached rows of its KV head, K and V
            if (!p.k_cache) continue;
            const KvShare ks = kv_share(p, s);
            if (ks.kvh < 0) continue;
            constexpr int PC = kAttnRows;
            const size_t base = ((size_t(l) * p.n_kv + ks.kvh) * p.n_ctx) * 128;
            const int te = ks.cached_end(p.pos);
            for (int t = ks.t0; t < te; t += PC) {
              const uint32_t bytes = uint32_t(min(PC, te - t)) * 256u;
              issue(reinterpret_cast<const uint8_t*>(p.k_cache + base + size_t(t) * 128), bytes,
                    reinterpret_cast<const uint8_t*>(p.v_cache + base + size_t(t) * 128), bytes);
            }
            continue;
          }
          const Mat& m = p.m[ph];
          const Share sh = share_of(m, s, nsm, ph == 3 && p.actq);
          const uint8_t* src = p.w + size_t(l) * p.layer_bytes + m.off + size_t(sh.rg0) * sh.kt * kTileBytes;
          const int nt = sh.tiles();
          for (int t0 = 0; t0 < nt; t0 += CT)
            issue(src + size_t(t0) * kTileBytes, uint32_t(min(CT, nt - t0)) * kTileBytes, nullptr, 0);
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
      AttnPrep ap{};
      if (ph == 1 && p.k_cache) ap = attn_prep(p, l, lane);
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
        // (the host refuses --attn with smaller slots; with --noweights the ring is idle, and the
        // attention's rows come through it)
        if constexpr (AT && attn_fits(CB)) {
          if (!p.noweights && p.n_head == 4 * p.n_kv)
            attn_split<W, 4, CB, S>(p, l, s, ap, ring, full, empty, gc, part, &aflag, mk);
          else if (!p.noweights)
            attn_split<W, 2, CB, S>(p, l, s, ap, ring, full, empty, gc, part, &aflag, mk);
        }
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
          // Chunk k holds tiles from k * CT. Each warp walks its own chunks (a loop over all that
          // skipped the others' was ~20 % of the consumers' instructions, ncu S22-1).
          const int nch = p.noweights ? 0 : (nt + CT - 1) / CT;
          for (int k = first_own_chunk<W>(warp, gc); k < nch; k += W) {
            const int t0 = k * CT, slot = ring_wait<S>(full, gc + unsigned(k));
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
          gc += unsigned(nch);
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
  bool attn;  // the attention's code compiled in (config 4 without: what the code alone costs, S22-3)
};
// Config 5: config 0 with half the ring (what the ring's depth buys, S22-7).
constexpr Config kConfigs[] = {{8, 4, 16, true}, {16, 4, 16, true}, {8, 2, 32, true},
                               {16, 2, 32, true}, {8, 4, 16, false}, {8, 4, 8, true}};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));
// The kernel instance of kConfigs[I] (its shared memory set on first use; the size depends only on
// the configuration).
template <int I>
void launch_cfg(const Params& p, size_t smem, int nsm) {
  constexpr Config c = kConfigs[I];
  static const bool ready = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(persist_kernel<c.W, c.CT, c.S, c.attn>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)ready;
  persist_kernel<c.W, c.CT, c.S, c.attn><<<nsm, (c.W + 1) * 32, smem>>>(p);
}
void launch_config(int ci, const Params& p, size_t smem, int nsm) {
  static_assert(kNumConfigs == 6, "one case per configuration");
  switch (ci) {
    case 0: launch_cfg<0>(p, smem, nsm); break;
    case 1: launch_cfg<1>(p, smem, nsm); break;
    case 2: launch_cfg<2>(p, smem, nsm); break;
    case 3: launch_cfg<3>(p, smem, nsm); break;
    case 4: launch_cfg<4>(p, smem, nsm); break;
    default: launch_cfg<5>(p, smem, nsm); break;
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
  bool attn_nomath = false;
  int inflight = 0, pos = 64;
  int split_rows = 64;  // positions per split of a KV head's attention (at most nsm / n_kv splits)
};

int run(const Shape& sh, int ci, const Opts& o, double copy_gbs, int nsm) {
  Params p{};
  p.nomath = o.mode == 1;
  p.nocopy = o.mode == 2;
  p.attn_nomath = o.attn_nomath ? 1 : 0;
  p.nodep = o.nodep ? 1 : 0;
  p.noweights = o.noweights ? 1 : 0;
  p.inflight = o.inflight;
  p.H = sh.H;
  p.nq_hd = sh.nq * sh.hd;
  p.F = sh.F;
  p.L = o.check ? 1 : sh.L;
  p.nsm = nsm;
  const int W = kConfigs[ci].W, CT = kConfigs[ci].CT, S = kConfigs[ci].S;
  const std::string qtag = std::string(o.quant_all ? " qall" : o.quant_act ? " qact" : "") +
                           (kConfigs[ci].attn ? "" : " lean");  // in both report lines
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
  float *qn = nullptr, *kn = nullptr, *apart = nullptr;
  unsigned* kvcnt = nullptr;
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
    if (!attn_fits(CT * kTileBytes) || !kConfigs[ci].attn) {
      std::fprintf(stderr,
                   "error: --attn needs a configuration with the attention's code and slots of %d rows of K and V\n",
                   kAttnRows);
      return 1;
    }
    if (sh.nq != 4 * sh.nkv && sh.nq != 2 * sh.nkv) {
      std::fprintf(stderr, "error: --attn takes 2 or 4 query heads per KV head\n");
      return 1;
    }
    p.nsplit = std::max(1, std::min({(o.pos + o.split_rows) / o.split_rows, nsm / sh.nkv, 32}));
    CUDA_CHECK(cudaMalloc(&apart, size_t(sh.nkv) * p.nsplit * kMaxG * kPartStride * 4));
    CUDA_CHECK(cudaMalloc(&kvcnt, size_t(p.L) * sh.nkv * 4));
    CUDA_CHECK(cudaMemset(kvcnt, 0, size_t(p.L) * sh.nkv * 4));
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
  p.apart = apart;
  p.kvcnt = kvcnt;
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
    for (void* q : {(void*)actq, (void*)attnq, (void*)hq, (void*)ssq, (void*)kc, (void*)vc, (void*)qn, (void*)kn,
                    (void*)apart, (void*)kvcnt})
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
  // Bytes read per token: the weights and, with the attention, the cache rows below pos.
  const double kv_bytes = o.attn ? double(p.L) * sh.nkv * o.pos * 256.0 * 2 : 0.0;
  const double gbs = (double(wbytes) + kv_bytes) / (us_tok * 1e-6) / 1e9;
  std::printf("%-5s W=%2d CT=%d S=%2d F=%2d%s%s%s%s: %8.1f us/token %6.2f us/layer (bytes at copy %5.2f) %7.1f GB/s %5.1f %% of copy\n",
              sh.name, W, CT, S, o.inflight, (qtag + (o.attn ? " attn@" + std::to_string(o.pos) : "")).c_str(),
              o.attn ? (" split " + std::to_string(p.nsplit)).c_str() : "", o.nodep ? " nodep" : "", o.noweights ? " noweights" : o.mode == 1 ? " nomath" : o.mode == 2 ? " nocopy" : "",
              us_tok, us_layer, (double(p.layer_bytes) + kv_bytes / p.L) / (copy_gbs * 1e3), gbs, 100.0 * gbs / copy_gbs);
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
      if (ph == 1) {
        double wsum = 0;
        int wn = 0;
        for (int sm = 0; sm < nsm; ++sm)
          if (const unsigned long long w = hm[(size_t(sm) * kPhases + ph) * kMarks + 7]) {
            wsum += double(w - 1);
            ++wn;
          }
        if (wn) std::printf("  (attention: %d SMs, %.2f us of their chunk loop in chunk waits)\n", wn, wsum / wn / 1e3);
      }
    }
  }
  cleanup();
  return 0;
}

}  // namespace

int run_main(int argc, char** argv) {
  // cuda_bench_persist [--check] [--shape NAME] [--configs I,I..] (kConfigs: consumer warps,
  // tiles per chunk, ring slots, the attention compiled in)
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
    else if (a == "--split-rows" && i + 1 < argc) o.split_rows = std::atoi(argv[++i]);
    else if (a == "--noweights") o.noweights = true;
    else if (a == "--marks") o.marks = true;
    else if (a == "--nomath") o.mode = 1;
    else if (a == "--nocopy") o.mode = 2;
    else if (a == "--attn-nomath") o.attn_nomath = true;
    else if (a == "--shape" && i + 1 < argc) only = argv[++i];
    else if (a == "--configs" && i + 1 < argc) cfgs = list(argv[++i]);
    else if (a == "--inflight" && i + 1 < argc) inflights = list(argv[++i]);
    else {
      std::fprintf(stderr, "usage: cuda_bench_persist [--check] [--quant-act] [--quant-all] [--attn] [--pos P] [--split-rows R] [--attn-nomath] [--nodep] [--noweights] [--nomath] [--nocopy] [--marks] [--shape 0.6b|4b|8b] [--configs 0,1,2,3,4,5] [--inflight 0,4,6]\n");
      return 2;
    }
  }
  for (int c : cfgs)
    if (c < 0 || c >= kNumConfigs) {
      std::fprintf(stderr, "error: --configs takes indices 0..%d\n", kNumConfigs - 1);
      return 2;
    }
  if (o.pos < 1 || o.pos > 8191 || o.split_rows < 1) {
    std::fprintf(stderr, "error: --pos must be 1..8191 and --split-rows positive\n");
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

// Decode attention pass 1 from shared-memory stages (knob LMFUSE_ATTN_STAGED; the register form
// is attn_split_kernel in attention.cuh). Same grid, slices, partial outputs and
// merge kernel as the register form; a different inner layout:
// - K/V rows of the block's slice are copied to shared memory by cp.async in stages of
//   kStagePos positions, kStages stages in flight, the first ones issued before the PDL wait
//   (every row but pos is final then). Rows are padded by 16 bytes, so lanes reading the same
//   16-byte chunk of consecutive rows hit distinct banks.
// - Scores: a lane per position (kAttnWarps / (kStagePos / 32) warps split the dims of each 32
//   positions), q read from shared memory as broadcasts, GMAX heads per K load: no shuffles.
//   Heads past G (G = 3, 5, 6, 7 in a wider instance) run on zero q and are not written, so the
//   inner loops have no branches.
// - Softmax once per stage and head: one warp per head takes the stage's max, rescales, writes
//   the probabilities; each lane keeps its own part of the sum until the end.
// - P.V: a thread per kStagedDpt dims and every NTG-th position of the stage, the heads' accumulators in
//   registers; at the end the NTG position groups are summed in a fixed order.
// - Head split (direct launch only, AttnParams::hpb < G): a block takes hpb of its KV head's G
//   query heads, the instance's GMAX sized for hpb; the other blocks of the KV head read the
//   same rows.
//   Per head the same sums in the same order as the whole group's block when both instances
//   have the same kStagedDpt (GMAX < 8): bitwise equal outputs.
// The outputs are (m, l, o = num / l) per split and head, as the register form writes them (not
// its bits: the reductions run in another order).
// o_proj fusion (OPROJ, knob LMFUSE_ATTN_O_FUSION; direct launch, one query head per block,
// head_dim 128, Q4_0 o_proj): the grid is n_head x R, block (h, r) computes head h's output
// (each of the R blocks of a head the same, from L2), quantizes it like the o_proj GEMV's
// prologue and multiplies it by its o_proj slice (rows r * o_rows.., the head's 128 columns),
// which it copied to shared memory before the PDL wait; the R x n_head partial products meet in
// the layer's accumulator by atomics (their order varies: the sum's last bits do too), which the
// gate/up GEMV adds to the residual. The o_proj launch and its hand-over go.
#pragma once
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/int8_dot.cuh"

namespace lmf::cuda::dev {

constexpr int kStagePos = 64;  // positions per stage
constexpr int kStages = 2;     // stages in flight per block
template <int HD>
constexpr int kStageRow = HD + 8;  // halves per row in shared memory (16-byte pad)
// P.V: dims per thread (registers: G accumulators each).
template <int GMAX>
constexpr int kStagedDpt = GMAX >= 8 ? 2 : 4;
// Dynamic shared memory: the ring of stages, which at the end also holds the position groups'
// accumulators; then q [GMAX][HD], the dim
// parts' partial scores [DSPLIT][GMAX][kStagePos] and the probabilities [kStagePos][GMAX] (all
// floats).
template <int HD, int GMAX>
constexpr size_t attn_staged_ring() {
  const size_t ring = size_t(kStages) * 2 * kStagePos * kStageRow<HD> * sizeof(__half);
  const size_t red = size_t(kAttnWarps * 32 / (HD / kStagedDpt<GMAX>)) * GMAX * HD * sizeof(float);
  return ring > red ? ring : red;
}
template <int HD, int GMAX>
constexpr size_t attn_staged_smem_used() {
  constexpr int dsplit = kAttnWarps / (kStagePos / 32);
  return attn_staged_ring<HD, GMAX>() + sizeof(float) * (size_t(GMAX) * HD + size_t(dsplit) * GMAX * kStagePos +
                                                         size_t(kStagePos) * GMAX);
}
// What a block requests: at least kStagedSmemRequest, more than it uses (75 KB at head_dim 128,
// 4 heads). Measured (docs/PERF.md, S14-7, 8B chain against the register form): 75 KB per block
// 0.94 at pos 8 and 0.97 at pos 64; 87-93 KB 1.00 and 1.03; 105 KB 0.94 and 0.97 again; the
// timeline of the slow sizes shows the gate/up GEMV's blocks placed unevenly (+2.4 µs, down
// resident 4.5 µs before gate/up ends instead of 2). Why the size of two attention blocks per SM
// decides the placement of the GEMV two launches later is not understood; the value is a
// measured setting of this GPU.
constexpr size_t kStagedSmemRequest = 90 * 1024;
template <int HD, int GMAX>
constexpr size_t attn_staged_smem() {
  constexpr size_t used = attn_staged_smem_used<HD, GMAX>();
  return used > kStagedSmemRequest ? used : kStagedSmemRequest;
}

// OPROJ (direct launch, one query head per block, HD = 128): after the stages' region, the
// block's o_proj slice, o_rows x 4 Q4_0 blocks of nibbles (block j of row r at [j][r], so
// consecutive threads read consecutive 16-byte words) and their fp16 scales (8 bytes per row).
constexpr int kOprojBlk = 4;  // Q4_0 blocks of one head's 128 columns
template <int HD, int GMAX>
constexpr size_t attn_oproj_offset() {
  return (attn_staged_smem_used<HD, GMAX>() + 15) / 16 * 16;
}
inline size_t attn_oproj_slice_bytes(int o_rows) { return size_t(o_rows) * (kOprojBlk * 16 + 8); }

// The block's o_proj rows times its head's output (quantized to int8 in sxq: act_quant.cuh's
// layout for kOprojBlk blocks), added to o_acc. The products of gemv.cuh's integer path, per
// row the head's four blocks in order; thread t takes rows t, t + NT, ...
template <int NT>
__device__ __forceinline__ void attn_oproj_rows(const AttnParams& p, const uint4* sw, const uint2* sws,
                                                const uint4* sxq, int tid) {
  uint4 xl[kOprojBlk], xh[kOprojBlk];
  int2 xs[kOprojBlk];
#pragma unroll
  for (int j = 0; j < kOprojBlk; ++j) {
    xl[j] = sxq[j];
    xh[j] = sxq[kOprojBlk + j];
    xs[j] = reinterpret_cast<const int2*>(sxq + 2 * kOprojBlk)[j];
  }
  float* out = p.o_acc + size_t(blockIdx.y) * p.o_rows;
  for (int r = tid; r < p.o_rows; r += NT) {
    const uint2 sc = sws[r];
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kOprojBlk; ++j) {
      const uint32_t w = j < 2 ? sc.x : sc.y;
      const float d = __half2float(__ushort_as_half(uint16_t(j % 2 ? w >> 16 : w & 0xffffu)));
      // sum (q-8)*xq = dot(q, xq) - 8*sum(xq), as gemv.cuh's Frag<Q4_0>::accumulate
      const int s = dot_q4_i8(sw[j * p.o_rows + r], xl[j], xh[j], -8 * xs[j].y);
      acc = fmaf(d * __int_as_float(xs[j].x), float(s), acc);
    }
    atomicAdd(out + r, acc);
  }
}

template <int HD, int GMAX, bool OPROJ = false>
__device__ __forceinline__ void attn_staged_body(const AttnParams& p) {
  constexpr int NT = kAttnWarps * 32;
  constexpr int SP = kStagePos;
  constexpr int RS = kStageRow<HD>;
  constexpr int CH = HD / 8;       // 16-byte chunks per row
  constexpr int NPG = SP / 32;     // 32-position groups per stage
  constexpr int DSPLIT = kAttnWarps / NPG;  // warps (dim parts) per position group
  constexpr int CPP = CH / DSPLIT;          // chunks per part
  constexpr int DPT = kStagedDpt<GMAX>;     // P.V: dims per thread
  constexpr int DQ = HD / DPT;              // P.V: threads per position
  constexpr int NTG = NT / DQ;              // P.V: position groups
  constexpr int HW = (GMAX + kAttnWarps - 1) / kAttnWarps;  // softmax heads per warp
  constexpr int RPI = NT / CH;              // copy: rows per pass of the block
  static_assert(NPG * DSPLIT == kAttnWarps && CH % DSPLIT == 0 && NT % DQ == 0 && SP % RPI == 0, "layout");
  // OPROJ: one head per block, one output element per thread (a warp quantizes a 32-block).
  static_assert(!OPROJ || (GMAX == 1 && HD == NT && HD == 32 * kOprojBlk), "o_proj fusion shape");
  extern __shared__ __align__(16) unsigned char attn_ring[];  // [kStages][K, V][SP][RS] halves, ...
  // ... then this block's query heads (not scaled; 0 past G), the partial scores, the probabilities.
  auto sq = reinterpret_cast<float(*)[HD]>(attn_ring + attn_staged_ring<HD, GMAX>());
  auto ss = reinterpret_cast<float(*)[GMAX][SP]>(&sq[GMAX][0]);
  auto sp = reinterpret_cast<float(*)[GMAX]>(&ss[DSPLIT][0][0]);
  __shared__ float scorr[GMAX], sl[GMAX], smx[GMAX];

  tl_start(p.tl);
  pdl_trigger_early(p.early);  // before the position's load and the copies
  const int G = p.n_head / p.n_kv;
  const int HB = p.hpb;               // query heads of this block: G, or fewer (head split)
  const int h0 = int(blockIdx.x) * HB;  // its first query head
  const int kvh = h0 / G, split = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const AttnSlice bs = attn_block_slice(p, split);
  const int L = bs.L, start = bs.start, end = bs.end;
  const bool direct = bs.direct;  // the only split (a direct launch): write the output
  if (start >= L) {  // unused split: the merge does not read it
    tl_end(p.tl);
    return;
  }
  const int pos = L - 1;
  const bool has_pos = start <= pos && pos < end;  // the row at pos is filled after the wait
  const int n_stage = (end - start + SP - 1) / SP;
  __half* ring = reinterpret_cast<__half*>(attn_ring);
  auto stage_rows = [&](int i, int kv) { return ring + size_t((i % kStages) * 2 + kv) * SP * RS; };
  // This thread's 16-byte chunk of rows r0, r0 + RPI, ... of every stage.
  const int c0 = tid % CH, r0 = tid / CH;
  const __half* Kt = p.k + (size_t(kvh) * p.n_ctx + r0) * HD + c0 * 8;
  const __half* Vt = p.v + (size_t(kvh) * p.n_ctx + r0) * HD + c0 * 8;
  // Stage i's rows but the one at pos, as one commit group (an empty group past the slice, so
  // the wait below always counts kStages - 1 newer groups).
  auto issue = [&](int i) {
    if (i < n_stage) {
      const int a = start + i * SP, n = min(SP, end - a);
      __half* dk = stage_rows(i, 0) + r0 * RS + c0 * 8;
      __half* dv = stage_rows(i, 1) + r0 * RS + c0 * 8;
      const __half* sk = Kt + size_t(a) * HD;
      const __half* sv = Vt + size_t(a) * HD;
#pragma unroll
      for (int j = 0; j < SP / RPI; ++j) {
        const int r = r0 + j * RPI;
        if (r < n && a + r != pos) {
          cp_async16(dk + j * RPI * RS, sk + j * RPI * HD);
          cp_async16(dv + j * RPI * RS, sv + j * RPI * HD);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages; ++i) issue(i);
  // OPROJ: the o_proj slice, one commit group after the first stages, before the wait (issued
  // after it, the slice arrives after the attention: 8B 534 vs 549 t/s, docs/PERF.md S23-1c).
  uint4* sw = reinterpret_cast<uint4*>(attn_ring + attn_oproj_offset<HD, GMAX>());
  uint2* sws = reinterpret_cast<uint2*>(sw + kOprojBlk * p.o_rows);
  __shared__ uint4 sxq[OPROJ ? 2 * kOprojBlk + 2 : 1];  // head output as int8: lo, hi, {dx, sum}
  if constexpr (OPROJ) {
    const size_t stride = size_t(p.wo_nblk) * 16;
    const uint8_t* wq = p.wo_q + size_t(blockIdx.y) * p.o_rows * stride + size_t(h0) * kOprojBlk * 16;
    for (int i = tid; i < kOprojBlk * p.o_rows; i += NT) {  // 4 threads per row: 64 bytes
      const int r = i / kOprojBlk, j = i % kOprojBlk;
      cp_async16(sw + j * p.o_rows + r, wq + size_t(r) * stride + j * 16);
    }
    const uint8_t* ws = p.wo_s + (size_t(blockIdx.y) * p.o_rows * p.wo_nblk + size_t(h0) * kOprojBlk) * 2;
    for (int r = tid; r < p.o_rows; r += NT) cp_async8(sws + r, ws + size_t(r) * p.wo_nblk * 2);
    cp_async_commit();
  }

  pdl_wait_trigger_late(p.early);  // q and the cache row at pos come from the previous kernel
  tl_waited_phase(p.tl);
  if constexpr (OPROJ) {  // the previous layer's accumulator: its reader (gate/up) has ended
    const int nb = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
    for (int i = b * NT + tid; i < p.o_zero_n; i += nb * NT) p.o_zero[i] = 0.f;
  }
  // The row at pos (written by the QKV epilogue kernel) issued with q's loads, so the stage that
  // holds it does not wait for L2 a second time.
  uint4 pos_val = make_uint4(0, 0, 0, 0);
  if (has_pos && tid < 2 * CH)
    pos_val = __ldcg(reinterpret_cast<const uint4*>((tid / CH ? p.v : p.k) + (size_t(kvh) * p.n_ctx + pos) * HD +
                                                    (tid % CH) * 8));
  {
    const float4* src = reinterpret_cast<const float4*>(p.q + size_t(h0) * HD);
    for (int i = tid; i < HB * HD / 4; i += NT) reinterpret_cast<float4*>(&sq[0][0])[i] = src[i];
  }
  for (int i = HB * HD + tid; i < GMAX * HD; i += NT) (&sq[0][0])[i] = 0.f;  // heads past HB
  __syncthreads();

  float m_run[HW], lpart[HW];  // softmax warps: heads warp + kAttnWarps * j
#pragma unroll
  for (int j = 0; j < HW; ++j) {
    m_run[j] = -INFINITY;
    lpart[j] = 0.f;
  }
  const int dq = tid % DQ, tg = tid / DQ;  // P.V: dims DPT * dq.., positions tg, tg + NTG, ...
  float acc[GMAX][DPT];
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
#pragma unroll
    for (int e = 0; e < DPT; ++e) acc[g][e] = 0.f;
  const int pg = warp % NPG, part = warp / NPG;  // scores

  for (int i = 0; i < n_stage; ++i) {
    const int a = start + i * SP, n = min(SP, end - a);
    __half* sk = stage_rows(i, 0);
    __half* sv = stage_rows(i, 1);
    // Stage i's group; with OPROJ the weights' group was committed after the first kStages
    // stages, so it is one of the newer groups while i < kStages and older after.
    if (OPROJ && i < kStages) cp_async_wait<kStages>();
    else cp_async_wait<kStages - 1>();
    if (has_pos && pos < a + n && tid < 2 * CH) {  // the row at pos, now final
      const int kv = tid / CH, c = tid % CH;
      *reinterpret_cast<uint4*>((kv ? sv : sk) + (pos - a) * RS + c * 8) = pos_val;
    }
    __syncthreads();
    if (pg * 32 < n) {  // warp-uniform: scores of positions a + pg * 32 + lane, this warp's dims
      float s[GMAX];
#pragma unroll
      for (int g = 0; g < GMAX; ++g) s[g] = 0.f;
      const __half* row = sk + (pg * 32 + lane) * RS + part * CPP * 8;
#pragma unroll
      for (int c = 0; c < CPP; ++c) {
        const uint4 raw = *reinterpret_cast<const uint4*>(row + c * 8);
        const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
        float kf[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h2[e]);
          kf[2 * e] = f.x;
          kf[2 * e + 1] = f.y;
        }
#pragma unroll
        for (int g = 0; g < GMAX; ++g) {
          const float4* q4 = reinterpret_cast<const float4*>(&sq[g][(part * CPP + c) * 8]);
          const float4 qa = q4[0], qb = q4[1];
          const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) s[g] = fmaf(qv[e], kf[e], s[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < GMAX; ++g) ss[part][g][pg * 32 + lane] = s[g];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < HW; ++j) {  // softmax of head g over the stage
      const int g = warp + kAttnWarps * j;
      if (g >= GMAX) break;
      float sc[NPG], mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < NPG; ++k) {
        const int t = lane + 32 * k;
        float v = -INFINITY;
        if (t < n) {
          v = 0.f;
#pragma unroll
          for (int d = 0; d < DSPLIT; ++d) v += ss[d][g][t];
          v *= p.scale;
        }
        sc[k] = v;
        mx = fmaxf(mx, v);
      }
      mx = warp_max(mx);
      const float mn = fmaxf(m_run[j], mx);
      const float corr = __expf(m_run[j] - mn);  // m = -inf -> 0
      float l = lpart[j] * corr;
#pragma unroll
      for (int k = 0; k < NPG; ++k) {
        const int t = lane + 32 * k;
        const float pe = t < n ? __expf(sc[k] - mn) : 0.f;
        sp[t][g] = pe;
        l += pe;
      }
      lpart[j] = l;
      m_run[j] = mn;
      if (lane == 0) scorr[g] = corr;
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GMAX; ++g) {
      const float c = scorr[g];
#pragma unroll
      for (int e = 0; e < DPT; ++e) acc[g][e] *= c;
    }
#pragma unroll 4
    for (int t = tg; t < n; t += NTG) {
      float v[DPT];
      {
        const __half2* h2 = reinterpret_cast<const __half2*>(sv + t * RS + DPT * dq);
        __half2 hv[DPT / 2];
        if constexpr (DPT == 4) {
          const uint2 raw = *reinterpret_cast<const uint2*>(h2);
          hv[0] = *reinterpret_cast<const __half2*>(&raw.x);
          hv[DPT / 2 - 1] = *reinterpret_cast<const __half2*>(&raw.y);
        } else {
          hv[0] = h2[0];
        }
#pragma unroll
        for (int e = 0; e < DPT / 2; ++e) {
          const float2 f = __half22float2(hv[e]);
          v[2 * e] = f.x;
          v[2 * e + 1] = f.y;
        }
      }
      float pe[GMAX];
      if constexpr (GMAX % 4 == 0) {
#pragma unroll
        for (int g = 0; g < GMAX; g += 4) {
          const float4 p4 = *reinterpret_cast<const float4*>(&sp[t][g]);
          pe[g] = p4.x;
          pe[g + 1] = p4.y;
          pe[g + 2] = p4.z;
          pe[g + 3] = p4.w;
        }
      } else {
#pragma unroll
        for (int g = 0; g < GMAX; ++g) pe[g] = sp[t][g];
      }
#pragma unroll
      for (int g = 0; g < GMAX; ++g)
#pragma unroll
        for (int e = 0; e < DPT; ++e) acc[g][e] = fmaf(pe[g], v[e], acc[g][e]);
    }
    __syncthreads();  // the stage's slot, scores and probabilities are free
    issue(i + kStages);
  }
  tl_mark(p.tl, 0);  // this block through its positions
#pragma unroll
  for (int j = 0; j < HW; ++j) {
    const int g = warp + kAttnWarps * j;
    if (g >= GMAX) break;
    const float l = warp_sum(lpart[j]);
    if (lane == 0) {
      sl[g] = l;
      smx[g] = m_run[j];
    }
  }
  // The position groups' accumulators, in the ring (no copy is in flight: every stage of the
  // slice has been waited for, the later groups are empty).
  float* red = reinterpret_cast<float*>(attn_ring);  // [NTG][GMAX][HD]
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
#pragma unroll
    for (int e = 0; e < DPT; ++e) red[(tg * GMAX + g) * HD + DPT * dq + e] = acc[g][e];
  __syncthreads();
  tl_mark(p.tl, 1);  // partials in shared memory
  for (int idx = tid; idx < HB * HD; idx += NT) {
    const int g = idx / HD, d = idx % HD;
    float num = 0.f;
#pragma unroll
    for (int k = 0; k < NTG; ++k) num += red[(k * GMAX + g) * HD + d];
    const float o = num / sl[g];  // l >= 1: the slice's largest score adds e^0
    const int h = h0 + g;
    if (direct) {  // the only split: its normalized result is the output (the merge's copy)
      attn_direct_store<HD>(p, h, d, o);
      if constexpr (OPROJ) quant_warp_store(o, reinterpret_cast<float4*>(sxq), kOprojBlk, d / 32, d & 31);
      continue;
    }
    const size_t ps = size_t(h) * p.n_splits + split;
    p.part_o[ps * HD + d] = o;
    if (d == 0) {
      p.part_ml[ps * 2] = smx[g];
      p.part_ml[ps * 2 + 1] = sl[g];
    }
  }
  if constexpr (OPROJ) {
    cp_async_wait<0>();
    __syncthreads();  // the slice and sxq
    attn_oproj_rows<NT>(p, sw, sws, sxq, tid);
  }
  tl_end(p.tl);
}

template <int HD, int GMAX, bool OPROJ = false>
__global__ void __launch_bounds__(kAttnWarps * 32, 2) attn_staged_kernel(const __grid_constant__ AttnParams p) {
  attn_staged_body<HD, GMAX, OPROJ>(p);
}

}  // namespace lmf::cuda::dev

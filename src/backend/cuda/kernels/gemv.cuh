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
// Shared x, F16/BF16. x (after the prologue) is staged as 32-float blocks of 8 float4 slots,
// slot f of block c stored at c*8 + (f ^ (c & 7)): the 8 lanes of a quarter-warp read 8
// different 16-byte bank groups (conflict-free).
//
// Shared x, Q4_0/Q4_1/Q8_0 (integer dot products). x is quantized per block of 32 to int8 the
// way the CPU backend does (src/backend/cpu/act_quant.h: amax = max|x|, id = 127/amax,
// q = rne(x*id), dx = amax/127), so the inner loop is byte dot products (dp4a), ~0.5 instruction
// per weight instead of ~3 for unpack + fp32 FMA. Every block quantizes the whole vector for
// itself (1-25K elements: cheap, and it keeps the Norm/AddNorm prologue fusion). Two planes of
// uint4, lo[c] = bytes 0..15 and hi[c] = bytes 16..31 of block c, so lane l reading block 32g+l
// reads consecutive 16-byte words (conflict-free), then per block {dx, sum(q)} as an int2.
// A Q4 weight word (bytes 4w..4w+3, GGUF order) holds elements 4w..4w+3 in its low nibbles and
// 16+4w..16+4w+3 in its high nibbles: the low nibbles meet x word w of lo, the high ones x word
// w of hi, so the GGUF byte order needs no repacking.
//
// RMSNorm prologue: x = (h * rsqrt(mean(h^2)+eps)) * gamma, computed exactly as rmsnorm_rows does
// (common.cuh: same thread count, summation order and float ops), then quantized like any x: the
// fused and unfused paths give bit-identical outputs. Two passes over h (sum of squares, then
// scale + stage); the second pass reads h from L1/L2.
//
// Split-K inside a block (ksplit). Short-and-wide shapes (o/down at 8B: 1024 row groups for
// ~2112 warp slots) leave half the warps idle and so half the loads in flight. With ksplit = k,
// k warps of a block share a row group, warp `sub` taking column batches sub, sub+k, ...; at the
// end of the row group the k partial sums meet in shared memory (named barrier per warp group)
// and are added in sub order by warp sub 0, which runs the epilogue. The order depends only on
// the shape (the host picks k from rows/cols/type and, for k = 3, the block width), so results are
// deterministic. Which shapes split: set_gemv_split_k and set_gemv_split3 in kernels.h; k = 1 for
// the others. k is 1, 2, 4 or 8, or 3 in 16-warp blocks (the last warp then idles): the warp split
// is a multiply and a shift (gemv_ksplit_mul), no division; warp sub 0 adds the others' partials
// in a fixed loop of at most 7.
//
// Row sums. A warp's 4 accumulators are reduced in 6 shuffles (warp_sum_rows4: the values per
// lane halve at xor 16 and 8), after which lanes 8r..8r+7 hold row r: lane 8r runs the
// epilogue for row r.
//
// Code size. Every launch runs cold: the SM keeps less than 64 KB of code between launches and
// cold code costs ~0.4 ns per instruction (docs/PERF.md S29-2), and code that is skipped still
// costs (S29-3). So the kernel is written for few instructions as much as for few cycles: a
// fragment's rows are addressed from one base pointer and a stride, the split-K sum is a fixed
// loop (S30-1: -28 % SASS, +4.6-7.6 % on the decode chains), the row sums take 6 shuffles
// instead of 20 and the warp split no division (S30-2: -11 % more, +1.5-2.1 %).
#pragma once
#include <cuda_fp16.h>

#include "backend/cuda/gemv_grid.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/act_quant.cuh"
#include "backend/cuda/kernels/int8_dot.cuh"
#include "backend/cuda/kernels/pdl_launch.cuh"
#include "util/round_fadd.h"

// The measurement-only builds of this kernel (-DLMFUSE_GEMV_STAGE_MARKS timeline marks,
// -DLMFUSE_GEMV_NO_MATH / _XQ_NO_TAIL upper bounds, the COMPACT_STAGE / SPLIT_STAGE /
// COMPACT_ONE_STEP A/B forms; docs/PERF.md S27-S31, S45-3) left the production kernel in session
// 51 (issue 52): the code is at commit 9861f5d. The default build of each is what remains: the
// narrow instances come in two stage forms, SF = 1 with only the compact staging (one step per
// batch: such a shape has cols <= 1024) and SF = 2 with only the batched one, picked per launch by
// the host (gemv_compact_stage).

namespace lmf::cuda::dev {

constexpr int kRows = 4;  // rows per warp (row group)
// Quantized types run the integer path with <= 128 registers, so two blocks (16 warps) fit an
// SM: twice the loads in flight and the 8B shapes' row groups in one round (qkv: 1536 groups vs
// 2112 warps). F16/BF16 keep 64 B per lane per row in registers: one block per SM.
template <DType T>
constexpr bool kInt8x = int8_dot(T);  // kernels.h: the one list of integer-dot types
// Warps per block W. The integer-dot types run as 8 (two blocks per SM) or 16 (one block of 16
// warps per SM, "wide": the same warps and loads in flight, but x staged once per SM instead of
// twice; chosen per launch by set_gemv_wide, docs/PERF.md session 12). F16/BF16: always 8.
constexpr int kNarrowWarps = 8, kWideWarps = 16;
template <DType T, int W>
constexpr int kGemvWarps = kInt8x<T> ? W : kNarrowWarps;
template <DType T, int W>
constexpr int kGemvThreads = kGemvWarps<T, W> * 32;
template <DType T, int W>
constexpr int kMinBlocks = kInt8x<T> ? 16 / W : 1;
static_assert(kRows % 2 == 0, "SiluMul pairs rows inside a row group");
// SiluMulQ: row groups whose silu*mul outputs make one 32-block of y (kRows / 2 outputs each).
constexpr int kRowGroupsPerXqBlock = 64 / kRows;
// Activation codes of the integer-dot types: XB = 8 (int8, the default) or 16 (knob cuda_act16:
// the CPU backend's 16-bit rule, staged as four byte planes: low bytes of elements 0-15, 16-31,
// then their high bytes), then int2 {dx, sum q} per block.
template <int XB>
constexpr int kXPlanes = XB == 16 ? 4 : 2;
template <int XB>
constexpr float kXMax = XB == 16 ? 32767.f : 127.f;

template <DType T>
struct WTraits;
template <DType T>
struct Frag;
// P 16-byte pieces per block, scale_bytes of block scale, HB bytes of high code bits per block
// (K-quants, after the row's tiles), KQ: a K-quant (block records of 2 bytes plus one 4-byte
// super-block record per 8 blocks; kernels.h).
template <int P_, int SB_, int HB_ = 0, bool KQ_ = false>
struct WTraitsOf {
  static constexpr int P = P_;
  static constexpr int scale_bytes = SB_;
  static constexpr int HB = HB_;
  static constexpr bool KQ = KQ_;
};
template <>
struct WTraits<DType::Q4_0> : WTraitsOf<1, 2> {};
template <>
struct WTraits<DType::Q4_1> : WTraitsOf<1, 4> {};
template <>
struct WTraits<DType::Q8_0> : WTraitsOf<2, 2> {};
template <>
struct WTraits<DType::F16> : WTraitsOf<4, 0> {};
template <>
struct WTraits<DType::BF16> : WTraitsOf<4, 0> {};
template <>
struct WTraits<DType::Q4_K> : WTraitsOf<1, 2, 0, true> {};
template <>
struct WTraits<DType::Q5_K> : WTraitsOf<1, 2, 4, true> {};
template <>
struct WTraits<DType::Q6_K> : WTraitsOf<1, 2, 8, true> {};

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
  int ksplit;  // warps per row group: 1, 2, 3, 4 or 8 (gemv_ksplit)
  int ks_mul;  // gemv_ksplit_mul(ksplit)
  unsigned long long* tl;  // launch timeline slot or null
  uint8_t* xq;             // SiluMulQ: written; Int8 prologue: read
  int spare_sms;           // host: SMs the grid leaves free (GemvArgs::spare_sms); not read by the kernel
  bool spare_same_rounds;  // host: GemvArgs::spare_same_rounds; not read by the kernel
  Tri coresident;          // host: GemvArgs::coresident; not read by the kernel
  int fit_sms;             // host: GemvArgs::fit_sms; not read by the kernel
};

// Steps loaded together per row group: 2 for the 4-bit types (one piece per step), else 1, so a
// lane has 128-256 bytes of weights in flight per batch (and the next batch behind it). K-quants
// (a piece, a block and a super-block record, Q5_K/Q6_K 4-8 bytes of high bits per row): 1, so
// that two batches fit the register budget (Q4_K with 2 spilled 20-116 bytes per instance); 88-120
// bytes per lane and batch, 2 batches x 16 warps: ~90 KB in flight per SM, far above the ~15 KB
// that the memory's latency x bandwidth asks of each SM.
template <DType T>
constexpr int kSteps = WTraits<T>::P == 1 && !WTraits<T>::KQ ? 2 : 1;

// Warps per row group for a shape (host side; see the header comment and gemv_ksplit_rule),
// assuming the narrow block's occupancy kMinBlocks, not the instance's, so every prologue/epilogue
// variant and both block widths of a shape sum in the same order, but where a grid of wide3_blocks
// 16-warp blocks (set_gemv_split3; 0 = none) takes 3. (Until session 19 the test was on k before
// doubling, so 4B down got k = 4: 2,560 warps for 2,112 slots, a second round.)
template <DType T>
inline int gemv_ksplit(int rows, int cols, int sms, int wide3_blocks) {
  const int n_rg = (rows + kRows - 1) / kRows;
  const int ngroups = (cols / 32 + 31) / 32;
  return gemv_ksplit_rule(n_rg, ngroups, kSteps<T>, sms, kMinBlocks<T, kNarrowWarps> * kGemvWarps<T, kNarrowWarps>,
                          kInt8x<T> ? wide3_blocks : 0);
}
// slot = warp / k and the block's slots W / k as (x * m) >> 5 (exact for x <= 16): k = 3 is not a
// power of two, and a division costs code in every instance (docs/PERF.md S30-2).
constexpr int gemv_ksplit_mul(int k) { return k == 3 ? 11 : 32 / k; }

__device__ __forceinline__ void named_barrier(int id, int nthreads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
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

// The warp sums of a row group's 4 accumulators in 6 shuffles: at xor 16 lanes 0-15 keep rows
// 0-1 and lanes 16-31 rows 2-3 (each adds the partner's half), at xor 8 each lane keeps one
// row, then a plain butterfly. Lanes 8r..8r+7 end with the sum of row r = (lane >> 3) & 3.
__device__ __forceinline__ float warp_sum_rows4(const float (&a)[kRows], int lane) {
  static_assert(kRows == 4, "rows 0-1 / 2-3 halves");
  const bool h16 = lane & 16, h8 = lane & 8;
  float k0 = h16 ? a[2] : a[0], k1 = h16 ? a[3] : a[1];
  const float s0 = h16 ? a[0] : a[2], s1 = h16 ? a[1] : a[3];
  k0 += __shfl_xor_sync(0xffffffffu, s0, 16);
  k1 += __shfl_xor_sync(0xffffffffu, s1, 16);
  float k = h8 ? k1 : k0;
  k += __shfl_xor_sync(0xffffffffu, h8 ? k0 : k1, 8);
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) k += __shfl_xor_sync(0xffffffffu, k, o);
  return k;
}

// One step's weights for a row group: kRows rows x P pieces, plus the block scales.
template <DType T>
struct Frag {
  static constexpr int P = WTraits<T>::P;
  static constexpr int HB = WTraits<T>::HB;
  static constexpr bool KQ = WTraits<T>::KQ;
  uint4 w[kRows][P];
  uint32_t sc[kRows];
  uint32_t sd[KQ ? kRows : 1];  // K-quants: the super-block record {fp16 d, fp16 dmin}
  uint2 hb[HB ? kRows : 1];     // Q5_K (.x) / Q6_K: the block's high code bits

  __device__ __forceinline__ void load(const GemvParams& p, int rg, int g, int nblk, int lane, uint64_t pol) {
    const int gb = min(32, nblk - 32 * g);
    const size_t row_stride = size_t(nblk) * (P * 16 + HB);
    const int c = 32 * g + lane;
    // Row r of the group at wq + r * row_stride (piece pc at + pc * gb * 16), its scale at
    // ws + r * (a row's scale bytes): one 64-bit product per fragment, then adds. K-quants: the
    // high bits after the row's tiles, the super-block record after the row's block records.
    constexpr int SB = WTraits<T>::scale_bytes;
    const size_t s_stride = KQ ? size_t(nblk) * 2 + size_t(nblk >> 3) * 4 : size_t(nblk) * SB;
    const int row0 = rg * kRows;
    const uint8_t* wq = p.q + size_t(row0) * row_stride + (size_t(g) * 32 * P + lane) * 16;
    const uint8_t* ws = p.scales + size_t(row0) * s_stride + size_t(c) * SB;
    const uint8_t* wsd = p.scales + size_t(row0) * s_stride + size_t(nblk) * 2 + size_t(c >> 3) * 4;  // KQ only
    const uint8_t* wh = p.q + size_t(row0) * row_stride + size_t(nblk) * 16 + size_t(c) * HB;  // HB only
    const bool lane_ok = lane < gb;
    const int rows_left = p.rows - row0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (lane_ok && r < rows_left) {
#pragma unroll
        for (int pc = 0; pc < P; ++pc) w[r][pc] = ld_stream16(wq + pc * gb * 16, pol);
        if constexpr (SB == 2)
          sc[r] = ld_stream2(ws, pol);
        else if constexpr (SB == 4)
          sc[r] = ld_stream4(ws, pol);
        if constexpr (KQ) sd[r] = ld_stream4(wsd, pol);
        if constexpr (HB == 8) hb[r] = ld_stream8(wh, pol);
        else if constexpr (HB == 4) hb[r].x = ld_stream4(wh, pol);
      } else {
#pragma unroll
        for (int pc = 0; pc < P; ++pc) w[r][pc] = make_uint4(0, 0, 0, 0);
        sc[r] = 0;  // zero scale: the row/block contributes nothing
        if constexpr (KQ) sd[r] = 0;
        if constexpr (HB) hb[r] = make_uint2(0, 0);
      }
      wq += row_stride;
      ws += s_stride;
      if constexpr (KQ) wsd += s_stride;
      if constexpr (HB) wh += row_stride;
    }
  }

  // K-quants: row r's contribution for block c (codes x of the block as the planes give them).
  // Q4_K/Q5_K: (d*sc)*dx * sum q*xq - (dmin*m)*dx * sum xq; Q6_K: d*dx * sum over its two
  // sub-blocks of scale * sum (q-32)*xq, the -32 as -32 * (the sub-block's code sum).
  template <int XB>
  __device__ __forceinline__ float kq_row(int r, float acc, float dx, int xsum, int xsum_lo, const uint4& xl,
                                          const uint4& xh, const uint4 (&x4)[4]) const {
    const float d = __half2float(__ushort_as_half(uint16_t(sd[r] & 0xffffu)));
    if constexpr (T == DType::Q6_K) {
      int2 s;
      if constexpr (XB == 16) s = dot_q6_i16(w[r][0], hb[r], x4);
      else s = dot_q6_x8<true>(w[r][0], hb[r], xl, xh);
      const int sa = s.x - 32 * xsum_lo, sb = s.y - 32 * (xsum - xsum_lo);
      const float ka = float(int8_t(sc[r] & 0xffu)), kb = float(int8_t((sc[r] >> 8) & 0xffu));
      return fmaf(d * dx, fmaf(ka, float(sa), kb * float(sb)), acc);
    } else {
      const float dm = __half2float(__ushort_as_half(uint16_t(sd[r] >> 16)));
      const float ds = d * float(sc[r] & 0xffu), mn = dm * float((sc[r] >> 8) & 0xffu);
      int s;
      if constexpr (T == DType::Q5_K) {
        if constexpr (XB == 16) s = dot_q5_i16(w[r][0], hb[r].x, x4, 0);
        else s = dot_q5_x8<true>(w[r][0], hb[r].x, xl, xh, 0);
      } else {
        if constexpr (XB == 16) s = dot_q4_i16(w[r][0], x4, 0);
        else s = dot_q4_i8(w[r][0], xl, xh, 0);
      }
      return fmaf(ds * dx, float(s), fmaf(-mn * dx, float(xsum), acc));
    }
  }

  // F16/BF16: xs = float x slots (swizzled). Quantized types: xs = the code planes and scales
  // (XB = 8: two int8 planes; XB = 16: four byte planes of 16-bit codes, kXPlanes).
  template <int XB = 8>
  __device__ __forceinline__ void accumulate(float (&acc)[kRows], const float4* xs4, int g, int nblk,
                                             int lane, bool fold = true) const {
    const int gb = min(32, nblk - 32 * g);
    if (lane >= gb) return;
    const int c = 32 * g + lane;
    if constexpr (kInt8x<T>) {
      (void)fold;
      const uint4* xq = reinterpret_cast<const uint4*>(xs4);
      const int2 xsc = reinterpret_cast<const int2*>(xq + kXPlanes<XB> * size_t(nblk))[c];
      const float dx = __int_as_float(xsc.x);
      if constexpr (KQ) {
        uint4 x4[4];
        uint4 xl, xh;
        int xlo = 0;  // Q6_K: the code sum of elements 0-15
        if constexpr (XB == 16) {
          x4[0] = xq[c], x4[1] = xq[nblk + c], x4[2] = xq[2 * nblk + c], x4[3] = xq[3 * nblk + c];
          xl = xh = x4[0];
          if constexpr (T == DType::Q6_K) xlo = 256 * sum_x16<true>(x4[2]) + sum_x16<false>(x4[0]);
        } else {
          xl = xq[c], xh = xq[nblk + c];
          x4[0] = x4[1] = x4[2] = x4[3] = xl;
          if constexpr (T == DType::Q6_K) xlo = sum_x16<true>(xl);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = kq_row<XB>(r, acc[r], dx, xsc.y, xlo, xl, xh, x4);
        return;
      }
      if constexpr (XB == 16) {
        const uint4 x4[4] = {xq[c], xq[nblk + c], xq[2 * nblk + c], xq[3 * nblk + c]};
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float d = __half2float(__ushort_as_half(uint16_t(sc[r] & 0xffffu)));
          if constexpr (T == DType::Q4_0) {
            acc[r] = fmaf(d * dx, float(dot_q4_i16(w[r][0], x4, -8 * xsc.y)), acc[r]);
          } else if constexpr (T == DType::Q4_1) {
            const float m = __half2float(__ushort_as_half(uint16_t(sc[r] >> 16)));
            acc[r] = fmaf(d * dx, float(dot_q4_i16(w[r][0], x4, 0)), fmaf(m * dx, float(xsc.y), acc[r]));
          } else if constexpr (T == DType::Q8_0) {
            acc[r] = fmaf(d * dx, float(dot_q8_i16(w[r], x4)), acc[r]);
          }
        }
        return;
      }
      const uint4 xl = xq[c], xh = xq[nblk + c];
      // (float(s) by I2F: starting the dot at the bits of 1.5 * 2^23 and one FSUB instead was
      // bit-identical and 0.6-1.6 % slower, docs/PERF.md S40-3)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float d = __half2float(__ushort_as_half(uint16_t(sc[r] & 0xffffu)));
        if constexpr (T == DType::Q4_0) {
          // sum (q-8)*xq = dot(q, xq) - 8*sum(xq): the dot starts at -8*sum(xq).
          const int s = dot_q4_i8(w[r][0], xl, xh, -8 * xsc.y);
          acc[r] = fmaf(d * dx, float(s), acc[r]);
        } else if constexpr (T == DType::Q4_1) {
          const float m = __half2float(__ushort_as_half(uint16_t(sc[r] >> 16)));
          const int s = dot_q4_i8(w[r][0], xl, xh, 0);
          acc[r] = fmaf(d * dx, float(s), fmaf(m * dx, float(xsc.y), acc[r]));
        } else if constexpr (T == DType::Q8_0) {
          acc[r] = fmaf(d * dx, float(dot_q8_i8(w[r], xl, xh)), acc[r]);
        }
      }
    } else {
      float4 x[8];  // [32] x of block c
#pragma unroll
      for (int f = 0; f < 8; ++f) x[f] = xs4[c * 8 + (f ^ (c & 7))];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] += dot_f16x<T>(w[r], x);
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
  // Pair j of this lane is i = lane + 32j; head_dim 32 has 16 pairs (lanes 16..31 idle).
  const int np = (half_d + 31) / 32;
  const bool lane_ok = lane < half_d;
#pragma unroll
  for (int j = 0; j < kMaxPairs; ++j) {
    if (j < np && lane_ok) {
      const int i = lane + 32 * j;
      ia[j] = q.rope == RopeStyle::NeoX ? i : 2 * i;
      ib[j] = q.rope == RopeStyle::NeoX ? i + half_d : 2 * i + 1;
      va[j] = __ldcg(src + ia[j]);  // L2: written by other blocks in this launch
      vb[j] = __ldcg(src + ib[j]);
    }
  }
  // Norm and RoPE in the unfused kernels' arithmetic (common.cuh): bit-identical q and k.
  if (gamma) {
    const float ss = head_sumsq_warp<true>(reinterpret_cast<const float4*>(src), hd, lane);
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np && lane_ok) {
        va[j] = head_norm(va[j], ss, hd, q.norm_eps, gamma[ia[j]]);
        vb[j] = head_norm(vb[j], ss, hd, q.norm_eps, gamma[ib[j]]);
      }
  }
  if (is_q || is_k) {
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np && lane_ok) {
        float c, s;
        rope_cs(pos, lane + 32 * j, hd, q.theta, q.rope_ff, &c, &s);
        const float a = rope_rotate(va[j], vb[j], c, s, true), b = rope_rotate(vb[j], va[j], c, s, false);
        va[j] = a;
        vb[j] = b;
      }
  }
  if (is_q) {
    float* dst = q.q_out + size_t(head) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np && lane_ok) {
        dst[ia[j]] = va[j];
        dst[ib[j]] = vb[j];
      }
  } else {
    const int kvh = is_k ? head - q.n_head : head - q.n_head - q.n_kv_head;
    __half* dst = reinterpret_cast<__half*>(is_k ? q.k_cache : q.v_cache) +
                  (size_t(kvh) * q.n_ctx + pos) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPairs; ++j)
      if (j < np && lane_ok) {
        dst[ia[j]] = __float2half_rn(va[j]);
        dst[ib[j]] = __float2half_rn(vb[j]);
      }
  }
}

// SiluMulQ: 32-block hb of y (written by kRowGroupsPerXqBlock row groups, now complete) quantized into p.xq by
// one warp, lanes 0-7 holding it as stage_x's lanes hold a block of x: the same codes as the
// consumer's own staging of y would give.
__device__ __forceinline__ void xq_quantize_block(const GemvParams& p, int hb, int lane) {
  const int nblk = (p.rows / 2) >> 5;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (lane < 8) v = __ldcg(reinterpret_cast<const float4*>(p.y + size_t(hb) * 32) + lane);
  const QuantWord w = quant_x4(v);
  if (lane < 8) store_quant_word(reinterpret_cast<float4*>(p.xq), nblk, hb, lane, w);
}

// Whether the kept staging (SF = 3) serves a shape with the Norm prologue: x of at most 4 float4
// per norm thread in a wide block, two per thread of the 16-warp block (hidden size <= 4096); at
// most 2 in a narrow block, whose threads are the norm threads (hidden size <= 2048; the compact
// form, tested first, takes those up to 1024).
template <int W>
__host__ __device__ constexpr bool gemv_kept_stage(int cols) {
  return (cols >> 2) <= (W == kWideWarps ? 4 : 2) * kNormThreads;
}

// The (type, prologue, epilogue) instances that have the kept stage form (8-bit codes): every Norm
// pair of the allow-list, whatever its epilogue (the staging does not read it), but the in-GEMV QKV
// epilogue, whose register budget is spent (see kTl in gemv_kernel). (Until S44-3 the list named
// Store and SiluMul, and the 8-bit producer SiluMulQ kept the two-pass form.)
template <DType T, Prologue PRO, Epilogue EPI>
constexpr bool kKeptPair = kInt8x<T> && PRO == Prologue::Norm && EPI != Epilogue::QKV;

// Whether the compact staging serves a shape (narrow blocks, one float4 of x per thread).
template <DType T, Prologue PRO, int W>
__host__ __device__ constexpr bool gemv_compact_stage(int cols) {
  return W == kNarrowWarps && (cols >> 2) <= (PRO == Prologue::None ? kGemvThreads<T, W> : kNormThreads);
}

// Stages x (after the prologue) in shared memory: the layout of the header comment. All
// kGemvThreads<T, W> threads of the block call it; the caller synchronizes before reading xs4.
// SF (stage form): 0 = both forms, chosen by gemv_compact_stage at run time; 1 = the compact form
// only (the caller guarantees gemv_compact_stage); 2 = the batched form only; 3 = the kept form
// (wide Norm blocks, gemv_kept_stage: h and gamma loaded once, kept in registers).
template <DType T, Prologue PRO, int W, int SF = 0, int XB = 8>
__device__ __forceinline__ void gemv_stage_x(const GemvParams& p, float4* xs4, float* red) {
  static_assert(XB == 8 || PRO != Prologue::Int8, "the producers' codes (Prologue::Int8) are 8-bit");
  // Thread t takes float4 t of each 1024-element slice. The loads of kXBatch slices are issued
  // together into registers before any of them is used: x was just written by the previous
  // kernel, so each load is an L2 round trip, and a load-use chain per slice cost one round trip
  // per slice (ncu, 8B down GEMV: half of all warp stall samples sat in this staging, at the
  // first use of each load). 8 consecutive lanes hold one 32-element block, so its max / sum is
  // 3 shuffles. Values and summation order are those of the one-slice-at-a-time loop.
  constexpr int NT = kGemvThreads<T, W>;
  if constexpr (PRO == Prologue::Int8) {
    // x quantized by its producer, already in this layout: a copy (40 bytes per 32 columns).
    const int nblk = p.cols >> 5;
    const uint4* src = reinterpret_cast<const uint4*>(p.xq);
    uint4* dst = reinterpret_cast<uint4*>(xs4);
#pragma unroll 4
    for (int i = int(threadIdx.x); i < 2 * nblk; i += NT) dst[i] = __ldcg(src + i);
    const uint2* src2 = reinterpret_cast<const uint2*>(p.xq + size_t(nblk) * 32);
    uint2* dst2 = reinterpret_cast<uint2*>(xs4 + 2 * size_t(nblk));
#pragma unroll 2
    for (int i = int(threadIdx.x); i < nblk; i += NT) dst2[i] = __ldcg(src2 + i);
    return;
  }
  // The Norm prologue's sum of squares runs in rmsnorm_rows' order: threads t < kNormThreads
  // (all of them unless the block is wider), thread t summing float4 t, t + kNormThreads, ...
  static_assert(NT % kNormThreads == 0, "the Norm prologue must match rmsnorm_rows");
  // Slices per batch, bounded by registers: AddNorm holds 3 loads per slice, Norm 2 (with gamma),
  // the plain prologue 1, so 6 there (8B down: 2 batches instead of 3; 12 spilled).
  constexpr int kXBatch = PRO == Prologue::AddNorm ? 2 : PRO == Prologue::None ? 6 : 4;
  const int nblk = p.cols >> 5;
  const int n4 = p.cols >> 2;
  const float4* in4 = reinterpret_cast<const float4*>(p.in);
  const float4* res4 = reinterpret_cast<const float4*>(p.residual);
  const float4* gam4 = reinterpret_cast<const float4*>(p.gamma);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  // h = in (+ residual) for slices base + j*stride, j < kXBatch (zero past the end).
  auto load_h = [&](int base, float4 (&h)[kXBatch], int stride) {
    float4 r[kXBatch];
#pragma unroll
    for (int j = 0; j < kXBatch; ++j) {
      const int i4 = base + j * stride + int(threadIdx.x);
      h[j] = i4 < n4 ? __ldg(in4 + i4) : zero;
      if constexpr (PRO == Prologue::AddNorm) r[j] = i4 < n4 ? __ldg(res4 + i4) : zero;
    }
    if constexpr (PRO == Prologue::AddNorm) {
#pragma unroll
      for (int j = 0; j < kXBatch; ++j)
        h[j] = make_float4(h[j].x + r[j].x, h[j].y + r[j].y, h[j].z + r[j].z, h[j].w + r[j].w);
    }
  };
  // Stages float4 i4 of x (value v; ok = i4 < n4). Called by every thread in uniform control flow
  // (the shuffles): lanes 8k..8k+7 hold one 32-block.
  auto stage4 = [&](float4 v, int i4, bool ok) {
    const int c = i4 >> 3, f = i4 & 7;
    if constexpr (kInt8x<T>) {
      // The normalized vector is quantized, exactly as the unfused path quantizes the output
      // of rmsnorm_rows.
      float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
      am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 1));
      am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 2));
      am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, 4));
      const float id = am > 0.f ? kXMax<XB> / am : 0.f;
      const uint32_t b0 = round_fadd_bits(__fmul_rn(v.x, id)), b1 = round_fadd_bits(__fmul_rn(v.y, id)),
                     b2 = round_fadd_bits(__fmul_rn(v.z, id)), b3 = round_fadd_bits(__fmul_rn(v.w, id));
      int sq = int(((b0 + b1) + (b2 + b3)) - 4u * kRoundFaddBias);
      sq += __shfl_xor_sync(0xffffffffu, sq, 1);
      sq += __shfl_xor_sync(0xffffffffu, sq, 2);
      sq += __shfl_xor_sync(0xffffffffu, sq, 4);
      if (ok) {
        uint32_t* xw = reinterpret_cast<uint32_t*>(xs4);
        xw[(size_t(f >> 2) * nblk + c) * 4 + (f & 3)] = code_word(b0, b1, b2, b3);
        // 16-bit codes: the word's bits 8-15 are the code's high byte (two's complement)
        if constexpr (XB == 16)
          xw[(size_t(2 + (f >> 2)) * nblk + c) * 4 + (f & 3)] = code_word(b0 >> 8, b1 >> 8, b2 >> 8, b3 >> 8);
        if (f == 0)
          reinterpret_cast<int2*>(xs4 + kXPlanes<XB> * size_t(nblk))[c] = make_int2(__float_as_int(am / kXMax<XB>), sq);
      }
      return float(sq);
    } else {
      if (ok) xs4[c * 8 + (f ^ (c & 7))] = v;
      return v.x;
    }
  };
  if constexpr (SF == 3) {
    // Kept form (Norm prologue; gemv_kept_stage: wide blocks up to hidden size 4096, narrow ones
    // up to 2048). Wide: the batched form below loads h in pass 1 (threads < kNormThreads, up to
    // four float4 each) for the sum of squares, then after the block reduction loads h again and
    // gamma in pass 2: one more round trip behind the weight batches in flight. Here every thread
    // loads, once and up front, the two float4s of h and gamma it will stage: thread u <
    // kNormThreads slices 0 and 1 of norm thread u (float4 u, u + 256), thread u + kNormThreads
    // slices 2 and 3 (u + 512, u + 768). The sum of squares keeps rmsnorm_rows' chain per norm
    // thread: thread u sums its two, hands the partial over in shared memory, thread u +
    // kNormThreads continues it; block_sum then sees each chain in warp 8 + w instead of warp w
    // (the other half adds zeros: the same bits).
    // Same scale, same elementwise norm, and lanes 8k..8k+7 still hold one 32-element block for
    // stage4. (A first form kept all four float4s in the norm threads and staged twice as many
    // per thread: 8B 0.989, docs/PERF.md S42-4.)
    // Narrow block (n4 <= 2 * kNormThreads): every thread is a norm thread (hi = 0), and pass 1
    // and pass 2 of the batched form give it the same two float4s (t, t + 256), so keeping them
    // adds no work at all and there is nothing to hand over (docs/PERF.md S43-1).
    static_assert(PRO == Prologue::Norm && (NT == 2 * kNormThreads || NT == kNormThreads),
                  "the kept form serves Norm blocks of 8 or 16 warps");
    constexpr bool kWide = NT == 2 * kNormThreads;
    const int t = int(threadIdx.x);
    const int hi = kWide && t >= kNormThreads ? 1 : 0;  // whole warps
    const int u = t - hi * kNormThreads;
    float4 h[2], g[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int i4 = (2 * hi + j) * kNormThreads + u;
      h[j] = i4 < n4 ? __ldg(in4 + i4) : zero;
      g[j] = i4 < n4 ? __ldg(gam4 + i4) : zero;
    }
    float ss = 0.f;
    if (!hi) {
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (j * kNormThreads + u < n4) ss = sumsq4(h[j], ss);
    }
    if constexpr (kWide) {
      __shared__ float ss_lo[kNormThreads];
      if (!hi) ss_lo[u] = ss;
      __syncthreads();
      if (hi) {
        ss = ss_lo[u];
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if ((2 + j) * kNormThreads + u < n4) ss = sumsq4(h[j], ss);
      }
    }
    // (wide: the chain of thread u < kNormThreads goes on in thread u + kNormThreads)
    const float rk = rms_scale(block_sum(kWide && !hi ? 0.f : ss, red), p.cols, p.eps);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int base = (2 * hi + j) * kNormThreads;
      if (base >= n4) break;  // warp-uniform: no slice left for this warp
      stage4(norm_apply4(h[j], rk, g[j]), base + u, base + u < n4);
    }
    return;
  }
  // One float4 per thread (0.6B's hidden size 1024 in a narrow block): one load of h (and gamma,
  // issued beside it), no batches of predicated slices. The batched form below issues ~290
  // instructions per warp after the wait for this case (ncu, 0.6B gate/up: 16 warps per SM, so
  // ~1,150 issue cycles per scheduler); this one about half. Same values, same order: thread t
  // sums float4 t alone in both forms (n4 <= kNormThreads), then the same block_sum.
  // Narrow blocks only: compiled into the wide instances too, this form cost 8B 2.7 % (S27-3),
  // although 8B never takes it.
  // (SF = 0: gemv_compact_stage's test, written out on n4: as a call, or as n4 against a limit of
  // -1 for wide blocks, ptxas allocates registers differently in 13 instances, and the limit form
  // no longer drops this form from the wide ones at compile time: S27-3's 2.7 % on 8B)
  if (SF != 2 && (SF == 1 || (W == kNarrowWarps && n4 <= (PRO == Prologue::None ? NT : kNormThreads)))) {  // uniform
    const int i4 = int(threadIdx.x);
    const bool ok = i4 < n4;
    float4 v = ok ? __ldg(in4 + i4) : zero;
    if constexpr (PRO != Prologue::None) {
      const float4 g = ok ? __ldg(gam4 + i4) : zero;
      if constexpr (PRO == Prologue::AddNorm) {
        const float4 r = ok ? __ldg(res4 + i4) : zero;
        v = make_float4(v.x + r.x, v.y + r.y, v.z + r.z, v.w + r.w);
        if (blockIdx.x == 0 && ok) reinterpret_cast<float4*>(p.residual_out)[i4] = v;
      }
      const float ss = ok ? sumsq4(v, 0.f) : 0.f;
      v = norm_apply4(v, rms_scale(block_sum(ss, red), p.cols, p.eps), g);
    }
    const float qd = stage4(v, i4, ok);
    if constexpr (PRO == Prologue::None) tl_mark_after(p.tl, 1, qd);  // timeline: staged (thread 0)
    return;
  }
  float rn = 1.f;
  if constexpr (PRO != Prologue::None) {
    // Pass 1: sum of squares in rmsnorm_rows' order (thread t: float4 t, t+256, ...).
    constexpr int NS = kNormThreads;
    float ss = 0.f;
    // Threads past kNormThreads (a 16-warp block) take no float4 here and add zeros below.
    const int n4_mine = NT == NS || int(threadIdx.x) < NS ? n4 : 0;
    for (int base = 0; base < n4_mine; base += kXBatch * NS) {
      float4 h[kXBatch];
      load_h(base, h, NS);
#pragma unroll
      for (int j = 0; j < kXBatch; ++j) {
        const int i4 = base + j * NS + int(threadIdx.x);
        if (i4 < n4) {
          if constexpr (PRO == Prologue::AddNorm)
            if (blockIdx.x == 0) reinterpret_cast<float4*>(p.residual_out)[i4] = h[j];
          ss = sumsq4(h[j], ss);
        }
      }
    }
    // (block_sum over a wider block adds the extra warps' zeros: the same tree, the same sum)
    rn = rms_scale(block_sum(ss, red), p.cols, p.eps);
  }
  float qdep = 0.f;  // timeline (Prologue::None): the last slice's quantization done
  for (int base = 0; base < n4; base += kXBatch * NT) {  // uniform trip count: shuffles are safe
    float4 h[kXBatch], gm[kXBatch];
    load_h(base, h, NT);
    if constexpr (PRO == Prologue::None)
      if (base == 0) tl_mark_after(p.tl, 0, h[0].x);  // timeline: the first slice arrived
    if constexpr (PRO != Prologue::None) {
#pragma unroll
      for (int j = 0; j < kXBatch; ++j) {
        const int i4 = base + j * NT + int(threadIdx.x);
        gm[j] = i4 < n4 ? __ldg(gam4 + i4) : zero;
      }
    }
#pragma unroll
    for (int j = 0; j < kXBatch; ++j) {
      const int i4 = base + j * NT + int(threadIdx.x);
      if (base + j * NT >= n4) break;  // uniform: no slice left for any thread
      const bool ok = i4 < n4;
      float4 v = h[j];
      if constexpr (PRO != Prologue::None) v = norm_apply4(v, rn, gm[j]);
      qdep = stage4(v, i4, ok);
    }
  }
  if constexpr (PRO == Prologue::None) tl_mark_after(p.tl, 1, qdep);  // timeline: staged (thread 0)
}

template <DType T, Prologue PRO, Epilogue EPI, int W, int SF = 0, int XB = 8>
__global__ void __launch_bounds__(kGemvThreads<T, W>, kMinBlocks<T, W>)
    gemv_kernel(const __grid_constant__ GemvParams p) {
  static_assert(XB == 8 || (kInt8x<T> && EPI != Epilogue::SiluMulQ), "16-bit codes: integer-dot types, no 8-bit producer epilogue");
  // F16/BF16: [nblk][8] swizzled float4 x slots. Quantized: uint4 lo[nblk], hi[nblk], int2
  // {dx, sum q}[nblk] (see the header comment).
  extern __shared__ float4 xs4[];
  __shared__ float red[32];
  __shared__ float kred[2][kGemvWarps<T, W>][kRows];  // split-K partials, double-buffered by row group
  // Launch timeline stamps (measurement; not in the in-GEMV QKV epilogue instances, whose
  // register budget they would spill, and which the timed chain does not use).
  constexpr bool kTl = EPI != Epilogue::QKV;
  if constexpr (kTl) tl_start(p.tl);
  const int nblk = p.cols >> 5;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_rg = (p.rows + kRows - 1) / kRows;
  // (SF = 1: gemv_compact_stage holds, so cols <= 1024 and there is one column group)
  constexpr bool kOneGroup = SF == 1;
  const int ngroups = kOneGroup ? 1 : (nblk + 31) / 32;
  const int ks = p.ksplit;  // 1, 2, 3, 4 or 8
  const int slot = (warp * p.ks_mul) >> 5, sub = warp - slot * ks;
  const int nslots = (kGemvWarps<T, W> * p.ks_mul) >> 5;  // ks = 3: the last warp has no slot
  const int rg_step = gridDim.x * nslots;

  const uint64_t pol = evict_first_policy();
  constexpr int U = kOneGroup ? 1 : kSteps<T>;
  // Position (row group rg, column group g) of a batch of U steps; the next batch follows.
  // SiluMulQ: k counts the block's row groups, which come in runs of kRowGroupsPerXqBlock (the
  // 32 outputs of one code block of y), the block's run i at blockIdx.x + gridDim.x * i, so the
  // block quantizes its own outputs with no count across blocks (see the end of the kernel).
  struct Pos {
    int rg, g, k;
  };
  constexpr bool kRuns = EPI == Epilogue::SiluMulQ;
  auto run_rg = [&](int k) { return gemv_run_row_group(int(blockIdx.x), int(gridDim.x), kRowGroupsPerXqBlock, k); };
  const int g0 = sub * U, gstep = ks * U;  // this warp's column batches: g0, g0 + gstep, ...
  auto next_pos = [&](Pos q) {
    q.g += gstep;
    if (q.g >= ngroups) {
      q.g = g0;
      if constexpr (kRuns) {
        q.k += nslots;
        q.rg = run_rg(q.k);  // increasing in k: past n_rg once, past it for good
      } else {
        q.rg += rg_step;
      }
    }
    return q;
  };
  Pos a{slot >= nslots ? n_rg : kRuns ? run_rg(slot) : int(blockIdx.x) + int(gridDim.x) * slot, g0, slot};
  Pos b = next_pos(a);
  Frag<T> cur[U], nxt[U];
  auto load_batch = [&](Frag<T> (&buf)[U], const Pos& at) {
    if (at.rg < n_rg)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (at.g + u < ngroups) buf[u].load(p, at.rg, at.g + u, nblk, lane, pol);
  };
  // Two batches in flight while x is staged (for the 8B shapes that is a whole row group).
  load_batch(cur, a);
  load_batch(nxt, b);
  // The Norm prologue's second pass reads gamma after the block reduction: its lines are
  // brought into L1 now (gamma is a weight), so that pass does not wait for L2 again.
  if constexpr (PRO == Prologue::Norm || PRO == Prologue::AddNorm)
    for (int line = int(threadIdx.x); line * 32 < p.cols; line += kGemvThreads<T, W>) prefetch_l1(p.gamma + line * 32);
  // Everything above reads only weights; from here on inputs of the previous kernel are read
  // and outputs written (PDL, see pdl_launch.cuh).
  pdl_wait_trigger(false);
  __shared__ unsigned long long tl_w;  // thread 0's wait return (timeline)
  if constexpr (kTl) {
    const unsigned long long t = tl_waited(p.tl);
    if (p.tl && threadIdx.x == 0) tl_w = t;
  }

  // Residual epilogue: lane 8r holds y_residual of row r of the warp's current row group,
  // loaded when the group starts (here for the first, in the epilogue for the next) so the add
  // does not wait for L2 after the reduction.
  float yres = 0.f;
  auto load_yres = [&](int rg) {
    if constexpr (EPI == Epilogue::Residual) {
      const int row = rg * kRows + (lane >> 3);
      if ((lane & 7) == 0 && rg < n_rg && row < p.rows) yres = p.y_residual[row];
    }
  };
  load_yres(a.rg);

  gemv_stage_x<T, PRO, W, SF, XB>(p, xs4, red);
  __syncthreads();
  if constexpr (kTl) tl_phase(p.tl, &tl_w);

  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  int kpar = 0;

  // One batch: accumulate the fragments in buf (position at); when the batch after it (after)
  // starts the next row group, reduce and run the epilogue.
  auto step = [&](const Frag<T> (&buf)[U], const Pos& at, const Pos& after) {
    const int rg = at.rg;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool fold = true;
      if (at.g + u < ngroups)
        buf[u].template accumulate<XB>(acc, xs4, at.g + u, nblk, lane, fold);
    }
    if (after.g == g0) {  // this warp's share of row group rg complete
      // Lanes 8r..8r+7 hold row r's sum (myr); lane 8r stores it.
      const int myr = lane >> 3;
      float vr = warp_sum_rows4(acc, lane);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
      if (ks > 1) {  // split-K: add the group's partials in sub order
        if ((lane & 7) == 0) kred[kpar][warp][myr] = vr;
        named_barrier(1 + slot, ks * 32);
        if (sub == 0) {
          float t = kred[kpar][warp][myr];
#pragma unroll
          for (int j = 1; j < kNarrowWarps; ++j) {  // ks <= 8 (gemv_ksplit)
            if (j >= ks) break;
            t += kred[kpar][warp + j][myr];
          }
          vr = t;
        }
        kpar ^= 1;
      }
      const int row0 = rg * kRows;
      if (sub == 0) {
        if constexpr (EPI == Epilogue::Store || EPI == Epilogue::Residual || EPI == Epilogue::QKV) {
          const int row = row0 + myr;
          if ((lane & 7) == 0 && row < p.rows) {
            float o = vr;
            if constexpr (EPI == Epilogue::Residual) o += yres;
            if constexpr (EPI != Epilogue::Residual)
              if (p.bias) o += p.bias[row];
            if constexpr (EPI == Epilogue::QKV)
              p.qkv.raw[row] = o;
            else
              p.y[row] = o;
          }
        } else if constexpr (EPI == Epilogue::SiluMul || EPI == Epilogue::SiluMulQ) {
          // rows 2i / 2i+1 = gate / up of output row0/2 + i: lanes 0 and 16 take the up row from 8 / 24
          const float up = __shfl_down_sync(0xffffffffu, vr, 8);
          if ((lane & 15) == 0) p.y[row0 / 2 + (lane >> 4)] = silu(vr) * up;
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
      }  // sub == 0
      load_yres(after.rg);
    }
  };
  // Ping-pong between the two register buffers (no copy between them: a register copy of the
  // newer batch would wait for its loads, ncu showed 19 % of the 8B down GEMV's stall samples
  // there). cur holds position a, nxt position b = next(a); each is refilled, two batches ahead,
  // right after it is consumed.
  for (;;) {
    if (a.rg >= n_rg) break;
    step(cur, a, b);
    const Pos a2 = next_pos(b);
    load_batch(cur, a2);
    if (b.rg >= n_rg) break;
    step(nxt, b, a2);
    const Pos b2 = next_pos(a2);
    load_batch(nxt, b2);
    a = a2;
    b = b2;
  }
  if constexpr (EPI == Epilogue::SiluMulQ) {
    // The block made whole 32-output code blocks of y (its runs, see Pos): after the barrier its
    // y stores are visible to all its warps, and warp w quantizes the block's runs w, w + W, ...
    // for the Int8 consumer. No count across blocks, no fence: the first form counted the last
    // arriver per code block with a fence and an atomic per row group, a ~4 us tail in gate/up
    // (docs/PERF.md S13-2, S43-6).
    __syncthreads();
    const int nruns = n_rg / kRowGroupsPerXqBlock;  // gemv(): rows % 64 == 0
    for (int i = warp;; i += kGemvWarps<T, W>) {  // warp-uniform
      const int hb = int(blockIdx.x) + int(gridDim.x) * i;
      if (hb >= nruns) break;
      xq_quantize_block(p, hb, lane);
    }
  }
  if constexpr (kTl) tl_end(p.tl);
}

// Dynamic shared memory per block: the staged x (layouts in the header comment).
template <DType T, int XB = 8>
inline size_t gemv_smem_bytes(int cols) {
  return kInt8x<T> ? size_t(cols / 32) * (16 * kXPlanes<XB> + 8) : size_t(cols / 32) * (8 * 16);
}

}  // namespace lmf::cuda::dev

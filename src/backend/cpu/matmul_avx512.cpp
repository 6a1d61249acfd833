// AVX-512 matmul kernels. Quantized weights: two blocks of 32 per 512-bit vector, integer dots
// with VNNI vpdpbusd (u8 x s8 -> s32 in one instruction); int32 lanes 0-7 belong to the first
// block and 8-15 to the second, so per-block scales are applied lane-wise as in the AVX2 kernels
// (see matmul_x86.inc for the per-lane algebra). Float weights use the shared 256-bit kernels.
// Built with -mavx512f/bw/vl/dq/vnni; only called after cpuid confirmed all of them.
#include <cstring>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*() and then warn about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LMF_X86_NO_QUANT 1
#include "backend/cpu/matmul_x86.inc"

namespace lmf::cpu {
namespace {

// Two f32 scalars -> [a x8 | b x8].
inline __m512 pair_ps(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// Two blocks of 16 packed nibble bytes -> 64 u8 in element order [lo0, hi0, lo1, hi1]:
// broadcast to [qs0 qs0 qs1 qs1], shift the odd 128-bit lanes right by 4, mask.
inline __m512i unpack_nibbles2(const uint8_t* qs0, const uint8_t* qs1) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  v = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                          _mm512_set1_epi8(0x0f));
}

// Two fp16 scales -> [a x8 | b x8] as f32.
inline __m512 pair_fp16(uint16_t a, uint16_t b) {
  return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(short(b)), _mm_set1_epi16(short(a))));
}

inline __m512i load2(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(
      _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

const int8_t kZero32[32] = {};

// Blocks b and b+1 of one weight row; `half` = only block b exists (odd nb): the second half
// is zero weights with zero scales, contributing exactly 0.
template <DType DT>
struct WPair {
  __m512i q;       // Q4: unsigned nibbles; Q8_0: |q|
  __mmask64 neg;   // Q8_0: lanes whose weight is negative (their activation is negated)
  __m512 d, m;     // scales; Q4_1: minimum / 8

  void load(const uint8_t* row, int64_t b, bool half) {
    if constexpr (DT == DType::Q4_0 || DT == DType::Q4_1) {
      using Blk = std::conditional_t<DT == DType::Q4_0, BlockQ4_0, BlockQ4_1>;
      const Blk* blk = reinterpret_cast<const Blk*>(row) + b;
      static const uint8_t zero16[16] = {};
      q = unpack_nibbles2(blk[0].qs, half ? zero16 : blk[1].qs);
      d = pair_fp16(blk[0].d, half ? uint16_t(0) : blk[1].d);
      if constexpr (DT == DType::Q4_1)
        m = _mm512_mul_ps(pair_fp16(blk[0].m, half ? uint16_t(0) : blk[1].m), _mm512_set1_ps(0.125f));
    } else {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      const __m512i s = load2(blk[0].qs, half ? kZero32 : blk[1].qs);
      q = _mm512_abs_epi8(s);
      neg = _mm512_movepi8_mask(s);
      d = pair_fp16(blk[0].d, half ? uint16_t(0) : blk[1].d);
    }
  }
};

struct APair {
  __m512i q;
  __m512 d, s;  // Q4_0 uses s per lane; Q4_1 s per lane times m/8
  void load(const ActBlock* a, bool half) {
    q = load2(a[0].qs, half ? kZero32 : a[1].qs);
    d = pair_ps(a[0].d, half ? 0.0f : a[1].d);
    s = pair_ps(a[0].s, half ? 0.0f : a[1].s);
  }
};

template <DType DT, int R, int TT>
void quant_tile512(const uint8_t* w, size_t stride, int64_t nb, const ActBlock* xq, float* y,
                   int64_t ldy) {
  __m512 acc[R][TT];  // [rows, tokens], 16 partial sums each
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) acc[r][t] = _mm512_setzero_ps();
  constexpr size_t kBlockBytes = DT == DType::Q4_0 ? sizeof(BlockQ4_0)
                                 : DT == DType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0);
  const size_t pf = std::max<size_t>(size_t(2 * R) * stride, 8192);  // see matmul_x86.inc
  auto step = [&](int64_t b, bool half) {
    WPair<DT> wp[R];
    for (int r = 0; r < R; ++r) wp[r].load(w + size_t(r) * stride, b, half);
    if constexpr (TT == 1) {
      if ((b * kBlockBytes) % 64 < 2 * kBlockBytes)  // ~one line per 64 bytes of row
        for (int r = 0; r < R; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(w + size_t(r) * stride + size_t(b) * kBlockBytes + pf), _MM_HINT_T0);
    }
    for (int t = 0; t < TT; ++t) {
      APair ap;
      ap.load(xq + t * nb + b, half);
      for (int r = 0; r < R; ++r) {
        if constexpr (DT == DType::Q4_0) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wp[r].q, ap.q));
          acc[r][t] = _mm512_fmadd_ps(wp[r].d, _mm512_fmsub_ps(ap.d, dot, ap.s), acc[r][t]);
        } else if constexpr (DT == DType::Q4_1) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wp[r].q, ap.q));
          acc[r][t] = _mm512_fmadd_ps(wp[r].d, _mm512_mul_ps(ap.d, dot), acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(wp[r].m, ap.s, acc[r][t]);
        } else {
          // Move the weight's sign onto the activation: |w| * (+-a) = w * a.
          const __m512i sa = _mm512_mask_sub_epi8(ap.q, wp[r].neg, _mm512_setzero_si512(), ap.q);
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wp[r].q, sa));
          acc[r][t] = _mm512_fmadd_ps(wp[r].d, _mm512_mul_ps(ap.d, dot), acc[r][t]);
        }
      }
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) step(b, false);
  if (b < nb) step(b, true);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < TT; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <DType DT>
void quant_rows512(const uint8_t* w, size_t stride, int64_t nrows, int64_t nb, const ActBlock* xq,
                   int64_t T, float* y, int64_t ldy) {
  if (T == 1) {
    int64_t r = 0;
    for (; r + 4 <= nrows; r += 4) quant_tile512<DT, 4, 1>(w + size_t(r) * stride, stride, nb, xq, y + r, ldy);
    for (; r < nrows; ++r) quant_tile512<DT, 1, 1>(w + size_t(r) * stride, stride, nb, xq, y + r, ldy);
    return;
  }
  auto row_tile = [&]<int R>(int64_t r) {
    const uint8_t* wr = w + size_t(r) * stride;
    int64_t t = 0;
    for (; t + 4 <= T; t += 4) quant_tile512<DT, R, 4>(wr, stride, nb, xq + t * nb, y + t * ldy + r, ldy);
    switch (T - t) {
      case 3: quant_tile512<DT, R, 3>(wr, stride, nb, xq + t * nb, y + t * ldy + r, ldy); break;
      case 2: quant_tile512<DT, R, 2>(wr, stride, nb, xq + t * nb, y + t * ldy + r, ldy); break;
      case 1: quant_tile512<DT, R, 1>(wr, stride, nb, xq + t * nb, y + t * ldy + r, ldy); break;
      default: break;
    }
  };
  int64_t r = 0;
  for (; r + 4 <= nrows; r += 4) row_tile.template operator()<4>(r);  // 32 zmm: 16 accumulators fit
  for (; r < nrows; ++r) row_tile.template operator()<1>(r);
}

void quant_avx512(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                  const ActBlock* xq, int64_t T, float* y, int64_t ldy) {
  switch (type) {
    case DType::Q4_0: return quant_rows512<DType::Q4_0>(w, stride, nrows, nb, xq, T, y, ldy);
    case DType::Q4_1: return quant_rows512<DType::Q4_1>(w, stride, nrows, nb, xq, T, y, ldy);
    case DType::Q8_0: return quant_rows512<DType::Q8_0>(w, stride, nrows, nb, xq, T, y, ldy);
    default: return;  // matmul() only routes quantized types here
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{quant_avx512, flt_x86};
  return k;
}

}  // namespace lmf::cpu

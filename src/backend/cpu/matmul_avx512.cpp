// AVX-512 matmul kernels (needs F/BW/VL/DQ + VNNI; only called after cpuid confirmed them).
// Decode and short prompts use the shared 256-bit kernels of matmul_x86.inc with vpdpbusd for
// the integer dots (on Zen 4, 512-bit ops are split in two 256-bit halves, and a 512-bit
// row-major variant measured slower). Prefill (T >= 8) uses a repacked GEMM below.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*() and then warn about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define LMF_X86_VNNI 1
#include "backend/cpu/matmul_x86.inc"

namespace lmf::cpu {
namespace {

// ---- Prefill GEMM on repacked weights ----
// For T >= kPackMinTokens, each group of 8 rows is repacked (per call, into a thread-local
// buffer; the file stays standard) so that one int32 lane holds one row: a 256-bit register
// carries 4 consecutive weights of each of the 8 rows, and vpdpbusd against the token's 4
// activations (broadcast) advances all 8 row dots at once. Scales then cost one multiply-add per
// block per 8 rows instead of per row, ~3x fewer instructions than the row-major tiles. vpdpbusd
// multiplies u8 by s8: activations are biased to u8 (q + 128, i.e. q ^ 0x80) and the weights are
// s8 (Q4_0: q - 8; Q4_1: q; Q8_0: q); the bias is removed with 128 * sum(q) kept per row block.
// Measured (Zen 4, q4_0 2048x1024, 1 thread): T=4 row-major 146 us vs packed 156 us; T=8
// row-major 292 us vs packed 232 us.
constexpr int64_t kPackMinTokens = 8;

struct PackedBlock8 {
  int8_t q[8][8][4];    // [k = element / 4][row][element % 4]
  float d[8];           // weight scale per row
  float m[8];           // Q4_1 minimum per row (0 otherwise)
  int32_t bias[8];      // 128 * sum(q) per row
};

// One row's block b as 32 signed weights in element order (8 dwords of 4 elements).
template <DType DT>
inline __m256i row_block_s8(const uint8_t* row, int64_t b) {
  if constexpr (DT == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const BlockQ8_0*>(row)[b].qs));
  } else {
    using Blk = std::conditional_t<DT == DType::Q4_0, BlockQ4_0, BlockQ4_1>;
    const Blk& blk = reinterpret_cast<const Blk*>(row)[b];
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0f));
    if constexpr (DT == DType::Q4_0) return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
    return q;
  }
}

template <DType DT>
void pack_rows8(const uint8_t* w, size_t stride, int64_t nrows, int64_t nb, PackedBlock8* out) {
  for (int64_t b = 0; b < nb; ++b) {
    PackedBlock8& p = out[b];
    __m256i r[8];  // [row], dwords = elements 4k..4k+3
    for (int i = 0; i < 8; ++i) {
      if (i < nrows) {
        const uint8_t* row = w + size_t(i) * stride;
        r[i] = row_block_s8<DT>(row, b);
        const uint16_t* h = reinterpret_cast<const uint16_t*>(
            row + size_t(b) * (DT == DType::Q4_0 ? sizeof(BlockQ4_0) : DT == DType::Q4_1 ? sizeof(BlockQ4_1) : sizeof(BlockQ8_0)));
        p.d[i] = _cvtsh_ss(h[0]);
        p.m[i] = DT == DType::Q4_1 ? _cvtsh_ss(h[1]) : 0.0f;
      } else {
        r[i] = _mm256_setzero_si256();
        p.d[i] = p.m[i] = 0.0f;
      }
    }
    // 8x8 transpose of dwords: [row][k] -> [k][row].
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);      // k0 | k4
      u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);  // k1 | k5
      u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // k2 | k6
      u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // k3 | k7
    }
    __m256i bias = _mm256_setzero_si256();
    const __m256i b128 = _mm256_set1_epi8(char(0x80));
    for (int k = 0; k < 4; ++k) {
      const __m256i lo = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);  // k
      const __m256i hi = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);  // k + 4
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.q[k]), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.q[k + 4]), hi);
      bias = _mm256_dpbusd_epi32(bias, b128, lo);  // 128 * sum(q), lane = row
      bias = _mm256_dpbusd_epi32(bias, b128, hi);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.bias), bias);
  }
}

template <DType DT, int TT>
void packed_tile(const PackedBlock8* pk, int64_t nb, const ActBlock* xq, const uint8_t* xu,
                 int nrows, float* y, int64_t ldy) {
  __m256 acc[TT];  // [tokens], lane = row
  for (int t = 0; t < TT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const PackedBlock8& p = pk[b];
    __m256i wq[8];  // [k], 4 weights x 8 rows each
    for (int k = 0; k < 8; ++k) wq[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q[k]));
    const __m256 d = _mm256_loadu_ps(p.d);
    const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.bias));
    for (int t = 0; t < TT; ++t) {
      const uint8_t* a = xu + (t * nb + b) * QK;  // biased activations of block b, token t
      __m256i dot = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        int32_t a4;
        std::memcpy(&a4, a + 4 * k, 4);
        dot = _mm256_dpbusd_epi32(dot, _mm256_set1_epi32(a4), wq[k]);
      }
      const ActBlock& ab = xq[t * nb + b];
      const __m256 dotf = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot, bias));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(ab.d)), dotf, acc[t]);
      if constexpr (DT == DType::Q4_1)
        acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(p.m), _mm256_set1_ps(ab.s), acc[t]);
    }
  }
  const __mmask8 keep = __mmask8((1u << nrows) - 1);
  for (int t = 0; t < TT; ++t) _mm256_mask_storeu_ps(y + t * ldy, keep, acc[t]);
}

template <DType DT>
void quant_gemm_packed(const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                       const ActBlock* xq, int64_t T, float* y, int64_t ldy) {
  thread_local std::vector<PackedBlock8> pk;
  thread_local std::vector<uint8_t> xu;  // [T, nb * 32] activations + 128, as u8
  pk.resize(size_t(nb));
  xu.resize(size_t(T * nb * QK));
  for (int64_t i = 0; i < T * nb; ++i)
    for (int j = 0; j < QK; ++j) xu[size_t(i * QK + j)] = uint8_t(xq[i].qs[j] ^ 0x80);
  for (int64_t r = 0; r < nrows; r += 8) {
    const int n = int(std::min<int64_t>(8, nrows - r));
    pack_rows8<DT>(w + size_t(r) * stride, stride, n, nb, pk.data());
    int64_t t = 0;
    for (; t + 4 <= T; t += 4)
      packed_tile<DT, 4>(pk.data(), nb, xq + t * nb, xu.data() + t * nb * QK, n, y + t * ldy + r, ldy);
    for (; t < T; ++t)
      packed_tile<DT, 1>(pk.data(), nb, xq + t * nb, xu.data() + t * nb * QK, n, y + t * ldy + r, ldy);
  }
}

void quant_avx512(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                  const ActBlock* xq, int64_t T, float* y, int64_t ldy) {
  if (T < kPackMinTokens) return quant_x86(type, w, stride, nrows, nb, xq, T, y, ldy);
  switch (type) {
    case DType::Q4_0: return quant_gemm_packed<DType::Q4_0>(w, stride, nrows, nb, xq, T, y, ldy);
    case DType::Q4_1: return quant_gemm_packed<DType::Q4_1>(w, stride, nrows, nb, xq, T, y, ldy);
    case DType::Q8_0: return quant_gemm_packed<DType::Q8_0>(w, stride, nrows, nb, xq, T, y, ldy);
    default: return;  // matmul() only routes quantized types here
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_avx512() {
  static const MatmulKernels k{quant_avx512, flt_x86, quant_act_x86};
  return k;
}

}  // namespace lmf::cpu

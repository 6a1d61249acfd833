// Attention inner loops with AVX2 + FMA + F16C (also used on AVX-512 machines). One call covers
// one query position and one KV head with all the query heads that share it (GQA): each cached
// K/V row is converted from fp16 once and used by every head of the group.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/attention_kernels.h"

namespace lmf::cpu {

namespace {
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// e^x for x <= 0 (softmax arguments), |relative error| < 2e-7: x = n ln2 + r with |r| <= ln2/2,
// e^r by its degree-6 Taylor polynomial, 2^n by building the exponent bits.
inline __m256 exp_neg(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);   // ln2 split in two parts:
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);      // hi exact in float
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

void attention_group_avx2(const AttnGroupArgs& a) {
  const int hd = a.head_dim;  // multiple of 8
  float* sc = a.scores;       // [group][n]
  // Scores: s[h][j] = q_h · k_j * scale
  for (int64_t j = 0; j < a.n; ++j) {
    const uint16_t* kr = a.k + j * a.kv_stride;
    __m256 acc[8];
    for (int h = 0; h < a.group; ++h) acc[h] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8) {
      const __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kr + i)));
      for (int h = 0; h < a.group; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(a.q[h] + i), kv, acc[h]);
    }
    for (int h = 0; h < a.group; ++h) sc[h * a.n + j] = hsum(acc[h]) * a.scale;
  }
  // Softmax per head, then out_h = sum_j p_j v_j / sum
  for (int h = 0; h < a.group; ++h) {
    float* s = sc + h * a.n;
    float mx = -INFINITY;
    for (int64_t j = 0; j < a.n; ++j) mx = s[j] > mx ? s[j] : mx;
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= a.n; j += 8) {
      const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
      _mm256_storeu_ps(s + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum(vsum);
    for (; j < a.n; ++j) sum += s[j] = std::exp(s[j] - mx);
    a.inv_sum[h] = 1.0f / sum;
  }
  for (int i0 = 0; i0 < hd; i0 += 32) {  // 32 output dims (4 registers) per head at a time
    const int w = hd - i0 < 32 ? hd - i0 : 32;
    for (int h = 0; h < a.group; ++h) {
      __m256 o[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      const float* s = sc + h * a.n;
      for (int64_t j = 0; j < a.n; ++j) {
        const uint16_t* vr = a.v + j * a.kv_stride + i0;
        const __m256 p = _mm256_set1_ps(s[j]);
        for (int r = 0; r < w / 8; ++r)
          o[r] = _mm256_fmadd_ps(p, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + 8 * r))), o[r]);
      }
      const __m256 inv = _mm256_set1_ps(a.inv_sum[h]);
      for (int r = 0; r < w / 8; ++r) _mm256_storeu_ps(a.out[h] + i0 + 8 * r, _mm256_mul_ps(o[r], inv));
    }
  }
}

}  // namespace lmf::cpu

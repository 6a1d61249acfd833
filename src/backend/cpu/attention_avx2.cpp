// Attention tile with AVX2 + FMA + F16C (also used on AVX-512 machines). Keys are processed 8 at
// a time: the 8 fp16 K rows are converted and transposed once per tile ([head_dim][8] floats),
// so each query's 8 scores are one FMA chain over head_dim with a key in each lane (no
// horizontal sums); the 8 V rows are converted once per tile and reused by every query.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/simd_math_avx2.h"

namespace lmf::cpu {

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

void attention_tile_avx2(const AttnTileArgs& a) {
  const int hd = a.head_dim;
  int64_t n_max = 0;
  for (int q = 0; q < a.nq; ++q) n_max = std::max(n_max, a.n_keys[q]);
  const int64_t n_pad = (n_max + 7) / 8 * 8;
  alignas(32) float kt[256 * 8];  // [hd][8 keys]
  alignas(32) float vb[8 * 256];  // [8 keys][hd]

  // 1. Scores, 8 keys per step; keys past a query's limit are computed and then ignored.
  for (int64_t j0 = 0; j0 < n_pad; j0 += 8) {
    const int nk = int(std::min<int64_t>(8, n_max - j0));
    for (int i0 = 0; i0 < hd; i0 += 8) {  // 8x8 blocks: convert 8 keys x 8 dims, transpose
      __m256 r[8];
      for (int k = 0; k < 8; ++k)
        r[k] = k < nk ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.k + (j0 + k) * a.kv_stride + i0)))
                      : _mm256_setzero_ps();  // never read unwritten cache rows
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      float* d = kt + i0 * 8;  // rows i0..i0+7, 8 keys each
      _mm256_store_ps(d + 0 * 8, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_store_ps(d + 1 * 8, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_store_ps(d + 2 * 8, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_store_ps(d + 3 * 8, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_store_ps(d + 4 * 8, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_store_ps(d + 5 * 8, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_store_ps(d + 6 * 8, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_store_ps(d + 7 * 8, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    // Four queries at a time: four independent FMA chains hide the FMA latency (each query's
    // own chain, over i in order, is the same as when it runs alone).
    int q = 0;
    for (; q + 4 <= a.nq; q += 4) {
      const float *q0 = a.q[q], *q1 = a.q[q + 1], *q2 = a.q[q + 2], *q3 = a.q[q + 3];
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int i = 0; i < hd; ++i) {
        const __m256 kv = _mm256_load_ps(kt + i * 8);
        s0 = _mm256_fmadd_ps(_mm256_set1_ps(q0[i]), kv, s0);
        s1 = _mm256_fmadd_ps(_mm256_set1_ps(q1[i]), kv, s1);
        s2 = _mm256_fmadd_ps(_mm256_set1_ps(q2[i]), kv, s2);
        s3 = _mm256_fmadd_ps(_mm256_set1_ps(q3[i]), kv, s3);
      }
      const __m256 sc = _mm256_set1_ps(a.scale);
      _mm256_storeu_ps(a.scores + (q + 0) * n_pad + j0, _mm256_mul_ps(s0, sc));
      _mm256_storeu_ps(a.scores + (q + 1) * n_pad + j0, _mm256_mul_ps(s1, sc));
      _mm256_storeu_ps(a.scores + (q + 2) * n_pad + j0, _mm256_mul_ps(s2, sc));
      _mm256_storeu_ps(a.scores + (q + 3) * n_pad + j0, _mm256_mul_ps(s3, sc));
    }
    for (; q < a.nq; ++q) {
      const float* qv = a.q[q];
      __m256 s = _mm256_setzero_ps();
      for (int i = 0; i < hd; ++i) s = _mm256_fmadd_ps(_mm256_set1_ps(qv[i]), _mm256_load_ps(kt + i * 8), s);
      _mm256_storeu_ps(a.scores + q * n_pad + j0, _mm256_mul_ps(s, _mm256_set1_ps(a.scale)));
    }
  }
  // 2. Softmax per query over its own keys; probabilities of keys past the limit are exactly 0.
  for (int q = 0; q < a.nq; ++q) {
    float* s = a.scores + q * n_pad;
    const int64_t n = a.n_keys[q];
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
      _mm256_storeu_ps(s + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum(vsum);
    for (; j < n; ++j) sum += s[j] = std::exp(s[j] - mx);
    const float inv = 1.0f / sum;
    for (j = 0; j < n; ++j) s[j] *= inv;
    for (; j < n_pad; ++j) s[j] = 0.0f;
    std::memset(a.acc + q * hd, 0, sizeof(float) * size_t(hd));
  }
  // 3. out_q = sum_j p_q[j] v_j, keys in order, 8 V rows converted once per step.
  for (int64_t j0 = 0; j0 < n_pad; j0 += 8) {
    const int nk = int(std::min<int64_t>(8, n_max - j0));
    for (int r = 0; r < 8; ++r) {
      if (r < nk) {
        const uint16_t* vr = a.v + (j0 + r) * a.kv_stride;
        for (int i = 0; i < hd; i += 8)
          _mm256_store_ps(vb + r * hd + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + i))));
      } else {
        std::memset(vb + r * hd, 0, sizeof(float) * size_t(hd));
      }
    }
    // Four queries at a time (independent FMA chains); a query past its limit has p = 0 here,
    // and fma(0, v, acc) == acc exactly, so it may ride along.
    int q = 0;
    for (; q + 4 <= a.nq; q += 4) {
      const float* p[4];
      float* o[4];
      for (int u = 0; u < 4; ++u) {
        p[u] = a.scores + (q + u) * n_pad + j0;
        o[u] = a.acc + (q + u) * hd;
      }
      for (int i = 0; i < hd; i += 8) {
        __m256 c0 = _mm256_loadu_ps(o[0] + i), c1 = _mm256_loadu_ps(o[1] + i);
        __m256 c2 = _mm256_loadu_ps(o[2] + i), c3 = _mm256_loadu_ps(o[3] + i);
        for (int r = 0; r < 8; ++r) {
          const __m256 vv = _mm256_load_ps(vb + r * hd + i);
          c0 = _mm256_fmadd_ps(_mm256_set1_ps(p[0][r]), vv, c0);
          c1 = _mm256_fmadd_ps(_mm256_set1_ps(p[1][r]), vv, c1);
          c2 = _mm256_fmadd_ps(_mm256_set1_ps(p[2][r]), vv, c2);
          c3 = _mm256_fmadd_ps(_mm256_set1_ps(p[3][r]), vv, c3);
        }
        _mm256_storeu_ps(o[0] + i, c0);
        _mm256_storeu_ps(o[1] + i, c1);
        _mm256_storeu_ps(o[2] + i, c2);
        _mm256_storeu_ps(o[3] + i, c3);
      }
    }
    for (; q < a.nq; ++q) {
      const float* p = a.scores + q * n_pad + j0;
      float* o = a.acc + q * hd;
      for (int i = 0; i < hd; i += 8) {
        __m256 acc = _mm256_loadu_ps(o + i);
        for (int r = 0; r < 8; ++r) acc = _mm256_fmadd_ps(_mm256_set1_ps(p[r]), _mm256_load_ps(vb + r * hd + i), acc);
        _mm256_storeu_ps(o + i, acc);
      }
    }
  }
  for (int q = 0; q < a.nq; ++q) std::memcpy(a.out[q], a.acc + q * hd, sizeof(float) * size_t(hd));
}

}  // namespace lmf::cpu

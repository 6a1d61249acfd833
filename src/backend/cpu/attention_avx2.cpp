// Attention tile with AVX2 + FMA + F16C (also used on AVX-512 machines). Scores take keys 16 at
// a time: the fp16 K rows are converted and transposed once per tile ([head_dim][16] floats),
// so each query's scores are FMA chains over head_dim with a key in each lane (no horizontal
// sums); V rows are converted 8 at a time, once per tile, and reused by every query.
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

// Scores of queries q .. q + Q - 1 against KB blocks of 8 keys in kt ([hd][16]): one FMA chain
// per (query, key lane) over i in order, then * scale. Q x KB chains: 6 x 2 = 12 of the 16 ymm
// registers, and each broadcast query element feeds KB FMAs.
template <int Q, int KB>
inline void score_queries(const AttnTileArgs& a, int q, const float* kt, int64_t j0, int64_t n_pad) {
  const float* qp[Q];
  __m256 s[Q][KB];
  for (int u = 0; u < Q; ++u) {
    qp[u] = a.q[q + u];
    for (int h = 0; h < KB; ++h) s[u][h] = _mm256_setzero_ps();
  }
  for (int i = 0; i < a.head_dim; ++i) {
    __m256 kv[KB];
    for (int h = 0; h < KB; ++h) kv[h] = _mm256_load_ps(kt + i * 16 + 8 * h);
    for (int u = 0; u < Q; ++u) {
      const __m256 qu = _mm256_set1_ps(qp[u][i]);
      for (int h = 0; h < KB; ++h) s[u][h] = _mm256_fmadd_ps(qu, kv[h], s[u][h]);
    }
  }
  const __m256 sc = _mm256_set1_ps(a.scale);
  for (int u = 0; u < Q; ++u)
    for (int h = 0; h < KB; ++h) _mm256_storeu_ps(a.scores + (q + u) * n_pad + j0 + 8 * h, _mm256_mul_ps(s[u][h], sc));
}

// acc_q += sum over the 8 keys r (in order) of p_q[r] * v_r, for queries q .. q + Q - 1 and
// dims [i0, i0 + 8 * IB); vb: [8 keys][hd] f32; pt: [8 keys][kAttnMaxQueries] probabilities
// of this step, so every broadcast is one pointer plus a constant offset (a pointer per query
// spilled to the stack). Q x IB independent FMA chains: 6 x 2 = 12 of the 16 ymm registers
// (8 chains only just cover FMA latency x throughput, 4 x 2 on Zen 4).
template <int Q, int IB>
inline void accumulate_queries(const AttnTileArgs& a, int q, int i0, const float* vb, const float* pt) {
  const int hd = a.head_dim;
  float* o[Q];
  for (int u = 0; u < Q; ++u) o[u] = a.acc + (q + u) * hd + i0;
  pt += q;
  vb += i0;
  __m256 c[Q][IB];
  for (int u = 0; u < Q; ++u)
    for (int h = 0; h < IB; ++h) c[u][h] = _mm256_loadu_ps(o[u] + 8 * h);
  for (int r = 0; r < 8; ++r) {
    __m256 vv[IB];
    for (int h = 0; h < IB; ++h) vv[h] = _mm256_load_ps(vb + r * hd + 8 * h);
    for (int u = 0; u < Q; ++u) {
      const __m256 pu = _mm256_set1_ps(pt[r * kAttnMaxQueries + u]);
      for (int h = 0; h < IB; ++h) c[u][h] = _mm256_fmadd_ps(pu, vv[h], c[u][h]);
    }
  }
  for (int u = 0; u < Q; ++u)
    for (int h = 0; h < IB; ++h) _mm256_storeu_ps(o[u] + 8 * h, c[u][h]);
}

template <int Q>
inline void accumulate_queries_all_dims(const AttnTileArgs& a, int q, const float* vb, const float* pt) {
  int i = 0;
  for (; i + 16 <= a.head_dim; i += 16) accumulate_queries<Q, 2>(a, q, i, vb, pt);
  if (i < a.head_dim) accumulate_queries<Q, 1>(a, q, i, vb, pt);
}

}  // namespace

void attention_tile_avx2(const AttnTileArgs& a) {
  const int hd = a.head_dim;
  int64_t n_max = 0;
  for (int q = 0; q < a.nq; ++q) n_max = std::max(n_max, a.n_keys[q]);
  const int64_t n_pad = (n_max + 7) / 8 * 8;
  alignas(32) float kt[256 * 16];  // [hd][16 keys]
  alignas(32) float vb[8 * 256];  // [8 keys][hd]
  alignas(32) float pt[8 * kAttnMaxQueries];  // [8 keys][query] probabilities of one step

  // 1. Scores, 16 keys (two blocks of 8) per step; keys past a query's limit are computed and
  // then ignored.
  for (int64_t j0 = 0; j0 < n_pad; j0 += 16) {
    const int nblk = n_pad - j0 >= 16 ? 2 : 1;
    for (int blk = 0; blk < nblk; ++blk) {
      for (int i0 = 0; i0 < hd; i0 += 8) {  // 8x8 blocks: convert 8 keys x 8 dims, transpose
        const int64_t jb = j0 + 8 * blk;
        const int nk = int(std::min<int64_t>(8, n_max - jb));
        __m256 r[8];
        for (int k = 0; k < 8; ++k)
          r[k] = k < nk ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.k + a.row(jb + k) * a.kv_stride + i0)))
                        : _mm256_setzero_ps();  // never read unwritten cache rows
        const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
        const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
        const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
        const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
        const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        float* d = kt + i0 * 16 + 8 * blk;  // rows i0..i0+7, 8 keys of this block each
        _mm256_store_ps(d + 0 * 16, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_store_ps(d + 1 * 16, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_store_ps(d + 2 * 16, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_store_ps(d + 3 * 16, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_store_ps(d + 4 * 16, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_store_ps(d + 5 * 16, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_store_ps(d + 6 * 16, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_store_ps(d + 7 * 16, _mm256_permute2f128_ps(u3, u7, 0x31));
      }
    }
    // Queries in groups: independent FMA chains cover the FMA latency x throughput (4 x 2 on
    // Zen 4), and each loaded key vector / broadcast query element feeds several FMAs. Each
    // query's own chain, over i in order, is the same whatever group it is in.
    int q = 0;
    if (nblk == 2) {
      for (; q + 6 <= a.nq; q += 6) score_queries<6, 2>(a, q, kt, j0, n_pad);
      for (; q + 2 <= a.nq; q += 2) score_queries<2, 2>(a, q, kt, j0, n_pad);
      if (q < a.nq) score_queries<1, 2>(a, q, kt, j0, n_pad);
    } else {
      for (; q + 8 <= a.nq; q += 8) score_queries<8, 1>(a, q, kt, j0, n_pad);
      if (q + 4 <= a.nq) score_queries<4, 1>(a, q, kt, j0, n_pad), q += 4;
      for (; q < a.nq; ++q) score_queries<1, 1>(a, q, kt, j0, n_pad);
    }
  }
  // 2. Softmax per query over its own keys; probabilities of keys past the limit are exactly 0.
  for (int q = 0; q < a.nq; ++q) {
    float* s = a.scores + q * n_pad;
    const int64_t n = a.n_keys[q];
    // max is exact in any order (a +-0 difference in mx changes no s[j] - mx result's exp).
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int64_t jm = 0;
    for (; jm + 8 <= n; jm += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + jm));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float mx = _mm_cvtss_f32(m4);
    for (; jm < n; ++jm) mx = s[jm] > mx ? s[jm] : mx;
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
        const uint16_t* vr = a.v + a.row(j0 + r) * a.kv_stride;
        for (int i = 0; i < hd; i += 8)
          _mm256_store_ps(vb + r * hd + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr + i))));
      } else {
        std::memset(vb + r * hd, 0, sizeof(float) * size_t(hd));
      }
    }
    // Queries in groups (independent FMA chains); a query past its limit has p = 0 here, and
    // fma(0, v, acc) == acc exactly, so it may ride along.
    for (int u = 0; u < a.nq; ++u)
      for (int r = 0; r < 8; ++r) pt[r * kAttnMaxQueries + u] = a.scores[u * n_pad + j0 + r];
    int q = 0;
    for (; q + 6 <= a.nq; q += 6) accumulate_queries_all_dims<6>(a, q, vb, pt);
    for (; q + 2 <= a.nq; q += 2) accumulate_queries_all_dims<2>(a, q, vb, pt);
    if (q < a.nq) accumulate_queries_all_dims<1>(a, q, vb, pt);
  }
  for (int q = 0; q < a.nq; ++q) std::memcpy(a.out[q], a.acc + q * hd, sizeof(float) * size_t(hd));
}

}  // namespace lmf::cpu

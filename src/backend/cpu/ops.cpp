#include "backend/cpu/ops.h"

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/elementwise_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "format/quant/half.h"
#include "format/quant/quantize.h"
#include "util/status.h"

namespace lmf::cpu {

void rms_norm(const float* x, const float* gamma, float* y, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float s = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * s * gamma[i];
  }
}

void head_norm(const float* x, const float* gamma, float* y, int64_t rows, int n_heads, int hd, float eps) {
  rms_norm(x, gamma, y, rows * n_heads, hd, eps);
}

void rope(const float* x, float* y, int64_t rows, int n_heads, int hd, int64_t pos0, float base, const float* factors,
          bool neox) {
  const int half = hd / 2;
  std::vector<float> cs(static_cast<size_t>(hd));  // [cos, sin] per frequency
  // The angle as Hugging Face computes it (the logits reference): inv_freq = 1 / base^(2i/d) in
  // fp32, then the fp32 product with the position; cos/sin of that float angle. A double angle
  // is more exact but differs from the reference by the fp32 angle's rounding, which grows with
  // the position (~1e-5 rad at 100, ~2e-3 at 30,000); the CUDA kernels use the same definition
  // (common.cuh rope_inv_freq), frequency divisors included.
  for (int64_t t = 0; t < rows; ++t) {
    const float pos = float(pos0 + t);
    for (int i = 0; i < half; ++i) {
      float inv_freq = 1.0f / std::pow(base, float(2 * i) / float(hd));
      if (factors) inv_freq /= factors[i];  // Llama 3.1+: HF divides inv_freq the same way
      const float th = pos * inv_freq;
      cs[size_t(2 * i)] = std::cos(th);
      cs[size_t(2 * i + 1)] = std::sin(th);
    }
    for (int h = 0; h < n_heads; ++h) {
      const float* xh = x + (t * n_heads + h) * hd;
      float* yh = y + (t * n_heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cs[size_t(2 * i)], s = cs[size_t(2 * i + 1)];
        const float x0 = xh[a], x1 = xh[b];
        yh[a] = x0 * c - x1 * s;
        yh[b] = x0 * s + x1 * c;
      }
    }
  }
}

void kv_store(const float* k, const float* v, uint16_t* kc, uint16_t* vc, int64_t T, int64_t kv_dim, int64_t pos0) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < kv_dim; ++i) {
      kc[(pos0 + t) * kv_dim + i] = f32_to_fp16(k[t * kv_dim + i]);
      vc[(pos0 + t) * kv_dim + i] = f32_to_fp16(v[t * kv_dim + i]);
    }
}

static const float* fp16_table() {
  static const std::vector<float> tab = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_f32(uint16_t(i));
    return t;
  }();
  return tab.data();
}

void kv_store_paged(const float* k, const float* v, uint16_t* kc, uint16_t* vc, int64_t T, int64_t kv_dim,
                    int64_t pos0, const int32_t* blocks, int block_shift) {
  const int64_t mask = (int64_t(1) << block_shift) - 1;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos0 + t, row = int64_t(blocks[p >> block_shift]) << block_shift | (p & mask);
    for (int64_t i = 0; i < kv_dim; ++i) {
      kc[row * kv_dim + i] = f32_to_fp16(k[t * kv_dim + i]);
      vc[row * kv_dim + i] = f32_to_fp16(v[t * kv_dim + i]);
    }
  }
}

// Causal attention. Jobs are (sequence, tile of up to 8 positions, KV head) with every query head
// of the GQA group, so each cached K/V row is converted once per tile; a query's result depends
// only on it and its sequence's cache, never on T, the tiling, the other sequences of the step or
// where its pages lie, so a prompt evaluated in one pass, token by token or in a batch gives the
// same bits.
void attention_paged(const PagedSeq* seqs, int64_t n_seqs, const uint16_t* kc, const uint16_t* vc, int block_shift,
                     int n_head, int n_head_kv, int hd, ThreadPool& pool) {
  const float* h2f = fp16_table();
  const int group = n_head / n_head_kv;
  const int64_t kv_dim = int64_t(n_head_kv) * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  // Positions per job: each K/V row is converted once per job, so more queries per job convert
  // less per query (16 positions x GQA 2 = 32 queries); 8 when the group is larger.
  constexpr int kTile = 8;
  const bool simd = active_isa() != Isa::Scalar && hd % 8 == 0 && hd <= 256 && group * kTile <= kAttnMaxQueries;
  const int tile = !simd ? 1 : group * 2 * kTile <= kAttnMaxQueries ? 2 * kTile : kTile;
  // Causal: a tile's cost grows with its position, so a static contiguous split gave the last
  // thread ~3/4 of a prefill's work. Threads instead take jobs from a shared counter (which also
  // absorbs a core stolen by another process), sequence by sequence and head by head so that the
  // head's K/V slice (2 x 256 B per position) stays in L2, and within a head the heaviest
  // (latest) tile first so that the last jobs are short.
  std::vector<int64_t> job0(size_t(n_seqs) + 1, 0);  // first job of each sequence
  int64_t max_keys = 0, max_t = 0;
  for (int64_t s = 0; s < n_seqs; ++s) {
    job0[size_t(s) + 1] = job0[size_t(s)] + (seqs[s].T + tile - 1) / tile * n_head_kv;
    max_keys = std::max(max_keys, seqs[s].pos0 + seqs[s].T);
    max_t = std::max(max_t, seqs[s].T);
  }
  const int64_t n_jobs = job0.back();
  std::atomic<int64_t> next{0};
  pool.run_all([&](int) {
    // Scratch kept per thread: zero-filling fresh vectors on every call cost decode ~2%.
    thread_local std::vector<float> sc, acc;
    const int64_t n_pad = (max_keys + 7) / 8 * 8;
    const int64_t nq = int64_t(group) * std::min<int64_t>(tile, max_t);
    if (sc.size() < size_t(n_pad * nq)) sc.resize(size_t(n_pad * nq));
    if (acc.size() < size_t(hd * nq)) acc.resize(size_t(hd * nq));
    int64_t si = 0;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n_jobs;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      while (job0[size_t(si) + 1] <= i) ++si;  // jobs are taken in increasing order
      while (job0[size_t(si)] > i) --si;
      const PagedSeq& S = seqs[si];
      const int64_t T = S.T, pos0 = S.pos0, n_tiles = (T + tile - 1) / tile, ji = i - job0[size_t(si)];
      const int kvh = int(ji / n_tiles);
      const int64_t t0 = (n_tiles - 1 - ji % n_tiles) * tile, t1 = std::min(T, t0 + tile);
      AttnTileArgs a;
      a.blocks = S.blocks;
      a.block_shift = block_shift;
      if (simd) {
        for (int64_t t = t0; t < t1; ++t)
          for (int g = 0; g < group; ++g) {
            const int h = kvh * group + g;
            a.q[a.nq] = S.q + (t * n_head + h) * hd;
            a.out[a.nq] = S.out + (t * n_head + h) * hd;
            a.n_keys[a.nq] = pos0 + t + 1;
            ++a.nq;
          }
        a.k = kc + int64_t(kvh) * hd;
        a.v = vc + int64_t(kvh) * hd;
        a.kv_stride = kv_dim;
        a.head_dim = hd;
        a.scale = scale;
        a.scores = sc.data();
        a.acc = acc.data();
        attention_tile_avx2(a);
        continue;
      }
      const int64_t t = t0;
      const int64_t n = pos0 + t + 1;  // causal: positions 0..pos0+t
      for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        const float* qh = S.q + (t * n_head + h) * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const uint16_t* kr = kc + a.row(j) * kv_dim + int64_t(kvh) * hd;
          float s = 0;
          for (int i = 0; i < hd; ++i) s += qh[i] * h2f[kr[i]];
          sc[size_t(j)] = s * scale;
          mx = std::max(mx, sc[size_t(j)]);
        }
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += sc[size_t(j)] = std::exp(sc[size_t(j)] - mx);
        std::fill(acc.begin(), acc.begin() + hd, 0.f);
        for (int64_t j = 0; j < n; ++j) {
          const uint16_t* vr = vc + a.row(j) * kv_dim + int64_t(kvh) * hd;
          const float p = sc[size_t(j)];
          for (int i = 0; i < hd; ++i) acc[size_t(i)] += p * h2f[vr[i]];
        }
        float* oh = S.out + (t * n_head + h) * hd;
        for (int i = 0; i < hd; ++i) oh[i] = acc[size_t(i)] / sum;
      }
    }
  });
}

void attention(const float* q, const uint16_t* kc, const uint16_t* vc, float* out, int64_t T, int64_t pos0,
               int n_head, int n_head_kv, int hd, ThreadPool& pool) {
  const PagedSeq s{q, out, T, pos0, nullptr};
  attention_paged(&s, 1, kc, vc, 0, n_head, n_head_kv, hd, pool);
}

void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void silu_mul(const float* g, const float* u, float* y, int64_t n) {
  if (active_isa() != Isa::Scalar) return silu_mul_avx2(g, u, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void silu_mul(const float* g, const float* u, float* y, int64_t n, ThreadPool& pool) {
  if (n < 4096) return silu_mul(g, u, y, n);
  pool.parallel_for(n / 8, [&](int, int64_t b, int64_t e) { silu_mul(g + 8 * b, u + 8 * b, y + 8 * b, 8 * (e - b)); });
  if (n % 8) silu_mul(g + n / 8 * 8, u + n / 8 * 8, y + n / 8 * 8, n % 8);
}

void embed_row(const Weight& w, int32_t token, float* y) {
  LMF_CHECK(token >= 0 && token < w.rows);
  dequantize_row(w.type, w.data + size_t(token) * w.row_stride(), y, w.cols);
}

const float* as_f32(const Weight& w) {
  LMF_CHECK(w.type == DType::F32, "weight ", w.name);
  return reinterpret_cast<const float*>(w.data);
}

}  // namespace lmf::cpu

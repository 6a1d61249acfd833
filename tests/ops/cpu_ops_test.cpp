// CPU reference ops against double-precision formulas: attention (every GQA grouping, prompt
// and decode shapes, prompt-in-one-pass equal to token-by-token bit for bit), silu_mul, rope,
// rms_norm.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "format/quant/half.h"

namespace lmf::cpu {
namespace {

struct Case {
  int n_head, n_kv, hd;
  int64_t pos0, T;
};

TEST(CpuOps, AttentionMatchesDoubleReference) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (Case c : {Case{4, 4, 32, 0, 1}, Case{8, 2, 32, 3, 9}, Case{16, 8, 128, 0, 17}, Case{14, 2, 64, 5, 3},
                 Case{32, 8, 128, 40, 1}, Case{9, 3, 64, 0, 33},
                 // head_dim 40: a dim tail of 8 after blocks of 16; 70 tokens: several
                 // 16-position tiles, key counts with an odd number of 8-key blocks.
                 Case{8, 4, 40, 2, 20}, Case{16, 8, 64, 7, 70}}) {
    const int64_t n = c.pos0 + c.T, kv_dim = int64_t(c.n_kv) * c.hd;
    std::vector<uint16_t> kc(size_t(n * kv_dim)), vc(size_t(n * kv_dim));
    for (auto& x : kc) x = f32_to_fp16(nd(rng));
    for (auto& x : vc) x = f32_to_fp16(nd(rng));
    std::vector<float> q(size_t(c.T * c.n_head * c.hd));
    for (auto& x : q) x = nd(rng);
    std::vector<float> out(q.size() + 64, NAN);  // guard zone after the output
    attention(q.data(), kc.data(), vc.data(), out.data(), c.T, c.pos0, c.n_head, c.n_kv, c.hd, pool);
    const int group = c.n_head / c.n_kv;
    double err = 0, ref_norm = 0;
    for (int64_t t = 0; t < c.T; ++t)
      for (int h = 0; h < c.n_head; ++h) {
        const int kvh = h / group;
        const int64_t lim = c.pos0 + t + 1;
        std::vector<double> s(static_cast<size_t>(lim));
        double mx = -1e300;
        for (int64_t j = 0; j < lim; ++j) {
          double d = 0;
          for (int i = 0; i < c.hd; ++i)
            d += double(q[size_t((t * c.n_head + h) * c.hd + i)]) * fp16_to_f32(kc[size_t(j * kv_dim + kvh * c.hd + i)]);
          s[size_t(j)] = d / std::sqrt(double(c.hd));
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (auto& x : s) sum += x = std::exp(x - mx);
        for (int i = 0; i < c.hd; ++i) {
          double o = 0;
          for (int64_t j = 0; j < lim; ++j) o += s[size_t(j)] * fp16_to_f32(vc[size_t(j * kv_dim + kvh * c.hd + i)]);
          o /= sum;
          const double got = out[size_t((t * c.n_head + h) * c.hd + i)];
          err += (got - o) * (got - o);
          ref_norm += o * o;
        }
      }
    EXPECT_LE(std::sqrt(err / ref_norm), 1e-5) << c.n_head << "/" << c.n_kv << " hd " << c.hd << " T " << c.T;
    for (size_t i = q.size(); i < out.size(); ++i) EXPECT_TRUE(std::isnan(out[i])) << "guard zone written";
    // Token by token gives the same bits as one pass.
    std::vector<float> step(q.size());
    for (int64_t t = 0; t < c.T; ++t)
      attention(q.data() + t * c.n_head * c.hd, kc.data(), vc.data(), step.data() + t * c.n_head * c.hd, 1,
                c.pos0 + t, c.n_head, c.n_kv, c.hd, pool);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(step[i], out[i]) << "element " << i;
  }
}

TEST(CpuOps, SiluMulMatchesDoubleReference) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int64_t n : {1, 7, 8, 33, 5000, 12289}) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 8, NAN);
    for (auto& x : g) x = nd(rng);
    for (auto& x : u) x = nd(rng);
    g[0] = -90.f;  // far tails
    if (n > 1) g[1] = 90.f;
    silu_mul(g.data(), u.data(), y.data(), n, pool);
    for (int64_t i = 0; i < n; ++i) {
      const double ref = double(g[size_t(i)]) / (1.0 + std::exp(-double(g[size_t(i)]))) * u[size_t(i)];
      EXPECT_NEAR(y[size_t(i)], ref, 1e-6 * std::max(1.0, std::fabs(ref))) << "n " << n << " i " << i << " g " << g[size_t(i)];
    }
    for (size_t i = size_t(n); i < y.size(); ++i) EXPECT_TRUE(std::isnan(y[i]));
  }
}

TEST(CpuOps, RopeBothStylesMatchReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int nh = 3, hd = 64;
  std::vector<float> x(size_t(2 * nh * hd)), y(x.size());
  for (auto& v : x) v = nd(rng);
  // Llama 3.1+ frequency divisors: 1 (high frequencies), a smooth middle, 8 (low frequencies).
  std::vector<float> ff(size_t(hd / 2));
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = i < 4 ? 1.f : i < 12 ? 1.f + 0.6f * float(i - 3) : 8.f;
  for (const float* factors : {static_cast<const float*>(nullptr), static_cast<const float*>(ff.data())})
  for (bool neox : {true, false}) {
    rope(x.data(), y.data(), 2, nh, hd, 100, 10000.f, factors, neox);
    for (int t = 0; t < 2; ++t)
      for (int h = 0; h < nh; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          const int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
          // Hugging Face's angle: fp32 inverse frequency (divided by the factor: HF's llama3
          // inv_freq / factor) times the fp32 position.
          float inv_freq = 1.0f / std::pow(10000.f, float(2 * i) / float(hd));
          if (factors) inv_freq /= factors[i];
          const double th = float(100 + t) * inv_freq;
          const float* xh = x.data() + (t * nh + h) * hd;
          const float* yh = y.data() + (t * nh + h) * hd;
          EXPECT_NEAR(yh[a], xh[a] * std::cos(th) - xh[b] * std::sin(th), 1e-5);
          EXPECT_NEAR(yh[b], xh[a] * std::sin(th) + xh[b] * std::cos(th), 1e-5);
        }
  }
}

TEST(CpuOps, RmsNormMatchesReference) {
  std::vector<float> x = {1, -2, 3, 4, 0.5f, -0.25f, 8, 1}, g = {1, 2, 0.5f, 3}, y(8);
  rms_norm(x.data(), g.data(), y.data(), 2, 4, 1e-5f);
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int i = 0; i < 4; ++i) ss += double(x[size_t(r * 4 + i)]) * x[size_t(r * 4 + i)];
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(y[size_t(r * 4 + i)], x[size_t(r * 4 + i)] / std::sqrt(ss / 4 + 1e-5) * g[size_t(i)], 1e-6);
  }
}

}  // namespace
}  // namespace lmf::cpu

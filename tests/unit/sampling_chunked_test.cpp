// The order of the sampler's sums (sampling/chunked_sum.h): the plain left-to-right sum for up
// to 256 candidates, chunk totals added left to right beyond; and sample_with_uniform's cut-offs
// and pick follow those running sums (the CUDA sampler forms the same ones in parallel).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/chunked_sum.h"
#include "sampling/sampler.h"

using namespace lmf;

namespace {

// The running sums written out from the definition: chunk totals from 0, then
// T_b = T_{b-1} + S_b, and T_{b-1} + (chunk prefix) inside chunk b.
std::vector<double> two_level_running(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  double T = 0;
  for (size_t b0 = 0; b0 < v.size(); b0 += kSumChunk) {
    double local = 0;
    const size_t e = std::min(v.size(), b0 + kSumChunk);
    for (size_t i = b0; i < e; ++i) {
      local = local + v[i];
      out[i] = T + local;
    }
    T = T + local;
  }
  return out;
}

std::vector<double> random_terms(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = std::exp(-30.0 * d(rng)) * d(rng);  // wide range: rounding matters
  return v;
}

}  // namespace

TEST(ChunkedSum, PlainUpTo256ThenTwoLevel) {
  std::mt19937 rng(5);
  for (size_t n : {1, 2, 255, 256, 257, 511, 512, 513, 5000}) {
    const auto v = random_terms(n, rng);
    const auto want = two_level_running(v);
    ChunkedSum c;
    double plain = 0;
    for (size_t i = 0; i < n; ++i) {
      plain += v[i];
      const double got = c.add(v[i]);
      EXPECT_EQ(got, want[i]) << "n " << n << " i " << i;
      if (i < size_t(kSumChunk)) {
        EXPECT_EQ(got, plain) << "n " << n << " i " << i;
      }
      if (i > 0) {
        EXPECT_GE(got, want[i - 1]) << "running sums never decrease";
      }
    }
  }
  // Beyond one chunk the order matters: some n of these differs from the plain sum.
  bool differs = false;
  for (int r = 0; r < 20 && !differs; ++r) {
    const auto v = random_terms(5000, rng);
    double plain = 0;
    for (double x : v) plain += x;
    differs = two_level_running(v).back() != plain;
  }
  EXPECT_TRUE(differs);
}

// 600 tokens with distinct probabilities (top-k, top-p, min-p off): for u placed next to each
// boundary of the two-level running sums, the pick is the first i with u * total < C_i.
TEST(ChunkedSum, PickFollowsTheTwoLevelRunningSums) {
  const int n = 600;
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) logits[size_t(i)] = -0.01f * float(i);  // already sorted: id = rank
  SamplingParams p;
  p.temperature = 1, p.top_k = 0, p.top_p = 1, p.min_p = 0;
  std::vector<double> e(n);
  for (int i = 0; i < n; ++i) e[size_t(i)] = std::exp(double(logits[size_t(i)] - logits[0]) / 1.0);
  const double sum = two_level_running(e).back();
  std::vector<double> prob(n);
  for (int i = 0; i < n; ++i) prob[size_t(i)] = e[size_t(i)] / sum;
  const auto C = two_level_running(prob);
  const double total = C.back();
  for (int i : {0, 1, 100, 255, 256, 257, 400, 511, 512, 598}) {
    // the largest u with u * total < C_i picks i; just above C_i / total picks a later one
    double u = C[size_t(i)] / total;
    while (u * total >= C[size_t(i)]) u = std::nextafter(u, 0.0);
    EXPECT_EQ(sample_with_uniform(p, logits, {}, u), i) << "i " << i;
    double v = C[size_t(i)] / total;
    while (v * total < C[size_t(i)]) v = std::nextafter(v, 1.0);
    EXPECT_GT(sample_with_uniform(p, logits, {}, v), i) << "i " << i;
  }
  // top-p: the cut is the first C_i >= top_p (its kept mass C_i), also inside the third chunk.
  for (int i : {10, 300, 520}) {
    SamplingParams q = p;
    q.top_p = float(C[size_t(i)]);
    int cut = 0;
    while (C[size_t(cut)] < double(q.top_p)) ++cut;
    // u just below 1 picks the last kept token
    EXPECT_EQ(sample_with_uniform(q, logits, {}, 1.0 - 1.0 / 9007199254740992.0), cut) << "top_p at " << i;
  }
}

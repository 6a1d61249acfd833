// Device sampling (backend/cuda/sampling.h) vs the CPU sampler (sampling/sampler.h): the same
// logits, penalty ids and uniform number must give the same token id, across temperatures,
// top-k (1, small, 1024, all), top-p (off, typical, tiny), min-p, repetition penalty, ties,
// signed zeros, -inf, and vocabularies from 1 to 151936.
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/cuda/sampling.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "sampling/sampler.h"
#include "util/status.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

enum class Kind { Normal, Ties, Peaked, Zeros, NegInf };

std::vector<float> make_logits(int64_t n, Kind kind, std::mt19937& rng) {
  auto x = randn(size_t(n), rng, 3.f);
  for (auto& v : x) switch (kind) {
      case Kind::Normal: break;
      case Kind::Ties: v = std::round(v * 2.f) / 2.f; break;  // a handful of distinct values
      case Kind::Peaked: v *= 4.f; break;                     // a few tokens carry the mass
      case Kind::Zeros: v = (rng() & 1) ? 0.f : -0.f; break;  // all equal, signed zeros
      case Kind::NegInf: if (rng() % 3 == 0) v = -std::numeric_limits<float>::infinity(); break;
    }
  if (kind == Kind::NegInf) x[0] = 1.f;  // at least one finite logit
  return x;
}

SamplingParams random_params(int64_t n, std::mt19937& rng) {
  SamplingParams p;
  const float temps[] = {0.f, 0.3f, 0.8f, 1.f, 2.5f};
  const float tps[] = {1.f, 0.95f, 0.5f, 1e-6f};
  const float mps[] = {0.f, 0.05f, 0.5f};
  p.temperature = temps[rng() % 5];
  p.top_p = tps[rng() % 4];
  p.min_p = mps[rng() % 3];
  const int64_t ks[] = {1, 2, 40, 1000, kSampleMaxK, 0, n};
  do p.top_k = int(ks[rng() % 7]);
  while (!sample_supported(p, n));
  p.repeat_penalty = rng() % 3 == 0 ? 1.3f : 1.f;
  p.repeat_last_n = 64;
  return p;
}

double uniform53(std::mt19937_64& g) { return double(g() >> 11) * (1.0 / 9007199254740992.0); }

}  // namespace

TEST(CudaSampling, MatchesCpuSampler) {
  std::mt19937 rng(11);
  std::mt19937_64 ug(12);
  SampleScratch sc = sample_scratch_alloc(151936);
  DevBuf<int> out(1);
  int checked = 0, mismatches = 0;
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(1024), int64_t(4097), int64_t(151936)}) {
    for (Kind kind : {Kind::Normal, Kind::Ties, Kind::Peaked, Kind::Zeros, Kind::NegInf}) {
      const auto x = make_logits(n, kind, rng);
      DevBuf<float> dx(x);
      const int configs = n > 10000 ? 40 : 120;
      for (int c = 0; c < configs; ++c) {
        const SamplingParams p = random_params(n, rng);
        std::vector<int32_t> history;
        for (int h = 0; h < 100; ++h) history.push_back(int32_t(rng() % uint32_t(std::min<int64_t>(n, 50))));
        const auto pen = lmf::penalty_ids(p, history, n);
        const int n_pen = upload_penalty_ids(pen.data(), int64_t(pen.size()), sc);
        for (int r = 0; r < 3; ++r) {
          const double u = r == 0 ? 0.0 : r == 1 ? 1.0 - 1.0 / 9007199254740992.0 : uniform53(ug);
          const int32_t want = lmf::sample_with_uniform(p, x, pen, u);
          sample(dx.p(), n, p, sc.pen_ids, n_pen, u, out.p(), sc);
          const int got = out.get()[0];
          ++checked;
          if (got != want) ++mismatches;
          EXPECT_EQ(got, want) << "n " << n << " kind " << int(kind) << " T " << p.temperature << " k " << p.top_k
                               << " p " << p.top_p << " min_p " << p.min_p << " rp " << p.repeat_penalty << " u " << u;
        }
        CUDA_CHECK(cudaDeviceSynchronize());  // the pinned staging buffer is reused next config
      }
    }
  }
  std::printf("[sampling] %d cases, %d mismatches\n", checked, mismatches);
  sample_scratch_free(sc);
}

// Many uniforms on one fixed distribution: every id the CPU draws, the device draws.
TEST(CudaSampling, ManyDrawsOneVocabulary) {
  std::mt19937 rng(21);
  std::mt19937_64 ug(22);
  const int64_t n = 151936;
  const auto x = make_logits(n, Kind::Normal, rng);
  DevBuf<float> dx(x);
  DevBuf<int> out(1);
  SampleScratch sc = sample_scratch_alloc(n);
  SamplingParams p;  // defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05
  p.min_p = 0;       // keep a long tail so many distinct ids come out
  p.temperature = 1.5f;
  bool all = true;
  for (int r = 0; r < 500; ++r) {
    const double u = uniform53(ug);
    sample(dx.p(), n, p, nullptr, 0, u, out.p(), sc);
    all &= out.get()[0] == lmf::sample_with_uniform(p, x, {}, u);
  }
  EXPECT_TRUE(all);
  sample_scratch_free(sc);
}

TEST(CudaSampling, UnsupportedConfigurationIsAnError) {
  SampleScratch sc = sample_scratch_alloc(4096);
  DevBuf<float> dx(std::vector<float>(4096, 0.f));
  DevBuf<int> out(1);
  SamplingParams p;
  p.top_k = 0;  // all 4096 candidates > kSampleMaxK
  EXPECT_TRUE(!sample_supported(p, 4096));
  bool threw = false;
  try {
    sample(dx.p(), 4096, p, nullptr, 0, 0.5, out.p(), sc);
  } catch (const lmf::Error&) {
    threw = true;
  }
  EXPECT_TRUE(threw);
  p.temperature = 0;  // greedy is always supported
  EXPECT_TRUE(sample_supported(p, 4096));
  sample_scratch_free(sc);
}

// Device sampling (backend/cuda/sampling.h) vs the CPU sampler (sampling/sampler.h): the same
// logits, penalty ids and uniform number must give the same token id, across temperatures,
// top-k (1, small, 1024, 1025..n, all), top-p (off, typical, tiny), min-p, repetition penalty,
// ties, signed zeros, -inf, wide logits, and vocabularies from 1 to 151936; plus uniforms, top-p
// and min-p placed on the CPU's own running sums (where a differently ordered sum would flip the
// token), and CUDA-graph captures of both paths; the few-candidate path also on 256K logits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/cuda/sampling.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "sampling/chunked_sum.h"
#include "sampling/sampler.h"
#include "util/status.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

enum class Kind { Normal, Ties, Peaked, Zeros, NegInf, Wide, ZeroInf };

std::vector<float> make_logits(int64_t n, Kind kind, std::mt19937& rng) {
  auto x = randn(size_t(n), rng, 3.f);
  for (auto& v : x) switch (kind) {
      case Kind::Normal: break;
      case Kind::Ties: v = std::round(v * 2.f) / 2.f; break;  // a handful of distinct values
      case Kind::Peaked: v *= 4.f; break;                     // a few tokens carry the mass
      case Kind::Zeros: v = (rng() & 1) ? 0.f : -0.f; break;  // all equal, signed zeros
      case Kind::NegInf: if (rng() % 3 == 0) v = -std::numeric_limits<float>::infinity(); break;
      case Kind::Wide: v *= 8.f; break;  // most exp() terms fall below an ulp of the sum
      case Kind::ZeroInf: v = (rng() & 1) ? 0.f : -std::numeric_limits<float>::infinity(); break;
    }
  if (kind == Kind::NegInf) x[0] = 1.f;  // at least one finite logit
  if (kind == Kind::ZeroInf) x[0] = 0.f;
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
  // k = 0, k = n and k in (kSampleMaxK, n] take the device's full-sort path when n > kSampleMaxK.
  const int64_t big = kSampleMaxK + 1 + int64_t(rng() % uint32_t(std::max<int64_t>(n - kSampleMaxK, 1)));
  const int64_t ks[] = {1, 2, 40, 1000, kSampleMaxK, 0, n, 0, kSampleMaxK + 1, big, n - 1, n / 2 + 1};
  p.top_k = int(std::max<int64_t>(ks[rng() % 12], 0));
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
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(1024), int64_t(1025), int64_t(4097), int64_t(50001),
                    int64_t(151936)}) {
    for (Kind kind : {Kind::Normal, Kind::Ties, Kind::Peaked, Kind::Zeros, Kind::NegInf, Kind::Wide}) {
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
          for (bool two : {false, true}) {  // both forms of the few-candidate path
            sc.two_pass = two;
            sample(dx.p(), n, p, sc.pen_ids, n_pen, u, out.p(), sc);
            const int got = out.get()[0];
            ++checked;
            if (got != want) ++mismatches;
            EXPECT_EQ(got, want) << "n " << n << " kind " << int(kind) << " T " << p.temperature << " k " << p.top_k
                                 << " p " << p.top_p << " min_p " << p.min_p << " rp " << p.repeat_penalty << " u " << u
                                 << " two-pass " << two;
          }
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
  SamplingParams all_tokens = p;  // k = 0, no top-p: every one of the n tokens can come out
  all_tokens.top_k = 0;
  all_tokens.top_p = 1.f;
  SamplingParams nucleus = all_tokens;  // k = 0 with top-p: the kept prefix is long
  nucleus.top_p = 0.95f;
  SamplingParams greedy_pen;  // one candidate through the few-candidate path
  greedy_pen.temperature = 0;
  greedy_pen.repeat_penalty = 1.3f;
  const int pen_id = 17;
  DevBuf<int> dpen(std::vector<int>{pen_id});
  struct Case {
    SamplingParams q;
    bool two_pass;
  };
  for (const Case& cs : {Case{p, false}, Case{p, true}, Case{greedy_pen, false}, Case{greedy_pen, true},
                         Case{all_tokens, false}, Case{nucleus, false}}) {
    const SamplingParams& q = cs.q;
    sc.two_pass = cs.two_pass;
    const int n_pen = q.repeat_penalty != 1.f ? 1 : 0;
    const std::vector<int32_t> pen = n_pen ? std::vector<int32_t>{pen_id} : std::vector<int32_t>{};
    bool all = true;
    for (int r = 0; r < 300; ++r) {
      const double u = uniform53(ug);
      sample(dx.p(), n, q, dpen.p(), n_pen, u, out.p(), sc);
      all &= out.get()[0] == lmf::sample_with_uniform(q, x, pen, u);
    }
    EXPECT_TRUE(all) << "k " << q.top_k << " p " << q.top_p << " two-pass " << cs.two_pass;
    // Device time of one sampled step (no host sync between launches).
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0));
    for (int r = 0; r < 50; ++r) sample(dx.p(), n, q, dpen.p(), n_pen, 0.5, out.p(), sc);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    std::printf("[sampling] n %lld T %.2f k %d p %.2f min_p %.2f rp %.2f%s: %.1f us per step\n", (long long)n,
                q.temperature, q.top_k, q.top_p, q.min_p, q.repeat_penalty,
                q.top_k > 0 || q.temperature <= 0 ? (cs.two_pass ? " two-pass" : " one-block") : "", 1000.0 * ms / 50);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
  }
  sample_scratch_free(sc);
}

// The CPU sampler's intermediate values (the same sums as sampling/sampler.cpp), only to place
// uniforms, top-p and min-p right on its boundaries; the tests compare against
// sample_with_uniform itself.
struct CpuTrace {
  std::vector<double> prob;  // normalized, in sorted order (top-k applied)
  std::vector<double> cum;   // running sums of prob over the kept prefix
  double total = 0;
};
CpuTrace cpu_trace(const SamplingParams& p, const std::vector<float>& x) {
  std::vector<std::pair<float, int32_t>> c(x.size());
  for (size_t i = 0; i < x.size(); ++i) c[i] = {x[i], int32_t(i)};
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (p.top_k > 0 && size_t(p.top_k) < c.size()) c.resize(size_t(p.top_k));
  CpuTrace t;
  t.prob.resize(c.size());
  lmf::ChunkedSum norm;  // the sampler's order of summation (sampling/chunked_sum.h)
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i)
    sum = norm.add(t.prob[i] = std::exp(double(c[i].first - c[0].first) / p.temperature));
  for (auto& v : t.prob) v /= sum;
  size_t keep = c.size();
  if (p.min_p > 0)
    for (size_t i = 1; i < c.size(); ++i)
      if (t.prob[i] < p.min_p * t.prob[0]) {
        keep = i;
        break;
      }
  lmf::ChunkedSum run;
  for (size_t i = 0; i < keep; ++i) {
    t.cum.push_back(run.add(t.prob[i]));
    if (p.top_p < 1 && t.cum.back() >= p.top_p) break;
  }
  t.total = t.cum.back();
  return t;
}

// Uniforms u with u * total within a few ulps of a running sum, top-p on a running sum, min-p
// on a probability ratio: a device sum in any other order than the CPU's would flip some of these.
// The logits take a handful of distinct values (ties, signed zeros, 0 / -inf), so the exp()
// values are a few numbers on which CUDA's exp and the C library's agree, and what is tested is
// the order of the summation. (With ~10^5 distinct exp() arguments, a u placed within a few ulps
// of a boundary can flip on the last bit of some exp(): the caveat in backend/cuda/sampling.h.)
TEST(CudaSampling, BoundariesOfTheRunningSums) {
  std::mt19937 rng(31);
  SampleScratch sc = sample_scratch_alloc(151936);
  DevBuf<int> out(1);
  int checked = 0, mismatches = 0;
  for (int64_t n : {int64_t(3000), int64_t(151936)}) {
    for (Kind kind : {Kind::Ties, Kind::Zeros, Kind::ZeroInf}) {
      const auto x = make_logits(n, kind, rng);
      DevBuf<float> dx(x);
      for (int variant = 0; variant < 3; ++variant) {
        SamplingParams p;
        p.temperature = variant == 1 ? 1.f : 0.7f;
        p.top_k = variant == 2 ? int(n) - 7 : 0;
        p.top_p = 1.f;
        p.min_p = 0.f;
        const CpuTrace full = cpu_trace(p, x);
        std::vector<SamplingParams> ps{p};
        // top-p exactly at (float-rounded) running sums, min-p at probability ratios
        for (int j = 0; j < 3; ++j) {
          SamplingParams q = p;
          const size_t i = full.cum.size() * size_t(j + 1) / 4;
          q.top_p = float(full.cum[i]);
          if (q.top_p > 0 && q.top_p < 1) ps.push_back(q);
          q = p;
          q.min_p = float(full.prob[std::min(i, full.prob.size() - 1)] / full.prob[0]);
          if (q.min_p > 0) ps.push_back(q);
        }
        for (const SamplingParams& q : ps) {
          const CpuTrace t = cpu_trace(q, x);
          std::vector<double> us{0.0, 1.0 - 1.0 / 9007199254740992.0};
          for (int j = 0; j < 4; ++j) {
            const size_t i = (t.cum.size() - 1) * size_t(j) / 3;
            double u = t.cum[i] / t.total;
            for (int d = 0; d < 2; ++d) u = std::nextafter(u, 0.0);
            for (int d = 0; d < 4; ++d, u = std::nextafter(u, 1.0))
              if (u >= 0 && u < 1) us.push_back(u);
          }
          for (double u : us) {
            const int32_t want = lmf::sample_with_uniform(q, x, {}, u);
            sample(dx.p(), n, q, nullptr, 0, u, out.p(), sc);
            const int got = out.get()[0];
            ++checked;
            if (got != want) ++mismatches;
            EXPECT_EQ(got, want) << "n " << n << " kind " << int(kind) << " T " << q.temperature << " k " << q.top_k
                                 << " p " << q.top_p << " min_p " << q.min_p << " u " << u;
          }
        }
      }
    }
  }
  std::printf("[sampling boundaries] %d cases, %d mismatches\n", checked, mismatches);
  sample_scratch_free(sc);
}

// sample(p, u) on n logits captured into a CUDA graph once (no host sync or allocation inside
// sample()), then replayed on `replays` fresh sets of logits of kinds a and b alternately; each
// replay's id must be the CPU sampler's.
static void check_graph_replays(SampleScratch& sc, int64_t n, const SamplingParams& p, double u, int replays, Kind a, Kind b,
                                std::mt19937& rng) {
  DevBuf<float> dx{size_t(n)};
  DevBuf<int> out(1);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaGraph_t g;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  sample(dx.p(), n, p, nullptr, 0, u, out.p(), sc, st);
  CUDA_CHECK(cudaStreamEndCapture(st, &g));
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int r = 0; r < replays; ++r) {
    const auto x = make_logits(n, r % 2 ? b : a, rng);
    dx.upload(x);
    // A pageable cudaMemcpy may return before its DMA lands, and st does not wait for the
    // legacy stream: wait here, or the graph may read the previous replay's logits.
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(ge, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    EXPECT_EQ(out.get()[0], lmf::sample_with_uniform(p, x, {}, u)) << "k " << p.top_k << " replay " << r;
  }
  CUDA_CHECK(cudaGraphExecDestroy(ge));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaStreamDestroy(st));
}

// The many-candidate path (sort + running sums) in a CUDA graph.
TEST(CudaSampling, GraphCaptureAllTokens) {
  std::mt19937 rng(41);
  const int64_t n = 151936;
  SampleScratch sc = sample_scratch_alloc(n);
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 0.9f;
  p.min_p = 0.f;
  p.temperature = 1.2f;
  check_graph_replays(sc, n, p, 0.61803398874989484, 5, Kind::Ties, Kind::Normal, rng);
  sample_scratch_free(sc);
}

// The few-candidate path's pass 1 in both forms: chunks held in shared memory (k = 40 or 1 on
// 256K logits) and, for chunks over 44 KB of ords (k >= 1000 on 256K logits: 16 blocks of 16K),
// read from global memory on every radix pass; with the penalty and greedy (one candidate), and
// captured into a CUDA graph.
TEST(CudaSampling, LargeVocabularyFewCandidates) {
  std::mt19937 rng(51);
  std::mt19937_64 ug(52);
  const int64_t n = 262144;
  SampleScratch sc = sample_scratch_alloc(n);
  sc.two_pass = true;  // the one-block form has no chunks; MatchesCpuSampler runs both forms
  DevBuf<int> out(1);
  int checked = 0, mismatches = 0;
  for (Kind kind : {Kind::Normal, Kind::Ties, Kind::NegInf}) {
    const auto x = make_logits(n, kind, rng);
    DevBuf<float> dx(x);
    for (int k : {1, 40, 1000, kSampleMaxK})
      for (float t : {0.f, 0.8f})
        for (float rp : {1.f, 1.3f}) {
          SamplingParams p;
          p.top_k = k;
          p.temperature = t;
          p.min_p = 0.f;
          p.repeat_penalty = rp;
          std::vector<int32_t> history;
          for (int h = 0; h < 64; ++h) history.push_back(int32_t(rng() % 64));
          const auto pen = lmf::penalty_ids(p, history, n);
          const int n_pen = upload_penalty_ids(pen.data(), int64_t(pen.size()), sc);
          for (int r = 0; r < 3; ++r) {
            const double u = uniform53(ug);
            const int32_t want = lmf::sample_with_uniform(p, x, pen, u);
            sample(dx.p(), n, p, sc.pen_ids, n_pen, u, out.p(), sc);
            const int got = out.get()[0];
            ++checked;
            if (got != want) ++mismatches;
            EXPECT_EQ(got, want) << "kind " << int(kind) << " k " << k << " T " << t << " rp " << rp << " u " << u;
          }
          CUDA_CHECK(cudaDeviceSynchronize());
        }
  }
  std::printf("[sampling 256K] %d cases, %d mismatches\n", checked, mismatches);
  // In a CUDA graph (pass 2's dynamic shared memory is set up at scratch allocation).
  check_graph_replays(sc, n, SamplingParams{}, 0.41421356237309503, 3, Kind::Peaked, Kind::Normal, rng);
  sample_scratch_free(sc);
}

TEST(CudaSampling, EveryConfigurationIsSupported) {
  SamplingParams p;
  p.top_k = 0;
  EXPECT_TRUE(sample_supported(p, 4096));
  EXPECT_TRUE(sample_supported(p, 151936));
  p.top_k = 5000;
  EXPECT_TRUE(sample_supported(p, 151936));
  EXPECT_TRUE(!sample_supported(p, 0));
  SampleScratch sc = sample_scratch_alloc(4096);
  DevBuf<int> out(1);
  DevBuf<float> dx(std::vector<float>(8192, 0.f));
  // More logits than the scratch was sized for.
  EXPECT_TRUE(throws_error([&] { sample(dx.p(), 8192, p, nullptr, 0, 0.5, out.p(), sc); }));
  sample_scratch_free(sc);
}

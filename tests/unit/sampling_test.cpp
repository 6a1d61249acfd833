#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "sampling/sampler.h"
#include "util/status.h"

namespace lmf {
namespace {

std::vector<float> logits_of(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

TEST(Sampling, GreedyIsArgmaxAndIgnoresSeed) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
  for (uint64_t seed : {0, 1, 99}) {
    SamplingParams p;
    p.temperature = 0;
    p.seed = seed;
    Sampler s(p);
    EXPECT_EQ(s.sample(l, {}), 1);
  }
  EXPECT_EQ(argmax(l), 1);
}

TEST(Sampling, SameSeedSameTokens) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)) * 3);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0;
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) ta.push_back(a.sample(l, ta)), tb.push_back(b.sample(l, tb));
  EXPECT_EQ(ta, tb);
  p.seed = 1235;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(c.sample(l, tc));
  EXPECT_NE(ta, tc);
}

TEST(Sampling, FrequenciesFollowTheDistribution) {
  auto l = logits_of({0.5, 0.3, 0.2});
  SamplingParams p;
  p.temperature = 1;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 7;
  Sampler s(p);
  std::map<int, int> n;
  const int N = 20000;
  for (int i = 0; i < N; ++i) n[s.sample(l, {})]++;
  EXPECT_NEAR(n[0] / double(N), 0.5, 0.02);
  EXPECT_NEAR(n[1] / double(N), 0.3, 0.02);
  EXPECT_NEAR(n[2] / double(N), 0.2, 0.02);
}

TEST(Sampling, TopKTopPMinPRestrictTheCandidates) {
  auto l = logits_of({0.4, 0.3, 0.2, 0.06, 0.04});
  auto draw_set = [&](SamplingParams p) {
    p.temperature = 1;
    p.seed = 3;
    Sampler s(p);
    std::map<int, int> n;
    for (int i = 0; i < 5000; ++i) n[s.sample(l, {})]++;
    return n;
  };
  SamplingParams k;
  k.top_k = 2, k.top_p = 1, k.min_p = 0;
  auto nk = draw_set(k);
  EXPECT_EQ(nk.size(), 2u);
  EXPECT_TRUE(nk.count(0) && nk.count(1));
  SamplingParams tp;
  tp.top_k = 0, tp.top_p = 0.85f, tp.min_p = 0;  // 0.4 + 0.3 + 0.2 = 0.9 >= 0.85
  EXPECT_EQ(draw_set(tp).size(), 3u);
  SamplingParams mp;
  mp.top_k = 0, mp.top_p = 1, mp.min_p = 0.6f;  // keeps p >= 0.24: tokens 0 and 1
  EXPECT_EQ(draw_set(mp).size(), 2u);
}

TEST(Sampling, RepetitionPenaltyDemotesSeenTokens) {
  std::vector<float> l = {2.0f, 1.9f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  std::vector<int32_t> hist = {0};
  EXPECT_EQ(s.sample(l, hist), 1);  // 2.0 / 1.5 < 1.9
  p.repeat_penalty = 1.0f;
  Sampler s2(p);
  EXPECT_EQ(s2.sample(l, hist), 0);
}

// OpenAI's formula: logit -= frequency * count + presence * (count > 0), over the window; with
// the repeat penalty applied first (llama.cpp's order).
TEST(Sampling, PresenceAndFrequencyPenalties) {
  const std::vector<float> l = {3.0f, 2.5f, 2.2f, 0.5f};
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int32_t> hist = {0, 0, 0, 1, 9, -1};  // out-of-range ids are ignored
  p.frequency_penalty = 0.3f;  // 0: 3.0 - 0.9 = 2.1, 1: 2.5 - 0.3 = 2.2, 2: 2.2 (tie: lower id)
  EXPECT_EQ(Sampler(p).sample(l, hist), 1);
  p.frequency_penalty = 0.35f;  // 0: 1.95, 1: 2.15, 2: 2.2
  EXPECT_EQ(Sampler(p).sample(l, hist), 2);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.6f;  // 0: 2.4, 1: 1.9, 2: 2.2
  EXPECT_EQ(Sampler(p).sample(l, hist), 0);
  p.presence_penalty = 0.9f;  // 0: 2.1, 1: 1.6, 2: 2.2
  EXPECT_EQ(Sampler(p).sample(l, hist), 2);
  p.presence_penalty = -1.0f;  // negative: encourages seen tokens (1: 3.5 > 3.0)
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{1}), 1);
  // The window: only the last 2 tokens count (1 and 9), so token 0 goes unpenalized.
  p.presence_penalty = 0.9f;
  p.repeat_last_n = 2;
  EXPECT_EQ(Sampler(p).sample(l, hist), 0);
  // Counts come through penalty_ids: ascending, repeated by count only with a frequency penalty.
  p = {};
  p.frequency_penalty = 0.1f;
  EXPECT_EQ(penalty_ids(p, hist, 4), (std::vector<int32_t>{0, 0, 0, 1}));
  p.frequency_penalty = 0;
  p.presence_penalty = 0.1f;
  EXPECT_EQ(penalty_ids(p, hist, 4), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(has_penalty(p));
  // repeat then frequency: (3.0 / 2) - 0.5 * 3 = 0.0 < 0.5 (token 3)... 2.5 / 2 - 0.5 = 0.75 wins
  p = {};
  p.temperature = 0;
  p.repeat_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  const std::vector<float> l2 = {3.0f, 2.5f, 0.5f, 0.7f};
  EXPECT_EQ(Sampler(p).sample(l2, std::vector<int32_t>{0, 0, 0, 1}), 1);
}

TEST(Sampling, BadParametersAreErrors) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.repeat_penalty = -1;
  EXPECT_THROW(Sampler{p}, Error);
  // NaN slips past every <= test; each float setting refuses it (and infinity) by name
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float SamplingParams::*f : {&SamplingParams::temperature, &SamplingParams::top_p, &SamplingParams::min_p,
                                   &SamplingParams::repeat_penalty, &SamplingParams::presence_penalty,
                                   &SamplingParams::frequency_penalty})
    for (float v : {nan, inf, -inf}) {
      p = {};
      p.*f = v;
      EXPECT_THROW(Sampler{p}, Error) << v;
    }
  p = {};
  p.temperature = nan;
  try {
    Sampler s(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("temperature must be a finite number, got nan"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmf

// The split sampler API used for device sampling: Sampler::sample == sample_with_uniform with the
// generator's next uniform, and penalty_ids picks the window the penalty has always used.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/sampler.h"

namespace lmf {
namespace {

TEST(SamplingUniform, SampleEqualsSampleWithNextUniform) {
  std::vector<float> l(3000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i) * 0.37) * 4);
  for (float temp : {0.f, 0.7f, 1.3f})
    for (int k : {0, 1, 40})
      for (float rp : {1.f, 1.2f}) {
        SamplingParams p;
        p.temperature = temp;
        p.top_k = k;
        p.repeat_penalty = rp;
        p.repeat_last_n = 8;
        p.seed = 99;
        Sampler a(p), b(p);
        std::vector<int32_t> ha, hb;
        for (int i = 0; i < 50; ++i) {
          ha.push_back(a.sample(l, ha));
          const double u = temp > 0 ? b.next_uniform() : 0.0;
          hb.push_back(sample_with_uniform(p, l, penalty_ids(p, hb, int64_t(l.size())), u));
        }
        EXPECT_EQ(ha, hb) << "T " << temp << " k " << k << " rp " << rp;
      }
}

TEST(SamplingUniform, PenaltyIdsWindowAndDistinct) {
  SamplingParams p;
  p.repeat_penalty = 1.1f;
  const std::vector<int32_t> h = {7, 5, 5, 3, 9, -1, 100};
  p.repeat_last_n = 4;  // 3, 9, -1, 100: out-of-vocabulary ids are dropped
  EXPECT_EQ(penalty_ids(p, h, 50), (std::vector<int32_t>{3, 9}));
  p.repeat_last_n = -1;
  EXPECT_EQ(penalty_ids(p, h, 50), (std::vector<int32_t>{3, 5, 7, 9}));
  p.repeat_last_n = 0;
  EXPECT_TRUE(penalty_ids(p, h, 50).empty());
  p.repeat_last_n = 64;
  p.repeat_penalty = 1.0f;
  EXPECT_TRUE(penalty_ids(p, h, 50).empty());
}

TEST(SamplingUniform, UniformPicksByCumulativeProbability) {
  // p = 0.5, 0.3, 0.2 (top-k/p/min-p off): u below 0.5 -> 0, in [0.5, 0.8) -> 1, above -> 2.
  std::vector<float> l = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.2))};
  SamplingParams p;
  p.temperature = 1, p.top_k = 0, p.top_p = 1, p.min_p = 0;
  EXPECT_EQ(sample_with_uniform(p, l, {}, 0.0), 0);
  EXPECT_EQ(sample_with_uniform(p, l, {}, 0.49), 0);
  EXPECT_EQ(sample_with_uniform(p, l, {}, 0.51), 1);
  EXPECT_EQ(sample_with_uniform(p, l, {}, 0.79), 1);
  EXPECT_EQ(sample_with_uniform(p, l, {}, 0.81), 2);
  EXPECT_EQ(sample_with_uniform(p, l, {}, 1.0 - 1e-16), 2);
}

}  // namespace
}  // namespace lmf

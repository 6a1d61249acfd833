// The launch timeline's slot layout and host reduction (backend/cuda/timeline_fields.h): blocks
// stamp the way of their index, the host combines the ways per field (minima, maxima, sums).
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/timeline_fields.h"

namespace lmf::cuda {
namespace {

TEST(Timeline, InitMarksOnlyTheMinimaOfEveryWay) {
  const auto v = timeline_init(3);
  ASSERT_EQ(v.size(), size_t(3 * kTimelineWords));
  for (size_t i = 0; i < v.size(); ++i) {
    const int j = int(i % kTlWayWords);
    const bool min_field = j < kTlFields && timeline_min_field(j);
    EXPECT_EQ(v[i], min_field ? ~0ull : 0ull) << "word " << i;
  }
  // Each way is its own 128-byte line, so blocks of different ways never share an address.
  static_assert(kTlWayWords * sizeof(unsigned long long) == 128);
  static_assert(kTlFields <= kTlWayWords);
}

TEST(Timeline, ReduceCombinesTheWaysPerField) {
  auto v = timeline_init(2);
  unsigned long long* slot = v.data() + kTimelineWords;  // the second slot
  // Three blocks stamping ways 0, 5 and 15 (as block index % kTlWays would).
  const struct {
    int way;
    unsigned long long start, wait, end, phase_end, phase;
  } blocks[] = {{0, 1000, 1500, 4000, 2000, 500}, {5, 900, 1600, 4200, 2500, 900}, {15, 1100, 1550, 3900, 2100, 550}};
  for (const auto& b : blocks) {
    unsigned long long* w = slot + b.way * kTlWayWords;
    w[0] = std::min(w[0], b.start);
    w[1] = std::min(w[1], b.wait);
    w[2] = std::max(w[2], b.end);
    w[3] = std::max(w[3], b.phase_end);
    w[6] = std::max(w[6], b.start);
    w[7] += b.phase;
    w[8] += 1;
  }
  const auto f = timeline_reduce(slot);
  EXPECT_EQ(f[0], 900u);   // earliest start
  EXPECT_EQ(f[1], 1500u);  // earliest wait return
  EXPECT_EQ(f[2], 4200u);  // latest exit
  EXPECT_EQ(f[3], 2500u);  // latest first-phase end
  EXPECT_EQ(f[6], 1100u);  // latest start
  EXPECT_EQ(f[7], 1950u);  // sum of first phases
  EXPECT_EQ(f[8], 3u);     // blocks counted
  EXPECT_EQ(f[4], 0u);     // marks never stamped
  EXPECT_EQ(f[9], ~0ull);
  // The first slot was not stamped at all: its end stays 0 (how the replay tells "did not run").
  const auto none = timeline_reduce(v.data());
  EXPECT_EQ(none[2], 0u);
  EXPECT_EQ(none[0], ~0ull);
}

}  // namespace
}  // namespace lmf::cuda

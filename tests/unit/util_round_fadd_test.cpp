// round_fadd (util/round_fadd.h, used by the CUDA GEMV's int8 activation codes) against
// std::nearbyint in the default rounding mode (nearest, ties to even), the rounding of
// __float2int_rn and of the CPU backend's activation quantizer.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "util/round_fadd.h"

namespace lmf {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Checks x and -x; returns the number of mismatches.
int64_t check(float x) {
  int64_t bad = 0;
  for (float v : {x, -x}) {
    const int want = int(std::nearbyint(v));
    bad += round_fadd(v) != want;
    bad += int8_t(round_fadd_bits(v) & 0xffu) != int8_t(want);
  }
  return bad;
}

TEST(RoundFadd, MatchesNearbyintOverTheInt8CodeRange) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  ASSERT_EQ(to_bits(12582912.f), kRoundFaddBias);
  int64_t bad = 0, n = 0;
  // Every float within 4096 ulps of each integer and each half-integer in [0, 128]: the ties
  // and both sides of every rounding boundary.
  for (int k = 0; k <= 256; ++k) {
    const uint32_t c = to_bits(0.5f * float(k));
    for (int64_t d = -4096; d <= 4096; ++d) {
      const int64_t b = int64_t(c) + d;
      if (b < 0) continue;
      bad += check(from_bits(uint32_t(b)));
      ++n;
    }
  }
  // A stride through every float magnitude from 0 to 128 (denormals, tiny values, ±0 included).
  for (uint32_t b = 0; b <= to_bits(128.f); b += 101) {
    bad += check(from_bits(b));
    ++n;
  }
  EXPECT_EQ(bad, 0) << "of " << 2 * n << " values";
  EXPECT_GT(n, 10000000);
}

TEST(RoundFadd, BlockSumsTakeTheBiasOffOnce) {
  // Sums of biased words wrap mod 2^32 like the GEMV's per-thread and per-block sums.
  const float xs[] = {-127.f, -126.5f, -0.5f, 0.5f, 1.5f, 2.5f, 126.5f, 127.f, 3.49999976f, -3.50000024f};
  uint32_t acc = 0;
  int want = 0;
  for (float x : xs) {
    acc += round_fadd_bits(x);
    want += int(std::nearbyint(x));
  }
  const uint32_t n = sizeof xs / sizeof xs[0];
  EXPECT_EQ(int(acc - n * kRoundFaddBias), want);
}

}  // namespace
}  // namespace lmf

// The exact re-encodings of format/quant/transcode.h: every value of a transcoded row decodes to
// the same float as the source row (bit for bit; dequantize_row is itself bit-exact with the
// `gguf` package, quant_kquant_test), on random blocks with every code and scale byte drawn
// uniformly and on fp16 scales of every class (zero, negative zero, subnormal, normal, extreme).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "format/quant/half.h"
#include "format/quant/quantize.h"
#include "format/quant/transcode.h"
#include "format/quant/types.h"
#include "util/status.h"

namespace lmf {
namespace {

// A row of `blocks` blocks of random bytes whose fp16 scale fields hold finite values of every
// class; the scale field sits at `d_off` in each block of `bsize` bytes.
std::vector<uint8_t> random_row(size_t bsize, size_t d_off, int blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> row(bsize * size_t(blocks));
  for (auto& b : row) b = uint8_t(rng());
  const uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x3c00, 0xbc00, 0x7bff, 0xfbff};
  for (int b = 0; b < blocks; ++b) {
    uint16_t d;
    if (b < 8) d = special[b];
    else do d = uint16_t(rng()); while ((d & 0x7c00) == 0x7c00);  // not inf / NaN
    std::memcpy(row.data() + size_t(b) * bsize + d_off, &d, 2);
  }
  return row;
}

void expect_same_values(DType from, size_t bsize, size_t d_off, int64_t block_elems) {
  const DType to = quant_transcode_target(from);
  ASSERT_NE(to, from);
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const int blocks = 64;
    const int64_t cols = block_elems * blocks;
    const auto src = random_row(bsize, d_off, blocks, seed);
    ASSERT_EQ(src.size(), row_bytes(from, cols));
    std::vector<uint8_t> dst(row_bytes(to, cols));
    quant_transcode_row(from, src.data(), cols, dst.data());
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    dequantize_row(from, src.data(), a.data(), cols);
    dequantize_row(to, dst.data(), b.data(), cols);
    for (int64_t i = 0; i < cols; ++i) {
      uint32_t x, y;
      std::memcpy(&x, &a[size_t(i)], 4);
      std::memcpy(&y, &b[size_t(i)], 4);
      ASSERT_EQ(x, y) << dtype_name(from) << " -> " << dtype_name(to) << " seed " << seed << " element " << i
                      << ": " << a[size_t(i)] << " vs " << b[size_t(i)];
    }
  }
}

TEST(QuantTranscode, Q3KAsQ6KHoldsTheSameValues) { expect_same_values(DType::Q3_K, 110, 108, 256); }
TEST(QuantTranscode, IQ4NLAsQ8_0HoldsTheSameValues) { expect_same_values(DType::IQ4_NL, 18, 0, 32); }
TEST(QuantTranscode, Q5_0AsQ8_0HoldsTheSameValues) { expect_same_values(DType::Q5_0, 22, 0, 32); }

TEST(QuantTranscode, TypesWithoutAnExactFormAreLeftAlone) {
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q2_K, DType::IQ4_XS, DType::Q5_1, DType::F16})
    EXPECT_EQ(quant_transcode_target(t), t) << dtype_name(t);
  std::vector<uint8_t> row(row_bytes(DType::Q2_K, 256)), out(row.size());
  EXPECT_THROW(quant_transcode_row(DType::Q2_K, row.data(), 256, out.data()), Error);
}

}  // namespace
}  // namespace lmf

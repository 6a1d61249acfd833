// quantize_row_search: never worse than the reference rounding on any block, and measurably
// better on Gaussian data (the reduction is printed for docs/PERF.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "format/quant/quantize.h"

namespace lmf {
namespace {

double sq_err(const float* a, const float* b, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return e;
}

void check_search(DType t) {
  std::mt19937 rng(99);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t n = 32 * 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = g(rng) * (i < n / 2 ? 0.05f : 3.0f);
  // A few edge-case blocks: constant, zero, one spike, negative only.
  for (int j = 0; j < 32; ++j) {
    x[size_t(j)] = 0.7f;
    x[size_t(32 + j)] = 0.0f;
    x[size_t(64 + j)] = j == 5 ? 4.0f : 0.0f;
    x[size_t(96 + j)] = -std::fabs(x[size_t(96 + j)]) - 1.0f;
  }
  std::vector<uint8_t> qr(row_bytes(t, n)), qs(row_bytes(t, n));
  quantize_row(t, x.data(), qr.data(), n);
  quantize_row_search(t, x.data(), qs.data(), n);
  std::vector<float> yr(static_cast<size_t>(n)), ys(static_cast<size_t>(n));
  dequantize_row(t, qr.data(), yr.data(), n);
  dequantize_row(t, qs.data(), ys.data(), n);
  double er = 0, es = 0, rel_sum = 0;
  int counted = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const double a = sq_err(&yr[size_t(b * 32)], &x[size_t(b * 32)], 32);
    const double s = sq_err(&ys[size_t(b * 32)], &x[size_t(b * 32)], 32);
    ASSERT_LE(s, a) << dtype_name(t) << " block " << b;
    er += a;
    es += s;
    if (a > 0 && b >= 4) rel_sum += 1.0 - std::sqrt(s / a), ++counted;
  }
  const double red = 1.0 - std::sqrt(es / er);
  std::printf("[ search   ] %s Gaussian: RMSE reference %.6g, search %.6g (%.1f%% lower overall, "
              "%.1f%% mean per block)\n",
              dtype_name(t), std::sqrt(er / double(n)), std::sqrt(es / double(n)), 100 * red,
              100 * rel_sum / counted);
  EXPECT_GT(red, 0.03) << "search should reduce the RMSE on Gaussian data";
}

TEST(QuantSearch, Q4_0NeverWorseAndBetterOnGaussian) { check_search(DType::Q4_0); }
TEST(QuantSearch, Q4_1NeverWorseAndBetterOnGaussian) { check_search(DType::Q4_1); }

TEST(QuantSearch, OtherTypesFallBackToReference) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = std::sin(float(i));
  std::vector<uint8_t> a(row_bytes(DType::Q8_0, 64)), b(a.size());
  quantize_row(DType::Q8_0, x.data(), a.data(), 64);
  quantize_row_search(DType::Q8_0, x.data(), b.data(), 64);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace lmf

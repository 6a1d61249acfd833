// Bit-exactness of quantize_row / dequantize_row against the `gguf` PyPI package (through
// scripts/quant_ref.py), and fp16 conversion against numpy's float16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/quant/half.h"
#include "format/quant/quantize.h"
#include "util/status.h"

namespace lmf {
namespace {

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/lmfuse_quant_" + std::to_string(::getpid()) + "_" + name;
}

template <class T>
void write_file(const std::string& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}
std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Runs scripts/quant_ref.py; returns its exit status (3 = gguf not importable).
int run_ref(const std::string& args) {
  const std::string cmd =
      LMFUSE_PYTHON " " LMFUSE_SOURCE_DIR "/scripts/quant_ref.py " + args + " 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

#define SKIP_WITHOUT_GGUF()                                                                  \
  do {                                                                                       \
    if (run_ref("check") != 0)                                                               \
      GTEST_SKIP() << LMFUSE_PYTHON " with the `gguf` package is not available (scripts/setup.sh installs it)"; \
  } while (0)

// Test rows: seeded Gaussian blocks at several scales, plus the edge cases the reference
// rounding handles specially.
std::vector<float> make_input(uint32_t seed, bool float_specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x;
  auto block = [&](auto fn) {
    for (int j = 0; j < 32; ++j) x.push_back(fn(j));
  };
  for (float scale : {1.0f, 0.02f, 1e-6f, 1e-3f, 30.0f, 1000.0f})
    for (int b = 0; b < 24; ++b) block([&](int) { return g(rng) * scale; });
  block([](int) { return 0.0f; });
  block([](int) { return -0.0f; });
  block([](int) { return 1.5f; });
  block([](int) { return -0.37f; });
  block([&](int) { return -std::fabs(g(rng)); });           // negative only
  block([&](int) { return std::fabs(g(rng)) + 5.0f; });     // positive only, offset
  block([&](int j) { return j == 7 ? 3.0f : 0.0f; });       // one spike
  block([&](int j) { return j == 3 ? -3.0f : (j == 9 ? 3.0f : 0.1f); });  // |max| tie, first wins
  block([&](int j) { return float(j - 16) * 0.25f; });      // exact grid values (ties)
  block([&](int j) { return float(j) * 1e-7f; });           // fp16-subnormal scales
  block([&](int) { return g(rng) * 6e4f; });                // near fp16 overflow
  if (float_specials) {
    block([&](int j) {
      const float s[] = {INFINITY, -INFINITY, 65504.0f, 65520.0f, 65519.99f, 6.1035156e-05f,
                         5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 1e-10f, -1e-10f,
                         1.0009765625f, 1.00048828125f, 1.00146484375f, 3.0e38f, -0.0f};
      return s[j % 16];
    });
    // f32 values exactly halfway between bf16 / fp16 neighbours (ties to even both ways).
    block([&](int j) { return 1.0f + float(j) * 0.00048828125f; });
    block([&](int j) {
      uint32_t u = 0x3f800000u + (uint32_t(j) << 15) + 0x8000u;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    });
  }
  return x;
}

const char* ref_name(DType t) { return dtype_name(t); }

void check_quantize_exact(DType t, bool float_specials) {
  const std::vector<float> x = make_input(1234 + uint32_t(t), float_specials);
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> ours(row_bytes(t, n));
  quantize_row(t, x.data(), ours.data(), n);

  const std::string in = tmp_path("in.f32"), out = tmp_path("out.bin"), deq = tmp_path("deq.f32");
  write_file(in, x);
  ASSERT_EQ(run_ref(std::string("quantize ") + ref_name(t) + " " + in + " " + out), 0);
  const std::vector<uint8_t> ref = read_file(out);
  ASSERT_EQ(ref.size(), ours.size());
  const size_t bb = type_info(t).block_bytes * size_t(type_info(t).block == 1 ? 32 : 1);
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_EQ(int(ours[i]), int(ref[i])) << dtype_name(t) << " byte " << i << " (block " << i / bb
                                         << ", input " << x[(i / bb) * 32] << ", ...)";

  // Dequantize the reference bytes both ways; compare as bit patterns (NaN == NaN).
  write_file(out, ref);
  ASSERT_EQ(run_ref(std::string("dequantize ") + ref_name(t) + " " + out + " " +
                    std::to_string(n) + " " + deq),
            0);
  const std::vector<uint8_t> ref_y = read_file(deq);
  ASSERT_EQ(ref_y.size(), size_t(n) * 4);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, ref.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float r;
    std::memcpy(&r, ref_y.data() + i * 4, 4);
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(y[size_t(i)])) << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &y[size_t(i)], 4);
    std::memcpy(&b, &r, 4);
    ASSERT_EQ(a, b) << dtype_name(t) << " element " << i << ": ours " << y[size_t(i)] << " ref " << r;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::remove(deq.c_str());
}

TEST(QuantReference, F32) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::F32, true); }
TEST(QuantReference, F16) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::F16, true); }
TEST(QuantReference, BF16) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::BF16, true); }
TEST(QuantReference, Q8_0) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::Q8_0, false); }
TEST(QuantReference, Q4_0) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::Q4_0, false); }
TEST(QuantReference, Q4_1) { SKIP_WITHOUT_GGUF(); check_quantize_exact(DType::Q4_1, false); }

// Every fp16 bit pattern -> f32 agrees with numpy's float16 (NaN payloads included).
TEST(QuantReference, Fp16AllPatternsToF32) {
  SKIP_WITHOUT_GGUF();
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = uint16_t(i);
  const std::string in = tmp_path("h.bin"), out = tmp_path("h.f32");
  write_file(in, h);
  ASSERT_EQ(run_ref("dequantize f16 " + in + " 65536 " + out), 0);
  const std::vector<uint8_t> ref = read_file(out);
  ASSERT_EQ(ref.size(), 65536u * 4);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float f = fp16_to_f32(uint16_t(i));
    uint32_t a, b;
    std::memcpy(&a, &f, 4);
    std::memcpy(&b, ref.data() + i * 4, 4);
    ASSERT_EQ(a, b) << "fp16 0x" << std::hex << i;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

// Random f32 bit patterns (all exponents) -> fp16 agrees with numpy's RNE conversion.
TEST(QuantReference, F32RandomBitsToFp16) {
  SKIP_WITHOUT_GGUF();
  std::mt19937 rng(7);
  std::vector<float> x;
  while (x.size() < 200000) {
    uint32_t u = rng();
    if ((u & 0x7fffffff) > 0x7f800000) continue;  // NaN payloads: checked below, not vs numpy
    if (x.size() % 2) u = (u & 0x807fffff) | ((100u + rng() % 45u) << 23);  // fp16 range
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  const std::string in = tmp_path("r.f32"), out = tmp_path("r.bin");
  write_file(in, x);
  ASSERT_EQ(run_ref("quantize f16 " + in + " " + out), 0);
  const std::vector<uint8_t> ref = read_file(out);
  ASSERT_EQ(ref.size(), x.size() * 2);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t r;
    std::memcpy(&r, ref.data() + i * 2, 2);
    ASSERT_EQ(f32_to_fp16(x[i]), r) << "f32 " << x[i];
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(QuantHalf, NanStaysNanAndRoundTrips) {
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(NAN))));
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(-NAN))));
  uint32_t snan = 0x7f800001;  // signalling NaN with a low payload must not become inf
  float f;
  std::memcpy(&f, &snan, 4);
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f))));
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN: payload may be quieted
    EXPECT_EQ(f32_to_fp16(fp16_to_f32(h)), h) << std::hex << i;
  }
}

TEST(QuantRow, RejectsRowLengthNotMultipleOfBlock) {
  std::vector<float> x(33, 1.0f);
  std::vector<uint8_t> q(64);
  EXPECT_THROW(quantize_row(DType::Q4_0, x.data(), q.data(), 33), Error);
  EXPECT_THROW(dequantize_row(DType::Q8_0, q.data(), x.data(), 31), Error);
}

}  // namespace
}  // namespace lmf

// The K-quants (Q2_K..Q6_K, Q8_K), IQ4_NL / IQ4_XS and Q5_0 / Q5_1 against the `gguf` PyPI package
// (through scripts/quant_ref.py):
//  - dequantization bit-exact on random blocks, on adversarial blocks (every value of every
//    packed scale byte, every 6-bit scale/min code, all-ones / all-zero codes, signed zero,
//    subnormal and extreme fp16 scales) and on the blocks our quantizer writes;
//  - inf / NaN fp16 scales: we follow gguf's numpy output (inf exact, NaN where it has NaN);
//  - Q5_0 / Q5_1 quantization bit-exact (gguf has a quantizer for them, not for the others);
//  - our K-quant / IQ4 quantizers: round-trip error under measured per-type bounds;
//  - rows that are not a multiple of the block refused, in quantize_row / dequantize_row and
//    in the GGUF reader (with the tensor's name).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "format/quant/half.h"
#include "format/quant/iquants.h"
#include "format/quant/kquants.h"
#include "format/quant/quantize.h"
#include "gguf_test_util.h"
#include "util/status.h"

namespace lmf {
namespace {

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/lmfuse_kquant_" + std::to_string(::getpid()) + "_" + name;
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

// Where the fp16 scales and the packed scale bytes sit in each type's block.
struct Layout {
  DType t;
  std::vector<size_t> halves;                          // byte offsets of fp16 fields
  std::vector<std::pair<size_t, size_t>> scale_bytes;  // [offset, offset + n) of packed scales
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> v = {
      {DType::Q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}, {{offsetof(BlockQ2_K, scales), 16}}},
      {DType::Q3_K, {offsetof(BlockQ3_K, d)}, {{offsetof(BlockQ3_K, scales), 12}}},
      {DType::Q4_K, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}, {{offsetof(BlockQ4_K, scales), 12}}},
      {DType::Q5_K, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}, {{offsetof(BlockQ5_K, scales), 12}}},
      {DType::Q6_K, {offsetof(BlockQ6_K, d)}, {{offsetof(BlockQ6_K, scales), 16}}},
      {DType::IQ4_NL, {offsetof(BlockIQ4_NL, d)}, {}},
      {DType::IQ4_XS, {offsetof(BlockIQ4_XS, d)},
       {{offsetof(BlockIQ4_XS, scales_h), 2}, {offsetof(BlockIQ4_XS, scales_l), 4}}},
      {DType::Q5_0, {offsetof(BlockQ5_0, d)}, {}},
      {DType::Q5_1, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}, {}},
  };
  return v;
}

// A block-building helper: the block bytes of one type, with its fp16 fields set by value.
struct Blocks {
  explicit Blocks(const Layout& l) : L(l), bb(type_info(l.t).block_bytes), rng(uint32_t(l.t) * 977u) {}
  const Layout& L;
  size_t bb;
  std::vector<uint8_t> bytes;
  std::mt19937 rng;

  uint8_t* add() {
    bytes.resize(bytes.size() + bb);
    return bytes.data() + bytes.size() - bb;
  }
  void set_half(uint8_t* b, size_t k, uint16_t h) { std::memcpy(b + L.halves[k], &h, 2); }
  // Random finite fp16 of moderate size (2^-10 .. 2^5), either sign.
  uint16_t moderate() { return uint16_t(((rng() & 1) << 15) | ((5 + rng() % 16) << 10) | (rng() & 0x3ff)); }
  uint16_t any_finite() {
    uint16_t h = uint16_t(rng());
    return (h & 0x7c00) == 0x7c00 ? uint16_t(h & ~0x4000) : h;
  }
  uint8_t* random(bool moderate_halves = true) {
    uint8_t* b = add();
    for (size_t i = 0; i < bb; ++i) b[i] = uint8_t(rng());
    for (size_t k = 0; k < L.halves.size(); ++k) set_half(b, k, moderate_halves ? moderate() : any_finite());
    return b;
  }
  int64_t n() const { return int64_t(bytes.size() / bb) * type_info(L.t).block; }
};

// Dequantizes `bytes` with gguf and with dequantize_row and requires identical bits (any NaN
// matches any NaN: numpy and C may pick different NaN payloads; inf must match exactly).
void expect_dequant_exact(DType t, const std::vector<uint8_t>& bytes, const std::string& what) {
  const int64_t n = int64_t(bytes.size() / type_info(t).block_bytes) * type_info(t).block;
  const std::string in = tmp_path("in.bin"), out = tmp_path("out.f32");
  write_file(in, bytes);
  ASSERT_EQ(run_ref(std::string("dequantize ") + dtype_name(t) + " " + in + " " + std::to_string(n) + " " + out), 0);
  const std::vector<uint8_t> ref = read_file(out);
  ASSERT_EQ(ref.size(), size_t(n) * 4);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, bytes.data(), y.data(), n);
  const int64_t blk = type_info(t).block;
  for (int64_t i = 0; i < n; ++i) {
    float r;
    std::memcpy(&r, ref.data() + i * 4, 4);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(y[size_t(i)])) << dtype_name(t) << " " << what << " element " << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &y[size_t(i)], 4);
    std::memcpy(&b, &r, 4);
    ASSERT_EQ(a, b) << dtype_name(t) << " " << what << ": block " << i / blk << " element " << i % blk
                    << ": ours " << y[size_t(i)] << " gguf " << r;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(QuantKquant, DequantRandomBlocksMatchGguf) {
  SKIP_WITHOUT_GGUF();
  for (const Layout& L : layouts()) {
    Blocks b{L};
    for (int i = 0; i < 256; ++i) b.random(i % 2 == 0);
    expect_dequant_exact(L.t, b.bytes, "random blocks");
  }
}

// Special fp16 values for every scale field: signed zeros, subnormals, the extremes.
constexpr uint16_t kEdgeHalves[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400,
                                    0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x0200};

TEST(QuantKquant, DequantAdversarialBlocksMatchGguf) {
  SKIP_WITHOUT_GGUF();
  for (const Layout& L : layouts()) {
    Blocks b{L};
    const size_t bb = b.bb;
    std::memset(b.add(), 0, bb);  // all zero (scales +0)
    for (uint16_t h : {uint16_t(0x3c00), uint16_t(0xbc00), uint16_t(0x7bff)}) {
      uint8_t* p = b.add();  // every code and scale bit set, fp16 fields then set to h
      std::memset(p, 0xff, bb);
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(p, k, h);
      p = b.add();  // every code zero
      std::memset(p, 0, bb);
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(p, k, h);
      for (const auto& [off, len] : L.scale_bytes) std::memset(p + off, 0xff, len);
    }
    for (uint16_t h : kEdgeHalves) {
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(b.random(), k, h);  // one field
      uint8_t* p = b.random();                                                  // every field
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(p, k, h);
      p = b.random();  // with all-ones codes
      for (size_t i = 0; i < bb; ++i) p[i] = 0xff;
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(p, k, h);
    }
    // Every value of every packed scale byte (high bits included), the rest random; and every
    // value in all scale bytes at once.
    for (const auto& [off, len] : L.scale_bytes)
      for (size_t i = 0; i < len; ++i)
        for (int v = 0; v < 256; ++v) b.random()[off + i] = uint8_t(v);
    for (int v = 0; v < 256; ++v) {
      uint8_t* p = b.random();
      for (const auto& [off, len] : L.scale_bytes) std::memset(p + off, v, len);
    }
    expect_dequant_exact(L.t, b.bytes, "adversarial blocks");
  }
}

// Every (scale, min) pair of 6-bit codes in every sub-block of Q4_K / Q5_K, and every 6-bit
// scale code of Q3_K in every sub-block (rotated so each sub-block sees each code).
TEST(QuantKquant, DequantEverySixBitCodeMatchesGguf) {
  SKIP_WITHOUT_GGUF();
  for (DType t : {DType::Q4_K, DType::Q5_K}) {
    const Layout& L = t == DType::Q4_K ? layouts()[2] : layouts()[3];
    Blocks b{L};
    for (int c = 0; c < 64; ++c)
      for (int m = 0; m < 64; ++m) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; ++j) sc[j] = uint8_t((c + 9 * j) % 64), mn[j] = uint8_t((m + 23 * j) % 64);
        uint8_t* p = b.random();
        pack_scale_min_k4(sc, mn, p + L.scale_bytes[0].first);
        for (int j = 0; j < 8; ++j) {  // the packing is the inverse of the unpacking
          uint8_t us, um;
          unpack_scale_min_k4(p + L.scale_bytes[0].first, j, us, um);
          ASSERT_EQ(us, sc[j]);
          ASSERT_EQ(um, mn[j]);
        }
      }
    expect_dequant_exact(t, b.bytes, "6-bit scale/min codes");
  }
  Blocks b{layouts()[1]};
  for (int c = 0; c < 64; ++c) {
    uint8_t codes[16];
    for (int j = 0; j < 16; ++j) codes[j] = uint8_t((c + 5 * j) % 64);
    uint8_t* p = b.random();
    pack_scales_q3_k(codes, p + offsetof(BlockQ3_K, scales));
    for (int j = 0; j < 16; ++j) ASSERT_EQ(unpack_scale_q3_k(p + offsetof(BlockQ3_K, scales), j), codes[j] - 32);
  }
  expect_dequant_exact(DType::Q3_K, b.bytes, "6-bit scale codes");
}

// inf and NaN fp16 scales: not refused; the output follows gguf's numpy float32 arithmetic
// (inf * code stays inf, inf * 0 and NaN give NaN, inf - inf gives NaN).
TEST(QuantKquant, DequantInfNanScalesFollowGguf) {
  SKIP_WITHOUT_GGUF();
  for (const Layout& L : layouts()) {
    Blocks b{L};
    for (uint16_t h : {uint16_t(0x7c00), uint16_t(0xfc00), uint16_t(0x7e00), uint16_t(0xfe00), uint16_t(0x7c01)}) {
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(b.random(), k, h);
      uint8_t* p = b.random();
      for (size_t k = 0; k < L.halves.size(); ++k) b.set_half(p, k, h);
    }
    expect_dequant_exact(L.t, b.bytes, "inf/NaN scales");
  }
}

// Round-trip test data: Gaussian blocks at several magnitudes, plus heavy tails and offsets.
std::vector<float> gaussian_rows(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float mags[] = {1.0f, 0.02f, 1e-3f, 30.0f};
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = g(rng) * mags[(i / 256) % 4];
  return x;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y, size_t from, size_t to) {
  double e = 0, s = 0;
  for (size_t i = from; i < to; ++i) {
    e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    s += double(x[i]) * x[i];
  }
  return s > 0 ? std::sqrt(e / s) : std::sqrt(e);
}

struct Bound {
  DType t;
  double gaussian;  // bound on RMSE / RMS over Gaussian data (measured value in the comment)
};

// Measured with the quantizers in kquants_quantize.cpp / iquants.cpp on gaussian_rows() (in the
// comments); each bound is the measurement plus ~5 %, so a quantizer that loses a bit of precision
// fails. The reference rounding of the 32-block types on the same data, for scale: Q4_0 0.0859,
// Q4_1 0.0787, Q5_0 0.0427, Q5_1 0.0380, Q8_0 0.0054 (printed by the test).
const Bound kBounds[] = {
    {DType::Q2_K, 0.275},    // 0.2610
    {DType::Q3_K, 0.151},    // 0.1434
    {DType::Q4_K, 0.0747},   // 0.0711
    {DType::Q5_K, 0.0371},   // 0.0353
    {DType::Q6_K, 0.0181},   // 0.0173
    {DType::Q8_K, 0.00736},  // 0.0070
    {DType::IQ4_NL, 0.0781}, // 0.0743
    {DType::IQ4_XS, 0.0785}, // 0.0748
};

TEST(QuantKquant, QuantizeRoundTripErrorBounds) {
  const int64_t n = 256 * 512;
  const std::vector<float> x = gaussian_rows(42, n);
  auto roundtrip = [&](DType t) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, q.data(), y.data(), n);
    return y;
  };
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0})
    std::printf("  %-6s rel. RMSE %.5f (reference rounding)\n", dtype_name(t), rel_rmse(x, roundtrip(t), 0, x.size()));
  for (const Bound& b : kBounds) {
    const std::vector<float> y = roundtrip(b.t);
    const double e = rel_rmse(x, y, 0, x.size());
    std::printf("  %-6s rel. RMSE %.5f (bound %.4f)\n", dtype_name(b.t), e, b.gaussian);
    EXPECT_LE(e, b.gaussian) << dtype_name(b.t);
    // Every magnitude, not just the loudest: the small blocks must not be flushed.
    for (int m = 0; m < 4; ++m) {
      double em = 0, sm = 0;
      for (int64_t blk = m; blk < n / 256; blk += 4)
        for (int64_t i = blk * 256; i < blk * 256 + 256; ++i) {
          em += (double(y[size_t(i)]) - x[size_t(i)]) * (double(y[size_t(i)]) - x[size_t(i)]);
          sm += double(x[size_t(i)]) * x[size_t(i)];
        }
      EXPECT_LE(std::sqrt(em / sm), b.gaussian * 1.1) << dtype_name(b.t) << " magnitude " << m;
    }
  }
}

// Blocks with structure: zeros stay zero, constants and all-positive / all-negative data.
TEST(QuantKquant, QuantizeStructuredBlocks) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Bound& b : kBounds) {
    const DType t = b.t;
    std::vector<float> x;
    auto block = [&](auto fn) {
      for (int j = 0; j < 256; ++j) x.push_back(fn(j));
    };
    block([](int) { return 0.0f; });
    block([](int) { return -0.0f; });
    block([](int) { return 1.5f; });
    block([](int) { return -0.37f; });
    block([&](int) { return std::fabs(g(rng)) + 5.0f; });
    block([&](int) { return -std::fabs(g(rng)) - 5.0f; });
    block([&](int j) { return j == 77 ? 3.0f : 0.0f; });
    block([&](int j) { return g(rng) * (j < 128 ? 1.0f : 1e-3f); });  // two magnitudes in one block
    block([&](int) { return g(rng) * 6e4f; });                          // near fp16 overflow
    const int64_t n = int64_t(x.size());
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, q.data(), y.data(), n);
    for (int i = 0; i < 512; ++i) ASSERT_EQ(y[size_t(i)], 0.0f) << dtype_name(t) << " zero block, element " << i;
    for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t) << " element " << i;
    EXPECT_LE(rel_rmse(x, y, 512, 768), 0.01) << dtype_name(t) << " constant 1.5";
    EXPECT_LE(rel_rmse(x, y, 768, 1024), 0.01) << dtype_name(t) << " constant -0.37";
    EXPECT_LE(rel_rmse(x, y, 1024, 1280), 0.1) << dtype_name(t) << " all positive";
    EXPECT_LE(rel_rmse(x, y, 1280, 1536), 0.1) << dtype_name(t) << " all negative";
    EXPECT_LE(rel_rmse(x, y, 1536, 1792), 0.05) << dtype_name(t) << " one spike";
    EXPECT_LE(rel_rmse(x, y, 2048, 2304), b.gaussian * 1.3) << dtype_name(t) << " near fp16 overflow";
  }
}

// Our quantizers' output decodes identically in gguf (it is just bytes of the format).
TEST(QuantKquant, QuantizedBlocksDequantizeInGguf) {
  SKIP_WITHOUT_GGUF();
  const int64_t n = 256 * 64;
  const std::vector<float> x = gaussian_rows(9, n);
  for (const Bound& b : kBounds) {
    if (b.t == DType::Q8_K) continue;  // gguf has no Q8_K
    std::vector<uint8_t> q(row_bytes(b.t, n));
    quantize_row(b.t, x.data(), q.data(), n);
    expect_dequant_exact(b.t, q, "our quantizer's blocks");
  }
}

// Q8_K has no gguf reference: d = amax / 127, codes within half a step, bsums the 16-sums.
TEST(QuantKquant, Q8KRoundTripAndBlockSums) {
  const int64_t n = 256 * 64;
  const std::vector<float> x = gaussian_rows(5, n);
  std::vector<BlockQ8_K> q(size_t(n / 256));
  quantize_row(DType::Q8_K, x.data(), q.data(), n);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(DType::Q8_K, q.data(), y.data(), n);
  for (size_t b = 0; b < q.size(); ++b) {
    float amax = 0;
    for (int e = 0; e < 256; ++e) amax = std::fmax(amax, std::fabs(x[b * 256 + e]));
    EXPECT_EQ(q[b].d, amax / 127.0f);
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) s += q[b].qs[e];
      EXPECT_EQ(q[b].bsums[j], s) << "block " << b << " sum " << j;
    }
    for (int e = 0; e < 256; ++e) {
      ASSERT_LE(std::fabs(y[b * 256 + e] - x[b * 256 + e]), q[b].d * 0.5f * 1.0001f) << b << " " << e;
      ASSERT_GE(q[b].qs[e], -127);
    }
  }
}

// Q5_0 / Q5_1: the reference quantizer, bit-exact with gguf's (and its dequantizer).
std::vector<float> legacy_input(uint32_t seed) {
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
  block([&](int) { return -std::fabs(g(rng)); });
  block([&](int) { return std::fabs(g(rng)) + 5.0f; });
  block([&](int j) { return j == 7 ? 3.0f : 0.0f; });
  block([&](int j) { return j == 3 ? -3.0f : (j == 9 ? 3.0f : 0.1f); });  // |max| tie, first wins
  block([&](int j) { return float(j - 16) * 0.25f; });                     // exact grid values
  block([&](int j) { return float(j) * 1e-7f; });                          // fp16-subnormal scales
  block([&](int) { return g(rng) * 6e4f; });
  return x;
}

void check_legacy_quantize_exact(DType t) {
  const std::vector<float> x = legacy_input(77 + uint32_t(t));
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> ours(row_bytes(t, n));
  quantize_row(t, x.data(), ours.data(), n);
  const std::string in = tmp_path("lin.f32"), out = tmp_path("lout.bin");
  write_file(in, x);
  ASSERT_EQ(run_ref(std::string("quantize ") + dtype_name(t) + " " + in + " " + out), 0);
  const std::vector<uint8_t> ref = read_file(out);
  ASSERT_EQ(ref.size(), ours.size());
  const size_t bb = type_info(t).block_bytes;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_EQ(int(ours[i]), int(ref[i])) << dtype_name(t) << " byte " << i << " (block " << i / bb << ")";
  expect_dequant_exact(t, ref, "gguf-quantized blocks");
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(QuantKquant, Q5_0QuantizeMatchesGguf) { SKIP_WITHOUT_GGUF(); check_legacy_quantize_exact(DType::Q5_0); }
TEST(QuantKquant, Q5_1QuantizeMatchesGguf) { SKIP_WITHOUT_GGUF(); check_legacy_quantize_exact(DType::Q5_1); }

TEST(QuantKquant, TypeTraits) {
  struct T {
    DType t;
    const char* name;
    int64_t block, sub;
    size_t bytes;
  };
  for (const T& c : {T{DType::Q2_K, "q2_K", 256, 16, 84}, T{DType::Q3_K, "q3_K", 256, 16, 110},
                     T{DType::Q4_K, "q4_K", 256, 32, 144}, T{DType::Q5_K, "q5_K", 256, 32, 176},
                     T{DType::Q6_K, "q6_K", 256, 16, 210}, T{DType::Q8_K, "q8_K", 256, 256, 292},
                     T{DType::IQ4_NL, "iq4_nl", 32, 32, 18}, T{DType::IQ4_XS, "iq4_xs", 256, 32, 136},
                     T{DType::Q5_0, "q5_0", 32, 32, 22}, T{DType::Q5_1, "q5_1", 32, 32, 24}}) {
    const TypeInfo& ti = type_info(c.t);
    EXPECT_STREQ(ti.name, c.name);
    EXPECT_STREQ(ggml_type_name(uint32_t(c.t)), c.name);  // GGML's own spelling
    EXPECT_EQ(ti.block, c.block) << c.name;
    EXPECT_EQ(ti.sub_block, c.sub) << c.name;
    EXPECT_EQ(ti.block_bytes, c.bytes) << c.name;
    EXPECT_TRUE(ti.quantized);
    EXPECT_TRUE(dtype_supported(uint32_t(c.t)));
    EXPECT_EQ(row_bytes(c.t, c.block * 3), c.bytes * 3);
    std::string up = c.name, low = c.name;
    for (auto& ch : up) ch = char(std::toupper(ch));
    for (auto& ch : low) ch = char(std::tolower(ch));
    EXPECT_EQ(parse_dtype(up), c.t) << up;
    EXPECT_EQ(parse_dtype(low), c.t) << low;
  }
  EXPECT_FALSE(parse_dtype("q4_k_m"));  // a mix, not a type
  EXPECT_FALSE(dtype_supported(16));    // iq2_xxs: not (yet) known to lmfuse
}

TEST(QuantKquant, RowNotMultipleOfBlockRefused) {
  std::vector<float> x(1024, 1.0f);
  std::vector<uint8_t> q(4096);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::IQ4_XS}) {
    for (int64_t n : {32, 128, 255, 257, 384}) {
      try {
        quantize_row(t, x.data(), q.data(), n);
        ADD_FAILURE() << dtype_name(t) << " quantize_row accepted n = " << n;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("multiple of 256 for " + std::string(dtype_name(t))), std::string::npos)
            << e.what();
      }
      EXPECT_THROW(dequantize_row(t, q.data(), x.data(), n), Error) << dtype_name(t) << " n = " << n;
      EXPECT_THROW(row_bytes(t, n), Error) << dtype_name(t) << " n = " << n;
    }
    EXPECT_NO_THROW(quantize_row(t, x.data(), q.data(), 512));
  }
  for (DType t : {DType::IQ4_NL, DType::Q5_0, DType::Q5_1}) {
    EXPECT_THROW(quantize_row(t, x.data(), q.data(), 48), Error);
    EXPECT_NO_THROW(quantize_row(t, x.data(), q.data(), 96));
  }
}

// The GGUF reader: K-quant tensors open; a bad row length, a truncated data section and a
// misaligned offset are refused with the tensor's name.
using gguf_test::open_error;
using gguf_test::Raw;

Raw kquant_file(const std::string& name, std::vector<int64_t> ne, DType t, uint64_t offset = 0) {
  Raw r;
  r.header(1, 1).kv_str("general.architecture", "test").tensor(name, ne, uint32_t(t), offset).pad();
  return r;
}

TEST(QuantKquant, GgufReaderAcceptsAndChecksKquantTensors) {
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::IQ4_NL}) {
    Raw ok = kquant_file("blk.0.ffn_down.weight", {512, 3}, t);
    ok.zeros(row_bytes(t, 512) * 3);
    auto f = gguf::File::open_memory("ok.gguf", ok.b.data(), ok.b.size());
    ASSERT_EQ(f->tensors().size(), 1u);
    EXPECT_EQ(f->tensors()[0].type, t);
    EXPECT_EQ(f->tensors()[0].nbytes, row_bytes(t, 512) * 3);

    const int64_t blk = type_info(t).block;
    Raw bad = kquant_file("blk.3.attn_q.weight", {blk + blk / 2, 2}, t);
    bad.zeros(4096);
    EXPECT_HAS(open_error(bad.b), cat("tensor 'blk.3.attn_q.weight': row size ", blk + blk / 2,
                                      " is not a multiple of the block size ", blk, " of ", dtype_name(t)));

    Raw cut = kquant_file("output.weight", {512, 4}, t);
    cut.zeros(row_bytes(t, 512) * 4 - 1);
    EXPECT_HAS(open_error(cut.b), "tensor 'output.weight': data [0, ");
    EXPECT_HAS(open_error(cut.b), "extends past end of file");

    Raw mis = kquant_file("token_embd.weight", {256, 1}, t, 16);
    mis.zeros(1024);
    EXPECT_HAS(open_error(mis.b), "tensor 'token_embd.weight': data offset 16 is not a multiple of the alignment 32");
  }
}

}  // namespace
}  // namespace lmf

// cpu::matmul against double-precision references, for every weight type x ISA path x shape.
//  * "exact" reference: dequantize_row'd weights times the same 8-bit activations the kernel
//    uses (for quantized types), so only float summation order differs: tolerance 1e-5 of
//    sum(|w*x|).
//  * "unquantized" reference: the raw f32 activations. The activation rounding error is at most
//    amax_block/254 per element, so |err| <= sum(|w_i| * amax_block(i) / 254): that bound is the
//    tolerance (plus the 1e-5 above).
// Outputs live in buffers with NaN guard zones; inputs carry NaN padding past cols.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/matmul.h"
#include "format/quant/quantize.h"
#include "util/status.h"

namespace lmf::cpu {
namespace {

struct TestWeight {
  std::vector<uint8_t> bytes;
  Weight w;
};

TestWeight make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  TestWeight tw;
  const size_t rb = row_bytes(t, cols);
  tw.bytes.resize(rb * size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = 0.02f * float(1 + r % 5);  // rows of different magnitudes
    for (auto& v : row) v = g(rng) * scale;
    if (r % 7 == 3) row.assign(row.size(), 0.0f);  // an all-zero row
    quantize_row(t, row.data(), tw.bytes.data() + size_t(r) * rb, cols);
  }
  tw.w.name = std::string("test.") + dtype_name(t);
  tw.w.type = t;
  tw.w.rows = rows;
  tw.w.cols = cols;
  tw.w.data = tw.bytes.data();
  tw.w.nbytes = tw.bytes.size();
  return tw;
}

// x: [T, ldx], NaN past cols (a kernel reading the padding would produce NaN).
std::vector<float> make_input(int64_t T, int64_t cols, int64_t ldx, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * ldx), NAN);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < cols; ++i)
      x[size_t(t * ldx + i)] = (i % 32 == 5 && t % 3 == 1) ? 0.0f : g(rng) * (t % 2 ? 3.0f : 0.5f);
  return x;
}

bool is_quant(DType t) { return type_info(t).quantized; }
bool block256(DType t) { return type_info(t).block == 256; }

// Every quantized weight type, and the ones without a kernel of their own (quant_units.h).
const std::vector<DType> kUnitTypes = {DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                       DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS};
std::vector<DType> quant_types() {
  std::vector<DType> v = {DType::Q4_0, DType::Q4_1, DType::Q8_0};
  v.insert(v.end(), kUnitTypes.begin(), kUnitTypes.end());
  return v;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Scalar};
  if (has_avx2()) v.push_back(Isa::Avx2);
  if (has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

const uint32_t kSentinel = 0x7fc0dead;  // a NaN nobody computes
float sentinel() {
  float f;
  std::memcpy(&f, &kSentinel, 4);
  return f;
}
bool is_sentinel(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u == kSentinel;
}

void check_case(DType type, Isa isa, int64_t rows, int64_t cols, int64_t T, ThreadPool& pool,
                bool with_bias) {
  SCOPED_TRACE(std::string(dtype_name(type)) + " " + isa_name(isa) + " rows=" +
               std::to_string(rows) + " cols=" + std::to_string(cols) + " T=" + std::to_string(T));
  const TestWeight tw = make_weight(type, rows, cols, uint32_t(rows * 31 + cols));
  const int64_t ldx = cols + 3, ldy = rows + 5;
  const std::vector<float> x = make_input(T, cols, ldx, uint32_t(T * 7 + cols));
  std::vector<float> bias(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) bias[size_t(r)] = 0.01f * float(r % 13) - 0.05f;

  const int64_t guard = 37;
  std::vector<float> buf(static_cast<size_t>(T * ldy + 2 * guard), sentinel());
  float* y = buf.data() + guard;
  MatmulTask task{&tw.w, y, ldy, with_bias ? bias.data() : nullptr};
  MatmulScratch scratch;
  matmul({&task, 1}, x.data(), T, ldx, pool, scratch, isa);

  // References.
  const int64_t nb = cols / 32;
  std::vector<ActBlock> xq(static_cast<size_t>(is_quant(type) ? T * nb : 0));
  for (int64_t t = 0; is_quant(type) && t < T; ++t) quantize_act_row(x.data() + t * ldx, cols, xq.data() + t * nb);
  std::vector<float> wf(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(type, tw.w.data + size_t(r) * tw.w.row_stride(), wf.data(), cols);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x.data() + t * ldx;
      double exact = 0, mag = 0, raw = 0, bound = 0;
      for (int64_t i = 0; i < cols; ++i) {
        double a = xt[i];
        if (is_quant(type)) {
          const ActBlock& blk = xq[size_t(t * nb + i / 32)];
          a = double(blk.d) * blk.qs[i % 32];
          bound += std::fabs(double(wf[size_t(i)])) * double(blk.d) * 127.0 / 254.0;
        }
        exact += double(wf[size_t(i)]) * a;
        mag += std::fabs(double(wf[size_t(i)]) * a);
        raw += double(wf[size_t(i)]) * xt[i];
      }
      const double b = with_bias ? double(bias[size_t(r)]) : 0.0;
      const double got = y[t * ldy + r];
      ASSERT_NEAR(got, exact + b, 1e-5 * mag + 1e-30) << "row " << r << " token " << t;
      ASSERT_NEAR(got, raw + b, bound * 1.0001 + 1e-5 * mag + 1e-30) << "row " << r << " token " << t;
    }
  }
  // Guard zones and the gaps between rows (ldy > rows) are untouched.
  for (int64_t i = 0; i < int64_t(buf.size()); ++i) {
    const int64_t k = i - guard;
    const bool written = k >= 0 && k < T * ldy && (k % ldy) < rows;
    if (!written) {
      ASSERT_TRUE(is_sentinel(buf[size_t(i)])) << "wrote outside the output at " << k;
    }
  }
}

class MatmulTypes : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTypes, AllIsasAndShapesMatchReference) {
  const DType type = GetParam();
  ThreadPool pool(3);  // more threads than cores: exercises the row split, not speed
  struct Shape { int64_t rows, cols; };
  std::vector<Shape> shapes = {{32, 32}, {96, 64}, {67, 160}, {16, 4096}};
  if (block256(type)) shapes = {{32, 256}, {96, 512}, {67, 768}, {16, 4096}};
  if (!is_quant(type)) shapes.push_back({9, 37});  // float rows need not be a multiple of 32
  for (Isa isa : isas()) {
    for (const Shape& s : shapes)
      for (int64_t T : {1, 2, 3, 7, 17, 64}) {
        if (s.cols >= 4096 && T > 17) continue;
        check_case(type, isa, s.rows, s.cols, T, pool, T % 2 == 1);
        if (HasFatalFailure()) return;
      }
    for (int64_t T : {1, 3}) {  // a tall weight
      check_case(type, isa, 4096, block256(type) ? 256 : 64, T, pool, true);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuMatmul, MatmulTypes,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                           DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K,
                                           DType::Q6_K, DType::Q8_K, DType::IQ4_NL, DType::IQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Q/K/V-style: one call with three tasks (mixed types) equals three separate calls, bit for bit.
TEST(CpuMatmul, MultiTaskEqualsSeparateCalls) {
  ThreadPool pool(2);
  const int64_t cols = 256;
  TestWeight q = make_weight(DType::Q4_0, 128, cols, 1), k = make_weight(DType::Q8_0, 64, cols, 2),
             v = make_weight(DType::F16, 48, cols, 3), u = make_weight(DType::Q4_K, 40, cols, 4);
  for (Isa isa : isas())
    for (int64_t T : {1, 5}) {
      const std::vector<float> x = make_input(T, cols, cols, 9);
      std::vector<float> yq(size_t(T * 128)), yk(size_t(T * 64)), yv(size_t(T * 48)), yu(size_t(T * 40));
      std::vector<float> bias(128, 0.5f);
      std::vector<MatmulTask> tasks = {{&q.w, yq.data(), 128, bias.data()},
                                       {&k.w, yk.data(), 64, nullptr},
                                       {&v.w, yv.data(), 48, nullptr},
                                       {&u.w, yu.data(), 40, nullptr}};
      MatmulScratch scratch;
      matmul(tasks, x.data(), T, cols, pool, scratch, isa);
      for (const MatmulTask& t : tasks) {
        std::vector<float> sep(size_t(T * t.ldy));
        MatmulTask one = t;
        one.y = sep.data();
        matmul({&one, 1}, x.data(), T, cols, pool, scratch, isa);
        for (size_t i = 0; i < sep.size(); ++i)
          ASSERT_EQ(sep[i], t.y[i]) << t.w->name << " " << isa_name(isa) << " T=" << T << " i=" << i;
      }
    }
}

// The ISA paths agree with each other closely (same math, different summation order).
TEST(CpuMatmul, IsaPathsAgree) {
  ThreadPool pool(1);
  const int64_t rows = 64, cols = 1024, T = 5;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::Q4_K, DType::Q6_K, DType::IQ4_XS}) {
    TestWeight w = make_weight(type, rows, cols, 5);
    const std::vector<float> x = make_input(T, cols, cols, 6);
    std::vector<float> ref(size_t(T * rows)), got(size_t(T * rows));
    MatmulScratch scratch;
    MatmulTask t{&w.w, ref.data(), rows, nullptr};
    matmul({&t, 1}, x.data(), T, cols, pool, scratch, Isa::Scalar);
    for (Isa isa : isas()) {
      t.y = got.data();
      matmul({&t, 1}, x.data(), T, cols, pool, scratch, isa);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 1e-4 * (std::fabs(ref[i]) + 0.1)) << dtype_name(type) << " " << isa_name(isa);
    }
  }
}

TEST(CpuMatmul, RejectsBadArguments) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  TestWeight a = make_weight(DType::Q4_0, 8, 64, 1), b = make_weight(DType::Q4_0, 8, 96, 2);
  std::vector<float> x(96), y(64);
  std::vector<MatmulTask> mixed = {{&a.w, y.data(), 8, nullptr}, {&b.w, y.data(), 8, nullptr}};
  EXPECT_THROW(matmul(mixed, x.data(), 1, 96, pool, scratch), Error);  // different cols
  MatmulTask small_ldy{&a.w, y.data(), 4, nullptr};
  EXPECT_THROW(matmul({&small_ldy, 1}, x.data(), 1, 64, pool, scratch), Error);
  MatmulTask ok{&a.w, y.data(), 8, nullptr};
  EXPECT_THROW(matmul({&ok, 1}, x.data(), 1, 32, pool, scratch), Error);  // ldx < cols
  EXPECT_THROW(matmul({}, x.data(), 1, 64, pool, scratch), Error);
  if (!has_avx512()) {
    EXPECT_THROW(matmul({&ok, 1}, x.data(), 1, 64, pool, scratch, Isa::Avx512), Error);
  }
}

TEST(CpuMatmul, ReportsIsa) {
  std::printf("[ isa      ] best %s (avx2 %d, avx512 %d, vnni %d), active %s\n", isa_name(best_isa()),
              has_avx2(), has_avx512(), has_vnni(), isa_name(active_isa()));
  EXPECT_TRUE(isa_supported(active_isa()));
}

}  // namespace
}  // namespace lmf::cpu

namespace lmf::cpu {
namespace {

// Every ISA's activation quantization is bit-identical to the scalar definition (the exact
// references above depend on it), including ties, zeros and huge/tiny blocks.
TEST(CpuActQuant, IsaPathsBitIdentical) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x;
  for (float scale : {1.0f, 1e-30f, 1e30f, 3.0f})
    for (int i = 0; i < 32 * 40; ++i) x.push_back(g(rng) * scale);
  for (int j = 0; j < 32; ++j) x.push_back(0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(float(j - 16) * 127.0f / 16.0f / 2.0f);  // .5 ties
  for (int j = 0; j < 32; ++j) x.push_back(j == 0 ? -1.0f : 0.5f / 127.0f * float(2 * j + 1));
  const int64_t n = int64_t(x.size());
  std::vector<ActBlock> ref(size_t(n / 32)), got(size_t(n / 32));
  quantize_act_row(x.data(), n, ref.data());
  for (Isa isa : isas()) {
    std::memset(got.data(), 0x55, got.size() * sizeof(ActBlock));
    quantize_act_row(x.data(), n, got.data(), isa);
    for (size_t b = 0; b < ref.size(); ++b)
      ASSERT_EQ(std::memcmp(&ref[b], &got[b], sizeof(ActBlock)), 0) << isa_name(isa) << " block " << b;
  }
}

}  // namespace
}  // namespace lmf::cpu

namespace lmf::cpu {
namespace {

// One output depends only on its (row, token), never on T, the tiling or the thread split:
// activations are re-quantized to 8 bits before every matmul, so a last-bit difference between
// the decode (T=1) and prefill (T=k) paths can flip a rounding downstream and break
// "prefill-then-decode equals one long prefill". T=k on 3 threads vs k calls of T=1 on 1 thread,
// bit for bit, for every type and ISA; quantized shapes have nb = 2, 3, 32, 96 blocks per row and
// a row count that leaves partial 8-row groups.
TEST(CpuMatmul, BitIdenticalAcrossTokenCounts) {
  ThreadPool pool1(1), pool3(3);
  std::vector<DType> types = {DType::F32, DType::F16, DType::BF16};
  for (DType t : quant_types()) types.push_back(t);
  for (DType type : types) {
    std::vector<int64_t> cols_list = {64, 96, 1024, 3072};
    if (block256(type)) cols_list = {256, 768, 3072};
    if (!is_quant(type)) cols_list.push_back(53);  // float rows: chunk tails of 16, 8 and 1
    for (int64_t cols : cols_list) {
      const int64_t rows = 45;
      const TestWeight tw = make_weight(type, rows, cols, uint32_t(cols + 11));
      for (Isa isa : isas())
        for (int64_t k : {2, 3, 7, 8, 9, 12, 13, 17, 64}) {  // packed tiles of 8, 4 and 1 tokens
          SCOPED_TRACE(std::string(dtype_name(type)) + " " + isa_name(isa) + " cols=" +
                       std::to_string(cols) + " T=" + std::to_string(k));
          const std::vector<float> x = make_input(k, cols, cols, uint32_t(k * 13 + cols));
          std::vector<float> all(size_t(k * rows)), one(size_t(k * rows));
          MatmulScratch scratch;
          MatmulTask task{&tw.w, all.data(), rows, nullptr};
          matmul({&task, 1}, x.data(), k, cols, pool3, scratch, isa);
          for (int64_t t = 0; t < k; ++t) {
            task.y = one.data() + t * rows;
            matmul({&task, 1}, x.data() + t * cols, 1, cols, pool1, scratch, isa);
          }
          for (int64_t t = 0; t < k; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const size_t i = size_t(t * rows + r);
              ASSERT_EQ(std::memcmp(&all[i], &one[i], sizeof(float)), 0)
                  << "row " << r << " token " << t << ": T=" << k << " gives " << all[i]
                  << ", T=1 gives " << one[i];
            }
        }
    }
  }
}

}  // namespace
}  // namespace lmf::cpu

// ---- 16-bit activation blocks (ActBits::Int16, knob cpu_act16) ----
namespace lmf::cpu {
namespace {

// Every ISA's 16-bit quantization is bit-identical to the scalar definition, and the definition
// does what act_quant.h says: |qs| <= 32767, the block's largest |x| maps to +-32767,
// |x - d*qs| <= d/2 + f32 rounding (id and x*id each carry 2^-24 relative error, i.e. up to
// 32767 * 2^-23 ~ 0.004 of a step: bound 0.505 d), s = d * sum(qs).
TEST(CpuActQuant16, IsaPathsBitIdenticalAndDefinitionHolds) {
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x;
  for (float scale : {1.0f, 1e-30f, 1e30f, 3.0f})
    for (int i = 0; i < 32 * 40; ++i) x.push_back(g(rng) * scale);
  for (int j = 0; j < 32; ++j) x.push_back(0.0f);
  for (int j = 0; j < 32; ++j) x.push_back(float(j - 16) * 32767.0f / 16.0f / 2.0f);  // .5 ties
  for (int j = 0; j < 32; ++j) x.push_back(j == 0 ? -1.0f : 0.5f / 32767.0f * float(2 * j + 1));
  for (int j = 0; j < 32; ++j) x.push_back(j == 7 ? 300.0f : g(rng) * 0.01f);  // one outlier
  const int64_t n = int64_t(x.size());
  std::vector<ActBlock16> ref(size_t(n / 32)), got(size_t(n / 32));
  quantize_act16_row(x.data(), n, ref.data());
  for (size_t b = 0; b < ref.size(); ++b) {
    const ActBlock16& blk = ref[b];
    float amax = 0.0f;
    int64_t sum = 0;
    int qmax = 0;
    for (int j = 0; j < 32; ++j) {
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
      sum += blk.qs[j];
      qmax = std::max(qmax, std::abs(int(blk.qs[j])));
    }
    ASSERT_EQ(blk.d, amax / 32767.0f) << "block " << b;
    ASSERT_EQ(qmax, amax > 0.0f ? 32767 : 0) << "block " << b;
    ASSERT_EQ(blk.s, blk.d * float(sum)) << "block " << b;
    for (int j = 0; j < 32; ++j)
      ASSERT_LE(std::fabs(double(x[b * 32 + j]) - double(blk.d) * blk.qs[j]), double(blk.d) * 0.505)
          << "block " << b << " element " << j;
  }
  for (Isa isa : isas()) {
    std::memset(got.data(), 0x55, got.size() * sizeof(ActBlock16));
    quantize_act16_row(x.data(), n, got.data(), isa);
    for (size_t b = 0; b < ref.size(); ++b)
      ASSERT_EQ(std::memcmp(&ref[b], &got[b], sizeof(ActBlock16)), 0) << isa_name(isa) << " block " << b;
  }
}

// Inputs like a transformer's hidden state: mostly small, one large channel per row (the case
// where 8-bit blocks lose most: the outlier sets the block's scale).
std::vector<float> make_outlier_input(int64_t T, int64_t cols, uint32_t seed) {
  std::vector<float> x = make_input(T, cols, cols, seed);
  for (int64_t t = 0; t < T; ++t) x[size_t(t * cols + (37 * t + 11) % cols)] = 40.0f;
  return x;
}

// Every ISA path (GEMV rows, packed GEMM tiles of 8/4/1 tokens, 3 threads) is bit-identical to
// the scalar 16-bit definition, on odd row counts (partial 8/16/32-row groups) and block counts,
// writes nothing outside the output, and handles bias.
TEST(CpuMatmul16, IsaPathsBitIdenticalToScalar) {
  ThreadPool pool1(1), pool3(3);
  struct Shape { int64_t rows, cols; };
  const std::vector<Shape> shapes = {{1, 32}, {7, 96}, {45, 160}, {40, 512}, {67, 1024}, {130, 64}, {33, 3072}};
  for (DType type : quant_types())
    for (const Shape& s : shapes) {
      if (s.cols % type_info(type).block != 0) continue;
      const TestWeight tw = make_weight(type, s.rows, s.cols, uint32_t(s.rows * 17 + s.cols));
      std::vector<float> bias(size_t(s.rows));
      for (int64_t r = 0; r < s.rows; ++r) bias[size_t(r)] = 0.03f * float(r % 7) - 0.1f;
      for (int64_t T : {1, 2, 3, 5, 8, 9, 12, 13, 17, 33}) {
        if (s.cols >= 3072 && T > 13) continue;
        SCOPED_TRACE(std::string(dtype_name(type)) + " rows=" + std::to_string(s.rows) + " cols=" +
                     std::to_string(s.cols) + " T=" + std::to_string(T));
        const int64_t ldx = s.cols + 5, ldy = s.rows + 3, guard = 19;
        const std::vector<float> x = make_input(T, s.cols, ldx, uint32_t(T * 5 + s.cols));
        std::vector<float> ref(size_t(T * ldy), 0.0f);
        MatmulScratch scratch;
        MatmulTask task{&tw.w, ref.data(), ldy, T % 2 ? bias.data() : nullptr};
        matmul({&task, 1}, x.data(), T, ldx, pool1, scratch, Isa::Scalar, ActBits::Int16);
        for (Isa isa : isas()) {
          std::vector<float> buf(size_t(T * ldy + 2 * guard), sentinel());
          task.y = buf.data() + guard;
          matmul({&task, 1}, x.data(), T, ldx, pool3, scratch, isa, ActBits::Int16);
          for (int64_t i = 0; i < int64_t(buf.size()); ++i) {
            const int64_t k = i - guard;
            const bool written = k >= 0 && k < T * ldy && (k % ldy) < s.rows;
            if (!written) {
              ASSERT_TRUE(is_sentinel(buf[size_t(i)])) << isa_name(isa) << " wrote outside the output at " << k;
            } else {
              ASSERT_EQ(std::memcmp(&buf[size_t(i)], &ref[size_t(k)], sizeof(float)), 0)
                  << isa_name(isa) << " row " << k % ldy << " token " << k / ldy << ": " << buf[size_t(i)]
                  << " vs scalar " << ref[size_t(k)];
            }
          }
        }
        task.y = ref.data();
      }
    }
}

// One output depends only on its (row, token): T=k on 3 threads equals k calls of T=1, bit for
// bit (prefill-then-decode equals one long prefill with 16-bit activations too).
TEST(CpuMatmul16, BitIdenticalAcrossTokenCounts) {
  ThreadPool pool1(1), pool3(3);
  for (DType type : quant_types())
    for (int64_t cols : {64, 96, 256, 1024, 3072}) {
      if (cols % type_info(type).block != 0) continue;
      const int64_t rows = 45;
      const TestWeight tw = make_weight(type, rows, cols, uint32_t(cols + 12));
      for (Isa isa : isas())
        for (int64_t k : {2, 3, 7, 8, 9, 12, 13, 17, 64}) {
          SCOPED_TRACE(std::string(dtype_name(type)) + " " + isa_name(isa) + " cols=" +
                       std::to_string(cols) + " T=" + std::to_string(k));
          const std::vector<float> x = make_outlier_input(k, cols, uint32_t(k * 3 + cols));
          std::vector<float> all(size_t(k * rows)), one(size_t(k * rows));
          MatmulScratch scratch;
          MatmulTask task{&tw.w, all.data(), rows, nullptr};
          matmul({&task, 1}, x.data(), k, cols, pool3, scratch, isa, ActBits::Int16);
          for (int64_t t = 0; t < k; ++t) {
            task.y = one.data() + t * rows;
            matmul({&task, 1}, x.data() + t * cols, 1, cols, pool1, scratch, isa, ActBits::Int16);
          }
          ASSERT_EQ(std::memcmp(all.data(), one.data(), all.size() * sizeof(float)), 0);
        }
    }
}

// Accuracy against a double-precision product of the dequantized weights (dequantize_row, the
// same decoding the gguf package does) with the raw f32 activations: the only approximation left
// is the activation rounding. Per output, |err| <= sum(|w_i| * d_i / 2) (d = amax/32767) plus
// f32 summation; over each case, rel-L2 must be below 1e-4 and at least 50x below the 8-bit
// path's (expected ~258x: the step is 32767/127 times finer).
TEST(CpuMatmul16, FarMoreAccurateThan8Bit) {
  ThreadPool pool(2);
  for (DType type : quant_types())
    for (bool outliers : {false, true}) {
      const int64_t rows = 96, cols = 1024, T = 9;
      const TestWeight tw = make_weight(type, rows, cols, 77);
      const std::vector<float> x = outliers ? make_outlier_input(T, cols, 5) : make_input(T, cols, cols, 5);
      std::vector<float> wf(static_cast<size_t>(cols));
      std::vector<double> ref(static_cast<size_t>(T * rows)), bound(ref.size()), mag(ref.size());
      std::vector<ActBlock16> xq(static_cast<size_t>(T * cols / 32));
      for (int64_t t = 0; t < T; ++t) quantize_act16_row(x.data() + t * cols, cols, xq.data() + t * cols / 32);
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(type, tw.w.data + size_t(r) * tw.w.row_stride(), wf.data(), cols);
        for (int64_t t = 0; t < T; ++t) {
          double acc = 0, bnd = 0, m = 0;
          for (int64_t i = 0; i < cols; ++i) {
            const double w = wf[size_t(i)], xi = x[size_t(t * cols + i)];
            acc += w * xi;
            m += std::fabs(w * xi);
            bnd += std::fabs(w) * double(xq[size_t((t * cols + i) / 32)].d) * 0.5;
          }
          ref[size_t(t * rows + r)] = acc;
          bound[size_t(t * rows + r)] = bnd;
          mag[size_t(t * rows + r)] = m;
        }
      }
      for (Isa isa : isas()) {
        SCOPED_TRACE(std::string(dtype_name(type)) + " " + isa_name(isa) + (outliers ? " outliers" : ""));
        double rel[2];
        for (ActBits act : {ActBits::Int8, ActBits::Int16}) {
          std::vector<float> y(size_t(T * rows));
          MatmulScratch scratch;
          MatmulTask task{&tw.w, y.data(), rows, nullptr};
          matmul({&task, 1}, x.data(), T, cols, pool, scratch, isa, act);
          double num = 0, den = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            num += (y[i] - ref[i]) * (y[i] - ref[i]);
            den += ref[i] * ref[i];
            if (act == ActBits::Int16) {
              ASSERT_NEAR(y[i], ref[i], bound[i] * 1.0001 + 1e-6 * mag[i]) << "output " << i;
            }
          }
          rel[act == ActBits::Int16] = std::sqrt(num / den);
        }
        std::printf("[ act16    ] %s %s%s: rel-L2 vs double, 8-bit %.3e, 16-bit %.3e\n", dtype_name(type),
                    isa_name(isa), outliers ? " (outliers)" : "", rel[0], rel[1]);
        EXPECT_LT(rel[1], 1e-4);
        EXPECT_LT(rel[1] * 50, rel[0]);
      }
    }
}

// Q/K/V-style multi-task calls take 16-bit activations for every quantized member (one shared
// quantization) and equal separate calls bit for bit; float members are unaffected.
TEST(CpuMatmul16, MultiTaskEqualsSeparateCalls) {
  ThreadPool pool(2);
  const int64_t cols = 256;
  TestWeight q = make_weight(DType::Q4_0, 128, cols, 1), k = make_weight(DType::Q8_0, 64, cols, 2),
             v = make_weight(DType::F16, 48, cols, 3), u = make_weight(DType::Q6_K, 40, cols, 4);
  for (Isa isa : isas())
    for (int64_t T : {1, 11}) {
      const std::vector<float> x = make_input(T, cols, cols, 9);
      std::vector<float> yq(size_t(T * 128)), yk(size_t(T * 64)), yv(size_t(T * 48)), yu(size_t(T * 40));
      std::vector<MatmulTask> tasks = {{&q.w, yq.data(), 128, nullptr},
                                       {&k.w, yk.data(), 64, nullptr},
                                       {&v.w, yv.data(), 48, nullptr},
                                       {&u.w, yu.data(), 40, nullptr}};
      MatmulScratch scratch;
      matmul(tasks, x.data(), T, cols, pool, scratch, isa, ActBits::Int16);
      for (const MatmulTask& t : tasks) {
        std::vector<float> sep(size_t(T * t.ldy));
        MatmulTask one = t;
        one.y = sep.data();
        matmul({&one, 1}, x.data(), T, cols, pool, scratch, isa, ActBits::Int16);
        ASSERT_EQ(std::memcmp(sep.data(), t.y, sep.size() * sizeof(float)), 0)
            << t.w->name << " " << isa_name(isa) << " T=" << T;
      }
    }
}

}  // namespace
}  // namespace lmf::cpu

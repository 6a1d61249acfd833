// backend/cpu/repack.h: Q4_0 and Q4_K repacked in 16-row panels. The panels rebuild the original rows
// byte for byte, and a matmul reading them (the AVX-512 panel GEMV for T < 8, the rebuilt rows
// otherwise; every ISA, 1 and 3 threads, 8- and 16-bit activations) is bit-identical to the
// same ISA's kernels on the original rows, writes nothing outside its output, and adds the bias.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "format/quant/quantize.h"
#include "util/status.h"

namespace lmf::cpu {
namespace {

struct QW {
  std::vector<uint8_t> bytes;
  Weight w;
};

QW make_weight(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  QW q;
  const size_t rb = row_bytes(type, cols);
  q.bytes.resize(rb * size_t(rows));
  std::vector<float> row(size_t(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = r % 7 == 3 ? 0.0f : g(rng) * 0.02f * float(1 + r % 5);
    quantize_row(type, row.data(), q.bytes.data() + size_t(r) * rb, cols);
  }
  q.w.name = std::string("test.") + dtype_name(type);
  q.w.type = type;
  q.w.rows = rows;
  q.w.cols = cols;
  q.w.data = q.bytes.data();
  q.w.nbytes = q.bytes.size();
  return q;
}

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Scalar};
  if (has_avx2()) v.push_back(Isa::Avx2);
  if (has_avx512()) v.push_back(Isa::Avx512);
  return v;
}

const DType kTypes[] = {DType::Q4_0, DType::Q4_K};

TEST(CpuRepack, PanelsRebuildTheRows) {
  for (DType type : kTypes)
  for (int64_t rows : {1, 15, 16, 17, 45}) {
    const QW q = make_weight(type, rows, 512, uint32_t(rows));
    ASSERT_TRUE(x16_supported(q.w));
    const X16Weight x = repack_x16(q.w);
    std::vector<uint8_t> back(size_t(kX16Rows) * q.w.row_stride());
    for (int64_t r = 0; r < rows; r += kX16Rows) {
      const int n = int(std::min<int64_t>(kX16Rows, rows - r));
      unpack_x16_rows(x, x.panel(r / kX16Rows), 0, n, back.data());
      EXPECT_EQ(std::memcmp(back.data(), q.bytes.data() + size_t(r) * q.w.row_stride(), size_t(n) * q.w.row_stride()), 0)
          << dtype_name(type) << " rows " << rows << " panel " << r / kX16Rows;
    }
  }
}

TEST(CpuRepack, MatmulOnPanelsBitIdenticalToScalarRows) {
  ThreadPool pool1(1), pool3(3);
  struct Shape { int64_t rows, cols; };
  for (DType type : kTypes)
  for (const Shape s : {Shape{1, 256}, Shape{7, 512}, Shape{45, 768}, Shape{67, 1024}, Shape{130, 256}, Shape{33, 3072},
                        Shape{3, 96}, Shape{9, 160}}) {
    if (s.cols % type_info(type).block) continue;
    const QW q = make_weight(type, s.rows, s.cols, uint32_t(s.rows * 31 + s.cols));
    const X16Weight x = repack_x16(q.w);
    std::vector<float> bias(size_t(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) bias[size_t(r)] = 0.01f * float(r % 5) - 0.02f;
    for (ActBits act : {ActBits::Int8, ActBits::Int16})
      for (int64_t T : {1, 2, 3, 7, 8, 9, 17}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + " rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols) + " T=" +
                     std::to_string(T) + " act=" + std::to_string(int(act)));
        const int64_t ldx = s.cols + 3, ldy = s.rows + 5, guard = 11;
        std::mt19937 rng(uint32_t(T * 7 + s.cols));
        std::normal_distribution<float> g(0.0f, 1.0f);
        std::vector<float> xin(size_t(T * ldx), NAN);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < s.cols; ++i) xin[size_t(t * ldx + i)] = g(rng) * (t % 2 ? 4.0f : 0.3f);
        MatmulScratch scratch;
        const float* b = T % 2 ? bias.data() : nullptr;
        for (Isa isa : isas()) {
          // The contract: the panels give what the same ISA gives on the original rows (and, with
          // 16-bit activations, every ISA gives the scalar kernel's bits: checked in
          // cpu_matmul_test.cpp, so here too by transitivity).
          std::vector<float> ref(size_t(T * ldy), 0.0f);
          MatmulTask plain{&q.w, ref.data(), ldy, b};
          matmul({&plain, 1}, xin.data(), T, ldx, pool1, scratch, isa, act);
          for (ThreadPool* pool : {&pool1, &pool3}) {
            std::vector<float> buf(size_t(T * ldy + 2 * guard), -12345.0f);
            MatmulTask task{&q.w, buf.data() + guard, ldy, b, &x};
            matmul({&task, 1}, xin.data(), T, ldx, *pool, scratch, isa, act);
            for (int64_t i = 0; i < int64_t(buf.size()); ++i) {
              const int64_t k = i - guard;
              if (k >= 0 && k < T * ldy && (k % ldy) < s.rows)
                ASSERT_EQ(std::memcmp(&buf[size_t(i)], &ref[size_t(k)], sizeof(float)), 0)
                    << isa_name(isa) << " threads " << pool->size() << " row " << k % ldy << " token " << k / ldy
                    << ": " << buf[size_t(i)] << " vs " << ref[size_t(k)];
              else
                ASSERT_EQ(buf[size_t(i)], -12345.0f) << isa_name(isa) << " wrote outside the output at " << k;
            }
          }
        }
      }
  }
}

TEST(CpuRepack, MismatchedRepackIsRefused) {
  const QW q = make_weight(DType::Q4_0, 16, 256, 1), other = make_weight(DType::Q4_0, 16, 512, 2),
           k = make_weight(DType::Q4_K, 16, 256, 3);
  std::vector<float> xin(256, 1.0f), y(16);
  ThreadPool pool(1);
  MatmulScratch scratch;
  for (const QW* src : {&other, &k}) {  // another shape, another type
    const X16Weight x = repack_x16(src->w);
    MatmulTask task{&q.w, y.data(), 16, nullptr, &x};
    EXPECT_THROW(matmul({&task, 1}, xin.data(), 1, 256, pool, scratch), Error);
  }
  EXPECT_FALSE(x16_supported(make_weight(DType::Q8_0, 4, 64, 4).w));
  EXPECT_FALSE(x16_supported(make_weight(DType::Q6_K, 4, 256, 5).w));
}

}  // namespace
}  // namespace lmf::cpu

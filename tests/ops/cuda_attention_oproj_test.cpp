// o_proj inside the direct decode attention (AttnArgs::wo, knob LMFUSE_ATTN_O_FUSION) against the
// separate launches it replaces: the plain direct attention (one query head per block) and the
// integer-dot o_proj GEMV on its output. The attention output must be the same bits; the o_proj
// products, summed by atomics in another order, the GEMV's within float rounding; the previous
// layer's accumulator zeroed.
#include <cstring>
#include <string>

#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

void run_oproj(int n_head, int n_kv, int64_t rows, int len, uint32_t seed) {
  constexpr int hd = 128;
  const int64_t n_ctx = 512;
  std::mt19937 rng(seed);
  const auto q = randn(size_t(n_head) * hd, rng);
  const auto [kc, vc] = random_kv_caches(n_kv, n_ctx, hd, len, rng);  // NaN past len
  const int64_t cols = int64_t(n_head) * hd;
  const auto wq = random_rows(DType::Q4_0, rows, cols, rng);
  DeviceWeight dw = upload_weight(repack_rows(DType::Q4_0, wq.data(), rows, cols));
  DevBuf<float> d_q(q);
  DevBuf<uint16_t> d_k(kc), d_v(vc);
  DevBuf<int> d_pos(std::vector<int>{len - 1});
  const int splits = attn_plan_splits(n_kv, n_ctx);
  DevBuf<float> out1(q.size()), part1(attn_scratch_floats(n_head, hd, splits)), y1(static_cast<size_t>(rows));
  AttnArgs a = attn_args(d_q.p(), d_k.p(), d_v.p(), n_head, n_kv, hd, n_ctx, d_pos.p(), out1.p(), part1.p());
  a.staged = true;
  a.single_split = true;
  a.direct = true;
  a.heads_per_block = 1;
  const std::string what = "heads " + std::to_string(n_head) + "/" + std::to_string(n_kv) + " rows " +
                           std::to_string(rows) + " len " + std::to_string(len);

  // Separate: the direct attention, then o_proj as the integer-dot GEMV on its output.
  attention_decode(a);
  GemvArgs g;
  g.w = &dw;
  g.in = out1.p();
  g.y = y1.p();
  gemv(Prologue::None, Epilogue::Store, g);
  const auto o1 = out1.get(), ref = y1.get();

  // Fused, into a zeroed accumulator that already holds `base` on the second run (the products
  // are added), with the previous layer's accumulator (7s) to be zeroed.
  std::vector<float> base(size_t(rows), 0.f);
  for (int run = 0; run < 2; ++run) {
    DevBuf<float> out2(q.size()), part2(attn_scratch_floats(n_head, hd, splits)), acc(base),
        prev(std::vector<float>(size_t(rows), 7.f));
    AttnArgs f = a;
    f.out = out2.p();
    f.partial = part2.p();
    f.wo = &dw;
    f.o_acc = acc.p();
    f.o_zero = prev.p();
    attention_decode(f);
    const auto o2 = out2.get(), y = acc.get(), z = prev.get();
    const std::string w = what + (run ? " (accumulating)" : "");
    EXPECT_TRUE(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)) == 0)
        << w << ": attention output differs, rel_l2 " << rel_l2(o2, o1);
    std::vector<float> want(ref);
    for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
    EXPECT_TRUE(all_finite(y) && acc.guards_intact() && prev.guards_intact() && out2.guards_intact()) << w;
    EXPECT_LE(rel_l2(y, want), 2e-6) << w;
    bool zeroed = true;
    for (float x : z) zeroed &= x == 0.f;
    EXPECT_TRUE(zeroed) << w << ": previous accumulator not zeroed";
    bool untouched = part2.guards_intact();
    for (float x : part2.get()) untouched &= std::isnan(x);
    EXPECT_TRUE(untouched) << w << ": wrote the partials";
    base = randn(size_t(rows), rng);
  }
  free_weight(dw);
}

}  // namespace

// 0.6B (16/8 heads, 1024 rows: 8 row slices), 4B (2560 rows) and 8B (4096), a GQA group of 6
// whose row count has no divisor near SMs / heads, at lengths across the first stages (64 | 65)
// and past two.
TEST(CudaAttentionOproj, MatchesSeparateLaunches) {
  uint32_t seed = 300;
  struct Shape {
    int n_head, n_kv;
    int64_t rows;
  };
  for (const Shape s : {Shape{16, 8, 1024}, Shape{32, 8, 2560}, Shape{32, 8, 4096}, Shape{24, 4, 1000}})
    for (int len : {1, 37, 64, 65, 200, 384}) run_oproj(s.n_head, s.n_kv, s.rows, len, seed++);
}

// The fusion's preconditions are refused with an error before any launch.
TEST(CudaAttentionOproj, RefusesBadArgs) {
  std::mt19937 rng(7);
  const auto wq = random_rows(DType::Q4_0, 256, 32 * 128, rng);
  const auto w8 = random_rows(DType::Q8_0, 256, 32 * 128, rng);
  DeviceWeight dw = upload_weight(repack_rows(DType::Q4_0, wq.data(), 256, 32 * 128));
  DeviceWeight d8 = upload_weight(repack_rows(DType::Q8_0, w8.data(), 256, 32 * 128));
  DevBuf<float> q(32 * 128), out(32 * 128), part(attn_scratch_floats(32, 128, attn_plan_splits(8, 256)));
  DevBuf<float> acc(256), prev(256);
  DevBuf<uint16_t> k(8 * 256 * 128), v(8 * 256 * 128);
  DevBuf<int> pos(std::vector<int>{10});
  AttnArgs a = attn_args(q.p(), k.p(), v.p(), 32, 8, 128, 256, pos.p(), out.p(), part.p());
  a.staged = a.direct = a.single_split = true;
  a.heads_per_block = 1;
  a.wo = &dw;
  a.o_acc = acc.p();
  a.o_zero = prev.p();
  auto refused = [&](AttnArgs b, const char* why) {
    EXPECT_TRUE(throws_error([&] { attention_decode(b); })) << why << " accepted";
  };
  AttnArgs b = a;
  b.heads_per_block = 2;
  refused(b, "two heads per block");
  b = a;
  b.direct = false;
  refused(b, "a split + merge launch");
  b = a;
  b.wo = &d8;
  refused(b, "a Q8_0 o_proj");
  b = a;
  b.o_acc = nullptr;
  refused(b, "no accumulator");
  b = a;
  b.n_head = 16;
  b.n_kv_head = 4;
  refused(b, "o_proj columns != n_head * head_dim");
  free_weight(dw);
  free_weight(d8);
}

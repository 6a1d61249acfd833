// Decode attention (split + merge) vs a double reference over the same fp16 cache; positions
// beyond the length hold NaN, so reading them would show.
#include <string>

#include "cuda_test.h"
#include "cuda_test_util.h"
#include "backend/cuda/qkv_post.h"
#include "util/round_fadd.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

// x quantized in the integer-dot GEMVs' staging layout, computed on the host (the rule of
// kernels/act_quant.cuh with IEEE float ops): int8 codes in uint4 planes lo/hi, then int2
// {bits of amax / 127, sum of codes} per 32-block.
std::vector<uint8_t> xq_reference(const std::vector<float>& x) {
  const size_t nblk = x.size() / 32;
  std::vector<uint8_t> r(nblk * 40);
  for (size_t c = 0; c < nblk; ++c) {
    float am = 0.f;
    for (int e = 0; e < 32; ++e) am = std::max(am, std::fabs(x[c * 32 + e]));
    const float id = am > 0.f ? 127.f / am : 0.f;
    int sum = 0;
    for (int e = 0; e < 32; ++e) {
      const uint32_t b = lmf::round_fadd_bits(x[c * 32 + e] * id);
      sum += int(b - lmf::kRoundFaddBias);
      const int f = e / 4;
      r[((size_t(f >> 2) * nblk + c) * 4 + (f & 3)) * 4 + (e & 3)] = uint8_t(b & 0xffu);
    }
    const float dx = am / 127.f;
    std::memcpy(&r[nblk * 32 + c * 8], &dx, 4);
    std::memcpy(&r[nblk * 32 + c * 8 + 4], &sum, 4);
  }
  return r;
}

// staged: pass 1 from shared-memory stages (AttnArgs::staged) instead of the register form;
// single: with staged, lengths up to 64 in a single split (AttnArgs::single_split).
void run_attn(int n_head, int n_kv, int hd, int64_t n_ctx, int len, uint32_t seed, bool staged, bool single = true) {
  std::mt19937 rng(seed);
  const int G = n_head / n_kv;
  auto q = randn(size_t(n_head) * hd, rng);
  auto [kc, vc] = random_kv_caches(n_kv, n_ctx, hd, len, rng);
  std::vector<double> ref(q.size());
  for (int hq = 0; hq < n_head; ++hq) {
    const int h = hq / G;
    std::vector<double> s(len);
    double m = -1e300;
    for (int t = 0; t < len; ++t) {
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double(q[size_t(hq) * hd + d]) * fp16_to_f32(kc[(size_t(h) * n_ctx + t) * hd + d]);
      s[t] = acc / std::sqrt(double(hd));
      m = std::max(m, s[t]);
    }
    double den = 0;
    for (auto& x : s) den += (x = std::exp(x - m));
    for (int d = 0; d < hd; ++d) {
      double o = 0;
      for (int t = 0; t < len; ++t) o += s[t] * fp16_to_f32(vc[(size_t(h) * n_ctx + t) * hd + d]);
      ref[size_t(hq) * hd + d] = o / den;
    }
  }
  DevBuf<float> d_q(q), d_out(q.size());
  DevBuf<uint16_t> d_k(kc), d_v(vc);
  DevBuf<int> d_pos(std::vector<int>{len - 1});
  DevBuf<float> part(attn_scratch_floats(n_head, hd, attn_plan_splits(n_kv, n_ctx)));
  AttnArgs a = attn_args(d_q.p(), d_k.p(), d_v.p(), n_head, n_kv, hd, n_ctx, d_pos.p(), d_out.p(), part.p());
  a.staged = staged;
  a.single_split = single;
  attention_decode(a);  // separate merge kernel
  auto out = d_out.get();
  const std::string what = std::string(staged ? "staged " : "") + (staged && !single ? "no-single " : "") +
                           "heads " + std::to_string(n_head) + "/" +
                           std::to_string(n_kv) + " hd " + std::to_string(hd) + " len " + std::to_string(len);
  EXPECT_TRUE(all_finite(out) && d_out.guards_intact() && part.guards_intact()) << what;
  EXPECT_LE(rel_l2(out, ref), 1e-5) << what;
  // A launch of `a` with its own poisoned output, partials and int8 codes.
  struct Fresh {
    DevBuf<float> out, part;
    DevBuf<uint8_t> xq;
    Fresh(size_t n, size_t n_part) : out(n), part(n_part), xq(gemv_xq_bytes(int64_t(n))) {}
    void run(AttnArgs c) {
      c.out = out.p();
      c.partial = part.p();
      c.xq = xq.p();
      attention_decode(c);
    }
  };
  // The merge kernel's int8 copy of out for the o_proj GEMV (AttnArgs::xq): the same out bits,
  // the codes of the host rule, into a poisoned buffer whose guards stay intact; and an Int8
  // prologue GEMV on it gives the bits of the None prologue on out.
  {
    Fresh f(q.size(), attn_scratch_floats(n_head, hd, a.n_splits));
    f.run(a);
    DevBuf<float>& d_out3 = f.out;
    DevBuf<uint8_t>& d_xq = f.xq;
    const auto out3 = d_out3.get();
    EXPECT_TRUE(std::memcmp(out3.data(), out.data(), out.size() * sizeof(float)) == 0) << what << " with xq";
    EXPECT_TRUE(d_xq.get() == xq_reference(out)) << what << " xq codes";
    EXPECT_TRUE(d_xq.guards_intact()) << what << " xq guards";
    const int rows = 64, cols = int(q.size());
    auto wq = random_rows(DType::Q4_0, rows, cols, rng);
    DeviceWeight dw = upload_weight(repack_rows(DType::Q4_0, wq.data(), rows, cols));
    auto yr = randn(size_t(rows), rng);
    DevBuf<float> d_yr(yr), d_y1(static_cast<size_t>(rows)), d_y2(static_cast<size_t>(rows));
    GemvArgs g;
    g.w = &dw;
    g.y_residual = d_yr.p();
    g.in = d_out3.p();
    g.y = d_y1.p();
    gemv(Prologue::None, Epilogue::Residual, g);
    g.in = nullptr;
    g.xq = d_xq.p();
    g.y = d_y2.p();
    gemv(Prologue::Int8, Epilogue::Residual, g);
    const auto y1 = d_y1.get(), y2 = d_y2.get();
    EXPECT_TRUE(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0)
        << what << " Int8 GEMV on xq differs, rel_l2 " << rel_l2(y2, y1);
    free_weight(dw);
  }
  // Direct (AttnArgs::direct: one block per KV head over the whole length writes out and its
  // int8 codes; no merge kernel): the host reference at every length, the host rule's codes of
  // its own output, the partials untouched (still the 0xFF poison); with a single split in the
  // launch above (the staged form to 64) the same bits as the merge kernel's copy.
  auto run_direct = [&](const AttnArgs& base, int hpb, const std::string& tag) {
    Fresh f(q.size(), attn_scratch_floats(n_head, hd, base.n_splits));
    AttnArgs d = base;
    d.direct = true;
    d.heads_per_block = hpb;
    f.run(d);
    const auto o = f.out.get();
    EXPECT_TRUE(all_finite(o) && f.out.guards_intact() && f.xq.guards_intact()) << tag;
    EXPECT_LE(rel_l2(o, ref), 1e-5) << tag;
    EXPECT_TRUE(f.xq.get() == xq_reference(o)) << tag << " xq codes";
    bool untouched = f.part.guards_intact();
    for (float x : f.part.get()) untouched &= std::isnan(x);
    EXPECT_TRUE(untouched) << tag << " wrote the partials";
    return o;
  };
  const std::string dw = what + " direct";
  const auto out4 = run_direct(a, 0, dw);
  if (staged && single && len <= 64) {
    EXPECT_TRUE(std::memcmp(out4.data(), out.data(), out.size() * sizeof(float)) == 0) << dw << " differs from the copy";
  }
  // Head split (staged form): hpb of the G query heads per block, the same checks; bitwise
  // equal to the whole group's block when both instances take 4 dims per P.V thread (G <= 4:
  // GMAX < 8; G = 5..7 round up to the GMAX = 8 instance, 2 dims per thread, another order).
  for (int hpb : {1, 2}) {
    if (!staged || hpb >= G || G % hpb != 0) continue;
    const std::string hw = dw + " heads_per_block " + std::to_string(hpb);
    const auto out5 = run_direct(a, hpb, hw);
    if (G <= 4) {
      EXPECT_TRUE(std::memcmp(out5.data(), out4.data(), out.size() * sizeof(float)) == 0)
          << hw << " differs from the whole group's block, rel_l2 " << rel_l2(out5, out4);
    }
  }
}

}  // namespace

TEST(CudaAttention, LengthsHeadDimsGqa) {
  uint32_t seed = 1;
  for (int hd : {32, 64, 128})
    for (auto [nh, nkv] : {std::pair{16, 8}, std::pair{32, 8}})
      for (int len : {1, 7, 64, 65, 100, 128, 300, 4096})  // 64 | 65: the staged form's single-split edge
        for (int form : {0, 1, 2}) run_attn(nh, nkv, hd, 4096, len, seed++, form > 0, form == 1);
}

// heads_per_block is refused unless it divides the group and the launch is direct and staged
// (the argument check runs before any launch).
TEST(CudaAttention, HeadSplitRefusesBadArgs) {
  DevBuf<float> q(32 * 128), out(32 * 128), part(attn_scratch_floats(32, 128, attn_plan_splits(8, 256)));
  DevBuf<uint16_t> k(8 * 256 * 128), v(8 * 256 * 128);
  DevBuf<int> pos(std::vector<int>{10});
  AttnArgs a = attn_args(q.p(), k.p(), v.p(), 32, 8, 128, 256, pos.p(), out.p(), part.p());
  a.staged = true;
  a.direct = true;
  for (int hpb : {3, 5, -1}) {
    a.heads_per_block = hpb;
    EXPECT_TRUE(throws_error([&] { attention_decode(a); })) << "heads_per_block " << hpb << " of 4 accepted";
  }
  a.heads_per_block = 1;
  a.direct = false;
  EXPECT_TRUE(throws_error([&] { attention_decode(a); })) << "head split without direct accepted";
  a.direct = true;
  a.staged = false;
  EXPECT_TRUE(throws_error([&] { attention_decode(a); })) << "head split in the register form accepted";
}

TEST(CudaAttention, OddGroupsAndContexts) {
  for (bool st : {false, true}) {
    run_attn(14, 2, 64, 1000, 999, 50, st);   // qwen2-0.5b: 7 query heads per KV head
    run_attn(8, 8, 128, 33, 33, 51, st);      // MHA, tiny context
    run_attn(28, 4, 128, 8192, 5000, 52, st); // qwen2-7b grouping
    run_attn(4, 2, 32, 128, 100, 53, st);     // tiny test model: head_dim 32
    run_attn(6, 6, 32, 64, 64, 54, st);
    run_attn(8, 1, 32, 8192, 8000, 55, st);  // MQA: 264 planned splits, 125 used (merge: several passes)
    run_attn(8, 2, 128, 40960, 40000, 56, st);  // qwen3's full context: many stages per slice
  }
}


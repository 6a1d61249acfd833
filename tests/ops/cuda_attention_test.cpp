// Decode attention (split + merge) vs a double reference over the same fp16 cache; positions
// beyond the length hold NaN, so reading them would show.
#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

void run_attn(int n_head, int n_kv, int hd, int64_t n_ctx, int len, uint32_t seed) {
  std::mt19937 rng(seed);
  const int G = n_head / n_kv;
  auto q = randn(size_t(n_head) * hd, rng);
  std::vector<uint16_t> kc(size_t(n_kv) * n_ctx * hd, 0xFFFF), vc(kc.size(), 0xFFFF);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int h = 0; h < n_kv; ++h)
    for (int t = 0; t < len; ++t)
      for (int d = 0; d < hd; ++d) {
        const size_t i = (size_t(h) * n_ctx + t) * hd + d;
        kc[i] = f32_to_fp16(nd(rng));
        vc[i] = f32_to_fp16(nd(rng));
      }
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
  AttnArgs a;
  a.q = d_q.p();
  a.k_cache = d_k.p();
  a.v_cache = d_v.p();
  a.n_head = n_head;
  a.n_kv_head = n_kv;
  a.head_dim = hd;
  a.n_ctx = n_ctx;
  a.pos = d_pos.p();
  a.out = d_out.p();
  a.n_splits = attn_plan_splits(n_kv, n_ctx);
  DevBuf<float> part(attn_scratch_floats(n_head, hd, a.n_splits));
  a.partial = part.p();
  attention_decode(a);
  auto out = d_out.get();
  EXPECT_TRUE(all_finite(out) && d_out.guards_intact() && part.guards_intact())
      << "heads " << n_head << "/" << n_kv << " hd " << hd << " len " << len;
  EXPECT_LE(rel_l2(out, ref), 1e-5) << "heads " << n_head << "/" << n_kv << " hd " << hd << " len " << len;
}

}  // namespace

TEST(CudaAttention, LengthsHeadDimsGqa) {
  uint32_t seed = 1;
  for (int hd : {32, 64, 128})
    for (auto [nh, nkv] : {std::pair{16, 8}, std::pair{32, 8}})
      for (int len : {1, 7, 300, 4096}) run_attn(nh, nkv, hd, 4096, len, seed++);
}

TEST(CudaAttention, OddGroupsAndContexts) {
  run_attn(14, 2, 64, 1000, 999, 50);   // qwen2-0.5b: 7 query heads per KV head
  run_attn(8, 8, 128, 33, 33, 51);      // MHA, tiny context
  run_attn(28, 4, 128, 8192, 5000, 52); // qwen2-7b grouping
  run_attn(4, 2, 32, 128, 100, 53);     // tiny test model: head_dim 32
  run_attn(6, 6, 32, 64, 64, 54);
}

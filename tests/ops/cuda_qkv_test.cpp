// Fused QKV GEMV (bias, per-head RMSNorm, RoPE, q out, K/V cache append at a device position)
// vs a double reference and vs the unfused kernel chain; the default decode path (Store GEMV +
// the qkv_post epilogue kernel, computing RoPE's cos/sin or reading them from the per-context
// table) and the in-GEMV epilogue must all give the unfused chain's bits.
#include "backend/cuda/qkv_post.h"
#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

struct QkvCase {
  DType t;
  int n_head, n_kv, hd, cols;
  bool norms, bias;
  RopeStyle st;
  Prologue pro;
  bool ff = false;  // Llama 3.1+ RoPE frequency divisors
};

void run_case(const QkvCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t n_ctx = 512, rows = int64_t(c.n_head + 2 * c.n_kv) * c.hd;
  const float theta = 1e6f;
  auto wq = random_rows(c.t, rows, c.cols, rng);
  auto W = dequant(c.t, wq, rows, c.cols);
  DeviceWeight dw = upload_weight(repack_rows(c.t, wq.data(), rows, c.cols));
  DeviceWeight dw2 = dw;  // same weight for the unfused chain
  auto gamma = randn(c.cols, rng, 0.5f), qn = randn(c.hd, rng, 0.5f), kn = randn(c.hd, rng, 0.5f),
       bias = randn(rows, rng, 0.1f);
  const size_t cache_n = size_t(c.n_kv) * n_ctx * c.hd;
  DevBuf<uint16_t> kc(cache_n), vc(cache_n), kc2(cache_n), vc2(cache_n), kc3(cache_n), vc3(cache_n),
      kc4(cache_n), vc4(cache_n);  // all 0xFFFF (NaN)
  DevBuf<float> d_gamma(gamma), d_qn(qn), d_kn(kn), d_bias(bias), d_q(size_t(c.n_head) * c.hd),
      d_q3(size_t(c.n_head) * c.hd), d_q4(size_t(c.n_head) * c.hd), d_raw(rows), d_raw2(rows), d_h(c.cols),
      d_xn(c.cols), d_rout(c.cols);
  const std::vector<float> ff = c.ff ? llama3_rope_factors(c.hd, theta) : std::vector<float>{};
  DevBuf<float> d_ff(c.ff ? ff : std::vector<float>(1));
  const float* dff = c.ff ? d_ff.p() : nullptr;
  float2* rope_table = rope_table_alloc(n_ctx, c.hd, theta, dff, nullptr);
  unsigned* counters = qkv_counters_alloc(c.n_head, c.n_kv);
  DevBuf<int> d_pos(1);
  std::vector<std::vector<double>> kref(n_ctx), vref(n_ctx);
  const int positions[] = {0, 5, 300, 511};
  for (int pos : positions) {
    d_pos.upload({pos});
    auto in = randn(c.cols, rng), res = randn(c.cols, rng);
    DevBuf<float> d_in(in), d_res(res);
    std::vector<double> h = to_d(in);
    if (c.pro == Prologue::AddNorm)
      for (int i = 0; i < c.cols; ++i) h[i] = double(in[i] + res[i]);
    // Bias, per-head norm and RoPE of raw in place; returns q.
    auto finish = [&](std::vector<double>& raw) {
      if (c.bias)
        for (int64_t r = 0; r < rows; ++r) raw[r] += bias[r];
      std::vector<double> qr(raw.begin(), raw.begin() + size_t(c.n_head) * c.hd);
      for (int hh = 0; hh < c.n_head + 2 * c.n_kv; ++hh) {
        double* v = raw.data() + size_t(hh) * c.hd;
        const bool is_q = hh < c.n_head, is_k = !is_q && hh < c.n_head + c.n_kv;
        if (c.norms && (is_q || is_k)) {
          std::vector<double> tmp(v, v + c.hd);
          tmp = rmsnorm_ref(tmp, is_q ? qn : kn, 1e-6);
          std::copy(tmp.begin(), tmp.end(), v);
        }
        if (is_q || is_k) rope_ref(v, c.hd, c.st, theta, pos, c.ff ? ff.data() : nullptr);
        if (is_q) std::copy(v, v + c.hd, qr.begin() + size_t(hh) * c.hd);
      }
      return qr;
    };
    // Exact fp reference, and the reference of what the kernel computes (int8 x for the
    // quantized types, see gemv_kernel_ref).
    auto raw_exact = matvec(W, rmsnorm_ref(h, gamma, 1e-6), rows, c.cols);
    auto raw = gemv_kernel_ref(c.t, W, rows, c.cols, in, c.pro == Prologue::AddNorm ? &res : nullptr, &gamma);
    const auto qexact = finish(raw_exact);
    const auto qref = finish(raw);
    kref[pos].assign(raw.begin() + size_t(c.n_head) * c.hd, raw.begin() + size_t(c.n_head + c.n_kv) * c.hd);
    vref[pos].assign(raw.begin() + size_t(c.n_head + c.n_kv) * c.hd, raw.end());

    GemvArgs a = prologue_args(dw, d_in.p(), d_res.p(), d_rout.p(), d_gamma.p(), nullptr);  // QKV writes a.qkv
    a.bias = c.bias ? d_bias.p() : nullptr;
    // One epilogue description for both fused forms: q/k/v to d_q, kc, vc (in-GEMV) or d_q3,
    // kc3, vc3 (the epilogue kernel after a Store GEMV).
    QkvPostArgs pa;
    pa.n_head = c.n_head;
    pa.n_kv_head = c.n_kv;
    pa.head_dim = c.hd;
    pa.q_norm = c.norms ? d_qn.p() : nullptr;
    pa.k_norm = c.norms ? d_kn.p() : nullptr;
    pa.eps = 1e-6f;
    pa.rope = c.st;
    pa.theta = theta;
    pa.rope_ff = dff;
    pa.pos = d_pos.p();
    pa.q_out = d_q.p();
    pa.k_cache = kc.p();
    pa.v_cache = vc.p();
    pa.n_ctx = n_ctx;
    a.qkv = gemv_qkv_params(pa, d_raw.p(), counters);
    gemv(c.pro, Epilogue::QKV, a);

    // Unfused chain.
    const float* hin = d_in.p();
    if (c.pro == Prologue::AddNorm) {
      add(d_in.p(), d_res.p(), d_h.p(), c.cols);
      hin = d_h.p();
    }
    rmsnorm_rows(hin, d_gamma.p(), d_xn.p(), 1, c.cols, 1e-6f);
    GemvArgs b;
    b.w = &dw2;
    b.in = d_xn.p();
    b.y = d_raw2.p();
    b.bias = c.bias ? d_bias.p() : nullptr;
    gemv(Prologue::None, Epilogue::Store, b);
    // Default decode path: the same Store GEMV, then the epilogue kernel (reads raw and leaves it
    // as it is, before the unfused chain below works on it in place).
    pa.raw = d_raw2.p();
    pa.q_out = d_q3.p();
    pa.k_cache = kc3.p();
    pa.v_cache = vc3.p();
    pa.pdl = pos % 2 == 1;  // both launch forms (PDL: after the GEMV in the same stream)
    qkv_post(pa, nullptr);
    // The same with RoPE's cos/sin read from the table (the default decode and prefill path).
    QkvPostArgs pt = pa;
    pt.q_out = d_q4.p();
    pt.k_cache = kc4.p();
    pt.v_cache = vc4.p();
    pt.rope_cs = rope_table;
    pt.pdl = !pa.pdl;
    qkv_post(pt, nullptr);
    float* rq = d_raw2.p();
    float* rk = rq + size_t(c.n_head) * c.hd;
    float* rv = rk + size_t(c.n_kv) * c.hd;
    if (c.norms) {
      rmsnorm_rows(rq, d_qn.p(), rq, c.n_head, c.hd, 1e-6f);
      rmsnorm_rows(rk, d_kn.p(), rk, c.n_kv, c.hd, 1e-6f);
    }
    rope(rq, c.n_head, c.hd, c.st, theta, dff, d_pos.p());
    rope(rk, c.n_kv, c.hd, c.st, theta, dff, d_pos.p());
    kv_store(rk, rv, kc2.p(), vc2.p(), c.n_kv, c.hd, n_ctx, d_pos.p());

    auto qgot = d_q.get();
    auto raw2 = d_raw2.get();
    std::vector<float> q2(raw2.begin(), raw2.begin() + size_t(c.n_head) * c.hd);
    EXPECT_TRUE(all_finite(qgot) && d_q.guards_intact()) << "q out pos " << pos;
    EXPECT_LE(rel_l2(qgot, qref), 1e-4) << dtype_name(c.t) << " q pos " << pos;
    EXPECT_LE(rel_l2(qgot, qexact), act_quantized(c.t) ? 2 * kActQuantTol : 1e-4)
        << dtype_name(c.t) << " q vs exact pos " << pos;
    // The fused prologue quantizes the same normalized x as the unfused chain (bit-identical,
    // see cuda_gemv_test), and the per-head norm and RoPE share the unfused kernels' arithmetic
    // (common.cuh): q is bit-identical on all three paths.
    EXPECT_TRUE(qgot == q2) << dtype_name(c.t) << " q in-GEMV epilogue vs unfused pos " << pos
                            << " rel-L2 " << rel_l2(qgot, q2);
    auto q3 = d_q3.get();
    EXPECT_TRUE(q3 == q2) << dtype_name(c.t) << " q epilogue kernel vs unfused pos " << pos << " rel-L2 "
                          << rel_l2(q3, q2);
    EXPECT_TRUE(d_q3.guards_intact());
    auto q4 = d_q4.get();
    EXPECT_TRUE(q4 == q2) << dtype_name(c.t) << " q epilogue kernel with the RoPE table vs unfused pos " << pos
                          << " rel-L2 " << rel_l2(q4, q2);
    EXPECT_TRUE(d_q4.guards_intact());
  }
  // Caches: written rows match, every other position is still the poison pattern.
  auto kg = kc.get(), vg = vc.get(), kg2 = kc2.get(), vg2 = vc2.get(), kg3 = kc3.get(), vg3 = vc3.get(),
       kg4 = kc4.get(), vg4 = vc4.get();
  for (int kv = 0; kv < c.n_kv; ++kv)
    for (int64_t p = 0; p < n_ctx; ++p) {
      const size_t off = (size_t(kv) * n_ctx + p) * c.hd;
      const bool written = !kref[p].empty();
      std::vector<uint16_t> kr(kg.begin() + off, kg.begin() + off + c.hd), vr(vg.begin() + off, vg.begin() + off + c.hd);
      if (!written) {
        bool poisoned = true;
        for (int i = 0; i < c.hd; ++i)
          poisoned &= kr[i] == 0xFFFF && vr[i] == 0xFFFF && kg2[off + i] == 0xFFFF && kg4[off + i] == 0xFFFF;
        EXPECT_TRUE(poisoned) << "cache position " << p << " written";
        if (!poisoned) return;
        continue;
      }
      std::vector<double> krf(kref[p].begin() + size_t(kv) * c.hd, kref[p].begin() + size_t(kv + 1) * c.hd);
      std::vector<double> vrf(vref[p].begin() + size_t(kv) * c.hd, vref[p].begin() + size_t(kv + 1) * c.hd);
      EXPECT_LE(rel_l2(fp16_to_f(kr), krf), 1e-3) << "k cache pos " << p << " head " << kv;
      EXPECT_LE(rel_l2(fp16_to_f(vr), vrf), 1e-3) << "v cache pos " << p << " head " << kv;
      // Every path appends the same bits (k and v).
      const auto row = [&](const std::vector<uint16_t>& cch) {
        return std::vector<uint16_t>(cch.begin() + off, cch.begin() + off + c.hd);
      };
      EXPECT_TRUE(kr == row(kg2) && vr == row(vg2)) << "k/v in-GEMV epilogue vs unfused pos " << p;
      EXPECT_TRUE(row(kg3) == row(kg2) && row(vg3) == row(vg2)) << "k/v epilogue kernel vs unfused pos " << p;
      EXPECT_TRUE(row(kg4) == row(kg2) && row(vg4) == row(vg2)) << "k/v epilogue kernel, RoPE table, vs unfused pos " << p;
    }
  EXPECT_TRUE(kc.guards_intact() && vc.guards_intact() && kc3.guards_intact() && vc3.guards_intact() &&
              kc4.guards_intact() && vc4.guards_intact());
  cudaFree(rope_table);
  cudaFree(counters);
  free_weight(dw);
}

}  // namespace

TEST(CudaQkv, Qwen3SmallNeoXNormsAddNorm) {
  run_case({DType::Q4_0, 16, 8, 128, 1024, true, false, RopeStyle::NeoX, Prologue::AddNorm}, 11);
  run_case({DType::BF16, 16, 8, 128, 1024, true, false, RopeStyle::NeoX, Prologue::Norm}, 12);
}
TEST(CudaQkv, Head64AdjacentBias) {
  run_case({DType::Q8_0, 32, 8, 64, 2048, false, true, RopeStyle::Adjacent, Prologue::Norm}, 13);
  run_case({DType::F16, 16, 8, 64, 1024, false, true, RopeStyle::NeoX, Prologue::AddNorm}, 14);
}
TEST(CudaQkv, Head32TinyModels) {
  // Tiny test models: head_dim 32 (16 RoPE pairs: half a warp per head in the epilogue).
  run_case({DType::Q8_0, 4, 2, 32, 128, true, false, RopeStyle::NeoX, Prologue::Norm}, 16);
  run_case({DType::F16, 8, 4, 32, 256, true, true, RopeStyle::Adjacent, Prologue::AddNorm}, 17);
  run_case({DType::Q4_0, 4, 1, 32, 64, false, false, RopeStyle::NeoX, Prologue::AddNorm}, 18);
}
TEST(CudaQkv, Llama31FrequencyFactors) {
  // Llama 3.2 1B (head 64) and Llama 3.1 8B (head 128) heads, adjacent pairs; one NeoX case.
  run_case({DType::Q4_0, 32, 8, 64, 2048, false, false, RopeStyle::Adjacent, Prologue::AddNorm, true}, 19);
  run_case({DType::Q8_0, 32, 8, 128, 1024, false, false, RopeStyle::Adjacent, Prologue::Norm, true}, 20);
  run_case({DType::F16, 8, 4, 128, 256, true, true, RopeStyle::NeoX, Prologue::AddNorm, true}, 21);
}
TEST(CudaQkv, Qwen3_8BShape) {
  run_case({DType::Q4_1, 32, 8, 128, 4096, true, false, RopeStyle::NeoX, Prologue::Norm}, 15);
}

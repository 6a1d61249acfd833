// Batched prefill kernels (prefill.h) vs double references: embedding rows, RoPE over rows, KV
// store of T rows, weight dequant to fp16, the outer-dequant matmul (cuBLAS), the in-kernel
// (int8 tensor-core) matmul, causal prefill
// attention with GQA. Odd T, odd column groups (cols not a multiple of 1024), chunked weights.
#include "cuda_test.h"
#include "cuda_test_util.h"

#include "backend/cuda/prefill.h"
#include "backend/cuda/prefill_tune.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

constexpr DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16};
// The K-quants (rows of whole 256-element super-blocks): the outer and GEMV routes.
constexpr DType kKTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

DeviceWeight upload(DType t, const std::vector<uint8_t>& rows, int64_t n, int64_t cols) {
  return upload_weight(repack_rows(t, rows.data(), n, cols));
}

// The caller-owned scratch of the prefill products (prefill.h PrefillScratch), each buffer with
// guard zones: w_elems fp16 weight rows, x_elems fp16 activations, the in-kernel route's int8
// blocks for T rows of up to `cols` inputs, pair_elems floats of gate/up products.
struct Scratch {
  DevBuf<uint16_t> w, x;
  DevBuf<int8_t> xq;
  DevBuf<float> xd, xs, pairs;
  PrefillScratch sc;
  Scratch(int64_t T, int64_t cols, size_t w_elems, size_t x_elems, size_t pair_elems)
      : w(w_elems), x(x_elems), xq(size_t(T * mmq_nblk4(cols) * 32)), xd(size_t(T * mmq_nblk4(cols))),
        xs(size_t(T * mmq_nblk4(cols))), pairs(pair_elems) {
    sc.w = w.p();
    sc.w_elems = w.n;
    sc.x = x.p();
    sc.x_elems = x.n;
    sc.xq = xq.p();
    sc.xq_bytes = xq.n;
    sc.xd = xd.p();
    sc.xs = xs.p();
    sc.xd_elems = xd.n;
    sc.pairs = pairs.p();
    sc.pairs_elems = pairs.n;
  }
  bool intact() const {
    return w.guards_intact() && x.guards_intact() && xq.guards_intact() && xd.guards_intact() &&
           xs.guards_intact() && pairs.guards_intact();
  }
};

void check_dequant(DType t, int64_t rows, int64_t cols, int64_t r0, int64_t step, uint32_t seed) {
  std::mt19937 rng(seed);
  auto raw = random_rows(t, rows, cols, rng);
  auto W = dequant(t, raw, rows, cols);
  DeviceWeight w = upload(t, raw, rows, cols);
  const int64_t n = (rows - 1 - r0) / step + 1;
  DevBuf<uint16_t> out(size_t(n * cols));
  dequant_rows_f16(w, r0, step, n, out.p());
  auto got = fp16_to_f(out.get());
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const double ref = W[size_t((r0 + i * step) * cols + c)];
      // one fp16 rounding; the fp32 order of d*q+m (Q4_1) may move a value across a rounding
      // midpoint: at most one fp16 ulp (2^-10 relative, or the subnormal spacing 6e-8)
      worst = std::max(worst, std::fabs(got[size_t(i * cols + c)] - ref) / (std::fabs(ref) * 9.8e-4 + 6e-8));
    }
  EXPECT_TRUE(worst <= 1.0 && out.guards_intact()) << dtype_name(t) << " rows " << rows << " cols " << cols
                                                   << " step " << step << " worst/allowed " << worst;
  free_weight(w);
}

// Y = X W^T (+ bias) through matmul_prefill; reference in double from the format/quant dequant,
// with the activations int8-quantized per block exactly as the kernel does for 8/4-bit weights.
void check_matmul(DType t, int64_t T, int64_t rows, int64_t cols, int64_t r0, int64_t step, size_t w_scratch,
                  bool bias, uint32_t seed, PrefillRoute route = PrefillRoute::Outer, bool accumulate = false,
                  bool silu = false, bool separate_residual = false) {
  std::mt19937 rng(seed);
  auto raw = random_rows(t, rows, cols, rng);
  auto W = dequant(t, raw, rows, cols);
  DeviceWeight w = upload(t, raw, rows, cols);
  const int64_t n = (rows - 1 - r0) / step + 1;
  auto x = randn(size_t(T * cols), rng);
  auto b = randn(size_t(n), rng, 0.1f);
  std::vector<double> ref(size_t(T * n));
  for (int64_t tt = 0; tt < T; ++tt) {
    std::vector<float> xr(x.begin() + tt * cols, x.begin() + (tt + 1) * cols);
    const auto xq = act_quantized(t) ? act_quant_ref(xr) : to_d(xr);
    for (int64_t i = 0; i < n; ++i) {
      double s = bias ? b[size_t(i)] : 0.0;
      const double* wr = W.data() + size_t((r0 + i * step) * cols);
      for (int64_t c = 0; c < cols; ++c) s += wr[c] * xq[size_t(c)];
      ref[size_t(tt * n + i)] = s;
    }
  }
  const int64_t n_out = silu ? n / 2 : n;
  if (silu) {  // interleaved gate/up columns -> silu(gate) * up
    std::vector<double> r2(size_t(T * n_out));
    for (int64_t tt = 0; tt < T; ++tt)
      for (int64_t j = 0; j < n_out; ++j) {
        const double gt = ref[size_t(tt * n + 2 * j)], up = ref[size_t(tt * n + 2 * j + 1)];
        r2[size_t(tt * n_out + j)] = gt / (1.0 + std::exp(-gt)) * up;
      }
    ref = r2;
  }
  auto y0 = randn(size_t(T * n_out), rng);  // accumulate: y starts here
  if (accumulate)
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += y0[i];
  DevBuf<float> d_x(x), d_b(b), d_y(size_t(T * n_out)), d_r(size_t(T * n_out));
  if (accumulate) (separate_residual ? d_r : d_y).upload(y0);
  Scratch scr(T, cols, 3 * w_scratch, size_t(3 * T * cols), size_t(T * n));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  GemmHandle* h = gemm_create(s);
  PrefillMatmul m;
  m.w = &w;
  m.r0 = r0;
  m.step = step;
  m.n = step > 1 || r0 > 0 ? n : 0;
  m.x = d_x.p();
  m.T = T;
  m.y = d_y.p();
  m.bias = bias ? d_b.p() : nullptr;
  // in place: y = y + X W^T; separate: y = r + X W^T (y starts poisoned)
  m.residual = accumulate ? (separate_residual ? d_r.p() : d_y.p()) : nullptr;
  m.silu_pairs = silu;
  matmul_prefill(h, m, scr.sc, route, s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  auto y = d_y.get();
  // The route matmul_prefill falls back to (prefill.h): gemv needs the whole weight.
  const bool gemv_ok = route == PrefillRoute::Gemv && r0 == 0 && step == 1 && !(bias && (accumulate || silu));
  const bool inkernel = act_quantized(t) && (gemv_ok || route != PrefillRoute::Outer);
  // In-kernel: the int32 block dots are exact, then fp32 scaling and accumulation (~1e-7).
  // Outer, float weights: split fp16 (hi + lo) factors, fp32-level products; what is left is fp32
  // accumulation and lo parts in the fp16 subnormal range (absolute 3e-8 on weights ~1e-2: ~3e-6
  // relative). Outer, quantized weights: one fp16 rounding of each factor (<= 2^-11 relative
  // each, independent): expected ~2^-11 * sqrt(2/3) = 4e-4 rel-L2; 1e-3 bounds it.
  const double tol = inkernel ? 2e-6 : act_quantized(t) ? 1e-3 : 2e-5;  // in-kernel/gemv: same arithmetic
  const double err = rel_l2(y, ref);
  EXPECT_LE(err, tol) << dtype_name(t) << " " << route_name(route) << " T " << T << " rows " << rows << " cols "
                      << cols << " step " << step << (silu ? " silu" : "") << (accumulate ? " acc" : "");
  EXPECT_TRUE(all_finite(y) && d_y.guards_intact() && d_r.guards_intact() && scr.intact())
      << dtype_name(t) << " T " << T;
  gemm_destroy(h);
  cudaStreamDestroy(s);
  free_weight(w);
}

void check_attention(int T, int pos0, int n_head, int n_kv, int hd, int64_t n_ctx, uint32_t seed, bool tc = false) {
  std::mt19937 rng(seed);
  const int G = n_head / n_kv, len = pos0 + T;
  auto q = randn(size_t(T) * n_head * hd, rng);
  auto [kc, vc] = random_kv_caches(n_kv, n_ctx, hd, len, rng);
  std::vector<double> ref(q.size());
  for (int t = 0; t < T; ++t)
    for (int hq = 0; hq < n_head; ++hq) {
      const int h = hq / G, n_see = pos0 + t + 1;
      const float* qr = q.data() + (size_t(t) * n_head + hq) * hd;
      std::vector<double> sc(static_cast<size_t>(n_see));
      double m = -1e300, den = 0;
      for (int p = 0; p < n_see; ++p) {
        double a = 0;
        for (int d = 0; d < hd; ++d) a += double(qr[d]) * fp16_to_f32(kc[(size_t(h) * n_ctx + p) * hd + d]);
        sc[size_t(p)] = a / std::sqrt(double(hd));
        m = std::max(m, sc[size_t(p)]);
      }
      for (auto& v : sc) den += (v = std::exp(v - m));
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int p = 0; p < n_see; ++p) o += sc[size_t(p)] * fp16_to_f32(vc[(size_t(h) * n_ctx + p) * hd + d]);
        ref[(size_t(t) * n_head + hq) * hd + d] = o / den;
      }
    }
  DevBuf<float> d_q(q), d_out(q.size());
  DevBuf<uint16_t> d_k(kc), d_v(vc);
  DevBuf<int> d_pos(std::vector<int>{pos0});
  PrefillAttnArgs a;
  a.q = d_q.p();
  a.k_cache = d_k.p();
  a.v_cache = d_v.p();
  a.T = T;
  a.n_head = n_head;
  a.n_kv_head = n_kv;
  a.head_dim = hd;
  a.n_ctx = n_ctx;
  a.pos0 = d_pos.p();
  a.out = d_out.p();
  if (tc)
    attention_prefill_tc(a);
  else
    attention_prefill(a);
  auto out = d_out.get();
  EXPECT_TRUE(all_finite(out) && d_out.guards_intact()) << "T " << T << " pos0 " << pos0 << " hd " << hd;
  // fp32-level for both kernels (the tensor-core one splits Q and P into hi+lo fp16 parts).
  EXPECT_LE(rel_l2(out, ref), 1e-5) << (tc ? "tc " : "") << "T " << T << " pos0 " << pos0 << " heads " << n_head
                                    << "/" << n_kv << " hd " << hd;
}

}  // namespace

TEST(CudaPrefill, DequantRowsAllTypes) {
  uint32_t seed = 100;
  for (DType t : kTypes) {
    check_dequant(t, 37, 1056, 0, 1, seed++);  // 33 blocks: a partial group of 1
    check_dequant(t, 64, 2048 + 96, 1, 2, seed++);  // odd rows of an interleaved pair
    check_dequant(t, 9, 32, 3, 3, seed++);
  }
  for (DType t : kKTypes) {  // whole super-blocks: 40 blocks (a partial group of 8), 8 blocks
    check_dequant(t, 37, 1280, 0, 1, seed++);
    check_dequant(t, 64, 2048 + 256, 1, 2, seed++);
    check_dequant(t, 9, 256, 3, 3, seed++);
  }
  check_dequant(DType::Q4_0, 70001, 64, 0, 1, seed++);  // more rows than one grid dimension holds (65535)
}

// The SiLU -> down handoff (prefill.h X16Tag): the gate/up product's SiLU pass leaves the down
// projection's fp16 input in the scratch; down then skips its conversion. Both products must be
// bit-identical to running without the handoff, and the tag must live for exactly one product.
TEST(CudaPrefill, SiluHandoffToDownIsExact) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    std::mt19937 rng(950 + int(t));
    const int64_t T = 37, E = 256, F = 96, E2 = 160;
    DeviceWeight w1 = upload(t, random_rows(t, 2 * F, E, rng), 2 * F, E);  // interleaved gate/up
    DeviceWeight w2 = upload(t, random_rows(t, E2, F, rng), E2, F);
    DevBuf<float> x(randn(size_t(T * E), rng)), y1(size_t(T * F)), y2(size_t(T * E2));
    Scratch scr(T, E, size_t(2 * F * E), size_t(3 * T * E), size_t(T * 2 * F));
    PrefillScratch& sc = scr.sc;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    GemmHandle* h = gemm_create(s);
    PrefillMatmul gu, down;
    gu.w = &w1;
    gu.x = x.p();
    gu.T = T;
    gu.y = y1.p();
    gu.silu_pairs = true;
    down.w = &w2;
    down.x = y1.p();
    down.T = T;
    down.y = y2.p();
    std::vector<float> r1[2], r2[2];
    for (int with : {0, 1}) {
      X16Tag tag;
      sc.x16 = with ? &tag : nullptr;
      matmul_prefill(h, gu, sc, PrefillRoute::Outer, s);
      if (with) {
        EXPECT_TRUE(tag.src == y1.p() && tag.T == T && tag.cols == F) << dtype_name(t) << ": tag not set";
      }
      matmul_prefill(h, down, sc, PrefillRoute::Outer, s);
      if (with) {
        EXPECT_TRUE(tag.src == nullptr) << dtype_name(t) << ": tag outlived its product";
      }
      CUDA_CHECK(cudaStreamSynchronize(s));
      r1[with] = y1.get();
      r2[with] = y2.get();
    }
    EXPECT_TRUE(r1[0] == r1[1] && r2[0] == r2[1] && all_finite(r2[1])) << dtype_name(t) << ": handoff changed bits";
    EXPECT_TRUE(scr.intact() && y1.guards_intact() && y2.guards_intact()) << dtype_name(t);
    gemm_destroy(h);
    cudaStreamDestroy(s);
    free_weight(w1);
    free_weight(w2);
  }
}

// The route tuner (prefill_tune.h): every answer is a route the product can take; each T is
// answered from the grid points bracketing it, measured once and kept; a product that cannot take
// the GEMV route (bias + residual) never gets it; float weights take the outer route unmeasured.
TEST(CudaPrefill, RouteTunerMeasuresBracketsOnce) {
  std::mt19937 rng(900);
  const int64_t rows = 512, cols = 1024, maxT = 700;
  std::vector<DeviceWeight> ws;
  for (int c = 0; c < 3; ++c) ws.push_back(upload(DType::Q4_0, random_rows(DType::Q4_0, rows, cols, rng), rows, cols));
  std::vector<const DeviceWeight*> copies;
  for (auto& w : ws) copies.push_back(&w);
  auto b = randn(size_t(rows), rng, 0.1f);
  DevBuf<float> d_b(b), dummy(16);
  Scratch scr(maxT, cols, size_t(rows * cols), size_t(maxT * cols), size_t(maxT * rows));
  const PrefillScratch& sc = scr.sc;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  GemmHandle* h = gemm_create(s);
  PrefillTuner tuner;
  auto lines = [&] {
    const std::string r = tuner.report();
    return std::count(r.begin(), r.end(), '\n');
  };
  PrefillMatmul m;
  m.w = &ws[1];
  m.x = dummy.p();  // never read: the tuner times on its own buffers
  m.y = dummy.p();
  std::vector<PrefillRoute> first;
  for (int64_t T : {2, 5, 40, 700}) {
    m.T = T;
    const PrefillRoute r = tuner.route(h, m, copies, sc, s);
    EXPECT_TRUE(prefill_usable_route(m, r) == r) << "T " << T << " " << route_name(r);
    if (T > 8) {
      EXPECT_TRUE(r != PrefillRoute::Gemv) << "T " << T;
    }
    first.push_back(r);
  }
  EXPECT_EQ(lines(), 6) << tuner.report();  // {2}, {4, 6}, {32, 48}, {512}
  int i = 0;
  for (int64_t T : {2, 5, 40, 700}) {  // answered from the table: same routes, nothing measured
    m.T = T;
    EXPECT_TRUE(tuner.route(h, m, copies, sc, s) == first[size_t(i++)]) << "T " << T;
  }
  EXPECT_EQ(lines(), 6);
  m.T = 3;
  m.bias = d_b.p();
  m.residual = dummy.p();
  EXPECT_TRUE(tuner.route(h, m, copies, sc, s) != PrefillRoute::Gemv);
  EXPECT_EQ(lines(), 7) << tuner.report();  // a new key (bias, residual) at T = 3
  DeviceWeight f = upload(DType::F16, random_rows(DType::F16, 64, 256, rng), 64, 256);
  PrefillMatmul mf;
  mf.w = &f;
  mf.T = 16;
  EXPECT_TRUE(tuner.route(h, mf, {&f}, sc, s) == PrefillRoute::Outer);
  EXPECT_EQ(lines(), 7);
  EXPECT_TRUE(scr.intact());
  free_weight(f);
  for (auto& w : ws) free_weight(w);
  gemm_destroy(h);
  cudaStreamDestroy(s);
}

TEST(CudaPrefill, MatmulOuterDequant) {
  uint32_t seed = 200;
  for (DType t : kTypes) {
    check_matmul(t, 37, 200, 1056, 0, 1, size_t(200) * 1056, true, seed++);
    check_matmul(t, 5, 150, 96, 1, 2, size_t(7) * 96, false, seed++);  // gate/up rows, 11 chunks
    check_matmul(t, 64, 512, 1024, 0, 1, size_t(100) * 1024, false, seed++);  // chunked (6 chunks)
    // gate/up pairs over a chunked weight (90 rows per chunk; 45 for float weights' two parts)
    check_matmul(t, 37, 200, 1056, 0, 1, size_t(30) * 1056, false, seed++, PrefillRoute::Outer, false, true);
  }
  for (DType t : kKTypes) {
    check_matmul(t, 37, 200, 1280, 0, 1, size_t(200) * 1280, true, seed++);
    check_matmul(t, 5, 150, 256, 1, 2, size_t(7) * 256, false, seed++);  // gate/up rows, 11 chunks
    check_matmul(t, 64, 512, 1024, 0, 1, size_t(100) * 1024, false, seed++);  // chunked (6 chunks)
    check_matmul(t, 37, 200, 1280, 0, 1, size_t(30) * 1280, false, seed++, PrefillRoute::Outer, false, true);
  }
}

// The in-kernel route (int8 tensor-core GEMM): token counts around each tile size (16, 32, 64),
// output columns not a multiple of the 128-row tile, inputs whose block count is not a multiple
// of the 4-block stage (96, 160 = 3, 5 blocks) or spans partial 32-block groups (1056 = 33),
// gate/up rows (step 2), bias and the accumulate (residual) epilogue.
TEST(CudaPrefill, MatmulInKernel) {
  uint32_t seed = 500;
  const PrefillRoute ik = PrefillRoute::InKernel;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    check_matmul(t, 37, 200, 1056, 0, 1, size_t(200) * 1056, true, seed++, ik);
    check_matmul(t, 5, 150, 96, 1, 2, size_t(150) * 96, false, seed++, ik);
    check_matmul(t, 16, 64, 160, 0, 1, size_t(64) * 160, true, seed++, ik, true);
    check_matmul(t, 2, 300, 2048, 0, 1, size_t(300) * 2048, false, seed++, ik);
    check_matmul(t, 33, 129, 512, 0, 1, size_t(129) * 512, false, seed++, ik, true);
    check_matmul(t, 64, 256, 1024, 0, 1, size_t(256) * 1024, true, seed++, ik);
    check_matmul(t, 130, 384, 3072, 0, 1, size_t(384) * 3072, false, seed++, ik);
  }
}

// Every route with the gate/up SiLU-pair epilogue and the residual (accumulate) epilogue; the
// GEMV route (decode GEMV per token) on small T, and its fallbacks (rows subset -> in-kernel).
TEST(CudaPrefill, MatmulRoutesEpilogues) {
  uint32_t seed = 600;
  for (DType t : kTypes)
    for (PrefillRoute r : {PrefillRoute::Outer, PrefillRoute::InKernel, PrefillRoute::Gemv}) {
      check_matmul(t, 3, 256, 1024, 0, 1, size_t(256) * 1024, false, seed++, r, false, true);    // silu pairs
      check_matmul(t, 37, 200, 1056, 0, 1, size_t(200) * 1056, false, seed++, r, false, true);
      check_matmul(t, 4, 300, 512, 0, 1, size_t(300) * 512, false, seed++, r, true);             // residual
      check_matmul(t, 37, 300, 512, 0, 1, size_t(70) * 512, false, seed++, r, true, false, true);  // other buffer
      check_matmul(t, 2, 96, 2048, 0, 1, size_t(96) * 2048, true, seed++, r);                    // bias
      check_matmul(t, 3, 150, 96, 1, 2, size_t(150) * 96, false, seed++, r);                     // gemv -> fallback
    }
  // K-quants: the in-kernel route is not theirs (mmq_supported), so it falls back to outer.
  EXPECT_TRUE(!mmq_supported(DType::Q4_K) && !mmq_supported(DType::Q6_K));
  for (DType t : kKTypes)
    for (PrefillRoute r : {PrefillRoute::Outer, PrefillRoute::InKernel, PrefillRoute::Gemv}) {
      check_matmul(t, 3, 256, 1024, 0, 1, size_t(256) * 1024, false, seed++, r, false, true);    // silu pairs
      check_matmul(t, 4, 300, 512, 0, 1, size_t(300) * 512, false, seed++, r, true);             // residual
      check_matmul(t, 2, 96, 2048, 0, 1, size_t(96) * 2048, true, seed++, r);                    // bias
      check_matmul(t, 3, 150, 256, 1, 2, size_t(150) * 256, false, seed++, r);                   // gemv -> fallback
    }
}

TEST(CudaPrefill, AttentionCausalGqa) {
  uint32_t seed = 300;
  for (int hd : {32, 64, 128}) {
    check_attention(37, 0, 16, 8, hd, 256, seed++);
    check_attention(16, 20, 32, 8, hd, 128, seed++);
    check_attention(1 + 64, 300, 14, 2, hd, 512, seed++);
  }
  check_attention(2, 0, 4, 4, 64, 2, seed++);  // MHA, context exactly full
}

// Tensor-core flash attention: several 64-query tiles, key tiles ending mid-tile, an offset
// start (pos0) spanning many key tiles, GQA groups of 1..8, every head_dim; NaN past the visible
// keys in the cache must not leak (zero-filled staging).
TEST(CudaPrefill, AttentionTensorCores) {
  uint32_t seed = 700;
  for (int hd : {32, 64, 128}) {
    check_attention(37, 0, 16, 8, hd, 256, seed++, true);
    check_attention(130, 0, 8, 1, hd, 256, seed++, true);
    check_attention(64, 200, 32, 8, hd, 512, seed++, true);
    check_attention(1 + 64, 300, 14, 2, hd, 512, seed++, true);
  }
  check_attention(2, 0, 4, 4, 64, 2, seed++, true);  // MHA, context exactly full
  check_attention(513, 0, 4, 2, 128, 600, seed++, true);
}

TEST(CudaPrefill, EmbedRopeKvStoreRows) {
  std::mt19937 rng(400);
  const int T = 19, pos0 = 7, n_kv = 3, hd = 64, n_ctx = 40, cols = 96, vocab = 50;
  // embedding rows of a Q4_0 table vs format/quant dequant
  auto table = random_rows(DType::Q4_0, vocab, cols, rng);
  auto Wt = dequant(DType::Q4_0, table, vocab, cols);
  std::vector<int> toks(T);
  for (int t = 0; t < T; ++t) toks[size_t(t)] = (t * 17 + 3) % vocab;
  std::vector<uint8_t> tb(table);
  uint8_t* d_table = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_table), tb.size()));
  CUDA_CHECK(cudaMemcpy(d_table, tb.data(), tb.size(), cudaMemcpyHostToDevice));
  DevBuf<int> d_tok(toks), d_pos(std::vector<int>{pos0});
  DevBuf<float> d_e(size_t(T) * cols);
  embed_rows(DType::Q4_0, d_table, cols, d_tok.p(), T, d_e.p());
  auto e = d_e.get();
  double worst = 0;
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < cols; ++c)
      worst = std::max(worst, std::fabs(e[size_t(t) * cols + c] - Wt[size_t(toks[size_t(t)]) * cols + c]));
  EXPECT_LE(worst, 1e-6);
  EXPECT_TRUE(d_e.guards_intact());
  cudaFree(d_table);
  // rope over rows, both styles, with and without Llama 3.1+ frequency divisors
  const auto ff = llama3_rope_factors(hd, 1e6);
  DevBuf<float> d_ff(ff);
  for (RopeStyle st : {RopeStyle::NeoX, RopeStyle::Adjacent})
    for (bool with_ff : {false, true}) {
      auto x = randn(size_t(T) * n_kv * hd, rng);
      std::vector<double> ref = to_d(x);
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < n_kv; ++h)
          rope_ref(ref.data() + (size_t(t) * n_kv + h) * hd, hd, st, 1e6, pos0 + t, with_ff ? ff.data() : nullptr);
      DevBuf<float> d_x(x);
      rope_rows(d_x.p(), T, n_kv, hd, st, 1e6f, with_ff ? d_ff.p() : nullptr, d_pos.p());
      EXPECT_LE(rel_l2(d_x.get(), ref), 1e-5) << (st == RopeStyle::NeoX ? "neox" : "adjacent") << " factors " << with_ff;
    }
  // kv store of T rows at pos0..pos0+T-1; the rest of the cache untouched
  auto k = randn(size_t(T) * n_kv * hd, rng), v = randn(k.size(), rng);
  DevBuf<float> d_k(k), d_v(v);
  DevBuf<uint16_t> kc(size_t(n_kv) * n_ctx * hd), vc(kc.n);
  kv_store_rows(d_k.p(), d_v.p(), kc.p(), vc.p(), T, n_kv, hd, n_ctx, d_pos.p());
  auto hk = kc.get(), hv = vc.get();
  int bad = 0;
  for (int h = 0; h < n_kv; ++h)
    for (int p = 0; p < n_ctx; ++p)
      for (int d = 0; d < hd; ++d) {
        const size_t ci = (size_t(h) * n_ctx + p) * hd + d;
        const int t = p - pos0;
        if (t >= 0 && t < T) {
          const size_t si = (size_t(t) * n_kv + h) * hd + d;
          bad += hk[ci] != f32_to_fp16(k[si]) || hv[ci] != f32_to_fp16(v[si]);
        } else {
          bad += hk[ci] != 0xFFFF || hv[ci] != 0xFFFF;
        }
      }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(kc.guards_intact() && vc.guards_intact());
}

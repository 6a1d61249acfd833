// Unfused building blocks vs references: embedding (vs dequantize_row), rmsnorm rows, rope,
// kv store, add, silu_mul, argmax.
#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

// With and without the early PDL trigger (kEarlyEmbed; plain launches here, so only the kernel's
// own result is checked).
TEST(CudaElementwise, EmbeddingAllTypes) {
  std::mt19937 rng(3);
  const int64_t vocab = 37, cols = 1024;
  for (int mask : {int(kEarlyAll), 0}) {
    set_pdl_early_trigger(mask);
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::F32, DType::Q4_K,
                    DType::Q5_K, DType::Q6_K}) {
      std::vector<uint8_t> table;
      if (t == DType::F32) {
        auto f = randn(size_t(vocab) * cols, rng);
        table.resize(f.size() * 4);
        std::memcpy(table.data(), f.data(), table.size());
      } else {
        table = random_rows(t, vocab, cols, rng);
      }
      DevBuf<uint8_t> d_tab(table);
      DevBuf<float> out(cols);
      DevBuf<int> tok(std::vector<int>{29});
      embed_lookup(t, d_tab.p(), cols, tok.p(), out.p());
      std::vector<float> ref(cols);
      dequantize_row(t, table.data() + row_bytes(t, cols) * 29, ref.data(), cols);
      auto got = out.get();
      EXPECT_LE(rel_l2(got, ref), 1e-7) << dtype_name(t) << " mask " << mask;
      EXPECT_TRUE(out.guards_intact());
    }
  }
  set_pdl_early_trigger(kEarlyAll);  // the library's initial mask
}

TEST(CudaElementwise, RmsnormRopeKvAddSilu) {
  std::mt19937 rng(4);
  // rmsnorm over rows (per-head norm shape and a hidden-size row)
  for (auto [rows, n] : {std::pair{32, 128}, std::pair{1, 5120}, std::pair{8, 64}}) {
    auto x = randn(size_t(rows) * n, rng), g = randn(n, rng);
    DevBuf<float> dx(x), dg(g), dy(x.size());
    rmsnorm_rows(dx.p(), dg.p(), dy.p(), rows, n, 1e-6f);
    std::vector<double> ref;
    for (int r = 0; r < rows; ++r) {
      auto y = rmsnorm_ref(std::vector<double>(x.begin() + size_t(r) * n, x.begin() + size_t(r + 1) * n), g, 1e-6);
      ref.insert(ref.end(), y.begin(), y.end());
    }
    auto y = dy.get();
    EXPECT_LE(rel_l2(y, ref), 1e-6) << "rmsnorm " << rows << "x" << n;
    EXPECT_TRUE(dy.guards_intact() && all_finite(y));
  }
  // rope, both styles, a large position, with and without Llama 3.1+ frequency divisors
  for (RopeStyle st : {RopeStyle::NeoX, RopeStyle::Adjacent})
    for (int hd : {64, 128})
      for (bool with_ff : {false, true}) {
        const int nh = 16, pos = 4095;
        auto x = randn(size_t(nh) * hd, rng);
        const auto ff = llama3_rope_factors(hd, 1e6);
        DevBuf<float> dx(x), dff(ff);
        DevBuf<int> dp(std::vector<int>{pos});
        rope(dx.p(), nh, hd, st, 1e6f, with_ff ? dff.p() : nullptr, dp.p());
        auto ref = to_d(x);
        for (int h = 0; h < nh; ++h) rope_ref(ref.data() + size_t(h) * hd, hd, st, 1e6, pos, with_ff ? ff.data() : nullptr);
        EXPECT_LE(rel_l2(dx.get(), ref), 1e-4) << "rope hd " << hd << " factors " << with_ff;  // fp32 angle at pos 4095
      }
  // add, silu_mul
  {
    const int64_t n = 12289;
    auto a = randn(n, rng), b = randn(n, rng);
    DevBuf<float> da(a), db(b), dy(n), dz(n);
    add(da.p(), db.p(), dy.p(), n);
    silu_mul(da.p(), db.p(), dz.p(), n);
    std::vector<double> ra(n), rs(n);
    for (int64_t i = 0; i < n; ++i) {
      ra[i] = double(a[i] + b[i]);
      rs[i] = a[i] / (1 + std::exp(-double(a[i]))) * b[i];
    }
    EXPECT_LE(rel_l2(dy.get(), ra), 0.0);
    EXPECT_LE(rel_l2(dz.get(), rs), 1e-6);
    EXPECT_TRUE(dy.guards_intact() && dz.guards_intact());
  }
  // kv store at a device position
  {
    const int nkv = 8, hd = 128, n_ctx = 64, pos = 17;
    auto k = randn(nkv * hd, rng), v = randn(nkv * hd, rng);
    DevBuf<float> dk(k), dv(v);
    DevBuf<uint16_t> kc(size_t(nkv) * n_ctx * hd), vc(size_t(nkv) * n_ctx * hd);
    DevBuf<int> dp(std::vector<int>{pos});
    kv_store(dk.p(), dv.p(), kc.p(), vc.p(), nkv, hd, n_ctx, dp.p());
    auto kg = kc.get(), vg = vc.get();
    bool ok = true;
    for (int h = 0; h < nkv; ++h)
      for (int t = 0; t < n_ctx; ++t)
        for (int d = 0; d < hd; ++d) {
          const size_t i = (size_t(h) * n_ctx + t) * hd + d;
          if (t == pos) ok &= kg[i] == f32_to_fp16(k[h * hd + d]) && vg[i] == f32_to_fp16(v[h * hd + d]);
          else ok &= kg[i] == 0xFFFF && vg[i] == 0xFFFF;
        }
    EXPECT_TRUE(ok) << "kv_store";
  }
}

TEST(CudaElementwise, ArgmaxTiesAndRepeats) {
  std::mt19937 rng(6);
  ArgmaxScratch sc = argmax_scratch_alloc();
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(151936)}) {
    auto x = randn(n, rng);
    const int64_t want = n / 3;
    x[want] = 10.f;
    if (n > 10) {
      x[n - 1] = 10.f;  // tie: the smaller index wins
      x[2] = std::nanf("");
    }
    DevBuf<float> dx(x);
    DevBuf<int> out(1);
    for (int rep = 0; rep < 3; ++rep) {  // the scratch counter must reset itself
      argmax(dx.p(), n, out.p(), sc);
      EXPECT_EQ(int64_t(out.get()[0]), want) << "n " << n << " rep " << rep;
    }
    // Chained decode's outputs (ChainOut): the next step's token and position words, the host's
    // slot (here device memory), each alone or together.
    for (int mode = 1; mode <= 3; ++mode) {
      DevBuf<int> io(std::vector<int>{-5, -5}), slot(std::vector<int>{-1});
      ChainOut c;
      if (mode & 1) c.io = io.p(), c.next_pos = 7;
      if (mode & 2) c.host = slot.p();
      argmax(dx.p(), n, out.p(), sc, nullptr, c);
      const auto i = io.get(), h = slot.get();
      EXPECT_TRUE((mode & 1) ? i[0] == want && i[1] == 7 : i[0] == -5 && i[1] == -5) << "n " << n << " mode " << mode;
      EXPECT_TRUE(h[0] == ((mode & 2) ? want : -1)) << "n " << n << " mode " << mode;
      EXPECT_EQ(int64_t(out.get()[0]), want);
    }
  }
  argmax_scratch_free(sc);
}

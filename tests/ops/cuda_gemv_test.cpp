// GEMV kernels (all weight types, prologues, epilogues) vs double-precision references built from
// format/quant's dequantize_row; guard zones and poisoned outputs on every output. Quantized
// weight types run on int8 activations: they are checked tightly against a reference with the
// same int8 quantization of x, and loosely (kActQuantTol) against the exact fp reference.
#include "cuda_test.h"
#include "cuda_test_util.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K};
constexpr double kTol = 2e-5;  // fp32 accumulation vs double


struct Shape {
  int64_t rows, cols;
};
// Whether type t takes rows of this width (K-quants: whole 256-element super-blocks). Every test
// below has K-quant shapes too.
bool fits(DType t, int64_t cols) { return !kquant(t) || cols % 256 == 0; }

void check_store(DType t, Shape s, Prologue pro, uint32_t seed) {
  if (!fits(t, s.cols)) return;
  std::mt19937 rng(seed);
  auto wq = random_rows(t, s.rows, s.cols, rng);
  auto W = dequant(t, wq, s.rows, s.cols);
  auto hp = repack_rows(t, wq.data(), s.rows, s.cols);
  DeviceWeight dw = upload_weight(hp);
  auto in = randn(s.cols, rng), res = randn(s.cols, rng), gamma = randn(s.cols, rng, 0.5f);
  std::vector<double> x = to_d(in), h = x;
  if (pro == Prologue::AddNorm)
    for (int64_t i = 0; i < s.cols; ++i) h[i] = double(in[i] + res[i]);  // fp32 add, as the kernel
  if (pro != Prologue::None) x = rmsnorm_ref(h, gamma, 1e-6);
  auto ref = matvec(W, x, s.rows, s.cols);  // exact fp reference
  auto kref = gemv_kernel_ref(t, W, s.rows, s.cols, in, pro == Prologue::AddNorm ? &res : nullptr,
                         pro != Prologue::None ? &gamma : nullptr);
  DevBuf<float> d_in(in), d_res(res), d_gamma(gamma), d_rout(s.cols), d_y(s.rows);
  GemvArgs a = prologue_args(dw, d_in.p(), d_res.p(), d_rout.p(), d_gamma.p(), d_y.p());
  gemv(pro, Epilogue::Store, a);
  auto y = d_y.get();
  EXPECT_TRUE(all_finite(y)) << dtype_name(t) << " " << s.rows << "x" << s.cols << " unwritten output";
  EXPECT_TRUE(d_y.guards_intact()) << dtype_name(t) << " " << s.rows << "x" << s.cols;
  EXPECT_LE(rel_l2(y, kref), kTol) << dtype_name(t) << " " << s.rows << "x" << s.cols << " pro " << int(pro);
  EXPECT_LE(rel_l2(y, ref), act_quantized(t) ? kActQuantTol : kTol)
      << "vs exact: " << dtype_name(t) << " " << s.rows << "x" << s.cols << " pro " << int(pro);
  if (pro == Prologue::AddNorm) {
    auto ro = d_rout.get();
    bool exact = true;
    for (int64_t i = 0; i < s.cols; ++i) exact &= ro[i] == in[i] + res[i];
    EXPECT_TRUE(exact) << "residual_out != in + residual";
    EXPECT_TRUE(d_rout.guards_intact());
  }
  free_weight(dw);
}

// y += W x in place: the residual epilogue reading and writing one buffer.
void gemv_residual_in_place(const DeviceWeight& dw, const float* in, float* y) {
  GemvArgs a = prologue_args(dw, in, nullptr, nullptr, nullptr, y);
  a.y_residual = y;
  gemv(Prologue::None, Epilogue::Residual, a);
}

}  // namespace

TEST(CudaGemv, StoreAllTypesOddShapes) {
  const Shape shapes[] = {{32, 64}, {33, 96}, {100, 1056}, {256, 1024}, {1024, 3072}, {1002, 1024}};
  uint32_t seed = 1;
  for (DType t : kTypes)
    for (Shape s : shapes) check_store(t, s, Prologue::None, seed++);
}

TEST(CudaGemv, StoreRealShapes) {
  // {9728, 2560} (4B gate or up) and {9000, 2112} (three column groups, the last of 2 blocks): more
  // row groups than warps and an odd number of column groups (a half-empty last batch per row group).
  const Shape shapes[] = {{4096, 1024}, {1024, 2048}, {6144, 4096}, {2048, 5120}, {12288, 1024}, {4100, 12288},
                          {9728, 2560}, {9000, 2112}};
  uint32_t seed = 100;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::BF16, DType::Q4_K, DType::Q6_K})
    for (Shape s : shapes) check_store(t, s, Prologue::None, seed++);
}

TEST(CudaGemv, NormPrologues) {
  uint32_t seed = 200;
  for (DType t : kTypes)
    for (Prologue p : {Prologue::Norm, Prologue::AddNorm})
      for (Shape s : {Shape{64, 96}, Shape{1024, 1024}, Shape{2048, 4096}}) check_store(t, s, p, seed++);
}

TEST(CudaGemv, ResidualEpilogueInPlace) {
  uint32_t seed = 300;
  for (DType t : kTypes)
    for (Shape s : {Shape{32, 64}, Shape{1024, 2048}, Shape{4096, 12288}}) {
      if (!fits(t, s.cols)) continue;
      std::mt19937 rng(seed++);
      auto wq = random_rows(t, s.rows, s.cols, rng);
      auto W = dequant(t, wq, s.rows, s.cols);
      DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), s.rows, s.cols));
      auto in = randn(s.cols, rng), yres = randn(s.rows, rng);
      auto ref = matvec(W, to_d(in), s.rows, s.cols);
      auto kref = gemv_kernel_ref(t, W, s.rows, s.cols, in, nullptr, nullptr);
      for (int64_t r = 0; r < s.rows; ++r) ref[r] += yres[r], kref[r] += yres[r];
      DevBuf<float> d_in(in), d_y(yres);
      gemv_residual_in_place(dw, d_in.p(), d_y.p());
      auto y = d_y.get();
      EXPECT_LE(rel_l2(y, kref), kTol) << dtype_name(t) << " " << s.rows << "x" << s.cols;
      EXPECT_LE(rel_l2(y, ref), act_quantized(t) ? kActQuantTol : kTol) << "vs exact " << dtype_name(t);
      EXPECT_TRUE(d_y.guards_intact());
      free_weight(dw);
    }
}

// Three warps per row group (set_gemv_split3: wide blocks, deep shapes where two warps would
// leave a batch after the PDL wait; 4B down and an odd shape of the same kind): the residual
// epilogue in place against the int8-x reference, every row written, the guards intact, for the
// integer-dot types (Q8_0's one-group batches keep two warps), and within the reference's tolerance
// of the two-warp form (a different summation order, not the same bits).
TEST(CudaGemv, SplitThreeWarpsPerRowGroup) {
  const SwitchRestore split3{set_gemv_split3, gemv_split3()}, wide{set_gemv_wide, gemv_wide()};
  set_gemv_wide(true);
  uint32_t seed = 350;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K})
    for (Shape s : {Shape{2560, 9728}, Shape{2502, 9664}}) {
      if (!fits(t, s.cols)) continue;
      std::mt19937 rng(seed++);
      auto wq = random_rows(t, s.rows, s.cols, rng);
      auto W = dequant(t, wq, s.rows, s.cols);
      DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), s.rows, s.cols));
      auto in = randn(s.cols, rng), yres = randn(s.rows, rng);
      auto kref = gemv_kernel_ref(t, W, s.rows, s.cols, in, nullptr, nullptr);
      for (int64_t r = 0; r < s.rows; ++r) kref[r] += yres[r];
      std::vector<float> y[2];
      for (int three = 0; three < 2; ++three) {
        set_gemv_split3(three == 1);
        DevBuf<float> d_in(in), d_y(yres);
        gemv_residual_in_place(dw, d_in.p(), d_y.p());
        y[three] = d_y.get();
        EXPECT_TRUE(all_finite(y[three]) && d_y.guards_intact()) << dtype_name(t) << " " << s.rows << "x" << s.cols;
        EXPECT_LE(rel_l2(y[three], kref), kTol) << dtype_name(t) << " " << s.rows << "x" << s.cols << " three " << three;
      }
      EXPECT_LE(rel_l2(y[1], y[0]), kTol) << dtype_name(t) << " " << s.rows << "x" << s.cols;
      free_weight(dw);
    }
}

TEST(CudaGemv, SiluMulGateUpFusedVsUnfused) {
  uint32_t seed = 400;
  for (DType t : kTypes)
    for (Shape s : {Shape{64, 64}, Shape{3072, 1024}, Shape{12288, 4096}, Shape{9728, 2560}}) {
      if (!fits(t, s.cols)) continue;
      std::mt19937 rng(seed++);
      auto gq = random_rows(t, s.rows, s.cols, rng), uq = random_rows(t, s.rows, s.cols, rng);
      auto G = dequant(t, gq, s.rows, s.cols), U = dequant(t, uq, s.rows, s.cols);
      auto in = randn(s.cols, rng), gamma = randn(s.cols, rng, 0.5f);
      auto x = rmsnorm_ref(to_d(in), gamma, 1e-6);
      auto silu_mul_ref = [&](const std::vector<double>& g, const std::vector<double>& u) {
        std::vector<double> r(s.rows);
        for (int64_t i = 0; i < s.rows; ++i) r[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        return r;
      };
      auto ref = silu_mul_ref(matvec(G, x, s.rows, s.cols), matvec(U, x, s.rows, s.cols));
      auto kref = silu_mul_ref(gemv_kernel_ref(t, G, s.rows, s.cols, in, nullptr, &gamma),
                               gemv_kernel_ref(t, U, s.rows, s.cols, in, nullptr, &gamma));
      DeviceWeight gu = upload_weight(repack_gate_up(t, gq.data(), uq.data(), s.rows, s.cols));
      DeviceWeight dg = upload_weight(repack_rows(t, gq.data(), s.rows, s.cols));
      DeviceWeight du = upload_weight(repack_rows(t, uq.data(), s.rows, s.cols));
      DevBuf<float> d_in(in), d_gamma(gamma), d_y(s.rows), d_xn(s.cols), d_g(s.rows), d_u(s.rows), d_y2(s.rows);
      GemvArgs a;
      a.w = &gu;
      a.in = d_in.p();
      a.gamma = d_gamma.p();
      a.y = d_y.p();
      gemv(Prologue::Norm, Epilogue::SiluMul, a);
      // Unfused: rmsnorm -> two GEMVs -> silu_mul.
      rmsnorm_rows(d_in.p(), d_gamma.p(), d_xn.p(), 1, int(s.cols), 1e-6f);
      GemvArgs b;
      b.in = d_xn.p();
      b.w = &dg;
      b.y = d_g.p();
      gemv(Prologue::None, Epilogue::Store, b);
      b.w = &du;
      b.y = d_u.p();
      gemv(Prologue::None, Epilogue::Store, b);
      silu_mul(d_g.p(), d_u.p(), d_y2.p(), s.rows);
      auto y = d_y.get(), y2 = d_y2.get();
      EXPECT_TRUE(all_finite(y) && d_y.guards_intact()) << dtype_name(t);
      EXPECT_LE(rel_l2(y, kref), 1e-5) << dtype_name(t) << " " << s.rows << "x" << s.cols;
      // The fused Norm prologue computes the normalized vector bit-identically to rmsnorm_rows
      // and quantizes it the same way, so fused and unfused differ only by the SiLU-mul pairing.
      if (act_quantized(t)) {
        auto kref2 = silu_mul_ref(gemv_kernel_ref(t, G, s.rows, s.cols, d_xn.get(), nullptr, nullptr),
                                  gemv_kernel_ref(t, U, s.rows, s.cols, d_xn.get(), nullptr, nullptr));
        EXPECT_LE(rel_l2(y2, kref2), 1e-5) << "unfused " << dtype_name(t);
        EXPECT_LE(rel_l2(y, ref), 2 * kActQuantTol) << "vs exact " << dtype_name(t);
      } else {
        EXPECT_LE(rel_l2(y2, ref), 1e-5) << "unfused " << dtype_name(t);
      }
      EXPECT_LE(rel_l2(y, y2), 1e-5) << "fused vs unfused " << dtype_name(t);
      free_weight(gu);
      free_weight(dg);
      free_weight(du);
    }
}

// Fused Norm/AddNorm prologue vs the unfused chain (add) -> rmsnorm_rows -> GEMV(None): the
// outputs must be bitwise identical for every weight type (same sum of squares order, same
// scale, same int8 codes, same dot order), including shapes that use split-K (wide cols), and with
// the fused and unfused GEMVs in different block widths (set_gemv_wide: 16 vs 8 warps).
TEST(CudaGemv, NormPrologueBitwiseEqualsUnfused) {
  uint32_t seed = 700;
  for (bool wide : {false, true})
  for (Tri split_k : {Tri::Off, Tri::On})
  for (DType t : kTypes)
    for (Prologue pro : {Prologue::Norm, Prologue::AddNorm})
      for (Shape s : {Shape{96, 64}, Shape{1024, 1024}, Shape{1024, 3072}, Shape{4096, 4096},
                      Shape{1536, 12288}}) {
        if (!fits(t, s.cols)) continue;
        std::mt19937 rng(seed++);
        set_gemv_split_k(split_k);
        auto wq = random_rows(t, s.rows, s.cols, rng);
        DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), s.rows, s.cols));
        auto in = randn(s.cols, rng), res = randn(s.cols, rng), gamma = randn(s.cols, rng, 0.5f);
        DevBuf<float> d_in(in), d_res(res), d_gamma(gamma), d_rout(s.cols), d_h(s.cols), d_xn(s.cols),
            d_y(s.rows), d_y2(s.rows);
        GemvArgs a = prologue_args(dw, d_in.p(), d_res.p(), d_rout.p(), d_gamma.p(), d_y.p());
        a.spare_sms = wide ? 3 : 1;  // a smaller grid (qkv_post_room) changes no bit
        set_gemv_wide(wide);
        gemv(pro, Epilogue::Store, a);
        set_gemv_wide(!wide);
        const float* h = d_in.p();
        if (pro == Prologue::AddNorm) {
          add(d_in.p(), d_res.p(), d_h.p(), s.cols);
          h = d_h.p();
        }
        rmsnorm_rows(h, d_gamma.p(), d_xn.p(), 1, int(s.cols), 1e-6f);
        GemvArgs b;
        b.w = &dw;
        b.in = d_xn.p();
        b.y = d_y2.p();
        gemv(Prologue::None, Epilogue::Store, b);
        auto y = d_y.get(), y2 = d_y2.get();
        int64_t diff = 0;
        for (int64_t i = 0; i < s.rows; ++i) diff += std::memcmp(&y[i], &y2[i], sizeof(float)) != 0;
        EXPECT_TRUE(all_finite(y)) << dtype_name(t);
        EXPECT_EQ(diff, int64_t(0)) << dtype_name(t) << " pro " << int(pro) << " " << s.rows << "x" << s.cols
                                    << " split_k " << int(split_k) << " wide " << wide << " rel_l2 " << rel_l2(y, y2);
        free_weight(dw);
      }
  set_gemv_split_k(Tri::Auto);
  set_gemv_wide(false);
}

// Down's x quantized once, by the gate/up GEMV (SiluMulQ -> Int8 prologue), against down
// quantizing gate/up's output itself (SiluMul -> None): the same h and the same down output, bit
// for bit, in both block widths. Three rounds with different grids (each block quantizes the code
// blocks of y it made, so the grid decides who makes which). xq starts poisoned (unwritten codes
// would show) and its guard zones must stay intact.
TEST(CudaGemv, GateUpQuantizedOutputFeedsDownBitwise) {
  uint32_t seed = 900;
  EXPECT_TRUE(!gemv_supported(DType::F16, Prologue::Int8, Epilogue::Residual));
  EXPECT_TRUE(!gemv_supported(DType::BF16, Prologue::None, Epilogue::SiluMulQ));
  for (bool wide : {false, true})
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
      for (Shape s : {Shape{64, 96}, Shape{3072, 1024}, Shape{12288, 4096}}) {  // {ffn, hidden}
        if (!fits(t, s.cols) || !fits(t, s.rows)) continue;
        std::mt19937 rng(seed++);
        set_gemv_wide(wide);
        auto gq = random_rows(t, s.rows, s.cols, rng), uq = random_rows(t, s.rows, s.cols, rng);
        auto dq = random_rows(t, s.cols, s.rows, rng);  // down: [hidden][ffn]
        DeviceWeight gu = upload_weight(repack_gate_up(t, gq.data(), uq.data(), s.rows, s.cols));
        DeviceWeight dw = upload_weight(repack_rows(t, dq.data(), s.cols, s.rows));
        auto in = randn(s.cols, rng), gamma = randn(s.cols, rng, 0.5f), res = randn(s.cols, rng);
        DevBuf<float> d_in(in), d_gamma(gamma), d_res(res), d_h(s.rows), d_h2(s.rows), d_y(s.cols), d_y2(s.cols);
        DevBuf<uint8_t> d_xq(gemv_xq_bytes(s.rows));
        for (int round = 0; round < 3; ++round) {
          GemvArgs a;
          a.w = &gu;
          a.in = d_in.p();
          a.gamma = d_gamma.p();
          a.y = d_h.p();
          a.xq = d_xq.p();
          // Rounds 1-2: smaller grids (gateup_room's ceiling lowered to keep the rounds, o_room's
          // spare SMs; round 2 with the blocks per SM forced, down's on a quarter of the SMs)
          // change no bit.
          a.spare_sms = round ? device_sm_count() / 2 : 0;
          a.spare_same_rounds = round >= 1;
          a.coresident = round == 2 ? Tri::On : Tri::Auto;
          const int free_sms = gemv(Prologue::Norm, Epilogue::SiluMulQ, a);
          EXPECT_TRUE(free_sms >= 0 && free_sms <= a.spare_sms) << free_sms;
          GemvArgs b;
          b.w = &dw;
          b.xq = d_xq.p();
          b.y_residual = d_res.p();
          b.y = d_y.p();
          b.spare_sms = round == 2 ? device_sm_count() * 3 / 4 : round ? device_sm_count() / 4 : 0;
          b.coresident = round == 2 ? Tri::Off : Tri::Auto;
          b.fit_sms = round == 1 ? device_sm_count() / 2 : 0;  // down_fit: where the shape allows
          const int down_free = gemv(Prologue::Int8, Epilogue::Residual, b);
          EXPECT_TRUE(down_free == b.spare_sms || (b.fit_sms > 0 && down_free >= device_sm_count() - b.fit_sms))
              << down_free;
          a.spare_sms = 0;
          a.spare_same_rounds = false;
          a.coresident = Tri::Auto;
          b.spare_sms = 0;  // the reference pass on the full grids
          b.coresident = Tri::Auto;
          b.fit_sms = 0;
          a.xq = nullptr;
          a.y = d_h2.p();
          gemv(Prologue::Norm, Epilogue::SiluMul, a);
          b.xq = nullptr;
          b.in = d_h2.p();
          b.y = d_y2.p();
          gemv(Prologue::None, Epilogue::Residual, b);
          auto h = d_h.get(), h2 = d_h2.get(), y = d_y.get(), y2 = d_y2.get();
          int64_t dh = 0, dy = 0;
          for (int64_t i = 0; i < s.rows; ++i) dh += std::memcmp(&h[i], &h2[i], sizeof(float)) != 0;
          for (int64_t i = 0; i < s.cols; ++i) dy += std::memcmp(&y[i], &y2[i], sizeof(float)) != 0;
          EXPECT_TRUE(all_finite(y) && all_finite(h)) << dtype_name(t);
          EXPECT_EQ(dh, int64_t(0)) << dtype_name(t) << " ffn " << s.rows << " wide " << wide;
          EXPECT_EQ(dy, int64_t(0)) << dtype_name(t) << " ffn " << s.rows << " hidden " << s.cols << " wide " << wide
                                    << " round " << round << " rel_l2 " << rel_l2(y, y2);
          EXPECT_TRUE(d_xq.guards_intact() && d_y.guards_intact() && d_h.guards_intact()) << dtype_name(t);
        }
        free_weight(gu);
        free_weight(dw);
      }
  set_gemv_wide(false);
}

TEST(CudaGemv, BadArgumentsFail) {
  std::mt19937 rng(5);
  auto wq = random_rows(DType::Q4_0, 32, 64, rng);
  DeviceWeight dw = upload_weight(repack_rows(DType::Q4_0, wq.data(), 32, 64));
  DevBuf<float> x(64), y(32);
  GemvArgs a;
  a.w = &dw;
  a.in = x.p();
  a.y = y.p();
  a.residual = x.p();
  a.gamma = x.p();
  a.residual_out = x.p();  // aliases `in`: must be refused
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::AddNorm, Epilogue::Store, a); })) << "aliasing residual_out accepted";
  a.residual_out = y.p();
  a.in = x.p() + 1;  // 4-byte aligned: the staging reads float4
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::None, Epilogue::Store, a); })) << "misaligned input accepted";
  EXPECT_TRUE(throws_error([&] { repack_rows(DType::Q4_0, wq.data(), 1, 48); })) << "cols % 32 != 0 accepted";
  a.in = x.p();
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::None, Epilogue::SiluMulQ, a); })) << "SiluMulQ without xq accepted";
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::Int8, Epilogue::Residual, a); })) << "Int8 prologue without xq accepted";
  DevBuf<uint8_t> xq(gemv_xq_bytes(64));
  a.xq = xq.p();
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::None, Epilogue::SiluMulQ, a); }))
      << "SiluMulQ over rows/2 = 16 (not whole 32-blocks) accepted";
  a.xq = nullptr;
  a.spare_sms = -1;
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::None, Epilogue::Store, a); })) << "negative spare_sms accepted";
  a.spare_sms = device_sm_count();
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::None, Epilogue::Store, a); })) << "spare_sms of every SM accepted";
  free_weight(dw);
}

// The kept Norm staging (set_gemv_keep_x; wide blocks up to hidden size 4096, narrow ones up to
// 2048): h and gamma loaded once and kept in registers give the two-pass staging's output bit for
// bit, for the Store and SiluMul epilogues, both block widths, odd and real hidden sizes; outside
// those sizes the switch leaves the compact or two-pass form in place (the same bits trivially,
// and no failure).
TEST(CudaGemv, KeptNormStagingGivesTheTwoPassBits) {
  const SwitchRestore keep{set_gemv_keep_x, gemv_keep_x()};
  uint32_t seed = 900;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K})
    for (int64_t cols : {int64_t(96), int64_t(1056), int64_t(1984), int64_t(2048), int64_t(2560), int64_t(4096), int64_t(5120)})
      for (Epilogue epi : {Epilogue::Store, Epilogue::SiluMul})
      for (lmf::Tri wide : {lmf::Tri::On, lmf::Tri::Off}) {
        if (!fits(t, cols)) continue;
        std::mt19937 rng(seed++);
        const int64_t rows = 512;
        auto wq = random_rows(t, rows, cols, rng);
        DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), rows, cols));
        auto in = randn(cols, rng), gamma = randn(cols, rng, 0.5f);
        DevBuf<float> d_in(in), d_gamma(gamma);
        const int64_t n_out = epi == Epilogue::SiluMul ? rows / 2 : rows;
        std::vector<float> y[2];
        for (int keep = 0; keep < 2; ++keep) {
          set_gemv_keep_x(keep == 1);
          DevBuf<float> d_y(n_out);
          GemvArgs a = prologue_args(dw, d_in.p(), nullptr, nullptr, d_gamma.p(), d_y.p());
          a.wide = wide;
          gemv(Prologue::Norm, epi, a);
          y[keep] = d_y.get();
          EXPECT_TRUE(all_finite(y[keep]) && d_y.guards_intact())
              << dtype_name(t) << " cols " << cols << " epi " << int(epi) << " wide " << int(wide) << " keep " << keep;
        }
        EXPECT_TRUE(y[0] == y[1]) << dtype_name(t) << " cols " << cols << " epi " << int(epi) << " wide "
                                  << int(wide) << ": kept != two-pass";
        free_weight(dw);
      }
}

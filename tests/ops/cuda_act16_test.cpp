// 16-bit activation codes in the integer-dot decode GEMVs (cuda::set_gemv_act16, knob
// cuda_act16): x quantized per block of 32 by the CPU backend's ActBlock16 rule (q = rne(x *
// 32767/amax)) and multiplied as two byte planes (gemv.cuh, int8_dot.cuh dot_q4_i16). Checked
// against a double reference with the same 16-bit codes (tight), against the exact float result
// (the codes' error must be far below the int8 codes' on the same data), on every prologue,
// epilogue and block width; then whole golden models on the CUDA backend against the CPU
// backend's default (16-bit) path, decode steps and prefill, with the int8 path as the control.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_test.h"
#include "cuda_test_util.h"
#include "model/model.h"
#include "runtime/session.h"

using namespace lmfct_cuda;
using namespace lmf::cuda;

namespace {

constexpr double kTol = 2e-5;         // fp32 accumulation vs double, the same codes
constexpr double kAct16Tol = 3e-4;    // 16-bit codes vs the exact float product
constexpr double kGainOverInt8 = 30;  // int8 codes' error / 16-bit codes' error, at least

struct Shape {
  int64_t rows, cols;
};

// RAII: the process-wide switches the backend sets per launch sequence, back to their defaults
// however the scope ends.
struct CodesScope {
  CodesScope(bool x16, bool wide) {
    set_gemv_act16(x16);
    set_gemv_wide(wide);
  }
  ~CodesScope() {
    set_gemv_act16(false);
    set_gemv_wide(false);
  }
};

// y of one GEMV launch (Store, or Residual in place over yres) with the given codes.
std::vector<float> run(const DeviceWeight& dw, Prologue pro, Epilogue epi, const std::vector<float>& in,
                       const std::vector<float>& res, const std::vector<float>& gamma, const std::vector<float>& yres,
                       bool x16, bool wide, bool* guards) {
  DevBuf<float> d_in(in), d_res(res), d_gamma(gamma), d_rout(in.size()), d_y(yres);
  GemvArgs a = prologue_args(dw, d_in.p(), d_res.p(), d_rout.p(), d_gamma.p(), d_y.p());
  if (epi == Epilogue::Residual) a.y_residual = d_y.p();
  {
    const CodesScope codes(x16, wide);
    gemv(pro, epi, a);
  }
  *guards = d_y.guards_intact() && d_rout.guards_intact();
  return d_y.get();
}

void check(DType t, Shape s, Prologue pro, Epilogue epi, bool wide, uint32_t seed) {
  std::mt19937 rng(seed);
  auto wq = random_rows(t, s.rows, s.cols, rng);
  auto W = dequant(t, wq, s.rows, s.cols);
  DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), s.rows, s.cols));
  auto in = randn(s.cols, rng), res = randn(s.cols, rng), gamma = randn(s.cols, rng, 0.5f);
  // Poisoned start for Store (every element must be written); the residual for Residual.
  std::vector<float> yres = epi == Epilogue::Residual ? randn(s.rows, rng) : std::vector<float>(s.rows, NAN);
  std::vector<double> h = to_d(in);
  if (pro == Prologue::AddNorm)
    for (int64_t i = 0; i < s.cols; ++i) h[i] = double(in[i] + res[i]);
  const std::vector<double> x = pro == Prologue::None ? h : rmsnorm_ref(h, gamma, 1e-6);
  auto exact = matvec(W, x, s.rows, s.cols);
  auto kref = gemv_kernel_ref(t, W, s.rows, s.cols, in, pro == Prologue::AddNorm ? &res : nullptr,
                              pro != Prologue::None ? &gamma : nullptr, 32767.f);
  if (epi == Epilogue::Residual)
    for (int64_t r = 0; r < s.rows; ++r) exact[r] += yres[r], kref[r] += yres[r];
  bool g16 = false, g8 = false;
  const auto y16 = run(dw, pro, epi, in, res, gamma, yres, true, wide, &g16);
  const auto y8 = run(dw, pro, epi, in, res, gamma, yres, false, wide, &g8);
  const std::string what = std::string(dtype_name(t)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                           " pro " + std::to_string(int(pro)) + " epi " + std::to_string(int(epi)) +
                           (wide ? " wide" : " narrow");
  EXPECT_TRUE(all_finite(y16)) << what << ": unwritten output";
  EXPECT_TRUE(g16 && g8) << what << ": guard zone written";
  EXPECT_LE(rel_l2(y16, kref), kTol) << what << ": vs the same 16-bit codes";
  const double e16 = rel_l2(y16, exact), e8 = rel_l2(y8, exact);
  EXPECT_LE(e16, kAct16Tol) << what << ": vs exact";
  EXPECT_GE(e8, kGainOverInt8 * e16) << what << ": int8 " << e8 << " vs 16-bit " << e16;
  free_weight(dw);
}

}  // namespace

TEST(CudaGemvAct16, StoreAndResidualEveryPrologueAndWidth) {
  // 1024 columns: the compact staging (narrow, one float4 per thread); 2560 / 4096 / 12288: the
  // batched staging, split-K on the deep shape; odd shapes with partial row groups and columns.
  const Shape shapes[] = {{33, 96}, {1002, 1024}, {2560, 2560}, {6144, 4096}, {2560, 9728}, {4100, 12288}};
  uint32_t seed = 1600;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (Shape s : shapes)
      for (bool wide : {false, true}) {
        if (kquant(t) && s.cols % 256 != 0) continue;  // K-quants: whole super-blocks
        for (Prologue p : {Prologue::None, Prologue::Norm, Prologue::AddNorm}) check(t, s, p, Epilogue::Store, wide, seed++);
        check(t, s, Prologue::None, Epilogue::Residual, wide, seed++);
      }
}

TEST(CudaGemvAct16, RefusesEightBitProducerCodes) {
  std::mt19937 rng(1700);
  const DType t = DType::Q4_0;
  auto wq = random_rows(t, 64, 64, rng);
  DeviceWeight dw = upload_weight(repack_rows(t, wq.data(), 64, 64));
  DevBuf<uint8_t> xq(gemv_xq_bytes(64));
  DevBuf<float> y(64);
  GemvArgs a;
  a.w = &dw;
  a.xq = xq.p();
  a.y = y.p();
  a.y_residual = y.p();
  set_gemv_act16(true);
  EXPECT_TRUE(throws_error([&] { gemv(Prologue::Int8, Epilogue::Residual, a); }, "cuda_act16"));
  set_gemv_act16(false);
  free_weight(dw);
}

namespace {

const std::string kGolden = cuda_test_golden_dir();

std::unique_ptr<lmf::Backend> backend(const lmf::Model& m, const char* kind, lmf::Tri act16,
                                      lmf::Tri inkernel = lmf::Tri::Auto) {
  lmf::BackendOptions bo;
  bo.n_ctx = 64;
  bo.knobs.cuda_act16 = act16;
  bo.knobs.prefill_inkernel_dequant = inkernel;
  auto be = lmf::make_backend(kind, bo);
  be->load(m);
  return be;
}

// Logits of every position: one decode step per token (decode) or the prompt as one prefill.
std::vector<float> logits(lmf::Backend& be, const lmf::Model& m, const std::vector<int32_t>& toks, bool decode) {
  lmf::Session s(m, be);
  if (!decode) return s.eval(toks, true);
  std::vector<float> all;
  for (int32_t t : toks) {
    const auto& l = s.eval(std::span(&t, 1));
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

// rel_l2 (cuda_test_util.h) of two runs' logits; a length mismatch counts as a failure.
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !b.empty() ? rel_l2(a, b) : 1e9;
}

}  // namespace

TEST(CudaAct16, GoldenModelsMatchTheCpuReference) {
  const std::vector<int32_t> toks = {1, 5, 9, 12, 3, 4, 17, 2, 30, 8, 11, 6};
  for (const char* name : {"qwen3-tiny-q4_0", "qwen2-tiny-q4_1", "llama-tiny-q8_0", "llama31-tiny-q4_0"}) {
    auto m = lmf::Model::load(kGolden + name + ".gguf");
    auto cpu = backend(*m, "cpu", lmf::Tri::Auto);  // the CPU's default: 16-bit codes
    auto c16 = backend(*m, "cuda", lmf::Tri::On);
    auto c8 = backend(*m, "cuda", lmf::Tri::Off);
    auto ik = backend(*m, "cuda", lmf::Tri::On, lmf::Tri::On);  // a forced in-kernel route stays 16-bit
    const auto ref_dec = logits(*cpu, *m, toks, true), ref_pre = logits(*cpu, *m, toks, false);
    const double d16 = rel(logits(*c16, *m, toks, true), ref_dec), d8 = rel(logits(*c8, *m, toks, true), ref_dec);
    const double p16 = rel(logits(*c16, *m, toks, false), ref_pre), pik = rel(logits(*ik, *m, toks, false), ref_pre);
    const double p8 = rel(logits(*c8, *m, toks, false), ref_pre);
    // Decode: the CPU's own codes and integer dots; the fp32 order of blocks differs (~1e-7 in
    // every activation), and a 16-bit code flips on such a difference ~256x as often as an 8-bit
    // one (its rounding boundaries are 256x denser), each flip moving its element by 1/32767 of
    // the block's largest: measured 3-7e-5 over these 12 steps (docs/PERF.md S40-1), the level at
    // which the F16/BF16 golden models' CUDA and CPU logits agree (5e-6 to 5e-5). 1e-4 bounds it;
    // a wrong code rule or scale is 1e-3 or more (the GEMV test above pins the codes exactly).
    EXPECT_LE(d16, 1e-4) << name << " decode, 16-bit codes vs CPU";
    EXPECT_GE(d8, 100 * d16) << name << " decode, int8 " << d8 << " vs 16-bit " << d16;
    // Prefill: fp16 activations (outer route) against the CPU's 16-bit codes.
    EXPECT_LE(p16, 1e-3) << name << " prefill vs CPU";
    EXPECT_LE(pik, 1e-3) << name << " prefill, in-kernel forced, vs CPU";
    EXPECT_GE(p8, 3 * p16) << name << " prefill, int8 " << p8 << " vs 16-bit " << p16;
  }
}

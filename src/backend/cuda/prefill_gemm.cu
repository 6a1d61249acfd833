// The outer-dequant matrix product of prefill: weight rows unpacked to fp16 into the scratch,
// activations converted to fp16, cuBLAS GEMM (fp16 inputs, fp32 accumulate, fp32 output).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {

// cuBLAS for the plain products; cuBLASLt for the residual ones (D = X W^T + C with C != D, which
// cublasGemmEx cannot express: it needed a copy of the residual into y first, a full extra pass
// over T x n floats per o_proj / down at prefill).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
struct GemmHandle {
  cublasHandle_t h = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudaStream_t s = nullptr;
  void* ws = nullptr;  // cuBLASLt workspace
  size_t ws_bytes = size_t(32) << 20;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, LtPlan> plans;  // (T, N, K, ldy)
};

namespace {
#define CUBLAS_CHECK(stmt)                                                               \
  do {                                                                                   \
    cublasStatus_t st_ = (stmt);                                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      LMF_FAIL("cuBLAS error: ", #stmt, " (", __FILE__, ":", __LINE__, "): status ", int(st_), \
               " ", cublasGetStatusString(st_));                                         \
  } while (0)
}  // namespace

GemmHandle* gemm_create(cudaStream_t s) {
  auto* g = new GemmHandle;
  if (cublasCreate(&g->h) != CUBLAS_STATUS_SUCCESS) {
    delete g;
    LMF_FAIL("cuBLAS: cublasCreate failed (out of GPU memory or no device)");
  }
  CUBLAS_CHECK(cublasSetStream(g->h, s));
  g->s = s;
  if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&g->ws, g->ws_bytes) != cudaSuccess) {
    const size_t mib = g->ws_bytes >> 20;
    gemm_destroy(g);
    LMF_FAIL("cuBLASLt: handle or ", mib, " MiB workspace could not be created (out of GPU memory?)");
  }
  return g;
}

void gemm_destroy(GemmHandle* g) {
  if (!g) return;
  for (auto& [k, p] : g->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  if (g->ws) cudaFree(g->ws);
  if (g->lt) cublasLtDestroy(g->lt);
  if (g->h) cublasDestroy(g->h);
  delete g;
}

double gemm_bf16_peak_flops(GemmHandle* g, cudaStream_t s) {
  const int n = 8192;
  const size_t bytes = size_t(n) * n * 2;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMalloc(&c, bytes));
  CUDA_CHECK(cudaMemsetAsync(a, 0, bytes, s));
  CUDA_CHECK(cudaMemsetAsync(b, 0, bytes, s));
  const float one = 1.f, zero = 0.f;
  auto run = [&] {
    CUBLAS_CHECK(cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                              &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int i = 0; i < 2; ++i) run();
  const double ms = gpu_median_ms(s, 10, run);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * double(n) * n / (ms * 1e-3);
}

void gemm_f16(GemmHandle* g, const uint16_t* x, const uint16_t* w, float* y, int64_t T, int64_t N, int64_t K,
              int64_t ldy) {
  if (T <= 0 || N <= 0 || K <= 0 || ldy < N || T > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    LMF_FAIL("cuda gemm_f16: bad shape T ", T, " N ", N, " K ", K, " ldy ", ldy);
  // Row-major y[T][ldy] is column-major N x T (ld ldy): y = op(W) * X with W stored column-major
  // K x N (ld K, transposed) and X column-major K x T (ld K).
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, w, CUDA_R_16F, int(K), x,
                            CUDA_R_16F, int(K), &zero, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void gemm_f16_c(GemmHandle* g, const uint16_t* x, const uint16_t* w, const float* c, float* y, int64_t T, int64_t N,
                int64_t K, int64_t ldy) {
  if (T <= 0 || N <= 0 || K <= 0 || ldy < N || T > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    LMF_FAIL("cuda gemm_f16_c: bad shape T ", T, " N ", N, " K ", K, " ldy ", ldy);
  // Column-major view as in gemm_f16: D (N x T, ld ldy) = W^T (W stored K x N, ld K) * X (K x T,
  // ld K) + C (N x T, ld ldy).
  const auto key = std::make_tuple(T, N, K, ldy);
  auto it = g->plans.find(key);
  if (it == g->plans.end()) {
    LtPlan p;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, uint64_t(K), uint64_t(N), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, uint64_t(K), uint64_t(T), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, uint64_t(N), uint64_t(T), ldy));
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes,
                                                      sizeof g->ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.op);
      LMF_FAIL("cuBLASLt: no algorithm for the fp16 GEMM T ", T, " N ", N, " K ", K, " (status ", int(st), ")");
    }
    p.algo = res.algo;
    it = g->plans.emplace(key, p).first;
  }
  const LtPlan& p = it->second;
  const float one = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(g->lt, p.op, &one, w, p.a, x, p.b, &one, c, p.c, y, p.c, &p.algo, g->ws, g->ws_bytes,
                              g->s));
}

const char* route_name(PrefillRoute r) {
  return r == PrefillRoute::InKernel ? "in-kernel" : r == PrefillRoute::Gemv ? "gemv" : "outer";
}

namespace {

// The route that takes this product: the requested one if it can, else in-kernel, else outer.
PrefillRoute usable_route(const PrefillMatmul& m, int64_t n, PrefillRoute want) {
  const DeviceWeight& w = *m.w;
  // The in-kernel route multiplies int8 codes: not with the GEMVs' 16-bit codes (cuda_act16).
  const bool ik = mmq_supported(w.type) && !gemv_act16();
  if (want == PrefillRoute::Gemv && m.r0 == 0 && m.step == 1 && n == w.rows &&
      gemv_supported(w.type, Prologue::None, m.silu_pairs ? Epilogue::SiluMul : m.residual ? Epilogue::Residual
                                                                                           : Epilogue::Store) &&
      !(m.bias && (m.residual || m.silu_pairs)))
    return PrefillRoute::Gemv;
  if (want != PrefillRoute::Outer && ik) return PrefillRoute::InKernel;
  return PrefillRoute::Outer;
}

}  // namespace

PrefillRoute prefill_usable_route(const PrefillMatmul& m, PrefillRoute want) {
  return usable_route(m, m.n > 0 ? m.n : m.w->rows, want);
}

void matmul_prefill(GemmHandle* g, const PrefillMatmul& m, const PrefillScratch& sc, PrefillRoute route,
                    cudaStream_t s) {
  const DeviceWeight& w = *m.w;
  const int64_t n = m.n > 0 ? m.n : w.rows, K = w.cols;
  const int64_t n_out = m.silu_pairs ? n / 2 : n;  // columns of y
  if (m.r0 < 0 || m.step < 1 || m.r0 + (n - 1) * m.step >= w.rows)
    LMF_FAIL("cuda matmul_prefill: rows ", m.r0, " + ", n, " x step ", m.step, " outside a weight of ", w.rows);
  if (m.silu_pairs && (n % 2 != 0 || m.bias || m.residual))
    LMF_FAIL("cuda matmul_prefill: silu_pairs needs an even row count, no bias and no residual");
  const bool q8 = int8_dot(w.type);
  // The outer route rounds quantized weights' activations to int8 blocks, as the decode GEMV
  // does, unless the GEMVs take 16-bit codes (cuda_act16): then fp16 of x, no block codes.
  const bool x8 = q8 && !gemv_act16();
  route = usable_route(m, n, route);
  // The SiLU -> down handoff (X16Tag): valid for this call only if the previous call left it.
  const X16Tag have = sc.x16 ? *sc.x16 : X16Tag{};
  if (sc.x16) *sc.x16 = X16Tag{};
  if (route == PrefillRoute::Gemv) {
    for (int64_t t = 0; t < m.T; ++t) {
      GemvArgs a;
      a.w = &w;
      a.in = m.x + t * K;
      a.y = m.y + t * n_out;
      a.bias = m.bias;
      a.y_residual = m.residual ? m.residual + t * n_out : nullptr;
      gemv(Prologue::None, m.silu_pairs ? Epilogue::SiluMul : m.residual ? Epilogue::Residual : Epilogue::Store, a, s);
    }
    return;
  }
  if (route == PrefillRoute::InKernel) {
    const int nblk = int(K / 32), nblk4 = mmq_nblk4(K);
    if (size_t(m.T) * size_t(nblk4) * 32 > sc.xq_bytes || size_t(m.T) * size_t(nblk4) > sc.xd_elems)
      LMF_FAIL("cuda matmul_prefill: in-kernel activation scratch too small for ", m.T, "x", K);
    mmq_quantize(m.x, m.T, K, sc.xq, sc.xd, w.type == DType::Q4_1 ? sc.xs : nullptr, s);
    MmqArgs a;
    a.type = w.type;
    a.q = w.q;
    a.scales = w.scales;
    a.nblk = nblk;
    a.r0 = m.r0;
    a.step = m.step;
    a.n = n;
    a.xq = sc.xq;
    a.xd = sc.xd;
    a.xs = w.type == DType::Q4_1 ? sc.xs : nullptr;
    a.T = int(m.T);
    a.nblk4 = nblk4;
    a.y = m.y;
    a.ldy = n_out;
    a.bias = m.bias;
    a.residual = m.residual;
    a.silu_pairs = m.silu_pairs;
    mmq_gemm(a, s);
    return;
  }
  // Outer route. Quantized weights: one fp16 rounding per factor (parts 1); float weights: the
  // activations split hi|lo (parts 2) so they enter exactly, as the decode GEMV reads them.
  const int parts = q8 ? 1 : 2;
  const int64_t Kp = parts * K;
  if (size_t(m.T * Kp) > sc.x_elems) LMF_FAIL("cuda matmul_prefill: activation scratch too small for ", m.T, "x", Kp);
  float* y = m.y;
  if (m.silu_pairs) {
    if (size_t(m.T * n) > sc.pairs_elems) LMF_FAIL("cuda matmul_prefill: gate/up scratch too small for ", m.T, "x", n);
    y = sc.pairs;
  }
  // Residual: y = residual + product, the residual read as the GEMM's C (cuBLASLt, C may be y).
  if (!(x8 && have.src == m.x && have.T == m.T && have.cols == K))
    act_to_f16(m.x, sc.x, m.T, int(K), x8, parts, s);
  const int64_t chunk = std::min<int64_t>(n, int64_t(sc.w_elems / size_t(Kp)));
  if (chunk <= 0) LMF_FAIL("cuda matmul_prefill: weight scratch holds no row of ", Kp);
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t c = std::min(chunk, n - i0);
    dequant_rows_f16(w, m.r0 + i0 * m.step, m.step, c, sc.w, parts, s);
    if (m.residual)
      gemm_f16_c(g, sc.x, sc.w, m.residual + i0, y + i0, m.T, c, Kp, n);
    else
      gemm_f16(g, sc.x, sc.w, y + i0, m.T, c, Kp, n);
  }
  if (m.bias) add_bias_rows(y, m.bias, m.T, int(n), n, s);
  if (m.silu_pairs) {
    // After every chunk's GEMM (they read sc.x): the SiLU pass also leaves the down projection's
    // converted input in sc.x when the next product can use it (quantized weights: the int8-block
    // conversion act_to_f16 would do; n_out a whole number of blocks).
    if (x8 && sc.x16 && n_out % 32 == 0 && size_t(m.T * n_out) <= sc.x_elems) {
      silu_pairs_rows_q8f16(y, m.y, sc.x, m.T, n_out, s);
      *sc.x16 = X16Tag{m.y, m.T, n_out};
    } else {
      silu_pairs_rows(y, m.y, m.T, n_out, false, s);
    }
  }
}

}  // namespace lmf::cuda

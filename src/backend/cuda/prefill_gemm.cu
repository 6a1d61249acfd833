// The outer-dequant matrix product of prefill: weight rows unpacked to fp16 into the scratch,
// activations converted to fp16, cuBLAS GEMM (fp16 inputs, fp32 accumulate, fp32 output).
#include <cublas_v2.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/prefill.h"

namespace lmf::cuda {

struct GemmHandle {
  cublasHandle_t h = nullptr;
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
  return g;
}

void gemm_destroy(GemmHandle* g) {
  if (!g) return;
  cublasDestroy(g->h);
  delete g;
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

void matmul_prefill(GemmHandle* g, const PrefillMatmul& m, const PrefillScratch& sc, cudaStream_t s) {
  const DeviceWeight& w = *m.w;
  const int64_t n = m.n > 0 ? m.n : w.rows, K = w.cols;
  const bool q8 = w.type == DType::Q4_0 || w.type == DType::Q4_1 || w.type == DType::Q8_0;
  const int parts = q8 ? 3 : 2;  // split fp16 (prefill.h): quantized weights need a lo part too
  const int64_t Kp = parts * K;
  if (size_t(m.T * Kp) > sc.x_elems) LMF_FAIL("cuda matmul_prefill: activation scratch too small for ", m.T, "x", Kp);
  act_to_f16(m.x, sc.x, m.T, int(K), q8, parts, s);
  const int64_t chunk = std::min<int64_t>(n, int64_t(sc.w_elems / size_t(Kp)));
  if (chunk <= 0) LMF_FAIL("cuda matmul_prefill: weight scratch holds no row of ", Kp);
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t c = std::min(chunk, n - i0);
    dequant_rows_f16(w, m.r0 + i0 * m.step, m.step, c, sc.w, parts, s);
    gemm_f16(g, sc.x, sc.w, m.y + i0, m.T, c, Kp, n);
  }
  if (m.bias) add_bias_rows(m.y, m.bias, m.T, int(n), n, s);
}

}  // namespace lmf::cuda

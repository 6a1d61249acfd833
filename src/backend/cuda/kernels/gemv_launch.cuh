// Launch glue for gemv_kernel instances and the allow-list of (prologue, epilogue) pairs that
// are instantiated for every weight type. Each kernels_gemv_<type>.cu includes this and expands
// LMF_GEMV_ALLOW_LIST for its type, so instances compile in parallel, one file per type.
#pragma once
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv_grid.h"
#include "backend/cuda/kernels/gemv.cuh"

// The allow-list. Why these: Store (+Norm for the final logits, +AddNorm for fused layers),
// Residual for o_proj/down, SiluMul and QKV after the attention/ffn norms, with or without the
// residual add folded in; None+SiluMul / None+QKV keep those fusions measurable with the norm
// fusion off (LMFUSE_LN_FUSION=0).
#define LMF_GEMV_ALLOW_LIST(X) LMF_GEMV_ALLOW_LIST_PLAIN(X) LMF_GEMV_ALLOW_LIST_XQ(X)
// x quantized once by its producer (gate/up -> down): the integer-dot types only (gemv_supported;
// launch_gemv_instance instantiates nothing for F16/BF16).
#define LMF_GEMV_ALLOW_LIST_XQ(X) \
  X(Int8, Residual)               \
  X(None, SiluMulQ)               \
  X(Norm, SiluMulQ)               \
  X(AddNorm, SiluMulQ)
#define LMF_GEMV_ALLOW_LIST_PLAIN(X)  \
  X(None, Store)                \
  X(Norm, Store)                \
  X(AddNorm, Store)             \
  X(None, Residual)             \
  X(None, SiluMul)              \
  X(Norm, SiluMul)              \
  X(AddNorm, SiluMul)           \
  X(None, QKV)                  \
  X(Norm, QKV)                  \
  X(AddNorm, QKV)

namespace lmf::cuda::dev {

GemvGrid gemv_grid(const void* func, int threads, int rows, size_t smem, int rg_batches,
                   const GemvParams& p);  // kernels_gemv.cu
Tri gemv_split_k_mode();                                  // kernels_gemv.cu
Tri gemv_coresident_mode();                               // kernels_gemv.cu
constexpr size_t kGemvMaxSmem = 200 * 1024;               // the dynamic shared memory instances opt in to

// Each launcher returns the SMs its grid left free.
template <DType T, Prologue PRO, Epilogue EPI, int W, int SF = 0, int XB = 8>
int launch_gemv_width(const GemvParams& p, cudaStream_t s) {
  auto* k = &gemv_kernel<T, PRO, EPI, W, SF, XB>;
  const size_t smem = gemv_smem_bytes<T, XB>(p.cols);
  // First call per instance happens before any graph capture. Always opted in: the 48 KB default
  // limit counts the static shared memory too (a 12288-column F16 x is exactly 48 KB dynamic).
  static const bool attr_set = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kGemvMaxSmem)));
    return true;
  }();
  (void)attr_set;
  // Column batches of one row group (a batch is kSteps<T> groups of 32 blocks; gemv_grid).
  const int rg_batches = ((p.cols / 32 + 31) / 32 + kSteps<T> - 1) / kSteps<T>;
  constexpr int threads = kGemvThreads<T, W>;
  const GemvGrid grid = gemv_grid(reinterpret_cast<const void*>(k), threads, p.rows, smem, rg_batches, p);
  GemvParams q = p;
  // Split-K (set_gemv_split_k): Auto = the deep shapes only (more than two batches per row group).
  const Tri sk = gemv_split_k_mode();
  const bool split = sk == Tri::On || (sk == Tri::Auto && rg_batches > 2);
  const int wide3_blocks = W == kWideWarps && gemv_split3() ? grid.blocks : 0;
  q.ksplit = split ? gemv_ksplit<T>(p.rows, p.cols, device_sm_count(), wide3_blocks) : 1;
  q.ks_mul = gemv_ksplit_mul(q.ksplit);
  launch_pdl(k, dim3(grid.blocks), dim3(threads), smem, s, q);
  return grid.spare;
}

// The narrow block (the instance with only the stage form the shape runs).
template <DType T, Prologue PRO, Epilogue EPI, int XB = 8>
int launch_gemv_narrow(const GemvParams& p, cudaStream_t s) {
  if constexpr (PRO != Prologue::Int8) {
    if (gemv_compact_stage<T, PRO, kNarrowWarps>(p.cols)) return launch_gemv_width<T, PRO, EPI, kNarrowWarps, 1, XB>(p, s);
    if constexpr (XB == 8 && kKeptPair<T, PRO, EPI>)
      if (gemv_keep_x() && gemv_kept_stage<kNarrowWarps>(p.cols)) return launch_gemv_width<T, PRO, EPI, kNarrowWarps, 3>(p, s);
    return launch_gemv_width<T, PRO, EPI, kNarrowWarps, 2, XB>(p, s);
  } else {
    return launch_gemv_width<T, PRO, EPI, kNarrowWarps, 0, XB>(p, s);
  }
}

// wide: the 16-warp block for the integer-dot types (gemv_wide); F16/BF16 have one width.
// x16: 16-bit activation codes (integer-dot types, the plain pairs; set_gemv_act16).
template <DType T, Prologue PRO, Epilogue EPI>
int launch_gemv_instance(const GemvParams& p, bool wide, bool x16, cudaStream_t s) {
  if constexpr (kInt8x<T>) {
    if constexpr (PRO != Prologue::Int8 && EPI != Epilogue::SiluMulQ) {
      if (x16) {
        if (wide) return launch_gemv_width<T, PRO, EPI, kWideWarps, 0, 16>(p, s);
        return launch_gemv_narrow<T, PRO, EPI, 16>(p, s);
      }
    } else if (x16) {
      return -1;  // the producers' codes are 8-bit: gemv() refuses the pair first
    }
    if constexpr (kKeptPair<T, PRO, EPI>)
      if (wide && gemv_keep_x() && gemv_kept_stage<kWideWarps>(p.cols))
        return launch_gemv_width<T, PRO, EPI, kWideWarps, 3>(p, s);
    if (wide) return launch_gemv_width<T, PRO, EPI, kWideWarps>(p, s);
    return launch_gemv_narrow<T, PRO, EPI>(p, s);
  } else if constexpr (PRO != Prologue::Int8 && EPI != Epilogue::SiluMulQ) {
    return launch_gemv_narrow<T, PRO, EPI>(p, s);  // float weights: x is staged as floats
  }
  return -1;  // unreachable: gemv_supported refuses the pair first
}

}  // namespace lmf::cuda::dev

#define LMF_GEMV_CASE(PRO_, EPI_)                                                         \
  if (pro == Prologue::PRO_ && epi == Epilogue::EPI_) {                                  \
    return launch_gemv_instance<kType, Prologue::PRO_, Epilogue::EPI_>(p, wide, x16, s);       \
  }

// Defines int launch_gemv_<name>(Prologue, Epilogue, const GemvParams&, bool wide, bool x16,
// cudaStream_t): the SMs the grid left free, -1 for a pair outside the allow-list.
#define LMF_GEMV_TYPE_FILE(name, TYPE)                                                    \
  namespace lmf::cuda::dev {                                                              \
  int launch_gemv_##name(Prologue pro, Epilogue epi, const GemvParams& p, bool wide, bool x16, cudaStream_t s) { \
    constexpr DType kType = TYPE;                                                         \
    LMF_GEMV_ALLOW_LIST(LMF_GEMV_CASE)                                                    \
    return -1;                                                                            \
  }                                                                                       \
  }

// Per-ISA kernel table behind matmul() (internal to the CPU backend). Each kernel computes a
// contiguous range of rows of one weight for all T tokens; matmul() splits the work and adds
// the bias.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/repack.h"
#include "format/quant/types.h"

namespace lmf::cpu {

struct MatmulKernels {
  // Quantized weight rows: w points at row 0 of the range, `stride` bytes per row, nb blocks of
  // 32 per row. xq: [T, nb] activation blocks. y[t*ldy + r] for r < nrows.
  void (*quant)(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                const ActBlock* xq, int64_t T, float* y, int64_t ldy);
  // Float weight rows (F32/F16/BF16): x is [T, ldx] f32, cols inputs per row.
  void (*flt)(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t cols,
              const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy);
  // quantize_act_row, bit-identical, vectorized.
  void (*quant_act)(const float* x, int64_t n, ActBlock* out);
  // The same two for 16-bit activation blocks (ActBits::Int16).
  void (*quant16)(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                  const ActBlock16* xq, int64_t T, float* y, int64_t ldy);
  void (*quant_act16)(const float* x, int64_t n, ActBlock16* out);
  // Q4_0 / Q4_K repacked in 16-row panels (repack.h), T < kX16GemvMaxTokens: panels starts at
  // the range's first row (a multiple of 16); nb blocks of 32 per row as above. Null (scalar,
  // AVX2): matmul() rebuilds the rows from the panels and calls quant / quant16.
  void (*quant_x16)(DType type, const uint8_t* panels, int64_t nrows, int64_t nb, const ActBlock* xq, int64_t T,
                    float* y, int64_t ldy) = nullptr;
  void (*quant16_x16)(DType type, const uint8_t* panels, int64_t nrows, int64_t nb, const ActBlock16* xq,
                      int64_t T, float* y, int64_t ldy) = nullptr;
};

const MatmulKernels& matmul_kernels_scalar();
const MatmulKernels& matmul_kernels_avx2();    // defined in matmul_avx2.cpp
const MatmulKernels& matmul_kernels_avx512();  // defined in matmul_avx512.cpp

}  // namespace lmf::cpu

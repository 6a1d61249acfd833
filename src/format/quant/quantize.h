// Reference (de)quantization of rows, bit-exact with GGUF's definitions (the `gguf` PyPI
// package's quantize/dequantize and llama.cpp's reference rounding).
#pragma once
#include <cstdint>

#include "format/quant/types.h"

namespace lmf {

// n must be a multiple of the type's block size. dst holds row_bytes(t, n) bytes.
void quantize_row(DType t, const float* x, void* dst, int64_t n);
void dequantize_row(DType t, const void* src, float* y, int64_t n);

// Better rounding for the 4-bit types: per block, search the scale (and minimum for Q4_1) that
// minimizes the squared error. Same block layout; any reader dequantizes it unchanged.
void quantize_row_search(DType t, const float* x, void* dst, int64_t n);

}  // namespace lmf

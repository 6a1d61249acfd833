// Reference (de)quantization of rows, bit-exact with GGUF's definitions (the `gguf` PyPI
// package's quantize/dequantize and llama.cpp's reference rounding). Bit-exact both ways for
// F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0; for the K-quants (Q2_K..Q6_K) and IQ4_NL/IQ4_XS the
// dequantization is bit-exact and the quantization is lmfuse's own (kquants_quantize.cpp,
// iquants.cpp) -- gguf has no quantizer for them. Q8_K has no gguf reference at all.
#pragma once
#include <cstdint>

#include "format/quant/types.h"

namespace lmf {

// n must be a multiple of type_info(t).block (32, or 256 for the K-quants and IQ4_XS); otherwise
// lmf::Error. dst holds row_bytes(t, n) bytes. For the quantized types the inputs must be finite.
void quantize_row(DType t, const float* x, void* dst, int64_t n);
void dequantize_row(DType t, const void* src, float* y, int64_t n);

// Better rounding for the 4-bit types: per block, search the scale (and minimum for Q4_1) that
// minimizes the squared error. Same block layout; any reader dequantizes it unchanged.
void quantize_row_search(DType t, const float* x, void* dst, int64_t n);

}  // namespace lmf

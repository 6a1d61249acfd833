// Non-linear 4-bit types: codes index a fixed 16-entry table of int8 levels instead of standing
// for evenly spaced values. GGML's byte layouts exactly (ggml-common.h). Dequantization is
// bit-exact with the `gguf` PyPI package; quantization is our own (iquants.cpp).
#pragma once
#include <cstdint>

#include "format/quant/kquants.h"
#include "format/quant/types.h"

namespace lmf {

// The 16 levels, ascending (GGML's kvalues_iq4nl).
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_NL: block of 32. x = d * kIQ4Values[q]; nibble order as Q4_0 (qs[j]: element j low, j+16 high).
struct BlockIQ4_NL {
  uint16_t d;  // fp16 scale
  uint8_t qs[QK / 2];
};

// IQ4_XS: 8 sub-blocks of 32 in a 256-block. x = (d * (sc - 32)) * kIQ4Values[q], sc a 6-bit code.
//   j = e/32, l = e%32: q(e) = (qs[16*j + l%16] >> 4*(l/16)) & 15
//   sc(j) = ((scales_l[j/2] >> 4*(j%2)) & 15) | ((scales_h >> 2*j) & 3) << 4
struct BlockIQ4_XS {
  uint16_t d;               // fp16 super-block scale
  uint16_t scales_h;        // high 2 bits of the 8 scale codes
  uint8_t scales_l[QK_K / 64];  // low 4 bits, two per byte
  uint8_t qs[QK_K / 2];     // 4-bit table indices
};

static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// Signed scale (code - 32, in [-32, 31]) of sub-block j (0..7) of IQ4_XS.
inline int unpack_scale_iq4_xs(const BlockIQ4_XS& b, int j) {
  const int lo = (b.scales_l[j / 2] >> (4 * (j % 2))) & 15;
  const int hi = (b.scales_h >> (2 * j)) & 3;
  return (lo | (hi << 4)) - 32;
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb);  // nb blocks of 32
void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb);  // nb blocks of 256
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb);

}  // namespace lmf

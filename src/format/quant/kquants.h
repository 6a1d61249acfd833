// K-quants: 256-element super-blocks split into sub-blocks of 16 or 32 that each carry a small
// integer scale (and for Q2_K/Q4_K/Q5_K a minimum) coded against one or two fp16 super-block
// scales. The structs are GGML's byte layouts exactly (ggml-common.h, QK_K = 256); the element
// order of each is written next to it, with e = 0..255 the element index inside the block.
// Dequantization is bit-exact with the `gguf` PyPI package (gguf/quants.py); quantization is our
// own (see kquants_quantize.cpp) and any GGML reader decodes it.
#pragma once
#include <cstdint>

namespace lmf {

constexpr int QK_K = 256;        // elements per super-block
constexpr int K_SCALE_SIZE = 12;  // bytes of the packed 6-bit scales/mins of Q4_K and Q5_K

// Q2_K: 16 sub-blocks of 16. x = (d * sc) * q - (dmin * m), q in [0, 3], sc and m 4-bit codes.
//   q(e)      = (qs[32*(e/128) + e%32] >> 2*((e%128)/32)) & 3
//   sc, m     = scales[e/16] & 15, scales[e/16] >> 4
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];  // low nibble: scale code, high nibble: min code
  uint8_t qs[QK_K / 4];       // 2-bit codes, four per byte
  uint16_t d;                 // fp16 scale of the scale codes
  uint16_t dmin;              // fp16 scale of the min codes
};

// Q3_K: 16 sub-blocks of 16. x = (d * (sc - 32)) * q, q in [-4, 3], sc a 6-bit code.
//   q(e)      = ((qs[32*(e/128) + e%32] >> 2*((e%128)/32)) & 3) - (hmask[e%32] >> (e/32) & 1 ? 0 : 4)
//   sc(j)     = low 4 bits: j < 8 ? scales[j] & 15 : scales[j-8] >> 4
//               high 2 bits: (scales[8 + j%4] >> 2*(j/4)) & 3          (j = e/16)
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];  // bit 2 of each code, inverted (bit set: no -4 offset)
  uint8_t qs[QK_K / 4];     // low 2 bits of each code
  uint8_t scales[12];       // 16 6-bit scale codes, packed as above
  uint16_t d;               // fp16 super-block scale
};

// Q4_K: 8 sub-blocks of 32. x = (d * sc) * q - (dmin * m), q in [0, 15], sc and m 6-bit codes.
//   q(e)      = (qs[32*(e/64) + e%32] >> 4*((e%64)/32)) & 15
//   sc, m     = unpack_scale_min_k4(scales, e/32)
struct BlockQ4_K {
  uint16_t d;                      // fp16 scale of the scale codes
  uint16_t dmin;                   // fp16 scale of the min codes
  uint8_t scales[K_SCALE_SIZE];    // 8 scale and 8 min codes, 6 bits each
  uint8_t qs[QK_K / 2];            // 4-bit codes
};

// Q5_K: Q4_K plus a fifth bit. x = (d * sc) * q - (dmin * m), q in [0, 31].
//   q(e)      = Q4_K's nibble | ((qh[e%32] >> (e/32)) & 1) << 4
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];  // bit 4 of each code
  uint8_t qs[QK_K / 2];  // low 4 bits, as Q4_K
};

// Q6_K: 16 sub-blocks of 16. x = (d * scales[e/16]) * q, q in [-32, 31], scales signed 8-bit.
//   r = e%128, q(e) = (((ql[64*(e/128) + r%64] >> 4*(r/64)) & 15)
//                    | ((qh[32*(e/128) + r%32] >> 2*(r/32)) & 3) << 4) - 32
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];      // low 4 bits
  uint8_t qh[QK_K / 4];      // high 2 bits
  int8_t scales[QK_K / 16];  // per sub-block scale
  uint16_t d;                // fp16 super-block scale
};

// Q8_K (activations): x = d * qs[e]; bsums[j] = sum of qs[16j .. 16j+15]. d is f32, not fp16.
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};

static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);

// Scale and min codes of sub-block j (0..7) of Q4_K / Q5_K. Bytes 0-3 hold the low 6 bits of
// scales 0-3 (top 2 bits: high bits of scales 4-7), bytes 4-7 the same for the mins, bytes 8-11
// the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high nibble).
inline void unpack_scale_min_k4(const uint8_t* s, int j, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = uint8_t((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
void pack_scale_min_k4(const uint8_t (&sc)[8], const uint8_t (&m)[8], uint8_t* s);  // codes < 64

// Signed scale (code - 32, in [-32, 31]) of sub-block j (0..15) of Q3_K.
inline int unpack_scale_q3_k(const uint8_t* s, int j) {
  const int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}
void pack_scales_q3_k(const uint8_t (&codes)[16], uint8_t* s);  // codes = scale + 32, < 64

// nb blocks; y holds nb * 256 floats.
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb);

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);

}  // namespace lmf

// K-quant dequantization, bit-exact with the `gguf` PyPI package (gguf/quants.py): every value is
// the same float32 operations in the same order, e.g. Q4_K is (d * sc) * q - (dmin * m). FMA
// contraction would fuse those into one rounding, so it is disabled for this file. fp16 scales
// that are inf or NaN propagate exactly as numpy's float32 arithmetic does (inf * 0 = NaN).
#include "format/quant/kquants.h"

#include "format/quant/half.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

void pack_scale_min_k4(const uint8_t (&sc)[8], const uint8_t (&m)[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

void pack_scales_q3_k(const uint8_t (&codes)[16], uint8_t* s) {
  for (int j = 0; j < 12; ++j) s[j] = 0;
  for (int j = 0; j < 16; ++j) {
    s[j % 8] |= uint8_t((codes[j] & 15) << (j < 8 ? 0 : 4));
    s[8 + j % 4] |= uint8_t(((codes[j] >> 4) & 3) << (2 * (j / 4)));
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const BlockQ2_K& b = x[i];
    const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * float(b.scales[j] & 15);
      const float ml = dmin * float(b.scales[j] >> 4);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        y[e] = dl * float(q) - ml;
      }
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const BlockQ3_K& b = x[i];
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * float(unpack_scale_q3_k(b.scales, j));
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const int hi = (b.hmask[e % 32] >> (e / 32)) & 1;
        y[e] = dl * float(lo - (hi ? 0 : 4));
      }
    }
  }
}

namespace {
// Q4_K and Q5_K share the scales and the low nibbles; qh (Q5_K only) adds bit 4.
void dequantize_k4(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs,
                   const uint8_t* qh, float* y) {
  const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(scales, j, sc, m);
    const float dl = d * float(sc), ml = dmin * float(m);
    for (int e = 32 * j; e < 32 * j + 32; ++e) {
      int q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15;
      if (qh) q |= ((qh[e % 32] >> j) & 1) << 4;
      y[e] = dl * float(q) - ml;
    }
  }
}
}  // namespace

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) dequantize_k4(x[i].d, x[i].dmin, x[i].scales, x[i].qs, nullptr, y);
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) dequantize_k4(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, y);
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const BlockQ6_K& b = x[i];
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * float(b.scales[j]);
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int h = e / 128, r = e % 128;
        const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
        const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        y[e] = dl * float((lo | (hi << 4)) - 32);
      }
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K)
    for (int e = 0; e < QK_K; ++e) y[e] = x[i].d * float(x[i].qs[e]);
}

}  // namespace lmf

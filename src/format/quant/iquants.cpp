// IQ4_NL / IQ4_XS: dequantization bit-exact with the `gguf` PyPI package (d * float(level), and
// for IQ4_XS (d * float(sc - 32)) * float(level), in float32 without FMA contraction), and our own
// quantization: a least-squares scale search over the level table (fit.h), codes rounded to the
// nearest level of the decoded scale.
#include "format/quant/iquants.h"

#include <cstring>

#include "format/quant/fit.h"
#include "format/quant/half.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * float(kIQ4Values[x[i].qs[j] & 15]);
      y[j + QK / 2] = d * float(kIQ4Values[x[i].qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const BlockIQ4_XS& b = x[i];
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < QK_K / 32; ++j) {
      const float dl = d * float(unpack_scale_iq4_xs(b, j));
      for (int l = 0; l < 16; ++l) {
        y[32 * j + l] = dl * float(kIQ4Values[b.qs[16 * j + l] & 15]);
        y[32 * j + l + 16] = dl * float(kIQ4Values[b.qs[16 * j + l] >> 4]);
      }
    }
  }
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  const fit::Levels L = fit::Levels::table(kIQ4Values, 16);
  for (int64_t i = 0; i < nb; ++i, x += QK) {
    y[i].d = fit::scale_to_fp16(fit::fit_scale(x, QK, L));
    uint8_t q[QK];
    fit::eval_scale(x, QK, L, fp16_to_f32(y[i].d), q);
    for (int j = 0; j < QK / 2; ++j) y[i].qs[j] = uint8_t(q[j] | (q[j + QK / 2] << 4));
  }
}

void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
  const fit::Levels L = fit::Levels::table(kIQ4Values, 16);
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    fit::ScaledCodes c;
    fit::quantize_scaled(x, 32, L, -32, 31, c);
    BlockIQ4_XS& b = y[i];
    std::memset(&b, 0, sizeof b);
    b.d = c.d;
    for (int j = 0; j < QK_K / 32; ++j) {
      const int code = c.sc[j] + 32;  // [0, 63]
      b.scales_l[j / 2] |= uint8_t((code & 15) << (4 * (j % 2)));
      b.scales_h = uint16_t(b.scales_h | ((code >> 4) << (2 * j)));
      for (int l = 0; l < 16; ++l)
        b.qs[16 * j + l] = uint8_t(c.q[32 * j + l] | (c.q[32 * j + l + 16] << 4));
    }
  }
}

}  // namespace lmf

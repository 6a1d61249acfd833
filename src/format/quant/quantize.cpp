// Reference (de)quantization, bit-exact with the `gguf` PyPI package (gguf/quants.py), which
// mirrors llama.cpp's ggml-quants.c reference code. The K-quants and IQ4 types dispatch to
// kquants.cpp / iquants.cpp: their dequantization is bit-exact too, their quantization our own. Every step is the same float32 operation in
// the same order; FMA contraction would change roundings, so it is disabled for this file.
#include "format/quant/quantize.h"

#include <cmath>
#include <cstring>

#include "format/quant/half.h"
#include "format/quant/iquants.h"
#include "format/quant/kquants.h"
#include "util/status.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

namespace {

void check_n(const char* op, DType t, int64_t n) {
  const int64_t b = type_info(t).block;
  if (n < 0 || n % b != 0)
    LMF_FAIL(op, ": row length must be a multiple of ", b, " for ", dtype_name(t), ", got ", n);
}

// Nibble order: element j in the low nibble of qs[j], element j+16 in the high nibble.
void pack_nibbles(const uint8_t (&q)[QK], uint8_t* qs) {
  for (int j = 0; j < QK / 2; ++j) qs[j] = uint8_t(q[j] | (q[j + QK / 2] << 4));
}

void quantize_q4_0(const float* x, BlockQ4_0* out, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    // Signed value of the first element with the largest magnitude (numpy argmax order).
    float amax = std::fabs(x[0]), max = x[0];  // x[0], not 0: a block of -0.0 gives d = +0.0
    for (int j = 1; j < QK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = std::trunc(x[j] * id + 8.5f);
      q[j] = uint8_t(v >= 15.0f ? 15 : (v <= 0.0f ? 0 : int(v)));
    }
    out[b].d = f32_to_fp16(d);
    pack_nibbles(q, out[b].qs);
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* out, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < QK; ++j) {
      min = x[j] < min ? x[j] : min;
      max = x[j] > max ? x[j] : max;
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = std::trunc((x[j] - min) * id + 0.5f);
      q[j] = uint8_t(v >= 15.0f ? 15 : (v <= 0.0f ? 0 : int(v)));
    }
    out[b].d = f32_to_fp16(d);
    out[b].m = f32_to_fp16(min);
    pack_nibbles(q, out[b].qs);
  }
}

// Q5_0 / Q5_1: bits 0-3 as Q4's nibbles, bit 4 of element j in bit j of qh (little-endian).
void pack_q5(const uint8_t (&q)[QK], uint8_t* qh, uint8_t* qs) {
  uint32_t h = 0;
  for (int j = 0; j < QK; ++j) h |= uint32_t(q[j] >> 4) << j;
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
  for (int j = 0; j < QK / 2; ++j) qs[j] = uint8_t((q[j] & 15) | ((q[j + QK / 2] & 15) << 4));
}
int unpack_q5(const uint8_t* qh, const uint8_t* qs, int j) {
  const int lo = j < QK / 2 ? qs[j] & 15 : qs[j - QK / 2] >> 4;
  return lo | (((qh[j / 8] >> (j % 8)) & 1) << 4);
}

void quantize_q5_0(const float* x, BlockQ5_0* out, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    float amax = std::fabs(x[0]), max = x[0];  // as Q4_0: the first largest |x|, signed
    for (int j = 1; j < QK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = std::trunc(x[j] * id + 16.5f);
      q[j] = uint8_t(v >= 31.0f ? 31 : (v <= 0.0f ? 0 : int(v)));
    }
    out[b].d = f32_to_fp16(d);
    pack_q5(q, out[b].qh, out[b].qs);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* out, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    float min = x[0], max = x[0];
    for (int j = 1; j < QK; ++j) {
      min = x[j] < min ? x[j] : min;
      max = x[j] > max ? x[j] : max;
    }
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = std::trunc((x[j] - min) * id + 0.5f);
      q[j] = uint8_t(v >= 31.0f ? 31 : (v <= 0.0f ? 0 : int(v)));
    }
    out[b].d = f32_to_fp16(d);
    out[b].m = f32_to_fp16(min);
    pack_q5(q, out[b].qh, out[b].qs);
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* out, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; ++j) out[b].qs[j] = int8_t(std::round(x[j] * id));  // half away from 0
    out[b].d = f32_to_fp16(d);
  }
}

}  // namespace

void quantize_row(DType t, const float* x, void* dst, int64_t n) {
  check_n("quantize_row", t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, x, size_t(n) * 4);
      return;
    case DType::F16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_fp16(x[i]);
      return;
    }
    case DType::BF16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(x[i]);
      return;
    }
    case DType::Q4_0: return quantize_q4_0(x, static_cast<BlockQ4_0*>(dst), n / QK);
    case DType::Q4_1: return quantize_q4_1(x, static_cast<BlockQ4_1*>(dst), n / QK);
    case DType::Q8_0: return quantize_q8_0(x, static_cast<BlockQ8_0*>(dst), n / QK);
    case DType::Q5_0: return quantize_q5_0(x, static_cast<BlockQ5_0*>(dst), n / QK);
    case DType::Q5_1: return quantize_q5_1(x, static_cast<BlockQ5_1*>(dst), n / QK);
    case DType::IQ4_NL: return quantize_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), n / QK);
    case DType::Q2_K: return quantize_q2_k(x, static_cast<BlockQ2_K*>(dst), n / QK_K);
    case DType::Q3_K: return quantize_q3_k(x, static_cast<BlockQ3_K*>(dst), n / QK_K);
    case DType::Q4_K: return quantize_q4_k(x, static_cast<BlockQ4_K*>(dst), n / QK_K);
    case DType::Q5_K: return quantize_q5_k(x, static_cast<BlockQ5_K*>(dst), n / QK_K);
    case DType::Q6_K: return quantize_q6_k(x, static_cast<BlockQ6_K*>(dst), n / QK_K);
    case DType::Q8_K: return quantize_q8_k(x, static_cast<BlockQ8_K*>(dst), n / QK_K);
    case DType::IQ4_XS: return quantize_iq4_xs(x, static_cast<BlockIQ4_XS*>(dst), n / QK_K);
  }
  LMF_FAIL("quantize_row: unsupported type ", uint32_t(t));
}

void dequantize_row(DType t, const void* src, float* y, int64_t n) {
  check_n("dequantize_row", t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(y, src, size_t(n) * 4);
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK / 2; ++j) {
          y[j] = d * float(int(b[i].qs[j] & 15) - 8);
          y[j + QK / 2] = d * float(int(b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK / 2; ++j) {
          y[j] = d * float(b[i].qs[j] & 15) + m;
          y[j + QK / 2] = d * float(b[i].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK; ++j) y[j] = d * float(b[i].qs[j]);
      }
      return;
    }
    case DType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(src);
      for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK; ++j) y[j] = d * float(unpack_q5(b[i].qh, b[i].qs, j) - 16);
      }
      return;
    }
    case DType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(src);
      for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK; ++j) y[j] = d * float(unpack_q5(b[i].qh, b[i].qs, j)) + m;
      }
      return;
    }
    case DType::IQ4_NL: return dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), y, n / QK);
    case DType::Q2_K: return dequantize_q2_k(static_cast<const BlockQ2_K*>(src), y, n / QK_K);
    case DType::Q3_K: return dequantize_q3_k(static_cast<const BlockQ3_K*>(src), y, n / QK_K);
    case DType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), y, n / QK_K);
    case DType::Q5_K: return dequantize_q5_k(static_cast<const BlockQ5_K*>(src), y, n / QK_K);
    case DType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), y, n / QK_K);
    case DType::Q8_K: return dequantize_q8_k(static_cast<const BlockQ8_K*>(src), y, n / QK_K);
    case DType::IQ4_XS: return dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), y, n / QK_K);
  }
  LMF_FAIL("dequantize_row: unsupported type ", uint32_t(t));
}

}  // namespace lmf

// Reference (de)quantization, bit-exact with the `gguf` PyPI package (gguf/quants.py), which
// mirrors llama.cpp's ggml-quants.c reference code. Every step is the same float32 operation in
// the same order; FMA contraction would change roundings, so it is disabled for this file.
#include "format/quant/quantize.h"

#include <cmath>
#include <cstring>

#include "format/quant/half.h"
#include "util/status.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

namespace {

void check_n(DType t, int64_t n) {
  const int64_t b = type_info(t).block;
  if (n < 0 || n % b != 0)
    LMF_FAIL("quantize: row length must be a multiple of ", b, " for ", dtype_name(t), ", got ", n);
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
  check_n(t, n);
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
  }
  LMF_FAIL("quantize_row: unsupported type ", uint32_t(t));
}

void dequantize_row(DType t, const void* src, float* y, int64_t n) {
  check_n(t, n);
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
  }
  LMF_FAIL("dequantize_row: unsupported type ", uint32_t(t));
}

}  // namespace lmf

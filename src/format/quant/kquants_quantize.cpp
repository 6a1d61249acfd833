// K-quant quantization, written from the format definitions (kquants.h). Per super-block:
//  1. each sub-block gets its own float scale (and minimum) by a small least-squares search
//     (fit.h);
//  2. the super-block scale is the largest sub-block scale over the largest code (for the
//     signed types the largest-magnitude sub-scale maps onto the most negative code, which has
//     one more step), rounded to fp16; the minimums likewise;
//  3. each sub-block's code is its scale over the decoded super-block scale, rounded, then the
//     neighbouring codes (+-1, and +-1 on the min code) are tried and the one whose decoded
//     scales give the least squared error wins; the weights are rounded against those decoded
//     scales, so the error measured here is the error a reader sees.
// Q8_K (activations) is plain symmetric rounding against amax / 127.
#include <cmath>
#include <cstring>

#include "format/quant/fit.h"
#include "format/quant/half.h"
#include "format/quant/kquants.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

namespace {

// x ~ (D * sc) * q - (M * m): sub sub-blocks of `sub` values, q in [0, nmax], sc in [0, scmax],
// m in [0, mmax]. Writes the fp16 super scales, the codes per sub-block and the 256 weight codes.
struct AffineCodes {
  uint16_t d = 0, dmin = 0;
  uint8_t sc[16] = {}, m[16] = {};
  uint8_t q[QK_K] = {};
};

void quantize_affine(const float* x, int sub, int nmax, int scmax, int mmax, AffineCodes& out) {
  const int nsub = QK_K / sub;
  float s[16], a[16], smax = 0.0f, amax = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    fit::fit_affine(x + j * sub, sub, nmax, s[j], a[j]);
    smax = std::fmax(smax, s[j]);
    amax = std::fmax(amax, a[j]);
  }
  out.d = fit::scale_to_fp16(smax / float(scmax));
  out.dmin = fit::scale_to_fp16(amax / float(mmax));
  const float D = fp16_to_f32(out.d), M = fp16_to_f32(out.dmin);
  uint8_t q[32];
  for (int j = 0; j < nsub; ++j) {
    const float* xj = x + j * sub;
    const int c0 = D > 0.0f ? fit::round_clamp(s[j] / D, 0, scmax) : 0;
    const int m0 = M > 0.0f ? fit::round_clamp(a[j] / M, 0, mmax) : 0;
    double best = INFINITY;
    for (int c = c0 - 1; c <= c0 + 1; ++c) {
      if (c < 0 || c > scmax) continue;
      for (int mm = m0 - 1; mm <= m0 + 1; ++mm) {
        if (mm < 0 || mm > mmax) continue;
        const float dl = D * float(c), ml = M * float(mm);
        const double e = fit::eval_affine(xj, sub, nmax, dl, ml, q);
        if (e < best) {
          best = e;
          out.sc[j] = uint8_t(c);
          out.m[j] = uint8_t(mm);
          std::memcpy(out.q + j * sub, q, size_t(sub));
        }
      }
    }
  }
}

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    AffineCodes c;
    quantize_affine(x, 16, 3, 15, 15, c);
    BlockQ2_K& b = y[i];
    std::memset(&b, 0, sizeof b);
    b.d = c.d;
    b.dmin = c.dmin;
    for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(c.sc[j] | (c.m[j] << 4));
    for (int e = 0; e < QK_K; ++e) b.qs[32 * (e / 128) + e % 32] |= uint8_t(c.q[e] << (2 * ((e % 128) / 32)));
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  const fit::Levels L = fit::Levels::uniform(-4, 3);
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    fit::ScaledCodes c;
    fit::quantize_scaled(x, 16, L, -32, 31, c);
    BlockQ3_K& b = y[i];
    std::memset(&b, 0, sizeof b);
    b.d = c.d;
    uint8_t codes[16];
    for (int j = 0; j < 16; ++j) codes[j] = uint8_t(c.sc[j] + 32);
    pack_scales_q3_k(codes, b.scales);
    for (int e = 0; e < QK_K; ++e) {
      const int u = c.q[e];  // q + 4, in [0, 7]
      b.qs[32 * (e / 128) + e % 32] |= uint8_t((u & 3) << (2 * ((e % 128) / 32)));
      b.hmask[e % 32] |= uint8_t((u >> 2) << (e / 32));  // set: no -4 offset
    }
  }
}

namespace {
template <class Block>
void quantize_k4(const float* x, Block& b, uint8_t* qh, int nmax) {
  AffineCodes c;
  quantize_affine(x, 32, nmax, 63, 63, c);
  b.d = c.d;
  b.dmin = c.dmin;
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) sc[j] = c.sc[j], m[j] = c.m[j];
  pack_scale_min_k4(sc, m, b.scales);
  for (int e = 0; e < QK_K; ++e) {
    b.qs[32 * (e / 64) + e % 32] |= uint8_t((c.q[e] & 15) << (4 * ((e % 64) / 32)));
    if (qh) qh[e % 32] |= uint8_t((c.q[e] >> 4) << (e / 32));
  }
}
}  // namespace

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    std::memset(&y[i], 0, sizeof y[i]);
    quantize_k4(x, y[i], nullptr, 15);
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    std::memset(&y[i], 0, sizeof y[i]);
    quantize_k4(x, y[i], y[i].qh, 31);
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  const fit::Levels L = fit::Levels::uniform(-32, 31);
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    fit::ScaledCodes c;
    fit::quantize_scaled(x, 16, L, -128, 127, c);
    BlockQ6_K& b = y[i];
    std::memset(&b, 0, sizeof b);
    b.d = c.d;
    for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(c.sc[j]);
    for (int e = 0; e < QK_K; ++e) {
      const int u = c.q[e], h = e / 128, r = e % 128;  // u = q + 32, in [0, 63]
      b.ql[64 * h + r % 64] |= uint8_t((u & 15) << (4 * (r / 64)));
      b.qh[32 * h + r % 32] |= uint8_t((u >> 4) << (2 * (r / 32)));
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float amax = 0.0f;
    for (int e = 0; e < QK_K; ++e) amax = std::fmax(amax, std::fabs(x[e]));
    BlockQ8_K& b = y[i];
    b.d = amax / 127.0f;
    const float id = b.d != 0.0f ? 1.0f / b.d : 0.0f;
    for (int e = 0; e < QK_K; ++e) {
      const float v = std::round(x[e] * id);  // half away from zero
      b.qs[e] = int8_t(!(v >= -127.0f) ? -127 : (v > 127.0f ? 127 : int(v)));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) sum += b.qs[e];
      b.bsums[j] = int16_t(sum);
    }
  }
}

}  // namespace lmf

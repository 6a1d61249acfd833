// Error-minimizing 4-bit quantization. The reference rounding fixes the scale from the extreme
// value; here, per block, a grid of candidate scales (and minimums for Q4_1) is tried, each
// refined by least squares given its assignments, and the block with the smallest squared error
// after fp16 rounding of the scale wins. The reference block is one of the candidates, so the
// result is never worse than quantize_row on any block.
#include <cmath>
#include <cstring>

#include "format/quant/half.h"
#include "format/quant/quantize.h"
#include "util/status.h"

// Errors are measured with the dequantizer's exact float operations (no FMA contraction).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf {

namespace {

struct Cand {
  float d = 0, m = 0;  // fp16-representable
  uint8_t q[QK];
  double err = INFINITY;
};

// Q4_0: x ~ d * (q - 8). Assign q for a (fp16-rounded) d and measure the error exactly as the
// dequantizer computes it.
void eval_q4_0(const float* x, float d_try, Cand& c) {
  const float d = fp16_to_f32(f32_to_fp16(d_try));
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  double err = 0;
  uint8_t q[QK];
  for (int j = 0; j < QK; ++j) {
    const float v = std::nearbyint(x[j] * id);
    const int k = v < -8.0f ? -8 : (v > 7.0f ? 7 : int(v));
    q[j] = uint8_t(k + 8);
    const double e = double(d * float(k)) - double(x[j]);
    err += e * e;
  }
  if (err < c.err) {
    c.err = err;
    c.d = d;
    std::memcpy(c.q, q, QK);
  }
}

void eval_q4_1(const float* x, float d_try, float m_try, Cand& c) {
  const float d = fp16_to_f32(f32_to_fp16(d_try));
  const float m = fp16_to_f32(f32_to_fp16(m_try));
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  double err = 0;
  uint8_t q[QK];
  for (int j = 0; j < QK; ++j) {
    const float v = std::nearbyint((x[j] - m) * id);
    const int k = v < 0.0f ? 0 : (v > 15.0f ? 15 : int(v));
    q[j] = uint8_t(k);
    const double e = double(d * float(k) + m) - double(x[j]);
    err += e * e;
  }
  if (err < c.err) {
    c.err = err;
    c.d = d;
    c.m = m;
    std::memcpy(c.q, q, QK);
  }
}

double block_err(DType t, const void* blk, const float* x) {
  float y[QK];
  dequantize_row(t, blk, y, QK);
  double err = 0;
  for (int j = 0; j < QK; ++j) err += (double(y[j]) - x[j]) * (double(y[j]) - x[j]);
  return err;
}

void search_q4_0(const float* x, BlockQ4_0* out) {
  quantize_row(DType::Q4_0, x, out, QK);  // the reference is the candidate to beat
  Cand best;
  best.err = block_err(DType::Q4_0, out, x);
  float amax = 0, max = 0;
  for (int j = 0; j < QK; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  if (amax == 0.0f) return;
  // The extreme value maps to -8 (reference) or +7 (other sign); scan divisors around both.
  for (int side = 0; side < 2; ++side) {
    // (A finer grid, 0.05 over [-1, +2], finds nothing better on Gaussian data.)
    for (int s = -12; s <= 12; ++s) {
      const float div = (side == 0 ? -8.0f : 7.0f) + 0.1f * float(s) * (side == 0 ? -1.0f : 1.0f);
      float d = max / div;
      // Least-squares refinement: d = sum(x*k) / sum(k*k) for this candidate's assignment.
      for (int it = 0; it < 2; ++it) {
        const float id = 1.0f / d;
        double sxk = 0, skk = 0;
        for (int j = 0; j < QK; ++j) {
          const float v = std::nearbyint(x[j] * id);
          const int k = v < -8.0f ? -8 : (v > 7.0f ? 7 : int(v));
          sxk += double(x[j]) * k;
          skk += double(k) * k;
        }
        eval_q4_0(x, d, best);
        if (skk == 0) break;
        d = float(sxk / skk);
        if (d == 0.0f) break;
      }
      eval_q4_0(x, d, best);
    }
  }
  if (best.err < block_err(DType::Q4_0, out, x)) {  // a candidate beat the reference
    out->d = f32_to_fp16(best.d);
    for (int j = 0; j < QK / 2; ++j) out->qs[j] = uint8_t(best.q[j] | (best.q[j + QK / 2] << 4));
  }
}

void search_q4_1(const float* x, BlockQ4_1* out) {
  quantize_row(DType::Q4_1, x, out, QK);
  Cand best;
  best.err = block_err(DType::Q4_1, out, x);
  float min = x[0], max = x[0];
  for (int j = 1; j < QK; ++j) min = std::fmin(min, x[j]), max = std::fmax(max, x[j]);
  if (max == min) return;
  const float range = max - min;
  // Candidates: shrink the range from either end, then alternate least-squares fits of (d, m).
  for (int lo = 0; lo <= 6; ++lo) {
    for (int hi = 0; hi <= 6; ++hi) {
      float m = min + range * 0.02f * float(lo);
      float d = (max - range * 0.02f * float(hi) - m) / 15.0f;
      for (int it = 0; it < 3; ++it) {
        eval_q4_1(x, d, m, best);
        const float id = 1.0f / d;
        double sk = 0, skk = 0, sx = 0, sxk = 0;
        for (int j = 0; j < QK; ++j) {
          const float v = std::nearbyint((x[j] - m) * id);
          const int k = v < 0.0f ? 0 : (v > 15.0f ? 15 : int(v));
          sk += k, skk += double(k) * k, sx += x[j], sxk += double(x[j]) * k;
        }
        const double det = QK * skk - sk * sk;
        if (det <= 0) break;
        const double dn = (QK * sxk - sk * sx) / det;
        const double mn = (sx - dn * sk) / QK;
        if (!(dn > 0)) break;
        d = float(dn), m = float(mn);
      }
      eval_q4_1(x, d, m, best);
    }
  }
  if (best.err < block_err(DType::Q4_1, out, x)) {
    out->d = f32_to_fp16(best.d);
    out->m = f32_to_fp16(best.m);
    for (int j = 0; j < QK / 2; ++j) out->qs[j] = uint8_t(best.q[j] | (best.q[j + QK / 2] << 4));
  }
}

}  // namespace

void quantize_row_search(DType t, const float* x, void* dst, int64_t n) {
  if (t != DType::Q4_0 && t != DType::Q4_1) return quantize_row(t, x, dst, n);
  if (n < 0 || n % QK != 0)
    LMF_FAIL("quantize_row_search: row length must be a multiple of ", QK, ", got ", n);
  for (int64_t b = 0; b < n / QK; ++b) {
    if (t == DType::Q4_0)
      search_q4_0(x + b * QK, static_cast<BlockQ4_0*>(dst) + b);
    else
      search_q4_1(x + b * QK, static_cast<BlockQ4_1*>(dst) + b);
  }
}

}  // namespace lmf

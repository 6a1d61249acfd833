// Least-squares scale fitting for one sub-block (see fit.h). Errors are measured in double from
// values reconstructed with the dequantizers' float operations (no FMA contraction here either).
#include "format/quant/fit.h"

#include <cmath>
#include <cstring>
#include <initializer_list>

#include "format/quant/half.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace lmf::fit {

namespace {
constexpr int kMaxN = 256;
// Scale factors tried below each end of the level range: 1 maps the largest |x| exactly onto the
// end level, smaller ones clip it for finer steps in the bulk.
constexpr float kShrink[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f};
}  // namespace

Levels Levels::uniform(int lo, int hi) {
  Levels L;
  L.uniform_ = true;
  L.lo_ = lo;
  L.n_ = hi - lo + 1;
  for (int c = 0; c < L.n_; ++c) L.v_[c] = float(lo + c);
  return L;
}

// Levels at least one apart (the IQ4 table: 9 or more), so a unit interval [k, k+1) holds at
// most one midpoint and the code of t is at_int_[floor(t)] or the next one.
Levels Levels::table(const int8_t* v, int n) {
  Levels L;
  L.n_ = n;
  for (int c = 0; c < n; ++c) L.v_[c] = float(v[c]);
  for (int c = 0; c + 1 < n; ++c) L.mid_[c] = 0.5f * (L.v_[c] + L.v_[c + 1]);
  for (int k = 0; k < 256; ++k) {
    int c = 0;  // the number of midpoints below k - 128
    while (c + 1 < n && L.mid_[c] < float(k - 128)) ++c;
    L.at_int_[k] = uint8_t(c);
  }
  return L;
}


// These two loops are the quantizers' inner loops: written branch-free over local arrays so the
// compiler vectorizes them, with the squared errors summed in float over eight lanes (n is a
// multiple of 8). The error only ranks candidates, so float sums are enough.
namespace {
double sum8(const float* e2, int n) {
  float acc[8] = {};
  for (int i = 0; i < n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += e2[i + k];
  double s = 0;
  for (float a : acc) s += a;
  return s;
}
}  // namespace

double eval_scale(const float* x, int n, const Levels& L, float dl, uint8_t* codes) {
  const float id = dl != 0.0f ? 1.0f / dl : 0.0f;
  float e2[kMaxN];
  uint8_t c8[kMaxN];
  if (L.uniform()) {
    const float lo = float(L.lo()), hi = float(L.lo() + L.size() - 1);
    for (int i = 0; i < n; ++i) {
      float t = x[i] * id;
      t = t > lo ? t : lo;  // NaN -> lo
      t = t < hi ? t : hi;
      const int c = int(t - lo + 0.5f);
      c8[i] = uint8_t(c);
      const float e = dl * float(c + L.lo()) - x[i];
      e2[i] = e * e;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const int c = L.nearest_in_table(x[i] * id);
      c8[i] = uint8_t(c);
      const float e = dl * L.level(c) - x[i];
      e2[i] = e * e;
    }
  }
  if (codes) std::memcpy(codes, c8, size_t(n));
  return sum8(e2, n);
}

double eval_affine(const float* x, int n, int nmax, float dl, float ml, uint8_t* codes) {
  const float id = dl > 0.0f ? 1.0f / dl : 0.0f, top = float(nmax);
  float e2[kMaxN];
  uint8_t q8[kMaxN];
  for (int i = 0; i < n; ++i) {
    float t = (x[i] + ml) * id;
    t = t > 0.0f ? t : 0.0f;  // NaN -> 0
    t = t < top ? t : top;
    const int q = int(t + 0.5f);
    q8[i] = uint8_t(q);
    const float e = dl * float(q) - ml - x[i];
    e2[i] = e * e;
  }
  if (codes) std::memcpy(codes, q8, size_t(n));
  return sum8(e2, n);
}

float fit_scale(const float* x, int n, const Levels& L) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), m = x[i];
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;
  float best_s = 0.0f;
  double best = eval_scale(x, n, L, 0.0f, nullptr);
  uint8_t c[kMaxN];
  auto consider = [&](float s) {
    const double e = eval_scale(x, n, L, s, c);
    if (e < best) best = e, best_s = s;
    return e;
  };
  for (const float end : {L.level(0), L.level(L.size() - 1)}) {
    if (end == 0.0f) continue;
    for (const float f : kShrink) {
      consider(m / end * f);
      // Least squares given the codes just assigned: s = sum(x l) / sum(l l).
      double sxl = 0, sll = 0;
      for (int i = 0; i < n; ++i) {
        const double l = L.level(c[i]);
        sxl += double(x[i]) * l;
        sll += l * l;
      }
      if (sll > 0) consider(float(sxl / sll));
    }
  }
  return best_s;
}

void fit_affine(const float* x, int n, int nmax, float& s_out, float& a_out) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
  }
  const float range = hi - lo;
  s_out = 0.0f;
  a_out = -lo;
  if (!(range > 0.0f) || !std::isfinite(range)) return;
  double best = INFINITY;
  uint8_t q[kMaxN];
  auto consider = [&](float s, float a) {
    const double e = eval_affine(x, n, nmax, s, a, q);
    if (e < best) best = e, s_out = s, a_out = a;
  };
  // One step wider than range / nmax too (the range over nmax - 1 codes): data already on a
  // grid of half as many levels, e.g. Q4_1 or Q4_0 values re-quantized to Q5_K (16 levels in a
  // 32-value block), is then reproduced exactly (q = 2 q4), which shrinking never reaches.
  const float kWider = float(nmax) / float(nmax - 1);
  for (const float f : {kWider, 1.0f, 0.95f, 0.9f, 0.85f, 0.8f}) {
    for (int side = 0; side < 2; ++side) {
      if (side == 1 && f >= 1.0f) continue;  // f >= 1: keep the minimum, no clipping
      // Shrink the range from the top (keep the minimum) or from the bottom (keep the maximum).
      const float s = range * f / float(nmax);
      const float a = side == 0 ? -lo : std::fmax(0.0f, -(lo + range * (1.0f - f)));
      consider(s, a);
      // Least squares for (s, a) given the codes: minimize sum (s q - a - x)^2.
      double sq = 0, sqq = 0, sx = 0, sqx = 0;
      for (int i = 0; i < n; ++i) {
        sq += q[i];
        sqq += double(q[i]) * q[i];
        sx += x[i];
        sqx += double(q[i]) * x[i];
      }
      const double det = n * sqq - sq * sq;
      if (det <= 0) continue;
      double ls = (n * sqx - sq * sx) / det;
      double la = (ls * sq - sx) / n;
      if (la < 0) la = 0, ls = sqx / sqq;  // the minimum may not go above zero
      if (ls > 0) consider(float(ls), float(la));
    }
  }
}

uint16_t scale_to_fp16(float s) {
  constexpr float kMaxHalf = 65504.0f;
  return f32_to_fp16(std::fabs(s) > kMaxHalf ? std::copysign(kMaxHalf, s) : s);
}

void quantize_scaled(const float* x, int sub, const Levels& L, int sclo, int schi, ScaledCodes& out) {
  const int nsub = 256 / sub;
  float s[16], sbig = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    s[j] = fit_scale(x + j * sub, sub, L);
    if (std::fabs(s[j]) > std::fabs(sbig)) sbig = s[j];
  }
  out.d = scale_to_fp16(sbig / float(sclo));
  const float D = fp16_to_f32(out.d);
  uint8_t q[32];
  for (int j = 0; j < nsub; ++j) {
    const float* xj = x + j * sub;
    const int c0 = D != 0.0f ? round_clamp(s[j] / D, sclo, schi) : 0;
    double best = INFINITY;
    for (int c = c0 - 1; c <= c0 + 1; ++c) {
      if (c < sclo || c > schi) continue;
      const double e = eval_scale(xj, sub, L, D * float(c), q);
      if (e < best) {
        best = e;
        out.sc[j] = c;
        std::memcpy(out.q + j * sub, q, size_t(sub));
      }
    }
  }
}

}  // namespace lmf::fit

// Scale fitting shared by the K-quant and i-quant quantizers: for one sub-block, the float scale
// (and minimum) that makes its codes reproduce the data with the least squared error. The result
// is then coded against the super-block scale by the caller, which re-rounds the codes against
// the decoded scale. Inputs must be finite; anything else gives unspecified (but in-range) codes.
#pragma once
#include <cstdint>

namespace lmf::fit {

// Nearest integer to v clamped to [lo, hi] (ties up); NaN gives lo. Truncation of the
// non-negative v - lo + 0.5 instead of nearbyint: that is a library call on baseline x86-64.
inline int round_clamp(float v, int lo, int hi) {
  if (!(v >= float(lo))) return lo;
  if (v >= float(hi)) return hi;
  const int r = lo + int(v - float(lo) + 0.5f);
  return r > hi ? hi : r;
}

// The values a code can stand for, ascending: code c means level(c) * scale.
class Levels {
 public:
  static Levels uniform(int lo, int hi);             // codes 0..hi-lo stand for lo..hi
  static Levels table(const int8_t* v, int n);       // codes 0..n-1 stand for v[0..n-1] (ascending)
  int size() const { return n_; }
  bool uniform() const { return uniform_; }
  int lo() const { return lo_; }  // uniform levels: the level of code 0
  float level(int c) const { return v_[c]; }
  // The code whose level is nearest t (ties to the lower code for tables, up for uniform
  // levels); NaN gives code 0.
  int nearest(float t) const { return uniform_ ? round_clamp(t, lo_, lo_ + n_ - 1) - lo_ : nearest_in_table(t); }
  int nearest_in_table(float t) const {
    if (!(t > -128.0f)) return 0;  // NaN too
    if (t >= 127.0f) return n_ - 1;
    // Table levels are at least one apart, so [floor(t), floor(t) + 1) holds at most one
    // midpoint: the code is at_int_[floor(t)] or the next one.
    const int c = at_int_[int(t + 128.0f)];
    return c + (c + 1 < n_ && mid_[c] < t ? 1 : 0);
  }

 private:
  float v_[64] = {};
  float mid_[64] = {};     // mid_[c]: halfway between levels c and c+1
  uint8_t at_int_[256] = {};  // tables: the nearest code to the integer t = k - 128
  int n_ = 0;
  int lo_ = 0;
  bool uniform_ = false;
};

// Sub-block of n values ~ s * level(code): the signed s with the least squared error, searched
// from the two ends of the level range (the largest |x| mapped to the lowest or highest level,
// shrunk a little to trade clipping for resolution), each refined by least squares.
float fit_scale(const float* x, int n, const Levels& L);

// Sub-block of n values ~ s * q - a with q in [0, nmax], s >= 0 and a >= 0 (the minimum is never
// above zero, as Q2_K/Q4_K/Q5_K's unsigned min codes require).
void fit_affine(const float* x, int n, int nmax, float& s, float& a);

// Squared error of x against codes assigned with the decoded (float) scale dl, in the order the
// dequantizers compute: dl * level(c). n is a multiple of 8, at most 256; codes may be null.
double eval_scale(const float* x, int n, const Levels& L, float dl, uint8_t* codes);
// The same for x ~ dl * q - ml, q in [0, nmax].
double eval_affine(const float* x, int n, int nmax, float dl, float ml, uint8_t* codes);

// A scale as fp16, clamped to the largest finite half (a scale never becomes inf).
uint16_t scale_to_fp16(float s);

// One 256-element super-block as x ~ (D * sc) * level(q), sub-blocks of `sub` values (16 or 32)
// with signed scale codes sc in [sclo, schi] (sclo < 0 < schi): the sub-scales by fit_scale, D
// from the largest-magnitude one mapped onto sclo, each code re-chosen among its rounded value
// +-1 against the decoded D by exact error, the weights rounded against the decoded scales.
struct ScaledCodes {
  uint16_t d = 0;     // fp16 D
  int sc[16] = {};    // per sub-block
  uint8_t q[256] = {};  // level index per element
};
void quantize_scaled(const float* x, int sub, const Levels& L, int sclo, int schi, ScaledCodes& out);

}  // namespace lmf::fit

#include "model/rope_scaling.h"

#include <cmath>
#include <numbers>

namespace lmf {

std::vector<float> llama3_rope_factors(const Llama3Rope& r, double theta, int64_t head_dim) {
  const double low_wavelen = r.original_ctx / r.low_freq_factor, high_wavelen = r.original_ctx / r.high_freq_factor;
  std::vector<float> f(size_t(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double inv_freq = std::pow(theta, -double(2 * i) / double(head_dim));
    const double wavelen = 2 * std::numbers::pi / inv_freq;
    double d = 1.0;
    if (wavelen > low_wavelen) {
      d = r.factor;
    } else if (wavelen >= high_wavelen) {
      const double s = (r.original_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      d = 1.0 / ((1 - s) / r.factor + s);
    }
    f[size_t(i)] = float(d);
  }
  return f;
}

}  // namespace lmf

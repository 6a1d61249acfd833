#include "backend/cpu/act_quant.h"

#include <cmath>

namespace lmf::cpu {

void quantize_act_row(const float* x, int64_t n, ActBlock* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      // nearbyint rounds to nearest even in the default FP environment, like cvtps2dq.
      const int q = int(std::nearbyint(x[j] * id));
      out[b].qs[j] = int8_t(q);
      sum += q;
    }
    out[b].d = amax / 127.0f;
    out[b].s = out[b].d * float(sum);
  }
}

}  // namespace lmf::cpu

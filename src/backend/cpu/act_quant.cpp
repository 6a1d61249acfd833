#include "backend/cpu/act_quant.h"

#include <cmath>

namespace lmf::cpu {

namespace {

// The one definition behind both widths: kMax = 127 or 32767.
template <class Block, int kMax, class Q>
void quantize_blocks(const float* x, int64_t n, Block* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float id = amax > 0.0f ? float(kMax) / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      // nearbyint rounds to nearest even in the default FP environment, like cvtps2dq.
      const int q = int(std::nearbyint(x[j] * id));
      out[b].qs[j] = Q(q);
      sum += q;
    }
    out[b].d = amax / float(kMax);
    out[b].s = out[b].d * float(sum);
  }
}

}  // namespace

void quantize_act_row(const float* x, int64_t n, ActBlock* out) {
  quantize_blocks<ActBlock, 127, int8_t>(x, n, out);
}

void quantize_act16_row(const float* x, int64_t n, ActBlock16* out) {
  quantize_blocks<ActBlock16, 32767, int16_t>(x, n, out);
}

}  // namespace lmf::cpu

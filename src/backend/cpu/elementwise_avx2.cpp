// Element-wise ops with AVX2 + FMA.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/elementwise_kernels.h"
#include "backend/cpu/simd_math_avx2.h"

namespace lmf::cpu {

// y = silu(g) * u = g * sigmoid(g) * u, sigmoid from e^-|g| (never overflows).
void silu_mul_avx2(const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 e = exp_neg(_mm256_or_ps(x, sign));  // e^-|x|
    const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
    // x >= 0: sigmoid = 1/(1+e); x < 0: sigmoid = e/(1+e)
    const __m256 sig = _mm256_blendv_ps(inv, _mm256_mul_ps(e, inv), x);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(x, sig), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

}  // namespace lmf::cpu

// Vectorized element-wise kernels (elementwise_avx2.cpp); ops.cpp dispatches by ISA.
#pragma once
#include <cstdint>

namespace lmf::cpu {
void silu_mul_avx2(const float* g, const float* u, float* y, int64_t n);
}  // namespace lmf::cpu

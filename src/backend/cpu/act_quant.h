// 8-bit activation blocks for the integer dot products of the quantized matmul.
// One block per 32 inputs: x ~ d * qs, with s = d * sum(qs) kept so that a weight type with an
// offset (Q4_0's -8, Q4_1's minimum) costs one multiply-add per block instead of a second dot.
#pragma once
#include <cstdint>

#include "backend/cpu/cpu_features.h"

namespace lmf::cpu {

struct ActBlock {
  float d;         // scale: amax / 127
  float s;         // d * sum(qs)
  int8_t qs[32];   // round-to-nearest-even(x / d), in [-127, 127]
};
static_assert(sizeof(ActBlock) == 40);

// n is a multiple of 32; out holds n/32 blocks. Exact definition (every ISA path uses this one):
// amax = max|x|, id = amax > 0 ? 127/amax : 0, qs = rne(x * id), d = amax / 127.
void quantize_act_row(const float* x, int64_t n, ActBlock* out);
// The same through the vectorized kernel of `isa` (bit-identical; defined in matmul.cpp).
void quantize_act_row(const float* x, int64_t n, ActBlock* out, Isa isa);

}  // namespace lmf::cpu

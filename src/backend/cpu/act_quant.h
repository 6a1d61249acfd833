// Activation blocks for the integer dot products of the quantized matmul, 8-bit (ActBlock) and
// 16-bit (ActBlock16). One block per 32 inputs: x ~ d * qs, with s = d * sum(qs) kept so that
// Q4_1's minimum costs one multiply-add per block instead of a second dot (and, in the 8-bit
// kernels, Q4_0's -8 offset).
// The 8-bit blocks are the fast path; their rounding (up to amax/254 per element) is visible in
// the logits of small models with activation outliers (SmolLM2-135M: rel-L2 5.4e-2 vs
// transformers). The 16-bit blocks round to amax/65534, far below the 4-bit weights' own error.
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

struct ActBlock16 {
  float d;          // scale: amax / 32767
  float s;          // d * sum(qs) (|sum| <= 32 * 32767: exact in f32)
  int16_t qs[32];   // round-to-nearest-even(x * (32767 / amax)), in [-32767, 32767]
};
static_assert(sizeof(ActBlock16) == 72);

// Which activation blocks a quantized matmul uses (knob cpu_act16).
enum class ActBits { Int8 = 8, Int16 = 16 };

// n is a multiple of 32; out holds n/32 blocks. Exact definition (every ISA path uses this one):
// amax = max|x|, id = amax > 0 ? 127/amax : 0, qs = rne(x * id), d = amax / 127.
void quantize_act_row(const float* x, int64_t n, ActBlock* out);
// The same through the vectorized kernel of `isa` (bit-identical; defined in matmul.cpp).
void quantize_act_row(const float* x, int64_t n, ActBlock* out, Isa isa);

// 16-bit blocks, exact definition (every ISA path is bit-identical to it): amax = max|x| (f32),
// id = amax > 0 ? 32767/amax : 0 (f32 divide), qs = rne(f32(x * id)), d = amax / 32767,
// s = d * f32(sum(qs)). |x * id| <= 32767 * (1 + 2^-23) rounds to at most 32767.
void quantize_act16_row(const float* x, int64_t n, ActBlock16* out);
void quantize_act16_row(const float* x, int64_t n, ActBlock16* out, Isa isa);

}  // namespace lmf::cpu

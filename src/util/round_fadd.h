// Round to nearest integer (ties to even) by one float add, for |x| < 2^22: x + 1.5 * 2^23 lies
// in [2^23, 2^24), where the float spacing is 1, so the add itself rounds x (IEEE
// round-to-nearest-even, the default mode) and the result's bits are kRoundFaddBias + rn(x).
// The CUDA decode GEMV quantizes activations to int8 codes with it (one FADD instead of an F2I
// conversion at a quarter of the rate, docs/PERF.md session 9); a host test checks it against
// std::nearbyint. Same results as __float2int_rn / std::nearbyint for every finite x in range.
#pragma once
#include <cstdint>
#include <cstring>

#include "util/host_device.h"

namespace lmf {

constexpr uint32_t kRoundFaddBias = 0x4b400000u;  // the bits of 1.5 * 2^23 = 12582912.f

// kRoundFaddBias + rn(x) as an unsigned word (mod 2^32): its low byte is rn(x)'s two's-complement
// byte, and a sum of n such words minus n * kRoundFaddBias is the sum of the rn(x).
LMF_HOST_DEVICE inline uint32_t round_fadd_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(__fadd_rn(x, 12582912.f));
#else
  const float y = x + 12582912.f;
  uint32_t b;
  std::memcpy(&b, &y, sizeof b);
  return b;
#endif
}

LMF_HOST_DEVICE inline int round_fadd(float x) { return int(round_fadd_bits(x) - kRoundFaddBias); }

}  // namespace lmf

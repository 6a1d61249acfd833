// IEEE fp16 and bfloat16 <-> fp32, scalar and exact (round to nearest even; NaN preserved).
#pragma once
#include <cstdint>
#include <cstring>

namespace lmf {

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 64);  // quiet NaN
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

}  // namespace lmf

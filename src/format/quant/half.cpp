// IEEE binary16 <-> binary32 by bit manipulation, so the result does not depend on the build's
// ISA flags (F16C) or floating-point environment. Rounding is to nearest, ties to even.
#include "format/quant/half.h"

namespace lmf {

namespace {
float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
}  // namespace

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000 | (man << 13));  // inf / NaN (payload kept)
  if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));  // 112 = 127 - 15
  // Zero or subnormal: man * 2^-24 is exact in f32.
  const float mag = float(man) * bits_to_f32(0x33800000);  // 2^-24
  return bits_to_f32(sign | f32_to_bits(mag));
}

uint16_t f32_to_fp16(float f) {
  const uint32_t u = f32_to_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000) return uint16_t(sign | 0x7e00 | ((a >> 13) & 0x3ff));  // quiet NaN
  if (a >= 0x477ff000) return uint16_t(sign | 0x7c00);  // >= 65520 rounds to inf (and inf)
  if (a >= 0x38800000) {
    // Normal half: drop 13 mantissa bits with round-to-nearest-even; a carry into the
    // exponent is the correct result (it can reach 0x7c00 only above 65504, handled above).
    const uint32_t r = a + 0x0fff + ((a >> 13) & 1);
    return uint16_t(sign | ((r - 0x38000000) >> 13));  // rebias exponent 127 -> 15
  }
  if (a < 0x33000000) return sign;  // below half of the smallest subnormal (2^-25): zero
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  const uint32_t e = a >> 23;                      // biased exponent, 102..112
  const uint32_t m = (a & 0x7fffff) | 0x800000;    // 24-bit significand
  const uint32_t shift = 126 - e;                  // value = m * 2^(e-150) = (m >> (126-e)) * 2^-24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return uint16_t(sign | q);
}

}  // namespace lmf

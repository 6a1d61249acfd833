// Unpacking rows into the unit form (quant_units.h). The element orders are the ones written next
// to each block struct (format/quant/kquants.h, iquants.h, types.h).
#include "backend/cpu/quant_units.h"

#include <cstring>

#include "format/quant/half.h"
#include "format/quant/iquants.h"
#include "format/quant/kquants.h"
#include "util/status.h"

namespace lmf::cpu {

bool unit_form(DType t) {
  switch (t) {
    case DType::Q5_0: case DType::Q5_1:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K: case DType::IQ4_NL: case DType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

UnitMin unit_min(DType t) {
  if (t == DType::Q2_K) return UnitMin::Sub;
  return t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K ? UnitMin::Block : UnitMin::None;
}

bool unit_sub16(DType t) { return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q6_K; }

namespace {

// One block's outputs: q [block], s/m [block / 16], D/M [block / 32].
struct Out {
  int8_t* q;
  int16_t* s;
  int16_t* m;
  float* D;
  float* M;
};

// Q4_K and Q5_K: 8 sub-blocks of 32; qh: Q5_K's fifth bits or null.
void unpack_q45_k(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qs,
                  const uint8_t* qh, const Out& o) {
  const float d = fp16_to_f32(d16), dmin = fp16_to_f32(dmin16);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min_k4(scales, j, sc, m);
    o.D[j] = d * float(sc);
    o.M[j] = -(dmin * float(m));
  }
  for (int c = 0; c < 4; ++c) {  // 64 elements per 32 bytes: low nibbles, then high nibbles
    const uint8_t* b = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      int lo = b[l] & 15, hi = b[l] >> 4;
      if (qh) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      o.q[64 * c + l] = int8_t(lo);
      o.q[64 * c + 32 + l] = int8_t(hi);
    }
  }
}

// Sets s = 1, m = 0 for units [0, n), and M = 0 for blocks [0, n / 2).
void plain_units(const Out& o, int n, bool zero_m) {
  for (int u = 0; u < n; ++u) {
    o.s[u] = 1;
    o.m[u] = 0;
  }
  if (zero_m)
    for (int b = 0; b < n / 2; ++b) o.M[b] = 0.0f;
}

void unpack_block(DType t, const uint8_t* p, const Out& o) {
  switch (t) {
    case DType::Q5_0: case DType::Q5_1: {
      const bool min = t == DType::Q5_1;
      const uint16_t d16 = min ? reinterpret_cast<const BlockQ5_1*>(p)->d : reinterpret_cast<const BlockQ5_0*>(p)->d;
      const uint8_t* qh = min ? reinterpret_cast<const BlockQ5_1*>(p)->qh : reinterpret_cast<const BlockQ5_0*>(p)->qh;
      const uint8_t* qs = min ? reinterpret_cast<const BlockQ5_1*>(p)->qs : reinterpret_cast<const BlockQ5_0*>(p)->qs;
      uint32_t h;
      std::memcpy(&h, qh, 4);
      const int off = min ? 0 : 16;
      for (int j = 0; j < 16; ++j) {
        o.q[j] = int8_t(((qs[j] & 15) | ((h >> j) & 1) << 4) - off);
        o.q[j + 16] = int8_t(((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4) - off);
      }
      plain_units(o, 2, false);
      o.D[0] = fp16_to_f32(d16);
      o.M[0] = min ? fp16_to_f32(reinterpret_cast<const BlockQ5_1*>(p)->m) : 0.0f;
      return;
    }
    case DType::IQ4_NL: {
      const auto& b = *reinterpret_cast<const BlockIQ4_NL*>(p);
      for (int j = 0; j < 16; ++j) {
        o.q[j] = kIQ4Values[b.qs[j] & 15];
        o.q[j + 16] = kIQ4Values[b.qs[j] >> 4];
      }
      plain_units(o, 2, true);
      o.D[0] = fp16_to_f32(b.d);
      return;
    }
    case DType::IQ4_XS: {
      const auto& b = *reinterpret_cast<const BlockIQ4_XS*>(p);
      const float d = fp16_to_f32(b.d);
      plain_units(o, 16, true);
      for (int j = 0; j < 8; ++j) {
        o.D[j] = d * float(unpack_scale_iq4_xs(b, j));
        for (int l = 0; l < 16; ++l) {
          o.q[32 * j + l] = kIQ4Values[b.qs[16 * j + l] & 15];
          o.q[32 * j + 16 + l] = kIQ4Values[b.qs[16 * j + l] >> 4];
        }
      }
      return;
    }
    case DType::Q4_K: {
      const auto& b = *reinterpret_cast<const BlockQ4_K*>(p);
      plain_units(o, 16, false);
      return unpack_q45_k(b.d, b.dmin, b.scales, b.qs, nullptr, o);
    }
    case DType::Q5_K: {
      const auto& b = *reinterpret_cast<const BlockQ5_K*>(p);
      plain_units(o, 16, false);
      return unpack_q45_k(b.d, b.dmin, b.scales, b.qs, b.qh, o);
    }
    case DType::Q6_K: {
      const auto& b = *reinterpret_cast<const BlockQ6_K*>(p);
      const float d = fp16_to_f32(b.d);
      for (int j = 0; j < 8; ++j) {
        o.D[j] = d;
        o.M[j] = 0.0f;
      }
      for (int u = 0; u < 16; ++u) {
        o.s[u] = b.scales[u];
        o.m[u] = 0;
      }
      for (int e = 0; e < QK_K; ++e) {
        const int r = e % 128;
        const int lo = (b.ql[64 * (e / 128) + r % 64] >> (4 * (r / 64))) & 15;
        const int hi = (b.qh[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
        o.q[e] = int8_t((lo | hi << 4) - 32);
      }
      return;
    }
    case DType::Q3_K: {
      const auto& b = *reinterpret_cast<const BlockQ3_K*>(p);
      const float d = fp16_to_f32(b.d);
      for (int j = 0; j < 8; ++j) {
        o.D[j] = d;
        o.M[j] = 0.0f;
      }
      for (int u = 0; u < 16; ++u) {
        o.s[u] = int16_t(unpack_scale_q3_k(b.scales, u));
        o.m[u] = 0;
      }
      for (int e = 0; e < QK_K; ++e) {
        const int v = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        o.q[e] = int8_t(v - (((b.hmask[e % 32] >> (e / 32)) & 1) ? 0 : 4));
      }
      return;
    }
    case DType::Q2_K: {
      const auto& b = *reinterpret_cast<const BlockQ2_K*>(p);
      const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
      for (int j = 0; j < 8; ++j) {
        o.D[j] = d;
        o.M[j] = -dmin;
      }
      for (int u = 0; u < 16; ++u) {
        o.s[u] = int16_t(b.scales[u] & 15);
        o.m[u] = int16_t(b.scales[u] >> 4);
      }
      for (int e = 0; e < QK_K; ++e)
        o.q[e] = int8_t((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
      return;
    }
    case DType::Q8_K: {
      const auto& b = *reinterpret_cast<const BlockQ8_K*>(p);
      std::memcpy(o.q, b.qs, QK_K);
      plain_units(o, 16, true);
      for (int j = 0; j < 8; ++j) o.D[j] = b.d;
      return;
    }
    default:
      LMF_FAIL("unpack_units: type ", dtype_name(t), " has no unit form");
  }
}

}  // namespace

void unpack_units(DType t, const uint8_t* row, int64_t cols, const UnitRow& out) {
  const TypeInfo& ti = type_info(t);
  if (!unit_form(t) || cols % ti.block != 0)
    LMF_FAIL("unpack_units: ", cols, " elements of ", ti.name);
  const int64_t units = ti.block / kUnit, blocks = ti.block / 32;
  for (int64_t b = 0; b < cols / ti.block; ++b)
    unpack_block(t, row + size_t(b) * ti.block_bytes,
                 {out.q + b * ti.block, out.s + b * units, out.m + b * units, out.D + b * blocks, out.M + b * blocks});
}

}  // namespace lmf::cpu

#include "format/quant/transcode.h"

#include <cstring>

#include "format/quant/iquants.h"
#include "format/quant/kquants.h"
#include "util/status.h"

namespace lmf {
namespace {

// Q3_K's 16 signed scales (sc - 32) and its codes q in [-4, 3], element order.
void q3k_unpack(const BlockQ3_K& b, int8_t sc[16], int8_t q[QK_K]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? b.scales[j] & 15 : b.scales[j - 8] >> 4;
    const int hi = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = int8_t((lo | hi << 4) - 32);
  }
  for (int e = 0; e < QK_K; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    q[e] = int8_t(low - ((b.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
  }
}

// A Q6_K block of scales s and codes q in [-32, 31] with scale d (the layout of kquants.h).
void q6k_pack(uint16_t d, const int8_t s[16], const int8_t q[QK_K], BlockQ6_K& o) {
  std::memset(&o, 0, sizeof o);
  for (int e = 0; e < QK_K; ++e) {
    const int c = q[e] + 32, r = e % 128;
    o.ql[64 * (e / 128) + r % 64] |= uint8_t((c & 15) << (4 * (r / 64)));
    o.qh[32 * (e / 128) + r % 32] |= uint8_t((c >> 4) << (2 * (r / 32)));
  }
  std::memcpy(o.scales, s, 16);
  o.d = d;
}

}  // namespace

DType quant_transcode_target(DType t) {
  switch (t) {
    case DType::Q3_K: return DType::Q6_K;
    case DType::IQ4_NL:
    case DType::Q5_0: return DType::Q8_0;
    default: return t;
  }
}

void quant_transcode_row(DType from, const void* src, int64_t cols, void* dst) {
  switch (from) {
    case DType::Q3_K: {
      LMF_CHECK(cols % QK_K == 0);
      const auto* in = static_cast<const BlockQ3_K*>(src);
      auto* out = static_cast<BlockQ6_K*>(dst);
      int8_t sc[16], q[QK_K];
      for (int64_t b = 0; b < cols / QK_K; ++b) {
        q3k_unpack(in[b], sc, q);
        q6k_pack(in[b].d, sc, q, out[b]);
      }
      return;
    }
    case DType::IQ4_NL: {
      LMF_CHECK(cols % QK == 0);
      const auto* in = static_cast<const BlockIQ4_NL*>(src);
      auto* out = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < cols / QK; ++b) {
        out[b].d = in[b].d;
        for (int j = 0; j < QK / 2; ++j) {
          out[b].qs[j] = kIQ4Values[in[b].qs[j] & 15];
          out[b].qs[j + QK / 2] = kIQ4Values[in[b].qs[j] >> 4];
        }
      }
      return;
    }
    case DType::Q5_0: {
      LMF_CHECK(cols % QK == 0);
      const auto* in = static_cast<const BlockQ5_0*>(src);
      auto* out = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < cols / QK; ++b) {
        uint32_t qh;
        std::memcpy(&qh, in[b].qh, 4);
        out[b].d = in[b].d;
        for (int j = 0; j < QK / 2; ++j) {
          const int lo = (in[b].qs[j] & 15) | int((qh >> j) & 1) << 4;
          const int hi = (in[b].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
          out[b].qs[j] = int8_t(lo - 16);
          out[b].qs[j + QK / 2] = int8_t(hi - 16);
        }
      }
      return;
    }
    default:
      LMF_FAIL("quant transcode: no exact re-encoding of ", dtype_name(from));
  }
}

}  // namespace lmf

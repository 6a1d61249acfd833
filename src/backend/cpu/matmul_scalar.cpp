// Portable matmul kernels (no vector intrinsics): the fallback when the CPU lacks AVX2, and the
// simplest statement of what the vector kernels compute. Each weight row is unpacked once into a
// small buffer and then dotted with every token.
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant_units.h"
#include "format/quant/half.h"
#include "format/quant/quantize.h"

namespace lmf::cpu {

namespace {

// Unpacks one quantized row into integer weights and per-block scale / minimum.
// Q4_0: q - 8 (so the dot needs no offset); Q4_1: q in [0, 15]; Q8_0: q.
void unpack_row(DType type, const uint8_t* w, int64_t nb, int8_t* wq, float* dw, float* mw) {
  for (int64_t b = 0; b < nb; ++b, wq += QK) {
    if (type == DType::Q8_0) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(w)[b];
      dw[b] = fp16_to_f32(blk.d);
      for (int j = 0; j < QK; ++j) wq[j] = blk.qs[j];
    } else {
      const uint8_t* qs;
      int off = 0;
      if (type == DType::Q4_0) {
        const auto& blk = reinterpret_cast<const BlockQ4_0*>(w)[b];
        dw[b] = fp16_to_f32(blk.d);
        qs = blk.qs;
        off = 8;
      } else {
        const auto& blk = reinterpret_cast<const BlockQ4_1*>(w)[b];
        dw[b] = fp16_to_f32(blk.d);
        mw[b] = fp16_to_f32(blk.m);
        qs = blk.qs;
      }
      for (int j = 0; j < QK / 2; ++j) {
        wq[j] = int8_t((qs[j] & 15) - off);
        wq[j + QK / 2] = int8_t((qs[j] >> 4) - off);
      }
    }
  }
}

// The unit-form types (quant_units.h): its canonical chains, written out.
template <class AB>
void units_scalar(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                  const AB* xq, int64_t T, float* y, int64_t ldy) {
  const int64_t cols = nb * QK, nu = cols / kUnit;
  const UnitMin mk = unit_min(type);
  const bool unit_chain = std::is_same_v<AB, ActBlock16> && unit_sub16(type);
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int16_t> sv, mv;
  thread_local std::vector<float> D, M;
  q.resize(size_t(cols));
  sv.resize(size_t(nu));
  mv.resize(size_t(nu));
  D.resize(size_t(nb));
  M.resize(size_t(nb));
  for (int64_t r = 0; r < nrows; ++r) {
    unpack_units(type, w + size_t(r) * stride, cols, {q.data(), sv.data(), mv.data(), D.data(), M.data()});
    for (int64_t t = 0; t < T; ++t) {
      float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // partial sums, step j -> p[j % 8]
      for (int64_t b = 0; b < nb; ++b) {
        const AB& a = xq[t * nb + b];
        int32_t dot[2] = {0, 0}, asum[2] = {0, 0};
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < kUnit; ++i) {
            dot[h] += int32_t(q[size_t(b * QK + h * kUnit + i)]) * int32_t(a.qs[h * kUnit + i]);
            asum[h] += a.qs[h * kUnit + i];
          }
        const int16_t *s = sv.data() + 2 * b, *m = mv.data() + 2 * b;
        if (unit_chain) {
          for (int h = 0; h < 2; ++h) {
            float& acc = p[b % 8];
            acc = std::fma(D[size_t(b)] * float(s[h]) * a.d, float(dot[h]), acc);
            if (mk == UnitMin::Sub) acc = std::fma(M[size_t(b)] * float(m[h]) * a.d, float(asum[h]), acc);
          }
          continue;
        }
        float& acc = p[b % 8];
        acc = std::fma(D[size_t(b)] * a.d, float(s[0] * dot[0] + s[1] * dot[1]), acc);
        if (mk == UnitMin::Block) acc = std::fma(M[size_t(b)], a.s, acc);
        if (mk == UnitMin::Sub) acc = std::fma(M[size_t(b)] * a.d, float(m[0] * asum[0] + m[1] * asum[1]), acc);
      }
      y[t * ldy + r] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    }
  }
}

// AB: ActBlock (8-bit) or ActBlock16. The 16-bit kernel is the exact definition every vector
// path reproduces bit for bit (matmul_x86.inc): per block in order,
//   acc = fma(d_w * d_a, float(isum), acc);  Q4_1: acc = fma(m_w, s_a, acc)
// with isum the exact int32 dot (no overflow: |q_w| <= 128, |q_a| <= 32767, so
// |isum| <= 32 * 128 * 32767 < 2^27). The 8-bit kernel keeps its historical unfused form.
template <class AB>
void quant_scalar(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t nb,
                  const AB* xq, int64_t T, float* y, int64_t ldy) {
  constexpr bool k16 = std::is_same_v<AB, ActBlock16>;
  if (unit_form(type)) return units_scalar(type, w, stride, nrows, nb, xq, T, y, ldy);
  thread_local std::vector<int8_t> wq;
  thread_local std::vector<float> dw, mw;
  wq.resize(size_t(nb * QK));
  dw.resize(size_t(nb));
  mw.assign(size_t(nb), 0.0f);
  for (int64_t r = 0; r < nrows; ++r) {
    unpack_row(type, w + size_t(r) * stride, nb, wq.data(), dw.data(), mw.data());
    for (int64_t t = 0; t < T; ++t) {
      const AB* a = xq + t * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* q = wq.data() + b * QK;
        int dot = 0;
        for (int j = 0; j < QK; ++j) dot += int(q[j]) * int(a[b].qs[j]);
        // Q4_1: sum((d*q + m) * da*qa) = d*da*dot + m*s.
        if constexpr (k16) {
          acc = std::fma(dw[size_t(b)] * a[b].d, float(dot), acc);
          if (type == DType::Q4_1) acc = std::fma(mw[size_t(b)], a[b].s, acc);
        } else {
          acc += dw[size_t(b)] * a[b].d * float(dot) + mw[size_t(b)] * a[b].s;
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

void flt_scalar(DType type, const uint8_t* w, size_t stride, int64_t nrows, int64_t cols,
                const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy) {
  thread_local std::vector<float> wf;
  wf.resize(size_t(cols));
  for (int64_t r = 0; r < nrows; ++r) {
    dequantize_row(type, w + size_t(r) * stride, wf.data(), cols);
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * ldx;
      float acc[4] = {0, 0, 0, 0};  // four partial sums: fewer roundings on long rows
      int64_t i = 0;
      for (; i + 4 <= cols; i += 4)
        for (int k = 0; k < 4; ++k) acc[k] += wf[size_t(i + k)] * xt[i + k];
      for (; i < cols; ++i) acc[0] += wf[size_t(i)] * xt[i];
      y[t * ldy + r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  }
}

}  // namespace

const MatmulKernels& matmul_kernels_scalar() {
  static const MatmulKernels k{quant_scalar<ActBlock>, flt_scalar, quantize_act_row,
                               quant_scalar<ActBlock16>, quantize_act16_row};
  return k;
}

}  // namespace lmf::cpu

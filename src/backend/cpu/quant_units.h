// The "unit form" of the weight types that have no kernel of their own on the CPU: Q5_0, Q5_1,
// the K-quants (Q2_K..Q6_K, Q8_K) and the non-linear IQ4_NL / IQ4_XS. A row unpacks into
//   q_e   signed 8-bit codes (|q| <= 128), one per element
//   s_u   integer sub-scales per unit of 16 elements (Q2_K, Q3_K, Q6_K; 1 for the others)
//   m_u   integer sub-minimums per unit (Q2_K only)
//   D_b, M_b  f32 scale and minimum per block of 32 (products of an fp16 scale and a small
//             integer code: exact in f32)
// so that x_e = D_b * s_u * q_e + M_b * m_u (Q2_K), x_e = D_b * s_u * q_e (Q3_K, Q6_K) or
// x_e = D_b * q_e + M_b (the others). The canonical chains every path (scalar, AVX2, AVX-512;
// decode and prefill) computes for one row and one token: blocks b are spread over 8 partial
// sums, p[b % 8], each an fma chain in block order, and the result is
// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) (the x86 kernels' lane = block). With
// a = the activation block b:
//
//   Block chain (8-bit activations; 16-bit activations for types with s_u == 1):
//     isum_b = sum_u s_u * sum_{e in u} q_e * a.qs_e            (exact int32)
//     p = fma(D_b * a.d, float(isum_b), p)
//     Q5_1, Q4_K, Q5_K:  p = fma(M_b, a.s, p)
//     Q2_K:              p = fma(M_b * a.d, float(msum_b), p),  msum_b = sum_u m_u * sum_{e in u} a.qs_e
//   Unit chain (16-bit activations for Q2_K, Q3_K, Q6_K, whose s_u * isum could overflow int32),
//   units u = 2b, 2b + 1 of the block in order, each:
//     p = fma((D_b * s_u) * a.d, float(isum_u), p)
//     Q2_K:              p = fma((M_b * m_u) * a.d, float(asum_u), p)
//
// Bounds (8-bit): |isum_b| <= 2 * 128 * 16 * 32 * 127 < 2^24 (Q6_K, the largest). 16-bit, block
// chain: |isum_b| <= 32 * 128 * 32767 < 2^27.
#pragma once
#include <cstdint>

#include "format/quant/types.h"

namespace lmf::cpu {

constexpr int kUnit = 16;  // elements per unit

bool unit_form(DType t);  // routed through the unit kernels
enum class UnitMin { None, Block, Sub };
UnitMin unit_min(DType t);
bool unit_sub16(DType t);  // s_u (and m_u) vary inside a block: Q2_K, Q3_K, Q6_K

// Destination of one unpacked row of `cols` elements (a multiple of the type's block).
struct UnitRow {
  int8_t* q;   // [cols]
  int16_t* s;  // [cols / 16]
  int16_t* m;  // [cols / 16] (zeros unless Q2_K)
  float* D;    // [cols / 32]
  float* M;    // [cols / 32] (zeros for UnitMin::None)
};
// The portable definition; the x86 kernels have vector versions that must write the same bytes.
void unpack_units(DType t, const uint8_t* row, int64_t cols, const UnitRow& out);

}  // namespace lmf::cpu

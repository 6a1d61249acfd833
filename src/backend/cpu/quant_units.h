// The "unit form" of the weight types that have no kernel of their own on the CPU: Q5_0, Q5_1,
// the K-quants (Q2_K..Q6_K, Q8_K) and the non-linear IQ4_NL / IQ4_XS. Every 16 consecutive
// elements of a row (a unit: the smallest scale granularity of any of them) decode to
//   x_e = D_u * q_e + M_u        q_e a signed 8-bit integer (|q| <= 128), D_u and M_u f32
// exactly (D_u and M_u are products of an fp16 scale and a small integer code, exact in f32), so
// one integer dot per unit against the 8- or 16-bit activation blocks serves all of them. The
// canonical chain every path (scalar, AVX2, AVX-512; decode and prefill) computes, for one row
// and one token, units u in order with a = the activation block of u (u / 2):
//   acc = fma(D_u * a.d, float(isum_u), acc)          isum_u = sum of q_e * a.qs_e over the unit
//   if unit_min(type): acc = fma(M_u * a.d, float(asum_u), acc)   asum_u = sum of a.qs_e
// isum_u is exact in int32 (16 * 128 * 32767 < 2^27) and float(isum_u) rounds identically on
// every path.
#pragma once
#include <cstdint>

#include "format/quant/types.h"

namespace lmf::cpu {

constexpr int kUnit = 16;  // elements per unit

bool unit_form(DType t);  // routed through the unit kernels
bool unit_min(DType t);   // M_u may be nonzero (Q5_1, Q2_K, Q4_K, Q5_K)

// One row of `cols` elements (a multiple of the type's block) into q [cols], D [cols / 16] and
// M [cols / 16] (zeros when !unit_min).
void unpack_units(DType t, const uint8_t* row, int64_t cols, int8_t* q, float* D, float* M);

}  // namespace lmf::cpu
